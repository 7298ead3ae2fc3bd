"""The paged sweep's code path (perf/sweep_flash_decode.py --paged --quick, here on two small points): the CSV
has the sweep's columns, both kernels' rows and every page table, and a PASS/FAIL line per goal is printed."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_quick_paged_sweep_writes_the_columns_and_prints_every_goal(tmp_path, capsys):
    _load("sweep_fd_paged_test", ROOT / "perf" / "sweep_flash_decode.py")  # imports perf.sweep_paged
    paged = sys.modules["perf.sweep_paged"]
    points = [paged.PagedPoint("llama70b-t3k", 2, 8, 1, 4096),
              paged.PagedPoint("galaxy-llama70b", 8, 8, 1, 128, (8, 4), 4, 127)]
    assert paged.main_paged(True, tmp_path, draw=False, points=points) == 0
    out = capsys.readouterr().out
    with (tmp_path / "sweep_paged_quick.csv").open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == ["point", "kernel", "layout", "batch", "seq", "block", "page_table", "us", "gbps",
                                 "ratio_vs_ttmetal", "pieces"]
    ours = [r for r in rows if r["layout"] == "bank-local"]
    # 1 KV head: R_h = 12 banks; 1 to 4 readers a bank (at most 16 pieces) or a divisor of 12
    assert all(int(r["pieces"]) in {1, 2, 3, 4, 6, 12, 16} for r in ours)
    assert {r["page_table"] for r in ours} == {"sequential", "random", "allocator"}
    assert {r["block"] for r in rows} == {"32", "64"} and any(r["kernel"] == "tt-metal" for r in rows)
    assert all(float(r["us"]) > 0 for r in rows)
    verdicts = [line for line in out.splitlines() if line.startswith(("PASS: ", "FAIL: "))]
    for goal in ("never slower than tt-metal's structure", "random page tables within 10% of sequential",
                 "compute / reader <= 1 at the T3K 32K points", "ours >= 1.15x tt-metal"):
        assert any(goal in line for line in verdicts), (goal, verdicts)
    assert "MODEL ESTIMATES" in out


def test_no_modelled_kernel_beats_the_any_kernel_floor_and_t3k_b1_cannot_reach_85_percent():
    _load("sweep_fd_paged_floor", ROOT / "perf" / "sweep_flash_decode.py")
    paged = sys.modules["perf.sweep_paged"]
    t3k = paged.PagedPoint("llama70b-t3k", 1, 8, 1, 32768)
    llama = paged.PagedPoint("llama8b-n150", 1, 32, 8, 32768)
    for p in (t3k, llama):
        rows = [r for r in paged.run_paged([p], blocks=(64,), tables=("sequential",))]
        least = paged.any_kernel_floor_us(p)
        assert all(float(r["us"]) >= least for r in rows), (p, least, rows)
        # max_cores_per_head_batch not set: a bank-local pool may take up to 4 readers on each of the 12 banks
        unset = [r for r in rows if r["layout"] == "bank-local, cores not set"]
        assert len(unset) == 1 and 1 <= int(unset[0]["pieces"]) <= 48
    # 85% of 288 GB/s moves 8.9 MB (32K positions x K and V x 128 x 1088 / 1024 B) in 36.4 us; the floor is above
    kv = 32768 * 2 * 128 * 1088 / 1024
    assert paged.any_kernel_floor_us(t3k) > kv / (0.85 * paged.PEAK_GBPS * 1e3)
    assert any("no kernel reaches 85%" in line for line in paged.floor_lines([t3k]))
    assert not any("no kernel reaches 85%" in line for line in paged.floor_lines([llama]))
