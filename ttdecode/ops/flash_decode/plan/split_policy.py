"""make_plan's split step: the q rows' tiles of a KV group (`q_rows`), then the chunk (fixed, or dynamic up to a
cap), the split floor, the pieces per (user, KV head) and the merge rounds (`choose_split`): the caller's knobs
where given, else the model-priced choices of `split_choices`. The same for every user (batch invariance).
Sizes in key tiles (32 keys)."""

from __future__ import annotations

import functools
from typing import Sequence

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import CoreCoord
from ttdecode.core.split import (CHUNK_CAPS, SMALL_CHUNK_TILES, TILE, bank_local_reach, split_block_tiles,
                                 tree_rounds)
from ttdecode.ops.flash_decode.plan.buffers import fitting_chunk_cap
from ttdecode.ops.flash_decode.plan.split_choices import chunk_cap as model_chunk_cap
from ttdecode.ops.flash_decode.plan.split_choices import bank_local_pieces as model_bank_local_pieces
from ttdecode.ops.flash_decode.plan.split_choices import key_row_pieces as model_key_row_pieces
from ttdecode.ops.flash_decode.plan.split_choices import split_floor_tiles, tile_pieces
from ttdecode.perf_model.pricing import bank_local_step_cycles
from ttdecode.ops.flash_decode.plan.softmax_block import block_sizes, softmax_block_refusal
from ttdecode.ops.flash_decode.plan.types import TILE_BYTES, PlanError, QRows, Split
from ttdecode.ops.flash_decode.plan_checks import MAX_ROUNDS

__all__ = ["q_rows", "choose_split", "key_row_most_pieces", "bank_local_most_pieces", "READERS_PER_BANK"]

#: The most readers (pieces of one (user, KV head)) sharing one DRAM bank in the bank-local split.
READERS_PER_BANK = 4


def q_rows(*, num_q_heads: int, num_kv_heads: int, num_tokens: int, fp32_dest_acc_en: bool,
           dst_full_sync_en: bool, q_tile_rows: int | None) -> QRows:
    """Decides the q tiles of one KV group: T x g q rows (token-major) in ceil(T x g / 32) tile rows, the
    DST tiles (16 halved with an fp32 DST, halved again without full sync), and the rows of the q-row
    tiles (the caller's, or None = the fewest of 8, 16, 32 that hold the group's rows)."""
    q_tiles = -(-(num_tokens * (num_q_heads // num_kv_heads)) // TILE)
    dst_tiles = 16 // (2 if fp32_dest_acc_en else 1) // (1 if dst_full_sync_en else 2)
    head_rows = min(num_tokens * (num_q_heads // num_kv_heads), TILE)
    if q_tile_rows is None:
        q_tile_rows = 8 if head_rows <= 8 else 16 if head_rows <= 16 else 32
    return QRows(q_tiles, dst_tiles, head_rows, q_tile_rows)


def _chunk_bounds(*, fixed: int, chunk_cap: int | None, short_cap: int, min_chunk_tiles: int | None, rows: QRows,
                  head_dim: int, head_dim_v: int, kv_dtype: DataType, mla: bool, attn_mask_batch: int,
                  shape: dict) -> tuple[int, int]:
    """Decides (cap, floor) in key tiles: the cap of dynamic chunks (the planner's `short_cap` when given,
    one of SHORT_CHUNK_CAPS; else the caller's chunk_cap; else the
    largest of CHUNK_CAPS whose chunk-sized buffers fit CHUNK_BUFFER_BUDGET, which choose_split may
    lower to the one the model prefers; SMALL_CHUNK_TILES with fixed chunks) and the split floor (the
    caller's min_chunk_tiles, else the cost model's split_choices.split_floor_tiles for the shape; 1 with
    fixed chunks), at most the cap (a short cap below the floor takes the floor down with it: no chunk
    exceeds the cap, so the pieces' chunks set how many get keys). Shape and dtypes only, never the batch."""
    if fixed:
        cap = SMALL_CHUNK_TILES
    elif short_cap:
        cap = short_cap
    elif chunk_cap is not None:
        cap = chunk_cap
    else:  # the most L1 allows; the model then takes the cap that pays (after the pieces)
        cap = fitting_chunk_cap(q_tiles=rows.q_tiles, d_tiles=head_dim // TILE, dv_tiles=head_dim_v // TILE,
                                kv_dtype=kv_dtype, mla=mla, attn_mask=attn_mask_batch > 0, q_tile_rows=rows.q_tile_rows)
    if fixed:
        floor = 1
    elif min_chunk_tiles is not None:
        floor = min_chunk_tiles
    else:
        floor = split_floor_tiles(**shape, kv_tile_bytes=TILE_BYTES[kv_dtype])
    return cap, min(floor, cap)


def _most_pieces(*, kv_pages: str, key_row_pieces: int | None, cores: Sequence[CoreCoord],
                 max_cores_per_head_batch: int, block_size: int | None, num_kv_heads: int, max_chunks: int,
                 dram_banks: int) -> int:
    """Decides the most pieces per (user, KV head) the split may use: with tile pages
    min(max_cores_per_head_batch, cores / NKV, chunks of the cache), at least 1; with key_row pages the
    largest multiple of the DRAM banks allowed (key_row_most_pieces), or with a paged cache (bank-local) the
    banks a KV head reaches (bank_local_most_pieces). Refuses an unknown `kv_pages` and a `key_row_pieces`
    outside what that allows (or given with tile pages)."""
    if key_row_pieces is not None and kv_pages != "key_row":
        raise PlanError(f"key_row_pieces: applies to kv_pages='key_row' only, got {key_row_pieces!r} with "
                        f"kv_pages={kv_pages!r}")
    if kv_pages == "key_row" and block_size is not None:
        most = bank_local_most_pieces(cores, max_cores_per_head_batch, block_size, num_kv_heads, dram_banks)
        if key_row_pieces is not None and (not isinstance(key_row_pieces, int) or not 1 <= key_row_pieces <= most):
            raise PlanError(f"key_row_pieces: expected None or 1 to {most} with a paged cache (up to "
                            f"{READERS_PER_BANK} pieces per DRAM bank a KV head's tiles reach, "
                            f"max_cores_per_head_batch={max_cores_per_head_batch}), got {key_row_pieces!r}")
    elif kv_pages == "key_row":
        most = key_row_most_pieces(cores, max_cores_per_head_batch, dram_banks)
        if key_row_pieces is not None and (not isinstance(key_row_pieces, int) or key_row_pieces < dram_banks
                                           or key_row_pieces % dram_banks or key_row_pieces > most):
            raise PlanError(f"key_row_pieces: expected None or a multiple of {dram_banks} from {dram_banks} to "
                            f"{most} (max_cores_per_head_batch={max_cores_per_head_batch}), got {key_row_pieces!r}")
    elif kv_pages == "tile":
        most = max(1, min(max_cores_per_head_batch, len(cores) // num_kv_heads, max_chunks))
    else:
        raise PlanError(f"kv_pages: expected 'tile' or 'key_row', got {kv_pages!r}")
    return most


def _pieces_for_cap(chunk_cap_tiles: int, *, kv_pages: str, key_row_pieces: int | None, fixed: int,
                    min_chunk_tiles: int | None, most: int, floor: int, num_kv_heads: int, num_cores: int,
                    seq_tiles: int, bank_local: bool, bank_reach: int, shape: dict, kv: dict) -> int:
    """Pieces per (user, KV head) with dynamic chunks capped at chunk_cap_tiles (or the fixed chunk):
    bank-local (key_row pages of a paged cache): the caller's key_row_pieces, else one piece per bank the
    KV head reaches (`bank_reach`, at most `most`) (the model prices no bank-local split yet: the split floor then leaves short contexts fewer
    pieces with keys, in the kernels); key_row pages: the caller's key_row_pieces, else the model's
    (split_choices.key_row_pieces); tile pages: `most` with fixed chunks or a caller's split floor, else the
    model's (split_choices.tile_pieces: the split floor and, below the most allowed, the pieces that pay their
    rounds). Never depends on the batch."""
    if bank_local:
        return min(most, bank_reach) if key_row_pieces is None else key_row_pieces
    if kv_pages == "key_row":
        if key_row_pieces is not None:
            return key_row_pieces
        return model_key_row_pieces(num_kv_heads=num_kv_heads, cores=num_cores, max_pieces=most,
                                    seq_tiles=seq_tiles, chunk_tiles=fixed if fixed else chunk_cap_tiles,
                                    fixed_chunk=bool(fixed), **shape, **kv)
    if fixed or min_chunk_tiles is not None:
        return most
    # the model's split: the split floor and, below the most allowed, the pieces that pay their rounds
    return tile_pieces(num_kv_heads=num_kv_heads, cores=num_cores, max_pieces=most, seq_tiles=seq_tiles,
                       floor_tiles=floor, chunk_tiles=chunk_cap_tiles, **shape, **kv)


def choose_split(*, seq_len: int, k_chunk_size: int, chunk_cap: int | None, min_chunk_tiles: int | None,
                 max_cores_per_head_batch: int, kv_pages: str, key_row_pieces: int | None, block_size: int | None,
                 num_kv_heads: int, head_dim: int, head_dim_v: int, kv_dtype: DataType, mla: bool,
                 attn_mask_batch: int, cores: Sequence[CoreCoord], rows: QRows, shape: dict, kv: dict,
                 dram_banks: int, batch: int, num_q_heads: int, grid: tuple[int, int], short_cap: int = 0,
                 spread_banks: bool | None = None) -> Split:
    """Decides the split (the same for every user: batch invariance): the chunk (fixed, or dynamic up to a
    cap), the split floor, the pieces per (user, KV head) and the merge rounds. With dynamic chunks and
    no caller's cap, the cap and its pieces are the pair the cost model gives the shortest step for one
    user at the cache's length (split_choices.chunk_cap), among the caps up to the one L1 allows. Bank-local
    without a caller's key_row_pieces: at that cap, 1 to READERS_PER_BANK readers per bank, the model's choice
    for the `batch` size on the `grid` (split_choices.bank_local_pieces; never the positions). `short_cap` (one
    of SHORT_CHUNK_CAPS, 0 = none): the planner's cap below SMALL_CHUNK_TILES for a plan that overflows L1 at
    SMALL_CHUNK_TILES (make_plan); the pieces are then the model's for that cap. Bank-local with the model's cap:
    the cap re-priced at the chosen pieces by the bank-local step (pricing.bank_local_step_cycles, one chunk per
    softmax update), ties to the first choice; Split.block_cycles prices the softmax block at that split. Bank-local: `spread_banks`
    (DecodePlan.spread_banks) as given, None = the model's choice at those pieces (_spread_with_blocks: the option
    whose best softmax block prices shortest; one piece never spreads); refused by name on any other plan."""
    fixed = k_chunk_size // TILE
    st = seq_len // TILE
    max_chunks = st // fixed if fixed else st
    cap, floor = _chunk_bounds(fixed=fixed, chunk_cap=chunk_cap, short_cap=short_cap, min_chunk_tiles=min_chunk_tiles,
                               rows=rows, head_dim=head_dim, head_dim_v=head_dim_v, kv_dtype=kv_dtype, mla=mla,
                               attn_mask_batch=attn_mask_batch, shape=shape)
    most = _most_pieces(kv_pages=kv_pages, key_row_pieces=key_row_pieces, cores=cores,
                        max_cores_per_head_batch=max_cores_per_head_batch, block_size=block_size,
                        num_kv_heads=num_kv_heads, max_chunks=max_chunks, dram_banks=dram_banks)
    split = functools.partial(_pieces_for_cap, kv_pages=kv_pages, key_row_pieces=key_row_pieces, fixed=fixed,
                              min_chunk_tiles=min_chunk_tiles, most=most, floor=floor, num_kv_heads=num_kv_heads,
                              num_cores=len(cores), seq_tiles=st, bank_local=kv_pages == "key_row" and bool(block_size),
                              bank_reach=bank_local_reach(num_kv_heads, split_block_tiles(block_size), dram_banks)
                              if kv_pages == "key_row" and block_size else 0,
                              shape=shape, kv=kv)
    caps = [cap]  # the caps a bank-local split re-prices at its pieces (the model's own choice below)
    if fixed or chunk_cap is not None or cap <= SMALL_CHUNK_TILES:
        pieces = split(cap)
    else:
        caps = sorted(c for c in CHUNK_CAPS if c <= cap)
        # the cap and its pieces that the model gives the shortest step for one user at the cache's length
        options = [(c, split(c)) for c in sorted(CHUNK_CAPS) if c <= cap]
        cap, pieces = model_chunk_cap(num_kv_heads=num_kv_heads, cores=len(cores), seq_tiles=st, floor_tiles=floor,
                                      options=options, cyclic=kv_pages == "key_row", stages_per_chunk=1 if mla else 2,
                                      **shape, **kv)
    bank_local = kv_pages == "key_row" and bool(block_size)
    block_cycles = None
    if spread_banks and not bank_local:
        raise PlanError("spread_banks: True needs a bank-local plan (kv_pages 'key_row' with a paged cache)")
    if bank_local:
        step = dict(batch=batch, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                    block_size=block_size, seq_len=seq_len, grid=tuple(grid), dram_banks=dram_banks,
                    kv_tile_bytes=kv["kv_tile_bytes"], q_tiles=shape["q_tiles"], head_rows=shape["head_rows"],
                    q_tile_rows=shape["q_tile_rows"], dst_tiles=shape["dst_tiles"], prescale_q=shape["prescale_q"],
                    fp32_dest_acc_en=shape["fp32_dest_acc_en"], fidelity=shape["fidelity"], chunk_cap=cap,
                    floor_tiles=floor, fixed_chunk_tiles=fixed, exp_approx=shape["exp_approx"])
        if key_row_pieces is None:
            pieces = model_bank_local_pieces(reach=bank_local_reach(num_kv_heads, split_block_tiles(block_size),
                                                                    dram_banks),
                                             most=most, readers_per_bank=READERS_PER_BANK, **step)
        if len(caps) > 1:
            cap = min(caps, key=lambda c: (bank_local_step_cycles(**{**step, "chunk_cap": c}, pieces=pieces), c != cap))
            step["chunk_cap"] = cap
        step["pieces"] = pieces
        if spread_banks is None and pieces == 1:  # one piece reads every tile held either way
            spread_banks = False
        if spread_banks is None:
            blocks = (1,) if softmax_block_refusal(
                bank_local=True, fp32_dest_acc_en=shape["fp32_dest_acc_en"], q_tiles=shape["q_tiles"], mla=mla,
                attn_mask_batch=attn_mask_batch) else block_sizes(st, pieces, fixed if fixed else min(cap, st))
            spread_banks = _spread_with_blocks(step, blocks)
        step["spread_banks"] = bool(spread_banks)
        block_cycles = functools.partial(_block_cycles, step)
    return Split(fixed=fixed, seq_tiles=st, floor=floor, cap=cap, pieces=pieces, rounds=tree_rounds(pieces),
                  max_chunk_tiles=fixed if fixed else min(cap, st), spread_banks=bool(spread_banks),
                  block_cycles=block_cycles)


def _spread_with_blocks(step: dict, blocks: Sequence[int]) -> bool:
    """Whether the bank-local pieces spread (DecodePlan.spread_banks): the option whose best softmax block of
    `blocks` prices shortest (_block_cycles: the longer of a sequential and a random page table), ties to own
    banks. The two are weighed together because a spread split keeps its pieces equal on a random table while an
    own-bank one follows the banks' counts, and a block's lost overlap weighs differently on each."""
    def best(spread: bool) -> float:
        return min(_block_cycles({**step, "spread_banks": spread}, b) for b in blocks)
    return best(True) < best(False)


def _block_cycles(step: dict, softmax_chunks: int) -> float:
    """The bank-local step (`step`: pricing.bank_local_step_cycles's arguments but the block) at a softmax block
    of `softmax_chunks` chunks: the longer of a sequential and a fixed random page table (a block that pays on
    one may lose on the other, and the plan serves whatever table comes)."""
    return max(bank_local_step_cycles(**step, softmax_chunks=softmax_chunks),
               bank_local_step_cycles(**step, softmax_chunks=softmax_chunks, random_table=True))


def key_row_most_pieces(cores: Sequence[CoreCoord], max_pieces: int, dram_banks: int) -> int:
    """The most pieces per work for kv_pages "key_row" with a contiguous cache.

    The most pieces per (user, KV head): the largest multiple of `dram_banks` up to max_pieces (and the
    tree's width, 64), so every piece reads one bank (make_plan then lets the model choose
    fewer, split_choices.key_row_pieces); like the interleaved split they depend on the config alone,
    never on the batch (batch invariance). Where they run: key_row_deal."""
    if len(cores) < dram_banks:
        raise PlanError(f"kv_pages: 'key_row' keeps at least one core per DRAM bank ({dram_banks}), the grid "
                        f"gives {len(cores)} cores")
    if max_pieces < dram_banks:
        raise PlanError(f"max_cores_per_head_batch: expected at least {dram_banks} with kv_pages='key_row' "
                        f"(each (user, KV head) takes a multiple of {dram_banks} pieces, one bank each), got {max_pieces}")
    return min(max_pieces, 1 << MAX_ROUNDS) // dram_banks * dram_banks


def bank_local_most_pieces(cores: Sequence[CoreCoord], max_pieces: int, block_size: int, num_kv_heads: int,
                           dram_banks: int) -> int:
    """The most pieces per work for kv_pages "key_row" with a paged cache (bank-local): READERS_PER_BANK per
    DRAM bank a KV head's key tiles can sit in (core.split.bank_local_reach: |R_h|, from NKV, block_size / 32
    and the banks), at most max_pieces, the cores and the tree's width. Refuses a block that is neither a
    multiple of 32 keys (a key-row page is 32 keys) nor 16 (a padded key-tile row a page), and a grid with fewer
    cores than the banks."""
    if block_size % TILE and block_size != TILE // 2:
        raise PlanError(f"block_size: expected a multiple of {TILE} or {TILE // 2} with kv_pages='key_row' (a page "
                        f"holds one key-tile row of {TILE} keys), got {block_size}")
    if len(cores) < dram_banks:
        raise PlanError(f"kv_pages: 'key_row' keeps at least one core per DRAM bank ({dram_banks}), the grid "
                        f"gives {len(cores)} cores")
    reach = bank_local_reach(num_kv_heads, split_block_tiles(block_size), dram_banks)
    return max(1, min(max_pieces, READERS_PER_BANK * reach, len(cores), 1 << MAX_ROUNDS))
