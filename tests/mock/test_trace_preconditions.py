"""The preconditions of capturing ttdecode's FlashDecode in a trace, witnessed by ttnn's own graph
capture (`ttdecode.testing.step_graph`) on a mock N150: after two warm-up calls, a cached call issues
only program-cache hits, moves no data between host and device, and allocates exactly one device buffer,
the output (bfloat16 tiles: 2048 B a 32x32 tile, its padded shape). Trace capture itself crashes on the
mock; a Wormhole user's traced loop is in the README."""

from __future__ import annotations

import pytest

STEP = r"""
import torch
import ttnn
import ttdecode
from ttdecode.testing.dry_run import emit
from ttdecode.testing.drivers import decode_inputs
from ttdecode.testing.step_graph import capture_step
from ttdecode.testing.mock import open_mock_device

d = open_mock_device()
x = decode_inputs(ttnn, d, [0, 70, 1000, -1], heads=32, kv_heads=8, head_dim=128, paged=PAGED, seq_len=1024,
                  blocks=64, block_size=64)
q, k, v, table, pos = x.q, x.k, x.v, x.table, x.pos
if PAGED:
    def attend():
        return ttdecode.paged_scaled_dot_product_attention_decode(
            q, k, v, page_table_tensor=table, cur_pos_tensor=pos, backend="device")
else:
    def attend():
        return ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos_tensor=pos, backend="device")

for _ in range(2):
    ttnn.deallocate(attend())
step = capture_step(attend)
out = step.result
res = step.to_json()
res["padded_shape"] = list(out.padded_shape)
res["dtype"] = str(out.dtype)
emit(res)
ttnn.close_device(d)
"""


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_a_cached_decode_call_is_trace_ready_as_ttnn_records_it(run_mock, paged: bool) -> None:
    r = run_mock(f"PAGED = {paged}\n" + STEP, timeout=300)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["moves"] == [], f"host<->device moves in a cached call: {res['moves']}"
    assert res["device_ops"] and all(hit for _, hit in res["device_ops"]), res["device_ops"]
    assert res["dtype"] == "DataType.BFLOAT16"
    t, b, nh, dv = res["padded_shape"]
    out_bytes = t * b * (nh // 32) * (dv // 32) * 2048          # bfloat16 tiles, 2048 B each
    assert [tuple(a) for a in res["allocations"]] == [("DRAM", out_bytes)], res["allocations"]
    assert res["deallocations"] == [], res["deallocations"]
