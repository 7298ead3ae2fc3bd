"""16x32 and 8x32 q tiles (DecodePlan.q_tile_rows 16 / 8): the same bits as 32x32 q tiles, with half
(a quarter of) the tile work.

With at most 16 q rows holding heads, every CB of q rows may hold 16x32 tiles (faces 0-1); with at
most 8, 8x32 tiles (two faces of 8 rows, face_r_dim 8). Every step of the kernels is row by row and
the rows past the heads hold none, so the outputs and the LSE must be the same bits as with 32x32
tiles, which the float64 reference checks elsewhere; what changes is the work: the matmuls feed 16
(8) rows of in0, and the copies and packs of q-row tiles move half (a quarter of) the bytes (the
runtime's counters record them as 16-row (8-row) tiles, which the cost model charges so).
"""

from __future__ import annotations

import math

import pytest
import torch

from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS
from ttdecode.core.tensor import from_torch

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


def head_rows(case: dict) -> int:
    return case["plan"].get("num_tokens", 1) * case["heads"] // case["kv"]


@pytest.mark.parametrize("rows,name", [(rows, name) for rows in (16, 8) for name in CASES
                                       if head_rows(CASES[name]) <= rows])
def test_small_q_tiles_give_the_bits_of_32x32_q_tiles(rows: int, name: str) -> None:
    out_small, lse_small, _ = run(CASES[name], rows)
    out32, lse32, _ = run(CASES[name], 32)
    assert torch.equal(out_small.view(torch.int16), out32.view(torch.int16)), name
    assert torch.equal(lse_small.view(torch.int32), lse32.view(torch.int32)), name


@pytest.mark.parametrize("rows", [16, 8])
def test_small_q_tiles_cut_the_matmul_rows_and_the_copied_and_packed_bytes(rows: int) -> None:
    """The runtime records a matmul with a 16x32 (8x32) in0 as 16 (8) rows and a pack of such a tile as 16
    (8) rows (half, a quarter of a tile), for the cost model; a copy of a 2-face tile as 16 rows either way
    (the datacopy moves 16 rows per face whatever the face height, llk_math_eltwise_unary_datacopy.h), with
    the L1 bytes its unpacker reads: half a tile's for 16 rows; for 8 rows a quarter, or half when an
    earlier unpack to DST left unpacker A's X-end at a whole face (TEN-3868). The calls are the same."""
    compute = next(code for code, name in EVENT_OPS.items() if name == "compute")
    counts, nbytes = {}, {}
    for rows_now in (rows, 32):
        _, _, res = run(CASES["tree D64"], rows_now)
        tally: dict[tuple[str, int], int] = {}
        l1: dict[str, int] = {}
        for k in res.counters.kernels:
            if k.kind is KernelKind.COMPUTE:
                for e in k.events:
                    name = COMPUTE_OPS[int(e["peer"])] if int(e["op"]) == compute else None
                    if name in ("matmul", "copy", "pack"):
                        key = (name, int(e["flag"]))
                        tally[key] = tally.get(key, 0) + int(e["amount"]) * int(e["count"])
                        l1[name] = l1.get(name, 0) + int(e["l1_bytes"]) * int(e["count"])
        counts[rows_now], nbytes[rows_now] = tally, l1
    for op in ("matmul", "copy", "pack"):
        flag = 16 if op == "copy" else rows
        assert counts[32].get((op, flag), 0) == 0, op
        assert counts[rows].get((op, 0), 0) == 0, f"{op}: a 32x32 tile left with {rows}x32 q tiles"
        assert counts[rows][(op, flag)] == counts[32][(op, 0)], op
    # every copy and pack here moves a q-row tile (fp32 intermediates: 4096 B for 32 rows)
    assert nbytes[rows]["pack"] == nbytes[32]["pack"] * rows // 32
    if rows == 16:
        assert nbytes[16]["copy"] == nbytes[32]["copy"] // 2
    else:
        assert nbytes[32]["copy"] // 4 < nbytes[8]["copy"] <= nbytes[32]["copy"] // 2
