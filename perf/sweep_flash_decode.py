"""FlashDecode sweeps on the host runtime, timed by the Wormhole cost model (ttdecode.perf_model).

Every point is a real run of kernels/{reader,writer,compute}.cpp on the host runtime; the model turns
the run's counters into an estimated Wormhole step time. Sweeps (bfloat8_b K/V, bf16 Q, HiFi2,
fp32 accumulation, dynamic chunks, every user at cur_pos = S - 1):

  seq    Llama-3.1-8B on N150 (32 q / 8 kv heads, D 128), B 1, S 1K..32K (+64K, 128K while a run
         stays under --long-limit seconds)
  cores  T3K per chip (4q/1kv and 8q/1kv, D 128), B 1, S 32K, max_cores_per_head_batch 1..64
  batch  Llama-3.1-8B on N150, S 8K, B 1, 8, 32

  tg-llama70b  Galaxy Llama-70B per chip: B 8, 8q/1kv, D 128, cur_pos 127, 8x4 grid (tt-metal measured 7.4 us)
  tg-numerics  the same point, our kernels with tt-metal's numerics (bf16 DST, approximate exp; no tt-metal row)
  tg-hifi4     the same point at HiFi4, both kernels (ours: the package default, the one configuration that
               meets the accuracy bar, tech_report/accuracy_table.md)
  techreport   the FlashDecode tech report: B 8/16/32, S 128K, D 64/128/256, 8q/1kv
  key_row     ours with kv_pages "key_row" (bank-local pieces) at the techreport, seq (32K-128K) and T3K points

Every point gives a row per kernel: `ttdecode` (our kernels, run on the host, their counters through
ttdecode.perf_model) and `tt-metal` (its structure as data, ttdecode.perf_model.ttmetal_structure, through the same
model; at the tech report and cores points also with its earlier linear reduction). `--quick` runs
tg-llama70b, tg-numerics and tg-hifi4 only. All times are MODEL ESTIMATES.

Outputs in --out (default build/perf/, untracked): sweep_flash_decode.csv, fd_time_vs_seq.png,
fd_gbps_vs_cores.png, fd_reduction_share.png, fd_tg_llama70b.png, fd_techreport_gbps.png
(with --quick: sweep_flash_decode_quick.csv and fd_tg_llama70b.png); a table on stdout. The figures
need matplotlib (pip install 'ttdecode[plots]'); without it the run says so and writes the CSV only.
``--update-committed`` (a full run) writes them into tech_report/figures/, replacing the committed CSV
and figures.

    PYTHONPATH=. python perf/sweep_flash_decode.py            # full
    PYTHONPATH=. python perf/sweep_flash_decode.py --quick --out DIR   # the Galaxy Llama-70B points, both kernels
    PYTHONPATH=. python perf/sweep_flash_decode.py --update-committed  # full, into tech_report/figures/
    PYTHONPATH=. python perf/sweep_flash_decode.py --paged [--quick]    # the paged sweep (perf/sweep_paged.py)

``--paged`` runs the paged sweep instead (perf/sweep_paged.py: bank-local paged pools beside tt-metal's
structure on its tile-page pool, closed-form model estimates, PASS/FAIL per goal): sweep_paged[_quick].csv
and fd_paged_gbps_vs_seq[_quick].png in --out.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BUILD_OUT = REPO / "build" / "perf"  # default output directory (gitignored)
COMMITTED = REPO / "tech_report" / "figures"  # the committed CSV and figures, rewritten by --update-committed only

from ttdecode.perf_model.constants import COST  # noqa: E402
from ttdecode.perf_model.counters import work_from_counters  # noqa: E402
from ttdecode.perf_model.evaluator import Breakdown, evaluate  # noqa: E402
from ttdecode.ops.flash_decode.program_factory import run_flash_decode  # noqa: E402
from ttdecode.perf_model.ttmetal_structure import TTMetalShape, ttmetal_work  # noqa: E402
from ttdecode.core.formats import DataType  # noqa: E402
from ttdecode.ops.flash_decode.plan import DecodePlan, PlanError, make_plan, power_of_two_scale  # noqa: E402
from ttdecode.core.program_description import ComputeSettings, MathFidelity  # noqa: E402
from ttdecode.runtime.results import RunCounters  # noqa: E402
from ttdecode.core.tensor import TileTensor, from_torch  # noqa: E402
from perf.sweep_paged import main_paged  # noqa: E402

KV = DataType.bfloat8_b
#: tt-metal's published best FlashDecode K/V read rate (tt-metal tech_reports/FlashAttention/FlashDecode.md),
#: drawn for comparison.
TT_METAL_BEST_GBPS = 180.0
#: The DRAM micro-benchmark's reached rate (tt-metal tech_reports/Saturating_DRAM_bandwidth), drawn for comparison.
DRAM_MEASURED_GBPS = 267.0
#: The DRAM peak of the cost model's constants, bytes/s.
DRAM_PEAK_BYTES_PER_S = COST.dram_peak_bytes_per_cycle * COST.clock_hz


@dataclass(frozen=True)
class Point:
    """One configuration to run."""

    sweep: str
    model: str
    batch: int
    num_q_heads: int
    num_kv_heads: int
    seq_len: int
    max_cores: int = 16
    head_dim: int = 128
    grid: tuple[int, int] = (8, 8)
    cur_pos: Optional[int] = None  # every user's position; None = seq_len - 1
    k_chunk_size: int = 0  # tt-metal's chunk (0 = dynamic); our kernels always run dynamic chunks
    run_ours: bool = True  # False: the host run would be too large here (tt-metal's structure only)
    kv_pages: str = "tile"  # what our kernels' K/V pages hold: "tile" (interleaved) or "key_row" (bank-local pieces)
    # our kernels' numerics: "fp32" (the default: fp32 DST, accurate exp) or "tt-metal" (tt-metal's config: a bf16
    # DST, fp32_dest_acc_en=False, and the approximate exp its kernel runs, exp_approx_mode=True); a tt-metal
    # numerics point has no tt-metal row of its own (its structure's row is the point's fp32 twin's)
    numerics: str = "fp32"
    fidelity: str = "HiFi2"  # both kernels' math fidelity (tt-metal's Llama configs: HiFi2)

    @property
    def pos(self) -> int:
        return self.seq_len - 1 if self.cur_pos is None else self.cur_pos


#: tt-metal's measured device times / rates (the PRs and tests named in each key), drawn and compared in the report.
TG_LLAMA70B_MEASURED_US = {"PR #37004 (tree reduction)": 7.4, "perf unit test 6U": 8.18,
                           "decoder perf target 6U": 9.18, "decoder perf target 4U": 10.2}


def tg_llama70b_points() -> list[Point]:
    """Galaxy Llama-70B per chip: B=8, 8q/1kv, D=128, cur_pos=127, 8x4 grid (tt-metal's measured point)."""
    return [Point("tg-llama70b", "Galaxy Llama-70B chip 8q/1kv", 8, 8, 1, 128, 4, 128, (8, 4), 127),
            Point("tg-numerics", "Galaxy Llama-70B, tt-metal numerics", 8, 8, 1, 128, 4, 128, (8, 4), 127,
                  numerics="tt-metal"),
            Point("tg-hifi4", "Galaxy Llama-70B chip 8q/1kv, HiFi4", 8, 8, 1, 128, 4, 128, (8, 4), 127,
                  fidelity="HiFi4")]


def tech_report_points() -> list[Point]:
    """The FlashDecode tech report's sweep: B 8/16/32, S 128K, D 64/128/256, 8q/1kv, chunk 512 (ours with
    dynamic chunks; the largest, B 32 at D 256, needs ~12 GB of host memory to make its inputs)."""
    return [Point("techreport", f"tech report 8q/1kv D{d}", b, 8, 1, 131072, 16, d, (8, 8), None, 512)
            for b in (8, 16, 32) for d in (64, 128, 256)]


def key_row_cap(batch: int, nh: int, nkv: int, seq_len: int, head_dim: int) -> int:
    """The largest max_cores_per_head_batch (a multiple of 12, at most 60) whose key_row plan fits L1 at
    this shape (the plan then takes the model's pieces up to it, plan.split_choices.key_row_pieces)."""
    for pieces in (60, 48, 36, 24, 12):
        try:
            make_plan(batch=batch, num_q_heads=nh, num_kv_heads=nkv, seq_len=seq_len, head_dim=head_dim, kv_dtype=KV,
                      cur_pos=[seq_len - 1] * batch, max_cores_per_head_batch=pieces, kv_pages="key_row")
            return pieces
        except PlanError:
            continue
    raise PlanError(f"no key_row plan fits B={batch} D={head_dim} S={seq_len}")


def key_row_points(quick: bool, max_seq: int) -> list[Point]:
    """Our kernels with kv_pages "key_row" (K/V pages of one key-tile row round robin over the banks,
    up to 60 pieces per head that each read one bank, the model's choice; no tt-metal counterpart): the
    tech report's points (capped at the most pieces per head that fit L1, key_row_cap),
    Llama-3.1-8B N150 B 1 at 32K-128K, and T3K 4q/1kv and 8q/1kv at 32K capped at 12 and 60 pieces per head."""
    if quick:
        return []
    tr = [Point("techreport", f"tech report 8q/1kv D{d}", b, 8, 1, 131072, key_row_cap(b, 8, 1, 131072, d), d,
                (8, 8), None, 512, kv_pages="key_row") for b in (8, 16, 32) for d in (64, 128, 256)]
    seq = [Point("seq", "Llama-3.1-8B N150 32q/8kv", 1, 32, 8, s, 64, kv_pages="key_row")
           for s in (32768, 65536, 131072) if s <= max_seq]
    t3k = [Point("cores", f"T3K chip {nh}q/1kv", 1, nh, 1, 32768, mc, kv_pages="key_row") for nh in (4, 8) for mc in (12, 60)]
    return tr + seq + t3k


def llama_seq_points(quick: bool, max_seq: int) -> list[Point]:
    seqs = [1024, 8192] if quick else [s for s in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072) if s <= max_seq]
    return [Point("seq", "Llama-3.1-8B N150 32q/8kv", 1, 32, 8, s) for s in seqs]


def t3k_core_points(quick: bool) -> list[Point]:
    cores = [1, 16, 64] if quick else [1, 2, 4, 8, 16, 32, 64]
    heads = [4] if quick else [4, 8]
    return [Point("cores", f"T3K chip {nh}q/1kv", 1, nh, 1, 32768, mc) for nh in heads for mc in cores]


def batch_points(quick: bool) -> list[Point]:
    batches = [1, 8] if quick else [1, 8, 32]
    return [Point("batch", "Llama-3.1-8B N150 32q/8kv", b, 32, 8, 8192) for b in batches]


_INPUTS: dict[tuple[int, ...], tuple[TileTensor, TileTensor, TileTensor]] = {}


def inputs_for(p: Point) -> tuple[TileTensor, TileTensor, TileTensor]:
    """N(0, 1) Q (bf16) and K/V (bfloat8_b) for the point's shape; cached per shape."""
    key = (p.batch, p.num_q_heads, p.num_kv_heads, p.seq_len, p.head_dim)
    if key not in _INPUTS:
        _INPUTS.clear()  # one shape at a time: the long caches are large
        g = torch.Generator().manual_seed(0)
        q = from_torch(torch.randn(1, p.batch, p.num_q_heads, p.head_dim, generator=g))
        k = from_torch(torch.randn(p.batch, p.num_kv_heads, p.seq_len, p.head_dim, generator=g), KV)
        v = from_torch(torch.randn(p.batch, p.num_kv_heads, p.seq_len, p.head_dim, generator=g), KV)
        _INPUTS[key] = (q, k, v)
    return _INPUTS[key]


def run_point(p: Point) -> tuple[DecodePlan, RunCounters, float]:
    """Run the kernels for `p`; returns (plan, the run's counters, wall seconds incl. making inputs)."""
    t0 = time.perf_counter()
    q, k, v = inputs_for(p)
    fp32 = p.numerics == "fp32"
    plan = make_plan(batch=p.batch, num_q_heads=p.num_q_heads, num_kv_heads=p.num_kv_heads, seq_len=p.seq_len,
                     head_dim=p.head_dim, kv_dtype=KV, cur_pos=[p.pos] * p.batch,
                     max_cores_per_head_batch=p.max_cores, grid=p.grid, kv_pages=p.kv_pages,
                     prescale_q=power_of_two_scale(1 / math.sqrt(p.head_dim)),  # as the API plans
                     fp32_dest_acc_en=fp32, math_fidelity=p.fidelity)
    out, _, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1 / math.sqrt(p.head_dim),
                                      compute=ComputeSettings(math_fidelity=MathFidelity(p.fidelity), fp32_dest_acc_en=fp32),
                                      exp_approx=not fp32)
    if not torch.isfinite(out.float()).all():
        raise RuntimeError(f"{p}: the kernels produced non-finite outputs")
    return plan, result.counters, time.perf_counter() - t0


def _breakdown_cols(b: Breakdown) -> dict[str, object]:
    comp = b.compute_us
    return {"est_us": round(b.total_us, 3), "achieved_gbps": round(b.achieved_gbps, 2),
            "launch_us": round(b.launch_us, 3), "local_us": round(b.local_us, 3), "reader_us": round(b.reader_us, 3),
            "dram_floor_us": round(b.dram_floor_us, 3), "reduction_us": round(b.reduction_us, 3),
            "reduction_share": round(b.reduction_share, 4),
            **{f"{k}_us": round(comp.get(k, 0.0), 3) for k in ("matmul", "sfpu", "eltwise", "reduce", "init")},
            "kv_bytes": b.kv_bytes, "cores_used": b.cores,
            "pct_of_288": round(100 * b.achieved_gbps * 1e9 / DRAM_PEAK_BYTES_PER_S, 1)}


def ttmetal_reductions(p: Point) -> tuple[str, ...]:
    """tt-metal's reductions to model at `p`: today's tree everywhere; also the linear one (its
    tech report's era) at the tech report's points and the T3K cores sweep, to compare with what
    the report measured."""
    return ("tree", "linear") if p.sweep in ("techreport", "cores") else ("tree",)


def ttmetal_row(p: Point, reduction: str = "tree") -> dict[str, object]:
    """tt-metal's structure (ttdecode.perf_model.ttmetal_structure) through the cost model at `p`; the linear
    reduction stands for the tech report's version, whose merge ran its correction as separate ops."""
    shape = TTMetalShape(p.batch, p.num_q_heads, p.num_kv_heads, p.head_dim, p.pos, p.seq_len, p.grid, p.max_cores,
                         p.k_chunk_size, reduction=reduction, fused_correction=reduction == "tree")
    works, red, counts = ttmetal_work(shape)
    b = evaluate(works, red, p.fidelity)
    return {"sweep": p.sweep, "kernel": "tt-metal", "kv_pages": "tile", "reduction": reduction, "model": p.model,
            "batch": p.batch, "num_q_heads": p.num_q_heads,
            "num_kv_heads": p.num_kv_heads, "head_dim": p.head_dim, "seq_len": p.seq_len, "cur_pos": p.pos,
            "max_cores_per_head": p.max_cores, "pieces_per_head": counts["active_cores_per_head"],
            **_breakdown_cols(b), "run_seconds": 0.0}


def row_of(p: Point, plan: DecodePlan, b: Breakdown, wall: float) -> dict[str, object]:
    return {
        "sweep": p.sweep, "kernel": "ttdecode", "kv_pages": p.kv_pages, "reduction": "tree", "model": p.model,
        "batch": p.batch, "num_q_heads": p.num_q_heads,
        "num_kv_heads": p.num_kv_heads, "head_dim": p.head_dim, "seq_len": p.seq_len, "cur_pos": p.pos,
        "max_cores_per_head": p.max_cores, "pieces_per_head": plan.pieces_per_work,
        **_breakdown_cols(b), "run_seconds": round(wall, 2),
    }


def run_sweeps(points: list[Point], long_limit: float) -> Iterator[tuple[Point, dict[str, object]]]:
    """Run every point; stops the S sweep once a run at S >= 64K exceeds `long_limit` seconds."""
    seq_too_slow = False
    for p in points:
        if p.sweep == "seq" and seq_too_slow:
            print(f"  skip S={p.seq_len}: a run at S >= 64K exceeded {long_limit:.0f} s", flush=True)
            continue
        if p.run_ours:
            plan, counters, wall = run_point(p)
            if p.sweep == "seq" and p.seq_len >= 65536 and wall > long_limit:
                seq_too_slow = True
            works, red, fid = work_from_counters(plan, counters)
            yield p, row_of(p, plan, evaluate(works, red, fid), wall)
        if p.kv_pages != "tile" or p.numerics != "fp32":
            continue  # tt-metal reads interleaved caches only; a numerics variant's twin has tt-metal's row
        for reduction in ttmetal_reductions(p):
            yield p, ttmetal_row(p, reduction)


COLUMNS = ["sweep", "kernel", "kv pages", "reduction", "model", "B", "D", "S", "max/head", "pieces/head", "cores", "est us",
           "launch", "local", "reader",
           "matmul", "sfpu", "eltwise", "reduce", "init", "reduction", "red %", "GB/s", "% 288"]


def print_table(rows: list[dict[str, object]]) -> None:
    """A markdown table of the rows (model estimates)."""
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in rows:
        cells = [r["sweep"], r["kernel"], r["kv_pages"], r["reduction"], r["model"], r["batch"], r["head_dim"], r["seq_len"],
                 r["max_cores_per_head"], r["pieces_per_head"],
                 r["cores_used"], f"{r['est_us']:.1f}", f"{r['launch_us']:.1f}", f"{r['local_us']:.1f}",
                 f"{r['reader_us']:.1f}", f"{r['matmul_us']:.1f}", f"{r['sfpu_us']:.1f}", f"{r['eltwise_us']:.1f}",
                 f"{r['reduce_us']:.1f}", f"{r['init_us']:.1f}", f"{r['reduction_us']:.1f}", f"{100 * float(r['reduction_share']):.1f}",
                 f"{r['achieved_gbps']:.1f}", r["pct_of_288"]]
        print("| " + " | ".join(str(c) for c in cells) + " |")


def write_csv(rows: list[dict[str, object]], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


#: How the Galaxy point's variants are labelled in fd_tg_llama70b.png.
TG_VARIANTS = {"tg-llama70b": "HiFi2", "tg-numerics": "HiFi2, bf16 DST + approx exp (tt-metal's numerics)",
               "tg-hifi4": "HiFi4"}


def plot_tg(rows: list[dict[str, object]], out: Path) -> list[Path]:
    """fd_tg_llama70b.png: both kernels' estimates at the Galaxy point (each variant of TG_VARIANTS in the
    rows) next to tt-metal's measurements."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tg = [r for v in TG_VARIANTS for r in rows if r["sweep"] == v]
    if not tg:
        return []
    fig, ax = plt.subplots(figsize=(7.4, 4.2))
    default = " (package default)"  # ours at HiFi4 with the fp32 DST: the one config meeting the accuracy bar
    labels = [f"model: {r['kernel']}, {TG_VARIANTS[str(r['sweep'])]}"
              + (default if r["sweep"] == "tg-hifi4" and r["kernel"] == "ttdecode" else "") for r in tg] + \
        [f"measured: {k}" for k in TG_LLAMA70B_MEASURED_US]
    values = [float(r["est_us"]) for r in tg] + list(TG_LLAMA70B_MEASURED_US.values())
    colors = ["C0" if "ttdecode" in lab else "C1" if "model" in lab else "gray" for lab in labels]
    ax.barh(labels, values, color=colors)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.1f}", va="center", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("µs per decode step")
    ax.set_title("Galaxy Llama-70B per chip (B=8, 8q/1kv, D=128, cur_pos=127, 8x4 cores):\nmodel estimates "
                 "vs tt-metal's measurements", fontsize=7, loc="right")
    path = out / "fd_tg_llama70b.png"
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return [path]


def plot(rows: list[dict[str, object]], out: Path) -> list[Path]:
    """The figures (model estimates, tt-metal's measured points overlaid); returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[Path] = plot_tg(rows, out)
    tr = [r for r in rows if r["sweep"] == "techreport"]
    if tr:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for (kern, lay, red), style in ((("ttdecode", "tile", "tree"), "o"), (("ttdecode", "key_row", "tree"), "s"),
                                        (("tt-metal", "tile", "tree"), "x"),
                                        (("tt-metal", "tile", "linear"), "+")):
            rs = [r for r in tr if r["kernel"] == kern and r["reduction"] == red and r["kv_pages"] == lay]
            ax.plot([f"B{r['batch']} D{r['head_dim']}" for r in rs], [r["achieved_gbps"] for r in rs], style,
                    ms=8, label=f"model: {kern} {lay} ({red} reduction)")
        ax.axhline(TT_METAL_BEST_GBPS, color="gray", ls="--", lw=1, label="tt-metal measured (tech report): up to 180 GB/s")
        ax.axhline(DRAM_PEAK_BYTES_PER_S / 1e9, color="k", lw=1, label="DRAM peak 288 GB/s")
        ax.set_ylabel("K/V GB/s")
        ax.set_title("FlashDecode tech report points: 128K, 8q/1kv, bfloat8_b (model estimates)", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        made.append(out / "fd_techreport_gbps.png")
        fig.tight_layout()
        fig.savefig(made[-1], dpi=130)
        plt.close(fig)
    tt_seq = [r for r in rows if r["sweep"] == "seq" and r["kernel"] == "tt-metal"]
    tt_cores = [r for r in rows if r["sweep"] == "cores" and r["kernel"] == "tt-metal"]
    tt_seq = [r for r in tt_seq if r["reduction"] == "tree"]
    seq_rows = [r for r in rows if r["sweep"] == "seq" and r["kernel"] == "ttdecode" and r["kv_pages"] == "key_row"]
    rows = [r for r in rows if r["kernel"] == "ttdecode" and r["kv_pages"] == "tile"]
    seq = [r for r in rows if r["sweep"] == "seq"]
    if seq:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        s = [int(r["seq_len"]) for r in seq]
        kv = [int(r["kv_bytes"]) for r in seq]
        ax.plot(s, [r["est_us"] for r in seq], "o-", label="model: ttdecode step time")
        ax.plot([int(r["seq_len"]) for r in tt_seq], [r["est_us"] for r in tt_seq], "x-",
                label="model: tt-metal's structure")
        ax.plot([int(r["seq_len"]) for r in seq_rows], [r["est_us"] for r in seq_rows], "D-",
                label="model: ttdecode, kv_pages key_row (the model's pieces per head)")
        ax.plot(s, [r["local_us"] for r in seq], "s--", label="slowest core (DRAM/compute overlapped)")
        ax.plot(s, [r["reduction_us"] for r in seq], "^:", label="reduction critical path")
        ax.plot(s, [b / (DRAM_PEAK_BYTES_PER_S) * 1e6 for b in kv], "k-", lw=1,
                label="DRAM roofline, 288 GB/s")
        ax.plot(s, [b / (DRAM_MEASURED_GBPS * 1e9) * 1e6 for b in kv], "k--", lw=0.8,
                label=f"{DRAM_MEASURED_GBPS:.0f} GB/s (DRAM micro-benchmark)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length S (keys)")
        ax.set_ylabel("time per decode step (µs)")
        ax.set_title("Llama-3.1-8B N150, B=1, bfloat8_b K/V (host-run kernels + Wormhole model)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        made.append(out / "fd_time_vs_seq.png")
        fig.tight_layout()
        fig.savefig(made[-1], dpi=130)
        plt.close(fig)
    cores = [r for r in rows if r["sweep"] == "cores"]
    if cores:
        models = sorted({str(r["model"]) for r in cores})
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for m in models:
            rs = [r for r in cores if r["model"] == m]
            ax.plot([r["pieces_per_head"] for r in rs], [r["achieved_gbps"] for r in rs], "o-", label=f"ttdecode {m}")
            for red, style in (("tree", "x--"), ("linear", "+:")):
                ts = [r for r in tt_cores if r["model"] == m and r["reduction"] == red]
                ax.plot([r["max_cores_per_head"] for r in ts], [r["achieved_gbps"] for r in ts], style,
                        label=f"tt-metal structure ({red} reduction) {m}")
        ax.axhline(DRAM_PEAK_BYTES_PER_S / 1e9, color="k", lw=1, label="DRAM peak 288 GB/s")
        ax.axhline(TT_METAL_BEST_GBPS, color="gray", ls="--", lw=1, label="tt-metal measured best ~180 GB/s (tech report)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("cores per KV head (max_cores_per_head_batch)")
        ax.set_ylabel("K/V GB/s (model estimates)")
        ax.set_title("T3K per chip, B=1, S=32K", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        made.append(out / "fd_gbps_vs_cores.png")
        fig.tight_layout()
        fig.savefig(made[-1], dpi=130)
        plt.close(fig)

        fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.0))
        for m in models:
            rs = [r for r in cores if r["model"] == m]
            axes[0].plot([r["pieces_per_head"] for r in rs], [100 * float(r["reduction_share"]) for r in rs], "o-", label=m)
        axes[0].set_xscale("log", base=2)
        axes[0].set_xlabel("cores per KV head")
        axes[0].set_ylabel("reduction share of step time (%)")
        axes[0].set_title("T3K per chip, B=1, S=32K", fontsize=9)
        axes[0].grid(True, alpha=0.3)
        axes[0].legend(fontsize=7)
        if seq:
            axes[1].plot([r["seq_len"] for r in seq], [100 * float(r["reduction_share"]) for r in seq], "o-",
                         label="Llama-3.1-8B N150 B=1")
            axes[1].set_xscale("log", base=2)
            axes[1].set_xlabel("sequence length S")
            axes[1].set_title("N150, 8 cores per KV head", fontsize=9)
            axes[1].grid(True, alpha=0.3)
            axes[1].legend(fontsize=7)
        made.append(out / "fd_reduction_share.png")
        fig.tight_layout()
        fig.savefig(made[-1], dpi=130)
        plt.close(fig)
    return made


def figures_unavailable() -> Optional[str]:
    """Why no figure can be drawn (matplotlib, of the plots extra, not installed), or None."""
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (pip install 'ttdecode[plots]')"
    return None


def main(argv: Optional[list[str]] = None) -> int:
    """Run the sweeps and write the CSV and figures; 2 when --update-committed cannot draw them."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="the Galaxy Llama-70B points only (tg-llama70b, tg-numerics, tg-hifi4)")
    ap.add_argument("--out", type=Path, default=None,
                    help="directory for the CSV and figures (default: build/perf/, untracked)")
    ap.add_argument("--update-committed", action="store_true",
                    help="write into tech_report/figures/, replacing the committed CSV and figures (full run only)")
    ap.add_argument("--paged", action="store_true",
                    help="the paged sweep (bank-local paged vs tt-metal's structure, goals); with --quick its subset")
    ap.add_argument("--max-seq", type=int, default=131072, help="longest S of the seq sweep (default: 131072)")
    ap.add_argument("--long-limit", type=float, default=60.0,
                    help="seconds: after a run at S >= 64K taking longer, the longer S are skipped (default: 60)")
    args = ap.parse_args(argv)
    if args.update_committed and (args.out is not None or args.quick):
        ap.error("--update-committed writes tech_report/figures/ from a full run: without --out and --quick")
    no_figures = figures_unavailable()
    if no_figures and args.update_committed:
        print(f"sweep_flash_decode: --update-committed replaces the committed figures, but {no_figures}",
              file=sys.stderr)
        return 2
    if no_figures:
        print(f"sweep_flash_decode: no figures, the CSV only: {no_figures}", file=sys.stderr)
    args.out = COMMITTED if args.update_committed else (args.out or BUILD_OUT)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.paged:
        if args.update_committed:
            ap.error("--paged writes into --out only")
        return main_paged(args.quick, args.out, draw=no_figures is None)
    points = tg_llama70b_points()
    if not args.quick:
        points += (tech_report_points() + llama_seq_points(False, args.max_seq) + t3k_core_points(False) + batch_points(False)
                   + key_row_points(False, args.max_seq))
    rows: list[dict[str, object]] = []
    t0 = time.perf_counter()
    for p, row in run_sweeps(points, args.long_limit):
        print(f"  {p.sweep:<5} {row['kernel']:<8} {row['reduction']:<6} {p.model:<26} B={p.batch:<2} S={p.seq_len:<6} "
              f"cores/head={row['pieces_per_head']:<2} "
              f"-> {row['est_us']:.1f} us, {row['achieved_gbps']:.1f} GB/s ({row['run_seconds']:.1f} s)", flush=True)
        rows.append(row)
    suffix = "_quick" if args.quick else ""
    csv_path = args.out / f"sweep_flash_decode{suffix}.csv"
    write_csv(rows, csv_path)
    figs = [] if no_figures else plot(rows, args.out)
    print()
    print_table(rows)
    print(f"\n{len(rows)} runs in {time.perf_counter() - t0:.0f} s; wrote {csv_path}" +
          "".join(f", {f}" for f in figs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
