"""Every ```python block of README.md runs as written (a newcomer copies them).

Each block runs in a fresh interpreter from an empty directory, with only the repository on the path. A
block that cannot run here (it needs a Wormhole) is preceded by the line ``<!-- no-run: <why> -->`` and is
compiled only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"

_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.S)


def readme_blocks() -> list[tuple[int, str, bool]]:
    """(line number, code, runnable) of each python block of the README."""
    text = README.read_text()
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code")) + 1
        out.append((line, m.group("code"), not m.group("before").strip().startswith("<!-- no-run")))
    return out


BLOCKS = readme_blocks()


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("line,code,runnable", BLOCKS, ids=[f"README.md:{b[0]}" for b in BLOCKS])
def test_readme_block_runs_as_written(line: int, code: str, runnable: bool, tmp_path: Path) -> None:
    compile(code, f"README.md:{line}", "exec")
    if not runnable:
        return
    script = tmp_path / "block.py"
    script.write_text(code + "\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, f"README.md:{line} failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
