"""The FlashDecode work planner: pure, deterministic data.

From shapes, formats, positions and the program config, `make_plan` decides everything a launch
needs: which (user, KV head) *pieces* each core runs, the chunk range of every piece, the reduction
tree, the circular buffers and the L1 use per core. It runs no kernel and touches no device; a plan
that cannot fit is refused here, before anything runs, with the knob to turn.

Vocabulary (see tech_report/architecture.md):

- a *work* is one (user b, KV head h): the q heads of KV group h attend keys 0..cur_pos[b];
- the work's valid key tiles ``T = ceil((cur_pos + 1) / 32)`` (with a sliding window W, the tiles
  from ``floor(max(0, cur_pos - W + 1) / 32)`` to ``cur_pos // 32``) are cut into *chunks* of ``c`` tiles
  (``k_chunk_size / 32``, or dynamic from cur_pos and the split floor the cost model chooses for the
  shape), and the chunks are dealt over ``p`` *pieces*;
  ``p = min(max_cores_per_head_batch, max(1, cores // NKV), max chunks)`` depends on the config and
  the model shape only -- never on the batch size or the other users (batch invariance);
- piece 0, the root, owns the last chunk (the causal boundary); piece i gets a contiguous run of
  chunks, the first ``n % p`` pieces one chunk more; a piece with no chunk drops out;
- merge tree (binomial): in round r, piece i with ``i % 2^(r+1) == 2^r`` sends its partial
  (O, m, l) to piece ``i - 2^r``; the merge order depends on p alone;
- the batch decides only *where* pieces run. When there are more pieces than cores a core runs
  several, ordered by tree height (leaves first), which cannot deadlock: a piece waits only for
  children of lower height, and every core finishes its lower pieces first. Each work's pieces are
  relabeled over its cores so that the partials travel short NoC 0 paths (short_hop_order). With
  key_row pages a piece runs on a core kept for its bank, the banks' cores counted by their work,
  merges included, and each bank's pieces dealt heaviest first to its least loaded core (key_row_deal).

The chunk formulas here are mirrored in ``kernels/flash_decode/common.hpp`` (the kernels compute the ranges from
cur_pos at run time, so a cur_pos_tensor read on the device needs no new program);
``tests/test_plan.py`` pins them together.

The package: `make_plan` (here) checks the call (``plan_checks.check_plan_*``), then runs the steps of its modules:
``split_policy`` (the q rows' tiles and the split, taking the choices of ``split_choices``, which prices
candidates through the perf model's ``pricing``), ``placement`` (where pieces run, the merge tree), ``buffers``
(the circular buffers), ``resources`` (the L1 and runtime-args check, with the knob that makes a plan fit);
``merge_slot`` (the bounded merge, taken when the children's partials side by side overflow L1);
``types`` holds the plan's data, ``report`` prints a plan (`format_plan`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import L1_BYTES_PER_CORE, WORMHOLE_DRAM_BANKS
from ttdecode.core.split import SHORT_CHUNK_CAPS, SMALL_CHUNK_TILES, TILE
from ttdecode.ops.flash_decode.plan.buffers import (CHUNK_BUFFER_BUDGET, fitting_chunk_cap, flash_decode_cbs,
                                                    size_buffers)
from ttdecode.ops.flash_decode.plan.merge_slot import merge_slot_fits
from ttdecode.ops.flash_decode.plan.placement import (bank_core_counts, build_tree, grid_cores, key_row_deal,
                                                      key_row_placement, place_pieces, short_hop_order, tree_hops)
from ttdecode.ops.flash_decode.plan.report import format_plan
from ttdecode.ops.flash_decode.plan.resources import check_resources
from ttdecode.ops.flash_decode.plan.softmax_block import choose_softmax_chunks, softmax_block_refusal
from ttdecode.ops.flash_decode.plan.split_policy import READERS_PER_BANK, choose_split, q_rows
from ttdecode.ops.flash_decode.plan.types import (RUNTIME_ARGS_HEADER, RUNTIME_ARGS_PER_PIECE, TILE_BYTES, CBSpec,
                                                  DecodePlan, Piece, PlanError, ResourceError, cbs_bytes_per_core)
from ttdecode.ops.flash_decode.plan_checks import (check_plan_cache, check_plan_chunking, check_plan_positions,
                                                check_plan_sizes)

__all__ = ["make_plan", "format_plan", "power_of_two_scale", "DecodePlan", "Piece", "CBSpec", "PlanError",
           "ResourceError", "RUNTIME_ARGS_HEADER", "RUNTIME_ARGS_PER_PIECE", "TILE_BYTES", "cbs_bytes_per_core",
           "CHUNK_BUFFER_BUDGET", "flash_decode_cbs", "fitting_chunk_cap", "grid_cores", "key_row_placement",
           "bank_core_counts", "key_row_deal", "tree_hops", "short_hop_order", "UNSET_MAX_CORES_TRIES",
           "UNSET_MAX_CORES_TRIES_KEY_ROW"]

#: max_cores_per_head_batch=None ("not set"): the pieces per (user, KV head) tried in order, ttnn's
#: default first; the first whose plan fits is taken (kv_pages "key_row" with a contiguous cache needs at least a
#: piece per DRAM bank: 16, then the plan's dram_banks). A bank-local pool (key_row with a paged cache), our own
#: layout, first tries READERS_PER_BANK readers on every bank (48 on Wormhole; the planner's pricing then picks 1
#: to 4 readers per bank, so a batch that fills the cores keeps one), then the same tries as key_row.
UNSET_MAX_CORES_TRIES = (16, 8, 4, 2, 1)
UNSET_MAX_CORES_TRIES_KEY_ROW = (16, WORMHOLE_DRAM_BANKS)


def power_of_two_scale(scale: float) -> bool:
    """Is the softmax scale +-2^k with 2^k a normal float32 (make_plan's prescale_q): then Q x scale is
    exact in bf16 and gives the same fp32 scores as scaling each score (subnormal results aside)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale == 0:
        return False
    m, e = math.frexp(abs(scale))
    return m == 0.5 and -126 <= e - 1 <= 127


# ---- make_plan's steps ----------------------------------------------------------------------
# make_plan checks the call (plan_checks.check_plan_*), then decides in turn: the q rows' tiles (q_rows), the split
# (choose_split), the placement (place_pieces), the merge tree (build_tree), the buffers
# (size_buffers), and last the resources (check_resources). The checks run in one fixed order: a call
# with several faults is refused for the first.


def make_plan(
    *,
    batch: int,
    num_q_heads: int,
    num_kv_heads: int,
    seq_len: int,
    head_dim: int,
    head_dim_v: int | None = None,
    kv_dtype: DataType = DataType.bfloat8_b,
    q_dtype: DataType = DataType.bfloat16,
    cur_pos: Sequence[int] | None = None,
    grid: tuple[int, int] = (8, 8),
    sub_core_grids: Sequence[tuple[tuple[int, int], tuple[int, int]]] | None = None,
    k_chunk_size: int = 0,
    min_chunk_tiles: int | None = None,
    chunk_cap: int | None = None,
    max_cores_per_head_batch: int | None = 16,
    fp32_dest_acc_en: bool = True,
    math_fidelity: str = "HiFi2",
    exp_approx: bool = False,
    dst_full_sync_en: bool = False,
    share_cache: bool = False,
    return_lse: bool = False,
    block_size: int | None = None,
    num_blocks: int | None = None,
    sliding_window_size: int | None = None,
    attention_sink: bool = False,
    mla: bool = False,
    is_causal: bool = True,
    attn_mask_batch: int = 0,
    num_tokens: int = 1,
    kv_pages: str = "tile",
    key_row_pieces: int | None = None,
    prescale_q: bool = False,
    q_tile_rows: int | None = None,
    l1_bytes_per_core: int = L1_BYTES_PER_CORE,
    dram_banks: int = WORMHOLE_DRAM_BANKS,
    softmax_chunks: int | None = None,
    spread_banks: bool | None = None,
) -> DecodePlan:
    """Plan one FlashDecode step. Raises PlanError (naming the knob) when it cannot run.

    A paged cache gives `block_size` (keys per block, a multiple of 32 dividing seq_len) and
    `num_blocks` (blocks in the K/V tensors); both or neither. `sliding_window_size` (keys, None
    or 0 = none) limits each user to its last W keys; `attention_sink` adds the sink q rows.
    `mla`: there is no V tensor, V = K[..., :head_dim_v] (head_dim_v <= head_dim); K is read once
    and serves both Q . K^T and P . V. With a separate V, head_dim_v may differ from head_dim.
    `is_causal=False` attends all S keys of every user (no positions; the plan's cur_pos is S - 1
    for every user, which is what the kernels read); `attn_mask_batch` (1 or B; 0 = none, non-causal
    only) streams an additive mask [attn_mask_batch, 1, NH, S] with the K chunks. `num_tokens` T
    (1..32) new tokens per user share every K/V read: cur_pos[b] is the last one's position (at
    least T - 1, or -1), token j attends keys up to cur_pos[b] - (T - 1 - j) (each its own window).
    `min_chunk_tiles` (dynamic chunks only): the split floor, a power of two 1..8 tiles; None = the
    model's split: the floor the cost model chooses for the shape (split_choices.split_floor_tiles) and,
    with tile pages, pieces per (user, KV head) up to the most allowed that pay their tree rounds for
    one user at the cache's length (split_choices.tile_pieces; never the batch); given = the caller's split
    (the most pieces allowed: min(max_cores_per_head_batch, cores // num_kv_heads, S / 32)); 1 = spread
    the keys over every piece (no floor).
    `chunk_cap` (dynamic chunks only): the largest dynamic chunk in tiles, one of CHUNK_CAPS; None =
    the model's choice (split_choices.chunk_cap, for one user at the cache's length, never the batch) among
    those whose chunk-sized buffers fit CHUNK_BUFFER_BUDGET for the shape and dtypes (bank-local: then re-priced
    by the bank-local step at the chosen pieces, split_policy.choose_split). Each chunk costs a
    fixed amount of compute (the row max reduction, alpha, the rescales, the running set's copies and packs;
    perf_model.op_counts.chunk_ops), but the first chunk's read overlaps nothing.
    `math_fidelity`: the fidelity the cost model prices the split at (the compute config's; the kernels
    take theirs from the compute settings at launch). `exp_approx`: likewise the softmax's exp mode
    (SDPAProgramConfig.exp_approx_mode resolved; the kernels take theirs as the compile-time arg exp_approx).
    `kv_pages` "key_row": K and V come in key-row pages (one page per key-tile row, round robin over
    the `dram_banks` DRAM banks, the device's count, 12 on Wormhole: ttnn ND sharding of [1, 1, 32, D] shards over
    the banks). With a paged cache (bank-local): each (user, KV head) has one piece per bank its key tiles
    can sit in (core.split.bank_local_reach, at most max_cores_per_head_batch; `key_row_pieces` fewer, or up to
    four readers per bank, sub-pieces that take the bank's tiles in turn), piece i running near bank
    R_h[i % |R_h|]; the kernels find each piece's tiles from the page table (bank_local_view). With a
    contiguous cache each (user, KV head)
    then has a multiple of the banks in pieces up to max_cores_per_head_batch (>= the banks; the model's choice for the
    shape, split_choices.key_row_pieces: enough for one user to cover the cores, no more rounds than that)
    taking the key tiles cyclically, so every piece reads one bank, and the pieces of a bank run on
    the cores kept for that bank, as many as the bank's share of the work (key tiles, chunks and
    merges: every user's tree puts its merges in the same banks) asks (key_row_deal). `key_row_pieces` (kv_pages "key_row" only): that
    many pieces per (user, KV head) instead of the model's choice (a multiple of the banks up to the most).
    `prescale_q`: the softmax scale will be a power of two (+-2^k; the factory checks it), so the
    compute kernel multiplies each piece's Q by it once, exactly (a bf16 element only changes its
    exponent), instead of every score: the same fp32 scores bit for bit (scaling by 2^k commutes with
    the matmul's products and fp32 sums, subnormal results aside), one SFPU op per key tile fewer.
    `q_tile_rows`: rows of the tiles that hold q rows (DecodePlan.q_tile_rows); None = the fewest of
    8, 16, 32 that hold num_tokens x group size rows (16x32 tiles: the matmuls' in0, every copy and
    pack of scores, probabilities, statistics, O and partials, and the partial messages are halved;
    8x32 tiles: quartered). The outputs are the same bits either way (every step is row by row; the
    rows past the heads hold none).
    `softmax_chunks`: read chunks per online-softmax update (DecodePlan.softmax_chunks); None = the planner's
    (plan/softmax_block.py: more than 1 only on bank-local plans with an fp32 DST, one q tile row, no MLA
    or attn_mask, where a piece reads several chunks and the block's buffers fit L1); given = used as given,
    refused by name where it cannot run or fit.
    `spread_banks` (bank-local only): the pieces of a (user, KV head) take turns over every bank it holds
    (DecodePlan.spread_banks: equal pieces whatever the page table, reads spread over the banks) rather than keep
    to their own banks; None = the model's choice, weighed with the softmax block (split_policy: the option whose
    best block prices shortest over a sequential and a random page table); refused by name on any other plan.

    `max_cores_per_head_batch` None: not set by the user (SDPAProgramConfig's default): the first of
    UNSET_MAX_CORES_TRIES (16, 8, 4, 2, 1; "key_row": UNSET_MAX_CORES_TRIES_KEY_ROW) whose plan fits the cores'
    L1 and runtime args (e.g. DeepSeek-V3's absorbed MLA, 128 q heads of D 576, fits only with 1); if none fits,
    the same tries with short chunks (below); if none fits then, the error of 16. A value given is used as given.

    Short chunks: with dynamic chunks up to SMALL_CHUNK_TILES (k_chunk_size 0, no chunk_cap given), a plan that
    overflows L1 takes the largest cap of SHORT_CHUNK_CAPS (4, 2, 1 tiles) that fits instead (the split floor
    follows it): DeepSeek-V3's MLA at 16 pieces plans with chunks of 4 tiles. Any other overflowing plan is
    refused naming the knob that makes it fit.

    The steps, in order (each a function saying what it decides): check the call (check_plan_sizes,
    check_plan_chunking, check_plan_cache, check_plan_positions); the q rows' tiles (q_rows); the split
    (choose_split: chunk, floor, pieces, rounds); the placement (place_pieces); the tree's run order
    and addresses (build_tree); the buffers (size_buffers); the resource check (check_resources: L1
    and runtime args, with the knob that makes an overflowing plan fit); _plan_steps runs the steps up to the
    buffers, _plan the short chunks and the resource check. The
    function is long only by its signature and this documentation of the public knobs.
    """
    return _plan(dict(locals()), advise=True)


def _plan(call: dict[str, Any], *, advise: bool, short_chunks: bool = True) -> DecodePlan:
    """make_plan on `call` (make_plan's arguments by name): its steps (_plan_steps), then the resource check.
    `short_chunks`: a plan of dynamic chunks up to SMALL_CHUNK_TILES (the model's cap or the one L1 allows, no
    caller's chunk_cap) that overflows L1 takes instead the first of SHORT_CHUNK_CAPS whose plan passes the
    check (_plan_short_chunks); a plan that fits is never changed. `advise`: an L1 overflow is refused naming the
    knob that makes it fit, found by re-planning the call with other knobs; those re-plans run with
    `advise` False (they only tell whether a plan fits, and refuse without advice of their own)."""
    if call["max_cores_per_head_batch"] is None:
        return _plan_fitting_pieces(call, advise=advise)
    plan, cb_args = _plan_steps(short_cap=0, **call)
    l1 = call["l1_bytes_per_core"]
    if (short_chunks and plan.l1_bytes_per_core > l1 and not plan.fixed_chunk_tiles and call["chunk_cap"] is None
            and plan.chunk_cap == SMALL_CHUNK_TILES):
        short = _plan_short_chunks(call)
        if short is not None:
            return short

    def replan(**over: Any) -> DecodePlan:
        return _plan({**call, **over}, advise=False)

    check_resources(plan, l1, cb_args, replan if advise else None)
    return plan


def _plan_short_chunks(call: dict[str, Any]) -> DecodePlan | None:
    """The call planned with the first of SHORT_CHUNK_CAPS (largest first) whose plan passes the resource
    check, or None: the K/V slots, scores and probabilities shrink with the chunk (the split floor follows
    the cap; the pieces are the model's for it)."""
    for cap in SHORT_CHUNK_CAPS:
        plan, cb_args = _plan_steps(short_cap=cap, **call)
        try:
            check_resources(plan, call["l1_bytes_per_core"], cb_args, None)
        except ResourceError:
            continue
        return plan
    return None


def _plan_steps(
    *,
    short_cap: int,
    batch: int,
    num_q_heads: int,
    num_kv_heads: int,
    seq_len: int,
    head_dim: int,
    head_dim_v: int | None,
    kv_dtype: DataType,
    q_dtype: DataType,
    cur_pos: Sequence[int] | None,
    grid: tuple[int, int],
    sub_core_grids: Sequence[tuple[tuple[int, int], tuple[int, int]]] | None,
    k_chunk_size: int,
    min_chunk_tiles: int | None,
    chunk_cap: int | None,
    max_cores_per_head_batch: int | None,
    fp32_dest_acc_en: bool,
    math_fidelity: str,
    exp_approx: bool,
    dst_full_sync_en: bool,
    share_cache: bool,
    return_lse: bool,
    block_size: int | None,
    num_blocks: int | None,
    sliding_window_size: int | None,
    attention_sink: bool,
    mla: bool,
    is_causal: bool,
    attn_mask_batch: int,
    num_tokens: int,
    kv_pages: str,
    key_row_pieces: int | None,
    prescale_q: bool,
    q_tile_rows: int | None,
    l1_bytes_per_core: int,
    dram_banks: int,
    softmax_chunks: int | None,
    spread_banks: bool | None,
) -> tuple[DecodePlan, dict[str, Any]]:
    """make_plan's steps for a call with max_cores_per_head_batch set (the arguments are make_plan's, all
    given), in order: check the call, the q rows' tiles, the split (`short_cap`: the planner's cap below
    SMALL_CHUNK_TILES, one of SHORT_CHUNK_CAPS; 0 = none), the placement, the tree, the buffers. Returns the
    plan, unchecked for resources, and the flash_decode_cbs arguments of its buffers (for the check's advice).
    Long only by its signature; its body is that sequence."""
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    # -- check the call (the first fault is the one named)
    check_plan_sizes(batch=batch, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, seq_len=seq_len,
                     head_dim=head_dim, head_dim_v=head_dim_v, mla=mla, math_fidelity=math_fidelity, kv_dtype=kv_dtype)
    check_plan_chunking(seq_len=seq_len, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, num_tokens=num_tokens,
                        k_chunk_size=k_chunk_size, min_chunk_tiles=min_chunk_tiles, chunk_cap=chunk_cap,
                        prescale_q=prescale_q, q_tile_rows=q_tile_rows)
    window = check_plan_cache(seq_len=seq_len, block_size=block_size, num_blocks=num_blocks, share_cache=share_cache,
                              sliding_window_size=sliding_window_size)
    cur_pos = check_plan_positions(batch=batch, seq_len=seq_len, cur_pos=cur_pos, window=window,
                                   max_cores_per_head_batch=max_cores_per_head_batch, num_tokens=num_tokens,
                                   is_causal=is_causal, attn_mask_batch=attn_mask_batch)

    # -- the cores, the q rows' tiles, and what the cost model's choices need of the shape
    cores = grid_cores(grid, sub_core_grids)
    works = [(b, h) for b in range(batch) for h in range(num_kv_heads)]
    rows = q_rows(num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, num_tokens=num_tokens,
                  fp32_dest_acc_en=fp32_dest_acc_en, dst_full_sync_en=dst_full_sync_en, q_tile_rows=q_tile_rows)
    shape = dict(q_tiles=rows.q_tiles, d_tiles=head_dim // TILE, dv_tiles=head_dim_v // TILE,
                 fp32_dest_acc_en=fp32_dest_acc_en, dst_tiles=rows.dst_tiles, fidelity=math_fidelity,
                 head_rows=rows.head_rows, prescale_q=prescale_q, q_tile_rows=rows.q_tile_rows, mla=mla,
                 exp_approx=exp_approx)
    kv = dict(kv_tile_bytes=TILE_BYTES[kv_dtype],
              kv_tiles_per_key_tile=head_dim // TILE + (0 if mla else head_dim_v // TILE))

    # -- split, placement, tree, buffers, resource check
    split = choose_split(seq_len=seq_len, k_chunk_size=k_chunk_size, chunk_cap=chunk_cap,
                         min_chunk_tiles=min_chunk_tiles, max_cores_per_head_batch=max_cores_per_head_batch,
                         kv_pages=kv_pages, key_row_pieces=key_row_pieces, block_size=block_size,
                         num_kv_heads=num_kv_heads, head_dim=head_dim, head_dim_v=head_dim_v, kv_dtype=kv_dtype,
                         mla=mla, attn_mask_batch=attn_mask_batch, cores=cores, rows=rows, shape=shape, kv=kv,
                         dram_banks=dram_banks, batch=batch, num_q_heads=num_q_heads, grid=grid, short_cap=short_cap,
                         spread_banks=spread_banks)
    placed = place_pieces(cores=cores, works=works, split=split, kv_pages=kv_pages, share_cache=share_cache,
                          num_kv_heads=num_kv_heads, seq_len=seq_len, window=window, num_tokens=num_tokens,
                          shape=shape, kv_dtype=kv_dtype, block_size=block_size, dram_banks=dram_banks)
    pieces, core_pieces, recv_areas = build_tree(placed, pieces=split.pieces, cores=cores)
    buffers = dict(rows=rows, split=split, head_dim=head_dim, head_dim_v=head_dim_v, kv_dtype=kv_dtype, batch=batch,
                   seq_len=seq_len, block_size=block_size, attention_sink=attention_sink, mla=mla,
                   attn_mask_batch=attn_mask_batch, window=window, num_tokens=num_tokens, prescale_q=prescale_q,
                   fp32_dest_acc_en=fp32_dest_acc_en, recv_areas=recv_areas, core_pieces=core_pieces,
                   l1_bytes_per_core=l1_bytes_per_core, bank_local=kv_pages == "key_row" and block_size is not None)
    cb_args, cbs = size_buffers(**buffers)
    # the children's partials side by side overflow L1: merge them one q tile row at a time (plan/merge_slot.py)
    # when that fits (else the overflow is refused with the areas, naming the knobs)
    merge_slot = False
    if cbs_bytes_per_core(cbs) > l1_bytes_per_core and merge_slot_fits(core_pieces, split.pieces):
        slot_args, slot_cbs = size_buffers(**buffers, merge_slot=True)
        if cbs_bytes_per_core(slot_cbs) <= l1_bytes_per_core:
            merge_slot, cb_args, cbs = True, slot_args, slot_cbs
    # chunks per online-softmax update (plan/softmax_block.py), with the buffers that takes
    refusal = softmax_block_refusal(bank_local=buffers["bank_local"], fp32_dest_acc_en=fp32_dest_acc_en,
                                    q_tiles=rows.q_tiles, mla=mla, attn_mask_batch=attn_mask_batch)
    softmax_chunks = choose_softmax_chunks(
        asked=softmax_chunks, refusal=refusal, split=split,
        fits=lambda b: cbs_bytes_per_core(size_buffers(**buffers, merge_slot=merge_slot, softmax_chunks=b)[1])
        <= l1_bytes_per_core)
    if softmax_chunks > 1:
        cb_args, cbs = size_buffers(**buffers, merge_slot=merge_slot, softmax_chunks=softmax_chunks)
    plan = DecodePlan(
        batch=batch, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, seq_len=seq_len,
        head_dim=head_dim, head_dim_v=head_dim_v, q_dtype=q_dtype, kv_dtype=kv_dtype,
        share_cache=share_cache, return_lse=return_lse, grid=grid, cores=cores,
        pieces_per_work=split.pieces, rounds=split.rounds, fixed_chunk_tiles=split.fixed,
        max_chunk_tiles=split.max_chunk_tiles, min_chunk_tiles=split.floor, chunk_cap=split.cap,
        cur_pos=cur_pos, fp32_dest_acc_en=fp32_dest_acc_en, dst_tiles=rows.dst_tiles,
        pieces=pieces, core_pieces=core_pieces, circular_buffers=cbs, recv_areas=recv_areas,
        block_size=block_size, num_blocks=num_blocks, sliding_window_size=window,
        attention_sink=bool(attention_sink), mla=mla, is_causal=is_causal, attn_mask_batch=attn_mask_batch,
        num_tokens=num_tokens, kv_pages=kv_pages, prescale_q=prescale_q, q_tile_rows=rows.q_tile_rows,
        dram_banks=dram_banks, merge_slot=merge_slot, softmax_chunks=softmax_chunks,
        spread_banks=split.spread_banks,
    )
    return plan, cb_args


def _plan_fitting_pieces(call: dict[str, Any], *, advise: bool) -> DecodePlan:
    """make_plan with max_cores_per_head_batch not set: the first of the tries whose plan raises no
    ResourceError (module constants UNSET_MAX_CORES_TRIES*), first at the chunks up to SMALL_CHUNK_TILES, then
    (none fitting) with the short chunks (_plan's short_chunks); the first try's error when none fits."""
    tries: tuple[int, ...] = UNSET_MAX_CORES_TRIES
    if call.get("kv_pages") == "key_row":
        tries = (UNSET_MAX_CORES_TRIES_KEY_ROW[0], call["dram_banks"])
        if call.get("block_size") is not None:  # bank-local
            tries = (READERS_PER_BANK * call["dram_banks"],) + tries
    first_error: ResourceError | None = None
    for m in tries:
        try:
            return _plan({**call, "max_cores_per_head_batch": m}, advise=advise, short_chunks=False)
        except ResourceError as exc:
            first_error = first_error or exc
    for m in tries:
        try:
            return _plan({**call, "max_cores_per_head_batch": m}, advise=False)
        except ResourceError:
            continue
    assert first_error is not None
    raise first_error
