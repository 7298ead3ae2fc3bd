"""The hardware check's parts that need no device (its mock run end to end: tests/mock/test_hwcheck_mock.py):
the program-kind table, the report's schema (a report built from a worker's result validates, a broken one
names what is wrong, with the jsonschema package and without it), the watchdog naming the program and
configuration it killed, the verdict naming the failed path, and the command refusing to run with no device
and no --mock."""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ttdecode.hwcheck import report as R
from ttdecode.hwcheck.check import MOCK, _verdict, metrics, passes
from ttdecode.hwcheck.kinds import KINDS, TIMING_POINTS, select
from ttdecode.hwcheck.runner import Guard, run_worker

ROOT = Path(__file__).resolve().parents[1]


def _run(programs: list[dict], mock: bool = True) -> dict:
    figure = MOCK if mock else 1e-3
    call = {"call": 1, "path": "full", "host_seconds": 0.1, "metrics": {"out": {"rel_l2": figure, "pcc": figure}}}
    entries = [{"name": n, "family": "flash_decode", "config": {}, "status": "mock" if mock else "pass",
                "verdict": "v", "error": None, "seconds": 1.0, "calls": [call] * 3,
                "last_vs_first": {"identical": MOCK if mock else True, "max_abs_diff": MOCK if mock else 0.0},
                "ttnn_op": None} for n in programs]
    device = {"mock": "n150" if mock else None, "arch": "Arch.WORMHOLE_B0", "grid": [8, 8], "devices": 1,
              "ttnn_version": "0.81.1", "profiler": False}
    return {"device": device, "entries": {"programs": entries, "timing": [], "readme_loop": []}, "hang": None, "crash": None,
            "exit": 0, "stderr_tail": "", "not_run": []}


def test_every_kind_has_a_unique_name_and_the_families_are_all_there() -> None:
    names = [k.name for k in KINDS]
    assert len(names) == len(set(names))
    assert {k.family for k in KINDS} == {"flash_decode", "combine", "rotary_append", "context_parallel"}
    quick = select(quick=True)
    # the mesh kinds need a T3K: not in --quick, the first run on any board
    assert 0 < len(quick) < len(KINDS) and {k.family for k in quick} == {k.family for k in KINDS} - {"context_parallel"}
    assert [k.name for k in select(False, ["paged", "lse"])] == ["paged", "lse"]
    with pytest.raises(ValueError, match="unknown program kinds \\['nope'\\]"):
        select(False, ["nope"])
    decode = [k.params for k in KINDS if k.family == "flash_decode"]
    for feature in ("paged", "mask", "window", "sink", "lse", "dv"):
        assert any(getattr(p, feature) for p in decode), feature
    assert {p.pages for p in decode} == {"tile", "key_row"} and {p.nkv == p.nh for p in decode} == {True, False}
    assert {p.kv_dtype for p in decode} == {"bfloat16", "bfloat8_b", "bfloat4_b"} and any(p.t > 1 for p in decode)
    assert {t.name for t in TIMING_POINTS if not t.name.startswith("paged-")} == {"tg", "mla", "techreport"}


@pytest.mark.parametrize("use_jsonschema", [False, True], ids=["subset", "jsonschema"])
def test_a_report_validates_and_a_broken_one_is_named(use_jsonschema: bool, monkeypatch) -> None:
    if use_jsonschema:
        pytest.importorskip("jsonschema")
    else:
        monkeypatch.setitem(sys.modules, "jsonschema", None)  # import fails: the built-in subset validator
    for mock in (True, False):
        rep = R.assemble(_run(["gqa_d64", "paged"], mock), {"kinds": ["gqa_d64", "paged"]}, Guard().to_json(), "0.1.0")
        assert R.validate(rep) == [], R.validate(rep)
        assert rep["summary"] == {"ok": True, "counts": {"mock" if mock else "pass": 2}}
        assert "`gqa_d64`" in R.markdown(rep)
    bad = copy.deepcopy(rep)
    bad["programs"][0]["calls"][0]["metrics"]["out"]["rel_l2"] = "0.001"  # a figure as text
    del bad["thresholds"]
    bad["programs"][1]["status"] = "fine"
    problems = " ".join(R.validate(bad))
    assert "thresholds" in problems and "fine" in problems and "rel_l2" in problems, problems


def test_the_watchdog_names_the_program_and_configuration_it_killed(tmp_path: Path) -> None:
    from ttdecode.hwcheck.worker import EVENT

    assert EVENT == "HWCHECK_EVENT "
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent("""
        import json, sys, time
        def emit(event, **fields):  # as ttdecode.hwcheck.worker.emit (a light process: no torch to import)
            print("HWCHECK_EVENT " + json.dumps({"event": event, **fields}), flush=True)
        emit("device", info={"mock": None, "arch": "test", "grid": [8, 8], "devices": 1, "ttnn_version": "x"})
        emit("start", section="programs", name="gqa_d64", config={"b": 2})
        emit("done", section="programs", name="gqa_d64", entry={"name": "gqa_d64", "status": "pass"})
        emit("start", section="programs", name="paged", config={"paged": True})
        time.sleep(60)
    """))
    plan = {"mock": None, "kinds": ["gqa_d64", "paged", "lse"], "timing": [], "readme_loop": True}
    out = run_worker(plan, Guard(item_seconds=3), worker=[sys.executable, str(worker)])
    assert out["hang"] == {"section": "programs", "name": "paged", "config": {"paged": True}, "seconds": 3}
    assert out["exit"] == "killed"
    assert out["not_run"] == [{"section": "programs", "name": "lse"}, {"section": "readme_loop", "name": "readme_loop"}]
    rep = R.assemble(out, plan, Guard(item_seconds=3).to_json(), "0.1.0")
    assert R.validate(rep) == [] and not rep["summary"]["ok"]
    assert [(p["name"], p["status"]) for p in rep["programs"]] == [("gqa_d64", "pass"), ("lse", "not run"),
                                                                    ("paged", "hang")]
    assert "**HANG** in programs `paged` ({'paged': True})" in R.markdown(rep)


def test_the_verdict_names_the_path_that_failed() -> None:
    paths = ["full", "lean", "lean"]
    assert _verdict([True] * 3, True, paths)[0] == "pass"
    status, text = _verdict([True, True, False], False, paths)
    assert status == "fail" and "the cached path (call 3: lean descriptor) failed" in text
    assert "call 1 (the full descriptor, program built) misses the bar" in _verdict([False] * 3, True, paths)[1]
    assert "the first launch failed" in _verdict([False, True, True], False, paths)[1]
    assert "differ" in _verdict([True] * 3, False, paths)[1]
    ref = {"out": torch.arange(8, dtype=torch.float64).reshape(2, 4), "lse": torch.tensor([0.5, float("-inf")], dtype=torch.float64)}
    got = {"out": ref["out"].float() * 1.001, "lse": torch.tensor([0.505, float("-inf")])}
    assert passes(metrics(got, ref))
    got["lse"] = torch.tensor([0.5, 0.0])  # a finite LSE where the reference has -inf
    assert not passes(metrics(got, ref))


def test_the_command_refuses_to_run_without_a_device_or_mock() -> None:
    if any(Path("/dev").glob("tenstorrent*")):
        pytest.skip("a Tenstorrent device is present")
    r = subprocess.run([sys.executable, "-m", "ttdecode", "hwcheck"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "no Tenstorrent device found" in r.stderr and "--mock" in r.stderr, r.stderr


def test_a_worker_that_dies_mid_program_is_named_in_the_report(tmp_path: Path) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent("""
        import json, sys
        print("HWCHECK_EVENT " + json.dumps({"event": "start", "section": "programs", "name": "mask",
                                             "config": {"mask": True}}), flush=True)
        print("Segmentation fault (a stand-in)", file=sys.stderr)
        sys.exit(139)
    """))
    plan = {"mock": None, "kinds": ["mask", "lse"], "timing": [], "readme_loop": False}
    out = run_worker(plan, Guard(item_seconds=60), worker=[sys.executable, str(worker)])
    assert out["hang"] is None and out["exit"] == 139
    assert out["crash"] == {"section": "programs", "name": "mask", "config": {"mask": True},
                            "error": "the worker process died (exit 139) while running it"}
    rep = R.assemble(out, plan, Guard().to_json(), "0.1.0")
    assert R.validate(rep) == [] and not rep["summary"]["ok"]
    assert [(p["name"], p["status"]) for p in rep["programs"]] == [("lse", "not run"), ("mask", "error")]
    md = R.markdown(rep)
    assert "**The worker process exited with 139**" in md and "Segmentation fault (a stand-in)" in md


def test_the_readme_states_the_quick_selection_as_it_is() -> None:
    readme = (ROOT / "README.md").read_text()
    quick_points = [t for t in TIMING_POINTS if t.quick]
    assert f"--quick: {len(select(quick=True))} programs, {len(quick_points)} timing point" in readme


def test_a_resumed_check_skips_what_the_report_recorded_and_keeps_the_hang(tmp_path: Path) -> None:
    from ttdecode.hwcheck.cli import resumed_selection
    from ttdecode.hwcheck.resume import merge_resumed, recorded, resume_plan

    # the first run: gqa_d64 passed, paged hung (the watchdog's record), lse and the README loop not reached
    plan = {"mock": "n150", "kinds": ["gqa_d64", "paged", "lse"], "timing": ["tg"], "readme_loop": True,
            "replays": 200, "calls": 3}
    first = _run(["gqa_d64"])
    first.update(hang={"section": "programs", "name": "paged", "config": {"paged": True}, "seconds": 3},
                 exit="killed", not_run=[{"section": "programs", "name": "lse"}, {"section": "timing", "name": "tg"},
                                         {"section": "readme_loop", "name": "readme_loop"}])
    before = R.assemble(first, plan, Guard().to_json(), "0.1.0")
    assert R.validate(before) == [] and before["programs"][-1] == {
        "name": "paged", "status": "hang", "error": "no answer within 3 s (watchdog)", "config": {"paged": True}}
    assert recorded(before) == {("programs", "gqa_d64"), ("programs", "paged")}
    path = tmp_path / "first.json"
    path.write_text(json.dumps(before))
    args = argparse.Namespace(mock="n150", resume=path)
    assert resumed_selection(R.load_report(path), args) == plan
    with pytest.raises(ValueError, match="ran on the mock n150, this run is on a device"):
        resumed_selection(before, argparse.Namespace(mock=None, resume=path))
    # the second run takes the rest only
    todo = resume_plan(plan, before)
    assert (todo["kinds"], todo["timing"], todo["readme_loop"]) == (["lse"], ["tg"], True)
    second = _run(["lse"])
    second["entries"]["timing"] = [{"name": "tg", "status": "mock"}]
    second["entries"]["readme_loop"] = [{"name": "readme_loop", "status": "mock", "seconds": MOCK}]
    both = merge_resumed(R.assemble(second, todo, Guard().to_json(), "0.1.0"), before, plan, str(path))
    assert R.validate(both) == [], R.validate(both)
    assert [(p["name"], p["status"]) for p in both["programs"]] == [("gqa_d64", "mock"), ("paged", "hang"),
                                                                    ("lse", "mock")]
    assert both["selection"] == plan and both["hang"] is None and both["not_run"] == []
    assert both["resumed"] == {"from": str(path), "hangs": [before["hang"]], "kept": ["gqa_d64", "paged"]}
    assert not both["summary"]["ok"] and both["summary"]["counts"] == {"mock": 4, "hang": 1}
    md = R.markdown(both)
    assert "Earlier **HANG** in programs `paged` ({'paged': True})" in md and f"Resumed from `{path}`" in md
    # a resumed report resumes again: nothing left, the hang still counted
    again = resume_plan(plan, both)
    assert (again["kinds"], again["timing"], again["readme_loop"]) == ([], [], False)


def test_the_timing_points_hold_the_paged_sweep_s_points() -> None:
    import importlib.util

    from ttdecode.hwcheck.kinds import MAX_TIMED_KV_ELEMENTS, PAGED_BLOCKS, PAGED_SHAPES

    spec = importlib.util.spec_from_file_location("sweep_paged_hwcheck_test", ROOT / "perf" / "sweep_paged.py")
    sweep = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = sweep
    spec.loader.exec_module(sweep)
    want = {(p.point, p.batch, p.num_q_heads, p.num_kv_heads, p.seq, p.grid, p.max_cores, p.cur_pos)
            for p in sweep.paged_points(quick=False)}
    assert {(n, b, nh, nkv, s, g, m, s - 1 if pos is None else pos) for n, b, nh, nkv, s, g, m, pos in PAGED_SHAPES} == want
    assert PAGED_BLOCKS == (32, 64)
    paged = [t for t in TIMING_POINTS if t.name.startswith("paged-")]
    fits = [s for s in PAGED_SHAPES if s[1] * s[3] * s[4] * 128 <= MAX_TIMED_KV_ELEMENTS]
    assert len(paged) == 2 * len(fits) == 2 * (len(PAGED_SHAPES) - 1)  # only Llama-8B B 32 at 128K is left out
    assert len({t.name for t in TIMING_POINTS}) == len(TIMING_POINTS)
    for t in paged:
        c = t.call
        assert c.paged and c.pages == "key_row" and c.d == 128 and not t.quick
        assert (c.fidelity, c.fp32_dest) == ("HiFi2", True) and t.ttnn_numerics == ("HiFi2", True)
        # the exp ttnn's kernel runs there: approximate with half (16-row) Q tiles, i.e. at most 16 q heads
        assert c.exp_approx == (c.nh <= 16)


def test_a_mesh_kind_is_refused_by_name_without_the_chips_and_that_is_no_failure() -> None:
    from ttdecode.hwcheck.mesh import check_mesh_kind, refusal

    kind = next(k for k in KINDS if k.family == "context_parallel")
    assert refusal(kind.params, 8) is None
    entry = check_mesh_kind(kind, None, "n150", available=1)  # refused before any device call
    assert entry["status"] == "refused" and entry["name"] == "context_parallel_t3k"
    assert entry["error"] == "refused: needs a mesh of 8 chips (1x8, a T3K); this system has 1"
    run = _run(["gqa_d64"])
    run["entries"]["programs"].append(entry)
    rep = R.assemble(run, {"mock": "n150", "kinds": ["gqa_d64", kind.name], "timing": [], "readme_loop": False},
                     Guard().to_json(), "0.1.0")
    assert R.validate(rep) == [] and rep["summary"] == {"ok": True, "counts": {"mock": 1, "refused": 1}}
    assert "refused: needs a mesh of 8 chips" in R.markdown(rep)
