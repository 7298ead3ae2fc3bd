"""The combine program: n partial attention results merged exactly by their LSE, as a Metalium program.

Context parallelism (``ttdecode.distributed.context``) leaves every device with a partial output
(normalized over its keys) and the LSE of every (user, head) row. This module describes the program
that merges them on one device (``kernels/combine/{reader,compute,writer}.cpp``): the online-softmax
merge of the FlashDecode tree, in fp32 on the SFPU (see the header of ``kernels/combine/compute.cpp``).
One :class:`CombinePlan` feeds both backends: :func:`build_combine_program` carries the input bytes
for the host runtime, :func:`build_combine_program_for_device` leaves them to the device, where
``ttdecode.ttnn_backend`` turns the same ``Program`` into ttnn descriptors.

DRAM tensors (tile layout, interleaved; G groups of H rows, e.g. G = B users of H = NH heads):

==========  ====================  ================================  ===============================
name        shape                 format                            what
==========  ====================  ================================  ===============================
outs        [n, G, H, Dv]         bfloat16 or float32 (in_dtype)    the n normalized partials
lses        [n, G, H, 1]          float32 (the value in column 0)   their LSEs (-inf: no key)
out         [1, G, H, Dv]         bfloat16 or float32 (out_dtype)   merged output (output)
lse         [1, G, H, 1]          float32                           merged LSE (output)
==========  ====================  ================================  ===============================

These are the shapes ``ttnn.all_gather(.., dim=0)`` makes from the per-device ``[1, B, NH, Dv]`` and
``[1, B, NH, 1]`` tensors. Work: the ``T = G * ceil(H / 32)`` tile rows are dealt to the cores in
contiguous runs (the first ``T % cores`` one more); a row's result does not depend on the others.

Runtime args per core: reader (outs, lses addresses, first tile row, tile rows), writer (out, lse
addresses, first tile row, tile rows), compute (tile rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.program_description import (
    BufferAddress,
    CircularBuffer,
    ComputeSettings,
    CoreRangeSet,
    DramTensor,
    Kernel,
    KernelKind,
    Program,
    unpack_to_dest_modes,
)
from ttdecode.core.tensor import from_torch
from ttdecode.ops.combine.plan import COMBINE_CBS, CombinePlan
from ttdecode.ops.combine.validate import CombineError, _check_partials
from ttdecode.core.paths import operator_kernels

#: The combine's compute settings: fp32 DST (the statistics are fp32 on the SFPU), half-sync (4 tiles).
COMBINE_COMPUTE = ComputeSettings(fp32_dest_acc_en=True, dst_full_sync_en=False)
#: The CBs the compute kernel reads with copy_tile / unary_bcast from fp32 pages: unpacked straight into
#: the fp32 DST (UnpackToDestFp32). cb_o_in joins them when the partials are float32.
_UNPACK_TO_DEST = ("lse_in", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b", "alpha")


def combine_kernel_sources() -> dict[str, Path]:
    """Paths of kernels/combine/{reader,compute,writer}.cpp (beside the imported package)."""
    return operator_kernels("combine", CombineError)


def combine_compute_settings(plan: CombinePlan) -> ComputeSettings:
    """The compute kernel's settings: fp32 DST, fp32 CBs read by copies unpacked straight to DST."""
    names = list(_UNPACK_TO_DEST) + (["o_in"] if plan.in_dtype is DataType.float32 else [])
    index = dict(COMBINE_CBS)
    return ComputeSettings(fp32_dest_acc_en=COMBINE_COMPUTE.fp32_dest_acc_en,
                           dst_full_sync_en=COMBINE_COMPUTE.dst_full_sync_en,
                           unpack_to_dest_mode=unpack_to_dest_modes(index[n] for n in names))


def _program(plan: CombinePlan, images: Optional[dict[str, bytes]]) -> Program:
    if not isinstance(plan, CombinePlan):
        raise CombineError(f"plan: expected a CombinePlan (make_combine_plan), got {type(plan).__name__}")
    cores = plan.cores
    core_set = CoreRangeSet.of(cores)
    src = combine_kernel_sources()
    compute = combine_compute_settings(plan)
    value_bytes = {DataType.bfloat16: 2, DataType.float32: 4}
    reader_ct = dict(num_partials=plan.partials, dv_tiles=plan.dv_tiles, tile_rows=plan.tile_rows,
                     head_tiles=plan.head_tiles, heads=plan.heads, o_value_bytes=value_bytes[plan.in_dtype])
    writer_ct = dict(dv_tiles=plan.dv_tiles, out_value_bytes=value_bytes[plan.out_dtype])
    compute_ct = dict(num_partials=plan.partials, dv_tiles=plan.dv_tiles, dst_tiles=compute.dst_tiles)
    rows = dict(zip(cores, plan.core_rows))
    kernels = [
        Kernel("combine_reader", src["reader"], KernelKind.READER, core_set, named_compile_time_args=reader_ct,
               runtime_args={c: [BufferAddress("outs"), BufferAddress("lses"), *rows[c]] for c in cores}),
        Kernel("combine_writer", src["writer"], KernelKind.WRITER, core_set, named_compile_time_args=writer_ct,
               runtime_args={c: [BufferAddress("out"), BufferAddress("lse"), *rows[c]] for c in cores}),
        Kernel("combine_compute", src["compute"], KernelKind.COMPUTE, core_set, named_compile_time_args=compute_ct,
               runtime_args={c: [rows[c][1]] for c in cores}, compute=compute),
    ]
    cbs = [CircularBuffer(cb.index, core_set, cb.data_format, cb.page_size, cb.num_pages) for cb in plan.circular_buffers]
    n, g, h, dv = plan.partials, plan.groups, plan.heads, plan.head_dim_v
    image = (lambda name: None) if images is None else images.__getitem__
    f32 = DataType.float32

    def tensor(name: str, dtype: DataType, shape: tuple[int, ...], output: bool = False) -> DramTensor:
        return DramTensor(name, dtype, formats.tile_size(dtype), formats.num_tiles(shape), shape, "tile",
                          None if output else image(name), is_output=output)

    tensors = [tensor("outs", plan.in_dtype, (n, g, h, dv)), tensor("lses", f32, (n, g, h, 1)),
               tensor("out", plan.out_dtype, (1, g, h, dv), True), tensor("lse", f32, (1, g, h, 1), True)]
    return Program(kernels=kernels, circular_buffers=cbs, semaphores=[], tensors=tensors)


def build_combine_program_for_device(plan: CombinePlan) -> Program:
    """The combine program without input bytes: on a device the partials already live in DRAM."""
    return _program(plan, None)


def build_combine_program(plan: CombinePlan, outs: torch.Tensor, lses: torch.Tensor) -> Program:
    """The combine program carrying its inputs (the host runtime): ``outs [n, G, H, Dv]`` are packed to
    the plan's in_dtype tiles (lossless for values already in that format), ``lses [n, G, H]`` to
    float32 tiles with the value in column 0."""
    outs, lses = _check_partials(outs, lses)
    want = [plan.partials, plan.groups, plan.heads, plan.head_dim_v]
    if list(outs.shape) != want:
        raise CombineError(f"outs: expected shape {want} (from the plan), got {list(outs.shape)}")
    images = {"outs": from_torch(outs.to(torch.float32), plan.in_dtype).data,
              "lses": from_torch(lses.to(torch.float32).unsqueeze(-1), DataType.float32).data}
    return _program(plan, images)


def _decode(plan: CombinePlan, tensors: dict[str, bytes]) -> tuple[torch.Tensor, torch.Tensor]:
    g, h, dv = plan.groups, plan.heads, plan.head_dim_v
    out = formats.unpack_tiles(tensors["out"], plan.out_dtype, (1, g, h, dv))
    lse = formats.unpack_tiles(tensors["lse"], DataType.float32, (1, g, h, 1))[..., 0]
    out = out.to(torch.bfloat16) if plan.out_dtype is DataType.bfloat16 else out.to(torch.float32)
    return out, lse.to(torch.float32)
