"""The combine on a Wormhole (one device, or SPMD over a mesh): plan once per shape, run per call.

`combine_on_device(outs, lses)` merges n partial attention results already in DRAM -- e.g. what
``ttnn.all_gather(.., dim=0)`` returns from the per-device ``[L, B, NH, Dv]`` / ``[L, B, NH, 1]``
partials of context parallelism -- with the combine program (``kernels/combine/``), through a cached
`CombineStep`: made once per *shape* (the device, n, G, H, Dv, the partials' format, the merged
output's format, the cores), holding the plan, the `Program` and its ttnn descriptor
(`ttdecode.ttnn_backend.PreparedProgram`). Each call checks tensor metadata only, allocates the two
outputs, patches the four buffer addresses and calls ``ttnn.generic_op``: no plan, no program
build, no data between host and device, and the same runtime-argument counts on every call (the
combine has no value in its runtime args: only addresses and each core's tile rows, fixed by the
shape). Steps are kept in a bounded cache (`STEP_CACHE_SIZE`, least recently used out).

On a ``ttnn.MeshDevice`` the one descriptor runs on every device (a mesh tensor sits at one DRAM
address on each), as ``ttdecode.ttnn_backend.launch`` does.

Tensors (tile layout, interleaved DRAM; see ``ttdecode.ops.combine.program_factory``):
``outs [n, G, H, Dv]`` bfloat16 or float32, ``lses [n, G, H, 1]`` float32 (value in column 0, -inf: no
key). Out: ``out [1, G, H, Dv]`` (``out_dtype``), ``lse [1, G, H, 1]`` float32, on the inputs' device.
The host runtime runs the same program (``ttdecode.ops.combine.run_combine``).
"""

from __future__ import annotations

from typing import Any

from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.ttnn_backend.step_cache import StepCache
from ttdecode.ttnn_env import require_ttnn
from ttdecode.core.formats import DataType
from ttdecode.ops.combine.plan import GRID, CombinePlan, make_combine_plan
from ttdecode.ops.combine.program_factory import build_combine_program_for_device
from ttdecode.ops.combine.validate import CombineError, O_FORMATS

__all__ = ["CombineStep", "combine_on_device", "get_combine_step", "clear_combine_steps", "cached_combine_steps",
           "STEP_CACHE_SIZE"]

#: Combine shapes kept (a model has a handful: one per batch and head layout).
STEP_CACHE_SIZE = 16

_steps = StepCache(STEP_CACHE_SIZE)  # step_key -> CombineStep


class CombineStep:
    """The combine planned once for one shape on one device (or mesh), run per call (module doc)."""

    def __init__(self, plan: CombinePlan, device: Any) -> None:
        self.plan = plan
        self.device = device
        self.program = build_combine_program_for_device(plan)
        self.prepared = PreparedProgram(self.program, device)
        self.calls = 0

    def run(self, outs: Any, lses: Any) -> tuple[Any, Any]:
        """Merge `outs` / `lses` (device tensors of the step's shape; checked by metadata only).
        Returns the device tensors ``(out [1, G, H, Dv], lse [1, G, H, 1])``."""
        out, lse = self.prepared.run({"outs": outs, "lses": lses})
        self.calls += 1
        return out, lse


def _ttnn_device_tensor(name: str, t: Any) -> Any:
    """`t` if it is a ttnn tensor on a device, else a CombineError naming `name`."""
    ttnn = require_ttnn()
    cls = type(t)
    if not (cls.__name__ == "Tensor" and cls.__module__.startswith("ttnn")):
        raise CombineError(f"{name}: expected a ttnn tensor on the device, got {cls.__name__}")
    if not ttnn.is_tensor_storage_on_device(t):
        raise CombineError(f"{name}: expected a ttnn tensor on the device, got a host ttnn tensor (move it with "
                           "ttnn.to_device first; the combine moves no data)")
    return t


def _in_format(outs: Any) -> DataType:
    ttnn = require_ttnn()
    formats = {ttnn.bfloat16: DataType.bfloat16, ttnn.float32: DataType.float32}
    fmt = formats.get(outs.dtype)
    if fmt is None:
        raise CombineError(f"outs: expected {[d.value for d in O_FORMATS]} tiles, got {outs.dtype}")
    return fmt


def step_key(outs: Any, lses: Any, out_dtype: DataType, max_cores: int) -> tuple:
    """The cache key of a call: device, shapes, formats, layouts, memory configs and options (no value)."""
    return (id(outs.device()), tuple(outs.shape), str(outs.dtype), str(outs.layout), repr(outs.memory_config()),
            tuple(lses.shape), str(lses.dtype), str(lses.layout), repr(lses.memory_config()), out_dtype, max_cores)


def get_combine_step(outs: Any, lses: Any, *, out_dtype: DataType = DataType.bfloat16,
                     max_cores: int = GRID[0] * GRID[1]) -> CombineStep:
    """The cached `CombineStep` of these tensors' shape (planned, built and cached on a miss).

    Checks: both ttnn tensors on one device, ``outs`` 4-D ``[n, G, H, Dv]`` bfloat16 / float32,
    ``lses`` ``[n, G, H, 1]``; formats, layouts and memory configs are checked by the prepared program
    (tile layout, interleaved DRAM, float32 LSEs)."""
    outs = _ttnn_device_tensor("outs", outs)
    lses = _ttnn_device_tensor("lses", lses)
    shape = tuple(int(d) for d in outs.shape)
    if len(shape) != 4 or 0 in shape:
        raise CombineError(f"outs: expected shape [n, G, H, Dv] (n partials), got {list(shape)}")
    if tuple(int(d) for d in lses.shape) != shape[:3] + (1,):
        raise CombineError(f"lses: expected shape {list(shape[:3]) + [1]} (outs' [n, G, H] and a column), got "
                           f"{list(lses.shape)}")
    if lses.device() is not outs.device():
        raise CombineError("lses: expected a tensor on outs' device, got one on another device")
    if out_dtype not in O_FORMATS:
        raise CombineError(f"out_dtype: expected one of {[d.value for d in O_FORMATS]}, got "
                           f"{getattr(out_dtype, 'value', out_dtype)!r}")
    key = step_key(outs, lses, out_dtype, max_cores)
    n, g, h, dv = shape

    def make() -> CombineStep:
        plan = make_combine_plan(partials=n, groups=g, heads=h, head_dim_v=dv, in_dtype=_in_format(outs),
                                 out_dtype=out_dtype, max_cores=max_cores)
        return CombineStep(plan, outs.device())

    return _steps.get_or_make(key, make)


def combine_on_device(outs: Any, lses: Any, *, out_dtype: DataType = DataType.bfloat16,
                      max_cores: int = GRID[0] * GRID[1]) -> tuple[Any, Any]:
    """Merge n partials already on a device (or mesh) through the cached step of their shape.

    Args:
        outs: ttnn ``[n, G, H, Dv]`` bfloat16 or float32, tile layout, interleaved DRAM: the n
            normalized partial outputs (G groups of H rows, e.g. B users of NH heads).
        lses: ttnn ``[n, G, H, 1]`` float32 tiles on the same device: their LSEs (``-inf``: no key).
        out_dtype: the merged output's format (bfloat16 or float32).
        max_cores: at most this many cores of the 8 x 8 grid (one tile row each at least).

    Returns:
        ``(out [1, G, H, Dv], lse [1, G, H, 1] float32)`` ttnn tensors on the inputs' device. No data
        moves between host and device; the first call of a shape plans and builds, later calls patch
        addresses only.
    """
    return get_combine_step(outs, lses, out_dtype=out_dtype, max_cores=max_cores).run(outs, lses)


def clear_combine_steps() -> None:
    """Forget every cached step (their ttnn programs stay in the device's program cache)."""
    _steps.clear()


def cached_combine_steps() -> int:
    """How many combine steps are cached."""
    return len(_steps)
