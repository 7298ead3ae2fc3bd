"""The bank-local paged layout priced in closed form: a paged K/V pool whose key-tile rows (one DRAM page
each, the Dt tiles of 32 positions of one (block, KV head)) are dealt round robin over the DRAM banks, every
piece of a (user, KV head) reading its own banks.

Page k = (block * NKV + h) * bt + r of the pool (bt = block_size / 32, r the row inside the block) lives in
bank k % NB, so logical key tile t of head h of a user with page-table row pt sits in bank
(pt[t // bt] * NKV * bt + h * bt + t % bt) % NB (`tile_banks`). With g = gcd(NKV * bt, NB) head h reaches
the banks R_h = {(h * bt + r + g * k) % NB} (core.split.bank_local_banks): Llama-8B (NKV 8) block 32:
3 banks, block 64: 6, block 128: 12; one KV head: 12. Of P pieces (up to 4 |R_h|), used = min(P,
max(1, T // floor), |L| x min c_b) get keys (L: the banks of R_h holding attended tiles, ascending, c_b
tiles each); piece i < used owns the banks L[j] with j % used == i, or with used > |L| (G = gcd(used, |L|)
groups of banks) reads every subs-th tile (subs = used // G) of the banks L[j] with j % G == i % G
(`piece_ownership`: core.split.bank_local_view's rule, from bank counts). Blocks of 16 positions (a padded
key-tile row a page, page block * NKV + h): key tile t is owned by the bank of its first half (entry 2t of the
row; the split counts the even entries as blocks of one key tile), half its bytes there and half in the bank of
its second half (entry 2t + 1; `piece_bank_bytes`); a piece reading a second half outside its own banks is
priced as not bank-local (an ASSUMED price, as a spread piece reading beyond its banks). A piece's time
follows its own tile count n_i, so a page table that crowds a head's tiles into few banks costs max(n_i) /
mean(n_i) (`piece_imbalance`).

`paged_work` writes a step down as `CoreWork`s from a concrete page table (every user's row): per piece its
chunks' compute (`op_counts` closed forms), its reads (a K and a V read group per chunk; the piece's lazy
walk over the page-table row on the issue side), its bytes per bank; per core the reader's pass over
each of its users' page-table rows (`CostConstants.page_table_pass_entry_cycles`, an ESTIMATE): another user's
row guarded whole and counted up to its settled prefix before the first reads, the rest counted beside the reads
of the piece before it; the first piece's user's row counted up to its settled prefix and the entries of that
piece's first chunks checked before the first reads, the guard of the whole row and the count past the prefix
while those chunks land (`_setup_cycles`); the
merge trees over each (user, KV head)'s pieces. `evaluate_paged` prices it with every bank shared fairly
by its readers (`evaluator.shared_bank_floors` at a bank's bank-local rate, DRAMTile's 265.5 / 12 GB/s):
the slowest piece, its core and its tree bound the step. All figures are MODEL ESTIMATES.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

import numpy as np

from ttdecode.core.noc_geometry import dram_return_hops, noc_hops
from ttdecode.core.program_description import CoreCoord
from ttdecode.core.split import (TILE, bank_local_banks, dynamic_chunk_tiles, split_block_tiles, split_blocks,
                                 tree_children, valid_tiles)
from ttdecode.perf_model.constants import COST, CostConstants
from ttdecode.perf_model.evaluator import (Breakdown, CoreWork, OpTally, Reduction, Tree, evaluate, shared_bank_floors,
                                           sum_ops)
from ttdecode.perf_model.pipeline import PiecePipe
from ttdecode.perf_model.op_counts import (chunk_ops, chunk_tile_ops, intermediate_bytes, merge_ops,
                                            softmax_exp)

__all__ = ["PagedShape", "PieceCompute", "PieceOwnership", "tile_banks", "bank_counts",
           "piece_ownership", "piece_bank_bytes", "sequential_page_table", "random_page_table", "piece_imbalance",
           "bank_cores", "paged_work", "bank_rate", "evaluate_paged"]


@dataclass(frozen=True)
class PagedShape:
    """One decode step on a bank-local paged pool: `cur_pos` per user (-1: skipped), blocks of `block_size`
    keys, `dram_banks` banks (12 on Wormhole), the op's `grid` of cores, K/V tiles of `kv_tile_bytes`."""

    batch: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    cur_pos: tuple[int, ...]
    grid: tuple[int, int] = (8, 8)
    dram_banks: int = 12
    kv_tile_bytes: int = 1088  # bfloat8_b

    @property
    def block_tiles(self) -> int:
        """Key tiles of a block as the split counts them (core.split.split_block_tiles: 1 for block 16)."""
        return split_block_tiles(self.block_size)

    @property
    def block_entries(self) -> int:
        """Page-table entries of a block as the split counts them: 1, or 2 for block 16 (the row's even entries
        own the key tiles, core.split.split_blocks)."""
        return 2 if self.block_size < TILE else 1

    @property
    def d_tiles(self) -> int:
        return self.head_dim // TILE

    def entries(self, user: int) -> int:
        """Page-table entries the user's attended keys span (0 for a skipped user)."""
        pos = self.cur_pos[user]
        return 0 if pos < 0 else pos // self.block_size + 1


@dataclass(frozen=True)
class PieceCompute:
    """The plan's fields the closed forms take (a DecodePlan's q_tiles, dst_tiles, q_tile_rows, prescale_q,
    chunk_cap, min_chunk_tiles, fixed_chunk_tiles; head_rows = min(q heads per KV head, 32)) and the
    compute config."""

    q_tiles: int = 1
    head_rows: int = 32
    q_tile_rows: int = 32
    dst_tiles: int = 4
    prescale_q: bool = False
    fp32_dest_acc_en: bool = True
    exp_approx: bool = False
    fidelity: str = "HiFi2"
    chunk_cap: int = 8
    floor_tiles: int = 1
    fixed_chunk_tiles: int = 0
    softmax_chunks: int = 1  # read chunks per online-softmax update (DecodePlan.softmax_chunks)
    spread_banks: bool = False  # pieces take turns over every bank held (DecodePlan.spread_banks)

    @property
    def exp(self) -> str:
        return softmax_exp(self.fp32_dest_acc_en, self.exp_approx)

    @property
    def floor(self) -> int:
        """The fewest tiles a piece with keys takes: the fixed chunk or the split floor."""
        return self.fixed_chunk_tiles if self.fixed_chunk_tiles > 0 else self.floor_tiles


@dataclass(frozen=True)
class PieceOwnership:
    """One (user, KV head)'s split: `used` pieces get keys; per piece its banks, the tiles it reads in each
    (`bank_tiles`, parallel to `banks`) and its tile count n_i (`tiles`). Block 16: a tile's first half lies in
    its owner's bank, its second half in the bank of entry 2t + 1; `halves` per piece the (bank, second halves
    read there) pairs (empty for whole-tile blocks)."""

    used: int
    banks: tuple[tuple[int, ...], ...]
    bank_tiles: tuple[tuple[int, ...], ...]
    halves: tuple[tuple[tuple[int, int], ...], ...] = ()

    @property
    def tiles(self) -> tuple[int, ...]:
        return tuple(sum(t) for t in self.bank_tiles)


def tile_banks(pt_row: Sequence[int], first_tile: int, tiles: int, head: int, num_kv_heads: int, block_tiles: int,
               banks: int) -> np.ndarray:
    """The bank of each logical key tile first_tile .. first_tile + tiles - 1 of head `head` (int64 [tiles])."""
    t = np.arange(first_tile, first_tile + tiles, dtype=np.int64)
    blocks = np.asarray(pt_row, dtype=np.int64)[t // block_tiles]
    return (blocks * num_kv_heads * block_tiles + head * block_tiles + t % block_tiles) % banks


def bank_counts(pt_row: Sequence[int], tiles: int, head: int, num_kv_heads: int, block_tiles: int,
                banks: int) -> np.ndarray:
    """counts[b]: attended key tiles 0 .. tiles - 1 of head `head` in bank b (int64 [banks])."""
    return np.bincount(tile_banks(pt_row, 0, tiles, head, num_kv_heads, block_tiles, banks), minlength=banks)


def piece_ownership(counts: np.ndarray, reach: Sequence[int], pieces: int, floor: int,
                    order: Optional[np.ndarray] = None, spread_banks: bool = False,
                    halves: Optional[np.ndarray] = None) -> PieceOwnership:
    """The split of one (user, KV head) over `pieces` pieces from its bank counts (core.split.bank_local_view's
    rule): used = min(P, max(1, T // floor), |L| x min c_b); with used <= |L| piece i < used owns L[j] for
    j % used == i; with used > |L|, in G = gcd(used, |L|) groups, piece i owns L[j] for j % G == i % G as
    sub-piece i // G of subs = used // G, every subs-th of the group's tiles (n_i = ceil((group tiles -
    i // G) / subs)); pieces i >= used are empty. `order`: the banks of the attended tiles in logical order
    (tile_banks), which gives a multi-bank sub-piece's tiles per bank exactly (else split by the banks'
    counts). `spread_banks`: one group of every bank held (G = 1) whatever used. `halves` (block 16, with
    `order`): the bank of each attended tile's second half (-1: not read, past cur_pos), giving each piece's
    PieceOwnership.halves."""
    live = [b for b in reach if counts[b] > 0]
    total = int(sum(int(counts[b]) for b in reach))
    if not total:
        return PieceOwnership(0, tuple(() for _ in range(pieces)), tuple(() for _ in range(pieces)))
    nb = len(live)
    fewest = min(int(counts[b]) for b in live)
    used = min(pieces, max(1, total // max(1, floor)), nb * fewest)
    if used > nb or spread_banks:
        groups = 1 if spread_banks else math.gcd(used, nb)
        subs = used // groups
        banks = tuple(tuple(live[i % groups::groups]) if i < used else () for i in range(pieces))
        shares = tuple(_sub_piece_tiles(counts, bk, i // groups, subs, order) if bk else ()
                       for i, bk in enumerate(banks))
        return PieceOwnership(used, banks, shares, _piece_halves(order, halves, banks, groups, subs))
    banks = tuple(tuple(live[j] for j in range(nb) if j % used == i) if i < used else ()
                  for i in range(pieces))
    return PieceOwnership(used, banks, tuple(tuple(int(counts[b]) for b in bk) for bk in banks),
                          _piece_halves(order, halves, banks, pieces, 1))


def _piece_halves(order: Optional[np.ndarray], halves: Optional[np.ndarray], banks: tuple[tuple[int, ...], ...],
                  groups: int, subs: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per piece the (bank, second halves read there) pairs of its tiles (PieceOwnership.halves): piece i takes
    the tiles of its banks, as sub-piece i // groups every subs-th of them (own banks: groups = the pieces,
    subs 1); () without `halves`."""
    if halves is None or order is None:
        return ()
    out = []
    for i, bk in enumerate(banks):
        mine = halves[np.isin(order, bk)][i // groups::subs] if bk else halves[:0]
        found = np.bincount(mine[mine >= 0]) if mine.size else np.zeros(0, dtype=np.int64)
        out.append(tuple((int(b), int(n)) for b, n in enumerate(found) if n))
    return tuple(out)


def piece_bank_bytes(own: PieceOwnership, i: int, tile_bytes: int) -> dict[int, int]:
    """DRAM bytes piece i of `own` reads per bank, `tile_bytes` per key tile (its K and V): whole tiles in its
    banks, or with block 16 (`own.halves`) half of each in its owner's bank and the second halves' in theirs."""
    out: dict[int, int] = defaultdict(int)
    share = tile_bytes // 2 if own.halves else tile_bytes
    for b, tiles in zip(own.banks[i], own.bank_tiles[i]):
        out[b] += tiles * share
    for b, n in (own.halves[i] if own.halves else ()):
        out[b] += n * share
    return dict(out)


def _sub_piece_tiles(counts: np.ndarray, banks: tuple[int, ...], sub: int, subs: int,
                     order: Optional[np.ndarray]) -> tuple[int, ...]:
    """Tiles per bank of sub-piece `sub` of `subs` over `banks` (the o-th of their tiles, o % subs == sub):
    exact from `order`, else the piece's n_i shared out by the banks' counts."""
    if order is not None:
        mine = order[np.isin(order, banks)][sub::subs]
        return tuple(int(np.count_nonzero(mine == b)) for b in banks)
    group = sum(int(counts[b]) for b in banks)
    n = -(-(group - sub) // subs)
    out = [int(counts[b]) * n // group for b in banks]
    out[0] += n - sum(out)
    return tuple(out)


def sequential_page_table(batch: int, blocks_per_user: int) -> np.ndarray:
    """User b holds blocks b * m .. b * m + m - 1 in order (int64 [batch, m])."""
    return np.arange(batch * blocks_per_user, dtype=np.int64).reshape(batch, blocks_per_user)


def random_page_table(batch: int, blocks_per_user: int, seed: int, num_blocks: Optional[int] = None) -> np.ndarray:
    """Distinct blocks drawn at random from a pool of `num_blocks` (default batch * m) (int64 [batch, m])."""
    n = batch * blocks_per_user if num_blocks is None else num_blocks
    if n < batch * blocks_per_user:
        raise ValueError(f"random_page_table: a pool of {n} blocks cannot hold {batch} x {blocks_per_user}")
    perm = np.random.default_rng(seed).permutation(n)[: batch * blocks_per_user]
    return perm.reshape(batch, blocks_per_user).astype(np.int64)


def _ownerships(s: PagedShape, pc: PieceCompute, page_table: np.ndarray, pieces: Optional[int],
                per_bank: int = 1) -> dict[tuple[int, int], tuple[PieceOwnership, np.ndarray, tuple[int, ...]]]:
    """Per (user, KV head) with keys: its ownership, bank counts and R_h."""
    out = {}
    for user, pos in enumerate(s.cur_pos):
        t = valid_tiles(pos)
        if t == 0:
            continue
        for h in range(s.num_kv_heads):
            reach = bank_local_banks(h, s.num_kv_heads, s.block_tiles, s.dram_banks)
            row = split_blocks(page_table[user], s.block_size)
            order = tile_banks(row, 0, t, h, s.num_kv_heads, s.block_tiles, s.dram_banks)
            counts = np.bincount(order, minlength=s.dram_banks)
            p = per_bank * len(reach) if pieces is None else pieces
            halves = _second_halves(s, page_table[user], pos, h) if s.block_entries == 2 else None
            out[(user, h)] = (piece_ownership(counts, reach, p, pc.floor, order, pc.spread_banks, halves), counts,
                              reach)
    return out


def _second_halves(s: PagedShape, pt_row: Sequence[int], cur_pos: int, head: int) -> np.ndarray:
    """Block 16: the bank of the second half (entry 2t + 1) of each attended key tile t of head `head` of a user
    at cur_pos, -1 where that half holds no attended key (keys 32 t + 16 .. past cur_pos: not read)."""
    tiles = valid_tiles(cur_pos)
    banks = tile_banks(pt_row[1::2], 0, tiles, head, s.num_kv_heads, 1, s.dram_banks)
    if cur_pos % TILE < TILE // 2:
        banks[tiles - 1] = -1
    return banks


def _reads_beyond(own: PieceOwnership, grouped: Optional[PieceOwnership], i: int) -> bool:
    """Does piece i read a bank the own-bank split would not give it: a spread piece's turns beyond its
    own-bank counterpart's banks (a sequential table deals them within), or with block 16 a second half outside
    its own banks (a remote read; priced as not bank-local, an ASSUMED price like the spread piece's)?"""
    if own.halves and not {b for b, _ in own.halves[i]} <= set(own.banks[i]):
        return True
    if grouped is None:
        return False
    return not {b for b, t in zip(own.banks[i], own.bank_tiles[i]) if t} <= set(grouped.banks[i])


def piece_imbalance(s: PagedShape, pc: PieceCompute, page_table: np.ndarray, pieces: Optional[int] = None,
                    per_bank: int = 1) -> tuple[float, float]:
    """(worst, mean) over the (user, KV head)s of max(n_i) / mean(n_i) over the pieces that get keys."""
    owns = _ownerships(s, pc, page_table, pieces, per_bank).values()
    ratios = [max(o.tiles) / (sum(o.tiles) / o.used) for o, _, _ in owns]
    return (max(ratios), float(np.mean(ratios))) if ratios else (1.0, 1.0)


def bank_cores(grid: tuple[int, int], banks: int) -> list[list[CoreCoord]]:
    """Per bank the grid's cores that read it: cores // banks each (at least one; a grid with fewer cores
    than banks shares them round robin), each bank in turn taking the free cores nearest it (NoC 0 hops
    from its DRAM tiles, dram_return_hops)."""
    cores = [CoreCoord(x, y) for y in range(grid[1]) for x in range(grid[0])]
    per = max(1, len(cores) // banks)
    if len(cores) < banks:
        return [[cores[b % len(cores)]] for b in range(banks)]
    free, out = list(cores), []
    for b in range(banks):
        near = sorted(free, key=lambda core: (dram_return_hops(b % 12, core), core.y, core.x))[:per]
        out.append(near)
        free = [core for core in free if core not in near]
    return out


def _scaled(ops: dict[str, list[OpTally]], k: float) -> dict[str, list[OpTally]]:
    """`ops` k times over (tiles, calls, bytes and unpacks scaled)."""
    return {op: [replace(t, tiles=t.tiles * k, calls=t.calls * k,  # type: ignore[arg-type]
                         l1_bytes=None if t.l1_bytes is None else t.l1_bytes * k,
                         unpacks=None if t.unpacks is None else t.unpacks * k) for t in ts]
            for op, ts in ops.items()}


def _add_ops(into: dict[str, list[OpTally]], ops: dict[str, list[OpTally]]) -> None:
    for op, ts in ops.items():
        into.setdefault(op, []).extend(ts)


@functools.lru_cache(maxsize=4096)
def _piece_ops(pc: PieceCompute, d: int, kv_tile: int, n: int, chunk: int) -> dict[str, list[OpTally]]:
    """A piece's compute: its first chunk's tiles without a running set, the rest running, and chunk_ops per
    softmax block after the first (a block of pc.softmax_chunks chunks, one chunk without blocks). A later chunk
    of a block adds only its key tiles: its scores and probabilities passes run under the configuration the
    block's first chunk left (no configuration call, copy or pack of its own; tests/test_bank_paged.py).
    Remembered: the same piece recurs over the users; read, never changed."""
    first = min(n, chunk)
    chunks = -(-n // chunk)
    im = intermediate_bytes(pc.fp32_dest_acc_en)
    args = dict(dst_tiles=pc.dst_tiles, exp=pc.exp, head_rows=pc.head_rows, prescale_q=pc.prescale_q,
                q_tile_rows=pc.q_tile_rows, kv_tile_bytes=kv_tile, im_bytes=im)
    ops: dict[str, list[OpTally]] = {}
    _add_ops(ops, _scaled(chunk_tile_ops(pc.q_tiles, d, d, running=False, **args), first))  # type: ignore[arg-type]
    if n > first:
        running = chunk_tile_ops(pc.q_tiles, d, d, running=True, **args)  # type: ignore[arg-type]
        _add_ops(ops, _scaled(running, n - first))
        blocks = -(-chunks // max(1, pc.softmax_chunks))
        _add_ops(ops, _scaled(chunk_ops(pc.q_tiles, d, pc.exp, pc.head_rows, pc.q_tile_rows, False, im), blocks - 1))
    return ops


def _piece_pipe(pc: PieceCompute, d: int, kv_tile: int, n: int, chunk: int, c: CostConstants) -> PiecePipe:
    """The piece's compute as the pipeline times it (pipeline.PiecePipe): per key tile the scores (Q.K^T,
    the scale, the scores' pack: one of a tile's two packs) and P.V with the row sum, from a running chunk's
    chunk_tile_ops; the rest of the piece's _piece_ops is `post`. Remembered under COST."""
    if c is COST:
        return _remembered_pipe(pc, d, kv_tile, n, chunk)
    return _pipe(pc, d, kv_tile, n, chunk, c)


@functools.lru_cache(maxsize=4096)
def _remembered_pipe(pc: PieceCompute, d: int, kv_tile: int, n: int, chunk: int) -> PiecePipe:
    return _pipe(pc, d, kv_tile, n, chunk, COST)


def _pipe(pc: PieceCompute, d: int, kv_tile: int, n: int, chunk: int, c: CostConstants) -> PiecePipe:
    im = intermediate_bytes(pc.fp32_dest_acc_en)
    tile = chunk_tile_ops(pc.q_tiles, d, d, dst_tiles=pc.dst_tiles, exp=pc.exp, head_rows=pc.head_rows,
                          running=True, prescale_q=pc.prescale_q, q_tile_rows=pc.q_tile_rows, kv_tile_bytes=kv_tile,
                          im_bytes=im)
    qk, pv = tile["matmul"]
    scores = {"matmul": [qk], "scalar": tile["scalar"], "pack": [replace(t, tiles=t.tiles / 2, calls=t.calls // 2,
                                                                         l1_bytes=(t.l1_bytes or 0) / 2)
                                                              for t in tile["pack"]]}
    per_scores = sum(sum_ops(scores, pc.fidelity, c).values())
    per_pv = sum(sum_ops({"matmul": [pv]}, pc.fidelity, c).values())
    total = sum(sum_ops(_piece_ops(pc, d, kv_tile, n, chunk), pc.fidelity, c).values())
    tiles = (chunk,) * (n // chunk) + ((n % chunk,) if n % chunk else ())
    return PiecePipe(tiles, max(1, pc.softmax_chunks), max(2, pc.softmax_chunks), per_scores, per_pv,
                     max(0.0, total - n * (per_scores + per_pv)))


def _piece_reads(s: PagedShape, pc: PieceCompute, n: int, chunk: int, entries: int,
                 c: CostConstants) -> list[tuple[int, int]]:
    """A piece's read groups (bytes, requests): its Q, then per chunk its K pages (one request per key-tile
    row) with its share of the lazy walk over the page-table row as requests' worth of issue time, then
    its V pages."""
    d, kv = s.d_tiles, s.kv_tile_bytes
    groups = [(pc.q_tiles * d * 2048, pc.q_tiles * d)]
    chunks = -(-n // chunk)
    walk = entries * c.page_table_walk_entry_cycles / c.dram_request_issue_cycles / chunks
    for j in range(chunks):
        tiles = min(chunk, n - j * chunk)
        groups += [(tiles * d * kv, tiles + round(walk)), (tiles * d * kv, tiles)]
    return groups


class _Placer:
    """Where paged_work's pieces run: a plan's placement when given, else a piece of one bank on the next
    of that bank's cores (bank_cores), a piece over several banks on the core holding the fewest pieces."""

    def __init__(self, grid: tuple[int, int], banks: int,
                 placement: Optional[Mapping[tuple[int, int, int], CoreCoord]]) -> None:
        self.groups = bank_cores(grid, banks)
        self.dealt = [0] * banks
        self.everyone = [core for group in self.groups for core in group]
        self.load: dict[CoreCoord, int] = defaultdict(int, {core: 0 for core in self.everyone})
        self.placement = placement

    def core(self, user: int, head: int, index: int, banks: tuple[int, ...]) -> CoreCoord:
        if self.placement is not None:
            core = self.placement[(user, head, index)]
        elif len(banks) == 1:
            group = self.groups[banks[0]]
            core = group[self.dealt[banks[0]] % len(group)]
            self.dealt[banks[0]] += 1
        else:
            core = min(self.everyone, key=lambda k: self.load[k])
        self.load[core] += 1
        return core


def paged_work(s: PagedShape, pc: PieceCompute, page_table: np.ndarray, pieces: Optional[int] = None,
               c: CostConstants = COST, per_bank: int = 1,
               placement: Optional[Mapping[tuple[int, int, int], CoreCoord]] = None
               ) -> tuple[list[CoreWork], Reduction, dict[str, float]]:
    """(per-core work, the merge trees, counts) of one bank-local paged step whose users' blocks are
    `page_table` ([batch, >= entries]); `pieces`: P per (user, KV head), None = |R_h| x `per_bank` (readers per
    bank). A piece of one bank runs on one of that bank's cores (bank_cores, dealt
    round robin), a piece over several banks (a short context: used < |L|) on the core holding the fewest
    pieces; each core's reader first reads cur_pos with the row its pass takes first, then the other
    users' page-table rows, and passes over them (setup_cycles). `placement`: (user, KV head, piece) -> core, a plan's (DecodePlan.pieces), in place
    of that rule. counts: the most pieces with keys of a (user, KV head), the worst and mean piece
    imbalance, the cores."""
    d, kv, nb = s.d_tiles, s.kv_tile_bytes, s.dram_banks
    placer = _Placer(s.grid, nb, placement)
    works: dict[CoreCoord, CoreWork] = {}
    users: dict[CoreCoord, dict[int, tuple[int, int]]] = defaultdict(dict)  # per core: user -> its first (head, used)
    trees: set[Tree] = set()
    im = intermediate_bytes(pc.fp32_dest_acc_en)
    msg = pc.q_tiles * (d + 2) * 1024 * im * pc.q_tile_rows // 32
    merge = merge_ops(pc.q_tiles, d, pc.exp, pc.head_rows, pc.dst_tiles, pc.q_tile_rows, im)
    owns = _ownerships(s, pc, page_table, pieces, per_bank)
    scattered: set[CoreCoord] = set()  # cores with a spread piece reading beyond its own-bank split's banks
    first: dict[CoreCoord, tuple[int, int, int, int, tuple[int, ...], int]] = {}
    most = 0
    for (user, h), (own, bank_count, reach) in owns.items():
        t = valid_tiles(s.cur_pos[user])
        chunk = pc.fixed_chunk_tiles or dynamic_chunk_tiles(-(-t // own.used), pc.floor_tiles, pc.chunk_cap)
        most = max(most, own.used)
        where: list[CoreCoord] = []
        # a spread split's own-bank counterpart: the banks its pieces may read and stay priced bank-local
        grouped = (piece_ownership(bank_count, reach, per_bank * len(reach) if pieces is None else pieces, pc.floor)
                   if pc.spread_banks else None)
        for i in range(own.used):
            core = placer.core(user, h, i, own.banks[i])
            where.append(core)
            n = own.tiles[i]
            if core not in works:
                read = tuple(b for b, t in zip(own.banks[i], own.bank_tiles[i]) if t or not pc.spread_banks)
                first[core] = (user, h, n, chunk, read, own.used)
            w = works.setdefault(core, CoreWork([], np.zeros(nb), {}, {}, 0, 0, 0, bank_local=True))
            if _reads_beyond(own, grouped, i):
                scattered.add(core)
            w.read_groups += _piece_reads(s, pc, n, chunk, s.entries(user), c)
            w.pipeline += (_piece_pipe(pc, d, kv, n, chunk, c),)
            _add_ops(w.compute, _piece_ops(pc, d, kv, n, chunk))
            for b, nbytes in piece_bank_bytes(own, i, 2 * d * kv).items():
                w.bank_bytes[b] += nbytes
                w.kv_bytes += nbytes
            w.chunks += 2 * -(-n // chunk)
            w.cb_handshakes += 4 * -(-n // chunk) + 2
            users[core].setdefault(user, (h, own.used))

        def node(i: int) -> Tree:
            return tuple((msg, noc_hops(where[ch], where[i]), node(ch)) for _, ch in tree_children(i, own.used))

        trees.add(node(0))
        for i in range(own.used):
            for _ in tree_children(i, own.used):
                _add_ops(works[where[i]].merge, merge)
    for core in scattered:
        works[core].bank_local = False
    readers = np.count_nonzero([w.bank_bytes > 0 for w in works.values()], axis=0)
    for core, w in works.items():
        w.index_reads = _index_reads(s, list(users[core]), first[core][0])
        w.setup_cycles, later = _setup_cycles(s, page_table, users[core], first[core], readers, c)
        w.read_groups = _with_issue_work(w.read_groups, later / c.dram_request_issue_cycles)
    worst, mean = piece_imbalance(s, pc, page_table, pieces, per_bank)
    counts_out = {"pieces_with_keys": float(most), "imbalance_worst": worst, "imbalance_mean": mean,
                  "cores": float(len(works))}
    return list(works.values()), Reduction((), dict(merge), tuple(sorted(trees, key=repr))), counts_out


def _index_reads(s: PagedShape, users: Sequence[int], first_user: int) -> tuple[tuple[str, int], ...]:
    """A core's serial index reads (CoreWork.index_reads): the positions together with the row its pass
    takes first (another user's when the core has one, else its first piece's user's), then each other
    user's row; `users` in the core's piece order."""
    ahead = next((u for u in users if u != first_user), first_user)
    rest = tuple(("dram", 4 * s.entries(u)) for u in users if u != ahead)
    return (("dram", 4 * s.batch + 4 * s.entries(ahead)),) + rest


@functools.lru_cache(maxsize=4096)
def _settled_entries(entries: int, tiles: int, h: int, num_kv_heads: int, block_tiles: int, banks: int,
                     pt_row: tuple[int, ...], used: int) -> Optional[int]:
    """Page-table entries the reader counts, 32 blocks at a time, before (user, head h)'s split settles
    (BankLocal::settled: every bank of R_h holds ceil(used / |R_h|) counted tiles, which fixes used and each
    piece's banks); None when it settles only with the whole row (`entries` of them, `tiles` attended)."""
    reach = bank_local_banks(h, num_kv_heads, block_tiles, banks)
    order = tile_banks(pt_row, 0, tiles, h, num_kv_heads, block_tiles, banks)
    need = max(1, -(-used // len(reach)))
    last = 0
    for b in reach:
        at = np.flatnonzero(order == b)
        if len(at) < need:
            return None
        last = max(last, int(at[need - 1]))
    blocks = -(-(last // block_tiles + 1) // 32) * 32
    return blocks if blocks < entries else None


def _settled(s: PagedShape, page_table: np.ndarray, user: int, h: int, used: int) -> Optional[int]:
    row = split_blocks(page_table[user][: s.entries(user)], s.block_size)  # block 16: the even entries
    blocks = _settled_entries(-(-s.entries(user) // s.block_entries), valid_tiles(s.cur_pos[user]), h,
                              s.num_kv_heads, s.block_tiles, s.dram_banks, tuple(int(x) for x in row), used)
    return None if blocks is None else blocks * s.block_entries


def _setup_cycles(s: PagedShape, page_table: np.ndarray, users: Mapping[int, tuple[int, int]],
                  first: tuple[int, int, int, int, tuple[int, ...], int], readers: np.ndarray,
                  c: CostConstants) -> tuple[float, float]:
    """(the reader's pass before its reads go on (CoreWork.setup_cycles), the count cycles it does later beside
    its reads). Every page-table entry of the core's users is guarded (page_table_guard_entry_cycles) and
    counted (the rest of page_table_pass_entry_cycles). Another user is guarded whole in the pass and counted up
    to its settled prefix (`_settled_entries`, for the head of its first piece on the core), the rest later,
    beside the reads of the piece before it. The first piece's user is counted up to its settled prefix, the
    entries of that piece's first whole chunks (one or two, K and V) checked, one check an entry per key tile,
    and the chunks requested; the guard of its whole row and the count past the prefix run while they land, at
    the piece's share of its banks (bank_rate over the cores reading each bank, at most the core's read
    plateau; the evaluator charges those reads after the setup, so the overlap is taken off here). Without
    such chunks (the split settles only with the whole row, or the piece holds no whole chunk) its row is
    guarded and counted whole before the first reads."""
    user0, h0, n, chunk, banks, used0 = first
    guard = c.page_table_guard_entry_cycles
    count = c.page_table_pass_entry_cycles - guard
    setup = 0.0
    later = 0.0
    for u, (h, used) in users.items():
        if u == user0:
            continue
        prefix = _settled(s, page_table, u, h, used)
        setup += s.entries(u) * guard + (s.entries(u) if prefix is None else prefix) * count
        later += 0.0 if prefix is None else (s.entries(u) - prefix) * count
    prefix0 = _settled(s, page_table, user0, h0, used0)
    ahead = min(2, n // chunk)
    if prefix0 is None or ahead == 0:
        return setup + s.entries(user0) * c.page_table_pass_entry_cycles, later
    check = ahead * chunk * s.block_entries * guard
    landing_work = s.entries(user0) * guard + (s.entries(user0) - prefix0) * count
    rate = min(c.core_read_plateau_bytes_per_cycle, sum(bank_rate(c) / max(1, int(readers[b])) for b in banks))
    landing = ahead * chunk * 2 * s.d_tiles * s.kv_tile_bytes / rate
    return setup + prefix0 * count + check + landing_work - min(landing_work, landing), later


def _with_issue_work(groups: list[tuple[int, int]], requests: float) -> list[tuple[int, int]]:
    """`groups` with `requests` requests' worth of issue time spread evenly over them (the reader counts a
    later user's row a slice per chunk beside its reads)."""
    each = round(requests / max(1, len(groups)))
    return [(b, r + each) for b, r in groups] if each else groups


def bank_rate(c: CostConstants = COST) -> float:
    """Bytes/cycle one bank serves its bank-local readers: its peak x the 12-reader efficiency (DRAMTile
    265.5 GB/s / 12), no more than one reader alone reaches (22.2 GB/s)."""
    return min(c.dram_peak_bytes_per_cycle / c.dram_banks * c.dram_bank_local_readers_efficiency,
               c.dram_bank_reader_bytes_per_cycle)


def evaluate_paged(s: PagedShape, pc: PieceCompute, page_table: np.ndarray, pieces: Optional[int] = None,
                   c: CostConstants = COST, per_bank: int = 1,
                   placement: Optional[Mapping[tuple[int, int, int], CoreCoord]] = None
                   ) -> tuple[Breakdown, dict[str, float]]:
    """The step estimate (MODEL ESTIMATE, µs) of `paged_work`, every bank shared fairly by its readers at
    `bank_rate`; a core with a spread piece that reads beyond the banks its own-bank split would give it
    (CoreWork.bank_local False: its reads meet many banks, as interleaved reads do) at the interleaved efficiency
    instead (an ASSUMED price: DRAMTile's readers paired randomly with banks); the launch skew over the cores
    with work. Returns (breakdown, paged_work's counts)."""
    works, red, counts = paged_work(s, pc, page_table, pieces, c, per_bank, placement)
    floors = shared_bank_floors(works, bank_rate(c))
    if not all(w.bank_local for w in works):
        scattered = shared_bank_floors(works, bank_rate(c) * c.dram_interleaved_efficiency
                                       / c.dram_bank_local_readers_efficiency)
        floors = [f if w.bank_local else g for w, f, g in zip(works, floors, scattered)]
    b = evaluate(works, red, pc.fidelity, c, floors=floors)
    return b, counts
