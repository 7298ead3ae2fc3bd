"""The root's only chunk (one piece, no old running set, nothing to merge, no LSE): the row sum rides in
P.V's last DST block and 1/l is made there (kernels/flash_decode/compute.cpp finish_single_chunk), with no row-sum
pass and no 1/l pass. The values must be those of the path the kernel takes when it also writes the LSE
(row sum, then 1/l, then P.V): the same bits, which the float64 reference checks against the bar here
and elsewhere. And the reader lands Q and the first chunk's K under one read barrier.
"""

from __future__ import annotations

import math

import pytest
import torch

from ttdecode.accuracy import check_close
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.runtime.results import EVENT_OPS
from ttdecode.core.tensor import from_torch, to_torch

BF16, BFP8 = DataType.bfloat16, DataType.bfloat8_b

# D 128 (4 O tiles: 3 in the fused block, 1 after it), D 64 (all in it), D 256 (3 + 5), bf16 DST (8
# tiles), 32-row q tiles, two q tile rows (T 2 x 32 heads), a window and an attn_mask (the empty-row
# guard takes a DST tile), MLA and a sink (not fused: the other path)
CASES = {
    "D128": dict(batch=8, heads=8, kv=1, s=128, d=128),
    "D64": dict(batch=4, heads=8, kv=1, s=256, d=64),
    "D256 g8 2 kv heads": dict(batch=3, heads=16, kv=2, s=224, d=256),
    "bf16 DST": dict(batch=2, heads=8, kv=1, s=256, d=128, fp32=False),
    "32-row q tiles": dict(batch=2, heads=8, kv=1, s=256, d=128, plan=dict(q_tile_rows=32)),
    "T2 x 32 heads": dict(batch=2, heads=32, kv=1, s=128, d=64, plan=dict(num_tokens=2)),
    "window": dict(batch=3, heads=4, kv=1, s=256, d=64, plan=dict(sliding_window_size=100)),
    "attn_mask": dict(batch=2, heads=8, kv=1, s=256, d=128, plan=dict(is_causal=False, attn_mask_batch=2)),
    "MLA": dict(batch=2, heads=16, kv=1, s=256, d=128, dv=64, plan=dict(mla=True)),
    "sink": dict(batch=3, heads=8, kv=1, s=256, d=128, plan=dict(attention_sink=True)),
}


def _inputs(case: dict):
    b, nh, nkv, s, d = case["batch"], case["heads"], case["kv"], case["s"], case["d"]
    kw = case.get("plan", {})
    gen = torch.Generator().manual_seed(0)
    t = kw.get("num_tokens", 1)
    q = from_torch(torch.randn(t, b, nh, d, generator=gen), BF16)
    k = from_torch(torch.randn(b, nkv, s, d, generator=gen), BFP8)
    v = None if kw.get("mla") else from_torch(torch.randn(b, nkv, s, case.get("dv", d), generator=gen), BFP8)
    extra = {}
    if kw.get("attn_mask_batch"):
        extra["attn_mask"] = from_torch(torch.randn(b, 1, nh, s, generator=gen), BF16)
    if kw.get("attention_sink"):
        extra["attention_sink"] = torch.randn(nh, generator=gen)
    step = 0 if case.get("full") else 13  # "full": every user at the cache's last position
    pos = [max(0, s - 1 - step * i) for i in range(b)] if kw.get("is_causal", True) else None
    return q, k, v, pos, extra


def _run(case: dict, return_lse: bool):
    q, k, v, pos, extra = _inputs(case)
    fp32 = case.get("fp32", True)
    plan = make_plan(batch=case["batch"], num_q_heads=case["heads"], num_kv_heads=case["kv"], seq_len=case["s"],
                     head_dim=case["d"], head_dim_v=case.get("dv", case["d"]), cur_pos=pos, return_lse=return_lse,
                     max_cores_per_head_batch=1, grid=(4, 4), fp32_dest_acc_en=fp32, **case.get("plan", {}))
    assert plan.pieces_per_work == 1 and plan.chunk_cap * 32 >= case["s"]  # every root has one chunk
    out, _, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1 / math.sqrt(case["d"]),
                                      compute=ComputeSettings(fp32_dest_acc_en=fp32), **extra)
    return out, result.counters, (q, k, v, pos, extra)


@pytest.mark.parametrize("name", list(CASES))
def test_a_single_chunk_root_writes_the_same_output_bits_with_or_without_the_lse(name: str) -> None:
    case = CASES[name]
    fused, _, inputs = _run(case, return_lse=False)
    other, _, _ = _run(case, return_lse=True)
    assert torch.equal(fused.view(torch.int16), other.view(torch.int16))
    q, k, v, pos, extra = inputs
    kw = case.get("plan", {})
    mask = extra.get("attn_mask")
    ref = sdpa_decode_reference(to_torch(q).double(), to_torch(k).double(), None if v is None else to_torch(v).double(),
                                is_causal=kw.get("is_causal", True), cur_pos=pos,
                                attn_mask=None if mask is None else to_torch(mask).double(),
                                attention_sink=extra.get("attention_sink"), scale=1 / math.sqrt(case["d"]),
                                sliding_window_size=kw.get("sliding_window_size"),
                                head_dim_v=case.get("dv") if kw.get("mla") else None)
    if case.get("fp32", True):  # the bar is the fp32-DST configuration's; a bf16 DST rounds every DST write
        check_close(fused.float(), ref, f"single-chunk root {name}")


# The Galaxy Llama-70B point's shape: 8 users of 4 key tiles, 8 q heads on one KV head, D 128
TG = dict(batch=8, heads=8, kv=1, s=128, d=128, full=True)


def _calls(counters, op: str) -> int:
    """Compute kernel calls of `op` (events x count), all cores."""
    from ttdecode.runtime.results import COMPUTE_OPS
    return sum(int(e["count"]) for k in counters.kernels if k.kind is KernelKind.COMPUTE for e in k.events
               if EVENT_OPS[int(e["op"])] == "compute" and COMPUTE_OPS[int(e["peer"])] == op)


def test_the_fused_finish_makes_no_row_sum_pass_and_packs_no_running_l() -> None:
    """Per user (4 key tiles, 4 O tiles, a DST of 4 tiles): Q.K^T is 4 matmul_block calls (one per D
    tile); fused, P.V is 4 calls for the last block (O tiles 1-3 and l) and 4 for O tile 0, and the packs
    are 4 scores, 1 max, 4 probabilities, 4 O tiles and 1/l once; with the LSE the row sum is 4
    matmul_tiles calls of its own, P.V 4 + 4 calls (O tiles 0-2, then 3), and l, 1/l and the LSE are
    packed."""
    _, fused, _ = _run(TG, return_lse=False)
    _, other, _ = _run(TG, return_lse=True)
    users = TG["batch"]
    assert _calls(fused, "matmul") == users * (4 + 4 + 4)
    assert _calls(other, "matmul") == users * (4 + 4 + 4 + 4)
    assert _calls(fused, "pack") == users * (4 + 1 + 4 + 4 + 1)
    assert _calls(other, "pack") == users * (4 + 1 + 4 + 1 + 1 + 4 + 1)


def test_the_reader_lands_q_and_the_first_chunks_k_under_one_barrier() -> None:
    """One piece of one chunk per user: the reader's barriers after the positions are (Q + K), V per user."""
    case = TG
    _, counters, _ = _run(case, return_lse=False)
    q_bytes = 8 * case["d"] * 2  # the group's 8 heads' rows of bf16 Q
    k_bytes = 4 * (case["d"] // 32) * 1088  # 4 key tiles x D/32 bfloat8_b tiles
    for k in counters.kernels:
        if k.kind is not KernelKind.READER:
            continue
        groups, b = [], 0
        for e in k.events:
            op = EVENT_OPS[int(e["op"])]
            if op == "read_dram":
                b += int(e["amount"]) * int(e["count"])
            elif op == "read_barrier" and b:
                groups.append(b)
                b = 0
        users = len(groups[1:]) // 2
        assert users >= 1 and groups[1::2] == [q_bytes + k_bytes] * users, groups
        assert groups[2::2] == [k_bytes] * users, groups  # V: as many bytes as K (its ones tiles are not read)
