"""One program kind checked on a device: our call run `CALLS` times, each against the float64 reference
with the project's bar (``ttdecode.accuracy.THRESHOLDS``), the last call against the first, and ttnn's own
op on the same inputs.

The first call builds the program and launches its full descriptor (per-core runtime args sent); later calls
hit the program cache and, for a program whose per-core args hold no address, launch the lean descriptor
(per-core args held back: ttnn keeps the cached program's; ``ttdecode.ttnn_backend.prepared``). Each call's
path is read from ``prepared.RUN_COUNTS``. The verdict says which path failed.

Every figure is a number, or `MOCK` on the mock device (it computes nothing; what runs there is the path:
validation, program build, JIT, launches, program cache).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Union

import torch

from ttdecode.accuracy import THRESHOLDS, pcc, rel_l2
from ttdecode.hwcheck.kinds import CALLS, Kind
from ttdecode.hwcheck.programs import Outputs, build
from ttdecode.ttnn_backend.prepared import RUN_COUNTS

__all__ = ["MOCK", "check_kind", "metrics", "passes", "short_error"]

#: A figure the mock device cannot give.
MOCK = "mock: not computed"
Figure = Union[float, bool, str, None]


def metrics(got: Outputs, ref: Outputs) -> dict[str, dict[str, float]]:
    """Per output: rel_l2 and pcc against `ref` (an LSE: the largest absolute error over finite entries, and
    whether -inf stands exactly where the reference has it)."""
    out: dict[str, dict[str, float]] = {}
    for name, r in ref.items():
        g = got[name].double()
        if name == "lse":
            skipped = torch.isneginf(r)
            same_skips = bool(torch.equal(torch.isneginf(g), skipped))
            live = (g[~skipped] - r[~skipped]).abs()
            err = float(live.max()) if live.numel() else 0.0
            out[name] = {"max_abs": err if same_skips and torch.isfinite(live).all() else float("inf")}
        else:
            finite = bool(torch.isfinite(g).all())
            out[name] = {"rel_l2": rel_l2(g, r) if finite else float("inf"), "pcc": pcc(g, r) if finite else 0.0}
    return out


def passes(m: dict[str, dict[str, float]]) -> bool:
    """Every output within the bar."""
    for name, v in m.items():
        if name == "lse":
            if not v["max_abs"] <= THRESHOLDS.max_lse_abs:
                return False
        elif not (v["rel_l2"] <= THRESHOLDS.max_rel_l2 and v["pcc"] >= THRESHOLDS.min_pcc):
            return False
    return True


def _masked(m: dict[str, dict[str, float]], mock: bool) -> dict[str, dict[str, Figure]]:
    return {n: {k: MOCK if mock else v for k, v in d.items()} for n, d in m.items()}


def _run_call(fn: Callable[[], Outputs]) -> tuple[Outputs, str, float]:
    """One call: (outputs, the descriptor path it launched, host seconds)."""
    before = dict(RUN_COUNTS)
    t0 = time.perf_counter()
    got = fn()
    seconds = time.perf_counter() - t0
    full, lean = (RUN_COUNTS[k] - before[k] for k in ("full", "lean"))
    path = "lean" if lean and not full else "full" if full and not lean else "mixed" if full else "none"
    return got, path, seconds


def _verdict(ok: list[bool], identical: bool, paths: list[str]) -> tuple[str, str]:
    """(status, verdict) from each call's pass, whether call 3 equals call 1, and each call's path."""
    cached = f"the cached path (call {len(ok)}: {paths[-1]} descriptor)"
    if all(ok) and identical:
        return "pass", f"every call within the bar; call {len(ok)} identical to call 1 ({', '.join(paths)})"
    if not ok[0] and not ok[-1]:
        return "fail", (f"call 1 (the full descriptor, program built) misses the bar; {cached} "
                        + ("repeats it bit for bit" if identical else "misses it too, with other values"))
    if ok[0] and not ok[-1]:
        return "fail", f"{cached} failed: call 1 met the bar, call {len(ok)} misses it (per-core args lost?)"
    if not ok[0]:
        return "fail", f"call 1 (the full descriptor) missed the bar, call {len(ok)} met it: the first launch failed"
    return "fail", f"calls 1 and {len(ok)} both meet the bar but differ: the kernels are meant to be deterministic"


def short_error(exc: BaseException, limit: int = 400) -> str:
    """``Type: first line``, and tt-metal's ``info:`` line when the message has one (its reason)."""
    lines = str(exc).splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if "info:" in lines and lines.index("info:") + 1 < len(lines):
        text += " -- " + lines[lines.index("info:") + 1]
    return text[:limit]


def _theirs(case: Any, ours_first: Outputs, mock: bool) -> dict[str, Any] | None:
    if case.theirs is None:
        return None
    entry: dict[str, Any] = {"op": case.theirs_name, "error": None}
    try:
        got = case.theirs()
    except Exception as exc:  # ttnn's refusal of a configuration ours takes: recorded, not ours' failure
        entry["error"] = short_error(exc)
        return entry
    m = metrics(got, {"out": case.reference["out"]})
    entry["metrics"] = _masked(m, mock)
    entry["ours_vs_ttnn_rel_l2"] = MOCK if mock else rel_l2(ours_first["out"].double(), got["out"].double())
    return entry


def check_kind(kind: Kind, ttnn: Any, device: Any, mock: bool, calls: int = CALLS) -> dict[str, Any]:
    """Build, run `calls` times and judge one kind; the report's entry (``report.schema.json``: program)."""
    t0 = time.perf_counter()
    case = build(kind, ttnn, device)
    entry: dict[str, Any] = {"name": kind.name, "family": kind.family, "config": kind.config(), "calls": []}
    runs = []
    for i in range(calls):
        got, path, seconds = _run_call(case.ours)
        m = metrics(got, case.reference)
        runs.append((got, m))
        entry["calls"].append({"call": i + 1, "path": path, "host_seconds": round(seconds, 4),
                               "metrics": _masked(m, mock)})
    first, last = runs[0][0], runs[-1][0]
    identical = all(torch.equal(first[n], last[n]) for n in first)
    diff = max(float((first[n] - last[n]).abs().nan_to_num(nan=float("inf")).max()) for n in first)
    entry["last_vs_first"] = {"identical": MOCK if mock else identical, "max_abs_diff": MOCK if mock else diff}
    entry["ttnn_op"] = _theirs(case, first, mock)
    paths = [c["path"] for c in entry["calls"]]
    if mock:
        entry["status"], entry["verdict"] = "mock", f"{MOCK} (the mock computes nothing); paths: {', '.join(paths)}"
    else:
        entry["status"], entry["verdict"] = _verdict([passes(m) for _, m in runs], identical, paths)
    entry["error"] = None
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    return entry
