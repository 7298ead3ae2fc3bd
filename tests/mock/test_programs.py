"""Every program the package builds, through ttnn.generic_op on the mock N150: tt-metal accepts it
(Program construction, validation), the JIT compiles every kernel (reader on NCRISC, writer on BRISC,
compute for the three TRISCs, against the real headers with the JIT's own flags and generated
headers), and the second launch is a program-cache hit. Each program in its own process."""

from __future__ import annotations

from pathlib import Path

import pytest

from ttdecode.testing.dry_run import check_jit, jit_records

HERE = Path(__file__).resolve().parent
import mock_programs as P  # noqa: E402  (pytest puts tests/mock on sys.path)

CHILD = """
import sys
sys.path.insert(0, {here!r})
from ttdecode.testing.dry_run import dry_run, emit
import mock_programs as P
{build}
rep = dry_run(program).to_json()
rep["facts"] = facts
emit(rep)
"""


def _check(run_mock, mock_run, build: str, timeout: float = 300) -> dict:
    r = run_mock(CHILD.format(here=str(HERE), build=build), timeout=timeout)
    assert r.returncode == 0 and r.result is not None, r.describe()
    rep = r.result
    assert rep["accepted"], f"tt-metal refused the program: {rep['error']}"
    assert rep["cache_hit"], f"second launch was not a program-cache hit: entries {rep['cache_entries']}"
    problems = check_jit(rep["kernels"], jit_records(mock_run["jit_log"]))
    assert not problems, "\n".join(problems)
    assert sorted(k["kind"] for k in rep["kernels"]) == ["compute", "reader", "writer"]
    return rep


@pytest.mark.parametrize("case", list(P.FLASH_DECODE_CASES))
def test_flash_decode_variant_runs_through_generic_op(run_mock, mock_run, case: str) -> None:
    rep = _check(run_mock, mock_run, f"program, facts = P.flash_decode_program({case!r})")
    if case.startswith("q16"):
        assert rep["facts"]["q_tile_rows"] == 16
    if case.startswith("q32"):
        assert rep["facts"]["q_tile_rows"] == 32
    # the merge slot only where the children's partials side by side would overflow L1
    assert rep["facts"]["merge_slot"] == case.startswith("mla_merge_slot")
    if case.startswith("mla_merge_slot"):
        assert rep["facts"]["bank_local"] == case.endswith("key_row")
        assert rep["facts"]["chunk_cap"] == (4 if case.endswith("dynamic") else 8)


@pytest.mark.parametrize("in_dtype", ["bfloat16", "float32"])
def test_combine_runs_through_generic_op(run_mock, mock_run, in_dtype: str) -> None:
    _check(run_mock, mock_run, f"import ttdecode\nprogram, facts = P.combine_program(in_dtype=ttdecode.{in_dtype}), {{}}")


@pytest.mark.parametrize("case", list(P.ROTARY_CASES))
def test_rotary_append_runs_through_generic_op(run_mock, mock_run, case: str) -> None:
    _check(run_mock, mock_run, f"program, facts = P.rotary_program({case!r}), {{}}")
