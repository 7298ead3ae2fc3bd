"""The mock Wormhole suite (ttdecode.testing): every test runs its device work in its own process,
under a timeout, sharing one JIT cache and one stand-in-compiler log per pytest run.

Missing pieces (ttnn, clang-19, ld.lld-19, the riscv64 libstdc++ headers) skip these tests with the
reason, or fail them under TTDECODE_REQUIRE_TTNN=1 (`make test`, which installs them first).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config, items) -> None:
    """Every mock test is slow (its own process, a JIT build): `make test` runs them, `make test-fast` does not."""
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)


def _unavailable(reason: str) -> None:
    if os.environ.get("TTDECODE_REQUIRE_TTNN") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def mock_run(tmp_path_factory):
    """The run's shared mock state: `cache` (TT_METAL_CACHE for the mock N150, reused by every test of
    the run) and `jit_log` (the stand-in compiler's log, appended by every test)."""
    from ttdecode.testing import mock

    try:
        missing = mock.missing_tools()
        if missing:
            _unavailable(f"the mock Wormhole needs {', '.join(missing)} (make system-deps)")
        mock.runtime_root()
    except mock.MockUnavailable as exc:
        _unavailable(f"the mock Wormhole cannot be set up: {exc}")
    base = tmp_path_factory.mktemp("mock")
    state = {"cache": base / "cache", "jit_log": base / "jit.log", "dir": base}
    state["cache"].mkdir()
    return state


@pytest.fixture
def run_mock(mock_run):
    """run_mock(code, timeout=...) -> IsolatedResult: `code` in its own process on the mock N150, with
    the run's cache and JIT log."""
    from ttdecode.testing.dry_run import run_isolated

    def run(code: str, timeout: float = 300, system: str = "n150", jit_log: str | None = None,
            cache: Path | None = None):
        env = {"TT_METAL_CACHE": str(cache or mock_run["cache"] / system) + "/"}
        return run_isolated(code, system=system, timeout=timeout, jit_log=str(jit_log or mock_run["jit_log"]),
                            env=env)

    return run
