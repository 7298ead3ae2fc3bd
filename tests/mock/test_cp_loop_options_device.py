"""The context-parallel decode loop's options on a mock N300 (1 x 2 mesh, FABRIC_1D): each run in its
own process builds ``ContextParallelDecode`` with options and drives 4 steps directly (no model):

* ``window-sink-tokens``: T = 4 tokens per user, sliding window 64 (= 2 devices x 32), attention sink,
  bfloat8_b cache; the steps' tokens cross the block boundary at 32 (both devices write);
* ``mla-sink-tokens``: MLA (one latent head, D 96, Dv 64: no V cache, no fused append), T = 2, sink.

Checked: every op accepted by ttnn (the per-token slices and launches of the append, the reshapes of
q and the output, the sink's concats before the combine), the exact op counts of a step, one host ->
device write and one device -> host read per step, no program-cache entry after step 2, our kernels
compiled by tt-metal's JIT, and the rows that went to the devices: every live query row's new K/V on
the one device the interleaved layout names, each device's attention position the last of its own
positions. The mock computes nothing; the numbers are tests/distributed/test_cp_loop_options.py's."""

from __future__ import annotations

import pytest

from ttdecode.testing.dry_run import check_jit, jit_records

SCRIPT = r"""
import math
import torch
import ttnn
from pathlib import Path
from ttdecode.distributed.device_context import ContextParallelDecode
from ttdecode.models.kv_cache import ContextParallelAllocator
from ttdecode.ops.rotary_append.program_factory import rotate_half_blocks
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_mesh
from ttdecode.testing.transfers import count_transfers

CFG = __CFG__
B, T, NH, NKV, D, BS, N = 4, CFG["tokens"], 4, CFG["nkv"], CFG["head_dim"], 32, 2
mla = CFG["head_dim_v"] is not None
device = open_mock_mesh((1, N), fabric=True)
rep = ttnn.ReplicateTensorToMesh(device)
put = dict(device=device, memory_config=ttnn.DRAM_MEMORY_CONFIG, mesh_mapper=rep)
sink = torch.tensor([0.5, -1.0, 2.0, 0.0])
with count_transfers() as log:
    cp = ContextParallelDecode(device, batch=B, num_heads=NH, num_kv_heads=NKV, head_dim=D, max_seq_len=256,
                               block_size=BS, num_blocks=4 * B, kv_dtype="bfloat8_b", tokens=T,
                               sliding_window_size=CFG["window"], attention_sink=sink, head_dim_v=CFG["head_dim_v"])
    lead = (T,) if T > 1 else ()
    qkv = ttnn.from_torch(torch.randn(T, B, (NH + 2 * NKV) * D), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, **put)
    cos, sin = (ttnn.from_torch(torch.rand(*lead, B, math.ceil(D / 32) * 32), dtype=ttnn.float32,
                                layout=ttnn.TILE_LAYOUT, **put) for _ in range(2))
    trans = ttnn.from_torch(torch.cat([blk for _, _, blk in rotate_half_blocks(D, D, True)]).to(torch.float32),
                            dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, **put)
    q_mla = ttnn.from_torch(torch.randn(T, B, NH, D), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, **put)
    alloc = ContextParallelAllocator(B, 256, BS, num_blocks=4 * B, context_parallel=N)
    for p in range(28 - T + 1):  # the cache's first positions (nothing on the devices: page tables only)
        alloc.commit(alloc.plan([p] * B))
    rows, steps = [], []
    log.clear()
    for s in range(4):
        positions = [alloc.lengths[b] + T - 1 if (b, s) != (1, 2) else -1 for b in range(B)]
        for t in range(T):
            alloc.commit(alloc.plan([p - (T - 1) + t if p >= 0 else -1 for p in positions]))
        rows.append(cp.host_rows(positions, alloc.page_tables()).tolist())
        cp.write(positions, alloc.page_tables())
        q = q_mla if mla else cp.append(0, qkv, cos, sin, trans)
        out = cp.attend(0, q)
        host = ttnn.to_torch(ttnn.get_device_tensors(out)[0])
        steps.append({"positions": positions, "ops": dict(cp.ops), "writes": cp.writes, "moves": list(log.moves),
                      "entries": int(device.num_program_cache_entries()), "out_shape": list(host.shape)})
        log.clear()
programs = [p.program for p in (cp.rotary, cp.flash, cp.combine) if p is not None]
kernels = [{"name": k.name, "source": str(Path(k.source).resolve()), "kind": k.kind.value}
           for p in programs for k in p.kernels]
from ttdecode import is_bank_local
bank_local = {"pools": [is_bank_local(c) for c in cp.caches[0] if c is not None], "flash": cp.flash.plan.bank_local,
              "append": None if cp.rotary is None else cp.rotary.program.tensor("k_cache").layout}
emit({"steps": steps, "rows": rows, "kernels": kernels, "prefix": cp.prefix, "rows_per_step": cp.rows,
      "combine_partials": cp.combine.plan.partials, "caches": [c is None for c in cp.caches[0]],
      "bank_local": bank_local})
cp.close()
ttnn.close_mesh_device(device)
"""

CASES = {
    "window-sink-tokens": {"tokens": 4, "window": 64, "head_dim_v": None, "nkv": 2, "head_dim": 64},
    "mla-sink-tokens": {"tokens": 2, "window": None, "head_dim_v": 64, "nkv": 1, "head_dim": 96},
}
B, N, BS = 4, 2, 32


def _ops(tokens: int, mla: bool) -> dict[str, int]:
    """One step's ttnn calls: the row's views (T append positions, attention positions, the rows' and
    the users' page tables), per token the append's slices of qkv / cos / sin and its launch, the q
    concat; FlashDecode, the LSE rows to tiles, one gather each of O and LSE, the sink's two concats,
    the combine, the reshapes of q and the output (T > 1)."""
    views = 2 * (tokens + 2 + (tokens > 1))
    append = {} if mla or tokens == 1 else {"slice": 3 * tokens, "reshape": 2 * tokens, "concat": 1}
    ops = {"slice": views // 2 + 1 + append.get("slice", 0),
           "reshape": views // 2 + 1 + 2 * (tokens > 1) + append.get("reshape", 0),
           "to_layout": 1, "all_gather": 2, "concat": 2 + append.get("concat", 0), "flash_decode": 1, "combine": 1}
    if not mla:
        ops["rotary_kv_append"] = tokens
    return ops


def _check_rows(rows: list, prefix: int, tokens: int) -> set[int]:
    """Every step's rows against the interleaved layout (block j on device j mod 2); returns the writers."""
    r = tokens * B
    writers = set()
    for step in rows:
        for i in range(r):
            append = [row[prefix + i] for row in step]
            attend = [row[prefix + r + i] for row in step]
            live = [a for a in attend if a >= 0]
            if not live:
                assert append == [-1] * N
                continue
            p = sum(a + 1 for a in attend) - 1  # the row's global position: the keys held, less one
            owner = (p // BS) % N
            held = [len([x for x in range(p + 1) if (x // BS) % N == d]) - 1 for d in range(N)]
            assert attend == held and [d for d in range(N) if append[d] >= 0] == [owner], (i, append, attend)
            assert append[owner] == attend[owner]
            writers.add(owner)
    return writers


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_cp_loop_options_on_a_mock_n300(run_mock, mock_run, case) -> None:
    cfg = CASES[case]
    r = run_mock(SCRIPT.replace("__CFG__", repr(cfg)), timeout=900, system="n300")
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    mla, tokens = cfg["head_dim_v"] is not None, cfg["tokens"]
    problems = check_jit(res["kernels"], jit_records(mock_run["jit_log"]))
    assert not problems, "\n".join(problems)
    assert len(res["kernels"]) == 3 * (2 if mla else 3)
    assert res["combine_partials"] == N + 1  # the sink's partial
    assert res["caches"] == [False, mla]  # MLA: no V cache
    # the default kv_pages "key_row": bank-local pools read by FlashDecode (and written by the append)
    assert res["bank_local"] == {"pools": [True] * (2 - mla), "flash": True, "append": None if mla else "key_row"}
    assert res["rows_per_step"] == tokens * B
    for s in res["steps"]:
        assert s["ops"] == _ops(tokens, mla), s["ops"]
        assert s["writes"] == 1 and s["moves"] == ["copy_host_to_device_tensor", "to_torch"], s
        assert s["out_shape"] == [tokens, B, 4, cfg["head_dim_v"] or cfg["head_dim"]]
    entries = [s["entries"] for s in res["steps"]]
    assert all(e == entries[1] for e in entries[1:]), entries
    assert _check_rows(res["rows"], res["prefix"], tokens) == {0, 1}
