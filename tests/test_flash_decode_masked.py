"""Non-causal decode in the FlashDecode kernels: every user attends all S keys, with an optional
additive attn_mask [B or 1, 1, NH, S] (bf16 tiles streamed with the K chunks and added to the fp32
scores). Host runtime against the float64 reference on the same quantized inputs (thresholds in
`ttdecode.accuracy`); a fully masked head gives zeros and LSE -inf, never NaN."""

from __future__ import annotations

import math
from typing import Optional

import pytest
import torch

import ttdecode
from ttdecode.accuracy import check_close, check_lse
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.ops.flash_decode.program_inputs import FactoryError
from ttdecode.core.formats import DataType, tile_size
from ttdecode.ops.flash_decode.plan import PlanError, make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import from_torch, to_torch

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b
NEG_INF = float("-inf")


def random_mask(bm: int, nh: int, s: int, seed: int, p_masked: float = 0.3) -> torch.Tensor:
    """bf16-exact additive mask: -inf with probability p_masked, else N(0, 2)."""
    gen = torch.Generator().manual_seed(seed)
    keep = torch.rand(bm, 1, nh, s, generator=gen) >= p_masked
    values = 2 * torch.randn(bm, 1, nh, s, generator=gen)
    return torch.where(keep, values, NEG_INF).to(torch.bfloat16).float()


def run(*, b, nh, nkv, s, d, mask: Optional[torch.Tensor], kv=BFP8, max_cores=4, k_chunk=0, sink=None, seed=0,
        block_size: Optional[int] = None, compute: ComputeSettings = ComputeSettings(), schedule_seed=None,
        exp_approx: bool = False):
    gen = torch.Generator().manual_seed(seed)
    q = from_torch(torch.randn(1, b, nh, d, generator=gen), BF16)
    kc = torch.randn(b, nkv, s, d, generator=gen)
    vc = torch.randn(b, nkv, s, d, generator=gen)
    paging, table = {}, None
    if block_size:  # the same logical cache, scattered over shuffled blocks
        per_user = s // block_size
        nb = b * per_user
        table = torch.randperm(nb, generator=gen).reshape(b, per_user).to(torch.int32)
        kp = torch.empty(nb, nkv, block_size, d)
        vp = torch.empty(nb, nkv, block_size, d)
        for u in range(b):
            for j in range(per_user):
                kp[table[u, j]] = kc[u, :, j * block_size:(j + 1) * block_size]
                vp[table[u, j]] = vc[u, :, j * block_size:(j + 1) * block_size]
        kc, vc = kp, vp
        paging = dict(block_size=block_size, num_blocks=nb)
    k, v = from_torch(kc, kv), from_torch(vc, kv)
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv, is_causal=False,
                     attn_mask_batch=0 if mask is None else mask.shape[0], max_cores_per_head_batch=max_cores,
                     k_chunk_size=k_chunk, return_lse=True, attention_sink=sink is not None,
                     fp32_dest_acc_en=compute.fp32_dest_acc_en, **paging)
    scale = 1.0 / math.sqrt(d)
    out, lse, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=scale, compute=compute,
                                        attention_sink=sink, attn_mask=mask, page_table=table,
                                        schedule_seed=schedule_seed, exp_approx=exp_approx)
    ref, ref_lse = sdpa_decode_reference(
        to_torch(q).double(), to_torch(k).double(), to_torch(v).double(), is_causal=False,
        attn_mask=None if mask is None else mask.double(), scale=scale, page_table=table,
        attention_sink=None if sink is None else sink.to(torch.bfloat16).double(), return_lse=True)
    return plan, out, lse, ref, ref_lse, result


def check(out, lse, ref, ref_lse, what: str) -> None:
    check_close(out, ref, f"{what}: output")
    check_lse(lse, ref_lse, f"{what}: LSE")


@pytest.mark.parametrize("max_cores, kv, k_chunk, mask_batch", [
    (1, BF16, 0, 3), (3, BFP8, 32, 1), (5, BFP4, 0, 3), (8, BFP8, 64, 3), (4, BF16, 128, 1)])
def test_masked_non_causal_decode_matches_the_reference(max_cores, kv, k_chunk, mask_batch) -> None:
    mask = random_mask(mask_batch, 12, 256, seed=max_cores)
    plan, out, lse, ref, ref_lse, _ = run(b=3, nh=12, nkv=3, s=256, d=64, mask=mask, kv=kv, max_cores=max_cores,
                                          k_chunk=k_chunk, seed=max_cores)
    assert plan.cur_pos == (255,) * 3 and plan.has_attn_mask and plan.guard_empty_rows
    check(out, lse, ref, ref_lse, f"{kv.value}, {plan.pieces_per_work} pieces, k_chunk {k_chunk}, mask batch {mask_batch}")


def test_non_causal_without_a_mask_attends_all_keys_over_every_piece() -> None:
    plan, out, lse, ref, ref_lse, result = run(b=2, nh=8, nkv=2, s=512, d=64, mask=None, max_cores=8, k_chunk=64)
    assert plan.pieces_per_work == 8 and not plan.guard_empty_rows
    assert all(not r.empty for r in plan.ranges(0))  # the 8 chunks of S, one per piece
    check(out, lse, ref, ref_lse, "no mask")


@pytest.mark.parametrize("mask_batch", [1, 3])
def test_each_mask_row_of_the_group_is_read_once_with_its_k_chunk(mask_batch) -> None:
    # every key tile of a work is read by exactly one piece: K, V, and the group's g mask rows of it
    b, nh, nkv, s, d = 3, 12, 2, 256, 64
    plan, out, lse, ref, ref_lse, result = run(b=b, nh=nh, nkv=nkv, s=s, d=d, mask=random_mask(mask_batch, nh, s, 1),
                                               max_cores=4, k_chunk=32)
    check(out, lse, ref, ref_lse, "bytes")
    g, tiles = nh // nkv, s // 32
    kv_bytes = b * nkv * tiles * 2 * (d // 32) * tile_size(BFP8)
    mask_bytes = b * nkv * tiles * g * 32 * 2
    q_bytes = len(plan.pieces) * g * d * 2  # every piece has work: S / 32 = 8 chunks over 4 pieces
    pos_bytes = len(plan.active_cores) * 4 * b  # once per reader
    read = sum(sum(result.counters.kernel(c, KernelKind.READER).dram_read_bytes) for c in plan.active_cores)
    assert read == kv_bytes + mask_bytes + q_bytes + pos_bytes


@pytest.mark.parametrize("max_cores, kv", [(1, BF16), (4, BFP8), (8, BFP4)])
def test_a_mask_keeping_one_key_selects_that_value_row_at_every_position(max_cores, kv) -> None:
    # User u attends only key u: the output is V[u] of its KV head (softmax over one key), at every
    # key position of the cache, tile edges included; head 1 keeps nothing (all -inf).
    s, nh = 256, 4
    mask = torch.full((s, 1, nh, s), NEG_INF)
    for u in range(s):
        mask[u, 0, [0, 2, 3], u] = 0.0
    plan, out, lse, ref, ref_lse, _ = run(b=s, nh=nh, nkv=1, s=s, d=64, mask=mask, kv=kv, max_cores=max_cores)
    live = [0, 2, 3]
    check(out[:, :, live], lse[:, :, live], ref[:, :, live], ref_lse[:, :, live], f"one key, {kv.value}")
    assert torch.all(out[:, :, 1] == 0) and torch.all(lse[:, :, 1] == NEG_INF)


@pytest.mark.parametrize("compute, exp_approx", [
    (ComputeSettings(), False), (ComputeSettings(), True), (ComputeSettings(fp32_dest_acc_en=False), False)],
    ids=["fp32-dst", "approx-exp", "bf16-dst"])
def test_fully_masked_heads_give_zeros_and_minus_inf_never_nan(compute, exp_approx) -> None:
    # head 1 of user 0, every head of user 2, and user 1's head 5 except in one chunk of one piece
    mask = random_mask(3, 8, 256, seed=2)
    mask[0, 0, 1] = NEG_INF
    mask[2] = NEG_INF
    mask[1, 0, 5] = NEG_INF
    mask[1, 0, 5, 70] = 0.5
    plan, out, lse, ref, ref_lse, _ = run(b=3, nh=8, nkv=2, s=256, d=64, mask=mask, max_cores=4, k_chunk=32,
                                          compute=compute, exp_approx=exp_approx)
    assert torch.isfinite(out.float()).all()
    assert torch.all(out[0, 0, 1] == 0) and lse[0, 0, 1] == NEG_INF
    assert torch.all(out[0, 2] == 0) and torch.all(lse[0, 2] == NEG_INF)
    assert torch.isfinite(lse[0, 1, 5])
    if compute.fp32_dest_acc_en and not exp_approx:  # the accuracy bar is set for the fp32 DST + accurate exp
        check(out, lse, ref, ref_lse, "fully masked heads")
    else:
        torch.testing.assert_close(out[0, 1, 5].float(), ref[0, 1, 5].float(), atol=0.05, rtol=0)


def test_a_sink_with_a_fully_masked_head_takes_all_the_weight() -> None:
    gen = torch.Generator().manual_seed(4)
    sink = 3 * torch.randn(8, generator=gen)
    mask = random_mask(2, 8, 256, seed=4)
    mask[1, 0, 6] = NEG_INF
    plan, out, lse, ref, ref_lse, _ = run(b=2, nh=8, nkv=2, s=256, d=64, mask=mask, max_cores=4, sink=sink)
    check(out, lse, ref, ref_lse, "sink + mask")
    assert torch.all(out[0, 1, 6] == 0) and torch.isfinite(lse[0, 1, 6])  # LSE = the sink's logit


@pytest.mark.parametrize("block_size", [32, 128])
def test_masked_decode_over_a_paged_cache(block_size) -> None:
    mask = random_mask(3, 8, 256, seed=block_size)
    mask[1, 0, 2] = NEG_INF
    plan, out, lse, ref, ref_lse, _ = run(b=3, nh=8, nkv=2, s=256, d=64, mask=mask, max_cores=4, k_chunk=64,
                                          block_size=block_size)
    assert plan.paged
    check(out, lse, ref, ref_lse, f"paged {block_size}")


def test_masked_output_is_batch_invariant() -> None:
    s, nh, nkv, d = 256, 8, 2, 64
    gen = torch.Generator().manual_seed(9)
    q, k, v = torch.randn(1, 4, nh, d, generator=gen), torch.randn(4, nkv, s, d, generator=gen), \
        torch.randn(4, nkv, s, d, generator=gen)
    mask = random_mask(4, nh, s, seed=9)
    outs = {}
    for users in ([0, 1, 2, 3], [2], [2, 0]):
        idx = torch.tensor(users)
        plan = make_plan(batch=len(users), num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=BFP8,
                         is_causal=False, attn_mask_batch=len(users), max_cores_per_head_batch=4)
        out, _, _ = run_flash_decode(plan, q=from_torch(q[:, idx], BF16), k=from_torch(k[idx], BFP8),
                                     v=from_torch(v[idx], BFP8), cur_pos_source=None, scale=0.125,
                                     compute=ComputeSettings(), attn_mask=mask[idx])
        outs[tuple(users)] = {u: out[:, i] for i, u in enumerate(users)}
    assert torch.equal(outs[(0, 1, 2, 3)][2], outs[(2,)][2])
    assert torch.equal(outs[(0, 1, 2, 3)][2], outs[(2, 0)][2])
    assert torch.equal(outs[(0, 1, 2, 3)][0], outs[(2, 0)][0])


@pytest.mark.parametrize("seed", [1, 2])
def test_masked_decode_is_the_same_under_perturbed_schedules(seed) -> None:
    mask = random_mask(2, 8, 256, seed=7)
    mask[0, 0, 3] = NEG_INF
    _, base, base_lse, *_ = run(b=2, nh=8, nkv=2, s=256, d=64, mask=mask, max_cores=8, k_chunk=32)
    _, out, lse, *_ = run(b=2, nh=8, nkv=2, s=256, d=64, mask=mask, max_cores=8, k_chunk=32, schedule_seed=seed)
    assert torch.equal(out, base) and torch.equal(lse, base_lse)


# ---- the public API ------------------------------------------------------------------------------


def api_inputs(b=2, nh=8, nkv=2, s=128, d=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(1, b, nh, d, generator=gen), torch.randn(b, nkv, s, d, generator=gen),
            torch.randn(b, nkv, s, d, generator=gen))


@pytest.mark.parametrize("with_mask", [True, False])
def test_api_runs_non_causal_decode_in_the_kernels(with_mask) -> None:
    q, k, v = api_inputs()
    mask = random_mask(1, 8, 128, seed=3) if with_mask else None
    out, lse = ttdecode.scaled_dot_product_attention_decode(q, k, v, is_causal=False, attn_mask=mask,
                                                            return_lse=True, backend="host")
    ref, ref_lse = ttdecode.scaled_dot_product_attention_decode(q, k, v, is_causal=False, attn_mask=mask,
                                                                return_lse=True, backend="reference")
    check(out, lse, ref, ref_lse, "api")


def test_api_paged_entry_runs_a_masked_decode() -> None:
    q, k, v = api_inputs(s=128)
    table = torch.arange(8, dtype=torch.int32).reshape(2, 4)
    kp = k.reshape(2, 2, 4, 32, 64).permute(0, 2, 1, 3, 4).reshape(8, 2, 32, 64)
    vp = v.reshape(2, 2, 4, 32, 64).permute(0, 2, 1, 3, 4).reshape(8, 2, 32, 64)
    mask = random_mask(2, 8, 128, seed=5)
    kwargs = dict(is_causal=False, attn_mask=mask, return_lse=True)
    out, lse = ttdecode.paged_scaled_dot_product_attention_decode(q, kp, vp, table, backend="host", **kwargs)
    ref, ref_lse = ttdecode.paged_scaled_dot_product_attention_decode(q, kp, vp, table, backend="reference", **kwargs)
    check(out, lse, ref, ref_lse, "api paged")


@pytest.mark.parametrize("case, exc, match", [
    ("mask with is_causal=True", ValueError, r"'attn_mask'.*None in causal mode"),
    ("mask batch 3 of 2 users", ValueError, r"'attn_mask'.*shape \[B=2 or 1, 1, NH=8, S=128\].*\[3, 1, 8, 128\]"),
    ("mask over 64 keys of 128", ValueError, r"'attn_mask'.*S=128.*\[2, 1, 8, 64\]"),
    ("int mask", TypeError, r"'attn_mask'.*float"),
    ("NaN in the mask", ValueError, r"attn_mask: expected finite values or -inf"),
    ("+inf in the mask", ValueError, r"attn_mask: expected finite values or -inf"),
    ("positions in non-causal mode", ValueError, r"'cur_pos'.*None in non-causal mode"),
    ("window in non-causal mode", ValueError, r"'sliding_window_size'.*None in non-causal mode"),
])
def test_bad_mask_arguments_are_refused_naming_the_argument(case, exc, match) -> None:
    q, k, v = api_inputs()
    mask = torch.zeros(2, 1, 8, 128)
    kwargs = dict(is_causal=False, attn_mask=mask)
    if case == "mask with is_causal=True":
        kwargs = dict(is_causal=True, attn_mask=mask, cur_pos=[3, 4])
    elif case == "mask batch 3 of 2 users":
        kwargs["attn_mask"] = torch.zeros(3, 1, 8, 128)
    elif case == "mask over 64 keys of 128":
        kwargs["attn_mask"] = torch.zeros(2, 1, 8, 64)
    elif case == "int mask":
        kwargs["attn_mask"] = torch.zeros(2, 1, 8, 128, dtype=torch.int32)
    elif case == "NaN in the mask":
        mask[1, 0, 2, 7] = float("nan")
    elif case == "+inf in the mask":
        mask[0, 0, 0, 0] = float("inf")
    elif case == "positions in non-causal mode":
        kwargs["cur_pos"] = [3, 4]
    elif case == "window in non-causal mode":
        kwargs["sliding_window_size"] = 16
    with pytest.raises(exc, match=match):
        ttdecode.scaled_dot_product_attention_decode(q, k, v, backend="host", **kwargs)


def test_plan_refuses_a_mask_in_causal_mode_and_a_wrong_mask_batch() -> None:
    base = dict(batch=2, num_q_heads=8, num_kv_heads=2, seq_len=128, head_dim=64)
    with pytest.raises(PlanError, match="attn_mask_batch: expected 0 in causal mode"):
        make_plan(cur_pos=[1, 2], attn_mask_batch=2, **base)
    with pytest.raises(PlanError, match=r"attn_mask_batch: expected 0 \(no mask\), 1 or B=2, got 3"):
        make_plan(is_causal=False, attn_mask_batch=3, **base)
    with pytest.raises(PlanError, match="cur_pos: expected None in non-causal mode"):
        make_plan(is_causal=False, cur_pos=[1, 2], **base)
    plan = make_plan(is_causal=False, attn_mask_batch=1, **base)
    with pytest.raises(FactoryError, match=r"attn_mask: expected shape \[1, 1, 8, 128\]"):
        run_flash_decode(plan, q=from_torch(torch.zeros(1, 2, 8, 64)), k=from_torch(torch.zeros(2, 2, 128, 64), BFP8),
                         v=from_torch(torch.zeros(2, 2, 128, 64), BFP8), cur_pos_source=None, scale=0.1,
                         compute=ComputeSettings(), attn_mask=torch.zeros(2, 1, 8, 128))
