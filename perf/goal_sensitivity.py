"""Which of the performance goals hang on the cost model's assumed constants (perf/README.md, "Goals (model
estimates)").

Runs our kernels once per goal point on the host runtime (the plans and runs of
`perf/sweep_flash_decode.py`), then prices the same counters (and tt-metal's structure, for the
Galaxy goal) under each ASSUMED or FITTED constant of `ttdecode.perf_model.constants.CostConstants` halved and
doubled, and for each constant the value, between a quarter and four times the nominal one, at
which the goal's verdict flips (the other constants nominal). The plans stay the ones made under the
nominal constants: a plan made under other constants could split differently. All figures are MODEL
ESTIMATES.

    PYTHONPATH=. python perf/goal_sensitivity.py            # every goal point (the 128K one takes minutes)
    PYTHONPATH=. python perf/goal_sensitivity.py --quick    # without the tech report's 128K point
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ttdecode.perf_model.constants import COST, CostConstants  # noqa: E402
from ttdecode.perf_model.counters import work_from_counters  # noqa: E402
from ttdecode.perf_model.evaluator import Breakdown, evaluate  # noqa: E402
from ttdecode.perf_model.ttmetal_structure import TTMetalShape, ttmetal_work  # noqa: E402

_spec = importlib.util.spec_from_file_location("sweep_flash_decode", REPO / "perf" / "sweep_flash_decode.py")
sweep = importlib.util.module_from_spec(_spec)
sys.modules["sweep_flash_decode"] = sweep
_spec.loader.exec_module(sweep)  # type: ignore[union-attr]

#: The constants the model could not source (ASSUMED), or sourced from one benchmark or a range (the
#: launch skew, the compute kernel's init, the interleaved efficiency), perf_model.constants.COST_SOURCES.
UNSOURCED = ("start_spread_cycles", "compute_startup_cycles", "tile_call_cycles", "init_cycles", "semaphore_handshake_cycles",
             "noc_write_setup_cycles", "cb_handshake_cycles", "dram_interleaved_efficiency")
#: The span searched for a flip, as factors of the nominal value.
SPAN = (0.25, 4.0)


@dataclass(frozen=True)
class Goal:
    """A performance goal (perf/README.md, "Goals (model estimates)") at one point: `metric(c)` under
    constants c, met when `met(metric)`."""

    name: str
    metric: Callable[[CostConstants], float]
    met: Callable[[float], bool]
    unit: str


def flip_factor(metric: Callable[[CostConstants], float], met: Callable[[float], bool], name: str,
                base: CostConstants = COST, span: tuple[float, float] = SPAN, steps: int = 24) -> Optional[float]:
    """The factor f of constant `name` (others nominal), nearest 1 within `span`, at which the verdict
    differs from the nominal one: a geometric scan of `steps` points each way, then bisection to 1%.
    None when it does not flip within the span."""
    nominal = getattr(base, name)
    scaled = lambda f: dataclasses.replace(base, **{name: nominal * f})  # noqa: E731
    want = met(metric(base))
    best: Optional[float] = None
    for lo_end in (span[0], span[1]):
        prev = 1.0
        for k in range(1, steps + 1):
            f = lo_end ** (k / steps)
            if met(metric(scaled(f))) != want:
                a, b = prev, f
                while abs(b / a - 1) > 0.01:
                    m = (a * b) ** 0.5
                    if met(metric(scaled(m))) != want:
                        b = m
                    else:
                        a = m
                if best is None or abs(b - 1) < abs(best - 1):
                    best = b
                break
            prev = f
    return best


def _ours(p) -> Callable[[CostConstants], Breakdown]:
    plan, counters, _ = sweep.run_point(p)
    works, red, fid = work_from_counters(plan, counters)
    return lambda c: evaluate(works, red, fid, c)


def _theirs(p) -> Callable[[CostConstants], Breakdown]:
    shape = TTMetalShape(p.batch, p.num_q_heads, p.num_kv_heads, p.head_dim, p.pos, p.seq_len, p.grid, p.max_cores,
                         p.k_chunk_size, reduction="tree")
    works, red, _ = ttmetal_work(shape)
    return lambda c: evaluate(works, red, "HiFi2", c)


def _compute_over_reader(b: Breakdown) -> float:
    """The slowest core's compute over its reader (or the DRAM floor): <= 1 is DRAM-bound."""
    return sum(b.compute_us.values()) / b.reader_us


def goals(quick: bool) -> list[Goal]:
    P = sweep.Point
    out: list[Goal] = []
    tg = sweep.tg_llama70b_points()[0]
    ours, theirs = _ours(tg), _theirs(tg)
    out.append(Goal("tg-llama70b: ours <= 5 us", lambda c: ours(c).total_us, lambda v: v <= 5.0, "us"))
    out.append(Goal("tg-llama70b: tt-metal's structure / ours >= 1.5",
                    lambda c: theirs(c).total_us / ours(c).total_us, lambda v: v >= 1.5, "x"))
    if not quick:
        tr = P("techreport", "tech report 8q/1kv D128", 8, 8, 1, 131072, sweep.key_row_cap(8, 8, 1, 131072, 128), 128,
               (8, 8), None, 512, kv_pages="key_row")
        f = _ours(tr)
        out.append(Goal("tech report B 8 D 128 128K key_row: >= 252 GB/s (1.4 x 180)", lambda c: f(c).achieved_gbps,
                        lambda v: v >= 252.0, "GB/s"))
    n150 = _ours(P("seq", "Llama-3.1-8B N150 32q/8kv", 1, 32, 8, 32768, 64, kv_pages="key_row"))
    out.append(Goal("Llama-3.1-8B N150 B 1 32K key_row: >= 85% of 288 GB/s",
                    lambda c: 100 * n150(c).achieved_gbps / 288.0, lambda v: v >= 85.0, "%"))
    for nh in (4, 8):
        t3k = _ours(P("cores", f"T3K chip {nh}q/1kv", 1, nh, 1, 32768, 16))
        out.append(Goal(f"T3K {nh}q/1kv 32K, 16 cores per head: DRAM-bound (compute / reader <= 1)",
                        lambda c, t=t3k: _compute_over_reader(t(c)), lambda v: v <= 1.0, "x"))
    for nh in (4, 8):
        kr = _ours(P("cores", f"T3K chip {nh}q/1kv", 1, nh, 1, 32768, 60, kv_pages="key_row"))
        out.append(Goal(f"T3K {nh}q/1kv 32K key_row, 60 per head: reduction <= 25% of the step",
                        lambda c, t=kr: 100 * t(c).reduction_share, lambda v: v <= 25.0, "%"))
    return out


def table(gs: Sequence[Goal], names: Sequence[str] = UNSOURCED) -> str:
    head = ["goal", "nominal", "met"] + [f"{n} x0.5 / x2" for n in names] + ["flips at (x nominal)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in gs:
        v = g.metric(COST)
        cells = [g.name, f"{v:.3g} {g.unit}", "yes" if g.met(v) else "no"]
        flips = []
        for n in names:
            lo = g.metric(dataclasses.replace(COST, **{n: getattr(COST, n) * 0.5}))
            hi = g.metric(dataclasses.replace(COST, **{n: getattr(COST, n) * 2.0}))
            mark = lambda x: f"{x:.3g}" + ("" if g.met(x) == g.met(v) else "*")  # noqa: E731
            cells.append(f"{mark(lo)} / {mark(hi)}")
            f = flip_factor(g.metric, g.met, n)
            if f is not None:
                flips.append(f"{n} x{f:.2f}")
        cells.append(", ".join(flips) if flips else f"none in x{SPAN[0]}-x{SPAN[1]:g}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the tech report's 128K key_row point")
    args = ap.parse_args(argv)
    print("Performance goals under the model's unsourced constants (MODEL ESTIMATES; * = the verdict flips; "
          "plans made under the nominal constants)\n")
    print(table(goals(args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
