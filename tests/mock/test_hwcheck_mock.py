"""``python -m ttdecode hwcheck --mock --quick`` end to end on the mock N150, in its own process (the command
starts its worker under the watchdog): exit 0, a report that validates against its schema, every program of
the --quick selection run three times (call 1 the full descriptor; a FlashDecode step's last call the lean
one), every figure "mock: not computed" (the mock computes nothing), ttnn's own op run beside ours where it
has one, the timing point and the README loop recorded as not computed, and the markdown summary naming
every program. The full list runs the same way (`python -m ttdecode hwcheck --mock`), not here: minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

from ttdecode.hwcheck.check import MOCK
from ttdecode.hwcheck.kinds import select
from ttdecode.hwcheck.report import validate

ROOT = Path(__file__).resolve().parents[2]


def _figures(entry: Any) -> Iterator[Any]:
    """Every figure of a program or timing entry (metrics, comparisons, times)."""
    for call in entry.get("calls", []):
        for m in call["metrics"].values():
            yield from m.values()
    if entry.get("last_vs_first"):
        yield from entry["last_vs_first"].values()
    theirs = entry.get("ttnn_op") or {}
    for m in (theirs.get("metrics") or {}).values():
        yield from m.values()
    if "ours_vs_ttnn_rel_l2" in theirs:
        yield theirs["ours_vs_ttnn_rel_l2"]
    for side in ("ours", "ttnn"):
        if entry.get(side) and entry[side]["error"] is None:
            yield entry[side]["us_per_call"]
            yield entry[side]["profiler_us"]


def test_hwcheck_runs_end_to_end_on_the_mock_n150(mock_run, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TTDECODE_JIT_LOG": str(mock_run["jit_log"])}
    r = subprocess.run([sys.executable, "-m", "ttdecode", "hwcheck", "--mock", "--quick", "--out", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    report = json.loads(out.read_text())
    assert validate(report) == [], validate(report)
    assert report["system"]["mock"] == "n150" and report["system"]["ttnn_version"] == "0.81.1"
    assert report["summary"]["ok"] and report["hang"] is None and report["not_run"] == []
    names = [k.name for k in select(quick=True)]
    assert [p["name"] for p in report["programs"]] == names
    for p in report["programs"]:
        assert p["status"] == "mock", (p["name"], p.get("error"), p.get("traceback"))
        assert [c["path"] for c in p["calls"]][0] == "full" and len(p["calls"]) == 3, p
        if p["family"] == "flash_decode" or p["family"] == "rotary_append":
            assert p["calls"][-1]["path"] == "lean", p  # the cached path the check exists for
        assert set(_figures(p)) == {MOCK}, p
    theirs = {p["name"]: p["ttnn_op"] for p in report["programs"]}
    assert theirs["gqa_d64"]["op"] == "ttnn.transformer.scaled_dot_product_attention_decode"
    assert theirs["paged"]["op"] == "ttnn.transformer.paged_scaled_dot_product_attention_decode"
    assert theirs["gqa_d64"]["error"] is None and theirs["lse"] is None  # ttnn's op returns no LSE
    assert [t["name"] for t in report["timing"]] == ["tg"]
    assert report["timing"][0]["status"] == "mock" and set(_figures(report["timing"][0])) == {MOCK}
    assert report["readme_loop"]["status"] == "mock"
    md = out.with_suffix(".md").read_text()
    assert md.startswith("## ttdecode hwcheck: OK") and all(f"`{n}`" in md for n in names)
