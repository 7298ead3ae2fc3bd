"""Where the package's non-Python files live (kernel sources, runtime headers)."""

from __future__ import annotations

from pathlib import Path


def kernels_dir() -> Path:
    """The directory holding reader.cpp / writer.cpp / compute.cpp / common.hpp."""
    import ttdecode.kernels as k  # the repository's kernels/ mapped as a package

    return Path(k.__file__).resolve().parent
