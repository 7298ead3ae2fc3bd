"""One core's reader and compute kernel as a two-stage pipeline over its pieces' chunks, timed event by
event from the order the FlashDecode kernels keep (kernels/flash_decode/reader.cpp, online_softmax.hpp).

The reader reads each piece's Q, then per softmax block the K slot of each of its chunks and then their V
slots (one chunk per update: K then V per chunk), one barrier each, and waits for a free slot first: cb_k
holds 2 K slots, cb_v `v_slots` V slots (plan/buffers.py: a softmax block's, at least 2). The compute
kernel, per softmax block of `softmax_chunks` chunks:

* one chunk per update (`softmax_chunks` 1, process_chunk): waits for the chunk's K, its scores, the
  max, exp and probabilities (`post`), waits for its V, P.V and the row sum (`pv`); pops K and V after;
* a block (process_block): per chunk waits for its K, its scores, pops K; then the block's max, alpha
  and probabilities; waits for every V of the block, P.V over the whole block; pops the block's V.

So a block's exps start once its last K slot has landed (before its V slots: the reader reads them
after), and the next block's V reads wait for this block's P.V. `pipeline_cycles` replaces ``max(reader, compute) + min / stages`` for works that say
their chunks (CoreWork.pipeline)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PiecePipe", "pipeline_cycles"]


@dataclass(frozen=True)
class PiecePipe:
    """One piece on a core, in cycles: `chunk_tiles` its chunks' key tiles in reading order; per key tile the
    compute's `scores_per_tile` (Q.K^T, scale, the scores' pack) and `pv_per_tile` (P.V, the row sum); the
    rest of the piece's compute, `post`, spread over its blocks by their key tiles (max, exps, copies, the
    probabilities, the running set's rescales). `softmax_chunks` chunks per update, `v_slots` V slots
    in cb_v."""

    chunk_tiles: tuple[int, ...]
    softmax_chunks: int
    v_slots: int
    scores_per_tile: float
    pv_per_tile: float
    post: float

    @property
    def tiles(self) -> int:
        return sum(self.chunk_tiles)


def pipeline_cycles(pieces: tuple[PiecePipe, ...], q_reads: list[float], k_reads: list[list[float]],
                    v_reads: list[list[float]], compute_startup: float) -> float:
    """Cycles from the core's first read to its last compute op for `pieces` in order (the reader may run
    one piece ahead: two Q slots). `q_reads[p]`, `k_reads[p][j]`, `v_reads[p][j]`: the cycles of piece p's
    Q read and of chunk j's K and V slot reads."""
    reader = 0.0
    comp = compute_startup
    k_pops: list[float] = []  # per chunk over the core's pieces, when its K slot is freed (cb_k: 2 slots)
    v_pops: list[float] = []
    for p, piece in enumerate(pieces):
        reader += q_reads[p]
        q_ready = reader
        block = max(1, piece.softmax_chunks)
        tiles = max(1, piece.tiles)
        chunks = list(piece.chunk_tiles)
        for b0 in range(0, len(chunks), block):
            ids = range(b0, min(b0 + block, len(chunks)))
            for j in ids:  # the block's K slots (one chunk per update: the chunk's)
                n = len(k_pops)
                reader = max(reader, k_pops[n - 2] if n >= 2 else 0.0) + k_reads[p][j]
                comp = max(comp, reader, q_ready) + chunks[j] * piece.scores_per_tile
                if block > 1:
                    k_pops.append(comp)  # a block frees each K slot once its scores are out
            for j in ids:  # then its V slots, each once the slot's earlier block has done its P.V
                n = len(v_pops) + j - b0
                reader = max(reader, v_pops[n - piece.v_slots] if n >= piece.v_slots else 0.0) + v_reads[p][j]
            span = sum(chunks[j] for j in ids)
            comp = max(comp + piece.post * span / tiles, reader) + span * piece.pv_per_tile
            if block == 1:
                k_pops.append(comp)  # one chunk per update frees its K slot at its end
            v_pops.extend([comp] * len(ids))
    return max(reader, comp)
