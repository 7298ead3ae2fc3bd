"""Where the package's non-Python files live (kernel sources, runtime headers)."""

from __future__ import annotations

from pathlib import Path


def kernels_dir() -> Path:
    """The directory holding every operator's kernels (``flash_decode/``, ``combine/``, ``rotary_append/``,
    ``shared/``, ``tests/``).

    In a source checkout this is the ``kernels/`` directory next to the ``ttdecode`` package that was
    imported (so a second checkout or worktree runs its own kernels, whatever was installed
    editable); in an installed wheel it is the ``ttdecode.kernels`` package data.
    """
    beside = Path(__file__).resolve().parents[2] / "kernels"
    if (beside / "flash_decode" / "compute.cpp").is_file():
        return beside
    import ttdecode.kernels as k  # the repository's kernels/ mapped as a package

    return Path(k.__file__).resolve().parent


def operator_kernels(op: str, error: type = FileNotFoundError) -> dict[str, Path]:
    """{"reader", "writer", "compute"} -> the paths of an operator's three kernels, ``kernels/<op>/*.cpp``.
    A missing file raises `error` naming it."""
    root = kernels_dir() / op
    out = {name: root / f"{name}.cpp" for name in ("reader", "writer", "compute")}
    for name, path in out.items():
        if not path.is_file():
            raise error(f"kernel source {op}/{name}.cpp not found at {path}")
    return out
