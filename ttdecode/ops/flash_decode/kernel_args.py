"""FlashDecode's kernel arguments from a plan: the named compile-time args of the reader, writer and
compute kernels, their common runtime args (buffer addresses; the positions with positions_in_args) and
each core's runtime args (its pieces). The layout of every list: ``program_factory``'s module doc."""

from __future__ import annotations

import struct
from typing import Optional, Sequence

import numpy as np

from ttdecode.core import formats
from ttdecode.core.program_description import Arg, BufferAddress, ComputeSettings, CoreCoord, NocX, NocY
from ttdecode.core.split import TILE, tree_children
from ttdecode.ops.flash_decode.plan import DecodePlan, Piece, RUNTIME_ARGS_HEADER, RUNTIME_ARGS_PER_PIECE
from ttdecode.ops.flash_decode.program_inputs import FactoryError

__all__ = ["READER_ARGS", "WRITER_ARGS", "COMPUTE_ARGS", "READER_COMMON_ARGS", "WRITER_COMMON_ARGS", "compile_args",
           "common_args", "position_words", "runtime_args"]

#: Runtime args of each kernel: (header, per piece). plan.RUNTIME_ARGS_* hold the largest.
READER_ARGS = (1, 3)
WRITER_ARGS = (1, 6)
COMPUTE_ARGS = (1, 2)
assert max(a for a, _ in (READER_ARGS, WRITER_ARGS, COMPUTE_ARGS)) <= RUNTIME_ARGS_HEADER
#: Common runtime args of the reader before the positions (positions_in_args) and of the writer.
READER_COMMON_ARGS = 7
WRITER_COMMON_ARGS = 2
assert max(b for _, b in (READER_ARGS, WRITER_ARGS, COMPUTE_ARGS)) == RUNTIME_ARGS_PER_PIECE


def float_bits(x: float) -> int:
    """The float32 bits of `x` as an unsigned word."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def compile_args(plan: DecodePlan, scale: float, compute: ComputeSettings, exp_approx: bool,
                  positions_in_args: bool = False) -> dict[str, dict[str, int]]:
    """The kernels' named compile-time args (read with get_named_compile_time_arg_val)."""
    nh_tiles = -(-plan.num_q_heads // TILE)
    shape = dict(
        q_tiles=plan.q_tiles,                      # q tile rows per KV group (T x g rows, token-major)
        dv_tiles=plan.dv_tiles,
        pieces_per_work=plan.pieces_per_work,      # pieces per (user, KV head)
        fixed_chunk_tiles=plan.fixed_chunk_tiles,  # 0 = dynamic chunks
        min_chunk_tiles=plan.min_chunk_tiles,      # split floor of dynamic chunks
        chunk_cap=plan.chunk_cap,                  # largest dynamic chunk in tiles
        cyclic_split=int(plan.cyclic_split),       # pieces take every p'-th key tile (kv_pages "key_row")
        bank_local=int(plan.bank_local),           # key_row pages of a paged cache: the reader's views
        spread_banks=int(plan.spread_banks),       # bank-local pieces take turns over every bank held
        dram_banks=plan.dram_banks,                # the DRAM banks pages are dealt over
        token_window=plan.sliding_window_size,     # each token's sliding window in keys (0 = none)
        tokens=plan.num_tokens,                    # new tokens per user (multi-token decode)
        q_tile_rows=plan.q_tile_rows,              # rows of the q-row CBs' tiles: 16 (16x32 tiles) or 32
    )
    # what the reader and the compute kernel both take besides `shape` (kernels/flash_decode/piece_args.hpp)
    pieces = dict(
        d_tiles=plan.d_tiles,
        max_chunk_tiles=plan.max_chunk_tiles,
        softmax_chunks=plan.softmax_chunks,          # chunks per online-softmax update (a softmax block)
        has_sink=int(plan.attention_sink),
        mla=int(plan.mla),                           # V tiles are the first dv_tiles K tiles of a row
        has_attn_mask=int(plan.has_attn_mask),       # attn_mask streamed with K, added to the scores
    )
    reader = dict(
        shape,
        **pieces,
        batch=plan.batch,
        num_kv_heads=plan.num_kv_heads,
        seq_tiles=plan.seq_len // TILE,
        group_size=plan.group_size,
        nh_tiles=nh_tiles,
        share_cache=int(plan.share_cache),
        kv_tile_bytes=formats.tile_size(plan.kv_dtype),
        key_row_pages=int(plan.kv_pages == "key_row"),  # a K/V page is a key-tile row (D / 32 tiles)
        # pieces' Q that cb_q holds at once: 2 when a core runs several pieces (the next one's Q and first
        # chunk are read during the current one)
        q_slots=next(cb.num_pages for cb in plan.circular_buffers if cb.name == "q") // (plan.q_tiles * plan.d_tiles),
        paged=int(plan.paged),
        block_tiles=(plan.block_size or 0) // TILE,  # 0 without paging
        max_blocks=plan.max_blocks,                  # page-table entries per user (0 without paging)
        num_blocks=plan.num_blocks or 0,             # blocks in the K/V pool (0 without paging): the page-id guard
        positions_in_args=int(positions_in_args),    # positions as common runtime args, not the cur_pos tensor
        mask_broadcast=int(plan.attn_mask_batch == 1),  # the mask has batch 1 (every user reads it)
    )
    writer = dict(
        shape,
        batch=plan.batch,                            # the output's [T, B, NH, Dv] pages
        num_kv_heads=plan.num_kv_heads,
        group_size=plan.group_size,
        nh_tiles=nh_tiles,
        return_lse=int(plan.return_lse),
        # bytes of one datum of the partials it sends up the tree (partial_in's format: float32 with an
        # fp32 DST, bfloat16 with a bf16 DST)
        partial_datum_bytes=formats.tile_size(next(cb.data_format for cb in plan.circular_buffers
                                                   if cb.name == "partial_in")) // (TILE * TILE),
        merge_slot=int(plan.merge_slot),  # partials one q tile row at a time through one slot, when granted
    )
    compute_args = dict(
        shape,
        **pieces,
        dst_tiles=compute.dst_tiles,
        scale_bits=float_bits(scale),
        # float32 bits of fp32(scale) - 1 (fp32 arithmetic): with a 16-bit DST the scores are scaled as
        # s + ((scale - 1) * s) * 1 by addcmul, rounded to bf16 rather than truncated (compute.cpp)
        scale_m1_bits=float_bits(float(np.float32(np.float32(scale) - np.float32(1.0)))),
        return_lse=int(plan.return_lse),
        exp_approx=int(exp_approx),                  # exp_tile<approx> in the softmax
        guard_empty_rows=int(plan.guard_empty_rows),  # floor the row max and sum (rows that may see no key)
        # the q rows holding heads in a q tile (T x g, at most 32): with <= 16 the row-wise SFPU ops run
        # VectorMode::R on just those rows
        head_rows=min(plan.num_tokens * plan.group_size, TILE),
        # the CBs unpacked straight to the fp32 DST (one unpack configuration): a copy or broadcast init
        # made for one of them serves them all
        to_dest_cbs=sum(1 << i for i in compute.unpack_to_dest_cbs),
        # a power-of-two scale: Q x scale once per piece (cb_q_scaled), no scale op per score tile
        q_prescaled=int(plan.prescale_q),
        merge_slot=int(plan.merge_slot),  # children's partials merged one q tile row at a time
    )
    return {"reader": reader, "writer": writer, "compute": compute_args}


def common_args(plan: DecodePlan, positions: Optional[Sequence[int]]) -> dict[str, list[Arg]]:
    """The reader's and writer's common runtime args (module doc); `positions` (positions_in_args) as
    uint32 words (-1 becomes 0xffffffff)."""
    reader: list[Arg] = [BufferAddress("q"), BufferAddress("k"), 0 if plan.mla else BufferAddress("v"),
                         0 if positions is not None else BufferAddress("cur_pos"),
                         BufferAddress("page_table") if plan.paged else 0,
                         BufferAddress("sink") if plan.attention_sink else 0,
                         BufferAddress("attn_mask") if plan.has_attn_mask else 0]
    assert len(reader) == READER_COMMON_ARGS
    if positions is not None:
        reader += position_words(plan, positions)
    writer: list[Arg] = [BufferAddress("out"), BufferAddress("lse") if plan.return_lse else 0]
    return {"reader": reader, "writer": writer, "compute": []}


def position_words(plan: DecodePlan, positions: Sequence[int]) -> list[int]:
    """B positions as the uint32 words of the reader's common args (two's complement; the kernels
    guard any value, so only the count is checked here)."""
    words = [int(p) & 0xFFFFFFFF for p in positions]
    if len(words) != plan.batch:
        raise FactoryError(f"positions: expected {plan.batch} positions (one per user), got {len(words)}")
    return words


def child_args(plan: DecodePlan, pieces: tuple[Piece, ...], where: dict[tuple[int, int, int], Piece]) -> list[Arg]:
    """merge_slot: the writer's args after its pieces' own, for every piece of the core in run order and each
    of its child rounds in merge order: the child's core (NoC x, NoC y) and its slot there (whose semaphore
    1 + slot takes the grants)."""
    out: list[Arg] = []
    for p in pieces:
        for _, child in tree_children(p.index, plan.pieces_per_work):
            c = where[(p.user, p.kv_head, child)]
            out += [NocX(c.core), NocY(c.core), c.slot]
    return out


def runtime_args(plan: DecodePlan, core: CoreCoord,
                  where: Optional[dict[tuple[int, int, int], Piece]] = None) -> dict[str, list[Arg]]:
    """The three kernels' runtime args on `core`; `where` (merge_slot plans): every piece by (user, KV head,
    index), for the writer's child args."""
    pieces: tuple[Piece, ...] = plan.core_pieces[core]
    n = len(pieces)
    reader: list[Arg] = [n]
    writer: list[Arg] = [n]
    compute: list[Arg] = [n]
    area = 0
    for slot, p in enumerate(pieces):
        if p.slot != slot:
            raise FactoryError(f"plan: core ({core.x},{core.y}) lists piece slot {p.slot} at position {slot}")
        # The writer hands partial areas over in slot order, so a piece's first area must be the
        # running total of the heights before it (how the plan numbers them).
        if p.height and p.recv_area != area:
            raise FactoryError(f"plan: piece {p} has area {p.recv_area}, the slot order gives {area}")
        area += p.height
        reader += [p.user, p.kv_head, p.index]
        if p.parent_core is None:
            writer += [p.user, p.kv_head, p.index, 0, 0, 0]
        else:
            writer += [p.user, p.kv_head, p.index, NocX(p.parent_core), NocY(p.parent_core), p.parent_area]
        compute += [p.user, p.index]
    if plan.merge_slot:
        writer += child_args(plan, pieces, where or {})
    return {"reader": reader, "writer": writer, "compute": compute}
