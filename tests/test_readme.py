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


def test_the_readme_traced_loop_is_the_one_hwcheck_runs() -> None:
    """The README's traced loop (after its ``ttnn.open_device`` line) is, line for line, the body of
    ``ttdecode.hwcheck.readme_loop.readme_traced_loop`` between its markers: the hardware check runs the
    user's loop, not a copy that could drift."""
    import textwrap

    from ttdecode.hwcheck import readme_loop

    block = next(code for _, code, _ in BLOCKS if "begin_trace_capture" in code)
    lines = block.splitlines()
    opened = next(i for i, line in enumerate(lines) if line.startswith("device = ttnn.open_device("))
    source = Path(readme_loop.__file__).read_text().splitlines()
    begin = next(i for i, line in enumerate(source) if line.strip() == readme_loop.BEGIN)
    end = next(i for i, line in enumerate(source) if line.strip() == readme_loop.END)
    body = textwrap.dedent("\n".join(source[begin + 1:end])).splitlines()
    assert lines[opened + 1:] == body
    assert "trace_region_size=8 << 20" in lines[opened]
