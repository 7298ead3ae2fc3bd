"""A second front end: every JIT build of our kernels compiles with GCC 12 too (Debian's
riscv64-linux-gnu-g++, under the JIT's own -Wall -Werror line; `ttdecode.testing.gcc_front_end`).

The JIT's lines come from one mock run (a FlashDecode, a combine and a rotary_kv_append program on
the mock N150, in its own process, with its own JIT cache so that every kernel is compiled and
logged); the kernels are those the programs name, not a list kept here. A copy of one of our kernels
with a construct clang accepts and GCC 12 rejects shows the GCC builds catch what the clang builds
miss; the unchanged copy passes both.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ttdecode.core.paths import kernels_dir
from ttdecode.core.program_description import KernelKind
from ttdecode.testing import gcc_front_end as gfe
from ttdecode.testing.dry_run import PROCESSORS, run_isolated

HERE = Path(__file__).resolve().parent

CHILD = """
import sys
sys.path.insert(0, {here!r})
import ttnn
from ttdecode.testing.dry_run import dry_run, emit
from ttdecode.testing.mock import open_mock_device
import mock_programs as P
builds = {{"flash_decode": lambda: P.flash_decode_program("gqa_d64")[0], "combine": P.combine_program,
          "rotary_append": lambda: P.rotary_program("half")}}
device = open_mock_device()
reports = {{name: dry_run(build(), device=device, launches=1).to_json() for name, build in builds.items()}}
ttnn.close_device(device)
emit(reports)
"""

#: name -> (a function appended to a copy of a reader kernel, what GCC 12 says about it).
MUTANTS = {
    # GCC's -Wall has -Wsign-compare for C++, clang's has not: with the JIT's -Werror only GCC stops.
    "sign_compare": ("""
inline uint32_t mutant_count(int first, uint32_t n) {
    uint32_t count = 0;
    for (int i = first; i < n; ++i) {
        ++count;
    }
    return count;
}
""", "-Werror=sign-compare"),
    # A clang builtin GCC 12 does not have.
    "clang_builtin": ("""
inline uint32_t mutant_assume(uint32_t n) {
    __builtin_assume(n > 0);
    return n;
}
""", "'__builtin_assume' was not declared"),
}


@pytest.fixture(scope="module")
def recorded(mock_run, tmp_path_factory) -> dict:
    """The mock run's program reports and the JIT builds of our kernels its log shows."""
    if shutil.which(gfe.GCC) is None:
        reason = f"{gfe.GCC} is not installed (Debian package g++-riscv64-linux-gnu; make system-deps)"
        if os.environ.get("TTDECODE_REQUIRE_TTNN") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("gcc_front_end")
    log = base / "jit.log"
    r = run_isolated(CHILD.format(here=str(HERE)), timeout=600, jit_log=str(log),
                     env={"TT_METAL_CACHE": str(base / "cache") + "/"})
    assert r.returncode == 0 and r.result is not None, r.describe()
    for name, rep in r.result.items():
        assert rep["accepted"], f"{name}: tt-metal refused the program: {rep['error']}"
    return {"reports": r.result, "builds": gfe.kernel_builds(gfe.read_log(log))}


def test_every_kernel_build_of_the_programs_compiles_with_gcc(recorded) -> None:
    builds = recorded["builds"]
    expected = {(os.path.realpath(k["source"]), proc) for rep in recorded["reports"].values()
                for k in rep["kernels"] for proc in PROCESSORS[KernelKind(k["kind"])]}
    logged = {(src, b.processor) for b in builds for src in b.kernels}
    assert expected <= logged, f"kernel builds missing from the JIT log: {sorted(expected - logged)}"
    assert len(builds) == len(expected), [b.name for b in builds]
    results = gfe.compile_all(builds)
    assert all({"-Wall", "-Werror", "-c"} <= set(res.command) for res in results)  # the JIT's warnings, no link
    failed = [res.describe() for res in results if not res.ok]
    assert not failed, "GCC 12 rejects:\n" + "\n".join(failed)


def _reader_copy(recorded, tmp_path: Path, appended: str) -> gfe.KernelBuild:
    """A reader's NCRISC build pointed at a copy of our kernels whose reader has `appended` at its end."""
    build = next(b for b in recorded["builds"] if b.processor == "ncrisc")
    (source,) = build.kernels
    tree = tmp_path / "kernels"
    shutil.copytree(kernels_dir(), tree, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    copy = tree / Path(source).relative_to(kernels_dir().resolve())
    copy.write_text(copy.read_text() + appended)
    return gfe.relocate(build, tmp_path / "build", {source: str(copy)})


def _standin_accepts(build: gfe.KernelBuild, log: Path) -> None:
    res = gfe.compile_with_standin(build, log)
    assert res.ok, res.describe()
    (rec,) = gfe.read_log(log)
    assert (rec["result"], rec["strict"], rec["kernels"]) == ("object", True, list(build.kernels)), rec


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_gcc_rejects_a_kernel_the_clang_standin_accepts(recorded, tmp_path: Path, name: str) -> None:
    text, message = MUTANTS[name]
    build = _reader_copy(recorded, tmp_path, text)
    _standin_accepts(build, tmp_path / "jit.log")
    res = gfe.compile_with_gcc(build)
    assert not res.ok, f"mutant {name} compiled with GCC 12"
    assert message in res.stderr and str(build.kernels[0]) in res.stderr, res.describe()


def test_unchanged_copy_passes_both_front_ends(recorded, tmp_path: Path) -> None:
    build = _reader_copy(recorded, tmp_path, "")
    _standin_accepts(build, tmp_path / "jit.log")
    res = gfe.compile_with_gcc(build)
    assert res.ok, res.describe()
