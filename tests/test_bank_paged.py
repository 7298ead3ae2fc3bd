"""The bank-local paged model (ttdecode.perf_model.bank_paged): which banks a head reaches, which tiles a
piece owns and the imbalance, each pinned against an independent count (tile by tile, page index by page
index); the fair bank share; the closed form's compute against a real run of the kernels."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings, MathFidelity
from ttdecode.core.split import bank_local_banks, bank_local_view, valid_tiles
from ttdecode.core.tensor import from_torch
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.perf_model.counters import work_from_counters
from ttdecode.perf_model.bank_paged import (PagedShape, PieceCompute, bank_counts, evaluate_paged, paged_work,
                                            piece_imbalance, piece_ownership, random_page_table, sequential_page_table,
                                            tile_banks)
from ttdecode.perf_model.constants import COST
from ttdecode.perf_model.evaluator import CoreWork, reduction_cycles, shared_bank_floors, sum_ops


def page_bank(block: int, head: int, row: int, nkv: int, bt: int, nb: int) -> int:
    """The pool's layout written out: page (block * NKV + h) * bt + r, dealt round robin over the banks."""
    return ((block * nkv + head) * bt + row) % nb


@pytest.mark.parametrize("nkv,bt,nb,size", [(8, 1, 12, 3), (8, 2, 12, 6), (8, 4, 12, 12), (1, 1, 12, 12),
                                            (4, 1, 8, 2), (2, 2, 7, 7)])
def test_reachable_banks_are_every_bank_some_block_puts_a_row_of_the_head_in(nkv, bt, nb, size):
    for h in range(nkv):
        seen = {page_bank(blk, h, r, nkv, bt, nb) for blk in range(4 * nb) for r in range(bt)}
        assert bank_local_banks(h, nkv, bt, nb) == tuple(sorted(seen))
        assert len(seen) == size


@pytest.mark.parametrize("nkv,block,tiles", [(8, 32, 37), (8, 64, 41), (1, 32, 50), (2, 128, 29)])
def test_bank_counts_match_a_tile_by_tile_count(nkv, block, tiles):
    bt = block // 32
    row = random_page_table(1, -(-tiles // bt), seed=5, num_blocks=300)[0]
    for h in range(nkv):
        count = np.zeros(12, dtype=int)
        for t in range(tiles):
            count[page_bank(int(row[t // bt]), h, t % bt, nkv, bt, 12)] += 1
        assert bank_counts(row, tiles, h, nkv, bt, 12).tolist() == count.tolist()


def owners_by_hand(counts: np.ndarray, reach: tuple[int, ...], pieces: int, floor: int) -> list[int]:
    """Tiles per piece from the design's rule, bank by bank."""
    live = [b for b in reach if counts[b]]
    t = int(sum(counts[b] for b in reach))
    used = min(len(live), pieces, max(1, t // floor))
    per = [0] * pieces
    for j, b in enumerate(live):
        per[j % used] += int(counts[b])
    return per


@pytest.mark.parametrize("seed", range(6))
def test_piece_ownership_partitions_the_banks_and_matches_the_rule(seed):
    rng = np.random.default_rng(seed)
    reach = tuple(sorted(rng.choice(12, size=int(rng.integers(1, 13)), replace=False).tolist()))
    counts = np.zeros(12, dtype=int)
    counts[list(reach)] = rng.integers(0, 6, size=len(reach))
    if counts.sum() == 0:
        counts[reach[0]] = 1
    pieces, floor = int(rng.integers(1, 13)), int(rng.choice([1, 2, 4, 8]))
    own = piece_ownership(counts, reach, pieces, floor)
    assert list(own.tiles) == owners_by_hand(counts, reach, pieces, floor)
    owned = [b for bk in own.banks for b in bk]
    assert sorted(owned) == [b for b in reach if counts[b]]  # every live bank exactly once
    assert all(own.banks[i] for i in range(own.used)) and not any(own.banks[own.used:])  # work is a prefix


@pytest.mark.parametrize("per_bank", [1, 2, 4])
@pytest.mark.parametrize("nkv,block,pos", [(8, 32, 2000), (8, 64, 700), (1, 32, 3000), (1, 32, 200), (8, 128, 90),
                                           (8, 32, 150)])
def test_piece_ownership_is_the_kernels_rule_on_random_tables(nkv, block, pos, per_bank):
    """The model's split from bank counts against core.split.bank_local_view (the rule the kernels mirror),
    with one to four readers per bank."""
    bt = block // 32
    row = random_page_table(1, -(-(pos + 1) // block), seed=pos, num_blocks=500)[0].tolist()
    pieces = per_bank * len(bank_local_banks(0, nkv, bt, 12))
    for h in range(nkv):
        reach = bank_local_banks(h, nkv, bt, 12)
        own = piece_ownership(bank_counts(row, valid_tiles(pos), h, nkv, bt, 12), reach, pieces, 4)
        for i in range(pieces):
            view = bank_local_view(pos, row, h, i, pieces=pieces, num_kv_heads=nkv, block_tiles=bt, dram_banks=12,
                                   min_chunk_tiles=4)
            assert (view.used, view.banks, view.num_tiles) == (own.used, own.banks[i], own.tiles[i])


@pytest.mark.parametrize("nkv,block,pieces", [(1, 32, 16), (1, 32, 18), (1, 64, 20), (8, 32, 5), (8, 32, 7),
                                               (8, 64, 9), (2, 32, 10)])
def test_sub_pieces_over_groups_of_banks_are_the_kernels_rule(nkv, block, pieces):
    """P not a multiple of the banks held (16 pieces over a one-KV-head shard's 12 banks: 4 groups of 3 banks,
    4 readers each): the model's used, banks, n_i and tiles per bank against core.split.bank_local_view on
    random and sequential tables, and every piece with keys within one tile of T / used."""
    bt = block // 32
    for pos in (3000, 1500, 200):
        blocks = -(-(pos + 1) // block)
        for sequential, row in ((False, random_page_table(1, blocks, seed=pos, num_blocks=500)[0].tolist()),
                                (True, list(range(blocks)))):
            for h in range(nkv):
                reach = bank_local_banks(h, nkv, bt, 12)
                order = tile_banks(row, 0, valid_tiles(pos), h, nkv, bt, 12)
                own = piece_ownership(np.bincount(order, minlength=12), reach, pieces, 1, order)
                for i in range(pieces):
                    view = bank_local_view(pos, row, h, i, pieces=pieces, num_kv_heads=nkv, block_tiles=bt,
                                           dram_banks=12, min_chunk_tiles=1)
                    assert (view.used, view.banks, view.num_tiles) == (own.used, own.banks[i], own.tiles[i])
                    per_bank = [sum(1 for t in view.tiles if order[t] == b) for b in view.banks]
                    assert tuple(per_bank) == own.bank_tiles[i]
                if own.used > len(reach) and sequential:  # every piece within one tile
                    n = own.tiles[:own.used]
                    assert max(n) - min(n) <= 1, (pos, h, n)


def test_more_readers_per_bank_split_each_bank_evenly():
    counts = np.zeros(12, dtype=int)
    counts[[0, 4, 8]] = [10, 11, 9]
    own = piece_ownership(counts, (0, 4, 8), pieces=12, floor=1)
    assert own.used == 12 and sum(own.tiles) == 30
    for b in (0, 4, 8):
        shares = [t[0] for bk, t in zip(own.banks, own.bank_tiles) if bk == (b,)]
        assert len(shares) == 4 and sum(shares) == counts[b] and max(shares) - min(shares) <= 1


def test_imbalance_of_a_random_table_against_an_independent_count():
    s = PagedShape(3, 8, 1, 128, 32, (2047, 1500, 900))
    pc = PieceCompute(floor_tiles=1)  # every user's 29+ tiles give all 12 pieces keys
    table = random_page_table(3, 64, seed=2, num_blocks=400)
    ratios = []
    for b, pos in enumerate(s.cur_pos):
        per = [0] * 12  # one KV head, one row per block: piece i owns bank i when every bank holds tiles
        for t in range(valid_tiles(pos)):
            per[page_bank(int(table[b][t]), 0, 0, 1, 1, 12)] += 1
        assert min(per) > 0
        ratios.append(max(per) / (sum(per) / 12))
    worst, mean = piece_imbalance(s, pc, table)
    assert worst == pytest.approx(max(ratios)) and mean == pytest.approx(np.mean(ratios))
    assert piece_imbalance(s, pc, sequential_page_table(3, 64))[0] <= 1 + 12 / valid_tiles(900)


def test_fair_bank_share():
    def work(*loads: float) -> CoreWork:
        return CoreWork([], np.array(loads, float), {}, {}, 1, 0, 0)

    floors = shared_bank_floors([work(100, 0), work(300, 0), work(0, 50)], bank_rate=10.0)
    # bank 0: the small reader ends once both moved 100 (20 cycles), the big one at all 400 (40); bank 1 alone
    assert floors == pytest.approx([20.0, 40.0, 5.0])


def test_paged_work_moves_every_key_tile_once_from_its_bank():
    s = PagedShape(2, 32, 8, 128, 64, (4095, 3000), (8, 8))
    table = random_page_table(2, 64, seed=0, num_blocks=256)
    works, red, counts = paged_work(s, PieceCompute(q_tile_rows=8, head_rows=4, floor_tiles=4), table)
    key_bytes = 2 * 4 * 1088
    total = sum(valid_tiles(p) for p in s.cur_pos) * 8 * key_bytes
    assert sum(w.kv_bytes for w in works) == total == pytest.approx(sum(w.bank_bytes.sum() for w in works))
    expected = np.zeros(12)
    for b, pos in enumerate(s.cur_pos):
        for h in range(8):
            for t in range(valid_tiles(pos)):
                expected[page_bank(int(table[b][t // 2]), h, t % 2, 8, 2, 12)] += key_bytes
    assert sum(w.bank_bytes for w in works).tolist() == pytest.approx(expected.tolist())
    assert counts["pieces_with_keys"] == 6 and red.trees


def _setup_per_guard_cycle(s: PagedShape, table: np.ndarray, pc: PieceCompute) -> list[float]:
    """Per core, how much its reader's pass before the first reads (CoreWork.setup_cycles) grows per cycle
    added to the guard of one page-table entry (the rest of an entry's pass kept)."""
    grown = replace(COST, page_table_guard_entry_cycles=COST.page_table_guard_entry_cycles + 4,
                    page_table_pass_entry_cycles=COST.page_table_pass_entry_cycles + 4)
    base, _, _ = paged_work(s, pc, table)
    more, _, _ = paged_work(s, pc, table, c=grown)
    return [(m.setup_cycles - w.setup_cycles) / 4 for w, m in zip(base, more)]


def test_the_first_users_guard_overlaps_its_first_chunks():
    """B 1, 4K keys, 8 KV heads of 3 pieces (43 tiles each, chunks of 8): every core's first piece requests its
    first two chunks after checking their 16 entries, and guards its user's whole row (128 entries) while they
    land (longer than the guard and the rest of the count), so only the check stays before the first reads.
    Without a whole chunk (a 5-tile context: pieces of 1 or 2 tiles, chunks of 8), the whole row's guard does."""
    pc = PieceCompute(q_tile_rows=8, head_rows=4)
    long = PagedShape(1, 32, 8, 128, 32, (4095,))
    assert _setup_per_guard_cycle(long, sequential_page_table(1, 128), pc) == [2 * 8] * 24
    short = PagedShape(1, 32, 8, 128, 32, (159,))
    assert set(_setup_per_guard_cycle(short, sequential_page_table(1, 128), pc)) == {5}


def test_another_users_row_is_guarded_whole_before_the_first_reads():
    """B 2 on 24 cores: every core holds pieces of both users; the other user's whole row (128 entries) is
    guarded before the first reads, the first piece's user's only its first two chunks' entries."""
    pc = PieceCompute(q_tile_rows=8, head_rows=4)
    s = PagedShape(2, 32, 8, 128, 32, (4095, 4095), grid=(4, 6))
    works, _, _ = paged_work(s, pc, sequential_page_table(2, 128))
    assert all(len(w.index_reads) == 2 for w in works), "every core holds pieces of both users"
    assert _setup_per_guard_cycle(s, sequential_page_table(2, 128), pc) == [128 + 2 * 8] * len(works)


def test_a_sequential_one_head_step_reads_at_the_bank_local_rate_when_the_banks_bind():
    """B 32, one KV head, 32K: the readers of a bank share it, so the floor is the busiest bank's load at
    DRAMTile's 12-reader rate, and the step is no faster."""
    s = PagedShape(32, 8, 1, 128, 32, (32767,) * 32)
    b, _ = evaluate_paged(s, PieceCompute(q_tile_rows=8, head_rows=8, floor_tiles=4, chunk_cap=16),
                          sequential_page_table(32, 1024))
    rate = 288 / 12 * COST.dram_bank_local_readers_efficiency
    busiest = np.bincount([(u * 1024 + t) % 12 for u in range(32) for t in range(1024)]).max()
    assert b.dram_floor_us == pytest.approx(busiest * 2 * 4 * 1088 / rate / 1e3, rel=1e-9)
    assert b.achieved_gbps < 265.5


def test_closed_form_compute_is_near_a_real_run_of_the_kernels():
    """One KV head, blocks of one tile row, a sequential table: piece i owns bank i = key tiles t % 12 == i,
    the cyclic split of contiguous key_row pages the kernels run today. The closed form's busiest core
    is within 15% of the counters' (it leaves out the per-piece setup and finish)."""
    seq = 4096
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=seq, head_dim=128, kv_dtype=DataType.bfloat8_b,
                     cur_pos=[seq - 1], max_cores_per_head_batch=12, kv_pages="key_row")
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, 1, 8, 128, generator=g))
    k = from_torch(torch.randn(1, 1, seq, 128, generator=g), DataType.bfloat8_b)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=k, cur_pos_source=None, scale=1 / math.sqrt(128),
                                    compute=ComputeSettings(math_fidelity=MathFidelity("HiFi2"), fp32_dest_acc_en=True),
                                    exp_approx=False)
    works, _, fid = work_from_counters(plan, result.counters)
    real = max(sum(sum_ops(w.compute, fid, COST).values()) for w in works)
    pc = PieceCompute(q_tiles=plan.q_tiles, head_rows=8, q_tile_rows=plan.q_tile_rows, dst_tiles=plan.dst_tiles,
                      prescale_q=plan.prescale_q, chunk_cap=plan.chunk_cap, floor_tiles=plan.min_chunk_tiles,
                      fidelity=fid)
    ours, _, _ = paged_work(PagedShape(1, 8, 1, 128, 32, (seq - 1,)), pc, sequential_page_table(1, seq // 32))
    closed = max(sum(sum_ops(w.compute, fid, COST).values()) for w in ours)
    assert plan.pieces_per_work == 12
    assert closed == pytest.approx(real, rel=0.15)


@pytest.mark.parametrize("softmax_chunks", [1, 4])
def test_closed_form_compute_of_softmax_blocks_is_near_a_real_run_of_the_kernels(softmax_chunks):
    """A bank-local plan of one piece of 8 chunks of 16 tiles (one KV head, the Llama-70B T3K group; one piece:
    no tree, its compute alone), one
    online-softmax update per chunk or per block of 4 (DecodePlan.softmax_chunks): the closed form's compute
    (chunk_ops per block, a later chunk of a block its key tiles only) is within 15% of the counters'."""
    seq, block = 4096, 32
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=seq, head_dim=128, kv_dtype=DataType.bfloat8_b,
                     cur_pos=[seq - 1], key_row_pieces=1, kv_pages="key_row", block_size=block,
                     num_blocks=seq // block, chunk_cap=16, softmax_chunks=softmax_chunks)
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, 1, 8, 128, generator=g))
    k = from_torch(torch.randn(seq // block, 1, block, 128, generator=g), DataType.bfloat8_b)
    table = sequential_page_table(1, seq // block)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=k, cur_pos_source=None, page_table=torch.tensor(table),
                                    scale=1 / math.sqrt(128), exp_approx=False,
                                    compute=ComputeSettings(math_fidelity=MathFidelity("HiFi2"), fp32_dest_acc_en=True))
    works, _, fid = work_from_counters(plan, result.counters)
    real = max(sum(sum_ops(w.compute, fid, COST).values()) for w in works)
    pc = PieceCompute(q_tiles=plan.q_tiles, head_rows=8, q_tile_rows=plan.q_tile_rows, dst_tiles=plan.dst_tiles,
                      prescale_q=plan.prescale_q, chunk_cap=plan.chunk_cap, floor_tiles=plan.min_chunk_tiles,
                      fidelity=fid, softmax_chunks=plan.softmax_chunks)
    ours, _, _ = paged_work(PagedShape(1, 8, 1, 128, block, (seq - 1,)), pc, table, pieces=1)
    closed = max(sum(sum_ops(w.compute, fid, COST).values()) for w in ours)
    assert (plan.pieces_per_work, plan.max_chunk_tiles, plan.softmax_chunks) == (1, 16, softmax_chunks)
    assert closed == pytest.approx(real, rel=0.15)


def _compute_tiles_of_one_piece(seq: int, head_dim: int, softmax_chunks: int) -> dict[str, int]:
    """Tiles through each compute op (the host runtime's counters) of a one-piece bank-local plan of chunks of
    16 tiles in one softmax block of `softmax_chunks` chunks, the Llama-70B T3K group (8 q heads, 1 KV head)."""
    block = 32
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=seq, head_dim=head_dim,
                     kv_dtype=DataType.bfloat8_b, cur_pos=[seq - 1], key_row_pieces=1, kv_pages="key_row",
                     block_size=block, num_blocks=seq // block, chunk_cap=16, softmax_chunks=softmax_chunks)
    assert (plan.max_chunk_tiles, plan.softmax_chunks) == (16, softmax_chunks)
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, 1, 8, head_dim, generator=g))
    k = from_torch(torch.randn(seq // block, 1, block, head_dim, generator=g), DataType.bfloat8_b)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=k, cur_pos_source=None,
                                    page_table=torch.tensor(sequential_page_table(1, seq // block)),
                                    scale=1 / math.sqrt(head_dim), exp_approx=False,
                                    compute=ComputeSettings(math_fidelity=MathFidelity("HiFi2"), fp32_dest_acc_en=True))
    (kernel,) = [k for k in result.counters.kernels if k.kind.value == "compute"]
    return dict(kernel.tiles)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_a_later_chunk_of_a_softmax_block_adds_only_its_key_tiles(head_dim):
    """A piece of 8 chunks in one softmax block against a piece of 4 chunks in one block: the 4 more chunks make
    no configuration call and no copy, pack, binary op or exp beyond their key tiles' (the closed form,
    op_counts.chunk_tile_ops, per running key tile: 2 packs, 2 binary ops, 1 exp, 2 copies, and a copy of m_new
    per DST block of 3 probabilities: 6 a chunk of 16); what the model charges a later chunk of a block
    (bank_paged._piece_ops)."""
    four = _compute_tiles_of_one_piece(2048, head_dim, 4)
    eight = _compute_tiles_of_one_piece(4096, head_dim, 8)
    more = 4 * 16  # key tiles
    assert eight["init"] == four["init"]
    assert eight["exp"] - four["exp"] == more
    assert eight["max"] - four["max"] == 2 * more
    assert eight["pack"] - four["pack"] == 2 * more
    assert eight["copy"] - four["copy"] == 2 * more + 4 * 6


@pytest.mark.parametrize("nkv, pieces", [(1, 16), (8, 3), (8, 5)])
def test_spread_ownership_is_the_kernels_turns_over_every_bank(nkv, pieces):
    """piece_ownership with spread_banks: per piece, the tiles per bank the kernels' rule gives it
    (core.split.bank_local_view with spread_banks, which tests/test_flash_decode_bank_paged.py pins against the
    reader's fetches), under a random table; every piece's count within one of the others'."""
    block, s = 32, 4096
    table = random_page_table(1, s // block, seed=nkv + pieces, num_blocks=3 * s // block)
    for h in range(nkv):
        order = tile_banks(table[0], 0, s // 32, h, nkv, 1, 12)
        counts = np.bincount(order, minlength=12)
        own = piece_ownership(counts, bank_local_banks(h, nkv, 1, 12), pieces, 1, order, spread_banks=True)
        for i in range(own.used):
            view = bank_local_view(s - 1, table[0], h, i, pieces=pieces, num_kv_heads=nkv, block_tiles=1,
                                   dram_banks=12, spread_banks=True)
            per_bank = np.bincount(order[list(view.tiles)], minlength=12)
            assert {b: t for b, t in zip(own.banks[i], own.bank_tiles[i]) if t} == \
                {b: int(n) for b, n in enumerate(per_bank) if n}
        assert max(own.tiles) - min(own.tiles[: own.used]) <= 1


def test_spread_pieces_are_priced_as_own_bank_pieces_over_a_sequential_table():
    """Over a sequential table the spread pieces of the one-KV-head shard read exactly the own-bank pieces'
    tiles, so the model prices both alike; over a random table the spread pieces stay equal (no imbalance)
    and their cores read at the interleaved efficiency (CoreWork.bank_local False)."""
    shape = PagedShape(1, 8, 1, 128, 32, (32767,))
    pc = PieceCompute(q_tiles=1, head_rows=8, q_tile_rows=8, chunk_cap=16, floor_tiles=4, softmax_chunks=8)
    seq = sequential_page_table(1, 1024)
    own, _ = evaluate_paged(shape, pc, seq, 16)
    spread, _ = evaluate_paged(shape, replace(pc, spread_banks=True), seq, 16)
    assert spread.total_us == own.total_us
    rnd = random_page_table(1, 1024, seed=0, num_blocks=2048)
    works, _, counts = paged_work(shape, replace(pc, spread_banks=True), rnd, 16)
    assert counts["imbalance_worst"] == 1.0
    assert not any(w.bank_local for w in works)


@pytest.mark.parametrize("spread", [False, True])
def test_closed_form_merge_tree_of_bank_local_pieces_is_a_real_runs(spread):
    """A one-KV-head shard's 16 bank-local pieces (8K keys, a random table) merging in a 4-round tree: the tree
    the counters give (work_from_counters with the run's page table: the messages matched to the pieces with
    keys, their bytes, hops and merges) prices within 5% of the closed form's (paged_work at the plan's
    placement), for pieces keeping to their banks and for spread pieces."""
    seq, block = 8192, 32
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=seq, head_dim=128, kv_dtype=DataType.bfloat8_b,
                     cur_pos=[seq - 1], key_row_pieces=16, kv_pages="key_row", block_size=block,
                     num_blocks=2 * seq // block, max_cores_per_head_batch=16, spread_banks=spread)
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, 1, 8, 128, generator=g))
    k = from_torch(torch.randn(2 * seq // block, 1, block, 128, generator=g), DataType.bfloat8_b)
    table = random_page_table(1, seq // block, seed=1, num_blocks=2 * seq // block)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=k, cur_pos_source=None, page_table=torch.tensor(table),
                                    scale=1 / math.sqrt(128), exp_approx=False,
                                    compute=ComputeSettings(math_fidelity=MathFidelity("HiFi2"), fp32_dest_acc_en=True))
    with pytest.raises(ValueError, match="give work_from_counters the run's page_table"):
        work_from_counters(plan, result.counters)
    _, real, fid = work_from_counters(plan, result.counters, table)
    pc = PieceCompute(q_tiles=plan.q_tiles, head_rows=8, q_tile_rows=plan.q_tile_rows, dst_tiles=plan.dst_tiles,
                      prescale_q=plan.prescale_q, chunk_cap=plan.chunk_cap, floor_tiles=plan.min_chunk_tiles,
                      fidelity=fid, softmax_chunks=plan.softmax_chunks, spread_banks=spread)
    placement = {(p.user, p.kv_head, p.index): p.core for p in plan.pieces}
    _, closed, _ = paged_work(PagedShape(1, 8, 1, 128, block, (seq - 1,)), pc, table, 16, placement=placement)
    assert len(real.trees) == len(closed.trees) == 1
    real_cycles, _ = reduction_cycles(real, fid, COST)
    closed_cycles, _ = reduction_cycles(closed, fid, COST)
    assert closed_cycles == pytest.approx(real_cycles, rel=0.05)
