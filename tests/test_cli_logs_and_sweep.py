"""ttnn's logging is quiet unless asked for, and the quick sweep writes the figure its --help promises."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ttdecode import ttnn_env
from ttdecode.testing.logs import log_lines

ROOT = Path(__file__).resolve().parents[1]


#: A ttnn import through ttdecode and a tile conversion (which opens the mock cluster when no chip is present).
IMPORT_AND_CONVERT = """\
import torch
from ttdecode.ttnn_env import import_ttnn
ttnn = import_ttnn()
ttnn.from_torch(torch.zeros(32, 32), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
print("converted")
"""


def _run(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ttnn_env.LOG_LEVEL_ENVS}  # conftest quiets the suite
    base["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**base, **env})
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr


def test_ttnn_through_ttdecode_logs_nothing_by_default_and_everything_on_request(ttnn: Any) -> None:
    quiet = _run(IMPORT_AND_CONVERT)
    assert "converted" in quiet and not log_lines(quiet), quiet
    loud = _run(IMPORT_AND_CONVERT, TT_LOGGER_LEVEL="info")
    assert "converted" in loud and len(log_lines(loud)) >= 3, loud


def test_the_users_log_level_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ttnn_env.LOG_LEVEL_ENVS:
        monkeypatch.delenv(name, raising=False)
    assert ttnn_env.quiet_log_env() == {"TT_LOGGER_LEVEL": "error"}
    monkeypatch.setenv("TT_METAL_LOGGER_LEVEL", "debug")
    assert ttnn_env.quiet_log_env() == {}
    with ttnn_env.quiet_ttnn_logs() as set_here:
        assert set_here == {} and "TT_LOGGER_LEVEL" not in os.environ


def test_the_mock_environment_is_quiet_unless_the_user_set_a_level(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    from ttdecode.testing import mock

    monkeypatch.setattr(mock, "runtime_root", lambda: Path("/nonexistent"))  # no toolchain needed for the env
    monkeypatch.setenv(mock.HOME_ENV, str(tmp_path))
    for name in ttnn_env.LOG_LEVEL_ENVS:
        monkeypatch.delenv(name, raising=False)
    assert mock.mock_env("n300")["TT_LOGGER_LEVEL"] == "error"
    monkeypatch.setenv("TT_LOGGER_LEVEL", "info")
    assert "TT_LOGGER_LEVEL" not in mock.mock_env("n300")


def _sweep_module() -> Any:
    spec = importlib.util.spec_from_file_location("sweep_fd_cli", ROOT / "perf" / "sweep_flash_decode.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sweep_fd_cli"] = mod  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        sys.modules.pop("sweep_fd_cli", None)
    return mod


def test_quick_sweep_writes_its_figure_or_says_matplotlib_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    mod = _sweep_module()
    ran: list[Any] = []
    real = mod.run_sweeps

    def recorded(*args: Any) -> Any:
        for pair in real(*args):
            ran.append(pair)
            yield pair

    monkeypatch.setattr(mod, "run_sweeps", recorded)
    assert mod.main(["--quick", "--out", str(tmp_path / "with")]) == 0
    assert sorted(p.name for p in (tmp_path / "with").iterdir()) == ["fd_tg_llama70b.png",
                                                                     "sweep_flash_decode_quick.csv"]
    assert (tmp_path / "with" / "fd_tg_llama70b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as without the plots extra
    monkeypatch.setattr(mod, "run_sweeps", lambda *args: iter(ran))
    assert mod.main(["--quick", "--out", str(tmp_path / "without")]) == 0
    assert [p.name for p in (tmp_path / "without").iterdir()] == ["sweep_flash_decode_quick.csv"]
    assert "no figures, the CSV only: matplotlib is not installed (pip install 'ttdecode[plots]')" in \
        capsys.readouterr().err
    assert mod.main(["--update-committed"]) == 2  # refused before any run: the committed figures stay
    assert "--update-committed replaces the committed figures, but matplotlib is not installed" in \
        capsys.readouterr().err


def test_sweep_help_promises_no_run_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _sweep_module().main(["--help"])
    text = capsys.readouterr().out
    assert "figures" in text and not re.search(r"minute|seconds\)|< ?\d", text), text


def test_log_lines_are_counted_coloured_or_not() -> None:
    coloured = ("\x1b[90m2026-11-28 08:23:10.701\x1b[0m | info     | \x1b[35m         Device\x1b[0m | "
                "\x1b[37mOpening user mode device driver\x1b[0m\n")
    plain = "2026-11-28 08:40:56.898 | DEBUG    | ttnn:<module>:45 - Initial ttnn.CONFIG:\nConfig{...}\n"
    assert log_lines(coloured + plain) == ["info", "DEBUG"]
    assert log_lines("converted\n") == []
