"""Tests of the float64 decode-attention reference (``ttdecode/reference.py``).

Oracles: torch's ``scaled_dot_product_attention`` in float64 with K/V repeated per
group and an explicit mask, ``torch.logsumexp`` for the LSE, and ttnn's own golden
function for the cases it supports. Inputs follow tt-metal's tests: N(0, 1) with 10x
outliers at probability 0.001.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
import torch
import torch.nn.functional as F

from ttdecode.reference import merge_partials, sdpa_decode_reference as ref

F64 = dict(rtol=1e-10, atol=1e-12)


def randn(*shape: int, seed: int) -> torch.Tensor:
    """N(0, 1) float64 samples with 10x outliers at probability 0.001."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    outlier = torch.rand(*shape, generator=g, dtype=torch.float64) < 1e-3
    return torch.where(outlier, 10 * x, x)


def causal_valid(cur_pos, S: int, window: Optional[int] = None) -> torch.Tensor:
    """Boolean ``[B, S]``: which positions each user attends."""
    s = torch.arange(S)[None, :]
    p = torch.tensor(cur_pos)[:, None]
    valid = s <= p
    if window is not None:
        valid &= s > p - window
    return valid


def torch_sdpa(q, k, v, mask, scale=None) -> torch.Tensor:
    """Oracle: torch SDPA, q ``[1,B,NH,D]``, k/v ``[B,NKV,S,*]``, mask ``[B or 1, NH or 1, S]``."""
    nh, nkv = q.shape[2], k.shape[1]
    kr = k.repeat_interleave(nh // nkv, dim=1)
    vr = v.repeat_interleave(nh // nkv, dim=1)
    out = F.scaled_dot_product_attention(q[0][:, :, None, :], kr, vr, attn_mask=mask[:, :, None, :], scale=scale)
    return out[:, :, 0, :][None]


def torch_lse(q, k, additive, scale) -> torch.Tensor:
    """Oracle LSE ``[1, B, NH]`` = logsumexp(scale * q.k + mask)."""
    nh, nkv = q.shape[2], k.shape[1]
    kr = k.repeat_interleave(nh // nkv, dim=1)
    logits = torch.einsum("bhd,bhsd->bhs", q[0], kr) * scale + additive
    return torch.logsumexp(logits, dim=-1)[None]


def bool_to_additive(valid: torch.Tensor) -> torch.Tensor:
    return torch.zeros(valid.shape, dtype=torch.float64).masked_fill(~valid, float("-inf"))


def make_case(B=3, NH=8, NKV=2, S=256, D=64, Dv=None, seed=0):
    q = randn(1, B, NH, D, seed=seed)
    k = randn(B, NKV, S, D, seed=seed + 1)
    v = randn(B, NKV, S, Dv or D, seed=seed + 2)
    return q, k, v


# --------------------------------------------------------------------------- causal


@pytest.mark.parametrize(
    "cur_pos", [[0, 0, 0], [255, 255, 255], [0, 131, 255], [31, 32, 33], [1, 200, 64]]
)
def test_causal_matches_torch_sdpa_at_positions(cur_pos):
    q, k, v = make_case()
    out = ref(q, k, v, cur_pos=cur_pos)
    expected = torch_sdpa(q, k, v, causal_valid(cur_pos, 256)[:, None, :])
    assert out.dtype == torch.float64 and out.shape == (1, 3, 8, 64)
    torch.testing.assert_close(out, expected, **F64)


def test_cur_pos_accepts_int_tensor_tuple_and_numpy_like_list():
    q, k, v = make_case()
    a = ref(q, k, v, cur_pos=[3, 100, 255])
    for same in (torch.tensor([3, 100, 255], dtype=torch.int32), (3, 100, 255), np.array([3, 100, 255])):
        torch.testing.assert_close(ref(q, k, v, cur_pos=same), a, rtol=0, atol=0)


@pytest.mark.parametrize(
    "NH,NKV", [(4, 4), (8, 1), (32, 8), (64, 1), (40, 2), (96, 3)], ids=["MHA", "MQA", "GQA4", "MQA64", "GQA20", "GQA32x3"]
)
def test_head_grouping_matches_repeated_kv(NH, NKV):
    q, k, v = make_case(B=2, NH=NH, NKV=NKV, S=128, D=32, seed=NH)
    cur_pos = [77, 127]
    out = ref(q, k, v, cur_pos=cur_pos)
    torch.testing.assert_close(out, torch_sdpa(q, k, v, causal_valid(cur_pos, 128)[:, None, :]), **F64)


def test_query_head_uses_kv_head_n_div_group():
    # Perturbing KV head 1 must change exactly query heads 4..7 when NH=8, NKV=2.
    q, k, v = make_case(B=1, NH=8, NKV=2)
    base = ref(q, k, v, cur_pos=[200])
    v2 = v.clone()
    v2[:, 1] += 1.0
    moved = (ref(q, k, v2, cur_pos=[200]) - base).abs().amax(dim=-1)[0, 0]
    assert bool((moved[:4] == 0).all()) and bool((moved[4:] > 0.5).all())


@pytest.mark.parametrize("window", [1, 7, 32, 100, 256, 1000])
def test_sliding_window_keeps_last_w_positions(window):
    q, k, v = make_case()
    cur_pos = [0, 50, 255]
    out = ref(q, k, v, cur_pos=cur_pos, sliding_window_size=window)
    valid = causal_valid(cur_pos, 256, window)
    torch.testing.assert_close(out, torch_sdpa(q, k, v, valid[:, None, :]), **F64)


def test_window_of_one_returns_value_at_cur_pos():
    q, k, v = make_case(NH=4, NKV=4)
    cur_pos = [9, 0, 255]
    out = ref(q, k, v, cur_pos=cur_pos, sliding_window_size=1)
    for b, p in enumerate(cur_pos):
        torch.testing.assert_close(out[0, b], v[b, :, p], **F64)


def test_scale_override_matches_torch():
    q, k, v = make_case()
    out = ref(q, k, v, cur_pos=[10, 20, 30], scale=0.3)
    expected = torch_sdpa(q, k, v, causal_valid([10, 20, 30], 256)[:, None, :], scale=0.3)
    torch.testing.assert_close(out, expected, **F64)


def test_cache_outside_window_is_never_read():
    q, k, v = make_case()
    cur_pos, window = [40, 100, 255], 20
    kn, vn = k.clone(), v.clone()
    outside = ~causal_valid(cur_pos, 256, window)
    kn[outside[:, None, :].expand(-1, 2, -1)] = float("nan")
    vn[outside[:, None, :].expand(-1, 2, -1)] = float("inf")
    a = ref(q, k, v, cur_pos=cur_pos, sliding_window_size=window)
    b = ref(q, kn, vn, cur_pos=cur_pos, sliding_window_size=window)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_skipped_user_gives_zero_output_and_minus_inf_lse():
    q, k, v = make_case()
    sink = randn(8, seed=9)
    out, lse = ref(q, k, v, cur_pos=[-1, 70, -1], attention_sink=sink, return_lse=True)
    assert bool((out[0, 0] == 0).all()) and bool((out[0, 2] == 0).all())
    assert bool(torch.isneginf(lse[0, 0]).all()) and bool(torch.isneginf(lse[0, 2]).all())
    alone, alone_lse = ref(q[:, 1:2], k[1:2], v[1:2], cur_pos=[70], attention_sink=sink, return_lse=True)
    torch.testing.assert_close(out[:, 1:2], alone, rtol=0, atol=0)
    torch.testing.assert_close(lse[:, 1:2], alone_lse, rtol=0, atol=0)


def test_mla_value_is_key_prefix():
    q, k, _ = make_case(NH=16, NKV=1, D=96)
    cur_pos = [5, 128, 255]
    out = ref(q, k, None, cur_pos=cur_pos, head_dim_v=64)
    assert out.shape == (1, 3, 16, 64)
    vv = k[..., :64]
    torch.testing.assert_close(out, torch_sdpa(q, k, vv, causal_valid(cur_pos, 256)[:, None, :]), **F64)
    torch.testing.assert_close(out, ref(q, k, vv.clone(), cur_pos=cur_pos, head_dim_v=64), rtol=0, atol=0)


def test_value_head_dim_may_differ_from_key_head_dim():
    q, k, v = make_case(D=64, Dv=48)
    out = ref(q, k, v, cur_pos=[1, 2, 3])
    torch.testing.assert_close(out, torch_sdpa(q, k, v, causal_valid([1, 2, 3], 256)[:, None, :]), **F64)


def test_float32_dtype_is_honoured_and_close_to_float64():
    q, k, v = make_case()
    q32, k32, v32 = q.float(), k.float(), v.float()
    out, lse = ref(q32, k32, v32, cur_pos=[3, 99, 255], return_lse=True, dtype=torch.float32)
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    out64, lse64 = ref(q32, k32, v32, cur_pos=[3, 99, 255], return_lse=True)
    torch.testing.assert_close(out.double(), out64, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), lse64, rtol=1e-5, atol=1e-5)


def test_bfloat16_inputs_are_upcast_not_computed_in_bf16():
    q, k, v = (t.bfloat16() for t in make_case())
    out = ref(q, k, v, cur_pos=[7, 8, 9])
    expected = torch_sdpa(q.double(), k.double(), v.double(), causal_valid([7, 8, 9], 256)[:, None, :])
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected, **F64)


@st.composite
def decode_cases(draw):
    """Random shapes and positions: (q, k, v, cur_pos, window, block_size)."""
    B = draw(st.integers(1, 3))
    NKV = draw(st.integers(1, 3))
    NH = NKV * draw(st.sampled_from([1, 2, 5, 33]))
    block_size = draw(st.sampled_from([1, 4, 32]))
    S = block_size * draw(st.integers(1, 4))
    D = draw(st.sampled_from([8, 32]))
    Dv = draw(st.sampled_from([8, 24]))
    cur_pos = draw(st.lists(st.integers(-1, S - 1), min_size=B, max_size=B))
    window = draw(st.one_of(st.none(), st.integers(1, S + 2)))
    seed = draw(st.integers(0, 2**16))
    q, k, v = make_case(B=B, NH=NH, NKV=NKV, S=S, D=D, Dv=Dv, seed=seed)
    return q, k, v, cur_pos, window, block_size


@settings(max_examples=40, deadline=None, database=None)
@given(decode_cases())
def test_random_shapes_match_torch_sdpa_and_paged_layout(case):
    q, k, v, cur_pos, window, block_size = case
    out, lse = ref(q, k, v, cur_pos=cur_pos, sliding_window_size=window, return_lse=True)
    assert out.shape == (1, q.shape[1], q.shape[2], v.shape[-1]) and lse.shape == (1, q.shape[1], q.shape[2])
    live = torch.tensor([p >= 0 for p in cur_pos])
    valid = causal_valid(cur_pos, k.shape[2], window)
    expected = torch_sdpa(q, k, v, valid[:, None, :])
    expected_lse = torch_lse(q, k, bool_to_additive(valid)[:, None, :], 1 / math.sqrt(q.shape[-1]))
    torch.testing.assert_close(out[:, live], expected[:, live], **F64)
    torch.testing.assert_close(lse[:, live], expected_lse[:, live], **F64)
    assert bool((out[:, ~live] == 0).all()) and bool(torch.isneginf(lse[:, ~live]).all())
    kp, table = to_paged(k, block_size, seed=len(cur_pos))
    vp, _ = to_paged(v, block_size, seed=len(cur_pos))
    paged = ref(q, kp, vp, cur_pos=cur_pos, sliding_window_size=window, page_table=table)
    torch.testing.assert_close(paged, out, rtol=0, atol=0)


# --------------------------------------------------------------------------- paged / shared


def to_paged(cache: torch.Tensor, block_size: int, seed: int, spare_blocks: int = 3):
    """Scatter ``[B, NKV, S, X]`` into a shuffled paged cache; returns (paged, page_table int32)."""
    B, NKV, S, X = cache.shape
    nb = S // block_size
    total = B * nb + spare_blocks
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[: B * nb]
    table = perm.reshape(B, nb).to(torch.int32)
    paged = torch.full((total, NKV, block_size, X), float("nan"), dtype=cache.dtype)
    blocks = cache.reshape(B, NKV, nb, block_size, X).permute(0, 2, 1, 3, 4)  # [B, nb, NKV, bs, X]
    paged[table.long()] = blocks
    return paged, table


@pytest.mark.parametrize("block_size", [32, 64])
def test_paged_equals_contiguous_with_shuffled_page_table(block_size):
    q, k, v = make_case(B=4, S=256)
    kp, table = to_paged(k, block_size, seed=block_size)
    vp, table_v = to_paged(v, block_size, seed=block_size)
    assert torch.equal(table, table_v)
    cur_pos = [0, 31, 32, 255]
    for window in (None, 40):
        a, la = ref(q, k, v, cur_pos=cur_pos, sliding_window_size=window, return_lse=True)
        b, lb = ref(q, kp, vp, cur_pos=cur_pos, page_table=table, sliding_window_size=window, return_lse=True)
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(la, lb, rtol=0, atol=0)


def test_paged_mla_equals_contiguous_mla():
    q, k, _ = make_case(B=2, NH=8, NKV=1, D=96)
    kp, table = to_paged(k, 32, seed=5)
    a = ref(q, k, None, cur_pos=[100, 255], head_dim_v=64)
    b = ref(q, kp, None, cur_pos=[100, 255], head_dim_v=64, page_table=table)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_paged_non_causal_equals_contiguous():
    q, k, v = make_case(B=2)
    kp, table = to_paged(k, 64, seed=1)
    vp, _ = to_paged(v, 64, seed=1)
    mask = randn(2, 1, 8, 256, seed=4)
    a = ref(q, k, v, is_causal=False, attn_mask=mask)
    b = ref(q, kp, vp, is_causal=False, attn_mask=mask, page_table=table)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_share_cache_every_user_reads_batch_zero():
    q, k, v = make_case(B=3)
    k1, v1 = k[:1], v[:1]
    cur_pos = [10, 200, 255]
    out = ref(q, k1, v1, cur_pos=cur_pos, share_cache=True)
    expected = torch_sdpa(q, k1.expand(3, -1, -1, -1), v1.expand(3, -1, -1, -1), causal_valid(cur_pos, 256)[:, None, :])
    torch.testing.assert_close(out, expected, **F64)


# --------------------------------------------------------------------------- non-causal


@pytest.mark.parametrize("mask_batch", [1, 3])
def test_non_causal_additive_mask_matches_torch(mask_batch):
    q, k, v = make_case()
    mask = randn(mask_batch, 1, 8, 256, seed=11)
    mask[..., 100:140] = float("-inf")
    out, lse = ref(q, k, v, is_causal=False, attn_mask=mask, return_lse=True)
    add = mask[:, 0].expand(3, -1, -1)
    torch.testing.assert_close(out, torch_sdpa(q, k, v, add), **F64)
    torch.testing.assert_close(lse, torch_lse(q, k, add, 1 / 8), **F64)


def test_non_causal_without_mask_attends_every_position():
    q, k, v = make_case()
    out = ref(q, k, v, is_causal=False)
    torch.testing.assert_close(out, torch_sdpa(q, k, v, torch.ones(3, 1, 256, dtype=torch.bool)), **F64)


def test_fully_masked_row_gives_zero_and_minus_inf():
    q, k, v = make_case(B=2)
    mask = torch.zeros(2, 1, 8, 256, dtype=torch.float64)
    mask[1, 0, 3] = float("-inf")
    out, lse = ref(q, k, v, is_causal=False, attn_mask=mask, return_lse=True)
    assert bool((out[0, 1, 3] == 0).all()) and bool(torch.isneginf(lse[0, 1, 3]))
    assert bool(torch.isfinite(out).all()) and int(torch.isinf(lse).sum()) == 1


# --------------------------------------------------------------------------- sink and LSE


def sink_oracle(q, k, v, valid, sink, scale):
    """Oracle with the sink as an extra key of logit ``scale*sink`` and a zero value."""
    B, NKV, S, D = k.shape
    NH = q.shape[2]
    kx = torch.cat([k, torch.zeros(B, NKV, 1, D, dtype=k.dtype)], dim=2)
    vx = torch.cat([v, torch.zeros(B, NKV, 1, v.shape[-1], dtype=v.dtype)], dim=2)
    add = bool_to_additive(valid)[:, None, :].expand(B, NH, S)
    add = torch.cat([add, (scale * sink)[None, :, None].expand(B, NH, 1)], dim=-1)
    return torch_sdpa(q, kx, vx, add, scale=scale), torch_lse(q, kx, add, scale)


@pytest.mark.parametrize("form", ["flat", "tile"])
def test_attention_sink_equals_extra_key_column(form):
    q, k, v = make_case()
    sink = randn(8, seed=3) * 4
    given = sink if form == "flat" else torch.cat([sink[:, None], randn(8, 31, seed=8)], dim=1)
    cur_pos = [0, 77, 255]
    out, lse = ref(q, k, v, cur_pos=cur_pos, attention_sink=given, scale=0.2, return_lse=True)
    exp_out, exp_lse = sink_oracle(q, k, v, causal_valid(cur_pos, 256), sink, 0.2)
    torch.testing.assert_close(out, exp_out, **F64)
    torch.testing.assert_close(lse, exp_lse, **F64)


def test_dominant_sink_drives_output_to_zero():
    q, k, v = make_case()
    out = ref(q, k, v, cur_pos=[5, 6, 7], attention_sink=torch.full((8,), 1e4, dtype=torch.float64))
    assert float(out.abs().max()) < 1e-30


@pytest.mark.parametrize("window", [None, 16])
def test_lse_matches_torch_logsumexp(window):
    q, k, v = make_case(NH=12, NKV=3)
    cur_pos = [0, 100, 255]
    _, lse = ref(q, k, v, cur_pos=cur_pos, sliding_window_size=window, return_lse=True)
    add = bool_to_additive(causal_valid(cur_pos, 256, window))[:, None, :]
    assert lse.shape == (1, 3, 12)
    torch.testing.assert_close(lse, torch_lse(q, k, add, 1 / 8), **F64)


def test_huge_logits_stay_finite():
    q, k, v = make_case()
    out, lse = ref(q * 1e3, k, v, cur_pos=[255, 255, 255], return_lse=True)
    assert bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all())
    torch.testing.assert_close(out, torch_sdpa(q * 1e3, k, v, causal_valid([255] * 3, 256)[:, None, :]), **F64)


# --------------------------------------------------------------------------- merge_partials


def causal_partial(q, k, v, cur_pos, a, b, sink=None):
    """Reference over key range [a, b) for causal positions, as a FlashDecode piece would."""
    pos = [min(p, b - 1) - a if p >= a else -1 for p in cur_pos]
    return ref(q, k[:, :, a:b], v[:, :, a:b], cur_pos=pos, attention_sink=sink, return_lse=True)


@pytest.mark.parametrize("cuts", [[0, 256], [0, 128, 256], [0, 1, 2, 100, 255, 256], [0, 32, 64, 96, 128, 160, 192, 224, 256]])
def test_merge_partials_over_causal_splits_is_exact(cuts):
    q, k, v = make_case()
    cur_pos = [0, 99, 255]
    sink = randn(8, seed=12)
    full, full_lse = ref(q, k, v, cur_pos=cur_pos, attention_sink=sink, return_lse=True)
    parts = [causal_partial(q, k, v, cur_pos, a, b, sink if i == 0 else None) for i, (a, b) in enumerate(zip(cuts, cuts[1:]))]
    out, lse = merge_partials([p[0] for p in parts], [p[1] for p in parts])
    torch.testing.assert_close(out, full, **F64)
    torch.testing.assert_close(lse, full_lse, **F64)


def test_merge_partials_over_masked_splits_in_tree_order_is_exact():
    q, k, v = make_case(B=2)
    mask = randn(2, 1, 8, 256, seed=21)
    full, full_lse = ref(q, k, v, is_causal=False, attn_mask=mask, return_lse=True)
    cuts = [0, 17, 64, 65, 200, 256]
    parts = [ref(q, k[:, :, a:b], v[:, :, a:b], is_causal=False, attn_mask=mask[..., a:b], return_lse=True)
             for a, b in zip(cuts, cuts[1:])]
    left = merge_partials([p[0] for p in parts[:2]], [p[1] for p in parts[:2]])
    right = merge_partials([p[0] for p in parts[2:]], [p[1] for p in parts[2:]])
    out, lse = merge_partials([left[0], right[0]], [left[1], right[1]])
    torch.testing.assert_close(out, full, **F64)
    torch.testing.assert_close(lse, full_lse, **F64)


def test_merge_partials_ignores_empty_partials_even_with_nan_output():
    o = randn(2, 4, 16, seed=1)
    l = randn(2, 4, seed=2)
    empty_o = torch.full_like(o, float("nan"))
    empty_l = torch.full_like(l, float("-inf"))
    out, lse = merge_partials([empty_o, o, empty_o], [empty_l, l, empty_l])
    torch.testing.assert_close(out, o, rtol=0, atol=0)
    torch.testing.assert_close(lse, l, rtol=0, atol=0)
    out0, lse0 = merge_partials([empty_o], [empty_l])
    assert bool((out0 == 0).all()) and bool(torch.isneginf(lse0).all())


def test_merge_partials_weighs_by_exp_lse():
    o1, o2 = torch.zeros(1, 3, dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64)
    out, lse = merge_partials([o1, o2], [torch.tensor([0.0], dtype=torch.float64), torch.tensor([math.log(3.0)], dtype=torch.float64)])
    torch.testing.assert_close(out, torch.full((1, 3), 0.75, dtype=torch.float64), **F64)
    torch.testing.assert_close(lse, torch.tensor([math.log(4.0)], dtype=torch.float64), **F64)


@pytest.mark.parametrize(
    "outs,lses,exc,match",
    [
        ([], [], TypeError, "'outs'"),
        (torch.zeros(2, 3), [torch.zeros(2)], TypeError, "'outs'"),
        ([torch.zeros(2, 3)], [], ValueError, "'lses'.*1 tensors"),
        ([torch.zeros(2, 3)], [torch.zeros(3)], ValueError, r"'lses\[0\]'.*\[2\]"),
        ([torch.zeros(2, 3), torch.zeros(2, 4)], [torch.zeros(2), torch.zeros(2)], ValueError, r"'outs\[1\]'"),
        ([torch.zeros(2, 3, dtype=torch.int32)], [torch.zeros(2)], TypeError, r"'outs\[0\]'"),
        ([torch.zeros(2, 3)], ["x"], TypeError, r"'lses\[0\]'"),
    ],
)
def test_merge_partials_rejects_bad_arguments(outs, lses, exc, match):
    with pytest.raises(exc, match=match):
        merge_partials(outs, lses)


# --------------------------------------------------------------------------- errors


def _args(**over):
    q, k, v = make_case(B=2, NH=8, NKV=2, S=64, D=32)
    kw = dict(q=q, k=k, v=v, cur_pos=[1, 2])
    kw.update(over)
    return kw


def _bad_cases():
    q, k, v = make_case(B=2, NH=8, NKV=2, S=64, D=32)
    kp, table = to_paged(k, 32, seed=0, spare_blocks=0)
    vp, _ = to_paged(v, 32, seed=0, spare_blocks=0)
    f64 = torch.float64
    return [
        ("q-not-tensor", dict(q=q.numpy()), TypeError, "'q'.*torch.Tensor"),
        ("q-int", dict(q=q.long()), TypeError, "'q'.*floating"),
        ("q-3d", dict(q=q[0]), ValueError, "'q'.*4-D"),
        ("q-dim0", dict(q=q[:0]), ValueError, r"'q'.*\[T>=1, B"),
        ("multi-token-cur-pos", dict(q=q.expand(3, -1, -1, -1)), ValueError, r"'cur_pos\[0\]'.*>= T - 1 = 2"),
        ("k-3d", dict(k=k[0]), ValueError, "'k'.*4-D"),
        ("k-head-dim", dict(k=k[..., :16], v=v), ValueError, "'k'.*D=32"),
        ("nh-not-multiple", dict(k=randn(2, 3, 64, 32, seed=1), v=randn(2, 3, 64, 32, seed=1)), ValueError, "'k'.*dividing NH=8"),
        ("k-batch", dict(k=k[:1], v=v[:1]), ValueError, "'k'.*B=2"),
        ("v-shape", dict(v=v[:, :, :10]), ValueError, "'v'.*first three dims"),
        ("v-int", dict(v=v.long()), TypeError, "'v'.*floating"),
        ("mla-no-dv", dict(v=None), ValueError, "'head_dim_v'.*v is None"),
        ("mla-dv-too-big", dict(v=None, head_dim_v=32), ValueError, "'head_dim_v'.*< D=32"),
        ("mla-dv-zero", dict(v=None, head_dim_v=0), ValueError, "'head_dim_v'.*>= 1"),
        ("dv-mismatch", dict(head_dim_v=16), ValueError, "'head_dim_v'.*32"),
        ("no-cur-pos", dict(cur_pos=None), ValueError, "'cur_pos'.*causal"),
        ("cur-pos-len", dict(cur_pos=[1, 2, 3]), ValueError, "'cur_pos'.*B=2.*3"),
        ("cur-pos-high", dict(cur_pos=[1, 64]), ValueError, r"'cur_pos\[1\]'.*-1\.\.63.*64"),
        ("cur-pos-low", dict(cur_pos=[-2, 0]), ValueError, r"'cur_pos\[0\]'.*-1\.\.63.*-2"),
        ("cur-pos-float", dict(cur_pos=[1.5, 2]), TypeError, r"'cur_pos\[0\]'.*integer"),
        ("cur-pos-float-tensor", dict(cur_pos=torch.tensor([1.0, 2.0])), TypeError, "'cur_pos'.*integer tensor"),
        ("cur-pos-2d-tensor", dict(cur_pos=torch.tensor([[1, 2]])), ValueError, "'cur_pos'.*1-D"),
        ("cur-pos-int", dict(cur_pos=5), TypeError, "'cur_pos'.*sequence"),
        ("window-zero", dict(sliding_window_size=0), ValueError, "'sliding_window_size'.*>= 1"),
        ("window-float", dict(sliding_window_size=2.5), TypeError, "'sliding_window_size'.*integer"),
        ("mask-in-causal", dict(attn_mask=torch.zeros(2, 1, 8, 64, dtype=f64)), ValueError, "'attn_mask'.*causal"),
        ("cur-pos-non-causal", dict(is_causal=False), ValueError, "'cur_pos'.*non-causal"),
        ("window-non-causal", dict(is_causal=False, cur_pos=None, sliding_window_size=4), ValueError, "'sliding_window_size'.*non-causal"),
        ("mask-shape", dict(is_causal=False, cur_pos=None, attn_mask=torch.zeros(2, 1, 8, 63, dtype=f64)), ValueError, r"'attn_mask'.*S=64.*63"),
        ("mask-batch", dict(is_causal=False, cur_pos=None, attn_mask=torch.zeros(3, 1, 8, 64, dtype=f64)), ValueError, r"'attn_mask'.*B=2 or 1"),
        ("mask-bool", dict(is_causal=False, cur_pos=None, attn_mask=torch.ones(2, 1, 8, 64, dtype=torch.bool)), TypeError, "'attn_mask'.*additive"),
        ("mask-nan", dict(is_causal=False, cur_pos=None, attn_mask=torch.full((2, 1, 8, 64), float("nan"), dtype=f64)), ValueError, "'attn_mask'.*NaN"),
        ("sink-shape", dict(attention_sink=torch.zeros(4, dtype=f64)), ValueError, r"'attention_sink'.*\[NH=8\]"),
        ("sink-int", dict(attention_sink=torch.zeros(8, dtype=torch.int32)), TypeError, "'attention_sink'.*floating"),
        ("scale-str", dict(scale="0.1"), TypeError, "'scale'"),
        ("scale-nan", dict(scale=float("nan")), ValueError, "'scale'.*finite"),
        ("dtype", dict(dtype=torch.float16), TypeError, "'dtype'.*float64"),
        ("causal-not-bool", dict(is_causal=None), TypeError, "'is_causal'.*bool"),
        ("share-cache-not-bool", dict(share_cache=1), TypeError, "'share_cache'.*bool"),
        ("k-no-positions", dict(k=k[:, :, :0], v=v[:, :, :0]), ValueError, "'k'.*at least one position"),
        ("mla-dv-float", dict(v=None, head_dim_v=8.0), TypeError, "'head_dim_v'.*integer"),
        ("share-cache-batch", dict(share_cache=True), ValueError, "'k'.*share_cache"),
        ("share-cache-paged", dict(k=kp, v=vp, page_table=table, share_cache=True), ValueError, "'share_cache'.*page_table"),
        ("table-float", dict(k=kp, v=vp, page_table=table.float()), TypeError, "'page_table'.*integer"),
        ("table-shape", dict(k=kp, v=vp, page_table=table[:1]), ValueError, r"'page_table'.*\[B=2"),
        ("table-block-id", dict(k=kp, v=vp, page_table=table.clone().fill_(4)), ValueError, r"'page_table\[0, 0\]'.*0\.\.3.*4"),
        ("table-negative", dict(k=kp, v=vp, page_table=torch.tensor([[0, -1], [2, 3]], dtype=torch.int32)), ValueError, r"'page_table\[0, 1\]'"),
        ("paged-cur-pos", dict(k=kp, v=vp, page_table=table, cur_pos=[0, 64]), ValueError, r"'cur_pos\[1\]'.*-1\.\.63"),
        ("paged-v-blocks", dict(k=kp, v=vp[:3], page_table=table), ValueError, "'v'.*first three dims"),
    ]


@pytest.mark.parametrize("name,over,exc,match", _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_bad_argument_raises_naming_it(name, over, exc, match):
    kw = _args(**over)
    with pytest.raises(exc, match=match) as info:
        ref(kw.pop("q"), kw.pop("k"), kw.pop("v"), **kw)
    assert "expected" in str(info.value) and "got" in str(info.value)


# --------------------------------------------------------------------------- ttnn golden


def golden(ttnn, name):
    return getattr(ttnn.transformer, name).golden_function


@pytest.mark.parametrize("window", [None, 1, 33])
@pytest.mark.parametrize("NH,NKV", [(8, 2), (32, 1), (4, 4)])
def test_matches_ttnn_golden_causal(ttnn, NH, NKV, window):
    q, k, v = make_case(B=4, NH=NH, NKV=NKV, S=128, D=64, seed=NH + NKV)
    cur_pos = [0, 31, 100, 127]
    g = golden(ttnn, "scaled_dot_product_attention_decode")
    expected = g(q, k, v, cur_pos=cur_pos, sliding_window_size=window)
    torch.testing.assert_close(ref(q, k, v, cur_pos=cur_pos, sliding_window_size=window), expected, **F64)


def test_matches_ttnn_golden_skip_scale_and_share_cache(ttnn):
    q, k, v = make_case(B=3, S=128)
    cur_pos = [-1, 64, 127]
    g = golden(ttnn, "scaled_dot_product_attention_decode")
    expected = g(q, k[:1], v[:1], cur_pos=cur_pos, scale=0.11, share_cache=True)
    out = ref(q, k[:1], v[:1], cur_pos=cur_pos, scale=0.11, share_cache=True)
    torch.testing.assert_close(out, expected, **F64)


@pytest.mark.parametrize("mask_batch", [1, 3])
def test_matches_ttnn_golden_non_causal_mask(ttnn, mask_batch):
    q, k, v = make_case(B=3, S=128)
    mask = randn(mask_batch, 1, 8, 128, seed=2)
    mask[..., :20] = float("-inf")
    g = golden(ttnn, "scaled_dot_product_attention_decode")
    expected = g(q, k, v, is_causal=False, attn_mask=mask)
    torch.testing.assert_close(ref(q, k, v, is_causal=False, attn_mask=mask), expected, **F64)


def test_matches_ttnn_golden_attention_sink(ttnn):
    # ttnn's golden evaluates the sink path in float32, hence the float32 tolerance.
    q, k, v = make_case(B=2, NH=8, NKV=1, S=128)
    sink = torch.cat([randn(8, 1, seed=5) * 3, torch.zeros(8, 31, dtype=torch.float64)], dim=1)
    cur_pos = [3, 127]
    g = golden(ttnn, "scaled_dot_product_attention_decode")
    expected = g(q, k, v, cur_pos=cur_pos, attention_sink=sink, sliding_window_size=50)
    out = ref(q, k, v, cur_pos=cur_pos, attention_sink=sink, sliding_window_size=50)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_matches_ttnn_golden_paged(ttnn):
    q, k, v = make_case(B=3, S=128)
    kp, table = to_paged(k, 32, seed=7, spare_blocks=0)
    vp, _ = to_paged(v, 32, seed=7, spare_blocks=0)
    cur_pos = torch.tensor([5, 64, 127], dtype=torch.int32)
    g = golden(ttnn, "paged_scaled_dot_product_attention_decode")
    expected = g(q, kp, vp, table, cur_pos_tensor=cur_pos)
    torch.testing.assert_close(ref(q, kp, vp, cur_pos=cur_pos, page_table=table), expected, **F64)


def test_matches_ttnn_golden_mla(ttnn):
    q, k, _ = make_case(B=2, NH=16, NKV=1, S=128, D=96)
    g = golden(ttnn, "flash_multi_latent_attention_decode")
    expected = g(q, k, None, head_dim_v=64, cur_pos=[10, 127])
    torch.testing.assert_close(ref(q, k, None, cur_pos=[10, 127], head_dim_v=64), expected, **F64)
