"""tt-metal's sdpa_decode (ttnn 0.81.1) written down as data for the cost model (`ttdecode.perf_model.evaluator`).

Counts only, read from its compute kernel (`sdpa_flash_decode.cpp`), reader/writer and the work split
in its program factory (ttnn/cpp/ttnn/operations/transformer/sdpa_decode/, rt_args_common.hpp); no code
of it is reproduced. Per K chunk of `k` tiles on a core
(one q tile row, `d` = D/32 K tiles, `dv` = Dv/32 V tiles). Its program factory takes half (16 x 32)
Q/statistics tiles for a causal call whose bf16 Q has at most 16 q heads in all (Q's logical dim 2, the
user's q heads, not divided by the KV heads): the SFPU then runs VectorMode::R, 16 vector steps a tile.
Otherwise (more than 16 q heads, e.g. 32q/8kv; or an attention-mask call) whole 32 x 32 tiles, VectorMode::RC,
32 steps, whatever number of their rows hold heads:

  QK matmul         k*d tiles (in0 rows 16 or 32), one call per output subblock (k)
  causal mask add   k tiles, last chunk only (fused into the matmul's Dst)
  row max           k tiles reduce_max (+1 eltwise max with the previous max after the first chunk)
  sub + exp         k tiles sub_bcast + k tiles exp (sub_exp_block_bcast_cols_inplace: with half tiles or
                    exp_approx_mode, the approximate exp with the scale in its init; else, on whole tiles,
                    the scale by mul_unary_tile, then the accurate exp: exp_21f on a bf16 DST, the fp32
                    accurate exp on an fp32 one)
  row sum           k tiles reduce_sum
  PV matmul         k*dv tiles, one call per output subblock (dv)
  after chunk 1:    sub + exp on 1 tile (max correction, sub_exp_block: its first-column exp is, with
                    exp_approx_mode, the accurate exp of the DST's width; without, a polynomial exp of
                    degree 2 on a bf16 DST, 4 on an fp32 one; VectorMode::C, 4 steps on each of faces 0
                    and 2: 8 steps whatever the tile), mul 1 (sum), mul_bcast dv, add 1, add dv
  moves             2 copies (max, sum to the ping-pong buffers)
  packs             every op's output tiles: 2k + 4 + dv (+ 3 + 2 dv after chunk 1), one call per tile
Each tally counts tiles (a half tile is one tile of 16 vector steps) and the L1 bytes its unpackers fetch
(a matmul: each in1 tile once, its in0 tile once per call; a binary FPU op and a reduce: both operands,
the reduce's scaler a bf16 32x32 tile) or its packer writes; its q-row CBs are bf16 (its
program factory keeps statistics and intermediates in bf16), half tiles where its Q tiles are.
Tile calls: one per tile (pack_tile, exp_tile, copy_tile, reduce_tile, ...), one per matmul_block
(per subblock and inner step); inits: one per op block (its reconfig included).
The reduction: a binary tree (ceil(log2 n) rounds, since tt-metal PR #37004) or, before it, linear
(the root merges the n - 1 workers one after another; the tech report's measurements are of that one).
Reads per chunk: k*d K tiles and k*dv V tiles, each a request, a barrier for K and one for V; Q once
(d tiles). Per tree round on the critical path: the child writes l, m (1 tile each) and O (dv tiles);
the parent: copy 1 (l), correction_block (copy 4: both maxes and sums into Dst, then ONE fused SFPU call
that runs the max, both subtractions, both exps, the sums' rescale and their add: the accurate exp of the
DST's width whatever exp_approx_mode, 4 steps on each face of its vector mode: 8 with half tiles, 16 with
whole ones; its copy init and exp init once per tile), copy dv (O), mul_bcast 2*dv, add dv, copy 2;
packs 7 + 4*dv; inits 9. Before PR #32501 (fused_correction False) the correction was max 1, sub 2,
exp 2, mul 2, add 1 as separate blocks (packs 9 + 4*dv). The root finishes with recip 1, mul_bcast dv,
copy dv and writes dv tiles.
With more than 32 q heads per KV head (MLA: 128) the q rows fill `qt` = ceil(g / 32) whole tile rows:
every q-row count above (scores, statistics, O, the messages, the merges) is per tile row, times qt;
the K/V tiles are read once and unpacked by the matmuls once per q tile row. MLA (head_dim_v < D): V
is the first Dv columns of the K tiles already read, so a chunk has one read group (K) and one
pipeline stage. Positions may differ per user (a tuple); a user at -1 is skipped.
The reader first reads cur_pos and then the user's page table row (index_memory "dram" or "l1": an L1
shard; None: the positions come as runtime args and nothing is read), serially before its K reads; Q
height-sharded in L1 (q_memory "l1") is one more such read, else Q is a DRAM read group of its own.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ttdecode.perf_model.constants import COST
from ttdecode.perf_model.evaluator import CoreWork, OpTally, Reduction
from ttdecode.core.noc_geometry import noc_hops
from ttdecode.core.program_description import CoreCoord

__all__ = ["TTMetalShape", "split", "chunk_tiles", "half_q_tiles", "exp_ops", "ttmetal_work"]

BF16_TILE = 2048
FIRST_COLUMN_STEPS = 8  # an SFPU op on a tile's first column (VectorMode::C): faces 0 and 2, 4 steps each
# the merge's fused SFPU op (correction_block's) by the accurate exp it runs: exp_21f on a bf16 DST, the fp32 one
FUSED_CORRECTION = {"exp_bf16": "correction_bf16", "exp": "correction"}
KV_TILE = {"bfloat8_b": 1088, "bfloat16": 2048, "bfloat4_b": 576}


@dataclass(frozen=True)
class TTMetalShape:
    """One decode call. grid: (x, y) cores; k_chunk_size: 0 = dynamic (per user, from cur_pos)."""

    batch: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    cur_pos: int | tuple[int, ...]  # one position for every user, or one per user
    seq_len: int
    grid: tuple[int, int] = (8, 8)
    max_cores_per_head_batch: int = 16
    k_chunk_size: int = 0
    kv_dtype: str = "bfloat8_b"
    fp32_dest_acc: bool = False
    reduction: str = "tree"  # "tree" (since PR #37004, Feb 2026) or "linear" (before: the root merges all)
    # the merge's correction as one fused SFPU op (correction_block, since PR #32501, Nov 2025); False: the
    # separate max, sub, exp, mul and add blocks of the versions before it (the tech report's, PR #26227's)
    fused_correction: bool = True
    head_dim_v: int | None = None  # MLA: V = the first head_dim_v columns of K (None: a V tensor of head_dim)
    index_memory: str | None = None  # where cur_pos and the page table are read from: "dram", "l1" or None
    block_size: int = 32  # keys per page of a paged cache (the page table row: seq_len / block_size int32)
    q_memory: str = "dram"  # where Q is read from: "dram" (interleaved) or "l1" (height-sharded in L1)
    # the program config's exp_approx_mode (tt-metal's factory takes True when it is unset; tt_transformers
    # sets False): True runs the approximate softmax exp on whole tiles too (half tiles run it either way)
    exp_approx_mode: bool = False
    # False: a call with an attention mask: whole Q tiles whatever the q heads (only the tile choice follows
    # it; the mask adds tallied stay the causal call's, the root's last chunk)
    is_causal: bool = True

    def positions(self) -> tuple[int, ...]:
        """Every user's position (cur_pos: one for all, or one per user)."""
        if isinstance(self.cur_pos, int):
            return (self.cur_pos,) * self.batch
        if len(self.cur_pos) != self.batch:
            raise ValueError(f"TTMetalShape: {len(self.cur_pos)} positions for batch {self.batch}")
        return tuple(self.cur_pos)


def split(s: TTMetalShape) -> tuple[int, int]:
    """(cores per KV head, KV heads per core) of its program factory (sdpa_decode's program factory)."""
    n = s.grid[0] * s.grid[1]
    per_batch = min(n, s.max_cores_per_head_batch * s.batch * s.num_kv_heads) // s.batch
    if per_batch < 1:
        raise ValueError(f"ttmetal split: grid {s.grid} has fewer cores than the batch {s.batch}")
    per_head = max(1, per_batch // s.num_kv_heads)
    heads_per_core = max(1, math.ceil(s.num_kv_heads / per_batch))
    return per_head, heads_per_core


def chunk_tiles(s: TTMetalShape, pos: int | None = None) -> int:
    """K chunk in tiles at position `pos` (None: the highest of s's positions): dynamic =
    pow2ceil(pos // 32 + 1) capped at 8 (4 with fp32 Dst); otherwise k_chunk_size / 32."""
    if s.k_chunk_size:
        if s.k_chunk_size % 32 or s.k_chunk_size & (s.k_chunk_size - 1):
            raise ValueError(f"k_chunk_size must be a power of two multiple of 32, got {s.k_chunk_size}")
        return s.k_chunk_size // 32
    pos = max(s.positions()) if pos is None else pos
    t = 1 << math.ceil(math.log2(max(pos, 0) // 32 + 1))
    return min(t, 4 if s.fp32_dest_acc else 8)


def half_q_tiles(s: TTMetalShape) -> bool:
    """Whether its program factory takes half (16 x 32) Q tiles for `s`: a causal call with at most 16 q heads
    in all (the user's, Q's logical dim 2, not per KV head); Q is bf16 here."""
    return s.is_causal and s.num_q_heads <= 16


def exp_ops(s: TTMetalShape) -> tuple[str, str, str]:
    """The cost model's ops for tt-metal's three exps at `s`: (the softmax exp over the scores, the running
    max correction's exp after a core's first chunk, the merge's exps). The accurate exp is exp_21f
    ("exp_bf16") on a bf16 DST, the fp32 accurate exp ("exp") on an fp32 one. The softmax: approximate with
    half Q tiles or exp_approx_mode, else accurate. The max correction's first-column exp: accurate with
    exp_approx_mode, else a polynomial of degree 2 ("exp_poly2", bf16 DST) or 4 ("exp_poly4", fp32 DST).
    The merge's fused correction: accurate whatever exp_approx_mode."""
    accurate = "exp" if s.fp32_dest_acc else "exp_bf16"
    softmax = "exp_approx" if half_q_tiles(s) or s.exp_approx_mode else accurate
    correction = accurate if s.exp_approx_mode else ("exp_poly4" if s.fp32_dest_acc else "exp_poly2")
    return softmax, correction, accurate


def _add(ops: dict[str, list[OpTally]], op: str, tiles: float, calls: int, rows: int, steps: int,
         l1_bytes: float | None = None, unpacks: float | None = None) -> None:
    """`tiles` tiles (a count: a half tile is one tile of 16 `steps`) of `op` in `calls` calls; `l1_bytes`
    the L1 bytes its unpackers fetch (a pack: writes), `unpacks` the tiles they unpack."""
    ops[op].append(OpTally(tiles, calls, rows, steps, l1_bytes, unpacks))


def _eltwise(ops: dict[str, list[OpTally]], op: str, tiles: int, rows: int, steps: int, operand_bytes: int,
             operands: int) -> None:
    """`tiles` calls of an FPU op (one tile each) that unpacks `operands` tiles of `operand_bytes` per call."""
    _add(ops, op, tiles, tiles, rows, steps, tiles * operands * operand_bytes, tiles * operands)


def ttmetal_work(s: TTMetalShape) -> tuple[list[CoreWork], Reduction, dict[str, int]]:
    """(per-core work of the cores with chunks, the critical path of the tree, counts) for `s`.

    counts: chunks per head, active cores per head, tree rounds, chunk tiles (for checks).
    Steps: the shape's tiles and the split; per (user, KV head, core rank) the chunks' tallies
    (_tally_chunk), the root's finish (_tally_finish), summed per core (_add_to_core); then the
    reduction (_reduction)."""
    d = s.head_dim // 32
    mla = s.head_dim_v is not None and s.head_dim_v != s.head_dim
    dv = (s.head_dim_v or s.head_dim) // 32
    g = s.num_q_heads // s.num_kv_heads
    rows, steps = (16, 16) if half_q_tiles(s) else (32, 32)
    qt = 1 if g <= 32 else math.ceil(g / 32)  # q tile rows per KV head (the q rows of one KV group)
    exps = exp_ops(s)
    b = BF16_TILE * rows // 32  # one of its bf16 q-row tiles (Q, scores, statistics, O): half tiles at 16 rows
    per_head, heads_per_core = split(s)
    kv_tile = KV_TILE[s.kv_dtype]
    if s.index_memory not in (None, "dram", "l1"):
        raise ValueError(f"index_memory must be None, 'dram' or 'l1', got {s.index_memory!r}")
    # cur_pos (one int32 per user), then the user's page table row (seq_len / block_size int32)
    index = () if s.index_memory is None else (
        (s.index_memory, 4 * s.batch), (s.index_memory, 4 * max(1, s.seq_len // s.block_size)))
    if s.q_memory not in ("dram", "l1"):
        raise ValueError(f"q_memory must be 'dram' or 'l1', got {s.q_memory!r}")
    q_bytes = qt * d * BF16_TILE
    if s.q_memory == "l1":  # its L1 shard: read before the first chunk like the index
        index += (("l1", q_bytes),)
    by_core: dict[tuple[int, int, int], CoreWork] = {}
    most = (0, 0, 0)  # (active cores, chunks, chunk tiles) of the user with the most active cores
    for user, pos in enumerate(s.positions()):
        if pos < 0:
            continue
        kt = chunk_tiles(s, pos)
        chunks = math.ceil((pos + 1) / (kt * 32))
        active = min(chunks, per_head)
        most = max(most, (active, chunks, kt))
        for head in range(s.num_kv_heads):
            for rank in range(active):
                my_chunks = chunks // active + (1 if rank < chunks % active else 0)
                ops: dict[str, list[OpTally]] = defaultdict(list)
                # this head's Q tiles: a DRAM read group, or (in L1) one of the reads before the chunks
                groups: list[tuple[int, int]] = [(q_bytes, qt * d)] if s.q_memory == "dram" else []
                for c in range(my_chunks):
                    groups += _tally_chunk(ops, c, rank == 0 and c == my_chunks - 1, kt, d, dv, rows, steps, b,
                                           kv_tile, exps[:2], qt, mla)
                if rank == 0:
                    _tally_finish(ops, dv, rows, steps, b, qt)
                # a core runs heads_per_core heads one after another
                _add_to_core(by_core, (user, head // heads_per_core, rank), groups, ops, my_chunks,
                             my_chunks * kt * (d + (0 if mla else dv)) * kv_tile, 1 if mla else 2, index)
    works = list(by_core.values())
    active, chunks, kt = most
    reduction, rounds = _reduction(s, active, dv, rows, steps, b, exps[2], qt)
    counts = {"chunks_per_head": chunks, "active_cores_per_head": active, "rounds": rounds, "chunk_tiles": kt,
              "cores_per_head": per_head, "q_tile_rows": qt, "grid_cores": s.grid[0] * s.grid[1]}
    return works, reduction, counts


def _tally_chunk(ops: dict[str, list[OpTally]], c: int, masked: bool, kt: int, d: int, dv: int, rows: int, steps: int,
                 b: int, kv_tile: int, exps: tuple[str, str], qt: int = 1,
                 mla: bool = False) -> list[tuple[int, int]]:
    """Adds to `ops` the compute of chunk `c` (0 = a core's first) of `kt` key tiles (the module doc's
    table; `masked`: the causal mask add, the root's last chunk). `d`, `dv`: K and V tiles per key tile;
    `rows`/`steps`: the q-row tiles' rows and SFPU steps; `b`, `kv_tile`: bytes of a q-row tile and a K/V
    tile; `exps`: the ops of the softmax exp and of the max correction's exp (exp_ops); `qt` q tile rows
    (every q-row count times qt; the inits once per op block). Returns the chunk's read groups (bytes,
    requests): its K tiles, then its V tiles (none with `mla`: V is read out of K)."""
    if qt > 1:  # every q-row count times qt: tally one tile row into a scratch dict, scale, add
        one: dict[str, list[OpTally]] = defaultdict(list)
        groups = _tally_chunk(one, c, masked, kt, d, dv, rows, steps, b, kv_tile, exps, 1, mla)
        for op, ts in one.items():
            for t in ts:
                ops[op].append(t if op == "init" else OpTally(
                    t.tiles * qt, t.calls * qt, t.rows, t.steps,
                    None if t.l1_bytes is None else t.l1_bytes * qt, None if t.unpacks is None else t.unpacks * qt))
        return groups
    # (op, tiles, tile calls, inits): one init per op block (its reconfig included). L1
    # bytes: K/V tiles of kv_tile, its q-row tiles bf16 of `rows` rows, the reduce
    # scaler a bf16 32x32 tile; a matmul unpacks its in0 tile once per call (reused
    # across the subblock), each in1 tile once
    _add(ops, "matmul", kt * d, d, rows, steps, kt * d * kv_tile + d * b, kt * d + d)
    inits = 1
    if masked:
        _eltwise(ops, "add", kt, rows, steps, b, 1)  # the mask onto the scores in Dst
        inits += 1
    _eltwise(ops, "reduce_max", kt, rows, steps, (b + BF16_TILE) // 2, 2)
    if c:
        _add(ops, "max", 1, 1, rows, steps)
    _eltwise(ops, "sub_bcast", kt, rows, steps, b, 2)
    softmax, correction = exps
    if softmax == "exp_approx":  # the approximate exp, the scale in its init
        _add(ops, "exp_approx", kt, kt, rows, steps)
    else:  # whole tiles (RC), accurate: the scale (mul_unary_tile), then the exp
        _add(ops, "scalar", kt, kt, rows, steps)
        _add(ops, softmax, kt, kt, rows, steps)
    _eltwise(ops, "reduce_sum", kt, rows, steps, (b + BF16_TILE) // 2, 2)
    _add(ops, "matmul", kt * dv, kt, rows, steps, kt * dv * kv_tile + kt * b, kt * dv + kt)
    inits += 6 + (1 if c else 0)
    if c:
        _eltwise(ops, "sub", 1, rows, steps, b, 2)
        _add(ops, correction, 1, 1, rows, FIRST_COLUMN_STEPS)
        _eltwise(ops, "mul", 1, rows, steps, b, 2)
        _eltwise(ops, "mul_bcast", dv, rows, steps, b, 2)
        _eltwise(ops, "add", 1, rows, steps, b, 2)
        _eltwise(ops, "add", dv, rows, steps, b, 2)
        inits += 6
    _eltwise(ops, "copy", 2, rows, steps, b, 1)
    inits += 2
    packed = 2 * kt + 2 + dv + 2 + ((3 + 2 * dv) if c else 0)
    _add(ops, "pack", packed, packed, rows, steps, packed * b)
    _add(ops, "init", 0, inits, rows, steps)
    if mla:
        return [(kt * d * kv_tile, kt * d)]
    return [(kt * d * kv_tile, kt * d), (kt * dv * kv_tile, kt * dv)]


def _tally_finish(ops: dict[str, list[OpTally]], dv: int, rows: int, steps: int, b: int, qt: int = 1) -> None:
    """Adds to `ops` the root's finish: 1 / l, O x (1 / l) over dv tiles, and the copy out, per q tile row."""
    _add(ops, "recip", qt, qt, rows, steps)
    _eltwise(ops, "mul_bcast", dv * qt, rows, steps, b, 2)
    _eltwise(ops, "copy", dv * qt, rows, steps, b, 1)
    _add(ops, "init", 0, 3, rows, steps)


def _add_to_core(by_core: dict[tuple[int, int, int], CoreWork], key: tuple[int, int, int],
                 groups: list[tuple[int, int]], ops: dict[str, list[OpTally]], my_chunks: int, kv: int,
                stages: int = 2, index: tuple[tuple[str, int], ...] = ()) -> None:
    """Adds one (user, KV head)'s work on a core (`key`: user, head group, rank) to `by_core`: its read
    groups, its K/V bytes spread evenly over the DRAM banks, its op tallies, `stages` pipeline stages per
    chunk (2: K and V have their own barriers and CB pushes, compute on a chunk's K overlaps the read of its
    V; 1 with MLA), the CB handshakes and the index reads (`index`, once per core)."""
    per_bank = np.full(COST.dram_banks, kv / COST.dram_banks)
    if key in by_core:
        w = by_core[key]
        w.read_groups += groups
        w.bank_bytes = w.bank_bytes + per_bank
        for op, ts in ops.items():
            w.compute.setdefault(op, []).extend(ts)
        w.chunks += stages * my_chunks
        w.cb_handshakes += 2 * stages * my_chunks + 2
        w.kv_bytes += kv
    else:
        by_core[key] = CoreWork(groups, per_bank, dict(ops), {}, stages * my_chunks, 2 * stages * my_chunks + 2, kv,
                                index_reads=index)


def _reduction(s: TTMetalShape, active: int, dv: int, rows: int, steps: int, b: int, exp: str,
               qt: int = 1) -> tuple[Reduction, int]:
    """The merge of `active` partials per head: the messages (l, m and dv O tiles, bytes, and NoC hops
    to the root at core (0, 0)) of the senders on the critical path, a binary tree (ceil(log2 n)
    rounds) or linear (the root merges the n - 1 workers one after another), and the ops of one merge
    (`exp`: the accurate exp of the DST's width, exp_ops; _fused_merge or, with s.fused_correction
    False, _separate_merge). Returns (the reduction, its rounds)."""
    if s.reduction not in ("tree", "linear"):
        raise ValueError(f"reduction must be 'tree' or 'linear', got {s.reduction!r}")
    gx = s.grid[0]
    msg = (2 + dv) * qt * BF16_TILE  # l, m, O tiles per q tile row (its CBs hold full tiles)
    if s.reduction == "tree":
        rounds = math.ceil(math.log2(active)) if active > 1 else 0
        senders = [1 << r for r in range(rounds)]
    else:  # every worker writes into the root, which merges them one after another
        rounds = active - 1
        senders = list(range(1, active))
    path = tuple((msg, noc_hops(CoreCoord(i % gx, i // gx), CoreCoord(0, 0))) for i in senders)
    merge: dict[str, list[OpTally]] = defaultdict(list)
    if s.fused_correction:
        _fused_merge(merge, FUSED_CORRECTION[exp], dv, rows, steps, b, qt)
    else:
        _separate_merge(merge, exp, dv, rows, steps, b, qt)
    return Reduction(path, dict(merge)), rounds


def _fused_merge(merge: dict[str, list[OpTally]], fused: str, dv: int, rows: int, steps: int, b: int,
                 qt: int) -> None:
    """Adds one merge round of tt-metal's tree (sdpa_flash_decode.cpp's loop over its children) to `merge`,
    per q tile row: move l (one copy); correction_block: per tile a copy init and the exp init, 4 copies
    (the two maxes and sums) into Dst, the fused SFPU op (`fused`: max, both subtractions and accurate exps,
    the sums' rescale and add, 4 steps on each face of its vector mode: `steps` // 2) and 4 packs; move O
    (dv copies); O and the child's O times their factors (mul_bcast 2 dv); their add (dv); move m and l
    back (2 copies). Every copy, multiply and add packs its tile. Inits: one per op block (its reconfigs
    included), correction_block's two per tile."""
    for op, tiles, inits in (("copy", 1, 1), ("copy", 4, 2 * qt), ("copy", dv, 1), ("mul_bcast", 2 * dv, 2),
                             ("add", dv, 1), ("copy", 2, 2)):
        _eltwise(merge, op, tiles * qt, rows, steps, b, 1 if op == "copy" else 2)
        _add(merge, "init", 0, inits, rows, steps)
    _add(merge, fused, qt, qt, rows, steps // 2)  # SFPU on Dst: no unpack
    # l, the correction's 4 outputs, O, 2 dv products, dv sums, m and l
    _packs(merge, (7 + 4 * dv) * qt, rows, steps, b)


def _separate_merge(merge: dict[str, list[OpTally]], exp: str, dv: int, rows: int, steps: int, b: int,
                    qt: int) -> None:
    """Adds one merge of tt-metal before PR #32501 to `merge`: the correction as separate ops (max 1,
    sub 2, exp 2 on half the steps, mul 2, add 1) beside the copies, mul_bcast and add of the fused one.
    Every block packs its output tiles as the fused version's do (compute_common.hpp's block functions end
    each tile with pack_tile), the subtraction and its exp in one pass: 9 + 4 dv packs."""
    # (op, tiles, tile calls, inits) of one merge
    for op, tiles, calls, inits in (("copy", 1, 1, 1), ("max", 1, 1, 1), ("sub", 2, 2, 2), (exp, 2, 2, 2),
                                    ("mul", 2, 2, 2), ("add", 1, 1, 1), ("copy", dv, dv, 1),
                                    ("mul_bcast", 2 * dv, 2 * dv, 2), ("add", dv, dv, 1), ("copy", 2, 2, 2)):
        tiles, calls = tiles * qt, calls * qt
        if op in ("max", exp):  # SFPU on Dst: no unpack; the exps half the steps (4 a face)
            _add(merge, op, tiles, calls, rows, steps // 2 if op == exp else steps)
        else:  # bf16 q-row tiles: a copy unpacks one, a binary FPU op two
            _eltwise(merge, op, tiles, rows, steps, b, 1 if op == "copy" else 2)
        _add(merge, "init", 0, inits, rows, steps)
    # l; max 1, sub-exp 2, mul 2, add 1; O; 2 dv products; dv sums; m and l
    _packs(merge, (9 + 4 * dv) * qt, rows, steps, b)


def _packs(merge: dict[str, list[OpTally]], packs: int, rows: int, steps: int, b: int) -> None:
    """Adds a merge's `packs` pack_tile calls of one q-row tile each (`b` bytes) to `merge`."""
    _add(merge, "pack", packs, packs, rows, steps, packs * b)
