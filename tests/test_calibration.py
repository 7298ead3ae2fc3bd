"""perf/calibrate_model.py: tt-metal's decode op, written as data, through the cost model lands within
+-20% in cycles of every published Wormhole measurement (tech_report/calibration.md), or the point is in the
script's documented list of explained misses. Runs the command as a user would (`--quick --csv`)."""

from __future__ import annotations

import csv
import os
import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "perf" / "calibrate_model.py"
#: The published measurements the calibration must cover (at least these rows in the CSV).
REQUIRED = ("isolated-op-6u", "isolated-op-4u", "in-model-6u", "pr26227-dram", "pr26227-l1", "mla-deepseek-v3",
            "techreport-180gbps", "dram-interleaved-noc0", "dram-interleaved-noc1", "dram-bank-local")


def _module():
    spec = importlib.util.spec_from_file_location("calibrate_model_for_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["calibrate_model_for_test"] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        sys.modules.pop("calibrate_model_for_test", None)
    return mod


def test_every_calibration_point_is_within_20_percent_in_cycles_or_an_explained_miss(tmp_path: Path) -> None:
    out = tmp_path / "calibration.csv"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--csv", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert {"point", "measured_cycles", "model_cycles", "error_pct"} <= set(rows[0])
    names = [r["point"] for r in rows]
    assert set(REQUIRED) <= set(names) and len(names) == len(set(names))
    explained = _module().EXPLAINED_MISSES
    for r in rows:
        measured, model, err = float(r["measured_cycles"]), float(r["model_cycles"]), float(r["error_pct"])
        assert measured > 0 and model > 0
        assert abs(err - 100 * (model - measured) / measured) < 0.01
        assert abs(err) <= 20.0 or (r["point"] in explained and r["explained_miss"]), r
        # every miss printed with its explanation, never an unexplained one
    assert "UNEXPLAINED" not in proc.stdout
    for name in explained:
        if abs(float(next(r for r in rows if r["point"] == name)["error_pct"])) > 20.0:
            assert f"Miss `{name}`" in proc.stdout
    # the table and our kernels beside tt-metal's structure, at both numerics
    assert "| `isolated-op-6u` |" in proc.stdout and "Our kernels beside" in proc.stdout
    assert "ours default (HiFi4, fp32 DST" in proc.stdout and "tt-metal's (HiFi2, bf16 DST" in proc.stdout


def test_clocks_compare_in_cycles() -> None:
    """The isolated op test reads 9.09 us on a 900 MHz Galaxy 4U and 8.18 us on a 1000 MHz 6U: ~8,180 cycles
    both; the model predicts one figure in cycles for both."""
    mod = _module()
    ps = {p.name: p for p in mod.points()}
    a, b = ps["isolated-op-6u"], ps["isolated-op-4u"]
    assert abs(a.measured_cycles - b.measured_cycles) / a.measured_cycles < 0.001
    assert a.model_cycles == b.model_cycles


def test_the_launch_skew_is_a_start_spread_over_the_ops_cores() -> None:
    """One core starts alone (no skew); two or more spread their starts by the published first-to-last start."""
    from ttdecode.perf_model.constants import COST
    from ttdecode.perf_model.evaluator import start_spread_cycles
    assert start_spread_cycles(1) == 0.0
    assert start_spread_cycles(2) == start_spread_cycles(64) == COST.start_spread_cycles == 2315.9


def test_measured_prints_a_reports_device_times_beside_the_model_with_the_error(tmp_path: Path) -> None:
    """--measured REPORT on tests/fixtures/hwcheck_invented_times.json, whose device times are INVENTED (the
    fixture says so in its note and in each timing point): each point's ours and tt-metal's rows, the
    profiler's figure preferred over the traced time, the error against the model, the invention shown."""
    fixture = REPO / "tests" / "fixtures" / "hwcheck_invented_times.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--measured", str(fixture), "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "INVENTED device times (not measured) at: tg, mla, techreport" in proc.stdout
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): [c.strip() for c in line.split("|")[3:-1]]
            for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| point")}
    assert set(rows) == {(p, s) for p in ("tg", "mla", "techreport") for s in ("ours", "tt-metal")}
    measured, source, model, error = rows[("tg", "ours")]
    assert measured == "10.00" and source == "profiler DEVICE KERNEL DURATION (INVENTED)"
    assert error == f"{100 * (float(model) - 10.0) / 10.0:+.1f}%"
    assert rows[("mla", "tt-metal")][:2] == ["200.00", "traced loop per call (INVENTED)"]  # no profiler figure
    assert rows[("techreport", "ours")][2:] == ["– (--quick)", "–"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"timing": []}')
    proc = subprocess.run([sys.executable, str(SCRIPT), "--measured", str(bad)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 2 and "not a hwcheck report" in proc.stderr, proc.stderr
