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


# ---- block_size 16: two blocks a key tile, handed out in pairs --------------------------------------------


def key_tile_banks(row: list[int], tiles: int, head: int, nkv: int, nb: int) -> list[tuple[int, int]]:
    """Per key tile t of one (user, head): the banks of its two halves, page (row[2t + half] * NKV + h) % NB."""
    return [((row[2 * t] * nkv + head) % nb, (row[2 * t + 1] * nkv + head) % nb) for t in range(tiles)]


def key_tile_spread(row: list[int], tiles: int, nkv: int, nb: int) -> int:
    """The worst (most - fewest) key tiles per bank (a tile counted in its first half's bank, the bank that
    owns it in FlashDecode's split) over the banks the head's blocks can reach."""
    worst = 0
    for h in range(nkv):
        reach = sorted({(p * nkv + h) % nb for p in range(2 * nb)})
        count = np.zeros(nb, dtype=int)
        for first, _ in key_tile_banks(row, tiles, h, nkv, nb):
            count[first] += 1
        worst = max(worst, int(count[reach].max() - count[reach].min()))
    return worst


@pytest.mark.parametrize("nkv,nb", [(8, 12), (1, 12), (2, 12), (8, 8), (4, 7), (3, 12)])
def test_balanced_block16_hands_out_key_tiles_whose_halves_share_a_bank(nkv, nb):
    batch, tiles = 6, 15
    a = BlockAllocator(batch, tiles * 32, 16, 2 * batch * 2 * tiles, policy="balanced", num_kv_heads=nkv,
                       dram_banks=nb)
    grow_interleaved(a, 2 * tiles - 1, seed=5)  # odd counts asked too: each user holds whole pairs
    table = a.page_table().tolist()
    assert all(len(blocks) == 2 * tiles for blocks in a.blocks)
    assert len({blk for row in table for blk in row}) == batch * 2 * tiles  # no block handed out twice
    for row in table:
        for h in range(nkv):
            assert all(first == second for first, second in key_tile_banks(row, tiles, h, nkv, nb)), (row, h)
        assert all((row[2 * t + 1] - row[2 * t]) * nkv % nb == 0 for t in range(tiles))  # the definition's test
        assert key_tile_spread(row, tiles, nkv, nb) <= 1


def test_balanced_block16_decode_steps_cross_the_key_tiles():
    """Position by position through plan() across 16 / 32 / 48: a pair is taken when a key tile starts, a
    restart or rewind keeps whole pairs, and the balance holds; first_free takes one block at a time."""
    nkv, nb = 8, 12
    a = BlockAllocator(2, 16 * 16, 16, 64, policy="balanced", num_kv_heads=nkv, dram_banks=nb)
    held = []
    for p in range(12 * 16):
        a.commit(a.plan([p, p]))
        held.append(len(a.blocks[0]))
    assert held[0] == held[15] == held[16] == 2 and held[31] == 2 and held[32] == held[47] == held[48] == 4
    for row in a.page_table().tolist():
        assert all(f == s for h in range(nkv) for f, s in key_tile_banks(row, 6, h, nkv, nb))
        assert key_tile_spread(row, 6, nkv, nb) <= 1
    a.commit(a.plan([5 * 16, 0]))  # user 0 rewinds into its 6th block (3rd key tile), user 1 restarts
    assert len(a.blocks[0]) == 6 and len(a.blocks[1]) == 2
    for p in range(1, 9 * 16):
        a.commit(a.plan([-1, p]))
    row = a.page_table().tolist()[1]
    assert all(f == s for h in range(nkv) for f, s in key_tile_banks(row, 5, h, nkv, nb))
    assert key_tile_spread(row, 5, nkv, nb) <= 1
    f = BlockAllocator(1, 64, 16, 4)
    f.commit(f.plan([0]))
    assert f.blocks == [[0]] and f.max_blocks == 4


def test_balanced_block16_pairs_count_against_the_pool():
    a = BlockAllocator(2, 64, 16, 3, policy="balanced", num_kv_heads=1, dram_banks=12)
    with pytest.raises(ValueError, match="expected at most 3 free blocks of 16 positions .*got a need for 4"):
        a.plan([0, 0])  # two users' first key tiles: two pairs
    # three free blocks, no residue class (mod 12) with two: the pair is split, its second half in another bank
    a.commit(a.plan([0, -1]))
    assert len(a.blocks[0]) == 2 and a.free_blocks == 1 and a.blocks[0][0] % 12 != a.blocks[0][1] % 12


def test_context_parallel_ranks_hand_out_block16_pairs():
    cp = ContextParallelAllocator(2, 10 * 32, 16, 40, 2, policy="balanced", num_kv_heads=8, dram_banks=12)
    assert all(r.pairs and r.max_blocks == 10 for r in cp.ranks)
    for p in range(10 * 32):
        cp.commit(cp.plan([p, p]))
    for table in cp.page_tables():
        for row in table.tolist():
            assert all(f == s for h in range(8) for f, s in key_tile_banks(row, 5, h, 8, 12))
            assert key_tile_spread(row, 5, 8, 12) <= 1
