"""The FlashDecode program factory: a `DecodePlan` becomes one `Program` (see ttdecode/core/program_description.py).

`build_program` is a pure function of the plan and the inputs: three kernels (reader, writer,
compute from ``kernels/``) on every core that runs a piece, the plan's circular buffers and one
semaphore per tree height level on those cores, and the DRAM tensors:

==========  ==========================================  =========  =================================
name        shape                                       layout     format
==========  ==========================================  =========  =================================
q           [T, B, NH, D] (T new tokens per user)       tile       bfloat16
k, v        [B or 1, NKV, S, D] / [.., Dv]              tile       the plan's kv_dtype
            paged: [num_blocks, NKV, block_size, D/Dv]
            MLA (plan.mla): no v; V = k[..., :Dv]
cur_pos     [B] int32 (-1 skips a user)                 row-major  4-byte words (DataType.float32)
page_table  [B, max_blocks] int32 (paged only)          row-major  4-byte words, one page per user
sink        [NH, 32] (attention sink only; column 0)    tile       bfloat16
attn_mask   [B or 1, 1, NH, S] (attn_mask only)         tile       bfloat16 (additive, -inf masks)
out         [T, B, NH, Dv]                              tile       bfloat16 (output)
lse         [B * NKV, q_tiles * 32] (return_lse only)   row-major  float32 (output; T x g rows, token-major)
==========  ==========================================  =========  =================================

Positions reach the kernels through the ``cur_pos`` tensor (``cur_pos_tensor``, or the host
runtime's image of a list), or, with ``positions_in_args`` (a device call given a list), as the
reader's common runtime args: nothing is uploaded. The kernels derive every chunk range from them,
so the same program serves every decode step. The reader guards them: a position outside -1..S-1
(or a page id outside the pool in the blocks a user attends) skips the user.

Common runtime arguments (the same on every core; a cached program patches them per call):

- reader:  q, k, v (0 with MLA), cur_pos (0 with positions_in_args), page_table (0 without paging),
  sink (0 without a sink), attn_mask (0 without a mask) addresses; with positions_in_args the B
  positions;
- writer:  out, lse (0 without LSE) addresses.

Runtime arguments (per core; ``n`` = pieces on the core, in slot order):

- reader:  n, then (user, kv head, piece index) per piece;
- writer:  n, then (user, kv head, piece index, parent NoC x, parent NoC y, parent's area) per piece
  (zeros for a root);
- compute: n, then (user, piece index) per piece.

Compile-time arguments are named (``_compile_args``; the kernels read them with
``get_named_compile_time_arg_val("name")``).

`run_flash_decode` runs the program on a backend and decodes the output tensors.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.split import TILE, tree_children
from ttdecode.ops.flash_decode.plan import (DecodePlan, Piece, RUNTIME_ARGS_HEADER, RUNTIME_ARGS_PER_PIECE,
                                            power_of_two_scale)
from ttdecode.core.program_description import (
    kv_cache_tensor,
    Arg,
    UnpackToDestMode,
    unpack_to_dest_modes,
    BufferAddress,
    CircularBuffer,
    ComputeSettings,
    CoreCoord,
    CoreRangeSet,
    DramTensor,
    Kernel,
    KernelKind,
    NocX,
    NocY,
    Program,
    Semaphore,
)
from ttdecode.core.tensor import TileTensor, from_torch, to_torch
from ttdecode.core.paths import operator_kernels
from ttdecode.ops.flash_decode.validate import HALF_TILE_BLOCK, reached_blocks
from ttdecode.runtime import run_program

__all__ = ["FactoryError", "build_program", "build_program_for_device", "run_flash_decode", "decode_outputs",
           "decode_lse_rows", "kernel_sources", "page_table_bytes"]

Positions = Union[Sequence[int], torch.Tensor]

#: Runtime args of each kernel: (header, per piece). plan.RUNTIME_ARGS_* hold the largest.
READER_ARGS = (1, 3)
WRITER_ARGS = (1, 6)
COMPUTE_ARGS = (1, 2)
assert max(a for a, _ in (READER_ARGS, WRITER_ARGS, COMPUTE_ARGS)) <= RUNTIME_ARGS_HEADER
#: Common runtime args of the reader before the positions (positions_in_args) and of the writer.
READER_COMMON_ARGS = 7
WRITER_COMMON_ARGS = 2
assert max(b for _, b in (READER_ARGS, WRITER_ARGS, COMPUTE_ARGS)) == RUNTIME_ARGS_PER_PIECE


class FactoryError(ValueError):
    """Inputs that do not match the plan; the message names the argument."""


#: Q (or the output) held height-sharded in L1: (the holder cores in shard order, tiles per shard). None:
#: interleaved DRAM.
QShards = Optional[tuple[tuple[CoreCoord, ...], int]]


def kernel_sources() -> dict[str, Path]:
    """Paths of reader.cpp, writer.cpp and compute.cpp (the package's ``kernels/flash_decode/``)."""
    return operator_kernels("flash_decode", FactoryError)


# ---- inputs -------------------------------------------------------------------------------------


def _expect_tile_tensor(name: str, t: Any, shape: tuple[int, ...], dtype: DataType) -> TileTensor:
    if not isinstance(t, TileTensor):
        raise FactoryError(f"{name}: expected a ttdecode TileTensor, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise FactoryError(f"{name}: expected shape {list(shape)} (from the plan), got {list(t.shape)}")
    if t.dtype is not dtype:
        raise FactoryError(f"{name}: expected {dtype.value} tiles (from the plan), got {t.dtype.value}")
    return t


def positions_bytes(plan: DecodePlan, cur_pos_source: Optional[Positions]) -> bytes:
    """The int32 positions page: from the list or tensor given, else from the plan."""
    if cur_pos_source is None:
        if plan.cur_pos is None:
            raise FactoryError("cur_pos_source: the plan has no positions (cur_pos_tensor), so they must be given")
        values = list(plan.cur_pos)
    elif isinstance(cur_pos_source, torch.Tensor):
        if cur_pos_source.is_floating_point() or cur_pos_source.dim() != 1:
            raise FactoryError(
                f"cur_pos_source: expected a 1-D integer tensor [B={plan.batch}], got "
                f"{cur_pos_source.dtype} shape {list(cur_pos_source.shape)}"
            )
        values = [int(x) for x in cur_pos_source.detach().cpu().tolist()]
    else:
        values = [int(x) for x in cur_pos_source]
    if len(values) != plan.batch:
        raise FactoryError(f"cur_pos_source: expected {plan.batch} positions (one per user), got {len(values)}")
    for b, p in enumerate(values):
        if not -1 <= p < plan.seq_len:
            raise FactoryError(f"cur_pos_source[{b}]: expected -1..{plan.seq_len - 1}, got {p}")
    if plan.cur_pos is not None and tuple(values) != tuple(plan.cur_pos):
        raise FactoryError(f"cur_pos_source: {values} differ from the plan's positions {list(plan.cur_pos)}")
    return np.asarray(values, dtype="<i4").tobytes()


def page_table_bytes(plan: DecodePlan, page_table: Any) -> bytes:
    """The int32 page-table image [B, max_blocks] (row-major, one page per user) of a paged plan."""
    if not plan.paged:
        if page_table is not None:
            raise FactoryError("page_table: expected None (the plan is for a contiguous cache), got a page table")
        return b""
    shape = [plan.batch, plan.max_blocks]
    if not isinstance(page_table, torch.Tensor) or page_table.is_floating_point() or page_table.is_complex() \
            or page_table.dtype is torch.bool:
        got = f"{page_table.dtype} tensor" if isinstance(page_table, torch.Tensor) else type(page_table).__name__
        raise FactoryError(f"page_table: expected an integer torch tensor {shape} (the paged plan's), got {got}")
    if list(page_table.shape) != shape:
        raise FactoryError(f"page_table: expected shape {shape} (B, max_blocks of the plan), got {list(page_table.shape)}")
    table = page_table.detach().cpu().to(torch.int64)
    wide = (table < -(1 << 31)) | (table >= 1 << 31)
    if bool(wide.any()):
        b, j = (int(i) for i in wide.nonzero()[0])
        raise FactoryError(f"page_table[{b}, {j}]: expected an int32 value, got {int(table[b, j])}")
    # the entries the users' positions reach must be block ids; the kernels never read the others
    # (validate.reached_blocks); positions read by the kernels (plan.cur_pos None): the kernels guard
    for b, pos in enumerate(plan.cur_pos or ()):
        for j in reached_blocks(int(pos), plan.block_size, plan.sliding_window_size, plan.num_tokens):
            if not 0 <= int(table[b, j]) < plan.num_blocks:
                raise FactoryError(f"page_table[{b}, {j}]: expected a block id in 0..{plan.num_blocks - 1} "
                                   f"(user {b} at position {pos} reads it), got {int(table[b, j])}")
    return table.numpy().astype("<i4").tobytes()


def sink_tiles(plan: DecodePlan, attention_sink: Any) -> TileTensor:
    """The sink as the kernels read it: bf16 tiles [NH, 32], the head's logit in column 0.
    Takes a torch float tensor [NH] or [NH, 32] (column 0) or a TileTensor [NH, 32]."""
    nh = plan.num_q_heads
    if isinstance(attention_sink, TileTensor):
        attention_sink = to_torch(attention_sink)
    if not isinstance(attention_sink, torch.Tensor) or not attention_sink.is_floating_point():
        got = f"{attention_sink.dtype} tensor" if isinstance(attention_sink, torch.Tensor) else type(attention_sink).__name__
        raise FactoryError(f"attention_sink: expected a float tensor [NH={nh}] or [NH={nh}, 32], got {got}")
    shape = list(attention_sink.shape)
    if shape == [nh]:
        column0 = attention_sink
    elif shape == [nh, TILE]:
        column0 = attention_sink[:, 0]
    else:
        raise FactoryError(f"attention_sink: expected shape [{nh}] or [{nh}, 32], got {shape}")
    tile = torch.zeros(nh, TILE, dtype=torch.float32)
    tile[:, 0] = column0.detach().cpu().to(torch.float32)
    return from_torch(tile, DataType.bfloat16)


def mask_shape(plan: DecodePlan) -> tuple[int, int, int, int]:
    """The attn_mask tensor of a plan with a mask: [attn_mask_batch, 1, NH, S]."""
    return (plan.attn_mask_batch, 1, plan.num_q_heads, plan.seq_len)


def mask_tiles(plan: DecodePlan, attn_mask: Any) -> TileTensor:
    """The additive mask as the reader streams it: bf16 tiles [B or 1, 1, NH, S] (rows are heads).
    Takes a torch float tensor (stored as bfloat16) or a bfloat16 TileTensor; values must be finite
    or -inf (a NaN or +inf would turn whole rows into NaN on the chip)."""
    shape = mask_shape(plan)
    if isinstance(attn_mask, TileTensor):
        mask = _expect_tile_tensor("attn_mask", attn_mask, shape, DataType.bfloat16)
        values = to_torch(mask)
    elif isinstance(attn_mask, torch.Tensor) and attn_mask.is_floating_point():
        if tuple(attn_mask.shape) != shape:
            raise FactoryError(f"attn_mask: expected shape {list(shape)} (from the plan), got {list(attn_mask.shape)}")
        values = attn_mask.detach().cpu().to(torch.bfloat16).to(torch.float32)
        mask = from_torch(values, DataType.bfloat16)
    else:
        got = f"{attn_mask.dtype} tensor" if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
        raise FactoryError(f"attn_mask: expected a float tensor or bfloat16 TileTensor {list(shape)}, got {got}")
    if bool(torch.isnan(values).any()) or bool(torch.isposinf(values).any()):
        raise FactoryError("attn_mask: expected finite values or -inf, got NaN or +inf entries")
    return mask


def _kv_shapes(plan: DecodePlan) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """K and V shapes: [B or 1, NKV, S, D/Dv], or [num_blocks, NKV, block_size, D/Dv] when paged."""
    if plan.paged:
        lead, rows = plan.num_blocks, plan.block_size
    else:
        lead, rows = (1 if plan.share_cache else plan.batch), plan.seq_len
    nkv = plan.num_kv_heads
    return (lead, nkv, rows, plan.head_dim), (lead, nkv, rows, plan.head_dim_v)


# ---- the program --------------------------------------------------------------------------------


def _float_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _compile_args(plan: DecodePlan, scale: float, compute: ComputeSettings, exp_approx: bool,
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
        dram_banks=plan.dram_banks,                # the DRAM banks pages are dealt over
        token_window=plan.sliding_window_size,     # each token's sliding window in keys (0 = none)
        tokens=plan.num_tokens,                    # new tokens per user (multi-token decode)
        q_tile_rows=plan.q_tile_rows,              # rows of the q-row CBs' tiles: 16 (16x32 tiles) or 32
    )
    reader = dict(
        shape,
        batch=plan.batch,
        num_kv_heads=plan.num_kv_heads,
        seq_tiles=plan.seq_len // TILE,
        d_tiles=plan.d_tiles,
        group_size=plan.group_size,
        nh_tiles=nh_tiles,
        max_chunk_tiles=plan.max_chunk_tiles,
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
        has_sink=int(plan.attention_sink),
        mla=int(plan.mla),                           # V tiles are the first dv_tiles K tiles of a row
        has_attn_mask=int(plan.has_attn_mask),       # attn_mask streamed with K
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
        d_tiles=plan.d_tiles,
        max_chunk_tiles=plan.max_chunk_tiles,
        dst_tiles=compute.dst_tiles,
        scale_bits=_float_bits(scale),
        # float32 bits of fp32(scale) - 1 (fp32 arithmetic): with a 16-bit DST the scores are scaled as
        # s + ((scale - 1) * s) * 1 by addcmul, rounded to bf16 rather than truncated (compute.cpp)
        scale_m1_bits=_float_bits(float(np.float32(np.float32(scale) - np.float32(1.0)))),
        return_lse=int(plan.return_lse),
        has_sink=int(plan.attention_sink),
        exp_approx=int(exp_approx),                  # exp_tile<approx> in the softmax
        mla=int(plan.mla),                           # P . V reads its V tiles out of the K slot
        has_attn_mask=int(plan.has_attn_mask),       # attn_mask tiles added to the scores
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


def _common_args(plan: DecodePlan, positions: Optional[Sequence[int]]) -> dict[str, list[Arg]]:
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


def _child_args(plan: DecodePlan, pieces: tuple[Piece, ...], where: dict[tuple[int, int, int], Piece]) -> list[Arg]:
    """merge_slot: the writer's args after its pieces' own, for every piece of the core in run order and each
    of its child rounds in merge order: the child's core (NoC x, NoC y) and its slot there (whose semaphore
    1 + slot takes the grants)."""
    out: list[Arg] = []
    for p in pieces:
        for _, child in tree_children(p.index, plan.pieces_per_work):
            c = where[(p.user, p.kv_head, child)]
            out += [NocX(c.core), NocY(c.core), c.slot]
    return out


def _runtime_args(plan: DecodePlan, core: CoreCoord,
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
        writer += _child_args(plan, pieces, where or {})
    return {"reader": reader, "writer": writer, "compute": compute}


def build_program(
    plan: DecodePlan,
    *,
    q: TileTensor,
    k: TileTensor,
    v: Optional[TileTensor],
    cur_pos_source: Optional[Positions],
    scale: float,
    compute: ComputeSettings,
    exp_approx: bool = False,
    page_table: Optional[torch.Tensor] = None,
    attention_sink: Optional[torch.Tensor] = None,
    attn_mask: Any = None,
    positions_in_args: bool = False,
    q_shards: QShards = None,
    out_shards: QShards = None,
) -> Program:
    """The one FlashDecode program of a decode step, carrying its input bytes (the host runtime).
    `positions_in_args`: the positions travel as the reader's common runtime args (the device form of a
    list), not as the cur_pos tensor; the same outputs. `q_shards` / `out_shards`: Q read from / the output
    written to L1 shards (`_program`).

    q/k/v: tile tensors in the plan's shapes and formats (paged: [num_blocks, NKV, block_size, D]);
    v is None for an MLA plan (V = k[..., :Dv], read out of K by the kernels);
    cur_pos_source: the positions (list or int tensor; None to take the plan's); scale: the softmax
    scale; compute: the compute-kernel settings, whose fp32 accumulation must be the plan's (it
    sized DST blocks); exp_approx: the softmax's exp in approximate mode (SDPAProgramConfig's
    exp_approx_mode, resolved; a compile-time arg of the compute kernel); page_table: a paged plan's integer tensor [B, max_blocks] (None otherwise).
    """
    b, nh = plan.batch, plan.num_q_heads
    k_shape, v_shape = _kv_shapes(plan)
    q = _expect_tile_tensor("q", q, (plan.num_tokens, b, nh, plan.head_dim), DataType.bfloat16)
    k = _expect_tile_tensor("k", k, k_shape, plan.kv_dtype)
    pos_image = positions_bytes(plan, cur_pos_source)
    images = {"q": q.data, "k": k.data, "cur_pos": pos_image}
    if plan.mla:
        if v is not None:
            raise FactoryError("v: expected None for an MLA plan (V = k[..., :head_dim_v]), got a tensor")
    else:
        images["v"] = _expect_tile_tensor("v", v, v_shape, plan.kv_dtype).data
    table_image = page_table_bytes(plan, page_table)  # also refuses a page table for a contiguous plan
    if plan.paged:
        images["page_table"] = table_image
    if plan.attention_sink:
        images["sink"] = sink_tiles(plan, attention_sink).data
    elif attention_sink is not None:
        raise FactoryError("attention_sink: expected None (the plan has no sink), got a tensor")
    if plan.has_attn_mask:
        images["attn_mask"] = mask_tiles(plan, attn_mask).data
    elif attn_mask is not None:
        raise FactoryError("attn_mask: expected None (the plan has no mask), got a tensor")
    positions = list(struct.unpack(f"<{plan.batch}i", pos_image)) if positions_in_args else None
    return _program(plan, scale=scale, compute=compute, exp_approx=exp_approx, images=images, positions=positions,
                    q_shards=q_shards, out_shards=out_shards)


def build_program_for_device(plan: DecodePlan, *, scale: float, compute: ComputeSettings,
                             exp_approx: bool = False, positions: Optional[Sequence[int]] = None,
                             q_shards: QShards = None, out_shards: QShards = None) -> Program:
    """The same program without input bytes: on a device the inputs already live in DRAM (or, with
    `q_shards`, Q in the L1 shards of its holders).
    `positions` (B ints): positions_in_args, the positions travel as the reader's common runtime args
    (no cur_pos tensor; a cached program patches them per call); None: the kernels read the cur_pos tensor."""
    return _program(plan, scale=scale, compute=compute, exp_approx=exp_approx, images=None, positions=positions,
                    q_shards=q_shards, out_shards=out_shards)


def _bf16_tiles(name: str, shape: tuple[int, ...], data: Optional[bytes], shards: QShards,
                is_output: bool = False) -> DramTensor:
    """Q [T, B, NH, D] or the output [T, B, NH, Dv], bf16 tiles: interleaved in DRAM, or height-sharded in
    L1 on `shards`' holders."""
    bf16 = DataType.bfloat16
    cores, pages = shards if shards is not None else ((), 0)
    return DramTensor(name, bf16, formats.tile_size(bf16), formats.num_tiles(shape), shape, "tile", data,
                      is_output=is_output, shard_cores=tuple(cores), shard_pages=pages)


def _shard_defines(prefix: str, shards: QShards, common: list[Arg]) -> dict[str, str]:
    """With a tensor in L1 shards: a kernel's defines (`prefix`_SHARDS: shard count, _SHARD_PAGES: tiles per
    shard, _SHARD_ARGS: the common-arg index of the holders' NoC coordinates) and those coordinates
    appended to `common` (x, y per holder)."""
    if shards is None:
        return {}
    cores, pages = shards
    first = len(common)
    common += [a for c in cores for a in (NocX(c), NocY(c))]
    return {f"{prefix}_SHARDS": str(len(cores)), f"{prefix}_SHARD_PAGES": str(pages),
            f"{prefix}_SHARD_ARGS": str(first)}


#: The CBs the compute kernel reads only with copy_tile / unary_bcast: unpacked straight to the fp32
#: DST (UnpackToDestFp32), so their fp32 values arrive bit for bit. cb_probs, read by the matmuls,
#: stays Default (TF32 through SrcB); the other float32 CBs are never unpacked by the compute kernel.
UNPACK_TO_DEST_CBS = ("scores", "max_bcast", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b", "alpha",
                      "partial_in")


def compute_settings_for(plan: DecodePlan, compute: ComputeSettings) -> ComputeSettings:
    """`compute` with the kernels' per-CB unpack-to-dest modes (none with a bf16 DST, where a 32-bit
    unpack to DST is not available); a caller's own non-empty modes are refused."""
    if compute.unpack_to_dest_mode and any(m is not UnpackToDestMode.Default for m in compute.unpack_to_dest_mode):
        raise FactoryError("compute: unpack_to_dest_mode is set by the FlashDecode program (per CB), expected it "
                           f"empty, got UnpackToDestFp32 on CBs {list(compute.unpack_to_dest_cbs)}")
    if not compute.fp32_dest_acc_en:
        return dataclasses.replace(compute, unpack_to_dest_mode=())
    index = {cb.name: cb.index for cb in plan.circular_buffers}
    return dataclasses.replace(compute, unpack_to_dest_mode=unpack_to_dest_modes(index[n] for n in UNPACK_TO_DEST_CBS))


def _program(plan: DecodePlan, *, scale: float, compute: ComputeSettings, exp_approx: bool,
             images: Optional[dict[str, bytes]], positions: Optional[Sequence[int]] = None,
             q_shards: QShards = None, out_shards: QShards = None) -> Program:
    if not isinstance(compute, ComputeSettings):
        raise FactoryError(f"compute: expected ComputeSettings, got {type(compute).__name__}")
    compute = compute_settings_for(plan, compute)
    if compute.fp32_dest_acc_en != plan.fp32_dest_acc_en or compute.dst_tiles != plan.dst_tiles:
        raise FactoryError(
            f"compute: fp32_dest_acc_en={compute.fp32_dest_acc_en} (DST {compute.dst_tiles} tiles) differs from "
            f"the plan's fp32_dest_acc_en={plan.fp32_dest_acc_en} (DST {plan.dst_tiles} tiles)"
        )
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) or scale == 0:
        raise FactoryError(f"scale: expected a finite non-zero number, got {scale!r}")
    if plan.prescale_q and not power_of_two_scale(scale):
        raise FactoryError(f"scale: expected +-2^k for a plan made with prescale_q (Q is multiplied by it "
                           f"exactly once per piece), got {scale!r}; plan with prescale_q=False")

    cores = plan.active_cores
    core_set = CoreRangeSet.of(cores)
    sources = kernel_sources()
    if not isinstance(exp_approx, bool):
        raise FactoryError(f"exp_approx: expected a bool, got {exp_approx!r}")
    ct = _compile_args(plan, float(scale), compute, exp_approx, positions_in_args=positions is not None)
    where = {(p.user, p.kv_head, p.index): p for p in plan.pieces} if plan.merge_slot else None
    rt = {c: _runtime_args(plan, c, where) for c in cores}
    common = _common_args(plan, positions)
    reader_defines = _shard_defines("Q", q_shards, common["reader"])
    if plan.block_size == HALF_TILE_BLOCK:  # 16-position blocks: the reader takes key tiles by halves
        reader_defines["HALF_TILE_BLOCKS"] = "1"
    writer_defines = _shard_defines("OUT", out_shards, common["writer"])
    kernels = [
        Kernel("reader", sources["reader"], KernelKind.READER, core_set, named_compile_time_args=ct["reader"],
               runtime_args={c: rt[c]["reader"] for c in cores}, common_runtime_args=common["reader"],
               defines=reader_defines),
        Kernel("writer", sources["writer"], KernelKind.WRITER, core_set, named_compile_time_args=ct["writer"],
               runtime_args={c: rt[c]["writer"] for c in cores}, common_runtime_args=common["writer"],
               defines=writer_defines),
        Kernel("compute", sources["compute"], KernelKind.COMPUTE, core_set, named_compile_time_args=ct["compute"],
               runtime_args={c: rt[c]["compute"] for c in cores}, compute=compute),
    ]
    cbs = [CircularBuffer(cb.index, core_set, cb.data_format, cb.page_size, cb.num_pages, cb.tile_rows)
           for cb in plan.circular_buffers]
    # One semaphore per tree height level: children of every piece of height h on a core count on
    # semaphore h - 1 of that core. merge_slot: semaphore 0 counts the messages that land in the core's
    # slot, 1 + p the grants piece p of the core receives.
    count = 1 + max(len(plan.core_pieces[c]) for c in cores) if plan.merge_slot else plan.rounds
    semaphores = [Semaphore(i, core_set, 0) for i in range(count)]

    b, nkv = plan.batch, plan.num_kv_heads
    k_shape, v_shape = _kv_shapes(plan)
    image = (lambda name: None) if images is None else images.__getitem__
    bf16 = DataType.bfloat16
    tensors = [
        _bf16_tiles("q", (plan.num_tokens, b, plan.num_q_heads, plan.head_dim), image("q"), q_shards),
        kv_cache_tensor("k", plan.kv_dtype, k_shape, plan.kv_pages, image("k")),
    ]
    if positions is None:
        # int32 positions (-1 skips a user): 4-byte words, typed int32 for the device
        tensors.append(DramTensor("cur_pos", DataType.float32, 4 * b, 1, (b,), "row_major", image("cur_pos"),
                                  element_type="int32"))
    if not plan.mla:  # MLA: V lives inside K
        tensors.insert(2, kv_cache_tensor("v", plan.kv_dtype, v_shape, plan.kv_pages, image("v")))
    if plan.attention_sink:
        sink_shape = (plan.num_q_heads, TILE)
        tensors.append(DramTensor("sink", bf16, formats.tile_size(bf16), formats.num_tiles(sink_shape), sink_shape,
                                  "tile", image("sink")))
    if plan.has_attn_mask:
        shape = mask_shape(plan)
        tensors.append(DramTensor("attn_mask", bf16, formats.tile_size(bf16), formats.num_tiles(shape), shape,
                                  "tile", image("attn_mask")))
    if plan.paged:
        # int32 block ids, one row-major page per user (ttnn's layout of a [B, max_blocks] int32 tensor)
        tensors.append(DramTensor("page_table", DataType.float32, 4 * plan.max_blocks, b, (b, plan.max_blocks),
                                  "row_major", image("page_table"), element_type="int32"))
    out_shape = (plan.num_tokens, b, plan.num_q_heads, plan.head_dim_v)
    tensors.append(_bf16_tiles("out", out_shape, None, out_shards, is_output=True))
    if plan.return_lse:
        row = plan.q_tiles * TILE
        tensors.append(DramTensor("lse", DataType.float32, 4 * row, b * nkv, (b * nkv, row), "row_major",
                                  None, is_output=True))
    return Program(kernels=kernels, circular_buffers=cbs, semaphores=semaphores, tensors=tensors,
                   dram_banks=plan.dram_banks)


# ---- outputs ------------------------------------------------------------------------------------


def decode_lse_rows(plan: DecodePlan, rows: torch.Tensor) -> torch.Tensor:
    """LSE [T, B, NH] float32 from the kernel's rows [B * NKV, q_tiles * 32] (one per KV group; its
    q rows are the T tokens' g heads, token-major)."""
    t, g = plan.num_tokens, plan.group_size
    rows = rows.reshape(plan.batch, plan.num_kv_heads, plan.q_tiles * TILE)[:, :, : t * g]
    rows = rows.reshape(plan.batch, plan.num_kv_heads, t, g).permute(2, 0, 1, 3)
    return rows.to(torch.float32).reshape(t, plan.batch, plan.num_q_heads).clone()


def decode_outputs(plan: DecodePlan, tensors: dict[str, bytes]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(out [T, B, NH, Dv] torch.bfloat16, lse [T, B, NH] float32 or None) from the output images."""
    shape = (plan.num_tokens, plan.batch, plan.num_q_heads, plan.head_dim_v)
    out = formats.unpack_tiles(tensors["out"], DataType.bfloat16, shape).to(torch.bfloat16)
    lse = None
    if plan.return_lse:
        raw = np.frombuffer(tensors["lse"], dtype="<f4")
        lse = decode_lse_rows(plan, torch.from_numpy(raw.copy()))
    return out, lse


def run_flash_decode(
    plan: DecodePlan,
    *,
    q: TileTensor,
    k: TileTensor,
    v: Optional[TileTensor],
    cur_pos_source: Optional[Positions],
    scale: float,
    compute: ComputeSettings,
    exp_approx: bool = False,
    backend: str = "host",
    page_table: Optional[torch.Tensor] = None,
    attention_sink: Optional[torch.Tensor] = None,
    attn_mask: Any = None,
    schedule_seed: Optional[int] = None,
    positions_in_args: bool = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor], Any]:
    """Build and run the program; returns (out, lse or None, the backend's RunResult).

    `schedule_seed` runs the host runtime's perturbed schedule (see `ttdecode.runtime.run_program`).
    """
    program = build_program(plan, q=q, k=k, v=v, cur_pos_source=cur_pos_source, scale=scale, compute=compute,
                            exp_approx=exp_approx, page_table=page_table, attention_sink=attention_sink,
                            attn_mask=attn_mask, positions_in_args=positions_in_args)
    if backend != "host":
        raise FactoryError(f"backend: run_flash_decode runs 'host' (the device path goes through ttdecode.ttnn_backend), got {backend!r}")

    result = run_program(program, schedule_seed=schedule_seed)
    out, lse = decode_outputs(plan, result.tensors)
    return out, lse, result
