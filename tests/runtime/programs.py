"""Small programs for the runtime tests: builders shared by several test files."""

from __future__ import annotations

from pathlib import Path

import torch

from ttdecode.formats import DataType, num_tiles, pack_tiles, tile_size
from ttdecode.program import (BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, CoreRange, CoreRangeSet,
                              DramTensor, Kernel, KernelKind, MathFidelity, Program, Semaphore)

REPO = Path(__file__).resolve().parents[2]
TEST_KERNELS = REPO / "kernels" / "tests"


def kernel_path(name: str) -> Path:
    return TEST_KERNELS / name


def grid(cols: int, rows: int) -> list[CoreCoord]:
    return [CoreCoord(x, y) for y in range(rows) for x in range(cols)]


def crs(cores) -> CoreRangeSet:
    return CoreRangeSet.of(cores)


def tensor_in(name: str, x: torch.Tensor, dtype: DataType) -> DramTensor:
    return DramTensor(name, dtype, tile_size(dtype), num_tiles(x.shape), tuple(x.shape), data=pack_tiles(x, dtype))


def tensor_out(name: str, shape, dtype: DataType) -> DramTensor:
    return DramTensor(name, dtype, tile_size(dtype), num_tiles(shape), tuple(shape), is_output=True)


def copy_program(x: torch.Tensor, dtype: DataType, cores: list[CoreCoord], cb_pages: int = 2) -> Program:
    """Each core copies a contiguous run of the tiles of `x` through CB 0 (reader -> writer)."""
    n = num_tiles(x.shape)
    per = -(-n // len(cores))
    where = crs(cores)
    reader = Kernel("copy_reader", kernel_path("copy_reader.cpp"), KernelKind.READER, where, compile_time_args=[0])
    writer = Kernel("copy_writer", kernel_path("copy_writer.cpp"), KernelKind.WRITER, where, compile_time_args=[0])
    for i, c in enumerate(cores):
        start = min(n, i * per)
        count = min(per, n - start)
        reader.runtime_args[c] = [BufferAddress("x"), start, count]
        writer.runtime_args[c] = [BufferAddress("y"), start, count]
    cbs = [CircularBuffer(0, where, dtype, tile_size(dtype), cb_pages)]
    return Program([reader, writer], cbs, [], [tensor_in("x", x, dtype), tensor_out("y", x.shape, dtype)])
