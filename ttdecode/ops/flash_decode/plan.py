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
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import L1_BYTES_PER_CORE, MAX_RUNTIME_ARGS, NUM_DRAM_BANKS as DRAM_BANKS, CoreCoord, MathFidelity
# the Wormhole L1 map (firmware + kernel config below L1_UNRESERVED_BASE; CBs aligned to 32 B)
from ttdecode.runtime.layout import CB_ALIGNMENT, L1_UNRESERVED_BASE
from ttdecode.core.split import (  # the split arithmetic, re-exported for the planner's users
    CHUNK_CAPS, SMALL_CHUNK_TILES, TILE, PieceRange, _pow2ceil, chunk_tiles_for, cyclic_piece_range, cyclic_pieces,
    dynamic_chunk_tiles, piece_range, span_window, tree_children, tree_parent, tree_rounds, valid_tiles,
    window_first_key, window_first_tile,
)

#: L1 bytes per core the chunk-sized buffers (K and V slots, scores, probabilities, attn_mask rows)
#: may take when the plan picks a cap above SMALL_CHUNK_TILES: about 40% of a core's L1, leaving the
#: rest to Q, the running sets and the partials a core receives.
CHUNK_BUFFER_BUDGET = 576 * 1024
#: The CBs whose size scales with the chunk (flash_decode_cbs names).
CHUNK_SIZED_CBS = ("k", "v", "scores", "probs", "attn_mask")
# The CBs whose tiles hold q rows (one row per q head and token): 16x32 tiles when the plan's
# q_tile_rows is 16. Not K, V, the ones tile (in1 of the row sum: 32 key rows), positions, page table
# or the writer's staging.
QROW_CBS = ("q", "mask", "max_bcast", "scores", "probs", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b",
            "alpha", "partial_in", "partial_out", "out", "lse", "q_scaled", "sink", "attn_mask")
#: Most key tiles of a piece with a per-row mask (2 causal + 2 window tiles; common.hpp piece_masks).
MAX_MASKED_TILES = 4


def masked_tiles_bound(window: int, tokens: int) -> int:
    """The most masked key tiles one piece can have (common.hpp masked_tiles_bound): the causal
    tiles (1, or 2 when T > 1 positions straddle a tile edge) plus as many window tiles with a
    sliding window. The mask CB holds this many pages per q tile row."""
    return (2 if tokens > 1 else 1) * (2 if window else 1)

#: Most new tokens per user in one multi-token decode step.
MAX_TOKENS = 32
#: Deepest reduction tree the kernels support (2^6 = 64 pieces per work).
MAX_ROUNDS = 6

_TILE_BYTES = {
    DataType.float32: 4096,
    DataType.bfloat16: 2048,
    DataType.bfloat8_b: 1088,
    DataType.bfloat4_b: 576,
}


class PlanError(ValueError):
    """A decode plan that cannot run; the message names the knob to change."""


class ResourceError(PlanError):
    """A plan whose buffers overflow a core's L1 or whose busiest core needs too many runtime args
    (_check_resources): fewer pieces per (user, KV head) may fit."""


#: max_cores_per_head_batch=None ("not set"): the pieces per (user, KV head) tried in order, ttnn's
#: default first; the first whose plan fits is taken (kv_pages "key_row" needs at least 12).
UNSET_MAX_CORES_TRIES = (16, 8, 4, 2, 1)
UNSET_MAX_CORES_TRIES_KEY_ROW = (16, 12)


# ---- the plan -------------------------------------------------------------------------------


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
    # page, round robin over the 12 banks; the pieces then take key tiles cyclically, one bank each)
    kv_pages: str = "tile"
    # the scale is a power of two: Q x scale once per piece (cb_q_scaled) instead of every score
    prescale_q: bool = False
    # rows of the q-row tiles (Q, scores, probabilities, statistics, O, partials, output): 16 (16x32
    # tiles, faces 0-1) when T x g <= 16 q rows hold heads, else 32
    q_tile_rows: int = 32

    @property
    def cyclic_split(self) -> bool:
        """Pieces take every p'-th key tile (cyclic_piece_range) instead of a contiguous run."""
        return self.kv_pages == "key_row"

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
        this plan's chunking: fixed chunk, pieces, the tokens' key window, split floor)."""
        return piece_range(cur_pos, self.fixed_chunk_tiles, self.pieces_per_work, index, self.key_window,
                           self.min_chunk_tiles, self.cyclic_split, self.chunk_cap)


def grid_cores(grid: tuple[int, int], sub_core_grids: Sequence[tuple[tuple[int, int], tuple[int, int]]] | None) -> tuple[CoreCoord, ...]:
    """Logical cores of the grid (row-major), or of the sub-core grids in the order given."""
    gx, gy = grid
    if sub_core_grids is None:
        return tuple(CoreCoord(x, y) for y in range(gy) for x in range(gx))
    out: list[CoreCoord] = []
    for (x0, y0), (x1, y1) in sub_core_grids:
        if not (0 <= x0 <= x1 < gx and 0 <= y0 <= y1 < gy):
            raise PlanError(
                f"sub_core_grids: rectangle ({x0},{y0})-({x1},{y1}) lies outside the {gx}x{gy} grid"
            )
        for y in range(y0, y1 + 1):
            for x in range(x0, x1 + 1):
                c = CoreCoord(x, y)
                if c in out:
                    raise PlanError(f"sub_core_grids: core ({x},{y}) appears twice")
                out.append(c)
    return tuple(out)


def flash_decode_cbs(
    *, q_tiles: int, d_tiles: int, dv_tiles: int, max_chunk_tiles: int, kv_dtype: DataType,
    batch: int, recv_areas: int, max_blocks: int = 0, attention_sink: bool = False, mla: bool = False,
    tree: bool = True, attn_mask: bool = False, window: int = 0, tokens: int = 1, q_slots: int = 1,
    prescale_q: bool = False, q_tile_rows: int = 32, im_dtype: DataType = DataType.float32,
) -> tuple[CBSpec, ...]:
    """The circular buffers of the FlashDecode kernels (indices are the kernels' `cb_*` constants).

    `max_blocks` > 0 (a paged cache) adds the reader's copy of one user's page-table row;
    `attention_sink` the sink tiles of one KV group (rows = the group's q heads, column 0);
    `mla` (V = the first dv_tiles tiles of each K tile row) drops the V slots (index 2 unused).
    `q_slots` (1 or 2): pieces whose q tiles cb_q holds at once (2 when a core runs several pieces).
    `tree` False (one piece per work: no piece sends or receives a partial) drops partial_out and
    keeps one page of partial_in, whose address the writer takes at start; at D = 576 with 128 q
    heads per KV head the two partial buffers alone take 576 KiB.
    `attn_mask` two slots of a chunk's mask tiles ([q tile row][key tile], bf16).
    `window` (each token's sliding window in keys, 0 = none) and `tokens` (T) size the writer's
    mask pages (masked_tiles_bound per q tile row).
    `prescale_q` (a power-of-two scale) adds one piece's q tiles times the scale (bf16, exact), which
    Q . K^T reads instead of scaling every score.
    `q_tile_rows` 16 (at most 16 q rows hold heads, q_tiles 1): every CB of q rows (QROW_CBS) holds
    16x32 tiles (faces 0-1, half the bytes); 8 (at most 8 q rows): 8x32 tiles (two 8x16 faces, a
    quarter of the bytes); K, V, the ones tile (the row sum's in1) and the
    reader/writer scratch keep 32x32 tiles.

    Precision: everything after the matmuls is `im_dtype` (scores, probabilities, running statistics,
    the accumulator, the factors and the partials that travel between cores): float32 with an fp32 DST;
    bfloat16 with a bf16 DST (every value there is bf16 already, so the bf16 CBs hold the same values in
    half the bytes). The compute kernel reads the
    float32 CBs other than probs only by copy_tile / unary_bcast, and the factory puts them in
    UnpackToDestFp32 mode (factory.UNPACK_TO_DEST_CBS), so they reach the fp32 DST exactly; probs
    feeds the matmuls as TF32.

    Left whole (~90 lines, most of them this documentation): the body is one table of the kernels'
    buffers, read against their `cb_*` constants; split, the table would be in pieces.
    """
    f32, bf16 = DataType.float32, DataType.bfloat16
    if im_dtype not in (f32, bf16):
        raise PlanError(f"im_dtype: expected float32 or bfloat16, got {im_dtype!r}")
    im, im_page = im_dtype, _TILE_BYTES[im_dtype]  # the softmax's intermediates (see Precision)
    kv_tile = _TILE_BYTES[kv_dtype]
    pos_page = max(32, -(-4 * batch // 32) * 32)
    partial = q_tiles * (dv_tiles + 2)
    # writer scratch: 16 zero bf16 face rows (a skipped user's output) + one fp32 LSE row
    staging = 16 * 32 + q_tiles * TILE * 4
    specs = [
        # q_slots whole pieces (2 when a core runs several: the next piece's Q is read during this one)
        (0, "q", bf16, 2048, q_slots * q_tiles * d_tiles),
        (1, "k", kv_dtype, kv_tile, 2 * max_chunk_tiles * d_tiles),  # two whole-chunk slots
        (3, "pos_compute", f32, pos_page, 1),  # int32 positions for the compute kernel
        (4, "pos_writer", f32, pos_page, 1),  # the same for the writer
        # a piece's masks, one per (masked key tile, q tile row): -inf where the row's token does
        # not attend the key (past its position, before its window); common.hpp masked_tiles_bound
        (5, "mask", bf16, 2048, masked_tiles_bound(window, tokens) * q_tiles),
        (6, "max_bcast", im, im_page, 1),  # a q tile row's new max in every column, for the probabilities
        (7, "ones", bf16, 2048, 1),  # all ones: row sums as P x ones
        (8, "scores", im, im_page, max_chunk_tiles),  # also the merge's scratch
        (9, "probs", im, im_page, max_chunk_tiles),
        # running max / sum / output in two sets used in turn (each read whole, then written whole)
        (10, "max_a", im, im_page, q_tiles),
        (11, "max_b", im, im_page, q_tiles),
        (12, "sum_a", im, im_page, q_tiles),
        (13, "sum_b", im, im_page, q_tiles),
        (14, "acc_a", im, im_page, q_tiles * dv_tiles),
        (15, "acc_b", im, im_page, q_tiles * dv_tiles),
        (16, "alpha", im, im_page, 2),  # rescale factors (two in a merge), 1/l
        (18, "partial_in", im, im_page, max(1, recv_areas) * partial if tree else 1),  # children's partials land here
        (19, "out", bf16, 2048, q_tiles * dv_tiles),
        (20, "lse", f32, 4096, q_tiles),
        (21, "staging", f32, -(-staging // 32) * 32, 1),  # writer scratch
    ]
    if not mla:
        # two slots of key tile rows: dv_tiles V tiles, then a tile of ones (the row sum's in1, V's format)
        specs.append((2, "v", kv_dtype, kv_tile, 2 * max_chunk_tiles * (dv_tiles + 1)))
    if tree:
        specs.append((17, "partial_out", im, im_page, partial))  # this piece's partial, to the parent
    if max_blocks:
        # one user's int32 page-table row (reader scratch), 32 B aligned like any DRAM read target
        specs.append((23, "page_table", f32, -(-4 * max_blocks // 32) * 32, 1))
    if attention_sink:
        specs.append((24, "sink", bf16, 2048, q_tiles))  # the group's sink logits in column 0
    if prescale_q:
        specs.append((22, "q_scaled", bf16, 2048, q_tiles * d_tiles))  # the piece's Q x scale (exact)
    if attn_mask:
        # the group's mask rows of a chunk's keys, double-buffered like K (one whole slot per chunk)
        specs.append((25, "attn_mask", bf16, 2048, 2 * q_tiles * max_chunk_tiles))
    if q_tile_rows not in (8, 16, 32) or (q_tile_rows != 32 and q_tiles != 1):
        raise PlanError(f"q_tile_rows: expected 32, or 16 or 8 with one q tile row (q_tiles 1), got {q_tile_rows} "
                        f"with q_tiles {q_tiles}")
    return tuple(CBSpec(i, n, f, p * q_tile_rows // 32 if n in QROW_CBS else p, k,
                        q_tile_rows if n in QROW_CBS else 32) for i, n, f, p, k in sorted(specs))


def power_of_two_scale(scale: float) -> bool:
    """Is the softmax scale +-2^k with 2^k a normal float32 (make_plan's prescale_q): then Q x scale is
    exact in bf16 and gives the same fp32 scores as scaling each score (subnormal results aside)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale == 0:
        return False
    m, e = math.frexp(abs(scale))
    return m == 0.5 and -126 <= e - 1 <= 127


def fitting_chunk_cap(*, q_tiles: int, d_tiles: int, dv_tiles: int, kv_dtype: DataType, mla: bool = False,
                      attn_mask: bool = False, q_tile_rows: int = 32) -> int:
    """The cap of dynamic chunks for a shape (DecodePlan.chunk_cap): the largest of CHUNK_CAPS whose
    chunk-sized CBs (CHUNK_SIZED_CBS: the K and V slots, scores, probabilities, attn_mask rows) take at
    most CHUNK_BUFFER_BUDGET bytes, else SMALL_CHUNK_TILES. Depends on the shape and dtypes only, never
    on the batch or the positions (batch invariance)."""
    for cap in CHUNK_CAPS:
        cbs = flash_decode_cbs(q_tiles=q_tiles, d_tiles=d_tiles, dv_tiles=dv_tiles, max_chunk_tiles=cap,
                               kv_dtype=kv_dtype, batch=1, recv_areas=0, mla=mla, tree=False, attn_mask=attn_mask,
                               q_tile_rows=q_tile_rows)
        if sum(cb.total_size for cb in cbs if cb.name in CHUNK_SIZED_CBS) <= CHUNK_BUFFER_BUDGET:
            return cap
    return SMALL_CHUNK_TILES


# ---- make_plan's steps ----------------------------------------------------------------------
# make_plan checks the call (_check_*), then decides in turn: the q rows' tiles (_q_rows), the split
# (_choose_split), the placement (_place_pieces), the merge tree (_build_tree), the buffers
# (_size_buffers), and last the resources (_check_resources). The checks run in one fixed order: a call
# with several faults is refused for the first.


def _check_sizes(*, batch, num_q_heads: int, num_kv_heads: int, seq_len: int, head_dim: int, head_dim_v: int,
                 mla, math_fidelity, kv_dtype) -> None:
    """Refuse shapes and types the kernels cannot take: B, NH, NKV, S, D, Dv positive ints (NH a multiple
    of NKV; S, D, Dv multiples of 32 elements), `mla` a bool with Dv <= D, a known math fidelity and a
    K/V tile format (bfloat16, bfloat8_b or bfloat4_b). Decides nothing; raises PlanError."""
    for name, v in (("batch", batch), ("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads),
                    ("seq_len", seq_len), ("head_dim", head_dim), ("head_dim_v", head_dim_v)):
        if not isinstance(v, int) or v <= 0:
            raise PlanError(f"{name}: expected a positive int, got {v!r}")
    if num_q_heads % num_kv_heads:
        raise PlanError(f"num_q_heads: expected a multiple of num_kv_heads={num_kv_heads}, got {num_q_heads}")
    for name, v in (("head_dim", head_dim), ("head_dim_v", head_dim_v), ("seq_len", seq_len)):
        if v % TILE:
            raise PlanError(f"{name}: expected a multiple of {TILE}, got {v}")
    if not isinstance(mla, bool):
        raise PlanError(f"mla: expected a bool, got {mla!r}")
    if mla and head_dim_v > head_dim:
        raise PlanError(f"head_dim_v: expected <= head_dim={head_dim} with mla (V = K[..., :head_dim_v]), "
                        f"got {head_dim_v}")
    fidelities = [f.value for f in MathFidelity]
    if not isinstance(math_fidelity, str) or math_fidelity not in fidelities:
        raise PlanError(f"math_fidelity: expected one of {fidelities}, got {math_fidelity!r}")
    if kv_dtype not in _TILE_BYTES or kv_dtype is DataType.float32:
        raise PlanError(f"kv_dtype: expected bfloat16, bfloat8_b or bfloat4_b, got {kv_dtype}")


def _check_chunking(*, seq_len: int, num_q_heads: int, num_kv_heads: int, num_tokens, k_chunk_size: int,
                    min_chunk_tiles, chunk_cap, prescale_q, q_tile_rows) -> None:
    """Refuse chunk and q-tile knobs out of range: `k_chunk_size` (keys) 0 or a power-of-two multiple of 32
    dividing S; `min_chunk_tiles` and `chunk_cap` (key tiles) for dynamic chunks only, from their allowed
    sets; `prescale_q` a bool; `q_tile_rows` None, 8, 16 or 32, and 8 or 16 only when num_tokens x group
    size q rows fit. Decides nothing; raises PlanError."""
    if k_chunk_size:
        if k_chunk_size < TILE or k_chunk_size % TILE or k_chunk_size & (k_chunk_size - 1):
            raise PlanError(
                f"k_chunk_size: expected 0 (dynamic) or a power of two multiple of 32, got {k_chunk_size}"
            )
        if seq_len % k_chunk_size:
            raise PlanError(f"k_chunk_size: seq_len={seq_len} is not a multiple of k_chunk_size={k_chunk_size}")
    if min_chunk_tiles is not None:
        if (not isinstance(min_chunk_tiles, int) or not 1 <= min_chunk_tiles <= SMALL_CHUNK_TILES
                or min_chunk_tiles & (min_chunk_tiles - 1)):
            raise PlanError(f"min_chunk_tiles: expected None or a power of two 1..{SMALL_CHUNK_TILES}, "
                            f"got {min_chunk_tiles!r}")
        if k_chunk_size and min_chunk_tiles > 1:
            raise PlanError(f"min_chunk_tiles: applies to dynamic chunks only (k_chunk_size 0), got "
                            f"{min_chunk_tiles} with k_chunk_size={k_chunk_size}")
    if not isinstance(prescale_q, bool):
        raise PlanError(f"prescale_q: expected a bool, got {prescale_q!r}")
    if q_tile_rows is not None and (isinstance(q_tile_rows, bool) or q_tile_rows not in (8, 16, 32)):
        raise PlanError(f"q_tile_rows: expected None, 8, 16 or 32, got {q_tile_rows!r}")
    if q_tile_rows in (8, 16) and num_tokens * (num_q_heads // num_kv_heads) > q_tile_rows:
        raise PlanError(f"q_tile_rows: {q_tile_rows} holds at most {q_tile_rows} q rows, but num_tokens x group size = "
                        f"{num_tokens} x {num_q_heads // num_kv_heads} = {num_tokens * (num_q_heads // num_kv_heads)}")
    if chunk_cap is not None:
        if not isinstance(chunk_cap, int) or isinstance(chunk_cap, bool) or chunk_cap not in CHUNK_CAPS:
            raise PlanError(f"chunk_cap: expected None or one of {sorted(CHUNK_CAPS)} tiles, got {chunk_cap!r}")
        if k_chunk_size:
            raise PlanError(f"chunk_cap: applies to dynamic chunks only (k_chunk_size 0), got {chunk_cap} with "
                            f"k_chunk_size={k_chunk_size}")


def _check_cache(*, seq_len: int, block_size, num_blocks, share_cache: bool, sliding_window_size) -> int:
    """Refuse a malformed paged cache (`block_size` keys, a multiple of 32 dividing S, and `num_blocks`:
    both or neither, positive ints, not shared) or sliding window. Returns the window in keys (0 = none)."""
    if (block_size is None) != (num_blocks is None):
        raise PlanError(
            f"block_size, num_blocks: expected both (a paged cache) or neither, got block_size={block_size!r}, "
            f"num_blocks={num_blocks!r}"
        )
    if block_size is not None:
        for name, v in (("block_size", block_size), ("num_blocks", num_blocks)):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise PlanError(f"{name}: expected a positive int, got {v!r}")
        if block_size % TILE:
            raise PlanError(f"block_size: expected a multiple of {TILE}, got {block_size}")
        if seq_len % block_size:
            raise PlanError(
                f"seq_len: expected a multiple of block_size={block_size} (max_blocks x block_size), got {seq_len}"
            )
        if share_cache:
            raise PlanError("share_cache: expected False with a paged cache, got True")
    window = 0 if sliding_window_size is None else sliding_window_size
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise PlanError(f"sliding_window_size: expected None or a positive int, got {sliding_window_size!r}")
    return window


def _check_positions(*, batch: int, seq_len: int, cur_pos, window: int, max_cores_per_head_batch: int, num_tokens,
                     is_causal, attn_mask_batch) -> tuple[int, ...] | None:
    """Refuse a bad piece limit (`max_cores_per_head_batch` 1..64), token count (1..32), causal mode or
    attn_mask batch (0, 1 or B; non-causal only), and positions: B of them, each -1 (skip) or
    num_tokens - 1..S - 1. Returns the positions as a tuple of ints (keys), S - 1 for every user when
    non-causal, or None (read on the device)."""
    if not 1 <= max_cores_per_head_batch <= 1 << MAX_ROUNDS:
        raise PlanError(
            f"max_cores_per_head_batch: expected 1..{1 << MAX_ROUNDS}, got {max_cores_per_head_batch}"
        )
    if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or not 1 <= num_tokens <= MAX_TOKENS:
        raise PlanError(f"num_tokens: expected 1..{MAX_TOKENS} new tokens per user, got {num_tokens!r}")
    if not isinstance(is_causal, bool):
        raise PlanError(f"is_causal: expected a bool, got {is_causal!r}")
    if not isinstance(attn_mask_batch, int) or isinstance(attn_mask_batch, bool) or attn_mask_batch not in (0, 1, batch):
        raise PlanError(f"attn_mask_batch: expected 0 (no mask), 1 or B={batch}, got {attn_mask_batch!r}")
    if attn_mask_batch and is_causal:
        raise PlanError("attn_mask_batch: expected 0 in causal mode (a mask needs is_causal=False), "
                        f"got {attn_mask_batch}")
    if not is_causal:
        if cur_pos is not None and any(int(p) != seq_len - 1 for p in cur_pos):
            raise PlanError(f"cur_pos: expected None in non-causal mode (every user attends all S={seq_len} keys), "
                            f"got {list(cur_pos)}")
        if window:
            raise PlanError(f"sliding_window_size: expected None in non-causal mode, got {window}")
        if num_tokens != 1:
            raise PlanError(f"num_tokens: expected 1 in non-causal mode (multi-token decode is causal), got {num_tokens}")
        cur_pos = [seq_len - 1] * batch
    if cur_pos is not None:
        cur_pos = tuple(int(p) for p in cur_pos)
        if len(cur_pos) != batch:
            raise PlanError(f"cur_pos: expected {batch} positions (one per user), got {len(cur_pos)}")
        for b, pos in enumerate(cur_pos):
            if not -1 <= pos < seq_len:
                raise PlanError(f"cur_pos[{b}]: expected -1..{seq_len - 1} (seq_len={seq_len}), got {pos}")
            if 0 <= pos < num_tokens - 1:
                raise PlanError(f"cur_pos[{b}]: expected -1 or at least num_tokens - 1 = {num_tokens - 1} (the "
                                f"position of the last of {num_tokens} new tokens), got {pos}")
    return cur_pos


@dataclass(frozen=True)
class _QRows:
    """The q rows of one KV group and the tiles that hold them (make_plan's _q_rows)."""

    q_tiles: int  # tile rows of one group's T x g q rows (32 rows each)
    dst_tiles: int  # DST registers the compute kernel may hold at once
    head_rows: int  # q rows that hold heads in one tile row: min(T x g, 32)
    q_tile_rows: int  # rows of the q-row tiles: 8, 16 or 32


def _q_rows(*, num_q_heads: int, num_kv_heads: int, num_tokens: int, fp32_dest_acc_en: bool,
            dst_full_sync_en: bool, q_tile_rows: int | None) -> _QRows:
    """Decides the q tiles of one KV group: T x g q rows (token-major) in ceil(T x g / 32) tile rows, the
    DST tiles (16 halved with an fp32 DST, halved again without full sync), and the rows of the q-row
    tiles (the caller's, or None = the fewest of 8, 16, 32 that hold the group's rows)."""
    q_tiles = -(-(num_tokens * (num_q_heads // num_kv_heads)) // TILE)
    dst_tiles = 16 // (2 if fp32_dest_acc_en else 1) // (1 if dst_full_sync_en else 2)
    head_rows = min(num_tokens * (num_q_heads // num_kv_heads), TILE)
    if q_tile_rows is None:
        q_tile_rows = 8 if head_rows <= 8 else 16 if head_rows <= 16 else 32
    return _QRows(q_tiles, dst_tiles, head_rows, q_tile_rows)


@dataclass(frozen=True)
class _Split:
    """How every work's keys are split (make_plan's _choose_split). Sizes in key tiles (32 keys)."""

    fixed: int  # the fixed chunk (k_chunk_size / 32), 0 = dynamic
    seq_tiles: int  # key tiles of the cache, S / 32
    floor: int  # split floor of dynamic chunks (1 with fixed chunks)
    cap: int  # largest dynamic chunk (SMALL_CHUNK_TILES with fixed chunks)
    pieces: int  # pieces per (user, KV head)
    rounds: int  # merge rounds of the binomial tree over the pieces
    max_chunk_tiles: int  # the largest chunk any piece reads: the K/V slots' size


def _chunk_bounds(*, fixed: int, chunk_cap: int | None, min_chunk_tiles: int | None, rows: _QRows, head_dim: int,
                  head_dim_v: int, kv_dtype: DataType, mla: bool, attn_mask_batch: int, shape: dict) -> tuple[int, int]:
    """Decides (cap, floor) in key tiles: the cap of dynamic chunks (the caller's chunk_cap, else the
    largest of CHUNK_CAPS whose chunk-sized buffers fit CHUNK_BUFFER_BUDGET, which _choose_split may
    lower to the one the model prefers; SMALL_CHUNK_TILES with fixed chunks) and the split floor (the
    caller's min_chunk_tiles, else the cost model's costmodel.split_floor_tiles for the shape; 1 with
    fixed chunks). Shape and dtypes only, never the batch."""
    if fixed:
        cap = SMALL_CHUNK_TILES
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
        from ttdecode.perf_model.costmodel import split_floor_tiles  # the model imports this module

        floor = split_floor_tiles(**shape, kv_tile_bytes=_TILE_BYTES[kv_dtype])
    return cap, floor


def _most_pieces(*, kv_pages: str, key_row_pieces: int | None, cores: Sequence[CoreCoord],
                 max_cores_per_head_batch: int, block_size: int | None, num_kv_heads: int, max_chunks: int) -> int:
    """Decides the most pieces per (user, KV head) the split may use: with tile pages
    min(max_cores_per_head_batch, cores / NKV, chunks of the cache), at least 1; with key_row pages the
    largest multiple of 12 allowed (_key_row_pieces). Refuses an unknown `kv_pages` and a
    `key_row_pieces` that is not a multiple of 12 from 12 to that most (or given with tile pages)."""
    if key_row_pieces is not None and kv_pages != "key_row":
        raise PlanError(f"key_row_pieces: applies to kv_pages='key_row' only, got {key_row_pieces!r} with "
                        f"kv_pages={kv_pages!r}")
    if kv_pages == "key_row":
        most = _key_row_pieces(cores, max_cores_per_head_batch, block_size)
        if key_row_pieces is not None and (not isinstance(key_row_pieces, int) or key_row_pieces < DRAM_BANKS
                                           or key_row_pieces % DRAM_BANKS or key_row_pieces > most):
            raise PlanError(f"key_row_pieces: expected None or a multiple of {DRAM_BANKS} from {DRAM_BANKS} to "
                            f"{most} (max_cores_per_head_batch={max_cores_per_head_batch}), got {key_row_pieces!r}")
    elif kv_pages == "tile":
        most = max(1, min(max_cores_per_head_batch, len(cores) // num_kv_heads, max_chunks))
    else:
        raise PlanError(f"kv_pages: expected 'tile' or 'key_row', got {kv_pages!r}")
    return most


def _pieces_for_cap(chunk_cap_tiles: int, *, kv_pages: str, key_row_pieces: int | None, fixed: int,
                    min_chunk_tiles: int | None, most: int, floor: int, num_kv_heads: int, num_cores: int,
                    seq_tiles: int, shape: dict, kv: dict) -> int:
    """Pieces per (user, KV head) with dynamic chunks capped at chunk_cap_tiles (or the fixed chunk):
    key_row pages: the caller's key_row_pieces, else the model's (costmodel.key_row_pieces); tile pages:
    `most` with fixed chunks or a caller's split floor, else the model's (costmodel.tile_pieces: the split
    floor and, below the most allowed, the pieces that pay their rounds). Never depends on the batch."""
    if kv_pages == "key_row":
        if key_row_pieces is not None:
            return key_row_pieces
        from ttdecode.perf_model.costmodel import key_row_pieces as model_pieces  # the model imports this module

        return model_pieces(num_kv_heads=num_kv_heads, cores=num_cores, max_pieces=most, seq_tiles=seq_tiles,
                            chunk_tiles=fixed if fixed else chunk_cap_tiles, fixed_chunk=bool(fixed), **shape, **kv)
    if fixed or min_chunk_tiles is not None:
        return most
    # the model's split: the split floor and, below the most allowed, the pieces that pay their rounds
    from ttdecode.perf_model.costmodel import tile_pieces  # the model imports this module

    return tile_pieces(num_kv_heads=num_kv_heads, cores=num_cores, max_pieces=most, seq_tiles=seq_tiles,
                       floor_tiles=floor, chunk_tiles=chunk_cap_tiles, **shape, **kv)


def _choose_split(*, seq_len: int, k_chunk_size: int, chunk_cap: int | None, min_chunk_tiles: int | None,
                  max_cores_per_head_batch: int, kv_pages: str, key_row_pieces: int | None, block_size: int | None,
                  num_kv_heads: int, head_dim: int, head_dim_v: int, kv_dtype: DataType, mla: bool,
                  attn_mask_batch: int, cores: Sequence[CoreCoord], rows: _QRows, shape: dict, kv: dict) -> _Split:
    """Decides the split (the same for every user: batch invariance): the chunk (fixed, or dynamic up to a
    cap), the split floor, the pieces per (user, KV head) and the merge rounds. With dynamic chunks and
    no caller's cap, the cap and its pieces are the pair the cost model gives the shortest step for one
    user at the cache's length (costmodel.chunk_cap), among the caps up to the one L1 allows."""
    fixed = k_chunk_size // TILE
    st = seq_len // TILE
    max_chunks = st // fixed if fixed else st
    cap, floor = _chunk_bounds(fixed=fixed, chunk_cap=chunk_cap, min_chunk_tiles=min_chunk_tiles, rows=rows,
                               head_dim=head_dim, head_dim_v=head_dim_v, kv_dtype=kv_dtype, mla=mla,
                               attn_mask_batch=attn_mask_batch, shape=shape)
    most = _most_pieces(kv_pages=kv_pages, key_row_pieces=key_row_pieces, cores=cores,
                        max_cores_per_head_batch=max_cores_per_head_batch, block_size=block_size,
                        num_kv_heads=num_kv_heads, max_chunks=max_chunks)
    split = functools.partial(_pieces_for_cap, kv_pages=kv_pages, key_row_pieces=key_row_pieces, fixed=fixed,
                              min_chunk_tiles=min_chunk_tiles, most=most, floor=floor, num_kv_heads=num_kv_heads,
                              num_cores=len(cores), seq_tiles=st, shape=shape, kv=kv)
    if fixed or chunk_cap is not None or cap == SMALL_CHUNK_TILES:
        pieces = split(cap)
    else:
        # the cap and its pieces that the model gives the shortest step for one user at the cache's length
        from ttdecode.perf_model.costmodel import chunk_cap as model_cap  # the model imports this module

        options = [(c, split(c)) for c in sorted(CHUNK_CAPS) if c <= cap]
        cap, pieces = model_cap(num_kv_heads=num_kv_heads, cores=len(cores), seq_tiles=st, floor_tiles=floor,
                                options=options, cyclic=kv_pages == "key_row", stages_per_chunk=1 if mla else 2,
                                **shape, **kv)
    return _Split(fixed=fixed, seq_tiles=st, floor=floor, cap=cap, pieces=pieces, rounds=tree_rounds(pieces),
                  max_chunk_tiles=fixed if fixed else min(cap, st))


def _heights(pieces: int) -> dict[int, int]:
    """Tree height of each piece index: the merge rounds in which it receives a partial."""
    return {i: len(tree_children(i, pieces)) for i in range(pieces)}


def _place_pieces(*, cores: Sequence[CoreCoord], works: Sequence[tuple[int, int]], split: _Split, kv_pages: str,
                  share_cache: bool, num_kv_heads: int, seq_len: int, window: int, num_tokens: int, shape: dict,
                  kv_dtype: DataType) -> dict[CoreCoord, list[tuple[int, int, int]]]:
    """Decides where every piece (user, KV head, index) runs: core -> its pieces (every core a key, in
    `cores` order). Tile pages: work-major over the cores, each further wave shifted by one core so the
    roots spread; key_row pages: on cores kept for the piece's DRAM bank (key_row_deal, weighing each
    piece's work in cycles: tiles, chunks and merges priced by the model). Then each work's pieces are
    relabeled to shorten the tree's NoC paths (_short_hop_placement). Only where, never a number."""
    pieces = split.pieces
    flat = [(b, h, i) for (b, h) in works for i in range(pieces)]
    placed: dict[CoreCoord, list[tuple[int, int, int]]] = {c: [] for c in cores}
    if kv_pages == "key_row":
        # -- the pieces of bank r (key tile rows (kv_batch * NKV + h) * S/32 + t with that row % 12 == r)
        # run on cores kept for bank r, as many as the bank's work (chunks and merges) asks
        from ttdecode.perf_model.costmodel import split_costs  # the model imports this module

        costs = split_costs(**shape, kv_tile_bytes=_TILE_BYTES[kv_dtype])
        span = span_window(window, num_tokens)

        def weight(i: int) -> float:
            r = cyclic_piece_range(seq_len - 1, split.fixed, pieces, i, span, split.floor, split.cap)
            return r.num_tiles * costs.tile + r.num_chunks * costs.chunk + len(tree_children(i, pieces)) * costs.round

        weights = [weight(i) for i in range(pieces)]
        st = split.seq_tiles
        bank = {it: (((0 if share_cache else it[0]) * num_kv_heads + it[1]) * st + it[2]) % DRAM_BANKS for it in flat}
        placed.update(key_row_deal(cores, flat, bank, {it: weights[it[2]] for it in flat}))
    else:
        # -- place pieces: work-major over the cores; each further wave of pieces is shifted by one
        # core so that roots (which receive the most partials) spread evenly; each core then runs its
        # pieces leaves first
        n_cores = len(cores)
        for g, item in enumerate(flat):
            placed[cores[(g + g // n_cores) % n_cores]].append(item)
    return _short_hop_placement(placed, works, pieces, _heights(pieces), DRAM_BANKS if kv_pages == "key_row" else 1)


def _build_tree(placed: dict[CoreCoord, list[tuple[int, int, int]]], *, pieces: int, cores: Sequence[CoreCoord]
                ) -> tuple[tuple[Piece, ...], dict[CoreCoord, tuple[Piece, ...]], dict[CoreCoord, int]]:
    """Decides each core's run order and the merge tree's addresses: a core runs its pieces leaves first
    (by tree height, then (user, KV head, index)); each receiving piece gets consecutive scratch areas
    (one per child round) on its core; each non-root piece learns its parent's core, area and height.
    Returns (the pieces sorted by core row, column and slot; core -> its pieces in run order, for every
    core of `cores`; core -> its count of scratch areas, for every core of `placed`). Sorts the lists of
    `placed` in place."""
    heights = _heights(pieces)
    where: dict[tuple[int, int, int], tuple[CoreCoord, int, int]] = {}  # -> core, slot, recv_area
    recv_areas: dict[CoreCoord, int] = {}
    for core, items in placed.items():
        items.sort(key=lambda it: (heights[it[2]], it))
        area = 0
        for slot, it in enumerate(items):
            h_ = heights[it[2]]
            where[it] = (core, slot, area if h_ else -1)
            area += h_
        recv_areas[core] = area

    piece_list: list[Piece] = []
    for it, (core, slot, recv) in where.items():
        b, h, i = it
        parent = tree_parent(i)
        if parent is None:
            pcore, parea, pheight = None, -1, 0
        else:
            r, pi = parent
            pc, _, precv = where[(b, h, pi)]
            # the parent's areas are its child rounds in order; this piece's round is its r-th
            rounds_of_parent = [rr for rr, _ in tree_children(pi, pieces)]
            pcore, parea, pheight = pc, precv + rounds_of_parent.index(r), heights[pi]
        piece_list.append(Piece(b, h, i, core, slot, heights[i], recv, pcore, parea, pheight))
    piece_list.sort(key=lambda p: (p.core.y, p.core.x, p.slot))
    core_pieces = {c: tuple(p for p in piece_list if p.core == c) for c in cores}
    return tuple(piece_list), core_pieces, recv_areas


def _size_buffers(*, rows: _QRows, split: _Split, head_dim: int, head_dim_v: int, kv_dtype: DataType, batch: int,
                  seq_len: int, block_size: int | None, attention_sink, mla: bool, attn_mask_batch: int, window: int,
                  num_tokens: int, prescale_q: bool, fp32_dest_acc_en: bool, recv_areas: dict[CoreCoord, int],
                  core_pieces: dict[CoreCoord, tuple[Piece, ...]], l1_bytes_per_core: int
                  ) -> tuple[dict, tuple[CBSpec, ...]]:
    """Decides the circular buffers (flash_decode_cbs; the same on every core, sized for the busiest):
    scratch areas for the most partials any core receives, the chunk slots for the largest chunk, and a
    second Q slot (prefetch) when a core runs several pieces, dropped if it alone would overflow
    `l1_bytes_per_core` (bytes). Returns (flash_decode_cbs' arguments, for the resource check's advice;
    the buffers)."""
    cb_args = dict(
        q_tiles=rows.q_tiles, d_tiles=head_dim // TILE, dv_tiles=head_dim_v // TILE,
        max_chunk_tiles=split.max_chunk_tiles, kv_dtype=kv_dtype, batch=batch,
        recv_areas=max(recv_areas.values(), default=0),
        max_blocks=seq_len // block_size if block_size else 0, attention_sink=bool(attention_sink), mla=mla,
        tree=split.pieces > 1, attn_mask=attn_mask_batch > 0, window=window, tokens=num_tokens,
        q_slots=2 if max((len(v) for v in core_pieces.values()), default=0) > 1 else 1,
        prescale_q=prescale_q, q_tile_rows=rows.q_tile_rows,
        im_dtype=DataType.float32 if fp32_dest_acc_en else DataType.bfloat16,
    )
    if cb_args["q_slots"] == 2 and cbs_bytes_per_core(flash_decode_cbs(**cb_args)) > l1_bytes_per_core:
        cb_args["q_slots"] = 1  # the second Q slot is a prefetch: dropped before the plan would not fit
    return cb_args, flash_decode_cbs(**cb_args)


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
    model's split: the floor the cost model chooses for the shape (costmodel.split_floor_tiles) and,
    with tile pages, pieces per (user, KV head) up to the most allowed that pay their tree rounds for
    one user at the cache's length (costmodel.tile_pieces; never the batch); given = the caller's split
    (the most pieces allowed: min(max_cores_per_head_batch, cores // num_kv_heads, S / 32)); 1 = spread
    the keys over every piece (no floor).
    `chunk_cap` (dynamic chunks only): the largest dynamic chunk in tiles, one of CHUNK_CAPS; None =
    the model's choice (costmodel.chunk_cap, for one user at the cache's length, never the batch) among
    those whose chunk-sized buffers fit CHUNK_BUFFER_BUDGET for the shape and dtypes. Each chunk costs a
    fixed ~3k cycles (the row max reduction, alpha, the rescales, the running set's copies and packs;
    costmodel.chunk_ops), but the first chunk's read overlaps nothing.
    `math_fidelity`: the fidelity the cost model prices the split at (the compute config's; the kernels
    take theirs from the compute settings at launch).
    `kv_pages` "key_row": K and V come in key-row pages (one page per key-tile row, round robin over
    the 12 DRAM banks: ttnn ND sharding of [1, 1, 32, D] shards over the banks); each (user, KV head)
    then has a multiple of 12 pieces up to max_cores_per_head_batch (>= 12; the model's choice for the
    shape, costmodel.key_row_pieces: enough for one user to cover the cores, no more rounds than that)
    taking the key tiles cyclically, so every piece reads one bank, and the pieces of a bank run on
    the cores kept for that bank, as many as the bank's share of the work (key tiles, chunks and
    merges: every user's tree puts its merges in the same banks) asks (key_row_deal). `key_row_pieces` (kv_pages "key_row" only): that
    many pieces per (user, KV head) instead of the model's choice (a multiple of 12 up to the most).
    `prescale_q`: the softmax scale will be a power of two (+-2^k; the factory checks it), so the
    compute kernel multiplies each piece's Q by it once, exactly (a bf16 element only changes its
    exponent), instead of every score: the same fp32 scores bit for bit (scaling by 2^k commutes with
    the matmul's products and fp32 sums, subnormal results aside), one SFPU op per key tile fewer.
    `q_tile_rows`: rows of the tiles that hold q rows (DecodePlan.q_tile_rows); None = the fewest of
    8, 16, 32 that hold num_tokens x group size rows (16x32 tiles: the matmuls' in0, every copy and
    pack of scores, probabilities, statistics, O and partials, and the partial messages are halved;
    8x32 tiles: quartered). The outputs are the same bits either way (every step is row by row; the
    rows past the heads hold none).

    `max_cores_per_head_batch` None: not set by the user (SDPAProgramConfig's default): the first of
    UNSET_MAX_CORES_TRIES (16, 8, 4, 2, 1; "key_row": 16, 12) whose plan fits the cores' L1 and runtime
    args (e.g. DeepSeek-V3's absorbed MLA, 128 q heads of D 576, fits only with 1); if none fits, the
    error of 16. A value given is used as given: an overflowing plan is refused naming the knob.

    The steps, in order (each a function saying what it decides): check the call (_check_sizes,
    _check_chunking, _check_cache, _check_positions); the q rows' tiles (_q_rows); the split
    (_choose_split: chunk, floor, pieces, rounds); the placement (_place_pieces); the tree's run order
    and addresses (_build_tree); the buffers (_size_buffers); the resource check (_check_resources: L1
    and runtime args, with the knob that makes an overflowing plan fit). The function is long only by its
    signature and this documentation of the public knobs; its body is that sequence.
    """
    call_args = dict(locals())  # the call as made, for re-planning with other knobs (L1 advice)
    if max_cores_per_head_batch is None:
        return _plan_fitting_pieces(call_args)
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    # -- check the call (the first fault is the one named)
    _check_sizes(batch=batch, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, seq_len=seq_len, head_dim=head_dim,
                 head_dim_v=head_dim_v, mla=mla, math_fidelity=math_fidelity, kv_dtype=kv_dtype)
    _check_chunking(seq_len=seq_len, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, num_tokens=num_tokens,
                    k_chunk_size=k_chunk_size, min_chunk_tiles=min_chunk_tiles, chunk_cap=chunk_cap,
                    prescale_q=prescale_q, q_tile_rows=q_tile_rows)
    window = _check_cache(seq_len=seq_len, block_size=block_size, num_blocks=num_blocks, share_cache=share_cache,
                          sliding_window_size=sliding_window_size)
    cur_pos = _check_positions(batch=batch, seq_len=seq_len, cur_pos=cur_pos, window=window,
                               max_cores_per_head_batch=max_cores_per_head_batch, num_tokens=num_tokens,
                               is_causal=is_causal, attn_mask_batch=attn_mask_batch)

    # -- the cores, the q rows' tiles, and what the cost model's choices need of the shape
    cores = grid_cores(grid, sub_core_grids)
    works = [(b, h) for b in range(batch) for h in range(num_kv_heads)]
    rows = _q_rows(num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, num_tokens=num_tokens,
                   fp32_dest_acc_en=fp32_dest_acc_en, dst_full_sync_en=dst_full_sync_en, q_tile_rows=q_tile_rows)
    shape = dict(q_tiles=rows.q_tiles, d_tiles=head_dim // TILE, dv_tiles=head_dim_v // TILE,
                 fp32_dest_acc_en=fp32_dest_acc_en, dst_tiles=rows.dst_tiles, fidelity=math_fidelity,
                 head_rows=rows.head_rows, prescale_q=prescale_q, q_tile_rows=rows.q_tile_rows, mla=mla)
    kv = dict(kv_tile_bytes=_TILE_BYTES[kv_dtype],
              kv_tiles_per_key_tile=head_dim // TILE + (0 if mla else head_dim_v // TILE))

    # -- split, placement, tree, buffers, resource check
    split = _choose_split(seq_len=seq_len, k_chunk_size=k_chunk_size, chunk_cap=chunk_cap,
                          min_chunk_tiles=min_chunk_tiles, max_cores_per_head_batch=max_cores_per_head_batch,
                          kv_pages=kv_pages, key_row_pieces=key_row_pieces, block_size=block_size,
                          num_kv_heads=num_kv_heads, head_dim=head_dim, head_dim_v=head_dim_v, kv_dtype=kv_dtype,
                          mla=mla, attn_mask_batch=attn_mask_batch, cores=cores, rows=rows, shape=shape, kv=kv)
    placed = _place_pieces(cores=cores, works=works, split=split, kv_pages=kv_pages, share_cache=share_cache,
                           num_kv_heads=num_kv_heads, seq_len=seq_len, window=window, num_tokens=num_tokens,
                           shape=shape, kv_dtype=kv_dtype)
    pieces, core_pieces, recv_areas = _build_tree(placed, pieces=split.pieces, cores=cores)
    cb_args, cbs = _size_buffers(rows=rows, split=split, head_dim=head_dim, head_dim_v=head_dim_v, kv_dtype=kv_dtype,
                                 batch=batch, seq_len=seq_len, block_size=block_size, attention_sink=attention_sink,
                                 mla=mla, attn_mask_batch=attn_mask_batch, window=window, num_tokens=num_tokens,
                                 prescale_q=prescale_q, fp32_dest_acc_en=fp32_dest_acc_en, recv_areas=recv_areas,
                                 core_pieces=core_pieces, l1_bytes_per_core=l1_bytes_per_core)
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
    )
    _check_resources(plan, l1_bytes_per_core, cb_args, lambda **over: make_plan(**{**call_args, **over}))
    return plan


def _plan_fitting_pieces(call_args: dict) -> DecodePlan:
    """make_plan with max_cores_per_head_batch not set: the first of the tries whose plan raises no
    ResourceError (module constants UNSET_MAX_CORES_TRIES*); the first try's error when none fits."""
    tries = UNSET_MAX_CORES_TRIES_KEY_ROW if call_args.get("kv_pages") == "key_row" else UNSET_MAX_CORES_TRIES
    first_error: ResourceError | None = None
    for m in tries:
        try:
            return make_plan(**{**call_args, "max_cores_per_head_batch": m})
        except ResourceError as exc:
            first_error = first_error or exc
    assert first_error is not None
    raise first_error


def tree_hops(cores_of: Sequence[CoreCoord], pieces: int) -> tuple[int, int]:
    """(NoC 0 hops along the tree's critical chain, all the tree's hops) of one work whose piece i runs
    on cores_of[i]. The critical chain is the leaf-to-root chain of the most rounds and, among those,
    the most hops (costmodel: each round pays its message's hops on the way to the parent)."""
    return _tree_hops(list(range(pieces)), _hop_matrix(cores_of), _children(pieces))


def _hop_matrix(cores: Sequence[CoreCoord]) -> list[list[int]]:
    """hops[k][l]: NoC 0 hops from cores[k] to cores[l] (costmodel.noc_hops)."""
    from ttdecode.perf_model.costmodel import noc_hops  # the model imports this module

    return [[noc_hops(a, b) for b in cores] for a in cores]


def _children(pieces: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(c for _, c in tree_children(i, pieces)) for i in range(pieces))


def _tree_hops(order: Sequence[int], hops: Sequence[Sequence[int]],
               children: Sequence[Sequence[int]]) -> tuple[int, int]:
    """tree_hops with piece i on slot order[i] and hops[k][l] the NoC 0 hops from slot k to slot l."""
    depth = [0] * len(order)
    chain = [0] * len(order)
    total = 0
    for i in reversed(range(len(order))):  # children have higher indices than their parent
        d = h = 0
        row = order[i]
        for c in children[i]:
            step = hops[order[c]][row]
            total += step
            if (depth[c] + 1, chain[c] + step) > (d, h):
                d, h = depth[c] + 1, chain[c] + step
        depth[i], chain[i] = d, h
    return chain[0], total


@functools.lru_cache(maxsize=512)
def short_hop_order(slots: tuple[CoreCoord, ...], modulus: int) -> tuple[int, ...]:
    """A relabeling of one work's pieces: piece i takes the slot (core) that piece order[i] would have,
    with order[i] = i mod `modulus` (key_row: the same DRAM bank), chosen to shorten the tree's NoC 0
    paths: the fewest hops on the critical chain, then in all (tree_hops). Pairwise swaps from the
    identity until none helps: deterministic, a local optimum."""
    n = len(slots)
    hops = _hop_matrix(slots)
    children = _children(n)
    order = list(range(n))
    cost = _tree_hops(order, hops, children)
    improved = True
    while improved:
        improved = False
        for a in range(n):
            for b in range(a + modulus, n, modulus):
                order[a], order[b] = order[b], order[a]
                c = _tree_hops(order, hops, children)
                if c < cost:
                    cost, improved = c, True
                else:
                    order[a], order[b] = order[b], order[a]
    return tuple(order)


def _short_hop_placement(placed: dict[CoreCoord, list[tuple[int, int, int]]], works: Sequence[tuple[int, int]],
                         pieces: int, heights: dict[int, int], modulus: int) -> dict[CoreCoord, list[tuple[int, int, int]]]:
    """The placement with every work's pieces relabeled by short_hop_order (tuned on the first work's
    cores): piece i of a work runs where piece order[i] of that work was placed, so each core keeps
    its number of pieces and (order[i] = i mod 12 with key_row pages) each piece its bank. Kept only
    if no core then needs more partial areas than before (the CB is sized by the busiest core). Where
    pieces run changes no number (every piece and merge computes the same), only the NoC paths."""
    if pieces < 2 or not works:
        return placed
    at = {it: core for core, items in placed.items() for it in items}
    b0, h0 = works[0]
    order = short_hop_order(tuple(at[(b0, h0, k)] for k in range(pieces)), modulus)
    moved: dict[CoreCoord, list[tuple[int, int, int]]] = {c: [] for c in placed}
    for b, h in works:
        for i in range(pieces):
            moved[at[(b, h, order[i])]].append((b, h, i))

    def areas(p: dict[CoreCoord, list[tuple[int, int, int]]]) -> int:
        return max((sum(heights[i] for _, _, i in items) for items in p.values()), default=0)

    return moved if areas(moved) <= areas(placed) else placed


def key_row_placement(cores: Sequence[CoreCoord], per_bank: int | Sequence[int]) -> list[list[CoreCoord]]:
    """The cores kept for each DRAM bank: `per_bank` each (or per_bank[r] for bank r), the banks in
    turn taking the free core with the fewest NoC 0 hops from the bank's DRAM tiles (the data's way
    back; WormholeB0 NoC map, costmodel.dram_return_hops) until each has its count. Only where the
    pieces run; the numbers do not depend on it."""
    from ttdecode.perf_model.costmodel import dram_return_hops  # the model imports this module

    counts = [per_bank] * DRAM_BANKS if isinstance(per_bank, int) else list(per_bank)
    if sum(counts) > len(cores):
        raise PlanError(f"key_row placement: {sum(counts)} cores asked of a grid of {len(cores)}")
    free = list(cores)
    out: list[list[CoreCoord]] = [[] for _ in range(DRAM_BANKS)]
    for k in range(max(counts, default=0)):
        for bank in range(DRAM_BANKS):
            if counts[bank] > k:
                best = min(free, key=lambda c: (dram_return_hops(bank, c), c.y, c.x))
                out[bank].append(best)
                free.remove(best)
    return out


def _pieces_per_core_limit() -> int:
    """The most pieces one core can run: its kernels' runtime args (RUNTIME_ARGS_HEADER + RUNTIME_ARGS_PER_PIECE
    per piece) within MAX_RUNTIME_ARGS."""
    return (MAX_RUNTIME_ARGS - RUNTIME_ARGS_HEADER) // RUNTIME_ARGS_PER_PIECE


def bank_core_counts(bank_weights: Sequence[float], bank_pieces: Sequence[int], cores: int,
                     per_core: int | None = None) -> list[int]:
    """Cores per DRAM bank for kv_pages "key_row": each bank with pieces first gets the cores its pieces
    need at `per_core` pieces per core at most (the runtime args' limit by default), then the rest go
    one at a time to the bank whose work per core (`bank_weights[r]` / its cores) is the largest, never
    more cores than the bank has pieces (ties to the lower bank). With one user every bank has as many
    pieces, all but the merges' work the same, and the cores go evenly; in a batch the banks that hold
    the parents' tiles (every user's tree puts its merges in the same banks) get more. Too few cores
    for the pieces is left to the plan's resource checks (a core over the runtime args' limit)."""
    most = per_core if per_core is not None else _pieces_per_core_limit()
    if cores < DRAM_BANKS:
        raise PlanError(f"kv_pages: 'key_row' keeps at least one core per DRAM bank ({DRAM_BANKS}), the grid "
                        f"gives {cores} cores")
    counts = [max(1, min(-(-n // most), cores // DRAM_BANKS)) if n else 0 for n in bank_pieces]
    for _ in range(cores - sum(counts)):
        open_ = [r for r in range(len(counts)) if counts[r] < bank_pieces[r]]
        if not open_:
            break
        r = max(open_, key=lambda r: (bank_weights[r] / counts[r], -r))
        counts[r] += 1
    return counts


def key_row_deal(cores: Sequence[CoreCoord], items: Sequence[tuple[int, int, int]], bank: Mapping[tuple[int, int, int], int],
                 weight: Mapping[tuple[int, int, int], float]) -> dict[CoreCoord, list[tuple[int, int, int]]]:
    """Where the pieces `items` ((user, KV head, index)) of kv_pages "key_row" run: each runs on a core
    kept for the bank its tiles sit in (`bank`), the banks' cores counted by bank_core_counts from the
    pieces' work (`weight`, cycles: key tiles, chunks and merges priced by the model), and each bank's
    pieces, heaviest first, going to its least loaded core (ties to the earlier core) among those under
    the runtime args' limit while the bank's cores can hold its pieces that way. Depends on the batch
    (where pieces run), never a number."""
    bank_items: list[list[tuple[int, int, int]]] = [[] for _ in range(DRAM_BANKS)]
    for it in items:
        bank_items[bank[it]].append(it)
    counts = bank_core_counts([sum(weight[it] for it in its) for its in bank_items],
                              [len(its) for its in bank_items], len(cores))
    groups = key_row_placement(cores, counts)
    placed: dict[CoreCoord, list[tuple[int, int, int]]] = {}
    for r, its in enumerate(bank_items):
        # no core past the runtime args' limit while the bank's cores can take its pieces evenly
        most = max(_pieces_per_core_limit(), -(-len(its) // max(1, len(groups[r]))))
        load = [0.0] * len(groups[r])
        held = [0] * len(groups[r])
        for it in sorted(its, key=lambda it: (-weight[it], it)):
            k = min((k for k in range(len(load)) if held[k] < most), key=lambda k: (load[k], k))
            load[k] += weight[it]
            held[k] += 1
            placed.setdefault(groups[r][k], []).append(it)
    return placed


def _key_row_pieces(cores: Sequence[CoreCoord], max_pieces: int, block_size: int | None) -> int:
    """The most pieces per work for kv_pages "key_row".

    The most pieces per (user, KV head): the largest multiple of 12 up to max_pieces (and 60: the
    tree is at most 64 wide), so every piece reads one bank (make_plan then lets the model choose
    fewer, costmodel.key_row_pieces); like the interleaved split they depend on the config alone,
    never on the batch (batch invariance). Where they run: key_row_deal."""
    if block_size is not None:
        raise PlanError("kv_pages: 'key_row' needs a contiguous cache (a paged cache's blocks keep tile pages), "
                        "got a paged cache (block_size / num_blocks)")
    if len(cores) < DRAM_BANKS:
        raise PlanError(f"kv_pages: 'key_row' keeps at least one core per DRAM bank ({DRAM_BANKS}), the grid "
                        f"gives {len(cores)} cores")
    if max_pieces < DRAM_BANKS:
        raise PlanError(f"max_cores_per_head_batch: expected at least {DRAM_BANKS} with kv_pages='key_row' "
                        f"(each (user, KV head) takes a multiple of {DRAM_BANKS} pieces, one bank each), got {max_pieces}")
    return min(max_pieces, 1 << MAX_ROUNDS) // DRAM_BANKS * DRAM_BANKS


#: Runtime args: a fixed header plus this many per piece, the most of the three kernels (see
#: factory.py: reader 8 + 3 per piece, writer 3 + 6, compute 1 + 2).
RUNTIME_ARGS_HEADER = 8
RUNTIME_ARGS_PER_PIECE = 6


def cbs_bytes_per_core(cbs: Sequence[CBSpec]) -> int:
    """L1 bytes per core of a set of CBs, with the firmware and kernel-config area below them."""
    return L1_UNRESERVED_BASE + sum(-(-cb.total_size // CB_ALIGNMENT) * CB_ALIGNMENT for cb in cbs)


# Set while make_plan re-plans the call with other knobs to find the advice of an L1 overflow: those
# plans raise a bare PlanError instead of looking for advice of their own.
_REPLANNING = False


def _fitting_chunk(plan: DecodePlan, replan, *, tree: bool) -> int | None:
    """The largest k_chunk_size (keys) below the plan's largest chunk with which the same call plans
    (`replan`: make_plan with the caller's arguments but the ones given; without partials, i.e. one
    piece per head, unless `tree`), or None. A smaller chunk changes the split (more chunks, more pieces,
    a deeper tree, more partial areas), so only the plan itself can tell."""
    global _REPLANNING
    c = plan.max_chunk_tiles
    while c > 1:
        c //= 2
        if plan.seq_len % (c * TILE):
            continue
        over = dict(k_chunk_size=c * TILE, min_chunk_tiles=None, chunk_cap=None)
        if not tree:
            over["max_cores_per_head_batch"] = 1
        was, _REPLANNING = _REPLANNING, True
        try:
            replan(**over)
            return c * TILE
        except PlanError:
            continue
        finally:
            _REPLANNING = was
    return None


def _l1_advice(plan: DecodePlan, l1_bytes: int, cb_args: dict, replan) -> str:
    """Which knob makes an overflowing plan fit: a smaller k_chunk_size (the largest chunk that fits
    is named), else one piece per work (max_cores_per_head_batch=1: no partial buffers), else fewer
    q heads per KV head on the chip."""
    if not plan.fixed_chunk_tiles and plan.chunk_cap > SMALL_CHUNK_TILES:
        # the model's cap took more L1 than this batch leaves: a smaller cap may fit
        for cap in sorted(CHUNK_CAPS, reverse=True):
            if cap < plan.chunk_cap and cbs_bytes_per_core(
                    flash_decode_cbs(**dict(cb_args, max_chunk_tiles=min(cap, plan.seq_len // TILE)))) <= l1_bytes:
                return (f"Set chunk_cap={cap} (SDPAProgramConfig / make_plan; the cost model took dynamic chunks of "
                        f"up to {plan.chunk_cap} key tiles for this shape).")
    if plan.cyclic_split:
        # key_row: every piece reads one bank; fewer pieces per head (>= 12) mean fewer partials per core
        fewer = (f"Lower max_cores_per_head_batch (now {plan.pieces_per_work} pieces per head; kv_pages='key_row' "
                 f"takes a multiple of 12, at least 12): fewer pieces per core and partials to receive"
                 if plan.pieces_per_work > 12 else "Use kv_pages='tile'")
        return f"{fewer}, or a smaller batch per program."
    now = f"now {plan.fixed_chunk_tiles * TILE if plan.fixed_chunk_tiles else 'dynamic, up to'} " \
          f"{'' if plan.fixed_chunk_tiles else str(plan.max_chunk_tiles * TILE) + ' keys'}".rstrip()
    chunk = _fitting_chunk(plan, replan, tree=plan.pieces_per_work > 1)
    if chunk is not None:
        fewer = (f", or lower max_cores_per_head_batch (now {plan.pieces_per_work} pieces per head, fewer "
                 f"partials to receive)") if plan.pieces_per_work > 1 else ""
        return f"Set k_chunk_size={chunk} or lower ({now}){fewer}."
    if plan.pieces_per_work > 1:
        one = dict(cb_args, tree=False, recv_areas=0)
        if cbs_bytes_per_core(flash_decode_cbs(**one)) <= l1_bytes:
            return (f"No k_chunk_size fits with {plan.pieces_per_work} pieces per head (partial_out and one "
                    f"partial_in area alone take {2 * plan.partial_pages * 4 * plan.q_tile_rows // 32} KiB); set max_cores_per_head_batch=1 "
                    f"(one core per (user, KV head), no partials).")
        chunk = _fitting_chunk(plan, replan, tree=False)
        if chunk is not None:
            return (f"No k_chunk_size fits with {plan.pieces_per_work} pieces per head; set "
                    f"max_cores_per_head_batch=1 (no partials) and k_chunk_size={chunk} or lower.")
    return (f"No k_chunk_size fits even with one piece per head: {plan.group_size} q heads per KV head "
            f"({plan.q_tiles} tile rows) at head_dim={plan.head_dim}, head_dim_v={plan.head_dim_v} are too "
            f"many for one core; split the q heads over more devices.")


def _check_resources(plan: DecodePlan, l1_bytes: int, cb_args: dict, replan) -> None:
    """make_plan's last step: refuse a plan whose buffers overflow `l1_bytes` (bytes per core, firmware
    area included) or whose busiest core needs more runtime args than MAX_RUNTIME_ARGS, naming the knob
    that makes it fit (_l1_advice, which re-plans the call through `replan` with other knobs and the
    flash_decode_cbs arguments `cb_args`). Decides nothing else; raises PlanError."""
    used = plan.l1_bytes_per_core
    if used > l1_bytes:
        biggest = sorted(plan.circular_buffers, key=lambda cb: -cb.total_size)[:3]
        detail = ", ".join(f"{cb.name} {cb.total_size // 1024} KiB" for cb in biggest)
        if _REPLANNING:
            raise ResourceError(f"L1 overflow: the plan needs {used // 1024} KiB per core")
        raise ResourceError(
            f"L1 overflow: the plan needs {used // 1024} KiB per core, a Wormhole core has "
            f"{l1_bytes // 1024} KiB (largest buffers: {detail}). {_l1_advice(plan, l1_bytes, cb_args, replan)}"
            + (f" Or fewer new tokens per user (num_tokens now {plan.num_tokens}: {plan.q_tiles} q tile rows "
               f"per KV group)." if plan.num_tokens > 1 else "")
        )
    most = max((len(v) for v in plan.core_pieces.values()), default=0)
    if RUNTIME_ARGS_HEADER + RUNTIME_ARGS_PER_PIECE * most > MAX_RUNTIME_ARGS:
        raise ResourceError(
            f"too much work per core: {most} pieces on one core need "
            f"{RUNTIME_ARGS_HEADER + RUNTIME_ARGS_PER_PIECE * most} runtime args (limit {MAX_RUNTIME_ARGS}); "
            f"use a larger grid or a smaller batch, or lower max_cores_per_head_batch (now {plan.pieces_per_work})."
        )


def format_plan(plan: DecodePlan, *, max_rows: int = 64) -> str:
    """A readable table of the plan and its L1 use."""
    lines = [
        f"FlashDecode plan: B={plan.batch} NH={plan.num_q_heads} NKV={plan.num_kv_heads} S={plan.seq_len} "
        f"D={plan.head_dim} Dv={plan.head_dim_v} KV={plan.kv_dtype.value} grid={plan.grid[0]}x{plan.grid[1]}"
        + (f" paged: {plan.num_blocks} blocks of {plan.block_size} keys, {plan.max_blocks} per user" if plan.paged else "")
        + (" MLA: V = K[..., :Dv], read once with K" if plan.mla else "")
        + (f" tokens per user: {plan.num_tokens}" if plan.num_tokens > 1 else "")
        + ("" if plan.is_causal else " non-causal") + (f" attn_mask batch {plan.attn_mask_batch}" if plan.has_attn_mask else ""),
        f"pieces per (user, KV head): {plan.pieces_per_work}"
        + (" (key-row pages: every p'-th key tile, one DRAM bank per piece)" if plan.cyclic_split else "")
        + f"; reduction rounds: {plan.rounds}; "
        f"chunk: {'dynamic, max ' + str(plan.max_chunk_tiles * TILE) if not plan.fixed_chunk_tiles else plan.fixed_chunk_tiles * TILE} keys; "
        f"q tile rows per group: {plan.q_tiles}; DST tiles: {plan.dst_tiles}",
        f"cores used: {len(plan.active_cores)} of {len(plan.cores)}; "
        f"most pieces on one core: {max((len(v) for v in plan.core_pieces.values()), default=0)}",
        "",
        f"{'core':>8} {'user':>4} {'kvh':>4} {'piece':>5} {'height':>6} {'chunks':>10} {'keys':>14} {'parent':>10}",
    ]
    rows = 0
    for core in plan.cores:
        for p in plan.core_pieces.get(core, ()):
            if rows >= max_rows:
                break
            if plan.cur_pos is not None:
                r = plan.range_at(plan.cur_pos[p.user], p.index)
                chunks = "-" if r.empty else f"{r.first_chunk}..{r.first_chunk + r.num_chunks - 1}"
                last = r.tile_at(r.num_tiles - 1)
                keys = "-" if r.empty else f"{r.first_tile * TILE}..{min((last + 1) * TILE, plan.cur_pos[p.user] + 1) - 1}" + (
                    f" /{r.stride}" if r.stride > 1 else "")
            else:
                chunks = keys = "on device"
            parent = "root" if p.parent_core is None else f"({p.parent_core.x},{p.parent_core.y})"
            lines.append(
                f"{f'({core.x},{core.y})':>8} {p.user:>4} {p.kv_head:>4} {p.index:>5} {p.height:>6} {chunks:>10} {keys:>14} {parent:>10}"
            )
            rows += 1
    if rows >= max_rows and len(plan.pieces) > max_rows:
        lines.append(f"... {len(plan.pieces) - max_rows} more pieces")
    lines.append("")
    lines.append(f"L1 per core: {plan.l1_bytes_per_core / 1024:.1f} KiB of {L1_BYTES_PER_CORE // 1024} KiB "
                 f"(firmware and kernel config below {L1_UNRESERVED_BASE:#x})")
    for cb in plan.circular_buffers:
        shape = f"{cb.tile_rows}x32"
        lines.append(f"  cb{cb.index:<3} {cb.name:<12} {cb.data_format.value:<10} {shape:<5} {cb.num_pages:>4} x "
                     f"{cb.page_size:>5} B = {cb.total_size / 1024:8.1f} KiB")
    return "\n".join(lines)
