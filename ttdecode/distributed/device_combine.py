"""The combine step of context parallelism on a mesh of Wormhole chips: ttnn's collective moves the
partials, the combine program (``ttdecode.ops.combine``, kernels/combine/*.cpp) merges them.

No Tenstorrent device is reachable where this project is developed, so this path has never run; what
is checked without one (``tests/test_combine_kernel.py``): the combine program's ttnn descriptors
(real ttnn 0.81.1 objects), its dataflow kernels compiled against the wheel's real headers, and that
the program's input tensors are exactly the shapes ``ttnn.all_gather(.., dim=0)`` returns. The same
``Program`` runs on the host runtime, where ``tests/test_combine_kernel.py`` pins its numbers.

* ``combine="all_gather"``: ``ttnn.all_gather(out, dim=0)`` and ``ttnn.all_gather(lse, dim=0)`` turn
  every device's ``[1, B, NH, Dv]`` / ``[1, B, NH, 1]`` partial into ``[n, B, NH, Dv]`` /
  ``[n, B, NH, 1]`` on every device (n x the partial traffic), then ``ttdecode.ttnn_backend.launch`` runs the
  combine program on the mesh with one ``ProgramDescriptor`` (SPMD: a mesh tensor has the same DRAM
  address on every device) through ``ttnn.generic_op``.
* ``combine="all_to_all"``: not built. ttnn 0.81.1's all-to-all for tensors is
  ``ttnn.experimental.all_to_all_async(input, persistent_intermediate_buffer, persistent_output_buffer,
  in_dim, out_dim, multi_device_global_semaphore, num_links=1, topology=Ring)``: it re-shards a tensor
  from dim 2 to dim 3 (or back) only, over a ring, with caller-allocated persistent buffers and a
  global semaphore (``ttnn.create_global_semaphore``). DCP's exchange (device r receives rows share r
  of every partial) fits it only with every partial transposed to ``[Dv, rows]`` (rows along dim 3,
  padded to a multiple of 32 n) and the LSE as a 32-row band, then transposed back before the merge;
  ``ttnn.all_to_all_dispatch`` / ``all_to_all_combine`` are the MoE token routing ops, not a tensor
  exchange. Without hardware none of that could be run or checked, so it is refused by name rather
  than shipped untried.
"""

from __future__ import annotations

from typing import Any, Optional

from ttdecode.ops.combine import CombinePlan, build_combine_program_for_device, make_combine_plan
from ttdecode.core.formats import DataType
from ttdecode.core.program_description import Program
from ttdecode.distributed.sharding import COMBINES
from ttdecode.ttnn_backend.launching import launch

__all__ = ["gathered_combine_program", "device_combine", "lse_rows_to_tiles", "ALL_TO_ALL_ON_DEVICE"]

#: Why the device all_to_all is refused (see the module doc).
ALL_TO_ALL_ON_DEVICE = (
    "the device all_to_all combine is not built: ttnn 0.81.1's ttnn.experimental.all_to_all_async only "
    "re-shards dim 2 <-> dim 3 over a ring with persistent buffers and a global semaphore, which DCP's row "
    "exchange would meet only through transposed partials; use combine='all_gather' on a device")


def gathered_combine_program(devices: int, partial_shape: tuple[int, ...], in_dtype: DataType = DataType.bfloat16,
                             out_dtype: DataType = DataType.bfloat16) -> tuple[CombinePlan, Program]:
    """The combine program that merges what ``ttnn.all_gather(.., dim=0)`` gathers from ``devices``
    devices holding ``L`` partials each, ``partial_shape = [L, B, NH, Dv]`` (L = 1: one partial per
    device; the mesh decode path stacks one per launch): inputs ``outs [n L, B, NH, Dv]`` (in_dtype)
    and ``lses [n L, B, NH, 1]`` (float32 tiles), outputs ``out [1, B, NH, Dv]`` (out_dtype),
    ``lse [1, B, NH, 1]``."""
    shape = tuple(int(d) for d in partial_shape)
    if len(shape) != 4 or shape[0] < 1:
        raise ValueError(f"device_combine: argument 'out': expected a per-device shape [L>=1, B, NH, Dv], got {list(shape)}")
    per_device, b, nh, dv = shape
    plan = make_combine_plan(partials=devices * per_device, groups=b, heads=nh, head_dim_v=dv, in_dtype=in_dtype,
                             out_dtype=out_dtype)
    return plan, build_combine_program_for_device(plan)


def device_combine(out: Any, lse: Any, *, mesh_device: Any, combine: str = "all_gather") -> tuple[Any, Any]:
    """Merge every device's partial on a mesh (see the module doc).

    Args:
        out: a ttnn mesh tensor, per device ``[L, B, NH, Dv]`` (bfloat16 or float32, tile layout,
            interleaved DRAM): that device's L normalized partial outputs (L = 1 usually).
        lse: a ttnn mesh tensor, per device ``[L, B, NH, 1]`` float32 tiles: their LSEs (``-inf``: no key).
        mesh_device: the ``ttnn.MeshDevice`` whose devices form the context-parallel group.
        combine: ``"all_gather"`` (``"all_to_all"`` is refused, see ``ALL_TO_ALL_ON_DEVICE``).

    Returns:
        ``(out [1, B, NH, Dv] bfloat16, lse [1, B, NH, 1] float32)`` mesh tensors, the same on every device.
    """
    from ttdecode.ttnn_env import has_tenstorrent_device, require_ttnn

    if not isinstance(combine, str) or combine not in COMBINES:
        raise ValueError(f"device_combine: argument 'combine': expected one of {list(COMBINES)}, got {combine!r}")
    if combine == "all_to_all":
        raise NotImplementedError(f"device_combine: argument 'combine': {ALL_TO_ALL_ON_DEVICE}")
    if not has_tenstorrent_device():
        raise RuntimeError("device_combine: no Tenstorrent device found (no /dev/tenstorrent*); the same combine "
                           "program runs on the host runtime (ttdecode.ops.combine.run_combine)")
    ttnn = require_ttnn()
    in_dtype = DataType.float32 if out.dtype == ttnn.float32 else DataType.bfloat16
    _, program = gathered_combine_program(mesh_device.get_num_devices(), tuple(out.shape), in_dtype)
    outs = ttnn.all_gather(out, dim=0)
    lses = ttnn.all_gather(lse, dim=0)
    merged, merged_lse = launch(program, {"outs": outs, "lses": lses}, mesh_device)
    return merged, merged_lse


def lse_rows_to_tiles(ttnn: Any, rows: Any, batch: int, num_heads: int, num_kv_heads: int,
                      op: Optional[Any] = None) -> Any:
    """The op's LSE rows ``[B*NKV, 32]`` as the combine's ``[1, B, NH, 1]`` float32 tiles (row (b, kv),
    column j holds head ``kv*g + j``; one token). ``op(name)``: how to reach a ttnn op (default
    ``getattr(ttnn, name)``; a caller may count them)."""
    op = (lambda name: getattr(ttnn, name)) if op is None else op
    g = num_heads // num_kv_heads
    heads = op("slice")(rows, [0, 0], [batch * num_kv_heads, g])
    return op("to_layout")(op("reshape")(heads, [1, batch, num_heads, 1]), ttnn.TILE_LAYOUT)
