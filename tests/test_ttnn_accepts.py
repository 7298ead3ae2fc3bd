"""Inputs tt-metal's sdpa_decode (ttnn 0.81.1) accepts, run by ttdecode's kernels on the host runtime
(tests/mock/test_mock_accepts_ttnn_forms.py runs ttnn's own op and the device path on a mock N150).

Expected values come from the format definition (every bfloat8_b / bfloat4_b value is a bfloat16 value,
so converting Q or a mask changes no value: the output must be bit-identical to the same values given
in bfloat16) and from the reference backend."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ttdecode
from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import from_torch, to_torch


@pytest.mark.parametrize("dtype", [DataType.bfloat8_b, DataType.bfloat4_b])
def test_every_block_float_value_is_a_bfloat16_value(dtype: DataType) -> None:
    """The decode table of every (shared exponent, code) pair: float32 bits whose low 16 bits are zero,
    i.e. bfloat16 values (NaN patterns aside, which stay NaN)."""
    bits = formats._bfp_decode_table(7 if dtype is DataType.bfloat8_b else 3).astype(np.uint64)
    nan = ((bits & 0x7FFFFFFF) > 0x7F800000)
    assert not np.any((bits & 0xFFFF)[~nan]), "a block-float value with float32 bits below bfloat16's"
    assert nan.sum() < bits.size // 100  # the E=255 groups only


def _dequant_bf16(t) -> torch.Tensor:
    return to_torch(t).to(torch.bfloat16)


@pytest.mark.parametrize("dtype", [DataType.bfloat8_b, DataType.bfloat4_b])
def test_block_float_q_runs_as_its_bfloat16_values(dtype: DataType) -> None:
    torch.manual_seed(1)
    q = from_torch(torch.randn(1, 2, 8, 64), dtype)
    k, v = torch.randn(2, 2, 128, 64), torch.randn(2, 2, 128, 64)
    out = ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[5, 100], backend="host")
    same = ttdecode.scaled_dot_product_attention_decode(_dequant_bf16(q), k, v, cur_pos=[5, 100], backend="host")
    assert out.dtype == torch.bfloat16 and torch.equal(out.view(torch.int16), same.view(torch.int16))


def test_block_float_q_mla_paged_runs_as_its_bfloat16_values() -> None:
    torch.manual_seed(2)
    q = from_torch(torch.randn(1, 2, 16, 96), DataType.bfloat8_b)
    k = from_torch(torch.randn(8, 1, 32, 96), DataType.bfloat8_b)
    table = torch.tensor([[3, 1, 0, 2], [7, 6, 5, 4]], dtype=torch.int32)
    kw = dict(page_table=table, cur_pos=[40, 127], head_dim_v=64, backend="host")
    out = ttdecode.paged_scaled_dot_product_attention_decode(q, k, None, **kw)
    same = ttdecode.paged_scaled_dot_product_attention_decode(_dequant_bf16(q), k, None, **kw)
    assert torch.equal(out.view(torch.int16), same.view(torch.int16))


@pytest.mark.parametrize("dtype", [DataType.bfloat8_b, DataType.bfloat4_b])
def test_block_float_mask_runs_as_its_bfloat16_values(dtype: DataType) -> None:
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 2, 8, 64), torch.randn(2, 1, 128, 64), torch.randn(2, 1, 128, 64)
    values = torch.randn(2, 1, 8, 128)
    values[:, :, :, 96:] = -float("inf")  # whole face rows of -inf stay -inf
    mask = from_torch(values, dtype)
    kw = dict(is_causal=False, program_config=ttdecode.config.SDPAProgramConfig(k_chunk_size=64), backend="host")
    out = ttdecode.scaled_dot_product_attention_decode(q, k, v, attn_mask=mask, **kw)
    same = ttdecode.scaled_dot_product_attention_decode(q, k, v, attn_mask=_dequant_bf16(mask), **kw)
    assert torch.equal(out.view(torch.int16), same.view(torch.int16))


def test_page_table_entries_beyond_the_reach_may_hold_anything() -> None:
    """User 0 at position 40 reads blocks 0..1, user 1 at 127 blocks 0..3: -1 beyond gives the output
    of the same table padded with a valid id; a -1 within is refused by name (both users)."""
    torch.manual_seed(4)
    q, k, v = torch.randn(1, 2, 8, 64), torch.randn(8, 1, 32, 64), torch.randn(8, 1, 32, 64)
    padded = torch.tensor([[3, 1, -1, -1], [7, 6, 5, 4]], dtype=torch.int32)
    valid = torch.tensor([[3, 1, 0, 0], [7, 6, 5, 4]], dtype=torch.int32)
    for backend in ("host", "reference"):
        a = ttdecode.paged_scaled_dot_product_attention_decode(q, k, v, page_table=padded, cur_pos=[40, 127],
                                                               backend=backend)
        b = ttdecode.paged_scaled_dot_product_attention_decode(q, k, v, page_table=valid, cur_pos=[40, 127],
                                                               backend=backend)
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), backend
    with pytest.raises(ValueError, match=r"argument 'page_table\[0, 2\]': expected a block id in 0..7 \(user 0 at "
                                         r"position 64 reads entries 0..2; the entries beyond may hold anything\), got -1"):
        ttdecode.paged_scaled_dot_product_attention_decode(q, k, v, page_table=padded, cur_pos=[64, 127], backend="host")
    # a skipped user (-1) reaches no entry; non-causal, every user reaches all of them
    ttdecode.paged_scaled_dot_product_attention_decode(q, k, v, page_table=torch.full((2, 4), -1, dtype=torch.int32),
                                                       cur_pos=[-1, -1], backend="host")


def test_sliding_window_reach_starts_at_the_tokens_span() -> None:
    from ttdecode.ops.flash_decode.validate import reached_blocks

    assert reached_blocks(127, 32, None, 1) == range(0, 4)
    assert reached_blocks(127, 32, 40, 1) == range(2, 4)  # keys 88..127
    assert reached_blocks(127, 32, 40, 4) == range(2, 4)  # keys 85..127 (T-1 lookback)
    assert reached_blocks(127, 32, 33, 4) == range(2, 4)  # keys 92..127
    assert reached_blocks(100, 32, 30, 8) == range(2, 4)  # keys 64..100
    assert reached_blocks(100, 32, 30, 9) == range(1, 4)  # keys 63..100
    assert reached_blocks(-1, 32, None, 1) == range(0)


def test_mla_with_head_dim_v_equal_to_d_is_v_equal_k() -> None:
    torch.manual_seed(5)
    q, k = torch.randn(1, 2, 16, 64), torch.randn(2, 1, 128, 64)
    out = ttdecode.scaled_dot_product_attention_decode(q, k, None, cur_pos=[5, 100], head_dim_v=64, backend="host")
    ref = ttdecode.scaled_dot_product_attention_decode(q, k, k, cur_pos=[5, 100], backend="reference")
    assert out.shape == (1, 2, 16, 64)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)


def test_deepseek_mla_plans_when_max_cores_is_not_set_and_at_ttnn_s_default_of_16() -> None:
    from ttdecode.ops.flash_decode.plan import PlanError, make_plan

    shape = dict(batch=1, num_q_heads=128, num_kv_heads=1, seq_len=4096, head_dim=576, head_dim_v=512,
                 kv_dtype=DataType.bfloat8_b, block_size=32, num_blocks=128, mla=True, math_fidelity="HiFi4")
    plan = make_plan(max_cores_per_head_batch=None, **shape)
    assert plan.l1_bytes_per_core <= 1464 * 1024 and plan.pieces_per_work < 16
    # 16 pieces: the partials fit through the merge slot, the 256-key chunks do not: the planner takes dynamic
    # chunks of up to 128 keys; a caller's cap of 8 tiles is refused naming the fixed 128-key chunk, which fits
    short = make_plan(max_cores_per_head_batch=16, **shape)
    assert short.merge_slot and short.pieces_per_work == 16 and short.l1_bytes_per_core <= 1464 * 1024
    assert (short.chunk_cap, short.max_chunk_tiles, short.fixed_chunk_tiles) == (4, 4, 0)
    with pytest.raises(PlanError, match=r"L1 overflow: .*Set k_chunk_size=128 or lower"):
        make_plan(max_cores_per_head_batch=16, chunk_cap=8, **shape)
    slot = make_plan(max_cores_per_head_batch=16, k_chunk_size=128, **shape)
    assert slot.merge_slot and slot.pieces_per_work == 16 and slot.l1_bytes_per_core <= 1464 * 1024


def test_host_grid_up_to_8x9_and_refused_beyond_naming_the_limit() -> None:
    q, k, v = torch.randn(1, 1, 8, 64), torch.randn(1, 1, 64, 64), torch.randn(1, 1, 64, 64)
    cfg = ttdecode.config.SDPAProgramConfig
    ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[10], backend="host",
                                                 program_config=cfg(compute_with_storage_grid_size=(8, 9)))
    with pytest.raises(ValueError, match=r"'program_config.compute_with_storage_grid_size': expected a grid within "
                                         r"the largest Wormhole worker grid .*at most 8 columns x 9 rows, got \(8, 10\)"):
        ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[10], backend="host",
                                                     program_config=cfg(compute_with_storage_grid_size=(8, 10)))
