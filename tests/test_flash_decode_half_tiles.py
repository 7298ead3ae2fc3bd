"""16x32 q tiles (DecodePlan.q_tile_rows 16): the same bits as 32x32 q tiles, with half the tile work.

With at most 16 q rows holding heads, every CB of q rows holds 16x32 tiles (faces 0-1). Every step
of the kernels is row by row and rows 16-31 hold no head, so the outputs and the LSE must be the same
bits as with 32x32 tiles, which the float64 reference checks elsewhere; what changes is the work: the
matmuls feed 16 rows of in0, and the copies and packs of q-row tiles move half the bytes (the
runtime's counters record them as 16-row tiles, which the cost model charges at half).
"""

from __future__ import annotations

import math

import pytest
import torch

from ttdecode.factory import run_flash_decode
from ttdecode.formats import DataType
from ttdecode.plan import make_plan
from ttdecode.program import ComputeSettings, KernelKind
from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS
from ttdecode.tensor import from_torch

BF16, BFP8 = DataType.bfloat16, DataType.bfloat8_b

CASES = {
    "tree D64": dict(batch=3, heads=8, kv=1, s=2048, d=64, plan=dict(max_cores_per_head_batch=16, min_chunk_tiles=1)),
    "T2 g4": dict(batch=2, heads=16, kv=4, s=1024, d=128, plan=dict(num_tokens=2, max_cores_per_head_batch=4)),
    "sink": dict(batch=2, heads=16, kv=2, s=1024, d=64, plan=dict(attention_sink=True, max_cores_per_head_batch=8,
                                                                   min_chunk_tiles=1)),
    "key_row 32-tile chunks": dict(batch=1, heads=8, kv=1, s=8192, d=64,
                                   plan=dict(kv_pages="key_row", chunk_cap=32, prescale_q=True)),
    "bf16 DST": dict(batch=2, heads=8, kv=1, s=2048, d=64, fp32=False, plan=dict(max_cores_per_head_batch=8)),
    "MLA": dict(batch=2, heads=16, kv=1, s=1024, d=128, dv=64, plan=dict(mla=True, max_cores_per_head_batch=8)),
    "attn_mask": dict(batch=2, heads=8, kv=1, s=1024, d=64, plan=dict(is_causal=False, attn_mask_batch=2,
                                                                       max_cores_per_head_batch=8)),
    "window": dict(batch=3, heads=4, kv=1, s=2048, d=64, plan=dict(sliding_window_size=300, max_cores_per_head_batch=8)),
}


def run(case: dict, q_tile_rows: int):
    b, nh, nkv, s, d = case["batch"], case["heads"], case["kv"], case["s"], case["d"]
    dv = case.get("dv", d)
    kw = dict(case["plan"])
    fp32 = case.get("fp32", True)
    gen = torch.Generator().manual_seed(0)
    t = kw.get("num_tokens", 1)
    q = from_torch(torch.randn(t, b, nh, d, generator=gen), BF16)
    k = from_torch(torch.randn(b, nkv, s, d, generator=gen), BFP8)
    v = None if kw.get("mla") else from_torch(torch.randn(b, nkv, s, dv, generator=gen), BFP8)
    causal = kw.get("is_causal", True)
    pos = [s - 1 - 97 * i for i in range(b)] if causal else None
    extra = {}
    if kw.get("attn_mask_batch"):
        extra["attn_mask"] = from_torch(torch.randn(b, 1, nh, s, generator=gen), BF16)
    if kw.get("attention_sink"):
        extra["attention_sink"] = torch.randn(nh, generator=gen)
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, head_dim_v=dv, cur_pos=pos,
                     return_lse=True, grid=(4, 4), fp32_dest_acc_en=fp32, q_tile_rows=q_tile_rows, **kw)
    scale = 0.125 if kw.get("prescale_q") else 1 / math.sqrt(d)
    out, lse, res = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=scale,
                                     compute=ComputeSettings(fp32_dest_acc_en=fp32), **extra)
    return out, lse, res


@pytest.mark.parametrize("name", list(CASES))
def test_16x32_q_tiles_give_the_bits_of_32x32_q_tiles(name: str) -> None:
    out16, lse16, _ = run(CASES[name], 16)
    out32, lse32, _ = run(CASES[name], 32)
    assert torch.equal(out16.view(torch.int16), out32.view(torch.int16)), name
    assert torch.equal(lse16.view(torch.int32), lse32.view(torch.int32)), name


def test_16x32_q_tiles_halve_the_matmul_rows_and_the_copied_and_packed_bytes() -> None:
    """The runtime records a matmul with a 16x32 in0 as 16 rows, and a copy or pack of a 16x32 tile as
    16 vector steps (half a tile), for the cost model; the calls themselves are the same."""
    compute = next(code for code, name in EVENT_OPS.items() if name == "compute")
    counts = {}
    for rows in (16, 32):
        _, _, res = run(CASES["tree D64"], rows)
        tally: dict[tuple[str, int], int] = {}
        for k in res.counters.kernels:
            if k.kind is KernelKind.COMPUTE:
                for e in k.events:
                    name = COMPUTE_OPS[int(e["peer"])] if int(e["op"]) == compute else None
                    if name in ("matmul", "copy", "pack"):
                        key = (name, int(e["flag"]))
                        tally[key] = tally.get(key, 0) + int(e["amount"]) * int(e["count"])
        counts[rows] = tally
    for op in ("matmul", "copy", "pack"):
        assert counts[32].get((op, 16), 0) == 0, op
        assert counts[16].get((op, 0), 0) == 0, f"{op}: a 32x32 tile left with 16x32 q tiles"
        assert counts[16][(op, 16)] == counts[32][(op, 0)], op
