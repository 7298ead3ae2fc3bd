"""FlashDecode over a paged cache of 16-position blocks (block_size 16) on the host runtime.

ttnn stores a ``[num_blocks, NKV, 16, D]`` pool in the TILE layout with one tile row per (block, KV head):
rows 0-15 hold the block's positions, rows 16-31 are padding. The reader builds each 32-key tile from rows
0-15 of two blocks' tiles (blocks ``2t`` and ``2t + 1`` of the user's page-table row) and never reads the
padding, so the padding may hold anything (NaN here) without reaching the output. Every run is checked
against the float64 reference of the values the kernels read (thresholds from ttdecode.accuracy).
"""

from __future__ import annotations

import math
from typing import Sequence

import pytest
import torch

from ttdecode.accuracy import check_close, check_lse
from ttdecode.api import paged_scaled_dot_product_attention_decode, scaled_dot_product_attention_decode
from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.program_description import KernelKind
from ttdecode.core.tensor import TileTensor, from_torch, to_torch
from ttdecode.ops.flash_decode.plan import PlanError, make_plan
from ttdecode.perf_model.counters import work_from_counters

from tests.test_flash_decode import randn_with_outliers
from tests.test_flash_decode_paged import (assert_matches, paged_reference, paginate, run, table_row_loads,
                                          shuffled_table)

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b
BLOCK = 16
NAN = float("nan")


def nan_padded(blocks: torch.Tensor, dtype: DataType) -> TileTensor:
    """The tile image of a ``[num_blocks, NKV, 16, D]`` pool whose padding rows 16-31 hold NaN (as device
    memory might), with the pool's logical shape."""
    n, nkv, rows, d = blocks.shape
    full = torch.full((n, nkv, 2 * rows, d), NAN)
    full[:, :, :rows] = blocks
    return TileTensor(tuple(blocks.shape), dtype, from_torch(full, dtype).data)


def boundary_positions(s: int) -> list[int]:
    """-1, the block and tile boundaries 15, 16, 31, 32, 47, 48, and a few inside and at the end."""
    return [-1, 0, 15, 16, 31, 32, 47, 48, 100, s - 17, s - 16, s - 1]


@pytest.mark.parametrize("kv", [BF16, BFP8, BFP4], ids=lambda t: t.value)
def test_block16_matches_the_reference_with_nan_padding(kv: DataType) -> None:
    pos = boundary_positions(256)
    b, nh, nkv, s, d = len(pos), 8, 2, 256, 64
    gen = torch.Generator().manual_seed(161)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    max_blocks = s // BLOCK
    num_blocks = b * max_blocks + 3
    kb = randn_with_outliers((num_blocks, nkv, BLOCK, d), gen)
    vb = randn_with_outliers((num_blocks, nkv, BLOCK, d), gen)
    kp, vp = nan_padded(kb, kv), nan_padded(vb, kv)
    padded = to_torch(TileTensor((num_blocks, nkv, 2 * BLOCK, d), kv, kp.data))
    assert torch.isnan(padded[:, :, BLOCK:]).all() and torch.isfinite(padded[:, :, :BLOCK]).all()
    table = shuffled_table(b, max_blocks, num_blocks, seed=16)
    plan, out, lse, result = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d,
                                      kv_dtype=kv, max_cores_per_head_batch=4), q, kp, vp, pos,
                                 table=table, block_size=BLOCK)
    assert plan.block_size == BLOCK
    assert_matches(out, lse, *paged_reference(q, kp, vp, pos, table), pos, f"block 16, {kv.value}")


def unreached_as_minus_one(table: torch.Tensor, pos: Sequence[int], window: int, tokens: int) -> torch.Tensor:
    """`table` with every entry no user reaches set to -1 (vLLM's padding): a half tile whose block holds no
    attended key must not be read."""
    out = torch.full_like(table, -1)
    for u, p in enumerate(pos):
        if p < 0:
            continue
        first = 0 if not window else max(0, p - (window + tokens - 1) + 1)
        out[u, first // BLOCK: p // BLOCK + 1] = table[u, first // BLOCK: p // BLOCK + 1]
    return out


CASES = {
    "plain": dict(),
    "window_40": dict(sliding_window_size=40),
    "window_17_tokens_3": dict(sliding_window_size=17, tokens=3),
    "tokens_4": dict(tokens=4),
    "sink": dict(sink=True),
    "mla": dict(mla=True),
    "mask": dict(mask=True),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kv", [BF16, BFP8], ids=lambda t: t.value)
def test_block16_gives_the_bits_of_the_contiguous_cache(kv: DataType, case: str) -> None:
    # The same keys in a contiguous cache and in a shuffled block-16 pool (NaN padding, -1 in every entry
    # no user reaches) give the same output bits: the reader's key tiles are the contiguous cache's.
    c = CASES[case]
    tokens, window = c.get("tokens", 1), c.get("sliding_window_size")
    pos = [p for p in boundary_positions(192) if p < 0 or p >= tokens - 1]
    if c.get("mask"):
        pos = [192 - 1] * 3
    b, nh, nkv, s, d = len(pos), 8, 2, 192, 64
    dv = 32 if c.get("mla") else d
    gen = torch.Generator().manual_seed(len(case) + 7)
    q = randn_with_outliers((tokens, b, nh, d), gen)
    k = randn_with_outliers((b, nkv, s, d), gen)
    v = None if c.get("mla") else randn_with_outliers((b, nkv, s, dv), gen)
    max_blocks = s // BLOCK
    num_blocks = b * max_blocks + 1
    table = shuffled_table(b, max_blocks, num_blocks, seed=5)
    reach = table if c.get("mask") else unreached_as_minus_one(table, pos, window or 0, tokens)
    kp = nan_padded(paginate(k, table, num_blocks, BLOCK, fill=NAN), kv)
    vp = None if v is None else nan_padded(paginate(v, table, num_blocks, BLOCK, fill=NAN), kv)
    common = dict(scale=1.0 / math.sqrt(d), sliding_window_size=window, return_lse=True, backend="host",
                  head_dim_v=dv if c.get("mla") else None)
    if c.get("sink"):
        common["attention_sink"] = torch.randn(nh, generator=gen)
    if c.get("mask"):
        mask = torch.where(torch.rand(b, 1, nh, s, generator=gen) < 0.3, -math.inf, 0.0)
        mask[..., -1] = 0.0
        common.update(is_causal=False, attn_mask=mask)
    else:
        common["cur_pos"] = pos
    out_c, lse_c = scaled_dot_product_attention_decode(
        q, from_torch(k, kv), None if v is None else from_torch(v, kv), **common)
    out_p, lse_p = paged_scaled_dot_product_attention_decode(q, kp, vp, reach, **common)
    assert torch.equal(out_p.view(torch.int16), out_c.view(torch.int16)), case
    assert torch.equal(lse_p, lse_c), case
    ref_args = {**common, "backend": "reference"}
    ref, ref_lse = paged_scaled_dot_product_attention_decode(q, kp, vp, reach, **ref_args)
    for u, p in enumerate(pos):
        if p >= 0:
            check_close(out_p[:, u], ref[:, u], f"block 16 {case}: user {u} (cur_pos {p})")
    check_lse(lse_p, ref_lse, f"block 16 {case}: LSE")


@pytest.mark.parametrize("kv", [BF16, BFP8], ids=lambda t: t.value)
def test_block16_reader_reads_the_attended_halves_once_and_never_the_padding(kv: DataType) -> None:
    # DRAM bytes of K/V: half a tile (rows 0-15) per attended block, KV head and D tile -- the bytes of the
    # same keys in blocks of 32 (in twice the read requests), less the half tiles past cur_pos
    pos = [255, 100, 15, 16, -1]
    b, nh, nkv, s, d = len(pos), 16, 2, 256, 128
    gen = torch.Generator().manual_seed(20)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    max_blocks = s // BLOCK
    num_blocks = b * max_blocks
    kp = nan_padded(randn_with_outliers((num_blocks, nkv, BLOCK, d), gen), kv)
    vp = nan_padded(randn_with_outliers((num_blocks, nkv, BLOCK, d), gen), kv)
    table = shuffled_table(b, max_blocks, num_blocks, seed=20)
    plan, out, lse, result = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv,
                                      max_cores_per_head_batch=4), q, kp, vp, pos, table=table, block_size=BLOCK)
    assert_matches(out, lse, *paged_reference(q, kp, vp, pos, table), pos, f"block 16 bytes, {kv.value}")
    readers = [kc for kc in result.counters.kernels if kc.kind is KernelKind.READER]
    halves = sum(p // BLOCK + 1 for p in pos if p >= 0)
    kv_bytes = halves * nkv * (plan.d_tiles + plan.dv_tiles) * tile_size(kv) // 2
    with_work = [pc for pc in plan.pieces if not plan.range_at(pos[pc.user], pc.index).empty]
    q_bytes = len(with_work) * plan.group_size * d * 2
    pos_bytes = 4 * b * len(readers)
    table_bytes = table_row_loads(plan, pos)[0] * 4 * max_blocks
    assert sum(sum(kc.dram_read_bytes) for kc in readers) == kv_bytes + q_bytes + pos_bytes + table_bytes
    # the cost model finds the same K/V bytes among the reader's events (half tiles, block floats' exponents
    # and codes apart), and the chunks' read groups as its pipeline stages
    works, _, _ = work_from_counters(plan, result.counters)
    assert sum(w.kv_bytes for w in works) == kv_bytes
    assert max(w.chunks for w in works) > 1


def test_planner_takes_block16_in_tile_and_key_row_pages() -> None:
    base = dict(batch=1, num_q_heads=8, num_kv_heads=2, seq_len=256, head_dim=64, cur_pos=[100], num_blocks=16)
    assert make_plan(**base, block_size=BLOCK).max_blocks == 16
    with pytest.raises(PlanError, match="block_size: expected a multiple of 32 or 16, got 8"):
        make_plan(**base, block_size=8)
    bank_local = make_plan(**base, block_size=BLOCK, kv_pages="key_row")  # tests/test_flash_decode_bank_paged16.py
    assert bank_local.bank_local and bank_local.max_blocks == 16
