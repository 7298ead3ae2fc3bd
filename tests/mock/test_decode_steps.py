"""ttdecode's FlashDecode (`backend="device"`) as a decode loop on a mock N150 through the real
ttnn.generic_op: 20 steps at Llama-3.1-8B head shapes (32 q / 8 KV heads, D 128; B 4, S 2048; K/V
bfloat8_b in DRAM, contiguous or paged (block 64, a shuffled device page table), Q bfloat16, positions
in a device int32 cur_pos_tensor advanced on the device) run
without an exception, validate in full only on the first call (later calls check tensor metadata
only), move no data between host and device in steps 3..20 (ttdecode.testing.transfers: ttnn's
transfer functions and Tensor.cpu / Tensor.to wrapped and counted) and add no program-cache entry
after step 2. The mock computes nothing (no numerics checked here). perf/bench_device_overhead.py
times the same calls."""

from __future__ import annotations

import pytest

STEPS = r"""
import torch
import ttnn
import ttdecode
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.drivers import decode_inputs
from ttdecode.testing.transfers import count_calls, count_transfers

import ttdecode.api as api
validations = count_calls(api, "validate_decode")  # kept: the block ends when it is collected
validated = validations.__enter__()  # counted for the child's lifetime

d = open_mock_device()
B, S = 4, 2048
# paged: B x 32 blocks of 64 positions in a shuffled pool
x = decode_inputs(ttnn, d, [0, 5, 100, -1], heads=32, kv_heads=8, head_dim=128, paged=PAGED, seq_len=S,
                  blocks=B * 32, block_size=64)
q, k, v, table, pos = x.q, x.k, x.v, x.table, x.pos
one = ttnn.from_torch(torch.ones(B, dtype=torch.int32), dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
entries = {}
shapes = []
with count_transfers() as log:
    for step in range(1, 21):
        if step == 3:
            log.clear()
        if PAGED:
            out = ttdecode.paged_scaled_dot_product_attention_decode(
                q, k, v, page_table_tensor=table, cur_pos_tensor=pos, backend="device")
        else:
            out = ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos_tensor=pos, backend="device")
        shapes.append(list(out.shape))
        ttnn.deallocate(out)
        new_pos = ttnn.add(pos, one)  # the positions advance on the device
        ttnn.deallocate(pos)
        pos = new_pos
        if step in (2, 20):
            entries[step] = int(d.num_program_cache_entries())
    moves = list(log.moves)
emit({"moves": moves, "entries": entries, "shapes": shapes, "validated": validated.calls})
ttnn.close_device(d)
"""


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_twenty_decode_steps_on_a_mock_n150_move_nothing_and_add_no_program(run_mock, paged: bool) -> None:
    r = run_mock(f"PAGED = {paged}\n" + STEPS, timeout=300)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["moves"] == [], f"host<->device moves in steps 3..20: {res['moves']}"
    assert res["entries"]["2"] == res["entries"]["20"], f"program-cache entries after step 2 / 20: {res['entries']}"
    assert res["shapes"] == [[1, 4, 32, 128]] * 20
    # the first call validates and plans; the cached calls check tensor metadata only
    assert res["validated"] == 1, f"validate_decode ran {res['validated']} times in 20 steps"
