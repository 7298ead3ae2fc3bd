"""Context parallelism on a mesh of Wormhole chips, the one-shot call
(``context_parallel_decode(..., backend="device")``); the decode loop that keeps paged shards on the
devices is ``ttdecode.distributed.device_context``.

The call (``context_parallel_decode(..., backend="device")``: a whole contiguous cache
given as host tensors, re-sharded and uploaded on every call, for a single decode; paged caches are
refused there, the loop above keeps paged shards), for a 1-D ``ttnn.MeshDevice`` of n devices (N300
1x2, T3K 1x8), device d at mesh coordinate ``(d // cols, d % cols)``:

1. Sharding: the host path's own description (``context.shard_plan``, ``context._local_positions``,
   ``context.shard_groups``): device d holds the units of ``shard_plan(...).units[d]``, and makes one
   op call per distinct (local window, sink) of its live users. A mesh tensor has one tensor spec on
   every device (``ttnn.from_host_shards`` refuses shards that differ), so every shard is padded at its
   end with zero tiles to the largest share (``local_seq_len``); no local position reaches the padding.
2. One ``ttnn.generic_op`` per launch with a ``ttnn.MeshProgramDescriptor``: per device the FlashDecode
   program of the op on that device's shard (``ttdecode.ops.flash_decode.op.make_decode_plan`` + ``ttdecode.ops.flash_decode.device_step.decode_program``
   on the shard's inputs, ``return_lse=True``), its own local positions in a per-device ``cur_pos``
   shard. Launch i runs device d's i-th call; a device with fewer calls runs one with every user at
   -1 (zeros, LSE -inf: weight 0 in the merge). Calls with the sink and without it go to separate
   launches (the programs of one launch share their io tensors, and only sink programs read one).
3. The op's LSE rows ``[B*NKV, 32]`` (row-major float32, a KV group's heads in its first g columns)
   become the combine program's ``[1, B, NH, 1]`` float32 tiles: ``ttnn.slice`` to ``[B*NKV, g]``,
   ``ttnn.reshape`` to ``[1, B, NH, 1]``, ``ttnn.to_layout(TILE)``; the launches' partials are stacked
   with ``ttnn.concat(dim=0)`` (L > 1 launches).
4. ``device_combine``: ``ttnn.all_gather(dim=0)`` of the ``[L, B, NH, Dv]`` / ``[L, B, NH, 1]``
   partials and the combine program (SPMD ``ProgramDescriptor``) over the n L partials.

What runs here (``tests/distributed/test_cp_mesh.py``): steps 1-2 for real (the host shards as real
ttnn host tensors joined by ``ttnn.from_host_shards``, every device's real ``ProgramDescriptor`` inside a
real ``MeshProgramDescriptor``), and the whole chain with ttnn's device calls (``to_device``,
``allocate_tensor_on_device``, ``generic_op``, ``slice``, ``to_layout``, ``concat``, ``all_gather``,
``get_device_tensors`` / ``to_torch`` of the result) replaced by recorders. Not built in the one-shot
call: paged caches (use the loop), multi-token decode, 2-D meshes, the all_to_all combine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ttdecode.core.program_description import Program
from ttdecode.core.tensor import TileTensor, to_torch
from ttdecode.distributed.device_combine import device_combine, lse_rows_to_tiles
from ttdecode.distributed.sharding import ShardPlan, _local_positions, _shard_kv, shard_groups, shard_plan
from ttdecode.ops.flash_decode.device_step import decode_program, device_grid_limit, to_torch_sink
from ttdecode.ops.flash_decode.op import compute_settings, make_decode_plan
from ttdecode.ttnn_backend.launching import launch_mesh
from ttdecode.ttnn_backend.tensors import dram_banks

__all__ = ["DeviceLaunch", "MeshDecodePlan", "plan_mesh_decode", "mesh_shape_of", "device_inputs", "mesh_programs",
           "padded_shards", "mesh_host_tensor", "run_on_mesh", "NOT_ON_A_MESH"]

_NAME = "context_parallel_decode"

#: Options of the op the mesh path does not carry (refused by name, see the module doc).
NOT_ON_A_MESH = {
    "page_table": "a paged cache on a mesh is not built in this one-shot call (it would re-shard and upload "
                  "every device's block pool on each call); a decode loop keeps its paged shards on the "
                  "devices: ttdecode.distributed.device_context.ContextParallelDecode (LlamaDecoder "
                  "context_parallel on backend='device'); or use backend='host'",
}


@dataclass(frozen=True)
class DeviceLaunch:
    """One device's share of one launch: its local positions (``-1``: the user is not in this call),
    the call's local sliding window (None: none) and whether the sink joins."""

    positions: tuple[int, ...]
    window: Optional[int]
    sink: bool


@dataclass(frozen=True)
class MeshDecodePlan:
    """The mesh decode: ``shards`` (units per device), the mesh's (rows, cols), every device's padded
    shard length in positions, and ``launches[i][d]``."""

    shards: ShardPlan
    mesh_shape: tuple[int, int]
    local_seq_len: int
    launches: tuple[tuple[DeviceLaunch, ...], ...]

    @property
    def devices(self) -> int:
        return self.shards.devices

    def coord(self, d: int) -> tuple[int, int]:
        """Device d's mesh coordinate (row-major over the mesh)."""
        return divmod(d, self.mesh_shape[1])


def mesh_shape_of(mesh_device: Any) -> tuple[int, int]:
    """(rows, cols) of a ``ttnn.MeshDevice``; a 2-D mesh is refused (the CP group would be one of its axes)."""
    shape = getattr(mesh_device, "shape", None)
    dims = tuple(int(x) for x in shape) if shape is not None else ()
    if len(dims) != 2 or min(dims) < 1:
        raise TypeError(f"{_NAME}: argument 'devices': expected a ttnn.MeshDevice (backend 'device'), "
                        f"e.g. ttnn.open_mesh_device(ttnn.MeshShape(1, n)), got {type(mesh_device).__name__}")
    if min(dims) != 1:
        raise NotImplementedError(f"{_NAME}: argument 'devices': a {dims[0]}x{dims[1]} mesh: context parallelism "
                                  f"over one axis of a 2-D mesh (all_gather with cluster_axis) is not built; "
                                  f"expected a 1xN or Nx1 mesh")
    return dims


def plan_mesh_decode(positions: Sequence[int], num_units: int, unit: int, mesh_shape: tuple[int, int],
                     kv_layout: str, window: Optional[int], sink: bool) -> MeshDecodePlan:
    """The launches of a mesh decode (module doc, steps 1-2). ``positions``: global, ``-1`` skips."""
    n = mesh_shape[0] * mesh_shape[1]
    shards = shard_plan(num_units, unit, n, kv_layout)
    batch = len(positions)
    calls = [shard_groups(_local_positions(shards, d, list(positions), window, sink)) for d in range(n)]
    launches: list[tuple[DeviceLaunch, ...]] = []
    for with_sink in (False, True):
        mine = [[c for c in device_calls if c[1] == with_sink] for device_calls in calls]
        for i in range(max(len(m) for m in mine)):
            launches.append(tuple(
                DeviceLaunch(tuple(m[i][2]), m[i][0], with_sink) if i < len(m)
                else DeviceLaunch((-1,) * batch, None, with_sink)  # nothing here: zeros and LSE -inf
                for m in mine))
    if not launches:  # every user skipped: one launch still gives the zeros and -inf
        launches.append(tuple(DeviceLaunch((-1,) * batch, None, False) for _ in range(n)))
    local = max(len(us) for us in shards.units) * unit
    return MeshDecodePlan(shards=shards, mesh_shape=tuple(mesh_shape), local_seq_len=local, launches=tuple(launches))


def device_inputs(info: Any, mesh: MeshDecodePlan, launch: DeviceLaunch) -> Any:
    """The validated inputs (``DecodeInputs``) of the op on one device's padded shard for one launch."""
    return dataclasses.replace(
        info, seq_len=mesh.local_seq_len, positions=launch.positions,
        cur_pos=launch.positions if info.cur_pos is not None else None,
        sliding_window_size=launch.window, attention_sink=info.attention_sink if launch.sink else None,
        return_lse=True)


def mesh_programs(info: Any, mesh: MeshDecodePlan, device: Any = None) -> list[dict[tuple[int, int], Program]]:
    """Per launch, per mesh coordinate: the FlashDecode program of the op on that device's shard.
    ``device``: the mesh device when there is one: its chips' grid (``device_grid_limit``) and DRAM bank
    count bound the plans; without it, the board the host runtime models."""
    limits = {} if device is None else {"dram_banks": dram_banks(device), "grid_limit": device_grid_limit(device)}
    out = []
    for launch in mesh.launches:
        progs = {}
        for d, share in enumerate(launch):
            inputs = device_inputs(info, mesh, share)
            progs[mesh.coord(d)] = decode_program(inputs, make_decode_plan(inputs, **limits),
                                                  compute_settings(inputs))
        out.append(progs)
    return out


def _pad_positions(t: Any, seq: int) -> Any:
    """A shard ``[A, NKV, s, D]`` padded with zero tiles to ``seq`` positions (TileTensor bytes kept)."""
    a, h, s, dd = t.shape
    if s == seq:
        return t
    tc = t.padded_shape[3] // 32
    raw = np.frombuffer(t.data, dtype=np.uint8).reshape(a, h, s // 32, tc * t.page_size)
    pad = np.zeros((a, h, (seq - s) // 32, tc * t.page_size), dtype=np.uint8)  # zero tiles in any format
    return TileTensor((a, h, seq, dd), t.dtype, np.concatenate([raw, pad], axis=2).tobytes())


def padded_shards(x: Any, mesh: MeshDecodePlan) -> list[Any]:
    """Every device's part of K or V (a TileTensor), padded to the mesh's one shard length."""
    return [_pad_positions(_shard_kv(x, mesh.shards, d, None), mesh.local_seq_len) for d in range(mesh.devices)]


def _ttnn_host(ttnn: Any, t: Any) -> Any:
    """A TileTensor as a host TILE ttnn tensor of the same format (its values are exact in it)."""
    return ttnn.from_torch(to_torch(t).to(torch.float32), dtype=getattr(ttnn, t.dtype.value), layout=ttnn.TILE_LAYOUT)


def mesh_host_tensor(ttnn: Any, shards: Sequence[Any], mesh_shape: tuple[int, int]) -> Any:
    """One multi-device host tensor from per-device host tensors (``ttnn.from_host_shards``: one spec for all)."""
    return ttnn.from_host_shards(list(shards), ttnn.MeshShape(*mesh_shape))


def run_on_mesh(info: Any, q: Any, k: Any, v: Any, mesh_device: Any, mesh: MeshDecodePlan,
                combine: str) -> tuple[Any, torch.Tensor]:
    """The whole chain (module doc) on ``mesh_device``. ``q``/``k``/``v``: host TileTensors of the
    whole call (``v`` None with MLA). Returns the merged output (a ttnn mesh tensor ``[1, B, NH, Dv]``
    bfloat16, the same on every device) and the merged LSE ``[1, B, NH]`` (float32 torch, device 0's)."""
    from ttdecode.ttnn_env import has_tenstorrent_device, require_ttnn

    ttnn = require_ttnn()
    programs = mesh_programs(info, mesh, mesh_device)
    n, shape = mesh.devices, mesh.mesh_shape
    host = {"q": mesh_host_tensor(ttnn, [_ttnn_host(ttnn, q)] * n, shape),
            "k": mesh_host_tensor(ttnn, [_ttnn_host(ttnn, s) for s in padded_shards(k, mesh)], shape)}
    if v is not None:
        host["v"] = mesh_host_tensor(ttnn, [_ttnn_host(ttnn, s) for s in padded_shards(v, mesh)], shape)
    if info.attention_sink is not None:
        sink = ttnn.from_torch(to_torch_sink(info), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
        host["sink"] = mesh_host_tensor(ttnn, [sink] * n, shape)
    cur_pos = [mesh_host_tensor(ttnn, [ttnn.from_torch(torch.tensor(share.positions, dtype=torch.int32),
                                                       dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT)
                                       for share in launch], shape) for launch in mesh.launches]
    if not has_tenstorrent_device():
        raise RuntimeError(f"{_NAME}: backend 'device': no Tenstorrent device found (no /dev/tenstorrent*); the "
                           f"mesh path is built up to ttnn.to_device of the {n} cache shards and "
                           f"ttnn.generic_op(MeshProgramDescriptor); use backend='host' to run the same kernels")
    on_device = {name: ttnn.to_device(t, mesh_device, memory_config=ttnn.DRAM_MEMORY_CONFIG) for name, t in host.items()}
    outs, lses = [], []
    for launch, progs, pos in zip(mesh.launches, programs, cur_pos):
        names = {t.name for t in next(iter(progs.values())).tensors}
        io = {name: t for name, t in on_device.items() if name in names}
        io["cur_pos"] = ttnn.to_device(pos, mesh_device, memory_config=ttnn.DRAM_MEMORY_CONFIG)
        out, lse_rows = launch_mesh(progs, io, mesh_device)
        outs.append(out)
        lses.append(lse_rows_to_tiles(ttnn, lse_rows, info.batch, info.num_heads, info.num_kv_heads))
    out = outs[0] if len(outs) == 1 else ttnn.concat(outs, dim=0)
    lse = lses[0] if len(lses) == 1 else ttnn.concat(lses, dim=0)
    merged, merged_lse = device_combine(out, lse, mesh_device=mesh_device, combine=combine)
    first = ttnn.get_device_tensors(merged_lse)[0]
    return merged, ttnn.to_torch(first).to(torch.float32).reshape(1, info.batch, info.num_heads)
