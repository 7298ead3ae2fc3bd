"""The evaluator: per-core work and the reduction as data -> an estimated step time (`evaluate`, a
`Breakdown` in µs). The arithmetic of the model (see ttdecode/perf_model/__init__.py); what feeds it comes
from the runtime's counters (`counters`), tt-metal's structure (`ttmetal_structure`) or closed forms
(`op_counts`, `pricing`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from ttdecode.perf_model.constants import COST, CostConstants
from ttdecode.perf_model.pipeline import PiecePipe, pipeline_cycles

__all__ = ["SFPU_OPS", "OpTally", "CoreWork", "Tree", "Reduction", "Breakdown", "op_class", "sfpu_tile_cycles",
           "op_cycles", "tally_l1_bytes", "sum_ops", "reader_cycles", "bank_floor_cycles", "message_cycles",
           "critical_path", "tree_cycles", "reduction_cycles", "core_cycles", "index_read_cycles", "group_cycles",
           "pipelined_cycles",
           "start_spread_cycles", "shared_bank_floors", "evaluate"]

SFPU_OPS = ("exp", "exp_approx", "exp_bf16", "exp_poly2", "exp_poly4", "recip", "log", "max", "scalar", "ternary",
            "correction", "correction_bf16")

def op_class(op: str) -> str:
    """The breakdown class of a compute op: matmul, sfpu, eltwise (incl. copies) or reduce."""
    if op == "matmul":
        return "matmul"
    if op == "init":
        return "init"
    if op in SFPU_OPS:
        return "sfpu"
    if op.startswith("reduce"):
        return "reduce"
    return "eltwise"


@dataclass(frozen=True)
class OpTally:
    """`tiles` (may be fractional: half tiles) through an op in `calls` LLK calls; `rows` of in0 fed
    (matmul) or `steps` SFPU vector steps per tile. `l1_bytes`: the L1 bytes all the calls' unpackers
    fetch (a pack: the bytes the packer writes), `unpacks` the tiles they unpack (each UNPACR's address
    calculation); None: a bf16 tile of the op's shape per tile (matmul: a whole in1 tile), one unpack
    per tile."""

    tiles: float
    calls: int
    rows: int = 32
    steps: int = 32
    l1_bytes: Optional[float] = None
    unpacks: Optional[float] = None


@dataclass
class CoreWork:
    """What one core does in a step.

    read_groups: per read barrier, (bytes, requests). bank_bytes: DRAM bytes per bank (reads and
    writes). compute / merge: op -> tallies (merge = the reduction's work on this core).
    chunks: pipeline stages of the overlap (read-barrier groups carrying K/V). cb_handshakes: push/wait pairs.
    index_reads: the reader's serial reads before its first read group, (memory, bytes) with memory "dram" or
    "l1" (tt-metal's structure: cur_pos, then the page table row, from DRAM or an L1 shard; index_read_cycles).
    pipeline: the core's pieces in order (pipeline.PiecePipe), when its read groups are per piece a Q group then
    a K and a V group per chunk: the local time is then timed event by event (pipeline_cycles) instead of
    ``max(reader, compute) + min / chunks``.
    """

    read_groups: list[tuple[int, int]]
    bank_bytes: np.ndarray
    compute: dict[str, list[OpTally]]
    merge: dict[str, list[OpTally]]
    chunks: int
    cb_handshakes: int
    kv_bytes: int
    bank_local: bool = False
    index_reads: tuple[tuple[str, int], ...] = ()
    setup_cycles: float = 0.0
    pipeline: tuple[PiecePipe, ...] = ()


#: A merge tree as data: a node is the tuple of its children in merge order, each child
#: ``(message bytes, NoC hops, the child's own node)``; a leaf is ``()``.
Tree = tuple


@dataclass(frozen=True)
class Reduction:
    """The reduction as data. `trees`: each work's merge tree (distinct shapes once), timed by
    `reduction_cycles`; `rounds`: the messages, (bytes, hops), of the path that ends the slowest tree
    under the nominal constants (reported, and priced alone when there are no trees: tt-metal's
    structure and the distributed model write their trees down as that path). `merge_per_round`: the
    ops of one merge."""

    rounds: tuple[tuple[int, int], ...]
    merge_per_round: Mapping[str, Sequence[OpTally]]
    trees: tuple[Tree, ...] = ()


@dataclass(frozen=True)
class Breakdown:
    """Model estimate of one step, µs: the figure tt-metal's profiler calls DEVICE KERNEL DURATION (the
    first core's kernel start to the last core's kernel end, the launch skew and the compute kernel's init
    included; not firmware start, dispatch or the completion handshake). `start_spread_us` the launch skew
    (the first-to-last kernel start over the op's cores); `compute_us` per op class on the slowest core (its
    local work, merges apart; "startup" its compute kernel's init); `reduction_us` the step beyond the slowest
    core's local work: the merge trees after it, or the busiest core's merges beside its own chunks,
    whichever is longer."""

    total_us: float
    start_spread_us: float
    local_us: float
    reader_us: float
    dram_floor_us: float
    compute_us: Mapping[str, float]
    reduction_us: float
    kv_bytes: int
    achieved_gbps: float
    cores: int

    @property
    def launch_us(self) -> float:
        """The start spread (the name of the term it replaced: an assumed 2 µs launch)."""
        return self.start_spread_us

    @property
    def cycles(self) -> float:
        """The estimate in cycles of the model's clock (1 GHz): what to compare across chips' clocks."""
        return self.total_us * COST.clock_hz / 1e6

    @property
    def reduction_share(self) -> float:
        return self.reduction_us / self.total_us if self.total_us else 0.0

def sfpu_tile_cycles(op: str, steps: int, c: CostConstants = COST) -> float:
    """SFPU cycles of one tile of `op` run over `steps` vector steps (32 full tile, 16 VectorMode::R)."""
    if op == "exp_approx":
        return c.exp_approx_tile_cycles * steps / c.sfpu_steps_per_tile
    if op not in c.sfpu_instructions_per_step:
        raise KeyError(f"sfpu_tile_cycles: no instruction count for op {op!r}")
    return c.sfpu_instructions_per_step[op] * steps


def _math_tile_cycles(op: str, t: OpTally, phases: int, c: CostConstants) -> float:
    if op == "matmul":
        rows = max(c.matmul_min_rows, -(-t.rows // c.matmul_min_rows) * c.matmul_min_rows)
        return c.matmul_tile_cycles_lofi * phases * min(rows, 32) / 32
    if op in SFPU_OPS:
        return sfpu_tile_cycles(op, t.steps, c)
    frac = t.steps / c.sfpu_steps_per_tile  # half tiles for eltwise/reduce too
    if op in ("mul", "mul_bcast"):
        return c.eltwise_tile_cycles * phases * frac
    if op in ("add", "sub", "copy", "add_bcast", "sub_bcast"):
        return c.eltwise_tile_cycles * frac
    if op == "reduce_max":
        return c.reduce_tile_cycles * frac
    if op == "reduce_sum":
        return c.reduce_tile_cycles * phases * frac
    if op == "pack":
        return 0.0
    raise KeyError(f"op_cycles: no cost for op {op!r}")


def op_cycles(op: str, t: OpTally, fidelity: str, c: CostConstants = COST) -> float:
    """Cycles of `t.tiles` tiles of `op` in `t.calls` LLK tile calls: per tile the slower of unpack and
    math (their TRISCs pipeline through Dst), plus the overhead of each call. Packing the results is
    the op "pack" (tiles x bytes / pack rate + the overhead per call); configuration calls are the op
    "init" (`calls` of them)."""
    phases = c.fidelity_phases[fidelity]
    if op == "init":
        return t.calls * c.init_cycles
    frac = t.steps / c.sfpu_steps_per_tile
    if t.l1_bytes is not None:
        nbytes = t.l1_bytes
    else:  # a bf16 tile of the op's shape; a matmul's in1 is a whole 32 x 32 tile however few rows in0 has
        nbytes = t.tiles * c.intermediate_tile_bytes * (1.0 if op == "matmul" else frac)
    if op == "pack":  # each face on a packer of its own: 2 for a 16x32 tile (16 steps), 4 for a 32x32 tile
        faces = 2 if t.steps <= 16 else 4
        return nbytes / (faces * c.packer_bytes_per_cycle) + t.calls * c.tile_call_cycles
    math = t.tiles * _math_tile_cycles(op, t, phases, c)  # the pack of the results is its own op ("pack")
    if op in SFPU_OPS:
        unpack = 0.0  # works on Dst; the copy into Dst is its own op
    else:
        # both operands' bytes at one unpacker's x4 rate: two unpackers fetching at once get x2 each
        unpack = (t.tiles if t.unpacks is None else t.unpacks) * c.unpack_address_cycles \
            + nbytes / c.unpack_bytes_per_cycle
    return max(unpack, math) + t.calls * c.tile_call_cycles


def tally_l1_bytes(t: OpTally, op: str, c: CostConstants = COST) -> float:
    """A tally's L1 bytes as op_cycles charges them."""
    if t.l1_bytes is not None:
        return t.l1_bytes
    return t.tiles * c.intermediate_tile_bytes * (1.0 if op == "matmul" else t.steps / c.sfpu_steps_per_tile)


def sum_ops(ops: Mapping[str, Sequence[OpTally]], fidelity: str, c: CostConstants) -> dict[str, float]:
    by_class: dict[str, float] = defaultdict(float)
    for op, tallies in ops.items():
        for t in tallies:
            by_class[op_class(op)] += op_cycles(op, t, fidelity, c)
    return dict(by_class)


def group_cycles(read_groups: Sequence[tuple[int, int]], c: CostConstants = COST) -> list[float]:
    """Per barrier group: the first read's latency then the stream at the per-core plateau or the request
    issue rate, whichever is slower (0 for a group with no bytes)."""
    return [c.dram_latency_cycles + max(b / c.core_read_plateau_bytes_per_cycle, n * c.dram_request_issue_cycles)
            if b > 0 else 0.0 for b, n in read_groups]


def reader_cycles(read_groups: Sequence[tuple[int, int]], c: CostConstants = COST) -> float:
    """One core's reader: the sum of its groups' `group_cycles`."""
    return float(sum(group_cycles(read_groups, c)))


def bank_floor_cycles(works: Sequence[CoreWork], c: CostConstants = COST) -> float:
    """Cycles the busiest bank needs for the whole step's traffic: each core's bytes at the bank-local
    efficiency when all its K/V came from one bank (CoreWork.bank_local), at the fitted interleaved
    efficiency otherwise (an ASSUMED mixture for batches with both kinds of cores; a step whose K/V
    readers are all bank-local, or none is, prices every byte at that one efficiency)."""
    if not works:
        return 0.0
    rate = c.dram_peak_bytes_per_cycle / c.dram_banks
    busy = np.zeros(c.dram_banks)
    for w in works:
        eff = c.dram_bank_local_efficiency if w.bank_local else c.dram_interleaved_efficiency
        busy = busy + np.asarray(w.bank_bytes, float) / (rate * eff)
    return float(busy.max())


def message_cycles(nbytes: float, hops: int, c: CostConstants = COST) -> float:
    """A partial's message: the write's setup, its bytes over the link, its hops, the semaphore."""
    return (c.noc_write_setup_cycles + nbytes / c.noc_bytes_per_cycle + hops * c.noc_hop_cycles
            + c.semaphore_handshake_cycles)

def critical_path(tree: Tree, per_merge: float, c: CostConstants = COST) -> tuple[float, list[tuple[int, int]]]:
    """tree_cycles of `tree` and the messages of the path that sets it (the child whose arrival
    started a merge late, else the node's earlier merges)."""
    t, path = 0.0, []
    for nbytes, hops, child in tree:
        tc, pc = critical_path(child, per_merge, c)
        arrive = tc + message_cycles(nbytes, hops, c)
        if arrive >= t:
            path = pc + [(nbytes, hops)]
        t = max(t, arrive) + per_merge
    return t, path

def tree_cycles(tree: Tree, per_merge: float, c: CostConstants = COST) -> float:
    """When a node of `tree` holds its subtree's partial, counted from the end of the (equal) local
    work: it merges its children in order, each merge (`per_merge`) starting once the node is free
    and that child's message has arrived (critical_path)."""
    return critical_path(tree, per_merge, c)[0]


def reduction_cycles(r: Reduction, fidelity: str, c: CostConstants = COST) -> tuple[float, dict[str, float]]:
    """(cycles, merge cycles per class) of the reduction: the slowest of the works' trees
    (`tree_cycles`); without trees, the path `rounds`, each round a message and one merge."""
    merge = sum_ops(r.merge_per_round, fidelity, c)
    per_merge = sum(merge.values())
    if r.trees:
        return max(tree_cycles(t, per_merge, c) for t in r.trees), merge
    return sum(message_cycles(nbytes, hops, c) + per_merge for nbytes, hops in r.rounds), merge


def core_cycles(w: CoreWork, reader: float, compute: float, c: CostConstants = COST) -> float:
    """One core's local time for its `reader` cycles (the DRAM floor included) and `compute` cycles:
    ``max(reader, compute) + min(reader, compute) / stages + CB handshakes``."""
    return (max(reader, compute) + min(reader, compute) / max(1, w.chunks)
            + w.cb_handshakes * c.cb_handshake_cycles)


def pipelined_cycles(w: CoreWork, reader: float, c: CostConstants = COST) -> float:
    """The local time of a work with a pipeline (CoreWork.pipeline): its groups' cycles stretched evenly to
    `reader` (the DRAM floor, when the banks' shares make its reads slower than its own rate), timed by
    pipeline_cycles, plus the CB handshakes."""
    groups = group_cycles(w.read_groups, c)
    scale = reader / sum(groups) if sum(groups) else 1.0
    q: list[float] = []
    k: list[list[float]] = []
    v: list[list[float]] = []
    at = 0
    for piece in w.pipeline:
        n = len(piece.chunk_tiles)
        q.append(groups[at] * scale)
        k.append([g * scale for g in groups[at + 1:at + 1 + 2 * n:2]])
        v.append([g * scale for g in groups[at + 2:at + 2 + 2 * n:2]])
        at += 1 + 2 * n
    if at != len(groups):
        raise ValueError(f"pipelined_cycles: {len(groups)} read groups for pieces that read {at}")
    return pipeline_cycles(w.pipeline, q, k, v, c.compute_startup_cycles) + w.cb_handshakes * c.cb_handshake_cycles


def index_read_cycles(reads: Sequence[tuple[str, int]], c: CostConstants = COST) -> float:
    """The reader's serial index reads (CoreWork.index_reads): from DRAM one read's latency and its bytes at
    the per-core plateau each; from an L1 shard `l1_index_read_cycles` each."""
    t = 0.0
    for mem, nbytes in reads:
        if mem == "dram":
            t += c.dram_latency_cycles + nbytes / c.core_read_plateau_bytes_per_cycle
        elif mem == "l1":
            t += c.l1_index_read_cycles
        else:
            raise ValueError(f"index_read_cycles: memory must be 'dram' or 'l1', got {mem!r}")
    return t


def shared_bank_floors(works: Sequence[CoreWork], bank_rate: float) -> list[float]:
    """Per work, when its DRAM reads can end if every bank serves its readers in fair shares of
    `bank_rate` bytes/cycle (readers beyond one per bank share the bank's rate): a reader of x bytes on
    bank b ends at sum_j min(x_j, x) / bank_rate over the readers j of b (processor sharing, all
    starting together), the latest over the banks it reads. Equals the busiest bank's load / rate for
    equal readers, its own bytes / rate for a reader alone."""
    loads = np.array([np.asarray(w.bank_bytes, float) for w in works]) if works else np.zeros((0, 0))
    out = []
    for x in loads:
        ends = [np.minimum(loads[:, b], x[b]).sum() / bank_rate for b in np.nonzero(x > 0)[0]]
        out.append(float(max(ends, default=0.0)))
    return out


def start_spread_cycles(cores: int, c: CostConstants = COST) -> float:
    """The launch skew of an op on `cores` cores: the first-to-last kernel start (COST_SOURCES
    "start_spread_cycles"): none on one core, the published spread on more."""
    return c.start_spread_cycles if cores > 1 else 0.0


def evaluate(works: Sequence[CoreWork], reduction: Reduction, fidelity: str,
             c: CostConstants = COST, cores: Optional[int] = None,
             floors: Optional[Sequence[float]] = None) -> Breakdown:
    """The step estimate for cores `works` and the tree `reduction` (see the module docstring): tt-metal's
    DEVICE KERNEL DURATION. `cores`: the cores the op starts (the launch skew spreads over them; None = the
    cores with work, len(works)). `floors`: per work, the cycles its reads take at least (shared_bank_floors);
    None = the busiest bank's floor for every work (bank_floor_cycles)."""
    floor = bank_floor_cycles(works, c) if floors is None else max(floors, default=0.0)
    best: tuple[float, float, dict[str, float]] = (0.0, 0.0, {})
    busiest = 0.0  # the longest core with the merges it runs counted as its compute
    for i, w in enumerate(works):
        # the index reads (cur_pos, the page table) come first: the reader needs them for its first
        # address and the compute for its chunk count, so nothing overlaps them
        idx = index_read_cycles(w.index_reads, c) + w.setup_cycles
        rd = max(reader_cycles(w.read_groups, c), floor if floors is None else floors[i])
        comp = sum_ops(w.compute, fidelity, c)
        if comp:  # the compute kernel's own init, once per core
            comp["startup"] = c.compute_startup_cycles
        cc = sum(comp.values())
        mg = sum(sum_ops(w.merge, fidelity, c).values())
        if w.pipeline:  # timed event by event; its merges fit beside its chunks at best as without it
            core = idx + pipelined_cycles(w, rd, c)
            busiest = max(busiest, core, idx + core_cycles(w, rd, cc + mg, c))
        else:
            core = idx + core_cycles(w, rd, cc, c)
            busiest = max(busiest, idx + core_cycles(w, rd, cc + mg, c))
        if core > best[0]:
            best = (core, idx + rd, comp)
    tree, _ = reduction_cycles(reduction, fidelity, c)
    # The merges run on the TRISCs of the cores that hold the parents: after the slowest core's local
    # work the tree still takes `tree`, and a core that runs many merges (several pieces with children,
    # in batched plans) must also fit them beside its own chunks. Both bound the step from below.
    red = max(tree, busiest - best[0])
    spread = start_spread_cycles(len(works) if cores is None else cores, c)
    total = spread + best[0] + red
    kv = sum(w.kv_bytes for w in works)
    us = 1e6 / c.clock_hz
    return Breakdown(
        total_us=total * us, start_spread_us=spread * us, local_us=best[0] * us, reader_us=best[1] * us,
        dram_floor_us=floor * us, compute_us={k: v * us for k, v in best[2].items()}, reduction_us=red * us,
        kv_bytes=kv, achieved_gbps=kv / (total * us * 1e-6) / 1e9 if total else 0.0, cores=len(works))
