"""Environment for importing ttnn on machines with or without a Tenstorrent device.

ttnn 0.81.1 refuses host tensor conversions (TILE layout, block floats) when it finds no chip,
unless a mock cluster descriptor is named by `TT_METAL_MOCK_CLUSTER_DESC_PATH`. It also writes
its kernel cache under `TT_METAL_CACHE` (default `~/.cache`). `ensure_ttnn_env()` sets both,
pointing into a per-user temp dir (`<tmp>/ttdecode-ttnn-<uid>/`, reused across processes; the YAML
is rewritten atomically, so concurrent processes are safe), when no real device is present; it must run before the
first `import ttnn`, which `import_ttnn()` guarantees.

Device detection lives here too: `has_tenstorrent_device()` (is a chip present, so may
`backend="auto"` choose the device) and `require_ttnn()` (ttnn or an error naming why not).

ttnn's libraries log every device open and close at info level (15-20 lines of a mock open); `import_ttnn()`
keeps them to errors (`quiet_ttnn_logs()`) unless the user chose a level: `TT_LOGGER_LEVEL=info` (or `debug`)
before the run brings them back.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import importlib.util
import os
import sys
import tempfile
from types import ModuleType
from typing import Iterator, Optional

#: Environment variable naming the mock cluster descriptor YAML.
MOCK_CLUSTER_ENV = "TT_METAL_MOCK_CLUSTER_DESC_PATH"
#: Environment variable naming tt-metal's cache directory.
CACHE_ENV = "TT_METAL_CACHE"

#: Environment variables naming the level of tt-metal's logger (read when ttnn's libraries load);
#: a user who sets either keeps it, and ttnn's Python logger (loguru) stays on too.
LOG_LEVEL_ENVS = ("TT_LOGGER_LEVEL", "TT_METAL_LOGGER_LEVEL")
#: The level `quiet_ttnn_logs()` sets: errors only (a mock open also warns that it is a mock).
QUIET_LOG_LEVEL = "error"

#: A one-chip Wormhole N150 in the descriptor form ttnn 0.81.1 accepts (the `boards` entry is a
#: sequence of three single-key maps per board; the older form is rejected by this version).
MOCK_CLUSTER_YAML = """\
arch:
  0: Wormhole
chips:
  0: [0, 0, 0, 0]
ethernet_connections: []
chips_with_mmio:
  - 0: 0
harvesting:
  0:
    noc_translation: true
    harvest_mask: 32
boardtype:
  0: n150
boards:
  - - board_id: 72059269369839682
    - board_type: n150
    - chips: [0]
"""

_env_dir: Optional[str] = None
_unavailable_reason: Optional[str] = None


def has_tenstorrent_device() -> bool:
    """True when a Tenstorrent kernel-driver node (`/dev/tenstorrent*`) exists."""
    return bool(glob.glob("/dev/tenstorrent*"))


def ensure_ttnn_env() -> dict[str, str]:
    """Point ttnn at a mock one-chip Wormhole cluster and a private cache, if nothing else is set.

    Does nothing when a real device is present. Each variable is set only if not already set, so
    a user's own descriptor or cache wins. Returns the variables that hold this module's values
    after the call, as {name: value} (empty with a device, or when the user set both). ttnn reads
    the variables when it is imported, so calling this after `import ttnn` has no effect on it.
    """
    global _env_dir
    if has_tenstorrent_device():
        return {}
    if _env_dir is None:
        _env_dir = os.path.join(tempfile.gettempdir(), f"ttdecode-ttnn-{os.getuid()}")
        os.makedirs(_env_dir, mode=0o700, exist_ok=True)
    wanted = {
        MOCK_CLUSTER_ENV: os.path.join(_env_dir, "mock_cluster_n150.yaml"),
        CACHE_ENV: os.path.join(_env_dir, "cache") + os.sep,
    }
    done: dict[str, str] = {}
    for name, value in wanted.items():
        if os.environ.get(name):
            if os.environ[name] == value:
                done[name] = value
            continue
        if name == MOCK_CLUSTER_ENV:
            fd, tmp = tempfile.mkstemp(dir=_env_dir, suffix=".yaml.tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(MOCK_CLUSTER_YAML)
            os.replace(tmp, value)
        else:
            os.makedirs(value, exist_ok=True)
        os.environ[name] = value
        done[name] = value
    return done


def quiet_log_env() -> dict[str, str]:
    """The environment that keeps tt-metal's logger to errors: {"TT_LOGGER_LEVEL": "error"}, or {}
    when the user set `TT_LOGGER_LEVEL` or `TT_METAL_LOGGER_LEVEL` (their level stands)."""
    if any(os.environ.get(name) for name in LOG_LEVEL_ENVS):
        return {}
    return {LOG_LEVEL_ENVS[0]: QUIET_LOG_LEVEL}


@contextlib.contextmanager
def quiet_ttnn_logs() -> Iterator[dict[str, str]]:
    """Keep ttnn's logging to errors, unless the user set a level of tt-metal's logger; wrap `import ttnn`.

    On entry sets `TT_LOGGER_LEVEL=error` in os.environ (it stays set: tt-metal logs device opens and
    closes long after the import, and child processes inherit it) and, when loguru (ttnn's Python
    logger) is installed, disables loguru's messages from the `ttnn` modules until the exit (the import
    logs ttnn's whole config at DEBUG; later warnings of ttnn's Python code still show). Does nothing
    when `TT_LOGGER_LEVEL` or `TT_METAL_LOGGER_LEVEL` is set. Yields the variables it set, as
    {name: value} (empty when the user's level stands).
    """
    quiet = quiet_log_env()
    if not quiet:
        yield {}
        return
    os.environ.update(quiet)
    logger = importlib.import_module("loguru").logger if importlib.util.find_spec("loguru") else None
    if logger is not None:
        logger.disable("ttnn")
    try:
        yield quiet
    finally:
        if logger is not None:
            logger.enable("ttnn")


def import_ttnn() -> Optional[ModuleType]:
    """Import and return `ttnn` after `ensure_ttnn_env()`, its logging quiet (`quiet_ttnn_logs()`);
    None if it cannot be imported.

    When None is returned the reason is kept in `ttnn_unavailable_reason()`.
    """
    global _unavailable_reason
    loaded = sys.modules.get("ttnn")
    if loaded is not None:
        return loaded
    ensure_ttnn_env()
    try:
        with quiet_ttnn_logs():
            module = importlib.import_module("ttnn")
    except Exception as exc:  # ImportError, or a native-library failure surfacing as another error
        _unavailable_reason = f"import ttnn failed: {type(exc).__name__}: {exc}"
        return None
    _unavailable_reason = None
    return module


def ttnn_unavailable_reason() -> Optional[str]:
    """Why the last `import_ttnn()` returned None (None if it succeeded or was never called)."""
    return _unavailable_reason


def require_ttnn() -> ModuleType:
    """Import ttnn (after `ensure_ttnn_env()`) or raise a RuntimeError naming why it cannot be imported."""
    module = import_ttnn()
    if module is None:
        raise RuntimeError(f"the device backend needs ttnn==0.81.1: {ttnn_unavailable_reason()}")
    return module
