"""The planner's data: the plan (`DecodePlan`), its pieces (`Piece`) and circular buffers (`CBSpec`), the
refusal of a plan that does not fit (`ResourceError`), and the steps' intermediate results (`QRows`, `Split`).
Shapes in elements, sizes in bytes, chunks and pieces in key tiles (32 keys)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import WORMHOLE_DRAM_BANKS, CoreCoord
# the Wormhole L1 map (firmware + kernel config below L1_UNRESERVED_BASE; CBs aligned to 32 B)
from ttdecode.runtime.layout import CB_ALIGNMENT, L1_UNRESERVED_BASE
from ttdecode.core.split import (TILE, BankLocalView, PieceRange, bank_local_view, piece_range, span_window,
                                 split_block_tiles, split_blocks)
from ttdecode.ops.flash_decode.plan_checks import PlanError

__all__ = ["TILE_BYTES", "PlanError", "ResourceError", "RUNTIME_ARGS_HEADER", "RUNTIME_ARGS_PER_PIECE", "Piece",
           "CBSpec", "DecodePlan", "cbs_bytes_per_core", "QRows", "Split"]


#: Bytes of one 32x32 tile of each format (block floats with their exponents).
TILE_BYTES = {
    DataType.float32: 4096,
    DataType.bfloat16: 2048,
    DataType.bfloat8_b: 1088,
    DataType.bfloat4_b: 576,
}


class ResourceError(PlanError):
    """A plan whose buffers overflow a core's L1 or whose busiest core needs too many runtime args
    (resources.check_resources): fewer pieces per (user, KV head) may fit."""


#: Runtime args: a fixed header plus this many per piece, the most of the three kernels (see
#: program_factory.py: reader 8 + 3 per piece, writer 3 + 6, compute 1 + 2).
RUNTIME_ARGS_HEADER = 8
RUNTIME_ARGS_PER_PIECE = 6


@dataclass(frozen=True)
class Piece:
    """One piece of one work, placed on a core.

    `slot` is its place in the core's run order; `recv_area` the index of its first scratch area
    on its core (one area per child round, in merge order), or -1 when it receives nothing;
    `parent_core`/`parent_area` where its partial goes (the parent's area for this piece's round).
    """

    user: int
    kv_head: int
    index: int
    core: CoreCoord
    slot: int
    height: int
    recv_area: int
    parent_core: CoreCoord | None
    parent_area: int
    parent_height: int


@dataclass(frozen=True)
class CBSpec:
    """One circular buffer of the FlashDecode program."""

    index: int
    name: str
    data_format: DataType
    page_size: int
    num_pages: int
    tile_rows: int = 32  # 16: 16x32 tiles (faces 0-1), the q-row CBs of a plan with q_tile_rows 16

    @property
    def total_size(self) -> int:
        return self.page_size * self.num_pages


@dataclass(frozen=True)
class DecodePlan:
    """Everything the program factory needs. Shapes in elements, sizes in bytes."""

    batch: int
    num_q_heads: int
    num_kv_heads: int
    seq_len: int
    head_dim: int
    head_dim_v: int
    q_dtype: DataType
    kv_dtype: DataType
    share_cache: bool
    return_lse: bool
    grid: tuple[int, int]
    cores: tuple[CoreCoord, ...]  # the cores the plan may use, in placement order
    pieces_per_work: int
    rounds: int
    fixed_chunk_tiles: int  # 0 = dynamic
    max_chunk_tiles: int
    min_chunk_tiles: int  # split floor of dynamic chunks (1 = none; fixed chunks: 1)
    chunk_cap: int  # largest dynamic chunk in tiles (CHUNK_CAPS; fixed chunks: SMALL_CHUNK_TILES, unused)
    cur_pos: tuple[int, ...] | None  # None: positions are read on the device (cur_pos_tensor)
    fp32_dest_acc_en: bool
    dst_tiles: int
    pieces: tuple[Piece, ...]
    core_pieces: dict[CoreCoord, tuple[Piece, ...]] = field(repr=False)
    circular_buffers: tuple[CBSpec, ...] = field(repr=False)
    recv_areas: dict[CoreCoord, int] = field(repr=False)  # scratch areas per core
    # paged cache: K/V [num_blocks, NKV, block_size, D] and a page table [B, seq_len / block_size];
    # None for a contiguous cache. Chunks and pieces still count key tiles of the logical sequence.
    block_size: int | None = None
    num_blocks: int | None = None
    # causal sliding window in keys (0 = none): a user attends keys cur_pos - W < p <= cur_pos
    sliding_window_size: int = 0
    # an attention sink (one logit per q head) joins the root's softmax denominator
    attention_sink: bool = False
    # MLA: no V tensor; V is the first head_dim_v columns of K (V tile (j, v) is K tile (j, v)), so
    # the reader reads K only and P . V takes its V tiles out of the K slot
    mla: bool = False
    # non-causal decode: every user attends all S keys (the kernels see cur_pos = S - 1)
    is_causal: bool = True
    # multi-token decode: T new tokens per user, the last at cur_pos (token j at cur_pos - (T - 1 - j))
    num_tokens: int = 1
    # an additive attn_mask [attn_mask_batch, 1, NH, S] (bf16 tiles) streamed with K; 0 = none, else 1 or B
    attn_mask_batch: int = 0
    # K/V DRAM pages: "tile" (one tile a page: an interleaved tensor) or "key_row" (one key-tile row of D / 32 tiles a
    # page, round robin over the DRAM banks; the pieces then take key tiles cyclically, one bank each, or with a
    # paged cache, bank-local: each piece the tiles of its own banks, as the page table puts them)
    kv_pages: str = "tile"
    # the DRAM banks pages are dealt over (page k in bank k % dram_banks): the device's count
    dram_banks: int = WORMHOLE_DRAM_BANKS
    # the scale is a power of two: Q x scale once per piece (cb_q_scaled) instead of every score
    prescale_q: bool = False
    # rows of the q-row tiles (Q, scores, probabilities, statistics, O, partials, output): 16 (16x32
    # tiles, faces 0-1) when T x g <= 16 q rows hold heads, else 32
    q_tile_rows: int = 32
    # the bounded merge (plan/merge_slot.py): a parent receives its children's partials one q tile row at a
    # time through one slot (partial_in and partial_out hold one row), a child sending each row when granted;
    # taken only when the children's areas side by side would overflow L1 and the slot fits
    merge_slot: bool = field(default=False, repr=False)
    # read chunks per online-softmax update (a softmax block: one max, alpha and rescale of the running set
    # for all of them; kernels/flash_decode/online_softmax.hpp): 1, or more on bank-local plans that fit
    # (plan/softmax_block.py)
    softmax_chunks: int = field(default=1, repr=False)
    # bank-local only: one group of every bank a (user, KV head) holds, every piece taking the next attended tile
    # in turn (core.split.bank_local_view spread_banks), so its pieces' tile counts differ by one at most
    # whatever the page table; else each piece keeps to its own banks (split_policy._spread_with_blocks)
    spread_banks: bool = field(default=False, repr=False)

    @property
    def message_pages(self) -> int:
        """Tiles of one q tile row of a partial (O's dv tiles, m, l): what the merge slot moves at a time."""
        return self.dv_tiles + 2

    @property
    def cyclic_split(self) -> bool:
        """Pieces take every p'-th key tile (cyclic_piece_range) instead of a contiguous run: key_row pages of a
        contiguous cache."""
        return self.kv_pages == "key_row" and self.block_size is None

    @property
    def bank_local(self) -> bool:
        """key_row pages of a paged cache: each piece reads the key tiles of its own DRAM banks, found from the
        page table by the kernels (bank_local_view)."""
        return self.kv_pages == "key_row" and self.block_size is not None

    @property
    def has_attn_mask(self) -> bool:
        return self.attn_mask_batch > 0

    @property
    def guard_empty_rows(self) -> bool:
        """A q row may see no key in a piece (a fully masked head), so the compute kernel floors the
        running max and the row sum (compute.cpp floor_tile)."""
        return self.has_attn_mask or self.num_tokens > 1

    @property
    def key_window(self) -> int:
        """The window of the key span the T tokens attend together (0 = none): the chunk arithmetic's."""
        return span_window(self.sliding_window_size, self.num_tokens)

    @property
    def paged(self) -> bool:
        return self.block_size is not None

    @property
    def max_blocks(self) -> int:
        """Page-table entries per user (0 for a contiguous cache)."""
        return self.seq_len // self.block_size if self.block_size else 0

    # -- derived shape facts --
    @property
    def group_size(self) -> int:
        return self.num_q_heads // self.num_kv_heads

    @property
    def q_tiles(self) -> int:
        """Tile rows holding one KV group's q rows: T tokens x g heads, token-major, padded to 32 rows."""
        return -(-(self.num_tokens * self.group_size) // TILE)

    @property
    def d_tiles(self) -> int:
        return self.head_dim // TILE

    @property
    def dv_tiles(self) -> int:
        return self.head_dim_v // TILE

    @property
    def partial_pages(self) -> int:
        """fp32 tiles of one partial result (O, m, l) of one piece."""
        return self.q_tiles * (self.dv_tiles + 2)

    @property
    def l1_bytes_per_core(self) -> int:
        return cbs_bytes_per_core(self.circular_buffers)

    @property
    def active_cores(self) -> tuple[CoreCoord, ...]:
        return tuple(c for c in self.cores if self.core_pieces.get(c))

    def ranges(self, user: int) -> list[PieceRange]:
        """Chunk ranges of every piece of `user` (needs known positions)."""
        if self.cur_pos is None:
            raise PlanError("positions are read on the device (cur_pos_tensor); the plan does not know them")
        return [self.range_at(self.cur_pos[user], i) for i in range(self.pieces_per_work)]

    def range_at(self, cur_pos: int, index: int) -> PieceRange:
        """The key tiles piece `index` reads for a user at cur_pos (the kernels' piece_range with
        this plan's chunking: fixed chunk, pieces, the tokens' key window, split floor). Refused for a
        bank-local plan, whose pieces follow the page table (bank_local_view)."""
        if self.bank_local:
            raise PlanError("bank-local plan (kv_pages 'key_row' with a paged cache): a piece's key tiles follow "
                            "the page table; use DecodePlan.bank_local_view")
        return piece_range(cur_pos, self.fixed_chunk_tiles, self.pieces_per_work, index, self.key_window,
                           self.min_chunk_tiles, self.cyclic_split, self.chunk_cap, self.dram_banks)

    def bank_local_view(self, cur_pos: int, page_table_row: Sequence[int], kv_head: int, index: int) -> BankLocalView:
        """The key tiles piece `index` of (a user at cur_pos with that page-table row, `kv_head`) reads in a
        bank-local plan (core.split.bank_local_view with this plan's chunking; the kernels' rule; 16-position
        blocks: over the row's even entries, core.split.split_blocks)."""
        return bank_local_view(cur_pos, split_blocks(page_table_row, self.block_size), kv_head, index,
                               pieces=self.pieces_per_work, num_kv_heads=self.num_kv_heads,
                               block_tiles=split_block_tiles(self.block_size),
                               dram_banks=self.dram_banks, fixed_chunk_tiles=self.fixed_chunk_tiles,
                               window=self.key_window, min_chunk_tiles=self.min_chunk_tiles, chunk_cap=self.chunk_cap,
                               spread_banks=self.spread_banks)


def cbs_bytes_per_core(cbs: Sequence[CBSpec]) -> int:
    """L1 bytes per core of a set of CBs, with the firmware and kernel-config area below them."""
    return L1_UNRESERVED_BASE + sum(-(-cb.total_size // CB_ALIGNMENT) * CB_ALIGNMENT for cb in cbs)


@dataclass(frozen=True)
class QRows:
    """The q rows of one KV group and the tiles that hold them (make_plan's split_policy.q_rows)."""

    q_tiles: int  # tile rows of one group's T x g q rows (32 rows each)
    dst_tiles: int  # DST registers the compute kernel may hold at once
    head_rows: int  # q rows that hold heads in one tile row: min(T x g, 32)
    q_tile_rows: int  # rows of the q-row tiles: 8, 16 or 32


@dataclass(frozen=True)
class Split:
    """How every work's keys are split (make_plan's split_policy.choose_split). Sizes in key tiles (32 keys)."""

    fixed: int  # the fixed chunk (k_chunk_size / 32), 0 = dynamic
    seq_tiles: int  # key tiles of the cache, S / 32
    floor: int  # split floor of dynamic chunks (1 with fixed chunks)
    cap: int  # largest dynamic chunk (SMALL_CHUNK_TILES with fixed chunks)
    pieces: int  # pieces per (user, KV head)
    rounds: int  # merge rounds of the binomial tree over the pieces
    max_chunk_tiles: int  # the largest chunk any piece reads: the K/V slots' size
    spread_banks: bool = False  # bank-local pieces take turns over every bank held (DecodePlan.spread_banks)
    # bank-local: the model's step cycles at a softmax block of b chunks (pricing.bank_local_step_cycles at
    # this split), for the planner's block (plan/softmax_block.py); None on other plans
    block_cycles: Optional[Callable[[int], float]] = field(default=None, compare=False, repr=False)
