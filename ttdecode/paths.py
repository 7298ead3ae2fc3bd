"""Where the package's non-Python files live (kernel sources, runtime headers)."""

from __future__ import annotations

from pathlib import Path


def kernels_dir() -> Path:
    """The directory holding reader.cpp / writer.cpp / compute.cpp / common.hpp.

    In a source checkout this is the ``kernels/`` directory next to the ``ttdecode`` package that was
    imported (so a second checkout or worktree runs its own kernels, whatever was installed
    editable); in an installed wheel it is the ``ttdecode.kernels`` package data.
    """
    beside = Path(__file__).resolve().parent.parent / "kernels"
    if (beside / "compute.cpp").is_file():
        return beside
    import ttdecode.kernels as k  # the repository's kernels/ mapped as a package

    return Path(k.__file__).resolve().parent
