"""A calibrated Wormhole cost model of one FlashDecode step: every cycle term with its source.

The project's only timing model. Besides bandwidth and FPU throughput it charges DRAM latency per
read barrier, the request issue rate, the per-core read plateau, the efficiency of interleaved
tile-by-tile reads, unpack and pack per tile, SFPU cycles counted from the LLK instruction
sequences, a per-tile-call overhead and a cost per configuration call (init / reconfig), CB and semaphore handshakes, the compute kernel's init and the launch skew between cores. All
results are MODEL ESTIMATES, not device measurements. Its users: `perf/sweep_flash_decode.py`,
`perf/bench_llama.py` and the per-chip term of `ttdecode.distributed.cost`.

Both kernels go through the same arithmetic:
- ours: `work_from_counters(plan, counters)` reads the host runtime's events (reads grouped by
  read barrier, compute calls with their tiles, merges between the wait and pop of partial_in);
- tt-metal's: `ttdecode.perf_model.ttmetal_structure.ttmetal_work(...)` writes its structure down as data.

A core is described by `CoreWork`; `evaluate(works, reduction, c)` gives a `Breakdown` (µs).
The NoC geometry (`noc_hops`) and the reading of the partials' messages from the writers' events
(`writer_messages`, `match_tree`) live here too.

Per core (cycles of the 1 GHz clock):
- reader: for every read-barrier group, ``latency + max(bytes / plateau, requests x issue)``; a bank
  floor ``bank_load / (peak/12 x efficiency)`` over all cores sharing the banks (the whole step's
  DRAM traffic, efficiency depending on interleaved vs bank-local placement).
- compute: per op, ``tiles x max(unpack, math) + tile calls x call overhead``, pack as its own op, every
  configuration call (init, reconfig) ``init_cycles``; SFPU math per tile from the
  instruction counts x the vector steps the call runs (32 for a full tile, 16 for VectorMode::R).
- the core: ``max(reader, compute) + min(reader, compute) / chunks`` (double-buffered chunks: one
  chunk of the shorter stage is not hidden) + CB handshakes; the same with the merges the core runs
  added to its compute bounds the step too (a core holding many parents in a batched plan).
Step (tt-metal's DEVICE KERNEL DURATION: first core's kernel start to last core's kernel end): the
start spread over the op's cores + max over cores + the reduction: each work's tree timed from the moment every piece
has its local work done, a parent merging its children one at a time in round order, each merge
starting when the parent is free and the child's message (setup, bytes, hops, semaphore) has arrived
(`Reduction.trees`); the slowest work's root ends the step.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ttdecode.core.formats import tile_size
# Plans are read by their fields (a ttdecode.ops.flash_decode.plan.DecodePlan, written "DecodePlan" in the
# annotations): the model never imports the planner; the planner calls the model (chunk_cap, key_row_pieces, ...).
from ttdecode.core.split import cyclic_pieces, dynamic_chunk_tiles, tree_parent, tree_rounds
from ttdecode.core.program_description import CoreCoord, KernelKind
from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS, RunCounters

__all__ = ["CostConstants", "COST", "COST_SOURCES", "OpTally", "CoreWork", "Reduction", "Breakdown",
           "sfpu_tile_cycles", "op_cycles", "reader_cycles", "bank_floor_cycles", "evaluate", "index_read_cycles",
           "start_spread_cycles",
           "work_from_counters", "op_class", "Message", "noc_hops", "writer_messages",
           "match_tree", "chunk_tile_ops", "merge_ops", "q_row_tiles", "split_floor_tiles", "row_steps"]

_OP = {name: code for code, name in EVENT_OPS.items()}

SFPU_OPS = ("exp", "exp_approx", "exp_bf16", "recip", "log", "max", "scalar", "ternary")


@dataclass(frozen=True)
class CostConstants:
    """Every constant of the model; units in the names; sources in COST_SOURCES (fitted ones say so)."""

    clock_hz: float = 1.0e9
    dram_peak_bytes_per_cycle: float = 288.0
    dram_banks: int = 12
    dram_latency_cycles: float = 384.0
    dram_request_issue_cycles: float = 6.8
    core_read_plateau_bytes_per_cycle: float = 22.3
    dram_bank_local_efficiency: float = 267.0 / 288.0
    dram_interleaved_efficiency: float = 0.66  # sourced: 189.8 / 288 = 0.659 (DRAMTile README), see sources
    dram_interleaved_efficiency_noc1: float = 82.1 / 288.0  # sourced, the same benchmark on NoC 1 (not used by reads)
    noc_bytes_per_cycle: float = 32.0
    noc_hop_cycles: float = 9.0
    noc_grid: tuple[int, int] = (10, 12)  # tile columns, rows of the NoC torus
    worker_columns: tuple[int, ...] = (1, 2, 3, 4, 6, 7, 8, 9)  # NoC x of logical worker x
    worker_rows: tuple[int, ...] = (1, 2, 3, 4, 5, 7, 8, 9, 10, 11)  # NoC y of logical worker y
    noc_write_setup_cycles: float = 40.0  # ASSUMED
    semaphore_handshake_cycles: float = 100.0  # ASSUMED
    cb_handshake_cycles: float = 20.0  # ASSUMED, per cb push/wait pair
    start_spread_cycles: float = 2315.9  # sourced: the first-to-last kernel start of tt-metal's decode op, see sources
    compute_startup_cycles: float = 380.0  # sourced (a range, its midpoint): the compute kernel's own init
    l1_index_read_cycles: float = 150.0  # ASSUMED: a NoC read of a few bytes from an L1 shard (cur_pos, page table)
    split_compute_margin: float = 0.10  # ASSUMED: the split's choices keep this much compute under the floor
    tile_call_cycles: float = 20.0  # ASSUMED: the TRISC overhead of one LLK tile call
    init_cycles: float = 60.0  # ASSUMED: one configuration call (an op's init, a data-format reconfig)
    unpack_address_cycles: float = 2.0
    unpack_bytes_per_cycle: float = 64.0
    packer_bytes_per_cycle: float = 16.0  # per packer; a tile's faces are packed in parallel
    intermediate_tile_bytes: int = 2048  # bf16 tile, the unit unpack/pack costs are charged on
    matmul_tile_cycles_lofi: float = 16.0
    matmul_min_rows: int = 8
    eltwise_tile_cycles: float = 8.0  # 8x16 per cycle
    reduce_tile_cycles: float = 4.0  # 16x16 per cycle
    sfpu_steps_per_tile: int = 32
    # SFPU instructions per 32-lane vector step (one instruction per cycle), counted from the LLK
    sfpu_instructions_per_step: Mapping[str, float] = field(default_factory=lambda: {
        "exp": 40.0, "exp_bf16": 22.0, "recip": 18.0, "log": 30.0, "max": 6.0, "scalar": 5.0,
        "ternary": 7.0})
    exp_approx_tile_cycles: float = 70.7
    fidelity_phases: Mapping[str, int] = field(
        default_factory=lambda: {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4})


COST = CostConstants()

COST_SOURCES: dict[str, str] = {
    "clock_hz": "Wormhole AI clock 1 GHz (REFERENCE.md section 2)",
    "dram_peak_bytes_per_cycle": "288 GB/s, 12 GDDR6 banks (REFERENCE.md section 2, tech_reports/Saturating_DRAM_bandwidth)",
    "dram_banks": "12 GDDR6 banks (REFERENCE.md section 2)",
    "dram_latency_cycles": "~384 cycles for a first small DRAM read (tt-metal tests/tt_metal/tt_metal/data_movement/"
                           "documentation; REFERENCE.md section 4); charged once per read barrier",
    "dram_request_issue_cycles": "about one read request per 6.8 cycles at a DRAM endpoint per NoC (tt-metal issue "
                                 "#55898; REFERENCE.md section 4)",
    "core_read_plateau_bytes_per_cycle": "22.3 B/cycle: one core's interleaved DRAM read plateau (data_movement "
                                         "perf_plots 'DRAM Interleaved Packet Sizes'; REFERENCE.md section 4)",
    "dram_bank_local_efficiency": "267/288 = 92.7%: the DRAM micro-benchmark with one bank-local reader per bank "
                                  "(tech_reports/Saturating_DRAM_bandwidth)",
    "dram_interleaved_efficiency": "0.66 of the bank peak for interleaved reads from every core: 12 readers paired "
                                   "randomly with banks reach 189.8 GB/s on NoC 0 (tt-isa-documentation WormholeB0/"
                                   "DRAMTile/README.md; 189.8/288 = 0.659, kept at 0.66, the value it had when it was "
                                   "fitted on the FlashDecode tech report's ~180 GB/s, so the planner's choices stay "
                                   "put); the tech report is now an independent check (perf/calibrate_model.py)",
    "dram_interleaved_efficiency_noc1": "82.1/288: the same benchmark's readers on NoC 1 (DRAMTile/README.md); only "
                                        "the calibration row uses it: tt-metal reads DRAM on NoC 0 on Wormhole "
                                        "(its preferred DRAM-read NoC) and so do our readers",
    "noc_bytes_per_cycle": "32-byte flit per cycle per link (REFERENCE.md section 2)",
    "noc_hop_cycles": "~9 cycles per router hop (REFERENCE.md section 2)",
    "noc_grid": "Wormhole NoC: a 10x12 tile torus; NoC 0 runs +x/+y (tt-isa-documentation WormholeB0/NoC)",
    "worker_columns": "Tensix columns 1-4, 6-9 of the NoC grid (column 5 is DRAM/ARC; tt-isa-documentation WormholeB0/NoC)",
    "worker_rows": "Tensix rows 1-5, 7-11 of an unharvested die (tt-isa-documentation WormholeB0/NoC); harvesting "
                   "moves rows (+-hops)",
    "noc_write_setup_cycles": "ASSUMED: issuing one NoC write (command buffer setup) from a RISC-V, ~40 cycles",
    "semaphore_handshake_cycles": "ASSUMED: write barrier + semaphore increment + the receiver's poll, ~100 cycles",
    "cb_handshake_cycles": "ASSUMED: one CB push/wait pair between RISC-Vs (L1 pointer update + poll), ~20 cycles",
    "start_spread_cycles": "the launch skew inside tt-metal's DEVICE KERNEL DURATION (first core's kernel start to "
                           "the last core's kernel end; not firmware start, dispatch or the completion handshake): "
                           "FIRST TO LAST START 2315.9 ns of the Galaxy Llama-70B decode SDPA on 32 cores "
                           "(tt-metal models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_6u.json; 6U, 1 GHz, so "
                           "2316 cycles); a published 64-core Wormhole trace's median is 1906 ns (tt-perf-report "
                           "tests/data/wh_clip_encoder_2.csv): no growth with the core count, so one spread for any op "
                           "on more than one core, 0 on one core. evaluate charges it whole: at the calibration points "
                           "every core has the same work, so the last core to start is the last to finish; NOT fitted",
    "compute_startup_cycles": "the compute kernel's own init (hw configure, the first op's init) inside the kernel "
                              "zone: LLK harness INIT zones 250-510 cycles (tt-metal issue #51592), the midpoint; "
                              "charged once per core to its compute (it runs while the first read is in flight, so "
                              "the overlap hides part of it)",
    "l1_index_read_cycles": "ASSUMED: reading cur_pos or the page table from an L1 shard instead of DRAM: a NoC read "
                            "round trip of a few bytes (~2 x 4 hops x 9 cycles + command setup), ~150 cycles, against "
                            "dram_latency_cycles from DRAM; used by tt-metal's structure (index_memory)",
    "split_compute_margin": "ASSUMED: the plan's choice of pieces (tile_pieces, key_row_pieces) counts a core's "
                            "closed-form compute 10% dearer, so it does not bet on a few % of slack under the DRAM "
                            "floor with call and init costs that are themselves assumed (the sensitivity table: "
                            "x0.5 / x2 on them moves the Galaxy point by 5-15%); the step estimates do not use it",
    "tile_call_cycles": "ASSUMED: the instructions a TRISC issues around one LLK tile call (address setup, MOP "
                        "start, semaphore / context toggles, the Dst address clear), ~20 cycles; charged per tile call "
                        "(copy_tile, exp_tile, pack_tile, one matmul_block, ...) in both kernels",
    "init_cycles": "ASSUMED: one configuration call (an op's *_init, a data-format reconfig: unpack/math/pack "
                   "config writes behind a stall), ~60 cycles; ours counted by the runtime (op 'init'), tt-metal's "
                   "one per op block of its compute kernel",
    "unpack_address_cycles": "2 cycles of address calculation per unpack (tt-isa-documentation UNPACR_Regular.md)",
    "unpack_bytes_per_cycle": "L1 fetch at up to 64 B/cycle per unpacker (UNPACR_Regular.md: x1/x2/x4 = 16/32/64 B "
                              "per cycle; the LLK sets Throttle_mode 2, x4, cunpack_common.h); two unpackers "
                              "fetching at once get x2 each (UNPACR_Regular.md), so the bytes of both operands of an "
                              "op are charged at 64 B/cycle in all; plus the 2 address cycles per unpacked tile",
    "packer_bytes_per_cycle": "one 128-bit L1 write per cycle per packer, four packers (tt-isa-documentation L1.md); "
                              "the LLK packs a tile's faces on as many packers at once (llk_pack.h: "
                              "PACK_SEL(num_faces)), so a pack takes a face's bytes / 16 cycles: a 16x32 tile's two "
                              "faces on two packers, a 32x32 tile's four on four",
    "intermediate_tile_bytes": "bf16 tile = 2048 B (REFERENCE.md section 2)",
    "matmul_tile_cycles_lofi": "32x32x32 tile 16/32/48/64 cycles at LoFi..HiFi4 (tech_reports/matrix_engine)",
    "matmul_min_rows": "the engine multiplies 8x16 by 16x16 per cycle: in0 under 8 rows costs 8 rows (GEMM_FLOPS)",
    "eltwise_tile_cycles": "eltwise 8x16 elements per cycle: 8 cycles per tile, mul x fidelity phases "
                           "(tech_reports/matrix_engine/matrix_engine.md)",
    "reduce_tile_cycles": "reduce 16x16 per cycle: 4 cycles per tile, sum x fidelity phases (matrix_engine.md)",
    "sfpu_steps_per_tile": "a 32x32 tile is 32 SFPU vector steps of 32 lanes (VectorUnit.md); VectorMode::R "
                           "(rows of faces 0-1 only) runs 16",
    "sfpu_instructions_per_step": "counted from the LLK in the ttnn 0.81.1 wheel (llk_sfpu/): exp_bf16 22 = "
                                  "BODY_LEN of _sfpu_exp_21f_bf16_tti_ (17 + scale 2 + bf16 rounding 1 + clamp 2); "
                                  "exp (fp32 Dst, _sfpu_exp_fp32_accurate_) ~40 (11 MAD/MUL, 2 converts, abs, "
                                  "copysgn, exexp/setexp, 2 int adds, 2 conditionals, load/store, NOPs after "
                                  "dependent MADs); recip ~18 (sfpu_reciprocal_iter + scale/sign); log ~30; "
                                  "binary max/add/sub/mul on Dst ~6 (2 loads, op, NOP, store, incr); scalar ~5; "
                                  "ternary (addcmul_tile, ckernel_sfpu_addcmul.h) ~7: per two rows 6 loads, "
                                  "2 SFPMUL, 2 SFPMAD, 2 stores and the Dst increment (6.5 per row, rounded up)",
    "exp_approx_tile_cycles": "fast approximate exp ~70.7 cycles per tile on Wormhole (tt-llk PR #1190)",
}


# ---- the NoC and the reduction tree: messages read from the writers' events --------------------


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


def worker_noc_xy(core: CoreCoord, c: CostConstants = COST) -> tuple[int, int]:
    """NoC 0 (x, y) of the logical worker `core`."""
    x = c.worker_columns[core.x] if core.x < len(c.worker_columns) else core.x + 1
    y = c.worker_rows[core.y] if core.y < len(c.worker_rows) else core.y + 1
    return x, y


def noc_hops(src: CoreCoord, dst: CoreCoord, c: CostConstants = COST) -> int:
    """Router hops from src to dst on NoC 0 (one-way torus, +x then +y) between logical workers."""
    (sx, sy), (dx, dy) = worker_noc_xy(src, c), worker_noc_xy(dst, c)
    return (dx - sx) % c.noc_grid[0] + (dy - sy) % c.noc_grid[1]


#: NoC 0 (x, y) of the three DRAM tiles of each GDDR6 group D0..D5 (two channels, i.e. two of the 12
#: banks, per group: bank b in group b // 2); tt-isa-documentation Diagrams/Src/NoC.lua (TileLabel).
DRAM_GROUP_TILES = (((0, 0), (0, 1), (0, 11)), ((0, 5), (0, 6), (0, 7)), ((5, 0), (5, 1), (5, 11)),
                    ((5, 2), (5, 9), (5, 10)), ((5, 3), (5, 4), (5, 8)), ((5, 5), (5, 6), (5, 7)))


def dram_return_hops(bank: int, core: CoreCoord, c: CostConstants = COST) -> int:
    """Fewest NoC 0 hops (one-way torus, +x then +y) from one of bank `bank`'s DRAM tiles to the
    logical worker `core`: the way read data comes back. Used to keep cores near their bank
    (plan.key_row_placement); the model prices no DRAM hops."""
    x, y = worker_noc_xy(core, c)
    return min((x - dx) % c.noc_grid[0] + (y - dy) % c.noc_grid[1] for dx, dy in DRAM_GROUP_TILES[bank // 2])


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


def match_tree(plan: Any, messages: list[Message]) -> list[Message]:
    """Attach (work, child, parent, round) to each message: a core's k-th message is its k-th
    non-root piece with work, in slot order (the writer's order)."""
    if plan.cur_pos is None:
        raise ValueError("the model needs the plan's positions (cur_pos) to match messages to the tree")
    by_src: dict[CoreCoord, list[Message]] = defaultdict(list)
    for m in messages:
        by_src[m.src].append(m)
    out: list[Message] = []
    for core, pieces in plan.core_pieces.items():
        senders = [p for p in pieces if p.parent_core is not None and not plan.range_at(
            plan.cur_pos[p.user], p.index).empty]
        sent = sorted(by_src.get(core, []), key=lambda m: m.seq)
        if len(sent) != len(senders):
            raise ValueError(f"core {core}: {len(sent)} messages in the events, the plan has {len(senders)} senders")
        for p, m in zip(senders, sent):
            if m.dst != p.parent_core:
                raise ValueError(f"core {core}: message {m.seq} went to {m.dst}, the plan's parent is {p.parent_core}")
            r, parent = tree_parent(p.index)  # type: ignore[misc]
            out.append(Message(m.src, m.dst, m.bytes, m.seq, (p.user, p.kv_head), p.index, parent, r))
    return out


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


def _l1_bytes(t: OpTally, op: str, c: CostConstants = COST) -> float:
    """A tally's L1 bytes as op_cycles charges them."""
    if t.l1_bytes is not None:
        return t.l1_bytes
    return t.tiles * c.intermediate_tile_bytes * (1.0 if op == "matmul" else t.steps / c.sfpu_steps_per_tile)


def _sum_ops(ops: Mapping[str, Sequence[OpTally]], fidelity: str, c: CostConstants) -> dict[str, float]:
    by_class: dict[str, float] = defaultdict(float)
    for op, tallies in ops.items():
        for t in tallies:
            by_class[op_class(op)] += op_cycles(op, t, fidelity, c)
    return dict(by_class)


def reader_cycles(read_groups: Sequence[tuple[int, int]], c: CostConstants = COST) -> float:
    """One core's reader: per barrier group, the first read's latency then the stream at the per-core
    plateau or the request issue rate, whichever is slower."""
    return float(sum(c.dram_latency_cycles + max(b / c.core_read_plateau_bytes_per_cycle,
                                                 n * c.dram_request_issue_cycles)
                     for b, n in read_groups if b > 0))


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


def tree_cycles(tree: Tree, per_merge: float, c: CostConstants = COST) -> float:
    """When a node of `tree` holds its subtree's partial, counted from the end of the (equal) local
    work: it merges its children in order, each merge (`per_merge`) starting once the node is free
    and that child's message has arrived (_critical_path)."""
    return _critical_path(tree, per_merge, c)[0]


def reduction_cycles(r: Reduction, fidelity: str, c: CostConstants = COST) -> tuple[float, dict[str, float]]:
    """(cycles, merge cycles per class) of the reduction: the slowest of the works' trees
    (`tree_cycles`); without trees, the path `rounds`, each round a message and one merge."""
    merge = _sum_ops(r.merge_per_round, fidelity, c)
    per_merge = sum(merge.values())
    if r.trees:
        return max(tree_cycles(t, per_merge, c) for t in r.trees), merge
    return sum(message_cycles(nbytes, hops, c) + per_merge for nbytes, hops in r.rounds), merge


def core_cycles(w: CoreWork, reader: float, compute: float, c: CostConstants = COST) -> float:
    """One core's local time for its `reader` cycles (the DRAM floor included) and `compute` cycles:
    ``max(reader, compute) + min(reader, compute) / stages + CB handshakes``."""
    return (max(reader, compute) + min(reader, compute) / max(1, w.chunks)
            + w.cb_handshakes * c.cb_handshake_cycles)


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


def start_spread_cycles(cores: int, c: CostConstants = COST) -> float:
    """The launch skew of an op on `cores` cores: the first-to-last kernel start (COST_SOURCES
    "start_spread_cycles"): none on one core, the published spread on more."""
    return c.start_spread_cycles if cores > 1 else 0.0


def evaluate(works: Sequence[CoreWork], reduction: Reduction, fidelity: str,
             c: CostConstants = COST, cores: Optional[int] = None) -> Breakdown:
    """The step estimate for cores `works` and the tree `reduction` (see the module docstring): tt-metal's
    DEVICE KERNEL DURATION. `cores`: the cores the op starts (the launch skew spreads over them; None = the
    cores with work, len(works))."""
    floor = bank_floor_cycles(works, c)
    best: tuple[float, float, dict[str, float]] = (0.0, 0.0, {})
    busiest = 0.0  # the longest core with the merges it runs counted as its compute
    for w in works:
        # the index reads (cur_pos, the page table) come first: the reader needs them for its first
        # address and the compute for its chunk count, so nothing overlaps them
        idx = index_read_cycles(w.index_reads, c)
        rd = max(reader_cycles(w.read_groups, c), floor)
        comp = _sum_ops(w.compute, fidelity, c)
        if comp:  # the compute kernel's own init, once per core
            comp["startup"] = c.compute_startup_cycles
        cc = sum(comp.values())
        mg = sum(_sum_ops(w.merge, fidelity, c).values())
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


# ---- our kernels' split: how many key tiles a piece must hold for one more tree round to pay ------


def row_steps(head_rows: int) -> int:
    """Vector steps of a row-wise SFPU call of our chunk for `head_rows` q rows holding heads
    (kernels/flash_decode/compute.cpp): VectorMode::R on faces 0-1 with 2 x ceil(rows / 4) steps per face when
    they fit 16 rows (a step covers four rows, even or odd columns), else the whole tile (32)."""
    if head_rows > 16:
        return 32
    return 2 * 2 * -(-head_rows // 4)


def q_row_tiles(ops: dict[str, list[OpTally]], q_tile_rows: int) -> dict[str, list[OpTally]]:
    """`ops` of our kernel with its q-row CBs in tiles of `q_tile_rows` rows (DecodePlan.q_tile_rows): at
    16 (16x32 tiles) every matmul feeds 16 rows of in0 and every copy and pack moves half a tile (16
    vector steps' worth, as the runtime records them); at 8 (8x32 tiles) a matmul feeds 8 rows and a pack
    moves a quarter of a tile, but a copy's datacopy still moves 16 rows per face (its bytes are the
    caller's: copy_l1_rows). The closed forms below count calls and tiles, the same for every shape."""
    if q_tile_rows == 32:
        return ops
    out: dict[str, list[OpTally]] = {}
    for op, tallies in ops.items():
        if op == "matmul":
            out[op] = [replace(t, rows=min(t.rows, q_tile_rows)) for t in tallies]
        elif op == "copy":
            out[op] = [replace(t, steps=min(t.steps, 16)) for t in tallies]
        elif op == "pack":
            out[op] = [replace(t, steps=min(t.steps, q_tile_rows)) for t in tallies]
        else:
            out[op] = list(tallies)
    return out


def copy_l1_rows(q_tile_rows: int, im_bytes: int) -> int:
    """Rows of a q-row tile a copy into DST reads from L1: the tile's, except 8x32 fp32 tiles unpacked to
    an fp32 DST, which the unpacker reads 16 rows per face once one unpack to DST has left its X-end at a
    whole face (the LLK's TEN-3868 workaround, cunpack_common.h; only an init resets it, and the kernel
    inits a copy once per run of copies)."""
    return 16 if q_tile_rows == 8 and im_bytes == 4 else q_tile_rows


def exp_steps(exp: str, steps: int) -> int:
    """Vector steps an exp over `steps` asked steps runs: the approximate exp (ClampToNegative, the
    SFPLOADMACRO path) is unrolled for 8 steps per face and ignores ITERATIONS (ckernel_sfpu_exp.h,
    tt-llk#1486), so it runs whole faces: 8 per face of the ones asked."""
    if exp != "exp_approx":
        return steps
    return 8 * -(-steps // 8)


def chunk_tile_ops(q_tiles: int, d_tiles: int, dv_tiles: int, dst_tiles: int = 4,
                   exp: str = "exp", head_rows: int = 32, running: bool = False,
                   prescale_q: bool = False, q_tile_rows: int = 32, mla: bool = False,
                   kv_tile_bytes: int = 1088, finish: bool = False, im_bytes: int = 4) -> dict[str, list[OpTally]]:
    """The compute ops one more key tile adds to a chunk of our kernel (kernels/flash_decode/compute.cpp), per q tile
    row: Q.K^T and P.V and the row sum (d + dv + 1 matmul tiles; Q.K^T in one matmul_block call per d
    and DST block of dst_tiles key tiles (no mask added in the block), P.V one per DST block of
    dst_tiles - 1 Dv tiles, the row sum one call per key tile), the scale, the exp, the two copies of
    the logits (row max, probabilities), the row max's element-wise fold (one SFPU row reduction per
    chunk, not per tile) and the subtraction, two packs (scores, probabilities). Each DST block of
    dst_tiles - 1 probabilities adds one more copy, m_new broadcast along its rows, and its
    configuration calls (the subtraction and the exp make none per block: the accurate exp's state
    serves the subtraction and LReg[12..14] keep its constants, compute_tiles.hpp SfpuInit):
    - `running` False, the first chunk of a piece (no running set; the split floor's pieces of at most
      8 tiles): m_new broadcast from column 0 into each block (below 3 blocks, the kernel's
      max_bcast_tile): a copy init and a broadcast init (2);
    - `running` True, a chunk that rescales a running set: m_new copied from cb_max_bcast (made in
      the alpha pass) under the logits' copy init: none (the copy, matmul and scale inits are made
      once per chunk).
    `head_rows` (the q rows holding heads, tokens x group): the scale, the exp, the fold and the
    subtraction run `row_steps(head_rows)` vector steps. `prescale_q` (a power-of-two scale, Q scaled once
    per piece): no scale op. `q_tile_rows` 16 / 8: 16x32 / 8x32 q tiles (q_row_tiles, copy_l1_rows). The row sum P x ones rides in
    P.V's last matmul_block (the V slot's ones tile after each key tile row) when that block leaves a DST
    tile free (Dv tiles not a multiple of the block), else one matmul_tiles call per key tile; with `mla`
    (V in the K slot, no ones tile there) or `finish` (the root's last chunk when it rescales a running set
    or writes the LSE: 1/l is needed before P.V's blocks) always the latter; the root's only chunk with
    no LSE (kernels/flash_decode/compute.cpp finish_single_chunk) is priced as a first chunk (the sum rides in P.V). L1 bytes (`kv_tile_bytes` a K/V tile):
    Q.K^T's in1 K tiles and per call its in0 Q (bf16), P.V's in1 V and ones tiles (V's format; with MLA
    the ones tile is bf16) and per call its in0 probabilities; copies and packs of q-row tiles of the
    intermediates' `im_bytes`-byte data (fp32 4 with an fp32 DST, bf16 2 with a bf16 DST). Pinned against real runs in tests/test_costmodel.py."""
    block = 1 / max(1, dst_tiles - 1)
    rows = row_steps(head_rows)
    pv_calls = -(-dv_tiles // max(1, dst_tiles - 1))  # P.V: one matmul_block per key tile and Dv block
    # the row sum in P.V's last block (chunk_output's with_sum) or on its own (chunk_row_sum)
    sum_block = max(1, dst_tiles - 1) if running else max(1, dst_tiles)
    sum_calls = 1 if mla or finish or dv_tiles % sum_block == 0 else 0
    # Q.K^T: one matmul_block per d and DST block of key tiles; the row sum one call per key tile
    qk_calls = d_tiles / max(1, dst_tiles)
    inits = q_tiles * (0 if running else 2) * block
    f32, bf16 = _q_row_bytes(im_bytes, q_tile_rows), _q_row_bytes(2, q_tile_rows)
    copied = _q_row_bytes(im_bytes, copy_l1_rows(q_tile_rows, im_bytes))
    qk_n, pv_n = q_tiles * qk_calls, q_tiles * (pv_calls + sum_calls)
    ones = 2048 if mla else kv_tile_bytes
    copies = q_tiles * (2 + block)
    return q_row_tiles({"matmul": [
                OpTally(q_tiles * d_tiles, qk_n, l1_bytes=q_tiles * d_tiles * kv_tile_bytes + qk_n * bf16,
                        unpacks=q_tiles * d_tiles + qk_n),
                OpTally(q_tiles * (dv_tiles + 1), pv_n,
                        l1_bytes=q_tiles * (dv_tiles * kv_tile_bytes + ones) + pv_n * f32,
                        unpacks=q_tiles * (dv_tiles + 1) + pv_n)],
            "init": [OpTally(inits, inits)] if inits else [],
            "scalar": [] if prescale_q else [OpTally(q_tiles, q_tiles, steps=rows)],
            exp: [OpTally(q_tiles, q_tiles, steps=exp_steps(exp, rows))],
            "copy": [OpTally(copies, round(copies), l1_bytes=copies * copied, unpacks=copies)],
            # the row max's element-wise fold and the subtraction of the max
            "max": [OpTally(2 * q_tiles, 2 * q_tiles, steps=rows)],
            "pack": [OpTally(2 * q_tiles, 2 * q_tiles, l1_bytes=2 * q_tiles * f32)]}, q_tile_rows)


def _q_row_bytes(datum_bytes: int, q_tile_rows: int) -> int:
    """L1 bytes of one q-row tile (q_tile_rows x 32) of `datum_bytes`-byte data (fp32 4, bf16 2)."""
    return datum_bytes * 32 * q_tile_rows


def chunk_ops(q_tiles: int, dv_tiles: int, exp: str = "exp", head_rows: int = 32,
              q_tile_rows: int = 32, mla: bool = False, im_bytes: int = 4) -> dict[str, list[OpTally]]:
    """The fixed compute ops of a chunk that rescales a running set (kernels/flash_decode/compute.cpp), beyond its
    key tiles' chunk_tile_ops, per q tile row: the row max's SFPU row reduction (a full tile), m_new
    against the running max, alpha's subtraction and exp, the rescale of l and of O (a multiply per Dv
    tile), the copies in and packs out of the running set, and the configuration calls that the
    chunk's change of ops makes (about 18 + Dv tiles). Read off real runs of 8-tile chunks (a piece of
    3 chunks minus one of 2, less 8 x chunk_tile_ops): copies 5 + Dv + Dv // 3, packs 4 + Dv, row-wise
    binary ops 2 + Dv, exactly at Dv 1-8 tiles; configuration calls within 2; pinned in
    tests/test_costmodel.py. For the plan's choice of key_row pieces (key_row_pieces)."""
    row = row_steps(head_rows)
    copies = q_tiles * (5 + dv_tiles + dv_tiles // 3)
    packs = q_tiles * (4 + dv_tiles)
    f32 = _q_row_bytes(im_bytes, q_tile_rows)  # the running set, the scores and the factors (fp32 or bf16)
    copied = _q_row_bytes(im_bytes, copy_l1_rows(q_tile_rows, im_bytes))
    # without MLA the row sum's in1 is the V slot's ones tile: no matmul init and no srcA reconfig
    # (to cb_ones and back) of its own
    inits = (18 if mla else 16) + dv_tiles
    return q_row_tiles({"init": [OpTally(inits, inits)],
                        "copy": [OpTally(copies, copies, l1_bytes=copies * copied, unpacks=copies)],
                        "max": [OpTally(q_tiles * (2 + dv_tiles), q_tiles * (2 + dv_tiles), steps=row),
                                OpTally(q_tiles, q_tiles)],
                        exp: [OpTally(q_tiles, q_tiles, steps=exp_steps(exp, row))],
                        "pack": [OpTally(packs, packs, l1_bytes=packs * f32)]}, q_tile_rows)


def merge_ops(q_tiles: int, dv_tiles: int, exp: str = "exp", head_rows: int = 32,
              dst_tiles: int = 4, q_tile_rows: int = 32, im_bytes: int = 4) -> dict[str, list[OpTally]]:
    """The compute ops of one merge of a child's partial (kernels/flash_decode/compute.cpp merge_child), per q
    tile row: the factors (two copies, a max, two subtractions and two exps on the statistics'
    column: faces 0 and 2, or with <= 16 head rows face 0's head rows; three packs), l on the same
    lanes (four copies: l, the child's l and the two factors as they lie; a multiply, an addcmul, a
    pack), then O in blocks of dst_tiles - 2 tiles per DST acquire (per block the O tiles and the
    child's, and two broadcasts: e_own, then e_child; per tile a multiply and an addcmul on the head
    rows and a pack). Pinned against real runs in tests/test_costmodel.py."""
    row = row_steps(head_rows)
    stat = row // 2 if head_rows <= 16 else 16  # VectorMode::None with the head rows' steps, else C
    blocks = -(-dv_tiles // max(1, dst_tiles - 2))
    # inits per q tile row: the max and the subtraction of the factors (their exp and the multiply of
    # l and O ride on them: the accurate exp's state serves the binary family and LReg[12..14] keep its
    # constants since the chunks' exp; compute_tiles.hpp SfpuInit), and per O block a broadcast and a
    # copy init (the factors, l and the block's first tiles share the copy init: one unpack path). Plus
    # about one per merge: the first merge after the chunks re-inits the copy and reconfigures srcB, the
    # next ones neither.
    inits = q_tiles * (2 + 2 * blocks) + 1
    copies = q_tiles * (6 + 2 * dv_tiles + 2 * blocks)
    packs = q_tiles * (4 + dv_tiles)
    f32 = _q_row_bytes(im_bytes, q_tile_rows)  # partials, statistics and factors (fp32 or bf16 tiles)
    # with 8x32 fp32 tiles the first copy or broadcast after each of their inits (two per O block, and
    # about one per merge) reads the tile's 8 rows, the later ones 16 (copy_l1_rows)
    first = q_tiles * 2 * blocks + 1 if copy_l1_rows(q_tile_rows, im_bytes) != q_tile_rows else 0
    copy_bytes = copies * _q_row_bytes(im_bytes, copy_l1_rows(q_tile_rows, im_bytes)) - first * f32
    return q_row_tiles({"init": [OpTally(inits, inits)],
                        "copy": [OpTally(copies, copies, l1_bytes=copy_bytes, unpacks=copies)],
                        "max": [OpTally(q_tiles * dv_tiles, q_tiles * dv_tiles, steps=row),
                                OpTally(4 * q_tiles, 4 * q_tiles, steps=stat)],
                        exp: [OpTally(2 * q_tiles, 2 * q_tiles, steps=exp_steps(exp, stat))],
                        "ternary": [OpTally(q_tiles * dv_tiles, q_tiles * dv_tiles, steps=row),
                                    OpTally(q_tiles, q_tiles, steps=stat)],
                        "pack": [OpTally(packs, packs, l1_bytes=packs * f32)]}, q_tile_rows)


def _im_bytes(fp32_dest_acc_en: bool) -> int:
    """Datum bytes of our kernels' softmax intermediates (plan.flash_decode_cbs): fp32 with an fp32 DST,
    bf16 with a bf16 DST."""
    return 4 if fp32_dest_acc_en else 2


def _exp_op(fp32_dest_acc_en: bool) -> str:
    """The softmax exp our kernels run: the fp32-accurate one with an fp32 DST, else exp_21f (bf16)."""
    return "exp" if fp32_dest_acc_en else "exp_bf16"


def _key_tile_cycles(q_tiles: int, d_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool, dst_tiles: int,
                     fidelity: str, c: CostConstants, head_rows: int, running: bool, prescale_q: bool = False,
                     q_tile_rows: int = 32, mla: bool = False, kv_tile_bytes: int = 1088) -> float:
    """Compute cycles one more key tile adds to a chunk (chunk_tile_ops through the cost model)."""
    ops = chunk_tile_ops(q_tiles, d_tiles, dv_tiles, dst_tiles, _exp_op(fp32_dest_acc_en), head_rows, running=running,
                         prescale_q=prescale_q, q_tile_rows=q_tile_rows, mla=mla, kv_tile_bytes=kv_tile_bytes,
                         im_bytes=_im_bytes(fp32_dest_acc_en))
    return sum(_sum_ops(ops, fidelity, c).values())


def _round_cycles(q_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool, dst_tiles: int, fidelity: str, hops: int,
                  c: CostConstants, head_rows: int, q_tile_rows: int = 32) -> float:
    """One tree round: the partial's message (fp32 O and two statistics tiles per q tile row, of
    q_tile_rows rows), the semaphore handshake and one merge (merge_ops)."""
    ops = merge_ops(q_tiles, dv_tiles, _exp_op(fp32_dest_acc_en), head_rows, dst_tiles, q_tile_rows,
                    _im_bytes(fp32_dest_acc_en))
    merge = sum(_sum_ops(ops, fidelity, c).values())
    partial_bytes = q_tiles * (dv_tiles + 2) * 1024 * _im_bytes(fp32_dest_acc_en) * q_tile_rows // 32
    return (c.noc_write_setup_cycles + partial_bytes / c.noc_bytes_per_cycle + hops * c.noc_hop_cycles
            + c.semaphore_handshake_cycles + merge)


@dataclass(frozen=True)
class _SplitCosts:
    """The closed-form prices the split's choices weigh (key_row_pieces, tile_pieces), in cycles."""

    tile: float   # one more key tile of a running chunk (chunk_tile_ops)
    chunk: float  # a running chunk's fixed work (chunk_ops)
    round: float  # one tree round (_round_cycles)
    margin: float  # 1 + split_compute_margin

    def piece(self, tiles: int, chunk_tiles: int, fixed_chunk: bool = False) -> float:
        """A piece of `tiles` key tiles, with the compute margin, in chunks of `chunk_tiles` (`fixed_chunk`)
        or in the plan's dynamic chunks capped at `chunk_tiles` (plan.dynamic_chunk_tiles)."""
        return (tiles * self.tile + piece_chunks(tiles, chunk_tiles, fixed_chunk) * self.chunk) * self.margin


def piece_chunks(tiles: int, chunk_tiles: int, fixed_chunk: bool = False) -> int:
    """Chunks of a piece of `tiles` key tiles: fixed chunks of `chunk_tiles`, or dynamic chunks capped
    at `chunk_tiles` (plan.dynamic_chunk_tiles of the piece's length)."""

    chunk = chunk_tiles if fixed_chunk else dynamic_chunk_tiles(max(1, tiles), 1, chunk_tiles)
    return -(-tiles // chunk)


def _tile_paged_busiest(num_kv_heads: int, cores: int, seq_tiles: int, pieces: int, floor_tiles: int,
                        chunk_cap: int) -> tuple[int, int, int, int]:
    """The busiest core of ONE user's interleaved split (plan.piece_range): (the pieces that get keys, the
    pieces on the busiest core, their dynamic chunk, the most key tiles one of them holds: pieces deal
    whole chunks, so the first pieces take one chunk more)."""

    used = min(pieces, max(1, seq_tiles // max(1, floor_tiles)))
    busiest = -(-(num_kv_heads * used) // max(1, cores))
    chunk = dynamic_chunk_tiles(-(-seq_tiles // used), floor_tiles, chunk_cap)
    n = min(seq_tiles, -(-(-(-seq_tiles // chunk)) // used) * chunk)
    return used, busiest, chunk, n


def _core_reader(busiest: int, tiles: int, chunks: int, key_bytes: int, c: CostConstants) -> float:
    """A core's reader for `busiest` pieces of `tiles` key tiles in `chunks` chunks in all: the per-core
    plateau, one DRAM latency per chunk."""
    return busiest * tiles * key_bytes / c.core_read_plateau_bytes_per_cycle + chunks * c.dram_latency_cycles


def _split_costs(q_tiles: int, d_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool, dst_tiles: int, fidelity: str,
                 hops: int, c: CostConstants, head_rows: int, prescale_q: bool = False,
                 q_tile_rows: int = 32, mla: bool = False, kv_tile_bytes: int = 1088) -> _SplitCosts:
    chunk = sum(_sum_ops(chunk_ops(q_tiles, dv_tiles, _exp_op(fp32_dest_acc_en), head_rows, q_tile_rows, mla,
                                   _im_bytes(fp32_dest_acc_en)),
                         fidelity, c).values())
    return _SplitCosts(
        tile=_key_tile_cycles(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, c, head_rows, True,
                              prescale_q, q_tile_rows, mla, kv_tile_bytes),
        chunk=chunk, round=_round_cycles(q_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, hops, c, head_rows,
                                         q_tile_rows),
        margin=1 + c.split_compute_margin)


def split_costs(q_tiles: int, d_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool = True, dst_tiles: int = 4,
                fidelity: str = "HiFi2", head_rows: int = 32, prescale_q: bool = False, q_tile_rows: int = 32,
                mla: bool = False, kv_tile_bytes: int = 1088, hops: int = 8, c: CostConstants = COST) -> _SplitCosts:
    """The closed-form prices of one key tile, one chunk's fixed work and one tree round at a shape (cycles),
    as the split's choices weigh them; plan.key_row_deal weighs pieces with them."""
    return _split_costs(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, hops, c, head_rows,
                        prescale_q, q_tile_rows, mla, kv_tile_bytes)


def split_floor_tiles(q_tiles: int, d_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool = True, dst_tiles: int = 4,
                      fidelity: str = "HiFi2", hops: int = 8, c: CostConstants = COST,
                      head_rows: int = 32, prescale_q: bool = False, q_tile_rows: int = 32, mla: bool = False,
                      kv_tile_bytes: int = 1088) -> int:
    """The split floor of dynamic chunks (DecodePlan.min_chunk_tiles): the smallest power of two
    `f` <= 8 with f x (cycles of one key tile) >= one tree round (the partial's message, the
    semaphore handshake and a merge). Halving a piece of 2f tiles saves f tiles of local work and
    costs one round, so pieces below f tiles are not worth their round. Depends on the config only
    (batch invariant). `fidelity`: the call's (make_plan's math_fidelity; HiFi2, tt-metal's and
    Llama's default, when none is given); `hops` a typical parent-child distance on the grid;
    `kv_tile_bytes` a K/V tile's bytes (bfloat8_b's by default)."""
    # a piece of f <= 8 tiles is one chunk with no running set
    tile = _key_tile_cycles(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, c, head_rows, False,
                            prescale_q, q_tile_rows, mla, kv_tile_bytes)
    round_cycles = _round_cycles(q_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, hops, c, head_rows,
                                 q_tile_rows)
    f = 1
    while f < 8 and f * tile < round_cycles:
        f *= 2
    return f


def key_row_pieces(num_kv_heads: int, cores: int, max_pieces: int, seq_tiles: int, q_tiles: int, d_tiles: int,
                   dv_tiles: int, kv_tile_bytes: int, kv_tiles_per_key_tile: int, chunk_tiles: int = 8,
                   fixed_chunk: bool = False, fp32_dest_acc_en: bool = True,
                   dst_tiles: int = 4, fidelity: str = "HiFi2", hops: int = 8, head_rows: int = 32,
                   prescale_q: bool = False, q_tile_rows: int = 32, mla: bool = False,
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
    costs = _split_costs(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, hops, c, head_rows,
                         prescale_q, q_tile_rows, mla, kv_tile_bytes)
    bank_rate = c.dram_peak_bytes_per_cycle / banks * c.dram_bank_local_efficiency
    floor = num_kv_heads * seq_tiles * kv_tiles_per_key_tile * kv_tile_bytes / banks / bank_rate
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


def tile_pieces(num_kv_heads: int, cores: int, max_pieces: int, seq_tiles: int, floor_tiles: int, q_tiles: int,
                d_tiles: int, dv_tiles: int, kv_tile_bytes: int, kv_tiles_per_key_tile: int, chunk_tiles: int = 8,
                fp32_dest_acc_en: bool = True, dst_tiles: int = 4, fidelity: str = "HiFi2", hops: int = 8,
                head_rows: int = 32, prescale_q: bool = False, q_tile_rows: int = 32, mla: bool = False,
                c: CostConstants = COST) -> int:
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

    costs = _split_costs(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, hops, c, head_rows,
                         prescale_q, q_tile_rows, mla, kv_tile_bytes)
    key_bytes = kv_tiles_per_key_tile * kv_tile_bytes
    floor = num_kv_heads * seq_tiles * key_bytes / (c.dram_peak_bytes_per_cycle * c.dram_interleaved_efficiency)
    best: tuple[tuple[float, float, int], int] | None = None
    for p in range(1, max_pieces + 1):
        used, busiest, chunk, n = _tile_paged_busiest(num_kv_heads, cores, seq_tiles, p, floor_tiles, chunk_tiles)
        compute = busiest * costs.piece(n, chunk, fixed_chunk=True)
        chunks = busiest * -(-n // chunk)
        reader = max(_core_reader(busiest, n, chunks, key_bytes, c), floor)
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
              q_tile_rows: int = 32, mla: bool = False, c: CostConstants = COST) -> tuple[int, int]:
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

    costs = _split_costs(q_tiles, d_tiles, dv_tiles, fp32_dest_acc_en, dst_tiles, fidelity, hops, c, head_rows,
                         prescale_q, q_tile_rows, mla, kv_tile_bytes)
    key_bytes = kv_tiles_per_key_tile * kv_tile_bytes
    user_bytes = num_kv_heads * seq_tiles * key_bytes
    banks = c.dram_banks
    best: tuple[float, int, int] | None = None
    for cap, pieces in sorted(options):
        if cyclic:  # every piece takes every used-th key tile: ceil(T / used) each
            used = cyclic_pieces(seq_tiles, 0, pieces, floor_tiles)
            busiest = -(-(num_kv_heads * used) // (banks * max(1, cores // banks)))
            chunk = dynamic_chunk_tiles(-(-seq_tiles // used), floor_tiles, cap)
            n = -(-seq_tiles // used)
            floor = user_bytes / banks / (c.dram_peak_bytes_per_cycle / banks * c.dram_bank_local_efficiency)
        else:
            used, busiest, chunk, n = _tile_paged_busiest(num_kv_heads, cores, seq_tiles, pieces, floor_tiles, cap)
            floor = user_bytes / (c.dram_peak_bytes_per_cycle * c.dram_interleaved_efficiency)
        chunks = busiest * -(-n // chunk)
        compute = busiest * n * costs.tile + chunks * costs.chunk
        reader = max(floor, _core_reader(busiest, n, chunks, key_bytes, c))
        t = max(reader, compute) + min(reader, compute) / (chunks * stages_per_chunk) + tree_rounds(used) * costs.round
        if best is None or t < best[0]:
            best = (t, cap, pieces)
    if best is None:
        raise ValueError("chunk_cap: options: expected at least one (cap, pieces) pair")
    return best[1], best[2]


# ---- our kernels: the work read from the runtime's counters ---------------------------------------


def work_from_counters(plan: Any, counters: RunCounters) -> tuple[list[CoreWork], Reduction, str]:
    """(per-core work, the reduction (every work's merge tree), fidelity) of a run of our kernels.

    Reads: the reader's read_dram events grouped by read_barrier (requests = events x count).
    Compute: every compute event is `count` calls of `amount` tiles; those between a cb_wait and a
    cb_pop of partial_in are merge work. A matmul feeds the rows of its in0 (32, or 16 with 16x32 q tiles:
    the event's flag); a copy or pack of a 16x32 tile moves half a tile (flag 16); an SFPU call runs the
    vector steps recorded in the event's flag (faces its VectorMode covers x ITERATIONS). exp is priced as the one the kernel ran: approximate when it was built with exp_approx,
    else the accurate one of its DST (fp32, or exp_21f on a bf16 DST).
    """
    cb = {spec.name: spec.index for spec in plan.circular_buffers}
    kv_tile = tile_size(plan.kv_dtype)
    compute_k = [k for k in counters.kernels if k.kind is KernelKind.COMPUTE]
    fidelity = str(compute_k[0].settings.get("math_fidelity", "HiFi4")) if compute_k else "HiFi4"
    # the exp the kernel ran: the approximate one (its named exp_approx arg), else the accurate one for its
    # DST: fp32 (_sfpu_exp_fp32_accurate_) or 16-bit (exp_21f)
    settings = compute_k[0].settings if compute_k else {}
    exp_name = ("exp_approx" if settings.get("exp_approx", False)
                else "exp" if settings.get("fp32_dest_acc_en", True) else "exp_bf16")
    by_core: dict[CoreCoord, CoreWork] = {}
    for k in counters.kernels:
        w = by_core.setdefault(k.core, CoreWork([], np.zeros(COST.dram_banks), defaultdict(list),
                                                defaultdict(list), 1, 0, 0))
        w.bank_bytes = w.bank_bytes + np.asarray(k.dram_read_bytes, float) + np.asarray(k.dram_write_bytes, float)
        ev = k.events
        if k.kind is KernelKind.READER:
            b = n = 0
            kv_group = False
            stages = 0
            kv_banks: set[int] = set()
            for e in ev:
                op = int(e["op"])
                if op == _OP["read_dram"]:
                    b += int(e["amount"]) * int(e["count"])
                    n += int(e["count"])
                    if int(e["amount"]) == kv_tile:
                        w.kv_bytes += int(e["amount"]) * int(e["count"])
                        kv_banks.add(int(e["peer"]))
                        kv_group = True
                elif op == _OP["read_barrier"] and b:
                    w.read_groups.append((b, n))
                    stages += kv_group
                    b = n = 0
                    kv_group = False
                if op == _OP["cb_push"]:
                    w.cb_handshakes += int(e["count"])
            if b:
                w.read_groups.append((b, n))
                stages += kv_group
            # pipeline stages: the read-barrier groups that carry K/V tiles (one per chunk when K and V
            # share a barrier, two when each has its own)
            w.chunks = max(1, stages)
            # bank-local: every K/V tile this core read came from one DRAM bank (kv_pages "key_row"
            # with 12 | pieces); the bank floor then runs at the bank-local efficiency
            w.bank_local = len(kv_banks) == 1
        elif k.kind is KernelKind.COMPUTE:
            inside = False
            for e in ev:
                op, peer = int(e["op"]), int(e["peer"])
                if op == _OP["cb_wait"] and peer == cb["partial_in"]:
                    inside = True
                elif op == _OP["cb_pop"] and peer == cb["partial_in"]:
                    inside = False
                elif op == _OP["compute"]:
                    name = COMPUTE_OPS[peer]
                    name = exp_name if name == "exp" else name
                    # the flag: an SFPU call's vector steps (faces its VectorMode covers x ITERATIONS); a
                    # copy's or pack's of a 16x32 tile, 16 (half a tile); a matmul's with a 16x32 in0, its
                    # 16 rows; 0 for a whole 32x32 tile
                    flag = int(e["flag"])
                    rows = flag if name == "matmul" and flag else 32
                    steps = flag if flag and name != "matmul" else COST.sfpu_steps_per_tile
                    n = int(e["count"])
                    t = OpTally(float(e["amount"]) * n, n, rows=rows, steps=steps,
                                l1_bytes=float(e["l1_bytes"]) * n, unpacks=float(e["unpacks"]) * n)
                    (w.merge if inside else w.compute)[name].append(t)
    works = list(by_core.values())
    msgs = match_tree(plan, writer_messages(counters))
    reduction = _critical_chain(msgs, works, by_core, fidelity)
    return works, reduction, fidelity


def _noc_cycles(m: Message, c: CostConstants = COST) -> float:
    """The part of a round that depends on its message: its bytes over the link and its hops."""
    return m.bytes / c.noc_bytes_per_cycle + noc_hops(m.src, m.dst, c) * c.noc_hop_cycles


def _critical_path(tree: Tree, per_merge: float, c: CostConstants = COST) -> tuple[float, list[tuple[int, int]]]:
    """tree_cycles of `tree` and the messages of the path that sets it (the child whose arrival
    started a merge late, else the node's earlier merges)."""
    t, path = 0.0, []
    for nbytes, hops, child in tree:
        tc, pc = _critical_path(child, per_merge, c)
        arrive = tc + message_cycles(nbytes, hops, c)
        if arrive >= t:
            path = pc + [(nbytes, hops)]
        t = max(t, arrive) + per_merge
    return t, path


def _critical_chain(msgs: list[Message], works: list[CoreWork], by_core: Mapping[CoreCoord, CoreWork],
                    fidelity: str = "HiFi4") -> Reduction:
    """Every work's merge tree (`Reduction.trees`) from the messages, and the merge work per round:
    the root core's merge work (the root of the deepest chain, the most rounds then the most NoC
    cycles) divided by the merges it ran; `rounds` is the path that ends the slowest tree."""
    if not msgs:
        return Reduction((), {})
    children: dict[tuple[tuple[int, int], int], list[Message]] = defaultdict(list)
    for m in msgs:
        children[(m.work, m.parent)].append(m)

    def key(path: list[Message]) -> tuple[int, float]:
        return len(path), sum(_noc_cycles(m) for m in path)

    def chain(work: tuple[int, int], index: int) -> list[Message]:
        best: list[Message] = []
        for m in children.get((work, index), []):
            sub = chain(work, m.child) + [m]
            if key(sub) > key(best):
                best = sub
        return best

    def node(work: tuple[int, int], index: int) -> Tree:
        return tuple((m.bytes, noc_hops(m.src, m.dst), node(work, m.child))
                     for m in sorted(children.get((work, index), []), key=lambda m: m.round))

    path = max((chain(w, 0) for w, _ in children), key=key)
    dst_merges: dict[CoreCoord, int] = defaultdict(int)
    for m in msgs:
        dst_merges[m.dst] += 1
    root = path[-1].dst
    merges = by_core[root].merge
    n = max(1, dst_merges[root])
    per_round: dict[str, list[OpTally]] = {}
    for op, ts in merges.items():
        for steps in sorted({t.steps for t in ts}, reverse=True):  # full tiles and VectorMode calls apart
            same = [t for t in ts if t.steps == steps]
            per_round.setdefault(op, []).append(OpTally(
                sum(t.tiles for t in same) / n, max(1, round(sum(t.calls for t in same) / n)), steps=steps,
                l1_bytes=sum(_l1_bytes(t, op) for t in same) / n,
                unpacks=sum(t.tiles if t.unpacks is None else t.unpacks for t in same) / n))
    trees = tuple(sorted({node(w, 0) for w, parent in children if parent == 0}, key=repr))
    per_merge = sum(_sum_ops(per_round, fidelity, COST).values())
    slowest = max((_critical_path(t, per_merge) for t in trees), key=lambda tp: tp[0])
    return Reduction(tuple(slowest[1]), per_round, trees)
