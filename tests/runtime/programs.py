"""Small programs for the runtime tests: builders shared by several test files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ttdecode.core.formats import DataType, num_tiles, pack_tiles, tile_size
from ttdecode.core.program_description import (BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, CoreRangeSet,
                              unpack_to_dest_modes,
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


def tile_op_program(op: str, inputs: dict[int, torch.Tensor], n_out: int, *, kt: int = 1, transpose: int = 0,
                    dst_index: int = 0, dtype: DataType = DataType.bfloat16, out_dtype: DataType | None = None,
                    settings: ComputeSettings | None = None, extra_defines: dict[str, str] | None = None,
                    core: CoreCoord = CoreCoord(0, 0), input_dtypes: dict[int, DataType] | None = None,
                    unpack_to_dest: tuple[int, ...] = (), kernel: str = "tile_op.cpp") -> Program:
    """One core: inputs_reader feeds `inputs` (CB index -> tensor), tile_op.cpp runs `op`, copy_writer
    writes `n_out` tiles of CB 16 to tensor "out". Inputs are in `dtype` unless `input_dtypes` gives a
    CB its own format; the CBs in `unpack_to_dest` are put in UnpackToDestFp32 mode."""
    out_dtype = out_dtype or dtype
    fmt = {cb: (input_dtypes or {}).get(cb, dtype) for cb in inputs}
    where = crs([core])
    tensors = [tensor_in(f"in{cb}", x, fmt[cb]) for cb, x in sorted(inputs.items())]
    reader_args: list = [len(inputs)]
    for cb, x in sorted(inputs.items()):
        reader_args += [BufferAddress(f"in{cb}"), cb, num_tiles(x.shape)]
    reader = Kernel("inputs_reader", kernel_path("inputs_reader.cpp"), KernelKind.READER, where,
                    runtime_args={core: reader_args})
    defines = {f"OP_{op.upper()}": "1", **(extra_defines or {})}
    compute = Kernel("tile_op", kernel_path(kernel), KernelKind.COMPUTE, where,
                     compile_time_args=[n_out, kt, transpose, dst_index], defines=defines, runtime_args={core: []},
                     compute=dataclasses.replace(
                         settings or ComputeSettings(math_fidelity=MathFidelity.HiFi4, fp32_dest_acc_en=True),
                         unpack_to_dest_mode=unpack_to_dest_modes(unpack_to_dest) if unpack_to_dest else ()))
    writer = Kernel("copy_writer", kernel_path("copy_writer.cpp"), KernelKind.WRITER, where, compile_time_args=[16],
                    runtime_args={core: [BufferAddress("out"), 0, n_out]})
    cbs = [CircularBuffer(cb, where, fmt[cb], tile_size(fmt[cb]), max(2, kt)) for cb in sorted(inputs)]
    cbs.append(CircularBuffer(16, where, out_dtype, tile_size(out_dtype), 2))
    tensors.append(tensor_out("out", (32, 32 * n_out), out_dtype))
    return Program([reader, compute, writer], cbs, [], tensors)


def out_tiles(res, prog: Program) -> torch.Tensor:
    """The output tensor of a tile_op program as [n_out, 32, 32] float32."""
    from ttdecode.core.formats import unpack_tiles

    t = prog.tensor("out")
    x = unpack_tiles(res.tensors["out"], t.data_format, t.shape)
    return x.reshape(32, -1, 32).permute(1, 0, 2)


def handshake_program(x: torch.Tensor, dtype: DataType, sender_defines=None, receiver_defines=None) -> Program:
    """Core (0,0) reads one tile of x and sends it to core (1,0) over the NoC with a semaphore handshake;
    core (1,0) writes it to tensor "y"."""
    from ttdecode.core.program_description import NocX, NocY

    a, b = CoreCoord(0, 0), CoreCoord(1, 0)
    both = crs([a, b])
    kernels = [
        Kernel("copy_reader", kernel_path("copy_reader.cpp"), KernelKind.READER, crs([a]), compile_time_args=[0],
               runtime_args={a: [BufferAddress("x"), 0, 1]}),
        Kernel("sem_sender", kernel_path("sem_sender.cpp"), KernelKind.WRITER, crs([a]), compile_time_args=[0],
               defines=dict(sender_defines or {}), runtime_args={a: [NocX(b), NocY(b)]}),
        Kernel("sem_receiver", kernel_path("sem_receiver.cpp"), KernelKind.READER, crs([b]), compile_time_args=[0],
               defines=dict(receiver_defines or {}), runtime_args={b: [NocX(a), NocY(a)]}),
        Kernel("copy_writer", kernel_path("copy_writer.cpp"), KernelKind.WRITER, crs([b]), compile_time_args=[0],
               runtime_args={b: [BufferAddress("y"), 0, 1]}),
    ]
    cbs = [CircularBuffer(0, both, dtype, tile_size(dtype), 2)]
    sems = [Semaphore(0, both, 0), Semaphore(1, both, 0)]
    return Program(kernels, cbs, sems, [tensor_in("x", x, dtype), tensor_out("y", x.shape, dtype)])
