"""Softmax blocks (DecodePlan.softmax_chunks): several read chunks share one online-softmax update
(kernels/flash_decode/online_softmax.hpp process_block), on bank-local paged plans, on the host runtime.
The planner's choice (plan/softmax_block.py), its refusals, the float64 reference with the project's
thresholds (ttdecode.accuracy) at blocks of 2 to 4 chunks over random page tables, -1 users and
block-boundary positions, and batch invariance."""

from __future__ import annotations

import pytest
import torch

from ttdecode.core.tensor import from_torch
from ttdecode.ops.flash_decode.plan import PlanError, make_plan

from tests.test_flash_decode import randn_with_outliers
from tests.test_flash_decode_bank_paged import (BF16, BFP8, assert_matches, assert_user0_ignores_the_rest, pool, reference,
                                          run, shuffled_table)

T3K = dict(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=32768, head_dim=128, cur_pos=[32767],
           max_cores_per_head_batch=16)


# Compute-bound bank-local points (the Llama-70B T3K chip at B 1, 8 q heads on one KV head; 32 q heads on one,
# chunks of 8 tiles): the fixed work a block saves outweighs the overlap it loses. The same chip at B 32
# (DRAM-bound) is the other way round.
T3K_B32 = dict(batch=32, num_q_heads=8, num_kv_heads=1, seq_len=32768, head_dim=128, cur_pos=[32767] * 32,
               max_cores_per_head_batch=16, kv_pages="key_row", block_size=32, num_blocks=2048)
HEAVY = dict(batch=1, num_q_heads=32, num_kv_heads=1, seq_len=32768, head_dim=128, cur_pos=[32767],
             max_cores_per_head_batch=16, kv_pages="key_row", block_size=64, num_blocks=1024, chunk_cap=8)


def test_the_planner_takes_a_block_only_where_the_pipeline_prices_it_shorter() -> None:
    """The planner's block (plan/softmax_block.py): of 1, powers of two and the piece's chunks, the one that fits
    L1 and the model's pipeline (a block's exps wait for its last K slot, its V slots hold the next block's
    reads back) prices shortest over both a sequential and a random page table. Tile or contiguous key_row pages, a paged cache of tile
    pages or a bf16 DST always keep one chunk per update."""
    heavy = make_plan(**HEAVY)
    assert (heavy.max_chunk_tiles, heavy.softmax_chunks) == (8, 8)
    t3k = make_plan(**T3K, kv_pages="key_row", block_size=64, num_blocks=512, chunk_cap=16)
    assert (t3k.max_chunk_tiles, t3k.softmax_chunks, t3k.spread_banks) == (16, 8, False)
    assert make_plan(**T3K_B32).softmax_chunks == 1
    assert make_plan(**T3K).softmax_chunks == 1
    assert make_plan(**T3K, kv_pages="key_row").softmax_chunks == 1
    assert make_plan(**T3K, block_size=64, num_blocks=512).softmax_chunks == 1
    assert make_plan(**HEAVY, fp32_dest_acc_en=False).softmax_chunks == 1
    # one chunk per piece: nothing to share
    short = make_plan(**{**T3K, "seq_len": 2048, "cur_pos": [2047]}, kv_pages="key_row", block_size=64,
                      num_blocks=64)
    assert short.softmax_chunks == 1


def test_blocks_that_cannot_run_or_fit_are_refused_by_name() -> None:
    with pytest.raises(PlanError, match="bank-local"):
        make_plan(**T3K, softmax_chunks=2)
    with pytest.raises(PlanError, match="fp32_dest_acc_en"):
        make_plan(**T3K, kv_pages="key_row", block_size=64, num_blocks=512, fp32_dest_acc_en=False, softmax_chunks=2)
    with pytest.raises(PlanError, match="softmax_chunks 64: .*overflow L1"):
        make_plan(**T3K, kv_pages="key_row", block_size=64, num_blocks=512, softmax_chunks=64)
    with pytest.raises(PlanError, match="at least 1"):
        make_plan(**T3K, kv_pages="key_row", block_size=64, num_blocks=512, softmax_chunks=0)
    # the planner's own choice falls back to fewer chunks where a block's buffers overflow L1
    assert make_plan(**HEAVY, l1_bytes_per_core=900 * 1024).softmax_chunks == 4


def _inputs(b: int, s: int, block: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    max_blocks, num_blocks = s // block, b * (s // block) + 5
    q = from_torch(randn_with_outliers((1, b, 8, 64), gen), BF16)
    k, v = pool(gen, num_blocks, 1, block, 64, BFP8), pool(gen, num_blocks, 1, block, 64, BFP8)
    return q, k, v, shuffled_table(b, max_blocks, num_blocks, seed=seed)


@pytest.mark.parametrize("softmax_chunks, grid", [(2, (8, 8)), (3, (8, 8)), (4, (8, 8)), (3, (4, 3))])
def test_blocks_equal_the_reference(softmax_chunks: int, grid: tuple[int, int]) -> None:
    """Pieces of 1 to 8 chunks of 8 tiles (blocks, a short last block, a lone last chunk), a random page table,
    a -1 user and positions at block and chunk boundaries; on 12 cores (4 pieces per user) a core runs two pieces one
    after the other (each piece's slots padded to whole blocks)."""
    b, s, block = 6, 4096, 64
    pos = [-1, 4095, 447, 1000, 255, 2048]
    q, k, v, table = _inputs(b, s, block, seed=softmax_chunks)
    plan, out, lse, _ = run(dict(batch=b, num_q_heads=8, num_kv_heads=1, seq_len=s, head_dim=64, kv_dtype=BFP8,
                                 chunk_cap=8, key_row_pieces=2 if grid == (8, 8) else 4,
                                 softmax_chunks=softmax_chunks, grid=grid),
                            q, k, v, pos, table, block)
    assert plan.softmax_chunks == softmax_chunks and plan.max_chunk_tiles == 8
    assert max(len(p) for p in plan.core_pieces.values()) == (1 if grid == (8, 8) else 2)
    assert_matches(out, lse, *reference(plan, q, k, v, pos, table), pos, f"softmax blocks of {softmax_chunks}")


@pytest.mark.parametrize("exp_approx", [False, True])
def test_a_users_output_in_blocks_ignores_the_other_users(exp_approx: bool) -> None:
    """Batch invariance with blocks: user 0's output bits stay the same when the other users' positions and
    page-table rows change (the second run on a perturbed schedule), at the accurate and the approximate exp
    (the one tt-metal's kernel runs with at most 16 q heads)."""
    b, s, block = 4, 4096, 64
    q, k, v, first = _inputs(b, s, block, seed=7)
    args = dict(batch=b, num_q_heads=8, num_kv_heads=1, seq_len=s, head_dim=64, kv_dtype=BFP8, chunk_cap=8,
                max_cores_per_head_batch=2, softmax_chunks=4)
    assert_user0_ignores_the_rest(args, q, k, v, block, first, shuffled_table(b, s // block, k.shape[0], seed=8),
                                  [4000, 5, 1023, -1], [4000, 3000, -1, 64], exp_approx=exp_approx)
