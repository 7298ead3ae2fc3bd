"""The bank-balancing block allocator (kv_cache.BlockAllocator policy "balanced"): the banks are counted from
the page tables it hands out, page by page, with the pool's own arithmetic written out here (page k =
(block * NKV + h) * bt + r lives in bank k % NB), not with the allocator's residue classes."""

from __future__ import annotations

import numpy as np
import pytest

from ttdecode.models.kv_cache import BlockAllocator, ContextParallelAllocator, policy_for, residue_classes


def banks_of(table: list[int], tiles: int, head: int, nkv: int, block: int, nb: int) -> np.ndarray:
    """Key tiles of one (user, head) per bank: each tile's page index, then its bank."""
    bt = block // 32
    count = np.zeros(nb, dtype=int)
    for t in range(tiles):
        page = (table[t // bt] * nkv + head) * bt + t % bt
        count[page % nb] += 1
    return count


def spread(table: list[int], tiles: int, nkv: int, block: int, nb: int) -> int:
    """The worst (most - fewest) tiles per bank over the banks any of the head's tiles can reach."""
    worst = 0
    for h in range(nkv):
        reach = [b for b in range(nb) if any(((p * nkv + h) * (block // 32) + r) % nb == b
                                             for p in range(2 * nb) for r in range(block // 32))]
        c = banks_of(table, tiles, h, nkv, block, nb)[reach]
        worst = max(worst, int(c.max() - c.min()))
    return worst


def grow_interleaved(a: BlockAllocator, blocks: int, seed: int) -> None:
    """Users take 0-3 blocks each per round, in random interleaving, until each holds `blocks`."""
    rng = np.random.default_rng(seed)
    have = [0] * a.batch
    while min(have) < blocks:
        grow = [min(blocks, h + int(rng.integers(0, 4))) for h in have]
        a.commit(a.plan_blocks([(False, g) if g > h else None for g, h in zip(grow, have)],
                               [g * a.block_size for g in grow]))
        have = grow


@pytest.mark.parametrize("nkv,block,nb", [(8, 32, 12), (8, 64, 12), (1, 32, 12), (8, 32, 8), (4, 64, 7)])
def test_balanced_tables_spread_every_users_rows_within_one_block_per_bank(nkv, block, nb):
    batch, blocks = 6, 30
    a = BlockAllocator(batch, blocks * block, block, 2 * batch * blocks, policy="balanced", num_kv_heads=nkv,
                       dram_banks=nb)
    grow_interleaved(a, blocks, seed=1)
    table = a.page_table().tolist()
    assert all(len(set(row)) == blocks for row in table)
    assert len({blk for row in table for blk in row}) == batch * blocks  # no block handed out twice
    for row in table:
        assert spread(row, blocks * block // 32, nkv, block, nb) <= block // 32


def test_first_free_tables_of_interleaved_users_are_not_balanced_and_balanced_ones_are():
    """The same interleaved growth: first_free leaves rows piled on some banks, balanced does not."""
    nkv, block, nb, batch, blocks = 8, 32, 12, 8, 48
    worst = {}
    for policy in ("first_free", "balanced"):
        a = BlockAllocator(batch, blocks * block, block, 2 * batch * blocks, policy=policy, num_kv_heads=nkv,
                           dram_banks=nb)
        grow_interleaved(a, blocks, seed=3)
        worst[policy] = max(spread(row, blocks, nkv, block, nb) for row in a.page_table().tolist())
    assert worst["balanced"] <= 1 < worst["first_free"]


def test_balanced_decode_steps_restart_and_rewind():
    """Position by position through plan(): the same balance, and a restart or rewind keeps it."""
    nkv, block, nb = 8, 32, 12
    a = BlockAllocator(2, 16 * block, block, 40, policy="balanced", num_kv_heads=nkv, dram_banks=nb)
    for p in range(12 * block):
        a.commit(a.plan([p, p]))
    for row in a.page_table().tolist():
        assert spread(row, 12, nkv, block, nb) <= 1
    a.commit(a.plan([5 * block, 0]))  # user 0 rewinds into its 6th block, user 1 restarts
    assert len(a.blocks[0]) == 6 and len(a.blocks[1]) == 1
    for p in range(1, 9 * block):
        a.commit(a.plan([-1, p]))
    assert spread(a.page_table().tolist()[1], 9, nkv, block, nb) <= 1


def test_policy_defaults_and_arguments():
    assert policy_for("key_row") == "balanced" and policy_for("tile") == "first_free"
    assert residue_classes(8, 32, 12) == 3 and residue_classes(8, 64, 12) == 3 and residue_classes(1, 32, 12) == 12
    with pytest.raises(ValueError, match="num_kv_heads and dram_banks"):
        BlockAllocator(1, 64, 32, 4, policy="balanced")
    with pytest.raises(ValueError, match="policy"):
        BlockAllocator(1, 64, 32, 4, policy="round_robin")
    # the default is unchanged: the lowest free block first
    a = BlockAllocator(2, 128, 32, 8)
    a.commit(a.plan_blocks([(False, 3), (False, 2)], [96, 64]))
    assert a.blocks == [[0, 1, 2], [3, 4]]


def test_context_parallel_ranks_take_the_policy():
    cp = ContextParallelAllocator(2, 24 * 32, 32, 40, 2, policy="balanced", num_kv_heads=8, dram_banks=12)
    assert all(r.policy == "balanced" and r.classes == 3 for r in cp.ranks)
    for p in range(24 * 32):
        cp.commit(cp.plan([p, p]))
    for table in cp.page_tables():
        for row in table.tolist():
            assert spread(row, 12, 8, 32, 12) <= 1
