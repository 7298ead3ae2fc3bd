"""The FlashDecode program's circular buffers: the table of the kernels' CBs (`flash_decode_cbs`), the cap
of dynamic chunks that L1 allows (`fitting_chunk_cap`), and make_plan's buffer step (`size_buffers`).
Sizes in bytes, chunks in key tiles."""

from __future__ import annotations

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import CoreCoord
from ttdecode.core.split import CHUNK_CAPS, SMALL_CHUNK_TILES, TILE, VIEW_WORDS
from ttdecode.ops.flash_decode.plan.types import TILE_BYTES, CBSpec, Piece, PlanError, QRows, Split, cbs_bytes_per_core

__all__ = ["CHUNK_BUFFER_BUDGET", "CHUNK_SIZED_CBS", "QROW_CBS", "MAX_MASKED_TILES", "masked_tiles_bound",
           "flash_decode_cbs", "fitting_chunk_cap", "size_buffers"]


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


def flash_decode_cbs(
    *, q_tiles: int, d_tiles: int, dv_tiles: int, max_chunk_tiles: int, kv_dtype: DataType,
    batch: int, recv_areas: int, max_blocks: int = 0, attention_sink: bool = False, mla: bool = False,
    tree: bool = True, attn_mask: bool = False, window: int = 0, tokens: int = 1, q_slots: int = 1,
    prescale_q: bool = False, q_tile_rows: int = 32, im_dtype: DataType = DataType.float32,
    piece_views: int = 0, merge_slot: bool = False, softmax_chunks: int = 1,
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
    `piece_views` > 0 (bank-local paged pages): the reader's page of that many pieces' views
    (common.hpp BankView, VIEW_WORDS int32 each), one copy for the compute kernel and one for the writer.
    `merge_slot` (the bounded merge, plan/merge_slot.py): partial_in and partial_out hold one q tile row of a
    partial (dv_tiles + 2 tiles) whatever the children, instead of `recv_areas` whole partials and one.
    `softmax_chunks` > 1 (a softmax block of that many chunks): the scores and probabilities of a block's
    chunks, a slot each, and as many V slots (the block's V queues while its K chunks are scored; P . V
    reads them side by side).
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
    UnpackToDestFp32 mode (program_factory.UNPACK_TO_DEST_CBS), so they reach the fp32 DST exactly; probs
    feeds the matmuls as TF32.

    Left whole (~90 lines, most of them this documentation): the body is one table of the kernels'
    buffers, read against their `cb_*` constants; split, the table would be in pieces.
    """
    f32, bf16 = DataType.float32, DataType.bfloat16
    if im_dtype not in (f32, bf16):
        raise PlanError(f"im_dtype: expected float32 or bfloat16, got {im_dtype!r}")
    im, im_page = im_dtype, TILE_BYTES[im_dtype]  # the softmax's intermediates (see Precision)
    kv_tile = TILE_BYTES[kv_dtype]
    pos_page = max(32, -(-4 * batch // 32) * 32)
    partial = q_tiles * (dv_tiles + 2)
    recv = (dv_tiles + 2) if merge_slot else max(1, recv_areas) * partial  # the children's partials' area
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
        (8, "scores", im, im_page, softmax_chunks * max_chunk_tiles),  # also the merge's scratch
        (9, "probs", im, im_page, softmax_chunks * max_chunk_tiles),
        # running max / sum / output in two sets used in turn (each read whole, then written whole)
        (10, "max_a", im, im_page, q_tiles),
        (11, "max_b", im, im_page, q_tiles),
        (12, "sum_a", im, im_page, q_tiles),
        (13, "sum_b", im, im_page, q_tiles),
        (14, "acc_a", im, im_page, q_tiles * dv_tiles),
        (15, "acc_b", im, im_page, q_tiles * dv_tiles),
        (16, "alpha", im, im_page, 2),  # rescale factors (two in a merge), 1/l
        (18, "partial_in", im, im_page, recv if tree else 1),  # children's partials land here
        (19, "out", bf16, 2048, q_tiles * dv_tiles),
        (20, "lse", f32, 4096, q_tiles),
        (21, "staging", f32, -(-staging // 32) * 32, 1),  # writer scratch
    ]
    if not mla:
        # two slots of key tile rows: dv_tiles V tiles, then a tile of ones (the row sum's in1, V's format)
        specs.append((2, "v", kv_dtype, kv_tile, max(2, softmax_chunks) * max_chunk_tiles * (dv_tiles + 1)))
    if tree:
        specs.append((17, "partial_out", im, im_page, (dv_tiles + 2) if merge_slot else partial))  # this piece's partial, to the parent
    if max_blocks:
        # one user's int32 page-table row (reader scratch), 32 B aligned like any DRAM read target; bank-local:
        # two (the next piece's user's row is counted while the current one's is walked)
        specs.append((23, "page_table", f32, -(-4 * max_blocks // 32) * 32, 2 if piece_views else 1))
    if attention_sink:
        specs.append((24, "sink", bf16, 2048, q_tiles))  # the group's sink logits in column 0
    if prescale_q:
        specs.append((22, "q_scaled", bf16, 2048, q_tiles * d_tiles))  # the piece's Q x scale (exact)
    if piece_views:
        # bank-local: the views of the core's pieces (which key tiles each owns), built by the reader
        view_page = max(32, -(-4 * VIEW_WORDS * piece_views // 32) * 32)
        specs.append((26, "view_compute", f32, view_page, 1))
        specs.append((27, "view_writer", f32, view_page, 1))
        if softmax_chunks > 1:
            # the reader's key tiles of a softmax block's chunks, listed with its K reads, kept for its V reads
            specs.append((28, "keys", f32, -(-4 * softmax_chunks * max_chunk_tiles // 32) * 32, 1))
    if attn_mask:
        # the group's mask rows of a chunk's keys, double-buffered like K (one whole slot per chunk)
        specs.append((25, "attn_mask", bf16, 2048, 2 * q_tiles * max_chunk_tiles))
    if q_tile_rows not in (8, 16, 32) or (q_tile_rows != 32 and q_tiles != 1):
        raise PlanError(f"q_tile_rows: expected 32, or 16 or 8 with one q tile row (q_tiles 1), got {q_tile_rows} "
                        f"with q_tiles {q_tiles}")
    return tuple(CBSpec(i, n, f, p * q_tile_rows // 32 if n in QROW_CBS else p, k,
                        q_tile_rows if n in QROW_CBS else 32) for i, n, f, p, k in sorted(specs))


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


def size_buffers(*, rows: QRows, split: Split, head_dim: int, head_dim_v: int, kv_dtype: DataType, batch: int,
                 seq_len: int, block_size: int | None, attention_sink, mla: bool, attn_mask_batch: int, window: int,
                 num_tokens: int, prescale_q: bool, fp32_dest_acc_en: bool, recv_areas: dict[CoreCoord, int],
                 core_pieces: dict[CoreCoord, tuple[Piece, ...]], l1_bytes_per_core: int, bank_local: bool = False,
                 merge_slot: bool = False, softmax_chunks: int = 1) -> tuple[dict, tuple[CBSpec, ...]]:
    """Decides the circular buffers (flash_decode_cbs; the same on every core, sized for the busiest):
    scratch areas for the most partials any core receives, the chunk slots for the largest chunk, and a
    second Q slot (prefetch) when a core runs several pieces, dropped if it alone would overflow
    `l1_bytes_per_core` (bytes). `merge_slot`: the bounded merge's partial buffers (flash_decode_cbs). Returns (flash_decode_cbs' arguments, for the resource check's advice;
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
        piece_views=max((len(v) for v in core_pieces.values()), default=0) if bank_local else 0,
        merge_slot=merge_slot, softmax_chunks=softmax_chunks,
    )
    if cb_args["q_slots"] == 2 and cbs_bytes_per_core(flash_decode_cbs(**cb_args)) > l1_bytes_per_core:
        cb_args["q_slots"] = 1  # the second Q slot is a prefetch: dropped before the plan would not fit
    return cb_args, flash_decode_cbs(**cb_args)
