"""The mock Wormhole itself (ttdecode.testing.mock): the stand-in compiler answers like SFPI 7.89.0,
a mock N150 opens, small programs of kernels/tests go through ttnn.generic_op with every kernel
(compute included, all three TRISC builds) compiled by the JIT, and the second launch is a
program-cache hit. Every device use runs in its own process under a timeout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ttdecode.testing import mock
from ttdecode.testing.dry_run import check_jit, jit_records

HERE = Path(__file__).resolve().parent

SFPI_BANNER_FIRST_LINE = "riscv-tt-elf-g++ (tenstorrent/sfpi:7.89.0[1050]) 15.1.0"


def test_stand_in_compiler_prints_sfpi_7_89_0_banner(mock_run) -> None:
    gxx = mock.runtime_root() / "runtime" / "sfpi" / "compiler" / "bin" / "riscv-tt-elf-g++"
    out = subprocess.run([str(gxx), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    lines = out.stdout.split("\n")
    assert lines[0] == SFPI_BANNER_FIRST_LINE
    assert lines[1].startswith("Copyright (C) 2025 Free Software Foundation")
    assert out.stdout.endswith("PURPOSE.\n\n")


def test_mock_env_points_at_runtime_root_cluster_and_a_cache_per_system(mock_run) -> None:
    n150, n300 = mock.mock_env("n150"), mock.mock_env("n300")
    root = Path(n150["TT_METAL_RUNTIME_ROOT"])
    for name in ("tt_metal", "ttnn", "runtime/hw", "runtime/sfpi/compiler/bin/riscv-tt-elf-g++"):
        assert (root / name).exists(), name
    assert Path(n150["TT_METAL_MOCK_CLUSTER_DESC_PATH"]).name == "n150.yaml"
    assert n150["TT_METAL_CACHE"] != n300["TT_METAL_CACHE"]
    # not the host-only cache of ttdecode.ttnn_env
    assert "ttdecode-ttnn-" not in n150["TT_METAL_CACHE"]


OPEN = """
import ttnn
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.dry_run import emit
d = open_mock_device()
g = d.compute_with_storage_grid_size()
emit({"grid": [g.x, g.y], "entries": d.num_program_cache_entries()})
ttnn.close_device(d)
"""


def test_mock_n150_opens_with_an_8x8_grid(run_mock) -> None:
    r = run_mock(OPEN, timeout=180)
    assert r.returncode == 0 and r.result is not None, r.describe()
    assert r.result["grid"] == [8, 8]


DRY_RUN = """
import sys
sys.path.insert(0, {runtime_tests!r})
import torch
from ttdecode.core.formats import DataType
from ttdecode.core.program_description import CoreCoord
from ttdecode.testing.dry_run import dry_run, emit
import programs as P
emit(dry_run({expr}))
"""


def _dry_run(run_mock, mock_run, expr: str, timeout: float = 300) -> dict:
    code = DRY_RUN.format(runtime_tests=str(HERE.parent / "runtime"), expr=expr)
    r = run_mock(code, timeout=timeout)
    assert r.returncode == 0 and r.result is not None, r.describe()
    rep = r.result
    assert rep["accepted"], f"tt-metal refused the program: {rep['error']}"
    assert rep["cache_hit"], f"second launch was not a program-cache hit: entries {rep['cache_entries']}"
    problems = check_jit(rep["kernels"], jit_records(mock_run["jit_log"]))
    assert not problems, "\n".join(problems)
    return rep


def test_copy_program_of_kernels_tests_runs_through_generic_op(run_mock, mock_run) -> None:
    rep = _dry_run(run_mock, mock_run,
                   "P.copy_program(torch.zeros(64, 64), DataType.bfloat16, [CoreCoord(0, 0), CoreCoord(1, 0)])")
    assert [k["kind"] for k in rep["kernels"]] == ["reader", "writer"]


COMPUTE_TESTS = {
    "tile_op": "P.tile_op_program('copy', {0: torch.zeros(32, 32)}, 1)",
    "tile_op_matmul": "P.tile_op_program('matmul', {0: torch.zeros(32, 64), 1: torch.zeros(64, 32)}, 1, kt=2)",
    "sfpu_op_exp": "P.tile_op_program('exp', {0: torch.zeros(32, 32)}, 1, kernel='sfpu_op.cpp', dtype=DataType.float32)",
    "reconfig_op": "P.tile_op_program('copy', {0: torch.zeros(32, 32), 1: torch.zeros(32, 32), 2: torch.zeros(32, 32)}, "
                   "1, kernel='reconfig_op.cpp', extra_defines={'START': '1', 'OLD': '1'})",
}


@pytest.mark.parametrize("name", sorted(COMPUTE_TESTS))
def test_compute_kernels_of_kernels_tests_compile_for_all_three_triscs(run_mock, mock_run, name: str) -> None:
    rep = _dry_run(run_mock, mock_run, COMPUTE_TESTS[name])
    assert "compute" in [k["kind"] for k in rep["kernels"]]


MESH = """
import ttnn
from ttdecode.testing.mock import open_mock_mesh
from ttdecode.testing.dry_run import emit
m = open_mock_mesh({shape!r})
g = m.compute_with_storage_grid_size()
emit({{"devices": m.get_num_devices(), "grid": [g.x, g.y]}})
ttnn.close_mesh_device(m)
"""


@pytest.mark.parametrize("shape", [(1, 2), (1, 8), (2, 4)], ids=["n300_1x2", "t3k_1x8", "t3k_2x4"])
def test_mock_meshes_open_with_worker_dispatch(run_mock, shape: tuple[int, int]) -> None:
    system = "n300" if shape == (1, 2) else "t3k"
    r = run_mock(MESH.format(shape=shape), timeout=300, system=system)
    assert r.returncode == 0 and r.result is not None, r.describe()
    assert r.result["devices"] == shape[0] * shape[1]
    assert r.result["grid"] == [8, 8]
