"""How context parallelism cuts a KV cache along the sequence: which key tiles (or blocks) each device
owns, the positions each device sees, and each device's shard of K/V. Pure data, no processes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ttdecode.core.tensor import TileTensor

#: How the key units are dealt over the devices.
KV_LAYOUTS = ("contiguous", "interleaved")
#: How the partials meet.
COMBINES = ("all_gather", "all_to_all")


@dataclass(frozen=True)
class ShardPlan:
    """Which units of the sequence each device holds. ``unit``: positions per unit (32 or block_size);
    ``units[d]``: device d's global unit ids in increasing order."""

    unit: int
    num_units: int
    layout: str
    units: tuple[tuple[int, ...], ...]

    @property
    def devices(self) -> int:
        return len(self.units)

    def owner(self, pos: int) -> int:
        """The device holding global position ``pos``."""
        u = pos // self.unit
        if self.layout == "interleaved":
            return u % self.devices
        return next(d for d, us in enumerate(self.units) if us[0] <= u <= us[-1])

    def count_upto(self, d: int, pos: int) -> int:
        """How many positions ``<= pos`` device d holds (0 for pos < 0)."""
        if pos < 0:
            return 0
        u, within = divmod(pos, self.unit)
        us = np.asarray(self.units[d])
        full = int(np.count_nonzero(us < u))
        return full * self.unit + (within + 1 if u in self.units[d] else 0)


def shard_plan(num_units: int, unit: int, devices: int, layout: str) -> ShardPlan:
    """The units of each device (see the module doc)."""
    if layout == "interleaved":
        units = tuple(tuple(range(d, num_units, devices)) for d in range(devices))
    else:
        base, extra = divmod(num_units, devices)
        units, start = [], 0
        for d in range(devices):
            size = base + (1 if d < extra else 0)
            units.append(tuple(range(start, start + size)))
            start += size
        units = tuple(units)
    return ShardPlan(unit=unit, num_units=num_units, layout=layout, units=units)


def _local_positions(plan: ShardPlan, d: int, positions: Sequence[int], window: Optional[int],
                     sink: bool) -> list[tuple[int, Optional[int], bool]]:
    """Per user on device d: (local position or -1, local window or None, whether the sink joins here).

    The local window is None when the user's window covers every local key up to its position."""
    rows = []
    for p in positions:
        if p < 0:
            rows.append((-1, None, False))
            continue
        c = plan.count_upto(d, p)
        first = plan.count_upto(d, p - window) if window is not None else 0  # local keys before the window
        live = c - first
        if live <= 0:
            rows.append((-1, None, False))
            continue
        rows.append((c - 1, None if first == 0 else live, sink and plan.owner(p) == d))
    return rows


def shard_groups(rows: Sequence[tuple[int, Optional[int], bool]]) -> list[tuple[Optional[int], bool, list[int]]]:
    """The op calls one device makes over its shard: one per distinct (local window, sink) among its
    live users (``rows`` from :func:`_local_positions`), in order of first appearance, each as
    ``(window, with_sink, local positions with the other users at -1)``. Shared by the host workers
    and the mesh path (``ttdecode.distributed.mesh_decode``)."""
    groups: dict[tuple[Optional[int], bool], list[int]] = {}
    for b, (c, w, s) in enumerate(rows):
        if c >= 0:
            groups.setdefault((w, s), []).append(b)
    return [(w, s, [rows[b][0] if b in users else -1 for b in range(len(rows))])
            for (w, s), users in groups.items()]


def _tile_rows_select(t: Any, rows_of_unit: int, units: Sequence[int], outer_pages: Optional[np.ndarray] = None) -> Any:
    """A TileTensor ``[A, NKV, S, D]`` cut to the given units along dim 2 (``rows_of_unit`` tile rows
    each), or with ``outer_pages`` to the given indices of dim 0 (paged pools). Bytes are copied as they
    are (no re-quantization)."""
    a, h, s, dd = t.shape
    tr, tc = t.padded_shape[2] // 32, t.padded_shape[3] // 32
    raw = np.frombuffer(t.data, dtype=np.uint8).reshape(a, h, tr, tc * t.page_size)
    if outer_pages is not None:
        sel = raw[outer_pages]
        return TileTensor((len(outer_pages), h, s, dd), t.dtype, sel.tobytes())
    idx = (np.asarray(units)[:, None] * rows_of_unit + np.arange(rows_of_unit)[None, :]).reshape(-1)
    sel = raw[:, :, idx]
    return TileTensor((a, h, len(idx) * 32, dd), t.dtype, sel.tobytes())


def _shard_kv(x: Any, plan: ShardPlan, d: int, paged_blocks: Optional[np.ndarray]) -> Any:
    """Device d's part of K or V: the positions of its units (contiguous cache) or the blocks its page
    table rows reference (paged pool, ``paged_blocks`` sorted physical ids)."""
    if x is None:
        return None
    if isinstance(x, TileTensor):
        if paged_blocks is not None:
            return _tile_rows_select(x, 0, (), outer_pages=paged_blocks)
        return _tile_rows_select(x, plan.unit // 32, plan.units[d])
    if paged_blocks is not None:
        return x.index_select(0, torch.as_tensor(paged_blocks, dtype=torch.long)).contiguous()
    return x.index_select(2, _unit_positions(plan, d)).contiguous()


def _unit_positions(plan: ShardPlan, d: int) -> torch.Tensor:
    """The logical key positions device d holds, in its local order (int64)."""
    return (torch.as_tensor(plan.units[d])[:, None] * plan.unit + torch.arange(plan.unit)[None, :]).reshape(-1)


def device_step_positions(plan: ShardPlan, positions: Sequence[int]) -> tuple[list[list[int]], list[list[int]]]:
    """Per device d of `plan`, for one decode step of the global ``positions`` ``[B]`` (-1: skipped):

    * ``append[d][b]``: the local position where device d writes user b's new K/V row (this step's
      token is at ``positions[b]``): ``count_upto(d, p) - 1`` when d owns ``p`` (``plan.owner(p) == d``),
      else -1 (another device writes it);
    * ``attend[d][b]``: user b's last local position on device d (the keys ``<= p`` it holds), -1 when
      it holds none (the device's partial for b is then empty: zeros and LSE -inf).

    With the interleaved layout of ``block_size`` units these are ``kv_cache.ContextParallelAllocator``'s
    local positions (its ``local_position``), so its per-rank page tables address them."""
    append = [[-1] * len(positions) for _ in range(plan.devices)]
    attend = [[-1] * len(positions) for _ in range(plan.devices)]
    for b, p in enumerate(positions):
        if p < 0:
            continue
        if p >= plan.num_units * plan.unit:
            raise ValueError(f"positions[{b}]: expected -1 or a position < {plan.num_units * plan.unit} (the sharded "
                             f"cache's length), got {p}")
        owner = plan.owner(p)
        for d in range(plan.devices):
            last = plan.count_upto(d, p) - 1
            attend[d][b] = last
            if d == owner:
                append[d][b] = last
    return append, attend


def mesh_axes(mesh_shape: tuple[int, ...], context_parallel: int) -> tuple[Optional[int], Optional[int]]:
    """(CP axis, TP axis) of an ``R x C`` mesh for ``context_parallel`` ways: (None, None) when it is 1
    (tensor parallel over the whole mesh) or R C (context parallel over the whole mesh); else it must be
    the size of one axis: CP along that axis (axis 1, the columns, when both are), TP along the other.
    Refused by name otherwise (NotImplementedError)."""
    devices = int(np.prod(mesh_shape))
    if context_parallel in (1, devices):
        return None, None
    for axis in (1, 0):
        if len(mesh_shape) == 2 and mesh_shape[axis] == context_parallel:
            return axis, 1 - axis
    raise NotImplementedError(
        f"context_parallel: expected 1, the mesh's {devices} devices, or the size of one axis of its 2-D mesh "
        f"{'x'.join(map(str, mesh_shape))} (context parallel along that axis, tensor parallel along the other) "
        f"with backend 'device', got {context_parallel}; open the mesh as ttnn.MeshShape(devices // "
        f"context_parallel, context_parallel), or use backend='host'")


def context_ranks(mesh_shape: tuple[int, int], context_axis: Optional[int]) -> tuple[int, ...]:
    """The CP rank of each device of an ``R x C`` mesh, row-major (device ``i * C + j`` at row i,
    column j): its index ``i * C + j`` when the whole mesh is one CP group (``context_axis`` None), else
    its coordinate along ``context_axis`` (0: i, its row; 1: j, its column): the devices along the other
    axis (a tensor-parallel group: other heads) share CP rank and blocks."""
    rows, cols = mesh_shape
    if context_axis is None:
        return tuple(range(rows * cols))
    if context_axis not in (0, 1) or mesh_shape[context_axis] < 2:
        raise ValueError(f"context_ranks: argument 'context_axis': expected None, or 0 or 1 naming an axis "
                         f"of at least 2 devices of the {rows}x{cols} mesh, got {context_axis!r}")
    return tuple(divmod(d, cols)[context_axis] for d in range(rows * cols))
