"""An analytic Wormhole timing model of one FlashDecode step, driven by the host runtime's counters.

The host runtime runs the real kernels and counts what they did (``RunResult.counters``): DRAM
bytes per bank, NoC bytes between cores, tiles through each compute op and a program-order event
list per kernel. This module turns those counts into an estimated step time on a Wormhole chip.
Every figure is either a counter of the run or a constant of `WormholeConstants` (each with its
source in `CONSTANT_SOURCES`); nothing here is fitted to a measurement.

Model (times in cycles of the 1 GHz AI clock, reported in microseconds):

1. DRAM, per core. Pages are interleaved over the 12 banks; every bank serves its requests at
   1/12 of the peak. While all cores stream, a bank shares its bandwidth among its readers in
   proportion to what they ask for, so every reader of bank b is done with it when the bank has
   served its whole load ``L_b``: ``t = L_b / (peak / 12)``. A core is also limited by what one
   core can pull from DRAM (the ideal single-core read rate). Per core:
   ``t_dram = max(bytes_core / core_rate, max over the banks it reads of L_b / bank_rate)``.
2. Compute, per core: the math thread's cycles (FPU and SFPU ops; unpack and pack run on their
   own TRISCs and are assumed hidden). Matmul: cycles per 32x32x32 tile at the fidelity, scaled
   by the rows the kernel feeds as in0 (at least 8 rows: the engine's smallest in0 is 8x16, so
   fewer rows cost the same as 8). The kernels feed whole 32-row tiles for the g heads of a KV
   group, so a matmul costs a full tile and only g/32 of it is useful (reported).
3. Per core, DRAM and compute overlap through the two K/V chunk slots:
   ``t_core = max(D, C) + min(D, C) / chunks`` (the pipeline's fill or drain: one chunk of the
   shorter stage).
4. Reduction: the partials' messages are read from the writers' events (NoC writes to a core,
   closed by a semaphore increment to it) and matched to the plan's tree. A message costs
   ``bytes / 32 B per cycle + hops x 9 cycles`` (NoC 0, the writer's, is a one-way torus over
   the 10x12 tile grid). A parent merges its children in round order (the compute kernel's
   order), each merge costing the merge cycles measured from the compute events (ops between
   the wait for and the pop of the partial_in CB); the critical path is the latest root.
   The reduction term is that path, or the most merge work any one core does, whichever is
   longer.
5. Step time = max over cores of t_core (merges excluded) + the reduction term.

Not modelled: DRAM latency and request-issue overhead, DRAM page conflicts, NoC congestion on
the DRAM read paths, program launch/dispatch, unpack/pack limits. The estimate is therefore an
optimistic bound for a kernel of this structure, not a prediction of a measured device time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from ttdecode.formats import tile_size
from ttdecode.plan import DecodePlan, piece_range, tree_parent
from ttdecode.program import CoreCoord, KernelKind
from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS, KernelCounters, RunCounters

__all__ = [
    "WormholeConstants", "WORMHOLE", "CONSTANT_SOURCES", "Message", "CoreTime", "StepEstimate",
    "dram_seconds_per_core", "compute_cycles", "message_cycles", "noc_hops", "writer_messages",
    "tree_critical_path", "merge_cycles_per_core", "estimate_step", "format_estimate",
]

_OP = {name: code for code, name in EVENT_OPS.items()}
_COMPUTE_INDEX = {i: name for i, name in enumerate(COMPUTE_OPS)}


@dataclass(frozen=True)
class WormholeConstants:
    """Wormhole figures the model uses. Units in the names; sources in CONSTANT_SOURCES."""

    clock_hz: float = 1.0e9
    dram_peak_bytes_per_s: float = 288e9
    dram_banks: int = 12
    core_dram_read_bytes_per_cycle: float = 22.0
    noc_bytes_per_cycle: float = 32.0
    noc_hop_cycles: float = 9.0
    noc_grid: tuple[int, int] = (10, 12)  # tile columns, rows of the NoC torus
    worker_columns: tuple[int, ...] = (1, 2, 3, 4, 6, 7, 8, 9)  # NoC x of logical worker x
    worker_rows: tuple[int, ...] = (1, 2, 3, 4, 5, 7, 8, 9, 10, 11)  # NoC y of logical worker y
    matmul_tile_cycles_lofi: float = 16.0  # 32x32x32, in0 of 32 rows
    matmul_min_rows: int = 8  # smallest in0 the engine takes: fewer rows cost as much as 8
    fidelity_phases: Mapping[str, int] = field(
        default_factory=lambda: {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4})
    eltwise_tile_cycles: float = 8.0  # 8x16 per cycle; mul x fidelity phases
    reduce_tile_cycles: float = 4.0  # 16x16 per cycle; sum x fidelity phases, max not
    sfpu_lanes: int = 32
    # SFPU instructions per element (one instruction per cycle over 32 lanes): ASSUMED, see sources.
    sfpu_instructions_per_element: Mapping[str, float] = field(
        default_factory=lambda: {"exp": 24.0, "recip": 16.0, "log": 24.0, "max": 4.0, "scalar": 3.0})

    @property
    def bank_bytes_per_s(self) -> float:
        return self.dram_peak_bytes_per_s / self.dram_banks

    @property
    def core_dram_bytes_per_s(self) -> float:
        return self.core_dram_read_bytes_per_cycle * self.clock_hz


WORMHOLE = WormholeConstants()

CONSTANT_SOURCES: dict[str, str] = {
    "clock_hz": "Wormhole AI clock 1 GHz (REFERENCE.md section 2, tt-metal tech_reports)",
    "dram_peak_bytes_per_s": "288 GB/s GDDR6 at 12 GT/s, 12 banks (REFERENCE.md section 2, "
                             "tech_reports/Saturating_DRAM_bandwidth; 267 GB/s reached in a micro-benchmark)",
    "core_dram_read_bytes_per_cycle": "22 B/cycle: ideal DRAM read of one Wormhole B0 core (tt-metal "
                                      "tests/tt_metal/tt_metal/data_movement/documentation/ideal_performance.md)",
    "noc_bytes_per_cycle": "32-byte flit per cycle per link (REFERENCE.md section 2)",
    "noc_hop_cycles": "~9 cycles per router hop (REFERENCE.md section 2)",
    "noc_grid": "Wormhole NoC: a 10x12 tile torus; NoC 0 runs +x/+y; Tensix columns 1-4, 6-9 and rows 1-5, "
                "7-11 of an unharvested die (tt-isa-documentation WormholeB0/NoC); harvesting moves rows (+-hops)",
    "matmul_tile_cycles_lofi": "16/32/48/64 cycles per 32x32x32 tile at LoFi/HiFi2/HiFi3/HiFi4 (REFERENCE.md "
                               "section 2, tech_reports/GEMM_FLOPS)",
    "matmul_min_rows": "the engine multiplies 8x16 by 16x16 per cycle; in0 under 8 rows runs at 1/8 "
                       "efficiency (REFERENCE.md section 2; tech_reports/matrix_engine)",
    "eltwise_tile_cycles": "eltwise add/sub/mul 8x16 per cycle, mul divided by fidelity "
                           "(tt-metal tech_reports/matrix_engine/matrix_engine.md)",
    "reduce_tile_cycles": "reduce 16x16 per cycle, sum divided by fidelity, max not "
                          "(tt-metal tech_reports/matrix_engine/matrix_engine.md)",
    "sfpu_lanes": "SFPU: 32 lanes of 32 bits, one instruction per cycle (tt-isa-documentation "
                  "WormholeB0/TensixTile/TensixCoprocessor/VectorUnit.md)",
    "sfpu_instructions_per_element": "ASSUMED (no published per-op figure found): exp 24, recip 16, log 24, "
                                     "max 4, scalar multiply 3 instructions per element",
}


# ---- 1. DRAM -------------------------------------------------------------------------------------


def dram_seconds_per_core(bytes_by_core_bank: Mapping[CoreCoord, Sequence[int]],
                          c: WormholeConstants = WORMHOLE) -> dict[CoreCoord, float]:
    """Seconds each core spends on its DRAM traffic while all cores stream together.

    bytes_by_core_bank: per core, bytes per bank (reads and writes). A bank serves its total load
    at peak/banks bytes/s, shared in proportion to demand; a core also moves at most the
    single-core rate.
    """
    bank_load = np.zeros(c.dram_banks)
    for per_bank in bytes_by_core_bank.values():
        bank_load += np.asarray(per_bank, dtype=float)
    out: dict[CoreCoord, float] = {}
    for core, per_bank in bytes_by_core_bank.items():
        mine = np.asarray(per_bank, dtype=float)
        if mine.sum() == 0:
            out[core] = 0.0
            continue
        bank_floor = float(bank_load[mine > 0].max()) / c.bank_bytes_per_s
        out[core] = max(float(mine.sum()) / c.core_dram_bytes_per_s, bank_floor)
    return out


# ---- 2. compute ----------------------------------------------------------------------------------


def compute_cycles(tiles: Mapping[str, int], fidelity: str, c: WormholeConstants = WORMHOLE,
                   in0_rows: int = 32) -> float:
    """Math-thread cycles for `tiles` (op name -> tiles) at `fidelity` ("LoFi".."HiFi4").

    in0_rows: rows of the matmul in0 tiles the kernel feeds (32 for whole tiles); the engine
    charges at least `matmul_min_rows`. copy and pack cost as an eltwise op / nothing (pack runs
    on its own thread).
    """
    phases = c.fidelity_phases[fidelity]
    rows = max(c.matmul_min_rows, -(-in0_rows // c.matmul_min_rows) * c.matmul_min_rows)
    per_tile = {
        "matmul": c.matmul_tile_cycles_lofi * phases * rows / 32,
        "add": c.eltwise_tile_cycles, "sub": c.eltwise_tile_cycles, "copy": c.eltwise_tile_cycles,
        "add_bcast": c.eltwise_tile_cycles, "sub_bcast": c.eltwise_tile_cycles,
        "mul": c.eltwise_tile_cycles * phases, "mul_bcast": c.eltwise_tile_cycles * phases,
        "reduce_max": c.reduce_tile_cycles, "reduce_sum": c.reduce_tile_cycles * phases,
        "pack": 0.0,
    }
    elements_per_lane = 32 * 32 / c.sfpu_lanes
    for op, instr in c.sfpu_instructions_per_element.items():
        per_tile[op] = instr * elements_per_lane
    unknown = set(tiles) - set(per_tile)
    if unknown:
        raise KeyError(f"compute_cycles: no cost for ops {sorted(unknown)}")
    return float(sum(n * per_tile[op] for op, n in tiles.items()))


def merge_cycles_per_core(counters: RunCounters, partial_in_cb: int, fidelity: str,
                          c: WormholeConstants = WORMHOLE) -> dict[CoreCoord, float]:
    """Cycles of the compute ops each core runs while merging children's partials.

    The compute kernel waits for its partial_in pages before merging and pops them after, so the
    ops between a ``cb_wait`` and a ``cb_pop`` of `partial_in_cb` are merge work.
    """
    out: dict[CoreCoord, float] = {}
    for k in counters.kernels:
        if k.kind is not KernelKind.COMPUTE:
            continue
        tiles: dict[str, int] = defaultdict(int)
        inside = False
        for e in k.events:
            op, peer = int(e["op"]), int(e["peer"])
            if op == _OP["cb_wait"] and peer == partial_in_cb:
                inside = True
            elif op == _OP["cb_pop"] and peer == partial_in_cb:
                inside = False
            elif inside and op == _OP["compute"]:
                tiles[_COMPUTE_INDEX[peer]] += int(e["amount"]) * int(e["count"])
        out[k.core] = compute_cycles(tiles, fidelity, c)
    return out


def _event_count(k: KernelCounters, op: str, peer: int) -> int:
    ev = k.events
    mask = (ev["op"] == _OP[op]) & (ev["peer"] == peer)
    return int(ev["count"][mask].sum())


# ---- 4. the reduction ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One partial sent up the tree: `bytes` NoC-written from `src` to `dst`, closed by a semaphore
    increment; `seq` its place among src's messages. Tree fields are filled by matching the plan."""

    src: CoreCoord
    dst: CoreCoord
    bytes: int
    seq: int
    work: tuple[int, int] = (-1, -1)  # (user, kv head)
    child: int = -1  # piece index of the sender
    parent: int = -1
    round: int = -1


def noc_hops(src: CoreCoord, dst: CoreCoord, c: WormholeConstants = WORMHOLE) -> int:
    """Router hops from src to dst on NoC 0 (one-way torus, +x then +y) between logical workers."""
    def phys(core: CoreCoord) -> tuple[int, int]:
        x = c.worker_columns[core.x] if core.x < len(c.worker_columns) else core.x + 1
        y = c.worker_rows[core.y] if core.y < len(c.worker_rows) else core.y + 1
        return x, y

    (sx, sy), (dx, dy) = phys(src), phys(dst)
    return (dx - sx) % c.noc_grid[0] + (dy - sy) % c.noc_grid[1]


def message_cycles(nbytes: int, hops: int, c: WormholeConstants = WORMHOLE) -> float:
    """NoC cycles of one message: serialization at one flit per cycle plus the hop latency."""
    return nbytes / c.noc_bytes_per_cycle + hops * c.noc_hop_cycles


def writer_messages(counters: RunCounters) -> list[Message]:
    """The messages of every writer kernel, from its events: L1 writes to a core accumulate until
    a semaphore increment to that core closes them."""
    out: list[Message] = []
    for k in counters.kernels:
        if k.kind is not KernelKind.WRITER:
            continue
        pending: dict[int, int] = defaultdict(int)
        seq = 0
        for e in k.events:
            op, peer = int(e["op"]), int(e["peer"])
            if op == _OP["write_l1"]:
                pending[peer] += int(e["amount"]) * int(e["count"])
            elif op == _OP["sem_inc"]:
                for _ in range(int(e["count"])):
                    out.append(Message(k.core, counters.cores[peer], pending.pop(peer, 0), seq))
                    seq += 1
        if any(pending.values()):
            raise ValueError(f"writer on {k.core}: NoC writes to {sorted(pending)} with no semaphore increment")
    return out


def _match_tree(plan: DecodePlan, messages: list[Message]) -> list[Message]:
    """Attach (work, child, parent, round) to each message: a core's k-th message is its k-th
    non-root piece with work, in slot order (the writer's order)."""
    if plan.cur_pos is None:
        raise ValueError("the model needs the plan's positions (cur_pos) to match messages to the tree")
    by_src: dict[CoreCoord, list[Message]] = defaultdict(list)
    for m in messages:
        by_src[m.src].append(m)
    out: list[Message] = []
    for core, pieces in plan.core_pieces.items():
        senders = [p for p in pieces if p.parent_core is not None and not piece_range(
            plan.cur_pos[p.user], plan.fixed_chunk_tiles, plan.pieces_per_work, p.index,
            plan.sliding_window_size).empty]
        sent = sorted(by_src.get(core, []), key=lambda m: m.seq)
        if len(sent) != len(senders):
            raise ValueError(f"core {core}: {len(sent)} messages in the events, the plan has {len(senders)} senders")
        for p, m in zip(senders, sent):
            if m.dst != p.parent_core:
                raise ValueError(f"core {core}: message {m.seq} went to {m.dst}, the plan's parent is {p.parent_core}")
            r, parent = tree_parent(p.index)  # type: ignore[misc]
            out.append(Message(m.src, m.dst, m.bytes, m.seq, (p.user, p.kv_head), p.index, parent, r))
    return out


def tree_critical_path(messages: Iterable[Message], merge_cycles: float,
                       c: WormholeConstants = WORMHOLE) -> float:
    """Cycles from the moment every piece has its partial until the last root has merged all.

    For every work: a piece with no children is ready at 0; a parent takes its children in round
    order, each arriving at (child ready + message cycles) and costing `merge_cycles`.
    """
    children: dict[tuple[tuple[int, int], int], list[Message]] = defaultdict(list)
    for m in messages:
        children[(m.work, m.parent)].append(m)

    def ready(work: tuple[int, int], index: int) -> float:
        t = 0.0
        for m in sorted(children.get((work, index), []), key=lambda m: m.round):
            arrive = ready(work, m.child) + message_cycles(m.bytes, noc_hops(m.src, m.dst, c), c)
            t = max(t, arrive) + merge_cycles
        return t

    works = {w for (w, _) in children}
    return max((ready(w, 0) for w in works), default=0.0)


# ---- the estimate --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CoreTime:
    """One core's terms, in microseconds; `bytes_read` in bytes."""

    core: CoreCoord
    bytes_read: int
    dram_us: float
    compute_us: float  # excluding merges
    merge_us: float
    chunks: int
    overlapped_us: float


@dataclass(frozen=True)
class StepEstimate:
    """The model's answer for one FlashDecode step."""

    time_us: float
    local_us: float  # the slowest core's overlapped DRAM/compute
    reduction_us: float
    reduction_share: float  # reduction_us / time_us
    kv_bytes: int
    dram_bytes: int  # every DRAM byte read (K, V, Q, positions)
    achieved_gbps: float  # K/V bytes / time
    roofline_us: float  # K/V bytes at the DRAM peak
    bound: str  # "dram" or "compute": what sets the slowest core
    cores: tuple[CoreTime, ...]
    noc_bytes_per_round: tuple[int, ...]  # all messages of each round
    messages: int
    merge_us: float  # one merge
    matmul_useful_fraction: float  # g / rows fed per matmul tile
    fidelity: str

    @property
    def max_core_bytes(self) -> int:
        return max((c.bytes_read for c in self.cores), default=0)


def estimate_step(plan: DecodePlan, counters: RunCounters, c: WormholeConstants = WORMHOLE) -> StepEstimate:
    """Estimated Wormhole time of the run `counters` describes (made from `plan`)."""
    compute_k = [k for k in counters.kernels if k.kind is KernelKind.COMPUTE]
    fidelities = {str(k.settings.get("math_fidelity", "HiFi4")) for k in compute_k}
    if len(fidelities) > 1:
        raise ValueError(f"compute kernels with different fidelities: {sorted(fidelities)}")
    fidelity = fidelities.pop() if fidelities else "HiFi4"
    cb = {spec.name: spec.index for spec in plan.circular_buffers}
    kv_tile = tile_size(plan.kv_dtype)

    dram_by_core: dict[CoreCoord, np.ndarray] = defaultdict(lambda: np.zeros(c.dram_banks))
    read_by_core: dict[CoreCoord, int] = defaultdict(int)
    for k in counters.kernels:
        dram_by_core[k.core] += np.asarray(k.dram_read_bytes, float) + np.asarray(k.dram_write_bytes, float)
        read_by_core[k.core] += sum(k.dram_read_bytes)
    dram_s = dram_seconds_per_core(dram_by_core, c)

    kv_bytes = 0
    chunks: dict[CoreCoord, int] = {}
    for k in counters.kernels:
        if k.kind is KernelKind.READER:
            ev = k.events
            is_kv = (ev["op"] == _OP["read_dram"]) & (ev["amount"] == kv_tile)
            kv_bytes += int((ev["amount"][is_kv].astype(np.int64) * ev["count"][is_kv]).sum())
            chunks[k.core] = _event_count(k, "cb_push", cb["k"])

    merges = merge_cycles_per_core(counters, cb["partial_in"], fidelity, c)
    cores: list[CoreTime] = []
    for k in compute_k:
        total = compute_cycles(k.tiles, fidelity, c)
        local_c = (total - merges[k.core]) / c.clock_hz
        d = dram_s.get(k.core, 0.0)
        n = max(1, chunks.get(k.core, 1))
        overlapped = max(d, local_c) + min(d, local_c) / n
        cores.append(CoreTime(k.core, read_by_core[k.core], d * 1e6, local_c * 1e6,
                              merges[k.core] / c.clock_hz * 1e6, chunks.get(k.core, 0), overlapped * 1e6))

    msgs = _match_tree(plan, writer_messages(counters))
    per_merge = sum(merges.values()) / len(msgs) if msgs else 0.0
    path = tree_critical_path(msgs, per_merge, c)
    reduction = max(path, max(merges.values(), default=0.0)) / c.clock_hz * 1e6
    per_round = [0] * plan.rounds
    for m in msgs:
        per_round[m.round] += m.bytes

    slowest = max(cores, key=lambda t: t.overlapped_us) if cores else None
    local = slowest.overlapped_us if slowest else 0.0
    total_us = local + reduction
    return StepEstimate(
        time_us=total_us, local_us=local, reduction_us=reduction,
        reduction_share=reduction / total_us if total_us else 0.0,
        kv_bytes=kv_bytes, dram_bytes=counters.dram_read_bytes,
        achieved_gbps=kv_bytes / (total_us * 1e-6) / 1e9 if total_us else 0.0,
        roofline_us=kv_bytes / c.dram_peak_bytes_per_s * 1e6,
        bound="dram" if slowest is None or slowest.dram_us >= slowest.compute_us else "compute",
        cores=tuple(cores), noc_bytes_per_round=tuple(per_round), messages=len(msgs),
        merge_us=per_merge / c.clock_hz * 1e6,
        matmul_useful_fraction=min(plan.group_size, 32) / 32, fidelity=fidelity,
    )


def format_estimate(e: StepEstimate) -> str:
    """A few lines: time, bandwidth, terms, per-core bytes and NoC bytes per round."""
    per_core = sorted(t.bytes_read for t in e.cores)
    lines = [
        f"estimated step {e.time_us:.2f} us ({e.bound}-bound cores {e.local_us:.2f} us + reduction "
        f"{e.reduction_us:.2f} us = {100 * e.reduction_share:.1f}%); K/V {e.kv_bytes / 1e6:.3f} MB at "
        f"{e.achieved_gbps:.1f} GB/s (roofline {e.roofline_us:.2f} us)",
        f"cores {len(e.cores)}; bytes read per core min/median/max {per_core[0] if per_core else 0}/"
        f"{per_core[len(per_core) // 2] if per_core else 0}/{per_core[-1] if per_core else 0}; "
        f"fidelity {e.fidelity}; matmul useful fraction {e.matmul_useful_fraction:.3f}",
        f"NoC bytes per round {list(e.noc_bytes_per_round)}; {e.messages} messages; one merge {e.merge_us:.2f} us",
    ]
    return "\n".join(lines)
