"""The (old, new) data-format reconfigs as the LLK runs them (llk_unpack_common_api.h: the srcA / srcB
unpacker is reprogrammed only when `should_reconfigure_cbs(old, new)`, i.e. when the two CBs' source or
destination formats differ; llk_pack_common_api.h likewise for the packer): a matching pair reprograms
nothing, so naming the wrong old operand leaves the unpacker configured for whatever it held, as on the
chip, and the runtime then refuses the copy of a CB of another format. Configuration calls are counted
(the cost model's op "init"); a skipped reconfig is not one."""

from __future__ import annotations

import pytest
import torch

from programs import crs, kernel_path, tensor_in, tensor_out
from ttdecode.core.formats import DataType, tile_size, unpack_tiles
from ttdecode.core.program_description import BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, Kernel, KernelKind, Program
from ttdecode.runtime import KernelError, run_program

F32, BF16 = DataType.float32, DataType.bfloat16


def _run(start: int, old: int):
    core = CoreCoord(0, 0)
    where = crs([core])
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(32, 32, generator=g) for _ in range(3)]
    fmts = [F32, BF16, BF16]
    tensors = [tensor_in(f"in{cb}", x, f) for cb, (x, f) in enumerate(zip(xs, fmts))]
    reader_args: list = [3]
    for cb in range(3):
        reader_args += [BufferAddress(f"in{cb}"), cb, 1]
    reader = Kernel("inputs_reader", kernel_path("inputs_reader.cpp"), KernelKind.READER, where,
                    runtime_args={core: reader_args})
    compute = Kernel("reconfig_op", kernel_path("reconfig_op.cpp"), KernelKind.COMPUTE, where,
                     defines={"START": str(start), "OLD": str(old)}, runtime_args={core: []},
                     compute=ComputeSettings())
    writer = Kernel("copy_writer", kernel_path("copy_writer.cpp"), KernelKind.WRITER, where, compile_time_args=[16],
                    runtime_args={core: [BufferAddress("out"), 0, 1]})
    cbs = [CircularBuffer(cb, where, f, tile_size(f), 2) for cb, f in enumerate(fmts)]
    cbs.append(CircularBuffer(16, where, F32, tile_size(F32), 2))
    tensors.append(tensor_out("out", (32, 32), F32))
    prog = Program([reader, compute, writer], cbs, [], tensors)
    res = run_program(prog)
    got = unpack_tiles(res.tensors["out"], F32, (32, 32))
    return xs[2].to(torch.bfloat16).float(), got, res.counters.tiles("init")


def test_a_reconfig_between_cbs_of_one_format_reprograms_nothing_and_is_not_counted() -> None:
    want, got, inits = _run(start=1, old=1)
    assert torch.equal(got, want)  # CB 2's bf16 tile, exactly: srcA was already set for bf16
    assert inits == 2  # the start-up and copy_init; the bf16 -> bf16 reconfig is skipped


def test_a_reconfig_between_formats_reprograms_the_unpacker_and_counts() -> None:
    want, got, inits = _run(start=0, old=0)
    assert torch.equal(got, want)
    assert inits == 3


def test_naming_the_wrong_old_operand_leaves_the_stale_configuration_and_the_copy_is_refused() -> None:
    # srcA is configured for the Float32 CB 0; the kernel names bf16 CB 1 as the old operand, so the
    # LLK compares bf16 with bf16 and reprograms nothing: CB 2 (bf16) then meets a Float32 unpacker.
    with pytest.raises(KernelError, match=r"srcA is configured for Float32 but CB 2 holds"):
        _run(start=0, old=1)
