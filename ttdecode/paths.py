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
    beside = Path(__file__).resolve().parent.parent / "kernels"
    if (beside / "flash_decode" / "compute.cpp").is_file():
        return beside
    import ttdecode.kernels as k  # the repository's kernels/ mapped as a package

    return Path(k.__file__).resolve().parent
