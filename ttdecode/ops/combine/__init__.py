"""The combine: n partial attention results merged exactly by their LSE (context parallelism).

``validate`` (checks), ``plan`` (tile rows over cores, CBs), ``program_factory`` (the `Program`), ``op``
(`run_combine` on the host runtime), ``device_step`` (`combine_on_device`: a cached step per shape on a
device or mesh), ``counts`` (the kernel's op counts for the perf model). Kernels:
``kernels/combine/``.
"""

from ttdecode.ops.combine.counts import CombineOps, combine_init_count, combine_op_counts
from ttdecode.ops.combine.device_step import CombineStep, combine_on_device
from ttdecode.ops.combine.op import run_combine
from ttdecode.ops.combine.plan import COMBINE_CBS, TILE, CombinePlan, make_combine_plan
from ttdecode.ops.combine.program_factory import (
    COMBINE_COMPUTE, build_combine_program, build_combine_program_for_device, combine_compute_settings,
    combine_kernel_sources,
)
from ttdecode.ops.combine.validate import CombineError

__all__ = ["CombineError", "CombinePlan", "CombineOps", "make_combine_plan", "build_combine_program",
           "build_combine_program_for_device", "run_combine", "combine_on_device", "CombineStep", "combine_op_counts",
           "combine_init_count", "combine_kernel_sources", "combine_compute_settings", "COMBINE_CBS", "COMBINE_COMPUTE",
           "TILE"]
