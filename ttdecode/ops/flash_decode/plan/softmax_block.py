"""make_plan's softmax-block step (`choose_softmax_chunks`): how many read chunks share one online-softmax
update (DecodePlan.softmax_chunks; kernels/flash_decode/online_softmax.hpp process_block). A block pays the
chunk's fixed softmax work (the row max reduction, alpha, the rescale of the running set and their
configuration calls; perf_model.op_counts.chunk_ops) once for all its chunks, at the cost of a slot of scores
and a V slot per chunk (plan/buffers.py flash_decode_cbs). Chunks in key tiles, sizes in bytes."""

from __future__ import annotations

from typing import Callable

from ttdecode.ops.flash_decode.plan.types import PlanError, Split

__all__ = ["SOFTMAX_CHUNKS_MAX", "choose_softmax_chunks", "softmax_block_refusal", "planned_softmax_chunks",
           "block_sizes"]

#: The most chunks the planner puts in one softmax block (a piece of the Llama-70B T3K point reads 4 at an
#: even split, up to 6 with a random page table).
SOFTMAX_CHUNKS_MAX = 8
#: A bank-local piece may read more than the even split's tiles (a random page table loads some banks more):
#: the planner's block covers this many times the even split's chunks.
PIECE_HEADROOM = 2


def softmax_block_refusal(*, bank_local: bool, fp32_dest_acc_en: bool, q_tiles: int, mla: bool,
                          attn_mask_batch: int) -> str | None:
    """Why a plan cannot take softmax blocks of more than one chunk, or None: the kernels' block runs on
    bank-local plans (kv_pages "key_row" with a paged cache) with one q tile row, V in its own slot, no
    attn_mask and an fp32 DST (online_softmax.hpp's static_assert; the other layouts keep their outputs)."""
    if not bank_local:
        return "softmax_chunks > 1 needs a bank-local plan (kv_pages 'key_row' with a paged cache)"
    if not fp32_dest_acc_en:
        return "softmax_chunks > 1 needs fp32_dest_acc_en"
    if q_tiles != 1:
        return f"softmax_chunks > 1 needs one q tile row (T x group size <= 32), got {q_tiles}"
    if mla:
        return "softmax_chunks > 1 needs a V tensor (not MLA)"
    if attn_mask_batch:
        return "softmax_chunks > 1 does not take an attn_mask"
    return None


def planned_softmax_chunks(seq_tiles: int, pieces: int, chunk_tiles: int) -> int:
    """The planner's softmax block before the L1 check: as many chunks of `chunk_tiles` as the largest piece reads
    (PIECE_HEADROOM times a piece's tiles at the even split of `seq_tiles` over `pieces`), at most
    SOFTMAX_CHUNKS_MAX; 1 when that is one chunk."""
    piece_tiles = PIECE_HEADROOM * -(-seq_tiles // max(1, pieces))
    return max(1, min(SOFTMAX_CHUNKS_MAX, -(-piece_tiles // max(1, chunk_tiles))))


def choose_softmax_chunks(*, asked: int | None, refusal: str | None, split: Split, fits: Callable[[int], bool]) -> int:
    """Chunks per softmax block. `asked` (make_plan's softmax_chunks) is used as given: refused with
    `refusal` (softmax_block_refusal) above 1, or when `fits(asked)` (the plan's buffers with it fit L1) is
    False. None = the planner's: 1 where `refusal` says so; else, of 1, the powers of two below
    planned_softmax_chunks (as many chunks as the largest piece reads) and that count, the block that fits L1
    and that the model prices shortest (split.block_cycles: the kernels' pipeline timed event by event, the
    longer of a sequential and a random page table), ties to fewer chunks. A block's exps wait for its last K slot and its V slots hold the reader's next block back
    (perf_model/pipeline.py), so a block pays only where its saved fixed work outweighs the lost overlap."""
    if asked is not None:
        if asked < 1:
            raise PlanError(f"softmax_chunks: expected at least 1, got {asked}")
        if asked > 1 and refusal is not None:
            raise PlanError(refusal)
        if asked > 1 and not fits(asked):
            raise PlanError(f"softmax_chunks {asked}: its scores and V slots overflow L1; ask fewer")
        return asked
    if refusal is not None or split.block_cycles is None:
        return 1
    sizes = block_sizes(split.seq_tiles, split.pieces, split.max_chunk_tiles)
    return min((b for b in sizes if b == 1 or fits(b)), key=lambda b: (split.block_cycles(b), b))


def block_sizes(seq_tiles: int, pieces: int, chunk_tiles: int) -> tuple[int, ...]:
    """The softmax blocks the planner weighs, in chunks: 1, the powers of two below planned_softmax_chunks and that
    count."""
    chunks = planned_softmax_chunks(seq_tiles, pieces, chunk_tiles)
    return tuple(sorted({1, chunks} | {1 << k for k in range(chunks.bit_length()) if 1 << k <= chunks}))
