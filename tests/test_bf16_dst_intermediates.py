"""With a bf16 DST every value the softmax keeps is bf16 in DST, so its intermediate circular buffers
(scores, probabilities, running m / l / O, factors, partials) are bfloat16: half the bytes of float32
ones, the same values. The output and LSE bits must be those of float32 intermediates (a plan given
float32 CBs instead, the A/B below), and the L1 traffic the runtime records smaller.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import flash_decode_cbs, make_plan
from ttdecode.core.program_description import ComputeSettings
from ttdecode.core.tensor import from_torch

F32, BF16, BFP8 = DataType.float32, DataType.bfloat16, DataType.bfloat8_b
INTERMEDIATES = ("max_bcast", "scores", "probs", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b", "alpha",
                 "partial_in", "partial_out")


def test_a_bf16_dst_plan_keeps_its_intermediates_in_bf16_and_an_fp32_one_in_fp32() -> None:
    for fp32 in (True, False):
        plan = make_plan(batch=2, num_q_heads=8, num_kv_heads=1, seq_len=1024, head_dim=64, cur_pos=[1023, 500],
                         return_lse=True, max_cores_per_head_batch=8, grid=(4, 4), fp32_dest_acc_en=fp32)
        fmt = {cb.name: cb.data_format for cb in plan.circular_buffers}
        assert {fmt[n] for n in INTERMEDIATES if n in fmt} == {F32 if fp32 else BF16}
        assert fmt["lse"] is F32 and fmt["out"] is BF16  # the outputs keep their formats


CASES = {
    "tree of 8 pieces": dict(batch=3, heads=8, kv=1, s=2048, d=64, plan=dict(max_cores_per_head_batch=8,
                                                                            min_chunk_tiles=1)),
    "T 2, 4 KV heads": dict(batch=2, heads=16, kv=4, s=1024, d=128, plan=dict(num_tokens=2, max_cores_per_head_batch=4)),
    "sink": dict(batch=3, heads=16, kv=2, s=1024, d=64, plan=dict(attention_sink=True, max_cores_per_head_batch=8,
                                                                   min_chunk_tiles=1)),
    # 16x32 q tiles: with 8x32 ones (the default for 8 heads) K and V dominate this short run's L1 traffic
    "one chunk, no LSE": dict(batch=4, heads=8, kv=1, s=128, d=128, lse=False,
                              plan=dict(max_cores_per_head_batch=1, q_tile_rows=16)),
    "32-row q tiles": dict(batch=2, heads=32, kv=1, s=1024, d=128, plan=dict(max_cores_per_head_batch=4)),
}


def _run(case: dict, im: DataType):
    b, nh, nkv, s, d = case["batch"], case["heads"], case["kv"], case["s"], case["d"]
    kw = dict(case["plan"])
    gen = torch.Generator().manual_seed(0)
    t = kw.get("num_tokens", 1)
    q = from_torch(torch.randn(t, b, nh, d, generator=gen), BF16)
    k = from_torch(torch.randn(b, nkv, s, d, generator=gen), BFP8)
    v = from_torch(torch.randn(b, nkv, s, d, generator=gen), BFP8)
    sink = torch.randn(nh, generator=gen) if kw.get("attention_sink") else None
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d,
                     cur_pos=[max(0, s - 1 - 97 * i) for i in range(b)], return_lse=case.get("lse", True),
                     grid=(4, 4), fp32_dest_acc_en=False, **kw)
    if im is F32:  # the same plan with float32 intermediates (the kernels read every format from the CBs)
        specs = {cb.name: cb for cb in plan.circular_buffers}
        wide = {cb.name: cb for cb in flash_decode_cbs(
            q_tiles=plan.q_tiles, d_tiles=plan.d_tiles, dv_tiles=plan.dv_tiles, max_chunk_tiles=plan.max_chunk_tiles,
            kv_dtype=plan.kv_dtype, batch=b, recv_areas=max(plan.recv_areas.values(), default=0),
            attention_sink=plan.attention_sink,
            tree=plan.pieces_per_work > 1, tokens=plan.num_tokens, prescale_q=plan.prescale_q,
            q_tile_rows=plan.q_tile_rows, im_dtype=F32)}
        plan = dataclasses.replace(plan, circular_buffers=tuple(
            wide[n] if n in INTERMEDIATES else cb for n, cb in specs.items()))
    out, lse, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1 / math.sqrt(d),
                                        compute=ComputeSettings(fp32_dest_acc_en=False), attention_sink=sink)
    l1 = sum(int(e["l1_bytes"]) * int(e["count"]) for kk in result.counters.kernels for e in kk.events)
    return out, lse, l1


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_intermediates_give_the_bits_of_fp32_ones_with_less_l1_traffic(name: str) -> None:
    out, lse, l1 = _run(CASES[name], BF16)
    wide_out, wide_lse, wide_l1 = _run(CASES[name], F32)
    assert torch.equal(out.view(torch.int16), wide_out.view(torch.int16))
    if lse is not None:
        assert torch.equal(lse.view(torch.int32), wide_lse.view(torch.int32))
    assert l1 < 0.8 * wide_l1
