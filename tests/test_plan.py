"""The planner: batch invariance, the tree, placement, resource checks, the chunk formulas."""

from __future__ import annotations

import re

import itertools

import pytest

from ttdecode.core.formats import DataType
from ttdecode.core.split import dynamic_chunk_tiles, piece_range, tree_children, tree_parent, tree_rounds, valid_tiles
from ttdecode.ops.flash_decode.plan import (CHUNK_BUFFER_BUDGET, PlanError, fitting_chunk_cap, format_plan,
                                            key_row_placement, make_plan)

LLAMA8B = dict(num_q_heads=32, num_kv_heads=8, head_dim=128)


@pytest.mark.parametrize("pieces", [1, 2, 3, 5, 8, 16, 17, 64])
def test_tree_reaches_every_piece_once_in_ceil_log2_rounds(pieces: int) -> None:
    parents = {i: tree_parent(i) for i in range(1, pieces)}
    for i, (r, p) in parents.items():
        assert (r, i) in tree_children(p, pieces)
        assert p < i
    received = sorted(c for i in range(pieces) for _, c in tree_children(i, pieces))
    assert received == list(range(1, pieces))
    assert tree_rounds(pieces) == (0 if pieces == 1 else (pieces - 1).bit_length())


@pytest.mark.parametrize("pieces", [1, 2, 3, 5, 8, 16])
@pytest.mark.parametrize("fixed", [0, 1, 2, 4])
def test_piece_ranges_cover_valid_tiles_exactly_with_root_at_the_boundary(pieces: int, fixed: int) -> None:
    for pos in itertools.chain(range(-1, 300), [1023, 4095]):
        ranges = [piece_range(pos, fixed, pieces, i) for i in range(pieces)]
        tiles = sorted(t for r in ranges for t in range(r.first_tile, r.first_tile + r.num_tiles))
        assert tiles == list(range(valid_tiles(pos)))
        if pos >= 0:
            root = ranges[0]
            assert root.first_tile + root.num_tiles == valid_tiles(pos)  # root holds the boundary
        # empty pieces are exactly the highest indices, so they drop out of the tree as subtrees
        nonempty = [not r.empty for r in ranges]
        assert nonempty == sorted(nonempty, reverse=True)
        for r in ranges:
            if not r.empty:
                assert 1 <= r.num_tiles <= r.num_chunks * r.chunk_tiles


def test_a_users_pieces_do_not_depend_on_the_batch() -> None:
    pos = 5000
    one = make_plan(batch=1, seq_len=8192, cur_pos=[pos], **LLAMA8B)
    many = make_plan(batch=32, seq_len=8192, cur_pos=[pos] + [i * 97 for i in range(31)], **LLAMA8B)
    assert one.pieces_per_work == many.pieces_per_work
    assert one.ranges(0) == many.ranges(0)
    # the tree (piece -> parent piece) is the same
    tree = lambda plan: {(p.kv_head, p.index): p.height for p in plan.pieces if p.user == 0}
    assert tree(one) == tree(many)


def test_llama_8b_n150_single_user_can_use_every_core_with_eight_pieces_per_head() -> None:
    """With the caller's split (min_chunk_tiles given) the plan takes the most pieces the grid allows."""
    plan = make_plan(batch=1, seq_len=8192, cur_pos=[8191], min_chunk_tiles=4, **LLAMA8B)
    assert plan.pieces_per_work == 8 and plan.rounds == 3
    assert len(plan.active_cores) == 64
    assert all(len(v) == 1 for v in plan.core_pieces.values())


def test_the_models_split_takes_fewer_pieces_when_a_round_costs_more_than_it_saves() -> None:
    """Llama-3.1-8B on an N150, B 1: at 1K keys 8 KV heads x 4 pieces of 8 key tiles sit on the interleaved
    DRAM floor of one user, so 8 pieces would only add a tree round. At 64K 4 pieces keep the busiest
    core's compute (with the model's 10% margin, split_compute_margin) under the floor with 32x32 q tiles
    (the model's chunk cap 16) and with the default 8x32 q tiles (4 q heads a group; cap 8), and at a
    fixed cap of 16 either way, so the split stays at 4 of the 16 allowed. One KV head (T3K 4q/1kv, 32K)
    spreads over 32 of the 64 cores allowed. None of it depends on the batch."""
    short = [make_plan(batch=b, seq_len=1024, cur_pos=[1023] * b, **LLAMA8B) for b in (1, 4)]
    assert {p.pieces_per_work for p in short} == {4} and short[0].rounds == 2
    full = make_plan(batch=1, seq_len=65536, cur_pos=[65535], q_tile_rows=32, **LLAMA8B)
    assert (full.chunk_cap, full.pieces_per_work) == (16, 4)
    assert make_plan(batch=1, seq_len=65536, cur_pos=[65535], q_tile_rows=32, chunk_cap=16,
                     **LLAMA8B).pieces_per_work == 4
    assert make_plan(batch=1, seq_len=65536, cur_pos=[65535], chunk_cap=16, **LLAMA8B).pieces_per_work == 4
    half = make_plan(batch=1, seq_len=65536, cur_pos=[65535], **LLAMA8B)
    assert (half.q_tile_rows, half.chunk_cap, half.pieces_per_work) == (8, 8, 4)
    t3k = [make_plan(batch=b, num_q_heads=4, num_kv_heads=1, seq_len=32768, head_dim=128, cur_pos=[32767] * b,
                     max_cores_per_head_batch=64) for b in (1, 2)]
    assert {p.pieces_per_work for p in t3k} == {32}


def test_the_split_weighs_the_busiest_cores_reader_compute_overlap_as_the_model_does() -> None:
    """T3K 8q/1kv at 32K with 64 cores allowed: 32 pieces leave the busiest core's compute a little above
    the DRAM floor, 64 sit under it but add a tree round. Weighed as max(reader, compute) alone the two tie
    within cycles (64 won: tech_report/perf_history.md, step 29); weighed
    as perf_model.evaluator.evaluate prices a core, max + min / stages (the reader and compute overlap chunk by chunk),
    32 pay."""
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=32768, head_dim=128, cur_pos=[32767],
                     max_cores_per_head_batch=64)
    assert plan.pieces_per_work == 32


def test_more_pieces_than_cores_spreads_receivers_and_orders_leaves_first() -> None:
    plan = make_plan(batch=32, seq_len=8192, cur_pos=[8191] * 32, **LLAMA8B)
    loads = [len(v) for v in plan.core_pieces.values()]
    assert max(loads) - min(loads) <= 1
    areas = list(plan.recv_areas.values())
    assert max(areas) - min(areas) <= 3
    for pieces in plan.core_pieces.values():
        heights = [p.height for p in pieces]
        assert heights == sorted(heights)
        assert [p.slot for p in pieces] == list(range(len(pieces)))


def test_parent_area_points_at_the_round_slot_of_the_parent() -> None:
    plan = make_plan(batch=3, seq_len=4096, cur_pos=[4095, 10, -1], num_q_heads=8, num_kv_heads=2,
                     head_dim=64, grid=(4, 2))
    by_key = {(p.user, p.kv_head, p.index): p for p in plan.pieces}
    for p in plan.pieces:
        parent = tree_parent(p.index)
        if parent is None:
            assert p.parent_core is None
            continue
        r, pi = parent
        q = by_key[(p.user, p.kv_head, pi)]
        assert p.parent_core == q.core
        rounds = [rr for rr, _ in tree_children(pi, plan.pieces_per_work)]
        assert p.parent_area == q.recv_area + rounds.index(r)
        assert p.parent_height == q.height


def test_l1_overflow_is_refused_naming_the_knobs() -> None:
    # 256 q heads per KV head at D=512: no chunk size and no tree shape fits one core.
    with pytest.raises(PlanError, match="L1 overflow.*No k_chunk_size fits even with one piece per head.*"
                                        "256 q heads per KV head"):
        make_plan(batch=1, num_q_heads=256, num_kv_heads=1, head_dim=512, seq_len=8192, cur_pos=[8191],
                  k_chunk_size=2048, kv_dtype=DataType.bfloat16)
    # A chunk too large: the message names the largest k_chunk_size that fits, and that one plans.
    args = dict(batch=1, num_q_heads=32, num_kv_heads=8, head_dim=128, seq_len=8192, cur_pos=[8191],
                kv_dtype=DataType.bfloat16)
    with pytest.raises(PlanError, match="L1 overflow.*Set k_chunk_size=(\\d+) or lower.*max_cores_per_head_batch") as e:
        make_plan(**args, k_chunk_size=4096)
    fits = int(re.search(r"k_chunk_size=(\d+)", str(e.value)).group(1))
    make_plan(**args, k_chunk_size=fits)
    with pytest.raises(PlanError, match="L1 overflow"):
        make_plan(**args, k_chunk_size=2 * fits)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(k_chunk_size=48), "k_chunk_size: expected 0 .* power of two"),
        (dict(k_chunk_size=16), "k_chunk_size"),
        (dict(k_chunk_size=8192 * 2), "k_chunk_size"),
        (dict(num_q_heads=30), "num_q_heads: expected a multiple of num_kv_heads"),
        (dict(cur_pos=[8192]), r"cur_pos\[0\]: expected -1..8191"),
        (dict(cur_pos=[1, 2]), "cur_pos: expected 1 positions"),
        (dict(max_cores_per_head_batch=0), "max_cores_per_head_batch"),
        (dict(head_dim=100), "head_dim: expected a multiple of 32"),
        (dict(sub_core_grids=[((0, 0), (8, 0))]), "sub_core_grids"),
        (dict(kv_dtype=DataType.float32), "kv_dtype"),
        (dict(block_size=64), "block_size, num_blocks: expected both"),
        (dict(block_size=48, num_blocks=4), "block_size: expected a multiple of 32 or 16, got 48"),
        (dict(block_size=0, num_blocks=4), "block_size: expected a positive int, got 0"),
        (dict(block_size=64, num_blocks=0), "num_blocks: expected a positive int, got 0"),
        (dict(block_size=3072, num_blocks=4), "seq_len: expected a multiple of block_size=3072"),
        (dict(block_size=64, num_blocks=4, share_cache=True), "share_cache: expected False with a paged cache"),
    ],
)
def test_bad_plan_arguments_are_refused(kwargs: dict, message: str) -> None:
    args = dict(batch=1, seq_len=8192, cur_pos=[100], **LLAMA8B)
    args.update(kwargs)
    with pytest.raises(PlanError, match=message):
        make_plan(**args)


def test_fixed_chunk_must_divide_the_sequence() -> None:
    with pytest.raises(PlanError, match="seq_len=8000 is not a multiple of k_chunk_size=256"):
        make_plan(batch=1, seq_len=8000, cur_pos=[0], k_chunk_size=256, **LLAMA8B)


def test_sub_core_grid_limits_the_cores_used() -> None:
    plan = make_plan(batch=1, seq_len=8192, cur_pos=[8191], sub_core_grids=[((0, 0), (3, 1))], **LLAMA8B)
    assert len(plan.cores) == 8 and plan.pieces_per_work == 1
    assert {c for c in plan.active_cores} <= set(plan.cores)


def test_plan_table_mentions_l1_and_every_buffer() -> None:
    plan = make_plan(batch=1, seq_len=8192, cur_pos=[8191], **LLAMA8B)
    text = format_plan(plan)
    assert "L1 per core" in text and "partial_in" in text and "root" in text


def test_unknown_positions_leave_ranges_to_the_device() -> None:
    plan = make_plan(batch=2, seq_len=1024, cur_pos=None, **LLAMA8B)
    with pytest.raises(PlanError, match="read on the device"):
        plan.ranges(0)
    assert "on device" in format_plan(plan)


def test_paged_plan_keeps_the_chunks_and_adds_the_page_table_row_to_l1() -> None:
    # 8192 / 32 = 256 blocks per user: a 1 KiB int32 row, already a multiple of 32 B; 8192 / 2048 =
    # 4 blocks (16 B) round up to 32 B.
    base = make_plan(batch=4, seq_len=8192, cur_pos=[8191, 0, 33, -1], **LLAMA8B)
    for block, row in ((32, 1024), (2048, 32)):
        paged = make_plan(batch=4, seq_len=8192, cur_pos=[8191, 0, 33, -1], block_size=block, num_blocks=1000,
                          **LLAMA8B)
        assert paged.paged and (paged.block_size, paged.num_blocks, paged.max_blocks) == (block, 1000, 8192 // block)
        assert paged.pieces == base.pieces and paged.max_chunk_tiles == base.max_chunk_tiles
        assert [paged.ranges(u) for u in range(4)] == [base.ranges(u) for u in range(4)]
        assert paged.l1_bytes_per_core == base.l1_bytes_per_core + row
        assert "paged" in format_plan(paged) and "page_table" in format_plan(paged)
    assert not base.paged and base.max_blocks == 0
    assert "page_table" not in {cb.name for cb in base.circular_buffers}


def test_page_table_row_counts_against_l1() -> None:
    # A plan that fits in L1 without paging overflows when a huge page-table row is added (one piece per
    # work: no partials, so no merge slot to fall back on).
    args = dict(batch=1, num_q_heads=32, num_kv_heads=8, head_dim=128, seq_len=131072, cur_pos=[100])
    row = 131072 // 32 * 4
    base = make_plan(**args, max_cores_per_head_batch=1)
    make_plan(**args, max_cores_per_head_batch=1, block_size=32, num_blocks=4096,
              l1_bytes_per_core=base.l1_bytes_per_core + row)
    with pytest.raises(PlanError, match="L1 overflow"):
        make_plan(**args, max_cores_per_head_batch=1, block_size=32, num_blocks=4096,
                  l1_bytes_per_core=base.l1_bytes_per_core + row - 1)
    # with a tree, the byte too many sends the children's partials through the merge slot
    tree = make_plan(**args)
    assert make_plan(**args, block_size=32, num_blocks=4096, l1_bytes_per_core=tree.l1_bytes_per_core + row).merge_slot \
        is False
    slot = make_plan(**args, block_size=32, num_blocks=4096, l1_bytes_per_core=tree.l1_bytes_per_core + row - 1)
    assert slot.merge_slot and slot.l1_bytes_per_core <= tree.l1_bytes_per_core + row - 1


@pytest.mark.parametrize("window", [1, 7, 32, 33, 100, 5000])
@pytest.mark.parametrize("pieces, fixed", [(1, 0), (3, 1), (5, 0), (8, 2), (16, 0)])
def test_sliding_window_piece_ranges_cover_exactly_the_attended_tiles(window: int, pieces: int, fixed: int) -> None:
    for pos in range(-1, 400):
        ranges = [piece_range(pos, fixed, pieces, i, window) for i in range(pieces)]
        tiles = sorted(t for r in ranges for t in range(r.first_tile, r.first_tile + r.num_tiles))
        attended = sorted({p // 32 for p in range(max(0, pos - window + 1), pos + 1)})
        assert tiles == attended, (pos, window, pieces, fixed)
        if pos >= 0:
            assert ranges[0].first_tile + ranges[0].num_tiles - 1 == pos // 32  # root holds the boundary


# ---- the split floor (min_chunk_tiles) --------------------------------------------------------------

TG70B = dict(num_q_heads=8, num_kv_heads=1, head_dim=128, seq_len=4096, grid=(8, 4), max_cores_per_head_batch=4)


def test_model_split_floor_gives_a_short_context_one_piece_and_leaves_long_ones_spread() -> None:
    """Galaxy Llama-70B per chip: 4 key tiles at cur_pos 127 are not worth a merge round, so the
    cost model's floor (at least 4 tiles) gives the whole context to the root; at 4095 every piece
    still works."""
    from ttdecode.ops.flash_decode.plan.split_choices import split_floor_tiles

    plan = make_plan(batch=2, cur_pos=[127, 4095], **TG70B)
    assert plan.min_chunk_tiles == split_floor_tiles(q_tiles=1, d_tiles=4, dv_tiles=4, head_rows=8) >= 4
    assert [r.empty for r in plan.ranges(0)] == [False, True, True, True]
    assert all(not r.empty for r in plan.ranges(1))
    spread = make_plan(batch=2, cur_pos=[127, 4095], min_chunk_tiles=1, **TG70B)
    assert [r.num_tiles for r in spread.ranges(0)] == [1, 1, 1, 1]
    assert spread.ranges(1) == plan.ranges(1)


def test_split_floor_depends_on_the_config_only() -> None:
    one = make_plan(batch=1, cur_pos=[127], **TG70B)
    many = make_plan(batch=8, cur_pos=[127] + [37 * i for i in range(7)], **TG70B)
    assert one.min_chunk_tiles == many.min_chunk_tiles
    assert one.ranges(0) == many.ranges(0)


def test_the_split_is_priced_at_the_calls_fidelity() -> None:
    """HiFi4 doubles the matmul's phases: at D 256 with 8 head rows in 32x32 q tiles one key tile of a
    chunk then outweighs a tree round at 4 tiles instead of 8 (the floor follows
    plan.split_choices.split_floor_tiles at that fidelity)."""
    from ttdecode.ops.flash_decode.plan.split_choices import split_floor_tiles

    base = dict(batch=1, num_q_heads=8, num_kv_heads=1, head_dim=256, seq_len=4096, cur_pos=[4095], q_tile_rows=32)
    hifi2, hifi4 = (make_plan(**base, math_fidelity=f) for f in ("HiFi2", "HiFi4"))
    floor = {f: split_floor_tiles(1, 8, 8, fidelity=f, head_rows=8, q_tile_rows=32) for f in ("HiFi2", "HiFi4")}
    assert hifi2.min_chunk_tiles == floor["HiFi2"] == 8
    assert hifi4.min_chunk_tiles == floor["HiFi4"] == 4
    with pytest.raises(PlanError, match=r"math_fidelity: expected one of \['LoFi', 'HiFi2', 'HiFi3', 'HiFi4'\], got 'HiFi5'"):
        make_plan(**base, math_fidelity="HiFi5")


@pytest.mark.parametrize("args, message", [
    (dict(min_chunk_tiles=3), r"min_chunk_tiles: expected None or a power of two 1\.\.8, got 3"),
    (dict(min_chunk_tiles=16), r"min_chunk_tiles: expected None or a power of two 1\.\.8, got 16"),
    (dict(min_chunk_tiles=4, k_chunk_size=128), r"min_chunk_tiles: applies to dynamic chunks only"),
])
def test_bad_split_floor_is_refused_naming_it(args: dict, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        make_plan(batch=1, cur_pos=[127], **{**TG70B, **args})


def test_fixed_chunks_have_no_split_floor() -> None:
    assert make_plan(batch=1, cur_pos=[127], k_chunk_size=32, **TG70B).min_chunk_tiles == 1


def test_q_is_double_buffered_only_when_a_core_runs_several_pieces_and_it_fits() -> None:
    def q_pages(plan) -> int:
        return next(cb.num_pages for cb in plan.circular_buffers if cb.name == "q")

    one = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=1024, head_dim=128, cur_pos=[1000])
    several = make_plan(batch=16, num_q_heads=8, num_kv_heads=1, seq_len=1024, head_dim=128, cur_pos=[1000] * 16)
    assert max(len(v) for v in one.core_pieces.values()) == 1 and q_pages(one) == 4
    assert max(len(v) for v in several.core_pieces.values()) > 1 and q_pages(several) == 8
    # the same plan with just enough L1 for one Q slot: the prefetch slot is dropped, the plan still fits
    tight = several.l1_bytes_per_core - 1
    fits = make_plan(batch=16, num_q_heads=8, num_kv_heads=1, seq_len=1024, head_dim=128, cur_pos=[1000] * 16,
                     l1_bytes_per_core=tight)
    assert q_pages(fits) == 4 and fits.l1_bytes_per_core <= tight


# ---- dynamic chunks above 8 tiles ------------------------------------------------------------------


@pytest.mark.parametrize("per_piece, cap, chunk", [
    (1, 32, 1), (5, 32, 8), (8, 32, 8), (9, 32, 8), (16, 32, 8), (32, 32, 8), (33, 32, 16), (64, 32, 16),
    (65, 32, 32), (128, 32, 32), (1000, 32, 32), (65, 16, 16), (1000, 16, 16), (33, 8, 8), (1000, 8, 8),
    # the planner's short caps (SHORT_CHUNK_CAPS, when L1 overflows at 8 tiles)
    (1, 4, 1), (3, 4, 4), (5, 4, 4), (8, 4, 4), (1000, 4, 4), (3, 2, 2), (9, 1, 1)])
def test_a_dynamic_chunk_above_8_tiles_is_a_quarter_of_the_pieces_power_of_two_up_to_the_cap(per_piece, cap, chunk) -> None:
    """Up to 8 tiles a chunk holds the whole piece (the power of two at or above it); above 8 a piece takes
    at least three chunks (a quarter of its power of two), never more tiles than the cap (a cap below 8 too)."""
    assert dynamic_chunk_tiles(per_piece, 1, cap) == chunk


def test_the_split_floor_still_sets_the_smallest_dynamic_chunk() -> None:
    assert dynamic_chunk_tiles(3, 4, 32) == 4 and dynamic_chunk_tiles(1, 8, 16) == 8


@pytest.mark.parametrize("d, kv, attn_mask, rows, cap", [
    # chunk-sized CBs: K slots 2 x c x D/32 tiles, V slots 2 x c x (D/32 + 1) tiles (each key tile row ends
    # with a ones tile), scores and probabilities c x 4096 B each (2048 B with 16-row q tiles), attn_mask
    # rows 2 x c x 2048 B (1024 B); budget 576 KiB
    (64, DataType.bfloat8_b, False, 32, 16),   # c 32: 2*32*(2+3)*1088 + 2*32*4096 = 596 KiB; c 16: 298 KiB
    (64, DataType.bfloat8_b, False, 16, 32),   # c 32: 340 KiB + 2*32*2048 = 468 KiB
    (64, DataType.bfloat8_b, True, 32, 16),    # c 16: 298 KiB + 64 KiB = 362 KiB
    (64, DataType.bfloat8_b, True, 16, 32),    # c 32: 468 KiB + 64 KiB = 532 KiB
    (128, DataType.bfloat8_b, False, 16, 16),  # c 32: 612 KiB + 128 KiB; c 16: 2*16*(4+5)*1088 + 64 KiB = 370 KiB
    (128, DataType.bfloat16, False, 16, 8),    # c 16: 2*16*(4+5)*2048 + 64 KiB = 640 KiB; c 8: 320 KiB
    (256, DataType.bfloat8_b, False, 16, 8),   # c 16: 2*16*(8+9)*1088 + 64 KiB = 642 KiB; c 8: 321 KiB
    (256, DataType.bfloat4_b, False, 16, 16),  # c 16: 2*16*(8+9)*576 + 64 KiB = 370 KiB
])
def test_the_largest_cap_the_plan_may_take_is_the_largest_whose_chunk_buffers_fit_the_budget(d, kv, attn_mask, rows,
                                                                                             cap) -> None:
    assert fitting_chunk_cap(q_tiles=1, d_tiles=d // 32, dv_tiles=d // 32, kv_dtype=kv, attn_mask=attn_mask,
                             q_tile_rows=rows) == cap
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=8192, head_dim=d, kv_dtype=kv,
                     cur_pos=None if attn_mask else [8191], is_causal=not attn_mask, q_tile_rows=rows,
                     attn_mask_batch=1 if attn_mask else 0, max_cores_per_head_batch=4, chunk_cap=cap)
    assert plan.max_chunk_tiles == cap
    chunk_sized = sum(cb.total_size for cb in plan.circular_buffers if cb.name in ("k", "v", "scores", "probs", "attn_mask"))
    assert chunk_sized <= CHUNK_BUFFER_BUDGET


def test_the_model_takes_larger_chunks_where_the_compute_binds_and_8_where_the_dram_does() -> None:
    """One user at the cache's length decides (never the batch). T3K 4q/1kv at 32K on 16 cores per head:
    pieces of 64 key tiles are compute-bound, so a 16-tile chunk's saved fixed work (~3k cycles a chunk)
    outweighs its longer first read; on 32 cores per head (pieces of 32 tiles) and for Llama-3.1-8B at
    128K (on the interleaved DRAM floor, where a larger chunk only lengthens the last chunk's compute)
    the cap stays 8. The tech report's D 64 shape (one user: 16 pieces of 256 tiles) takes 32."""
    t3k = dict(num_q_heads=4, num_kv_heads=1, seq_len=32768, head_dim=128)
    assert {make_plan(batch=b, cur_pos=[32767] * b, max_cores_per_head_batch=16, **t3k).chunk_cap for b in (1, 4)} == {16}
    assert make_plan(batch=1, cur_pos=[32767], max_cores_per_head_batch=32, **t3k).chunk_cap == 8
    assert make_plan(batch=1, seq_len=131072, cur_pos=[131071], **LLAMA8B).chunk_cap == 8
    assert make_plan(batch=8, num_q_heads=8, num_kv_heads=1, seq_len=131072, head_dim=64, cur_pos=[131071] * 8,
                     max_cores_per_head_batch=16).chunk_cap == 32


def test_fixed_chunks_and_short_caches_keep_their_chunk() -> None:
    fixed = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=8192, head_dim=64, cur_pos=[8191],
                      k_chunk_size=256)
    assert fixed.max_chunk_tiles == 8
    short = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=320, head_dim=64, cur_pos=[319], chunk_cap=32)
    assert short.chunk_cap == 32 and short.max_chunk_tiles == 10


@pytest.mark.parametrize("bad", [12, 4, 64, True, "16"])
def test_a_chunk_cap_outside_the_plans_caps_is_refused(bad) -> None:
    with pytest.raises(PlanError, match="chunk_cap: expected None or one of"):
        make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=4096, head_dim=64, cur_pos=[4095], chunk_cap=bad)


def test_a_chunk_cap_with_fixed_chunks_is_refused() -> None:
    with pytest.raises(PlanError, match="chunk_cap: applies to dynamic chunks only"):
        make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=4096, head_dim=64, cur_pos=[4095],
                  chunk_cap=16, k_chunk_size=256)


def test_a_plan_that_fits_l1_only_with_a_smaller_chunk_cap_names_it() -> None:
    """Tech report D 128, B 20, key_row pages, 48 pieces per head, 32x32 q tiles: the model's 16-tile chunks
    leave too little L1 for the partials of 15 pieces per core; chunks of 8 fit, and the refusal says so.
    With 16x32 q tiles every partial takes half the bytes and the plan fits (with the cap the model takes
    for it), with 8x32 q tiles (the default for 8 q heads) a quarter."""
    args = dict(batch=20, num_q_heads=8, num_kv_heads=1, seq_len=131072, head_dim=128, cur_pos=[131071] * 20,
                max_cores_per_head_batch=48, kv_pages="key_row")
    with pytest.raises(PlanError, match=r"L1 overflow.*Set chunk_cap=8"):
        make_plan(**args, q_tile_rows=32)
    assert make_plan(**args, q_tile_rows=32, chunk_cap=8).pieces_per_work == 48
    half = make_plan(**args, q_tile_rows=16)
    assert half.q_tile_rows == 16 and half.pieces_per_work == 48
    quarter = make_plan(**args)
    assert quarter.q_tile_rows == 8 and quarter.pieces_per_work == 48


@pytest.mark.parametrize(("heads", "tokens", "rows"), [(8, 1, 8), (4, 2, 8), (2, 1, 8), (16, 1, 16), (4, 4, 16),
                                                       (32, 1, 32), (8, 3, 32)])
def test_q_rows_get_the_fewest_tile_rows_that_hold_them_by_default(heads: int, tokens: int, rows: int) -> None:
    plan = make_plan(batch=2, num_q_heads=heads, num_kv_heads=1, seq_len=2048, head_dim=64, cur_pos=[2047, 100],
                     num_tokens=tokens)
    assert plan.q_tile_rows == rows


@pytest.mark.parametrize("rows", [16, 8])
def test_small_q_tiles_shrink_every_q_row_buffer_and_leave_k_v_and_ones_whole(rows: int) -> None:
    args = dict(batch=2, num_q_heads=8, num_kv_heads=1, seq_len=4096, head_dim=128, cur_pos=[4095, 3000],
                max_cores_per_head_batch=8, attention_sink=True, return_lse=True, prescale_q=True, chunk_cap=8)
    full = {cb.name: cb for cb in make_plan(**args, q_tile_rows=32).circular_buffers}
    half = {cb.name: cb for cb in make_plan(**args, q_tile_rows=rows).circular_buffers}
    assert full.keys() == half.keys()
    q_rows = {"q", "mask", "max_bcast", "scores", "probs", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b",
              "alpha", "partial_in", "partial_out", "out", "lse", "q_scaled", "sink"}
    assert q_rows <= full.keys()
    for name, cb in half.items():
        f = full[name]
        assert (cb.index, cb.data_format, cb.num_pages) == (f.index, f.data_format, f.num_pages)
        if name in q_rows:
            assert (cb.tile_rows, cb.page_size) == (rows, f.page_size * rows // 32), name
        else:
            assert (cb.tile_rows, cb.page_size) == (32, f.page_size), name
    assert {n for n, cb in half.items() if cb.tile_rows == 32} >= {"k", "v", "ones"}


def test_small_q_tiles_with_more_q_rows_than_they_hold_are_refused() -> None:
    with pytest.raises(PlanError, match=r"q_tile_rows: 16 holds at most 16 q rows, but num_tokens x group size = 3 x 8"):
        make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=2048, head_dim=64, cur_pos=[2047], num_tokens=3,
                  q_tile_rows=16)
    with pytest.raises(PlanError, match=r"q_tile_rows: 8 holds at most 8 q rows, but num_tokens x group size = 1 x 16"):
        make_plan(batch=1, num_q_heads=16, num_kv_heads=1, seq_len=2048, head_dim=64, cur_pos=[2047], q_tile_rows=8)
    with pytest.raises(PlanError, match=r"q_tile_rows: expected None, 8, 16 or 32, got 4"):
        make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=2048, head_dim=64, cur_pos=[2047], q_tile_rows=4)


@pytest.mark.parametrize("pages, max_cores, nh", [("tile", 16, 4), ("tile", 32, 8), ("key_row", 60, 8)])
def test_the_tree_runs_on_short_noc_paths_with_the_same_cores_banks_and_areas(pages: str, max_cores: int,
                                                                                nh: int) -> None:
    """Where pieces run changes no number, only the NoC 0 paths of the partials (+x / +y around the
    torus). The plan relabels each work's pieces over the cores the work was given so that no swap of
    two pieces (of one DRAM bank with key_row pages) shortens the critical chain's hops or, at equal
    chain, all hops; and each core keeps its count of pieces and areas, each key_row piece its bank."""
    from ttdecode.core.noc_geometry import noc_hops
    from ttdecode.ops.flash_decode.plan import tree_hops

    plan = make_plan(batch=1, num_q_heads=nh, num_kv_heads=1, seq_len=32768, head_dim=128,
                     kv_dtype=DataType.bfloat8_b, cur_pos=[32767], max_cores_per_head_batch=max_cores,
                     grid=(8, 8), kv_pages=pages)
    p = plan.pieces_per_work
    cores_of = [next(q.core for q in plan.pieces if q.index == i) for i in range(p)]
    best = tree_hops(cores_of, p)
    modulus = 12 if pages == "key_row" else 1
    for a, b in itertools.combinations(range(p), 2):
        if (b - a) % modulus == 0:
            swapped = list(cores_of)
            swapped[a], swapped[b] = swapped[b], swapped[a]
            assert tree_hops(swapped, p) >= best, (a, b)
    # the chain's hops, recomputed from the pieces' parent cores: the deepest chain from each leaf
    parent = {q.index: q.parent_core for q in plan.pieces}
    chains = []
    for leaf in range(p):
        i, hops, rounds = leaf, 0, 0
        while i != 0:
            r, up = tree_parent(i)
            hops += noc_hops(cores_of[i], parent[i])
            assert parent[i] == cores_of[up]
            i, rounds = up, rounds + 1
        chains.append((rounds, hops))
    assert max(chains)[1] == best[0]
    # one piece per core here (a single work), on distinct cores, and the chain shorter than where the
    # placement alone put the pieces (piece i on the i-th core of the work, of its bank with key_row)
    assert len(set(cores_of)) == p
    if pages == "key_row":
        banks = key_row_placement(plan.cores, len(plan.cores) // 12)
        assert all(cores_of[i] in banks[i % 12] for i in range(p))
        before = [banks[i % 12][i // 12] for i in range(p)]
    else:
        before = [plan.cores[i] for i in range(p)]
    assert best < tree_hops(before, p)
