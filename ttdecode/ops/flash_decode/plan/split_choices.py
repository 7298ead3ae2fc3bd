"""The split's choices: what the cost model's prices make the planner take for a shape (the model prices a
candidate through `ttdecode.perf_model.pricing`; the planner decides here).

- `split_floor_tiles`: the split floor of dynamic chunks (the fewest key tiles a piece is worth its tree round);
- `tile_pieces`: pieces per (user, KV head) of tile pages with dynamic chunks;
- `key_row_pieces`: pieces per (user, KV head) of key_row pages (a multiple of 12);
- `bank_local_pieces`: pieces per (user, KV head) of the bank-local split (1 to 4 readers per bank);
- `chunk_cap`: the cap of dynamic chunks and its pieces;
- `split_costs`: the prices of one key tile, one chunk and one tree round they weigh (also key_row_deal's).

Each depends on the config and the cache's length only (bank_local_pieces also on the batch size), never on
the users' positions or data (batch invariance). Cycles of
the model's 1 GHz clock; sizes in key tiles (32 keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ttdecode.core.split import cyclic_pieces, dynamic_chunk_tiles, tree_rounds
from ttdecode.perf_model.constants import COST, CostConstants
from ttdecode.perf_model.pricing import (bank_local_floor_cycles, bank_local_step_cycles, chunk_cycles,
                                         core_reader_cycles, interleaved_floor_cycles, key_tile_cycles, round_cycles)

__all__ = ["SplitCosts", "split_costs", "piece_chunks", "tile_paged_busiest", "split_floor_tiles", "key_row_pieces",
           "bank_local_pieces", "tile_pieces", "chunk_cap"]


@dataclass(frozen=True)
class SplitCosts:
    """The closed-form prices the split's choices weigh (key_row_pieces, tile_pieces), in cycles."""

    tile: float   # one more key tile of a running chunk (chunk_tile_ops)
    chunk: float  # a running chunk's fixed work (chunk_ops)
    round: float  # one tree round (pricing.round_cycles)
    margin: float  # 1 + split_compute_margin

    def piece(self, tiles: int, chunk_tiles: int, fixed_chunk: bool = False) -> float:
        """A piece of `tiles` key tiles, with the compute margin, in chunks of `chunk_tiles` (`fixed_chunk`)
        or in the plan's dynamic chunks capped at `chunk_tiles` (core.split.dynamic_chunk_tiles)."""
        return (tiles * self.tile + piece_chunks(tiles, chunk_tiles, fixed_chunk) * self.chunk) * self.margin


def piece_chunks(tiles: int, chunk_tiles: int, fixed_chunk: bool = False) -> int:
    """Chunks of a piece of `tiles` key tiles: fixed chunks of `chunk_tiles`, or dynamic chunks capped
    at `chunk_tiles` (core.split.dynamic_chunk_tiles of the piece's length)."""

    chunk = chunk_tiles if fixed_chunk else dynamic_chunk_tiles(max(1, tiles), 1, chunk_tiles)
    return -(-tiles // chunk)


def tile_paged_busiest(num_kv_heads: int, cores: int, seq_tiles: int, pieces: int, floor_tiles: int,
                       chunk_cap: int) -> tuple[int, int, int, int]:
    """The busiest core of ONE user's interleaved split (core.split.piece_range): (the pieces that get keys, the
    pieces on the busiest core, their dynamic chunk, the most key tiles one of them holds: pieces deal
    whole chunks, so the first pieces take one chunk more)."""

    used = min(pieces, max(1, seq_tiles // max(1, floor_tiles)))
    busiest = -(-(num_kv_heads * used) // max(1, cores))
    chunk = dynamic_chunk_tiles(-(-seq_tiles // used), floor_tiles, chunk_cap)
    n = min(seq_tiles, -(-(-(-seq_tiles // chunk)) // used) * chunk)
    return used, busiest, chunk, n


def split_costs(q_tiles: int, d_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool = True, dst_tiles: int = 4,
                fidelity: str = "HiFi2", head_rows: int = 32, prescale_q: bool = False, q_tile_rows: int = 32,
                mla: bool = False, kv_tile_bytes: int = 1088, hops: int = 8, exp_approx: bool = False,
                c: CostConstants = COST) -> SplitCosts:
    """The closed-form prices of one key tile, one chunk's fixed work and one tree round at a shape (cycles),
    as the split's choices weigh them (the model's pricing; `exp_approx`: the softmax's exp mode, as every
    choice below takes it); placement.key_row_deal weighs pieces with them."""
    return SplitCosts(
        tile=key_tile_cycles(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, c, head_rows, True,
                             prescale_q, q_tile_rows, mla, kv_tile_bytes, exp_approx),
        chunk=chunk_cycles(q_tiles, dv_tiles, fp32_dest_acc_en, fidelity, c, head_rows, q_tile_rows, mla, exp_approx),
        round=round_cycles(q_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, hops, c, head_rows, q_tile_rows,
                           exp_approx),
        margin=1 + c.split_compute_margin)


def split_floor_tiles(q_tiles: int, d_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool = True, dst_tiles: int = 4,
                      fidelity: str = "HiFi2", hops: int = 8, c: CostConstants = COST,
                      head_rows: int = 32, prescale_q: bool = False, q_tile_rows: int = 32, mla: bool = False,
                      kv_tile_bytes: int = 1088, exp_approx: bool = False) -> int:
    """The split floor of dynamic chunks (DecodePlan.min_chunk_tiles): the smallest power of two
    `f` <= 8 with f x (cycles of one key tile) >= one tree round (the partial's message, the
    semaphore handshake and a merge). Halving a piece of 2f tiles saves f tiles of local work and
    costs one round, so pieces below f tiles are not worth their round. Depends on the config only
    (batch invariant). `fidelity`: the call's (make_plan's math_fidelity; HiFi2, tt-metal's and
    Llama's default, when none is given); `hops` a typical parent-child distance on the grid;
    `kv_tile_bytes` a K/V tile's bytes (bfloat8_b's by default)."""
    # a piece of f <= 8 tiles is one chunk with no running set
    tile = key_tile_cycles(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, c, head_rows, False,
                           prescale_q, q_tile_rows, mla, kv_tile_bytes, exp_approx)
    round_ = round_cycles(q_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, hops, c, head_rows, q_tile_rows,
                          exp_approx)
    f = 1
    while f < 8 and f * tile < round_:
        f *= 2
    return f


def key_row_pieces(num_kv_heads: int, cores: int, max_pieces: int, seq_tiles: int, q_tiles: int, d_tiles: int,
                   dv_tiles: int, kv_tile_bytes: int, kv_tiles_per_key_tile: int, chunk_tiles: int = 8,
                   fixed_chunk: bool = False, fp32_dest_acc_en: bool = True,
                   dst_tiles: int = 4, fidelity: str = "HiFi2", hops: int = 8, head_rows: int = 32,
                   prescale_q: bool = False, q_tile_rows: int = 32, mla: bool = False, exp_approx: bool = False,
                   c: CostConstants = COST) -> int:
    """Pieces per (user, KV head) of kv_pages "key_row" (DecodePlan.pieces_per_work): the multiple of
    12 up to `max_pieces` that the model gives the shortest step for ONE user at the cache's length
    (`seq_tiles` key tiles), ties to fewer pieces. Its terms, in cycles:
    - the busiest core's compute: the bank's pieces (num_kv_heads x p / 12) dealt over its
      cores // 12 cores, ceil(T / p) key tiles each (chunk_tile_ops) in the plan's dynamic chunks
      capped at `chunk_tiles` (chunk_ops each; `fixed_chunk`: chunks of `chunk_tiles`), with the
      split's compute margin (split_compute_margin);
    - the bank floor: the user's K/V bytes over 12 banks at the bank-local rate;
    - the tree: tree_rounds(p) rounds (message, handshake, merge).
    The step is the slower of the first two plus the third; on a tie (the floor binds, the same
    rounds) the smaller compute, i.e. the slack under the floor. More pieces shorten the compute only
    until one user's pieces cover the cores; past that they add rounds. Depends on the config and the
    cache's length, never on the batch (batch invariance)."""

    banks = c.dram_banks
    per_bank_cores = max(1, cores // banks)
    costs = split_costs(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, head_rows, prescale_q,
                        q_tile_rows, mla, kv_tile_bytes, hops, exp_approx, c)
    floor = bank_local_floor_cycles(num_kv_heads * seq_tiles * kv_tiles_per_key_tile * kv_tile_bytes, c)
    best: tuple[tuple[float, float], int] | None = None
    for p in range(banks, max_pieces + 1, banks):
        busiest = -(-(num_kv_heads * p) // (banks * per_bank_cores))
        compute = busiest * costs.piece(-(-seq_tiles // p), chunk_tiles, fixed_chunk)
        key = (max(compute, floor) + tree_rounds(p) * costs.round, compute)
        if best is None or key < best[0]:
            best = (key, p)
    if best is None:
        raise ValueError(f"key_row_pieces: max_pieces: expected at least {banks}, got {max_pieces}")
    return best[1]


def bank_local_pieces(*, reach: int, most: int, readers_per_bank: int, batch: int, num_q_heads: int,
                      num_kv_heads: int, head_dim: int, block_size: int, seq_len: int, grid: tuple[int, int],
                      dram_banks: int, kv_tile_bytes: int, q_tiles: int, head_rows: int, q_tile_rows: int,
                      dst_tiles: int, prescale_q: bool, fp32_dest_acc_en: bool, fidelity: str, chunk_cap: int,
                      floor_tiles: int, fixed_chunk_tiles: int, exp_approx: bool = False,
                      c: CostConstants = COST) -> int:
    """Pieces per (user, KV head) of the bank-local split: of P = min(s x `reach`, `most`) for s = 1 ..
    `readers_per_bank` readers per bank, or P a divisor of `reach` (each piece over reach / P banks, which
    suits batches that fill the grid with fewer, longer pieces), the one the model prices shortest
    (pricing.bank_local_step_cycles: the batch at the cache's length over a sequential page table, one chunk per
    softmax update), ties to fewer pieces. Depends on the config, the shape and the batch size only."""
    best: tuple[float, int] | None = None
    per_bank = {min(s * reach, most) for s in range(1, readers_per_bank + 1)}
    grouped = {p for p in range(1, min(reach, most + 1)) if reach % p == 0}
    for p in sorted(per_bank | grouped):
        cycles = bank_local_step_cycles(
            batch=batch, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
            block_size=block_size, seq_len=seq_len, pieces=p, grid=grid, dram_banks=dram_banks,
            kv_tile_bytes=kv_tile_bytes, q_tiles=q_tiles, head_rows=head_rows, q_tile_rows=q_tile_rows,
            dst_tiles=dst_tiles, prescale_q=prescale_q, fp32_dest_acc_en=fp32_dest_acc_en, fidelity=fidelity,
            chunk_cap=chunk_cap, floor_tiles=floor_tiles, fixed_chunk_tiles=fixed_chunk_tiles,
            exp_approx=exp_approx, c=c)
        if best is None or cycles < best[0]:
            best = (cycles, p)
    assert best is not None
    return best[1]


def tile_pieces(num_kv_heads: int, cores: int, max_pieces: int, seq_tiles: int, floor_tiles: int, q_tiles: int,
                d_tiles: int, dv_tiles: int, kv_tile_bytes: int, kv_tiles_per_key_tile: int, chunk_tiles: int = 8,
                fp32_dest_acc_en: bool = True, dst_tiles: int = 4, fidelity: str = "HiFi2", hops: int = 8,
                head_rows: int = 32, prescale_q: bool = False, q_tile_rows: int = 32, mla: bool = False,
                exp_approx: bool = False, c: CostConstants = COST) -> int:
    """Pieces per (user, KV head) of interleaved (tile-paged) caches with dynamic chunks
    (DecodePlan.pieces_per_work): the count up to `max_pieces` that the model gives the shortest step
    for ONE user at the cache's length (`seq_tiles` key tiles), ties to the smaller compute, then to
    fewer pieces. Of p pieces, min(p, T // floor_tiles) get keys (the split floor); the terms, in cycles:
    - the busiest core's compute: ceil(num_kv_heads x p / cores) pieces of the most key tiles a piece
      takes (chunk_tile_ops; pieces deal whole chunks, the plan's dynamic chunks capped at `chunk_tiles`,
      so the first pieces take one chunk more), chunk_ops per chunk, with the split's compute margin
      (split_compute_margin);
    - its reader: those pieces' K/V at the per-core plateau, one DRAM latency per chunk;
    - the DRAM floor: the user's K/V over the 12 banks at the (fitted) interleaved efficiency;
    - the tree: tree_rounds(used) rounds (message, handshake, merge).
    The busiest core takes evaluate's overlap of its reader (no faster than the DRAM floor) and its
    compute: max(reader, compute) + min(reader, compute) / stages (two read barriers a chunk, K and V;
    one with MLA), as chunk_cap weighs it; the step adds the tree. Depends on the config and the cache's
    length, never on the batch (batch invariance)."""

    costs = split_costs(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, head_rows, prescale_q,
                        q_tile_rows, mla, kv_tile_bytes, hops, exp_approx, c)
    key_bytes = kv_tiles_per_key_tile * kv_tile_bytes
    floor = interleaved_floor_cycles(num_kv_heads * seq_tiles * key_bytes, c)
    best: tuple[tuple[float, float, int], int] | None = None
    for p in range(1, max_pieces + 1):
        used, busiest, chunk, n = tile_paged_busiest(num_kv_heads, cores, seq_tiles, p, floor_tiles, chunk_tiles)
        compute = busiest * costs.piece(n, chunk, fixed_chunk=True)
        chunks = busiest * -(-n // chunk)
        reader = max(core_reader_cycles(busiest, n, chunks, key_bytes, c), floor)
        core = max(compute, reader) + min(compute, reader) / (chunks * (1 if mla else 2))
        key = (core + tree_rounds(used) * costs.round, compute, p)
        if best is None or key < best[0]:
            best = (key, p)
    if best is None:
        raise ValueError(f"tile_pieces: max_pieces: expected at least 1, got {max_pieces}")
    return best[1]


def chunk_cap(num_kv_heads: int, cores: int, seq_tiles: int, floor_tiles: int, options: Sequence[tuple[int, int]],
              q_tiles: int, d_tiles: int, dv_tiles: int, kv_tile_bytes: int, kv_tiles_per_key_tile: int,
              cyclic: bool = False, stages_per_chunk: int = 2, fp32_dest_acc_en: bool = True, dst_tiles: int = 4,
              fidelity: str = "HiFi2", hops: int = 8, head_rows: int = 32, prescale_q: bool = False,
              q_tile_rows: int = 32, mla: bool = False, exp_approx: bool = False,
              c: CostConstants = COST) -> tuple[int, int]:
    """The cap of dynamic chunks and its pieces per (user, KV head) (DecodePlan.chunk_cap, pieces_per_work)
    out of `options` ((cap, pieces) pairs: the caps whose buffers fit L1, each with the split the model
    takes for it): the pair that gives ONE user at the cache's length (`seq_tiles` key tiles, split floor
    `floor_tiles`) the shortest modelled step, ties to the smaller cap. Larger chunks save a chunk's fixed
    work (chunk_ops: the row max reduction, alpha, the rescales) per chunk they merge, but the first
    chunk's read (or the last one's compute) overlaps nothing: the busiest core takes evaluate's
    max(reader, compute) + min(reader, compute) / stages (`stages_per_chunk` read barriers a chunk: K and
    V each have theirs, 1 with MLA), its reader no faster than the DRAM floor (bank-local for the cyclic
    split of key_row pages, else the fitted interleaved rate); the tree adds its rounds. Depends on the
    config and the cache's length, never on the batch (batch invariance)."""

    costs = split_costs(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, head_rows, prescale_q,
                        q_tile_rows, mla, kv_tile_bytes, hops, exp_approx, c)
    key_bytes = kv_tiles_per_key_tile * kv_tile_bytes
    user_bytes = num_kv_heads * seq_tiles * key_bytes
    banks = c.dram_banks
    best: tuple[float, int, int] | None = None
    for cap, pieces in sorted(options):
        if cyclic:  # every piece takes every used-th key tile: ceil(T / used) each
            used = cyclic_pieces(seq_tiles, 0, pieces, floor_tiles, banks)
            busiest = -(-(num_kv_heads * used) // (banks * max(1, cores // banks)))
            chunk = dynamic_chunk_tiles(-(-seq_tiles // used), floor_tiles, cap)
            n = -(-seq_tiles // used)
            floor = bank_local_floor_cycles(user_bytes, c)
        else:
            used, busiest, chunk, n = tile_paged_busiest(num_kv_heads, cores, seq_tiles, pieces, floor_tiles, cap)
            floor = interleaved_floor_cycles(user_bytes, c)
        chunks = busiest * -(-n // chunk)
        compute = busiest * n * costs.tile + chunks * costs.chunk
        reader = max(floor, core_reader_cycles(busiest, n, chunks, key_bytes, c))
        t = max(reader, compute) + min(reader, compute) / (chunks * stages_per_chunk) + tree_rounds(used) * costs.round
        if best is None or t < best[0]:
            best = (t, cap, pieces)
    if best is None:
        raise ValueError("chunk_cap: options: expected at least one (cap, pieces) pair")
    return best[1], best[2]
