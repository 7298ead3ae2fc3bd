"""`python -m ttdecode.testing.mock check --system ...` opens every mock system and prints one line:
tt-metal's info lines of the open and close stay out unless TT_LOGGER_LEVEL asks for them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ttdecode.testing.logs import log_lines
from ttdecode.ttnn_env import LOG_LEVEL_ENVS

ROOT = Path(__file__).resolve().parents[2]


def _check(system: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in LOG_LEVEL_ENVS}  # conftest quiets the suite
    base["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "ttdecode.testing.mock", "check", "--system", system],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env={**base, **env})


@pytest.mark.parametrize("system, opened", [("n150", "mock N150 open: grid 8x8"),
                                            ("n300", "mock N300 open: 1x2 mesh, grid 8x8"),
                                            ("t3k", "mock T3K open: 1x8 mesh, grid 8x8")])
def test_check_opens_each_system_and_prints_one_line(mock_run, system: str, opened: str) -> None:
    r = _check(system)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(opened) and len(r.stdout.splitlines()) == 1, r.stdout


def test_check_is_loud_on_request(mock_run) -> None:
    r = _check("n150", TT_LOGGER_LEVEL="info")
    assert r.returncode == 0, r.stderr
    assert len(log_lines(r.stdout)) >= 5 and "mock N150 open" in r.stdout, r.stdout
