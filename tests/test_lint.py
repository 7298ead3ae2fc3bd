"""No unused import, unused local or undefined name anywhere in the package, its tools, benchmarks and tests
(pyflakes: the dead code a refactor leaves behind)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyflakes_finds_nothing() -> None:
    r = subprocess.run([sys.executable, "-m", "pyflakes", "ttdecode", "perf", "tools", "tests", "kernels"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    found = [line for line in r.stdout.splitlines() if "unable to detect undefined names" not in line]
    assert not found, "\n".join(found)
