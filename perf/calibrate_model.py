"""The cost model against every published Wormhole measurement of tt-metal's decode op, in cycles
(tech_report/calibration.md).

What the model predicts: tt-metal's DEVICE KERNEL DURATION, the first core's kernel start to the last
core's kernel end over the op's cores. That figure holds the launch skew between cores (the model's
start spread, COST_SOURCES "start_spread_cycles") and the compute kernel's own init, not firmware
start, dispatch or the completion handshake. Every figure is compared in cycles: a measured time times
the clock of the machine it was measured on (Galaxy 4U 900 MHz, 6U and the rest 1000 MHz); the model's
cycles are of its 1 GHz clock.

Each point: tt-metal's decode op written as data (ttdecode.perf_model.ttmetal_structure, ttnn 0.81.1) at
the published configuration, through the cost model (ttdecode.perf_model); the DRAM rows
through the model's reader and bank terms alone. Then our kernels at the same points (real runs on the
host runtime, their counters through the same model) beside tt-metal's structure, at tt-metal's numerics
and at our default numerics (HiFi4, fp32 DST); then the isolated op point under each assumed constant
x0.5 / x2. All model figures are MODEL ESTIMATES.

    PYTHONPATH=. python perf/calibrate_model.py [--csv FILE] [--quick] [--measured REPORT]

--csv FILE: one row per point (point, measured_cycles, model_cycles, error_pct, ...). --quick: no host run
of our kernels at the tech report's 128K point (the rest of our rows take seconds). --measured REPORT: a
``python -m ttdecode hwcheck`` report: per timing point, the device time measured on a Wormhole beside the
model's, ours and tt-metal's, with the error (the profiler's DEVICE KERNEL DURATION when the report has it,
else the traced time per call, which also holds the trace's dispatch).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ttdecode.perf_model.constants import COST, CostConstants  # noqa: E402
from ttdecode.perf_model.evaluator import CoreWork, bank_floor_cycles, evaluate, reader_cycles  # noqa: E402
from ttdecode.perf_model.ttmetal_structure import TTMetalShape, ttmetal_work  # noqa: E402
from ttdecode.hwcheck.report import load_report  # noqa: E402

#: |error| within which a point counts as reproduced, in % of the measured cycles.
TOLERANCE_PCT = 20.0
#: Clocks of the machines the figures were measured on (tt-umd #1268), Hz.
CLOCK_6U, CLOCK_4U, CLOCK_WH = 1.0e9, 0.9e9, 1.0e9

#: The Galaxy Llama-70B decode SDPA per chip (tt-metal models/demos/llama3_70b_galaxy/tests/): B 8, 8q/1kv,
#: D 128, S 4096, cur_pos 127, bf16 Q height-sharded in L1, bfloat8_b paged K/V (block 32), dynamic chunks,
#: 8x4 cores, cur_pos and page table in L1, HiFi2, bf16 DST. One chunk of 4 key tiles per user: 8 of the 32
#: cores have work.
TG = TTMetalShape(8, 8, 1, 128, 127, 4096, grid=(8, 4), index_memory="l1", q_memory="l1")
#: PR #26227 (2025, before the tree reduction and the fused merge correction of PR #32501): the same op with
#: cur_pos and the page table in DRAM / L1.
TG_2025_DRAM = dataclasses.replace(TG, index_memory="dram", reduction="linear", fused_correction=False)
TG_2025_L1 = dataclasses.replace(TG, reduction="linear", fused_correction=False)
#: DeepSeek-V3 MLA decode (tt-metal models/demos/deepseek_v3/tests/fused_op_unit_tests/mla/
#: test_flash_mla_deepseek.py): Q [1, 4, 128, 576] height-sharded on 64 cores, one latent KV head, V = the
#: first 512 columns of K, bf16 paged K (block 32), 1024 max positions, positions linspace(0, 512, 4),
#: k_chunk 128, HiFi4, bf16 DST; page table and positions in DRAM. exp_approx_mode False: what tt-metal's MLA
#: decode unit tests (tests/ttnn/unit_tests/operations/sdpa/mla_test_utils.py) set at this shape.
MLA = TTMetalShape(4, 128, 1, 576, (0, 170, 341, 512), 1024, grid=(8, 8), k_chunk_size=128, kv_dtype="bfloat16",
                   head_dim_v=512, index_memory="dram", q_memory="l1", exp_approx_mode=False)
MLA_FIDELITY = "HiFi4"
#: The FlashDecode tech report's sweep (its era: linear reduction, the merge's correction as separate ops),
#: B 8/16/32, 128K, D 64/128/256, 8q/1kv.
TECH_REPORT_GBPS = 180.0
TECH_REPORT = TTMetalShape(8, 8, 1, 128, 131071, 131072, grid=(8, 8), k_chunk_size=512, reduction="linear",
                           fused_correction=False)
#: tt-isa-documentation WormholeB0/DRAMTile/README.md: readers streaming from DRAM, GB/s.
DRAM_BYTES_PER_READER = 1 << 20  # the model's transfer per reader (the rate does not depend on it past ~100 KB)

#: Points whose |error| may exceed TOLERANCE_PCT, each with its explanation (tests/test_calibration.py reads it).
EXPLAINED_MISSES: dict[str, str] = {
    "pr37004-after": "PR #37004 (the tree reduction) measured 8.3 -> 7.4 us at this shape, but at cur_pos 127 "
                     "tt-metal's dynamic chunk is 4 tiles (rt_args_common.hpp get_dynamic_Sk_chunk_t: "
                     "pow2ceil(127 // 32 + 1)), so each user has ONE chunk on one core and there is no reduction "
                     "for a tree to speed up: the structure predicts the same time before and after. The PR's "
                     "position and machine are not in the published facts we hold; its 7.4 us is also 10% under "
                     "the later isolated test's 8.18 us of the same op and shape. Not a model constant to move: "
                     "the pair cannot be placed without the PR's setup",
}


@dataclass(frozen=True)
class Point:
    """One published figure and the model's. measured_ns: the published time (a rate is turned into the
    time of the model's bytes); clock_hz: the clock of the machine it was measured on."""

    name: str
    label: str
    measured: str
    measured_ns: float
    clock_hz: float
    model_cycles: float
    note: str = ""

    @property
    def measured_cycles(self) -> float:
        return self.measured_ns * self.clock_hz / 1e9

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.model_cycles - self.measured_cycles) / self.measured_cycles


def ttmetal_cycles(shape: TTMetalShape, fidelity: str = "HiFi2", c: CostConstants = COST) -> float:
    """tt-metal's structure at `shape` through the model: DEVICE KERNEL DURATION in cycles (the launch skew
    spread over the whole grid: every core of the op's grid starts its kernels, idle ones exit at once)."""
    works, red, counts = ttmetal_work(shape)
    return evaluate(works, red, fidelity, c, cores=counts["grid_cores"]).cycles


def tech_report_point(b: int, d: int, c: CostConstants = COST) -> tuple[float, int]:
    """(model cycles, K/V bytes) of tt-metal's structure at one tech report shape."""
    shape = dataclasses.replace(TECH_REPORT, batch=b, head_dim=d)
    works, red, counts = ttmetal_work(shape)
    br = evaluate(works, red, "HiFi2", c, cores=counts["grid_cores"])
    return br.cycles, br.kv_bytes


def dram_cycles(readers: int, bank_local: bool, c: CostConstants = COST) -> float:
    """The model's reader and bank terms for `readers` cores each streaming DRAM_BYTES_PER_READER: bank-local
    (reader i on bank i % 12) or interleaved (every reader over every bank): the slower of one reader
    (latency + bytes at the per-core plateau) and the busiest bank at its efficiency."""
    works = []
    for i in range(readers):
        if bank_local:
            banks = np.zeros(c.dram_banks)
            banks[i % c.dram_banks] = DRAM_BYTES_PER_READER
        else:
            banks = np.full(c.dram_banks, DRAM_BYTES_PER_READER / c.dram_banks)
        works.append(CoreWork([(DRAM_BYTES_PER_READER, DRAM_BYTES_PER_READER // 2048)], banks, {}, {}, 1, 0,
                              DRAM_BYTES_PER_READER, bank_local=bank_local))
    return max(max(reader_cycles(w.read_groups, c) for w in works), bank_floor_cycles(works, c))


def dram_point(name: str, label: str, gbps: float, readers: int, bank_local: bool, c: CostConstants,
               note: str) -> Point:
    """A DRAM benchmark rate as the time of the model's bytes at that rate (1 GHz)."""
    nbytes = readers * DRAM_BYTES_PER_READER
    return Point(name, label, f"{gbps} GB/s", nbytes / gbps, CLOCK_WH, dram_cycles(readers, bank_local, c), note)


def points(c: CostConstants = COST) -> list[Point]:
    """Every calibration point (the CSV's rows), in the table's order."""
    tg = ttmetal_cycles(TG, c=c)
    tr, tr_bytes = tech_report_point(8, 128, c)
    noc1 = dataclasses.replace(c, dram_interleaved_efficiency=c.dram_interleaved_efficiency_noc1)
    return [
        Point("isolated-op-6u", "Galaxy Llama-70B decode SDPA per chip (B 8, 8q/1kv, D 128, cur_pos 127), isolated op "
              "test: paged, block 32, Q sharded in L1, cur_pos and page table in L1, 8x4 cores, HiFi2, bf16 DST; 6U",
              "8.18 us (6U, 1000 MHz)", 8180.0, CLOCK_6U, tg),
        Point("isolated-op-4u", "same, Galaxy 4U", "9.09 us (4U, 900 MHz)", 9090.0, CLOCK_4U, tg),
        Point("in-model-6u", "same op inside the Llama-70B decoder (decoder_perf_targets_6u.json)",
              "9.18 us (6U)", 9183.5, CLOCK_6U, tg,
              "the model holds no term for what differs in the decoder (the prefetcher's concurrent DRAM "
              "traffic on its sub-device is a candidate, not checked)"),
        Point("in-model-4u", "same, decoder_perf_targets_4u.json", "10.2 us (4U)", 10200.0, CLOCK_4U, tg),
        Point("pr26227-dram", "PR #26227 before: cur_pos and page table in DRAM (2025: linear reduction)",
              "8650 ns", 8650.0, CLOCK_6U, ttmetal_cycles(TG_2025_DRAM, c=c), "clock not published: 1000 MHz taken"),
        Point("pr26227-l1", "PR #26227 after: cur_pos and page table in L1", "7816 ns", 7816.0, CLOCK_6U,
              ttmetal_cycles(TG_2025_L1, c=c), "clock not published: 1000 MHz taken"),
        Point("pr37004-before", "PR #37004 before (linear reduction), same shape", "8.3 us", 8300.0, CLOCK_6U,
              ttmetal_cycles(dataclasses.replace(TG, reduction="linear"), c=c), "clock not published: 1000 MHz taken"),
        Point("pr37004-after", "PR #37004 after (tree reduction), same shape", "7.4 us", 7400.0, CLOCK_6U, tg,
              "clock not published: 1000 MHz taken"),
        Point("mla-deepseek-v3", "DeepSeek-V3 MLA decode: Q [1, 4, 128, 576], bf16 paged K (V = K[..., :512]), "
              "positions 0/170/341/512, k_chunk 128, HiFi4, 64 cores", "193.4 us (target)", 193400.0, CLOCK_WH,
              ttmetal_cycles(MLA, MLA_FIDELITY, c), "a Galaxy chip; 1000 MHz taken (on a 4U: 174.1k cycles); the "
              "reduction (3 tree rounds of 4 x 16 O tiles) is ~62% of the model's figure and rests on assumed "
              "merge costs; another version of tt-metal's perf test (mla_deepseek_perf_and_pcc_tests.py) targets "
              "110.05 us for this op, so the op moved between versions and the agreement is with one of them"),
        Point("techreport-180gbps", "FlashDecode tech report: B 8, 8q/1kv, D 128, 128K, bfloat8_b, chunk 512, linear "
              "reduction; its best rate as the time of the K/V bytes", f"<= {TECH_REPORT_GBPS:.0f} GB/s",
              tr_bytes / TECH_REPORT_GBPS, CLOCK_WH, tr, "a bound: the report's best rate (B 8-32, D 64-256)"),
        dram_point("dram-interleaved-noc0", "DRAM: 12 readers paired randomly with banks, NoC 0", 189.8, 12, False, c,
                   "NOT independent: dram_interleaved_efficiency is 189.8/288 (rounded to 0.66)"),
        dram_point("dram-interleaved-noc0-48", "DRAM: 48 readers paired randomly with banks, NoC 0", 200.3, 48, False,
                   c, "the same efficiency at 48 readers"),
        dram_point("dram-interleaved-noc1", "DRAM: 12 readers paired randomly with banks, NoC 1", 82.1, 12, False,
                   noc1, "NOT independent: dram_interleaved_efficiency_noc1 is 82.1/288"),
        dram_point("dram-interleaved-noc1-48", "DRAM: 48 readers paired randomly with banks, NoC 1", 78.2, 48, False,
                   noc1, "the same efficiency at 48 readers"),
        dram_point("dram-bank-local", "DRAM: 12 readers, one per bank, bank-local", 265.5, 12, True, c,
                   "bank-local efficiency from the Saturating_DRAM_bandwidth report's 267 GB/s"),
    ]


def table(ps: list[Point]) -> list[str]:
    """The calibration table (markdown), then each point's configuration and note."""
    out = ["| point | measured | measured cycles | model cycles (tt-metal's structure) | error |",
           "|---|---|---:|---:|---:|"]
    for p in ps:
        miss = " (explained miss)" if abs(p.error_pct) > TOLERANCE_PCT and p.name in EXPLAINED_MISSES else (
            " (UNEXPLAINED MISS)" if abs(p.error_pct) > TOLERANCE_PCT else "")
        out.append(f"| `{p.name}` | {p.measured} | {p.measured_cycles:,.0f} | {p.model_cycles:,.0f} | "
                   f"{p.error_pct:+.1f}%{miss} |")
    out.append("")
    for p in ps:
        out.append(f"- `{p.name}`: {p.label}" + (f" ({p.note})" if p.note else ""))
    return out


def write_csv(ps: list[Point], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["point", "measured_cycles", "model_cycles", "error_pct", "measured", "clock_mhz",
                    "explained_miss", "note"])
        for p in ps:
            w.writerow([p.name, round(p.measured_cycles, 1), round(p.model_cycles, 1), round(p.error_pct, 2),
                        p.measured, round(p.clock_hz / 1e6), EXPLAINED_MISSES.get(p.name, ""), p.note])


# ---- our kernels beside tt-metal's structure -------------------------------------------------------


@dataclass(frozen=True)
class Numerics:
    name: str
    fidelity: str
    fp32_dest_acc: bool
    exp_approx: bool


#: tt-metal's numerics at its measured points (its test configs: bf16 DST, exact exp) and our default.
TT_NUMERICS = {"tg": Numerics("tt-metal's (HiFi2, bf16 DST, exact exp)", "HiFi2", False, False),
               "mla": Numerics("tt-metal's (HiFi4, bf16 DST, exact exp)", "HiFi4", False, False),
               "techreport": Numerics("tt-metal's Llama config (HiFi2, bf16 DST, exact exp)", "HiFi2", False, False)}
DEFAULT = Numerics("ours default (HiFi4, fp32 DST, exact exp)", "HiFi4", True, False)


def run_ours(batch: int, nh: int, nkv: int, d: int, seq: int, pos: list[int], grid: tuple[int, int], num: Numerics,
             max_cores: int = 16, k_chunk: int = 0, dv: Optional[int] = None, kv: str = "bfloat8_b") -> tuple[float, int]:
    """Our kernels on the host runtime at one point: (model us, pieces per head). Non-paged K/V, positions as
    the plan's (runtime args); MLA when dv is given (V = K[..., :dv])."""
    import torch

    from ttdecode.core.formats import DataType
    from ttdecode.ops.flash_decode.plan import make_plan, power_of_two_scale
    from ttdecode.ops.flash_decode.program_factory import run_flash_decode
    from ttdecode.perf_model.counters import work_from_counters
    from ttdecode.core.program_description import ComputeSettings, MathFidelity
    from ttdecode.core.tensor import from_torch

    g = torch.Generator().manual_seed(0)
    kvt = DataType(kv)
    q = from_torch(torch.randn(1, batch, nh, d, generator=g))
    k = from_torch(torch.randn(batch, nkv, seq, d, generator=g), kvt)
    v = None if dv else from_torch(torch.randn(batch, nkv, seq, d, generator=g), kvt)
    scale = 1 / math.sqrt(d)
    plan = make_plan(batch=batch, num_q_heads=nh, num_kv_heads=nkv, seq_len=seq, head_dim=d, head_dim_v=dv,
                     kv_dtype=kvt, cur_pos=pos, grid=grid, max_cores_per_head_batch=max_cores, k_chunk_size=k_chunk,
                     mla=bool(dv), prescale_q=power_of_two_scale(scale), fp32_dest_acc_en=num.fp32_dest_acc,
                     math_fidelity=num.fidelity)
    _, _, res = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=scale,
                                 compute=ComputeSettings(math_fidelity=MathFidelity(num.fidelity),
                                                         fp32_dest_acc_en=num.fp32_dest_acc),
                                 exp_approx=num.exp_approx)
    works, red, fid = work_from_counters(plan, res.counters)
    return evaluate(works, red, fid).total_us, plan.pieces_per_work


def first_fitting(run: Callable[[int], tuple[float, int]], caps: tuple[int, ...]) -> tuple[float, int, int]:
    """run(max_cores) at the largest cap whose plan fits L1: (us, pieces, cap)."""
    from ttdecode.ops.flash_decode.plan import PlanError

    for cap in caps:
        try:
            us, pieces = run(cap)
            return us, pieces, cap
        except PlanError:
            continue
    raise PlanError(f"no plan fits with max_cores_per_head_batch in {caps}")


def ours_rows(quick: bool) -> list[str]:
    """Our kernels at each calibration point beside tt-metal's structure, at tt-metal's numerics and at ours."""
    out = ["| point | numerics | ours (model us) | tt-metal's structure (model us) | ours / tt-metal |",
           "|---|---|---:|---:|---:|"]

    def row(point: str, num: Numerics, ours: Optional[float], tt: float, extra: str = "") -> None:
        o = f"{ours:.1f}{extra}" if ours is not None else "–"
        ratio = f"{ours / tt:.2f}x" if ours is not None else "–"
        out.append(f"| {point} | {num.name} | {o} | {tt:.1f} | {ratio} |")

    us = COST.clock_hz / 1e6
    for num in (TT_NUMERICS["tg"], DEFAULT):
        tt_shape = dataclasses.replace(TG, fp32_dest_acc=num.fp32_dest_acc)
        ours, _ = run_ours(8, 8, 1, 128, 4096, [127] * 8, (8, 4), num, max_cores=4)  # as the sweep's tg points
        row("isolated op / in-model (Galaxy Llama-70B per chip)", num, ours, ttmetal_cycles(tt_shape, num.fidelity) / us)
        for name, shape in (("PR #26227, index in DRAM", TG_2025_DRAM), ("PR #26227, index in L1", TG_2025_L1)):
            row(name + " (ours: positions as runtime args, no index read)", num, ours,
                ttmetal_cycles(dataclasses.replace(shape, fp32_dest_acc=num.fp32_dest_acc), num.fidelity) / us)
    for num in (TT_NUMERICS["mla"], DEFAULT):
        # the most pieces per head whose plan fits L1 at k_chunk 128 (128 q rows and D 576 fill it)
        ours, pieces, _ = first_fitting(
            lambda cap: run_ours(4, 128, 1, 576, 1024, [0, 170, 341, 512], (8, 8), num, cap, 128, 512, "bfloat16"),
            (16, 8, 4, 2, 1))
        row("DeepSeek-V3 MLA (k_chunk 128)", num, ours, ttmetal_cycles(MLA, num.fidelity) / us,
            f" ({pieces} piece/head: the most that fit L1)")
    for num in (TT_NUMERICS["techreport"], DEFAULT):
        tt = ttmetal_cycles(dataclasses.replace(TECH_REPORT, fp32_dest_acc=num.fp32_dest_acc), num.fidelity) / us
        if quick:
            row("tech report B 8, D 128, 128K (ours: --quick skips the run)", num, None, tt)
        else:
            ours, _ = run_ours(8, 8, 1, 128, 131072, [131071] * 8, (8, 8), num)
            row("tech report B 8, D 128, 128K (ours: dynamic chunks, tile pages)", num, ours, tt)
    out.append("| DRAM benchmarks | – | – (not a kernel point) | – | – |")
    return out


def headline_rows() -> list[str]:
    """The README's headline sweep points (perf/sweep_flash_decode.py's configuration: fp32 DST, exact exp,
    dynamic chunks) at the sweep's HiFi2 and at the package default HiFi4, tile and key_row pages."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweep_flash_decode", Path(__file__).resolve().parent
                                                  / "sweep_flash_decode.py")
    sweep = importlib.util.module_from_spec(spec)
    sys.modules["sweep_flash_decode"] = sweep
    spec.loader.exec_module(sweep)  # type: ignore[union-attr]
    from ttdecode.perf_model.counters import work_from_counters

    Pt = sweep.Point
    points = [
        ("tech report B 8, D 128, 128K", Pt("techreport", "tr", 8, 8, 1, 131072, 16, 128, (8, 8), None, 512), 60),
        ("Llama-3.1-8B N150, B 1, 32K", Pt("seq", "n150", 1, 32, 8, 32768), 64),
        ("T3K chip 4q/1kv, B 1, 32K, 16 cores per head", Pt("cores", "t3k", 1, 4, 1, 32768, 16), 60),
    ]
    out = ["| point | pages | HiFi2 (sweep) us / GB/s | HiFi4, fp32 DST (package default) us / GB/s |",
           "|---|---|---:|---:|"]
    print("\n".join(out), flush=True)
    for label, base, key_row_cores in points:
        for pages in ("tile", "key_row"):
            cells = []
            for fid in ("HiFi2", "HiFi4"):
                pt = dataclasses.replace(base, fidelity=fid, kv_pages=pages,
                                         max_cores=key_row_cores if pages == "key_row" else base.max_cores)
                plan, counters, _ = sweep.run_point(pt)
                b = evaluate(*work_from_counters(plan, counters))
                cells.append(f"{b.total_us:.1f} / {b.achieved_gbps:.0f}")
            out.append(f"| {label} | {pages} | {cells[0]} | {cells[1]} |")
            print(out[-1], flush=True)
    return out


def hwcheck_points() -> dict[str, tuple[TTMetalShape, Callable[[Numerics], float]]]:
    """The hardware check's timing points (ttdecode.hwcheck.kinds.TIMING_POINTS) -> tt-metal's structure at that
    call (Q, cur_pos and the page table in DRAM: the check's tensors) and our kernels' model us at numerics."""
    dram = dict(index_memory="dram", q_memory="dram")
    return {
        "tg": (dataclasses.replace(TG, **dram),
               lambda num: run_ours(8, 8, 1, 128, 4096, [127] * 8, (8, 4), num, max_cores=4)[0]),
        "mla": (dataclasses.replace(MLA, **dram), lambda num: first_fitting(
            lambda cap: run_ours(4, 128, 1, 576, 1024, [0, 170, 341, 512], (8, 8), num, cap, 128, 512, "bfloat16"),
            (16, 8, 4, 2, 1))[0]),
        "techreport": (dataclasses.replace(TECH_REPORT, **dram),
                       lambda num: run_ours(8, 8, 1, 128, 131072, [131071] * 8, (8, 8), num, k_chunk=512)[0]),
    }


@dataclass(frozen=True)
class Measured:
    """One side of a timing point: the measured us (None: not measured), what it is, the model's us."""

    point: str
    side: str
    measured_us: Optional[float]
    source: str
    model_us: Optional[float]
    invented: bool = False

    @property
    def error_pct(self) -> Optional[float]:
        if self.measured_us is None or self.model_us is None or self.measured_us <= 0:
            return None
        return 100.0 * (self.model_us - self.measured_us) / self.measured_us


def _measured_figure(timed: dict) -> tuple[Optional[float], str]:
    """(us, source) of a report's timed side: the profiler's figure first, then the traced time."""
    for key, source in (("profiler_us", "profiler DEVICE KERNEL DURATION"), ("us_per_call", "traced loop per call")):
        value = timed.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value), source
    text = next((v for v in (timed.get("error"), timed.get("us_per_call")) if isinstance(v, str)), "not measured")
    return None, text


def measured(report: dict, quick: bool) -> list[Measured]:
    """Each timing point of a hwcheck report, ours and tt-metal's: measured beside the model (us at 1 GHz; ours
    at the package default numerics, tt-metal's at the numerics the check ran ttnn's op with). --quick: no host
    run of our kernels at the 128K point."""
    points, us = hwcheck_points(), COST.clock_hz / 1e6
    rows = []
    for entry in report["timing"]:
        if entry["name"] not in points or "ours" not in entry:
            continue
        shape, ours_model = points[entry["name"]]
        num = entry["ttnn_numerics"]
        tt_model = ttmetal_cycles(dataclasses.replace(shape, fp32_dest_acc=num["fp32_dest_acc_en"]),
                                  num["math_fidelity"]) / us
        skip = quick and entry["name"] == "techreport"
        invented = bool(entry.get("invented"))
        rows.append(Measured(entry["name"], "ours", *_measured_figure(entry["ours"]),
                             None if skip else ours_model(DEFAULT), invented))
        rows.append(Measured(entry["name"], "tt-metal", *_measured_figure(entry["ttnn"]), tt_model, invented))
    return rows


def measured_table(rows: list[Measured]) -> list[str]:
    out = ["| point | kernels | measured us | measured as | model us | error |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        m = f"{r.measured_us:.2f}" if r.measured_us is not None else "–"
        mod = f"{r.model_us:.2f}" if r.model_us is not None else "– (--quick)"
        err = f"{r.error_pct:+.1f}%" if r.error_pct is not None else "–"
        source = r.source + (" (INVENTED)" if r.invented else "")
        out.append(f"| {r.point} | {r.side} | {m} | {source} | {mod} | {err} |")
    return out


SENSITIVE = ("start_spread_cycles", "compute_startup_cycles", "init_cycles", "tile_call_cycles",
             "l1_index_read_cycles", "core_read_plateau_bytes_per_cycle", "dram_latency_cycles",
             "unpack_bytes_per_cycle", "packer_bytes_per_cycle", "cb_handshake_cycles")


def print_measured(path: Path, quick: bool) -> int:
    """--measured: the report's device times beside the model's, per point; 2 when it is no hwcheck report."""
    try:
        report = load_report(path)
    except ValueError as exc:
        print(f"calibrate_model.py: argument '--measured': {exc}", file=sys.stderr)
        return 2
    system = report["system"]
    where = f"the mock {system['mock']}" if system["mock"] else f"{system['arch']} ({system['devices']} device(s))"
    print(f"Measured on {where}, {report['created']} (ttnn {system['ttnn_version']}) beside the MODEL ESTIMATES:")
    if report.get("note"):
        print(f"NOTE: {report['note']}")
    invented = [e["name"] for e in report["timing"] if e.get("invented")]
    if invented:
        print(f"INVENTED device times (not measured) at: {', '.join(invented)}")
    print()
    print("\n".join(measured_table(measured(report, quick))))
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, help="write one row per point here")
    ap.add_argument("--quick", action="store_true", help="skip the host run of our kernels at 128K")
    ap.add_argument("--no-ours", action="store_true", help="tt-metal's structure only (no kernel runs)")
    ap.add_argument("--headlines", action="store_true",
                    help="also the README's headline sweep points at HiFi2 and at the package default (minutes)")
    ap.add_argument("--measured", type=Path, metavar="REPORT",
                    help="a `python -m ttdecode hwcheck` report: measured device times beside the model's")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.measured:
        return print_measured(args.measured, args.quick)
    ps = points()
    print("Calibration (MODEL ESTIMATES of tt-metal's DEVICE KERNEL DURATION, in cycles; measured time x its "
          "machine's clock):")
    print()
    print("\n".join(table(ps)))
    misses = [p for p in ps if abs(p.error_pct) > TOLERANCE_PCT]
    print()
    print(f"{len(ps) - len(misses)} of {len(ps)} points within +-{TOLERANCE_PCT:.0f}% in cycles.")
    for p in misses:
        print(f"Miss `{p.name}` ({p.error_pct:+.1f}%): {EXPLAINED_MISSES.get(p.name, 'UNEXPLAINED')}.")
    rates = [tech_report_point(b, d) for b in (8, 16, 32) for d in (64, 128, 256)]
    gbps = [nb / cyc for cyc, nb in rates]
    print(f"Tech report sweep (B 8/16/32 x D 64/128/256, 128K, linear): model {min(gbps):.0f}-{max(gbps):.0f} GB/s "
          f"against its <= {TECH_REPORT_GBPS:.0f} GB/s")
    t3k = {}
    for cores in (8, 16, 32, 64):
        shape = TTMetalShape(1, 4, 1, 128, 32767, 32768, grid=(8, 8), max_cores_per_head_batch=cores,
                             reduction="linear", fused_correction=False)
        t3k[cores] = ttmetal_cycles(shape) / 1e3
    print("Tech report T3K 4q/1kv 32K, linear reduction (16 cores per head beat 64: "
          + ("reproduced" if t3k[16] < t3k[64] else "NOT reproduced") + "): "
          + ", ".join(f"{k} cores {v:.0f} us" for k, v in t3k.items()))
    if args.csv:
        write_csv(ps, args.csv)
        print(f"wrote {args.csv}")
    if not args.no_ours:
        print()
        print("Our kernels beside tt-metal's structure at the same points (MODEL ESTIMATES, us at 1 GHz):")
        print()
        print("\n".join(ours_rows(args.quick)))
    if args.headlines:
        print()
        print("Headline sweep points, our kernels (MODEL ESTIMATES; fp32 DST, exact exp, dynamic chunks):")
        print()
        headline_rows()
    print()
    base = ttmetal_cycles(TG)
    print(f"Sensitivity at the isolated op point (base {base:,.0f} cycles): each constant x0.5 / x2")
    for name in SENSITIVE:
        v = getattr(COST, name)
        lo, hi = (ttmetal_cycles(TG, c=dataclasses.replace(COST, **{name: v * f})) for f in (0.5, 2.0))
        print(f"  {name:36s} {lo:7,.0f} / {hi:7,.0f}")
    sf = dict(COST.sfpu_instructions_per_step)
    lo, hi = (ttmetal_cycles(TG, c=dataclasses.replace(COST, sfpu_instructions_per_step={k: v * f for k, v in sf.items()}))
              for f in (0.5, 2.0))
    print(f"  {'sfpu_instructions_per_step':36s} {lo:7,.0f} / {hi:7,.0f}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
