"""Decode context parallelism: the KV cache split along the sequence over devices, partials merged by LSE.

``context_parallel_decode`` takes a whole cache, gives each device (a worker of
``ttdecode.distributed.WorkerPool``) only its shard of the sequence, runs this package's FlashDecode
on every shard with ``return_lse=True`` and merges the partial results exactly with their
log-sum-exp over ``torch.distributed`` collectives (gloo).

Sharding (``U`` units of the sequence: key tiles of 32 positions for a contiguous cache, page-table
blocks of ``block_size`` positions for a paged one; ``n`` devices, ``1 <= n <= U``):

* ``kv_layout="contiguous"``: device d holds the d-th of n contiguous ranges of units (sizes differ
  by at most one unit, the larger ones first);
* ``kv_layout="interleaved"``: unit u lives on device ``u % n`` (vLLM DCP's round-robin layout,
  here at tile/block granularity so that bfloat8_b/bfloat4_b tiles are moved byte for byte): every
  device holds an equal share of every user's recent keys.

In both layouts a device keeps its units in global order, so the global-to-local key map is
monotone and a user's causal prefix ``0..p`` is a local prefix ``0..c`` (``c = -1``: no key of the
user on that device, which then contributes zeros and LSE -inf). A sliding window ``(p-W, p]`` is a
local suffix of that prefix whose length differs per user and device; the op takes one window for
the batch, so a device runs the op once per distinct local window (the other users at -1), which
keeps every user's output independent of the others (batch invariance). The attention sink joins
exactly once: on the device that owns the user's position ``p`` (it always holds a key of the
window).

Combine (per device: output ``[1, B, NH, Dv]`` and LSE ``[1, B, NH]``):

* ``"all_gather"``: every device gathers all n partials and merges all rows (n x the partial
  traffic per device);
* ``"all_to_all"``: the ``B*NH`` (user, head) rows are cut into n shares; device r receives share r
  of every partial (``all_to_all_single``), merges it, then the merged shares are all-gathered.

The merge, identical on every device (the result returned is device 0's): with ``backend="host"``
the combine program (``ttdecode.ops.combine``, kernels/combine/*.cpp: the op's online-softmax tree merge
in fp32 on the SFPU) on each rank's host runtime, the op's bf16 partials in and the merged output
packed to bf16 as a chip would; with ``backend="reference"`` :func:`combine_partials`
(``ttdecode.reference.merge_partials``, exact in the inputs' dtype, float32 here), which stays the
float64 reference of the tests. :func:`combine_over_group` is the combine for code that already runs
inside the workers (e.g. a decoder holding its cache shards), over any process group (a CP subgroup
of a TP x CP layout), with either merge. On a device mesh (``backend="device"``, built to the launch):
``ttdecode.distributed.mesh_decode`` (the op per device) and ``ttdecode.distributed.device_combine``.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np
import torch

from ttdecode.distributed import RankContext, WorkerPool
from ttdecode.distributed.sharding import (
    COMBINES, KV_LAYOUTS, ShardPlan, _local_positions, _shard_kv, _unit_positions, shard_groups, shard_plan,
)
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.reference import merge_partials
from ttdecode.core.tensor import dequantize
from ttdecode.core.checks import describe
from ttdecode.ops.combine import run_combine
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.validate import validate_decode
from ttdecode.backend import select_backend
from ttdecode.distributed.device_combine import ALL_TO_ALL_ON_DEVICE
from ttdecode.distributed.mesh_decode import NOT_ON_A_MESH, mesh_shape_of
from ttdecode.core.tensor import as_tile_tensor
from ttdecode.distributed.mesh_decode import plan_mesh_decode, run_on_mesh
from ttdecode.core.tensor import _is_ttnn_tensor

__all__ = ["KV_LAYOUTS", "COMBINES", "combine_partials", "combine_over_group", "merge_on_rank", "MERGES", "context_parallel_decode", "shard_plan",
           "ShardPlan", "get_pool", "close_pools"]

_NAME = "context_parallel_decode"


def _fail(arg: str, expected: str, got: object, exc: type = ValueError) -> Exception:
    return exc(f"{_NAME}: argument '{arg}': expected {expected}, got {got}")


# ---- the merge ----------------------------------------------------------------------------------


def combine_partials(outs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge n partial attention results over disjoint key sets, exactly.

    Args:
        outs: ``[n, 1, B, NH, Dv]`` normalized partial outputs (floating point).
        lses: ``[n, 1, B, NH]`` their natural-log LSEs (``-inf``: the partial holds no key).

    Returns:
        ``(out [1, B, NH, Dv], lse [1, B, NH])`` in the promoted dtype of the inputs:
        ``lse = log(sum_i exp(lse_i))`` and ``out = sum_i exp(lse_i - lse) * out_i``, computed with
        the largest LSE subtracted (no overflow for LSEs far apart); partials at ``-inf`` weigh
        nothing (their outputs may hold anything); all ``-inf`` gives zeros and ``-inf``.
    """
    for arg, t, ndim in (("outs", outs, 5), ("lses", lses, 4)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"combine_partials: argument '{arg}': expected a floating-point torch tensor, got {got}")
        if t.dim() != ndim:
            want = "[n, 1, B, NH, Dv]" if ndim == 5 else "[n, 1, B, NH]"
            raise ValueError(f"combine_partials: argument '{arg}': expected shape {want}, got {list(t.shape)}")
    if outs.shape[0] < 1 or outs.shape[1] != 1:
        raise ValueError(f"combine_partials: argument 'outs': expected shape [n>=1, 1, B, NH, Dv], got {list(outs.shape)}")
    if list(lses.shape) != list(outs.shape[:4]):
        raise ValueError(f"combine_partials: argument 'lses': expected shape {list(outs.shape[:4])} "
                         f"(outs without Dv), got {list(lses.shape)}")
    return merge_partials(list(outs.unbind(0)), list(lses.unbind(0)))


# ---- sharding -----------------------------------------------------------------------------------


def _mask_values(mask: Any, backend: str) -> Optional[torch.Tensor]:
    """An ``attn_mask`` as the torch bfloat16 values the kernels stream (a torch float mask is stored in
    bfloat16 as the op stores it; a TileTensor / ttnn mask gives its stored values). The kernel
    backends take bfloat16 masks only (``api.check_kernel_mask``): a block-float mask is refused."""
    if mask is None:
        return None
    meta = describe("attn_mask", mask)
    if backend != "reference" and meta.storage_dtype != "bfloat16":
        raise _fail("attn_mask", "a bfloat16 mask (or a torch float tensor) for the kernel backends",
                    f"{meta.kind} tensor of dtype {meta.dtype}", TypeError)
    return dequantize(mask).to(torch.bfloat16)


# ---- the workers --------------------------------------------------------------------------------


def _run_shard(q: Any, k: Any, v: Any, rows: list, use_tensor: bool, sink: Any, options: DecodeOptions,
               attn_mask: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The op over one device's shard: one call per distinct (local window, sink) among its live users,
    the others at -1; non-causal: one call over all the shard's keys (``attn_mask`` the shard's mask
    columns). `options`: the shard's (its page table, the backend, ``return_lse=True``; no positions,
    window, sink or mask: set here per call). Returns the partial output ``[1, B, NH, Dv]`` and LSE
    ``[1, B, NH]`` in float32."""
    from ttdecode.api import decode

    out = lse = None
    for window, with_sink, pos in shard_groups(rows):
        users = [b for b, p in enumerate(pos) if p >= 0]
        if not options.is_causal:  # every user attends all the shard's keys (rows hold local S - 1 for all)
            given = dict(attn_mask=attn_mask)
        elif use_tensor:
            given = dict(cur_pos_tensor=torch.tensor(pos, dtype=torch.int32))
        else:
            given = dict(cur_pos=pos)
        call = options.replace(sliding_window_size=window, attention_sink=sink if with_sink else None, **given)
        o, l = decode(q, k, v, call)
        o, l = o.to(torch.float32), l.to(torch.float32)
        if out is None:
            out = torch.zeros_like(o)
            lse = torch.full_like(l, float("-inf"))
        out[:, users], lse[:, users] = o[:, users], l[:, users]
    return out, lse


MERGES = ("reference", "kernel")


def merge_on_rank(outs: torch.Tensor, lses: torch.Tensor, merge: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One rank's merge of the partials it holds: ``outs [n, G, H, Dv]``, ``lses [n, G, H]``.

    ``"reference"``: :func:`combine_partials` in the inputs' dtype (float32 here). ``"kernel"``: the
    combine program (``ttdecode.ops.combine``, kernels/combine/*.cpp) on this rank's host runtime, as the
    chip runs it: partials held in bfloat16 tiles when they arrive as torch.bfloat16 (the op's output
    format; float32 tiles otherwise), the merged output packed by the kernel to that same format.
    Returns ``(out [1, G, H, Dv], lse [1, G, H])`` in float32.
    """
    if merge == "reference":
        return combine_partials(outs[:, None].to(torch.float32), lses[:, None].to(torch.float32))
    fmt = DataType.bfloat16 if outs.dtype == torch.bfloat16 else DataType.float32
    out, lse = run_combine(outs, lses.to(torch.float32), in_dtype=fmt, out_dtype=fmt)
    return out.to(torch.float32), lse


def combine_over_group(out: torch.Tensor, lse: torch.Tensor, combine: str = "all_gather",
                       group: Any = None, merge: str = "reference") -> tuple[torch.Tensor, torch.Tensor]:
    """Inside a worker: merge this device's partial with those of the other members of ``group``.

    Args:
        out: this device's partial output ``[1, B, NH, Dv]`` (float32, or torch.bfloat16 as the op
            returns it: the kernel merge then holds the partials in bf16 tiles, losslessly).
        lse: its LSE ``[1, B, NH]`` (float32; ``-inf`` where the device holds no key of the row).
        combine: ``"all_gather"`` or ``"all_to_all"`` (module doc).
        group: a ``torch.distributed`` process group (None: the default group, every worker). Every
            member must call this with partials of the same shape.
        merge: ``"reference"`` (:func:`combine_partials` in float32) or ``"kernel"`` (the combine
            program on this rank's host runtime; see :func:`merge_on_rank`).

    Returns:
        The merged ``(out [1, B, NH, Dv], lse [1, B, NH])`` in float32, the same on every member.
    """
    import torch.distributed as dist

    if combine not in COMBINES:
        raise ValueError(f"combine_over_group: argument 'combine': expected one of {list(COMBINES)}, got {combine!r}")
    if merge not in MERGES:
        raise ValueError(f"combine_over_group: argument 'merge': expected one of {list(MERGES)}, got {merge!r}")
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    _, b, nh, dv = out.shape
    if combine == "all_gather":
        outs = [torch.empty_like(out) for _ in range(n)]
        lses = [torch.empty_like(lse) for _ in range(n)]
        dist.all_gather(outs, out.contiguous(), group=group)
        dist.all_gather(lses, lse.contiguous(), group=group)
        return merge_on_rank(torch.stack(outs)[:, 0], torch.stack(lses)[:, 0], merge)
    # all_to_all: rows (user, head) with the LSE carried as one more column.
    rows = torch.cat([out.to(torch.float32).reshape(b * nh, dv), lse.to(torch.float32).reshape(b * nh, 1)],
                     dim=1).contiguous()
    share = -(-(b * nh) // n)
    sizes = [max(0, min(share, b * nh - r * share)) for r in range(n)]
    mine = torch.empty(n * sizes[rank], dv + 1, dtype=torch.float32)
    dist.all_to_all_single(mine, rows, output_split_sizes=[sizes[rank]] * n, input_split_sizes=sizes, group=group)
    parts = mine.reshape(n, sizes[rank], dv + 1)
    padded = torch.zeros(share, dv + 1, dtype=torch.float32)
    if sizes[rank]:
        # this rank's share as one group of sizes[rank] rows (values exact in the partials' dtype)
        merged_o, merged_l = merge_on_rank(parts[:, None, :, :dv].to(out.dtype), parts[:, None, :, dv], merge)
        padded[: sizes[rank]] = torch.cat([merged_o.reshape(-1, dv), merged_l.reshape(-1, 1)], dim=1)
    gathered = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(gathered, padded, group=group)
    full = torch.cat([g[: sizes[r]] for r, g in enumerate(gathered)], dim=0)
    return full[:, :dv].reshape(1, b, nh, dv), full[:, dv].reshape(1, b, nh)


def _cp_worker(ctx: RankContext, shard: dict, combine: str, empty_shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """One device: its partial over its shard, then the combine with the other devices (gloo)."""
    out, lse = _run_shard(**shard)
    if out is None:  # no live user on this device
        out = torch.zeros(empty_shape, dtype=torch.float32)
        lse = torch.full(empty_shape[:-1], float("-inf"), dtype=torch.float32)
    if shard["options"].backend == "host":
        # The chip's combine: the op's bf16 partials (exact in bf16) merged by the combine kernels.
        return combine_over_group(out.to(torch.bfloat16), lse, combine, merge="kernel")
    return combine_over_group(out, lse, combine)


# ---- pools --------------------------------------------------------------------------------------

_POOLS: dict[int, WorkerPool] = {}


def get_pool(devices: int) -> WorkerPool:
    """The shared pool of ``devices`` workers (label "device"), started on first use and kept alive."""
    pool = _POOLS.get(devices)
    if pool is None or pool.closed:
        pool = WorkerPool(devices, label="device")
        _POOLS[devices] = pool
    return pool


def close_pools() -> None:
    """Close every shared pool (they also close at interpreter exit)."""
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()


# ---- the operation ------------------------------------------------------------------------------


def context_parallel_decode(
    q: Any,
    k: Any,
    v: Any,
    *,
    cur_pos: Any = None,
    cur_pos_tensor: Any = None,
    devices: Union[int, WorkerPool],
    kv_layout: str = "contiguous",
    combine: str = "all_gather",
    page_table: Any = None,
    return_lse: bool = False,
    backend: str = "auto",
    **op_options: Any,
) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Decode attention with the KV cache split along the sequence over ``devices`` workers.

    Args:
        q: ``[1, B, NH, D]``; k, v: the whole cache ``[B, NKV, S, D]`` (``[1, ...]`` with
            ``share_cache``), or with ``page_table`` (``[B, max_blocks]`` int32) the block pool
            ``[num_blocks, NKV, block_size, D]``; torch tensors, ``ttdecode`` TileTensors or ttnn
            host tensors (their format is the cache's: bf16, bfloat8_b, bfloat4_b). ``v=None`` with
            ``head_dim_v`` (MLA: V = the first head_dim_v columns of K, read once with K).
        cur_pos / cur_pos_tensor: exactly one, as in the op (``-1`` skips a user); neither with
            ``is_causal=False``.
        devices: the number of devices (a shared pool of that many workers, kept alive), or a
            ``WorkerPool``; with ``backend="device"`` the ``ttnn.MeshDevice`` (1xN or Nx1). At least 1
            and at most the number of key tiles (blocks when paged).
        kv_layout: ``"contiguous"`` or ``"interleaved"`` (see the module doc).
        combine: ``"all_gather"`` or ``"all_to_all"``.
        return_lse: also return the merged LSE ``[1, B, NH]`` (float32).
        backend: the op's backend on every device: ``"auto"`` (the host runtime for a count or a pool;
            ``"device"`` for a MeshDevice when a Tenstorrent device is present), ``"host"``,
            ``"reference"``, or ``"device"``: the mesh path (``ttdecode.distributed.mesh_decode``,
            built to the launch: one FlashDecode program per device in a ``ttnn.MeshProgramDescriptor``,
            all_gather + combine program; not paged, one token, all_gather only).
        op_options: the op's other options, carried to every shard: ``scale``,
            ``sliding_window_size``, ``attention_sink`` (joins once per user), ``share_cache``,
            ``program_config``, ``compute_kernel_config``, ``head_dim_v``, ``is_causal=False`` with
            an optional ``attn_mask`` ``[B or 1, 1, NH, S]`` (sharded along S with the cache; bfloat16
            values, as the kernels stream it).

    Returns:
        The output ``[1, B, NH, Dv]`` (torch bfloat16, the op's output format; with ``backend="device"``
        the merged ttnn mesh tensor) or ``(output, lse)``.

    Steps: the choices and the backend (_check_choices), the device count (_device_count), the options
    it decides itself (_check_op_options), the op's validation, the sequence's units (_sequence_units);
    then the mesh (_decode_on_mesh) or one shard per worker (_rank_shards), run and merged by _cp_worker.
    """
    backend = _check_choices(kv_layout, combine, backend, devices)
    n, mesh_shape = _device_count(devices, backend, combine, page_table, op_options)
    _check_op_options(op_options)

    paged = page_table is not None
    options = DecodeOptions(paged=paged, page_table=page_table, cur_pos=cur_pos, cur_pos_tensor=cur_pos_tensor,
                            return_lse=True, **op_options)
    info = validate_decode(q, k, v, options)
    unit, num_units = _sequence_units(info, paged, n)
    if backend == "device":
        out, lse = _decode_on_mesh(info, q, k, v, devices, mesh_shape, num_units, unit, kv_layout, combine, options)
        return (out, lse) if return_lse else out
    pool = devices if isinstance(devices, WorkerPool) else get_pool(n)
    per_rank = _rank_shards(info, q, k, v, n, num_units, unit, kv_layout, combine, backend, paged,
                            cur_pos_tensor is not None, options)
    results = pool.run(_cp_worker, per_rank)
    out, lse = results[0]
    out = out.to(torch.bfloat16)
    return (out, lse) if return_lse else out


def _check_choices(kv_layout: Any, combine: Any, backend: Any, devices: Any) -> str:
    """context_parallel_decode's first step: refuse an unknown kv_layout, combine or backend, and decide
    the backend: "auto" becomes select_backend()'s choice, except that a device count or a WorkerPool
    (worker processes, not a mesh) runs "host" where a device is present. Returns the backend."""
    if isinstance(kv_layout, str) is False or kv_layout not in KV_LAYOUTS:
        raise _fail("kv_layout", f"one of {list(KV_LAYOUTS)}", repr(kv_layout))
    if isinstance(combine, str) is False or combine not in COMBINES:
        raise _fail("combine", f"one of {list(COMBINES)}", repr(combine))
    if not isinstance(backend, str) or backend not in ("auto", "host", "reference", "device"):
        raise _fail("backend", "one of ['auto', 'host', 'reference', 'device']", repr(backend))
    if backend == "auto":
        backend = select_backend()
        if backend == "device" and isinstance(devices, (int, WorkerPool)):
            backend = "host"  # a count or a pool names worker processes; a mesh is given as the MeshDevice
    return backend


def _device_count(devices: Any, backend: str, combine: str, page_table: Any,
                  op_options: dict) -> tuple[int, Optional[tuple[int, int]]]:
    """Decides n, the number of devices the sequence is split over, and the mesh's shape (rows, columns)
    with backend "device" (None otherwise): the MeshDevice's, a WorkerPool's world size, or the count
    given. Refuses what the mesh path does not build (all_to_all, a page table, non-causal decode) and a
    `devices` that is neither a count >= 1 nor a pool."""
    mesh_shape = None
    if backend == "device":
        # The mesh path (ttdecode.distributed.mesh_decode): devices is the ttnn.MeshDevice.
        mesh_shape = mesh_shape_of(devices)
        n = mesh_shape[0] * mesh_shape[1]
        if combine == "all_to_all":
            raise NotImplementedError(f"{_NAME}: argument 'combine': {ALL_TO_ALL_ON_DEVICE}")
        if page_table is not None:
            raise NotImplementedError(f"{_NAME}: argument 'page_table': {NOT_ON_A_MESH['page_table']}")
        for opt in ("is_causal", "attn_mask"):
            if opt in op_options and not (opt == "is_causal" and op_options[opt] is True):
                raise NotImplementedError(f"{_NAME}: argument '{opt}': non-causal decode on a mesh (backend "
                                          f"'device') is not built; the host backends run it")
    elif isinstance(devices, WorkerPool):
        n = devices.world_size
    elif isinstance(devices, bool) or not isinstance(devices, int):
        raise _fail("devices", "an int >= 1 or a ttdecode.distributed.WorkerPool (a ttnn.MeshDevice with "
                    "backend 'device')", repr(devices), TypeError)
    elif devices < 1:
        raise _fail("devices", "at least 1 device", devices)
    else:
        n = devices
    return n, mesh_shape


def _check_op_options(op_options: dict) -> None:
    """Refuse the op's options that context parallelism decides itself: memory_config and
    return_lse_partials (it returns host tensors and merges the LSEs), paged (given by page_table)."""
    for bad in ("memory_config", "return_lse_partials"):
        if bad in op_options:
            raise _fail(bad, "not given (context parallelism returns host tensors and merges the LSEs itself)",
                        repr(op_options[bad]))
    if "paged" in op_options:
        raise _fail("paged", "not given (pass page_table for a paged cache)", repr(op_options["paged"]))


def _sequence_units(info: Any, paged: bool, n: int) -> tuple[int, int]:
    """Decides the unit the sequence is sharded by: (positions per unit: 32, a key tile, or block_size
    when paged; units per user: S / 32 or the page table's blocks per user). Refuses more devices than
    units."""
    unit = info.block_size if paged else 32
    num_units = info.page_table_values.shape[1] if paged else info.seq_len // 32
    if n > num_units:
        what = f"{num_units} blocks per user" if paged else f"{num_units} key tiles (S={info.seq_len})"
        raise _fail("devices", f"at most one device per unit of the sequence ({what})", n)
    return unit, num_units


def _decode_on_mesh(info: Any, q: Any, k: Any, v: Any, devices: Any, mesh_shape: tuple[int, int], num_units: int,
                    unit: int, kv_layout: str, combine: str, options: DecodeOptions) -> tuple[Any, Any]:
    """backend "device": plans the shards over the mesh (plan_mesh_decode) and runs one FlashDecode
    program per device and the combine (run_on_mesh). One token per user only (refused otherwise).
    Returns the merged (output, LSE) as ttnn mesh tensors."""
    if info.num_tokens != 1:
        raise NotImplementedError(f"{_NAME}: argument 'q': {info.num_tokens} tokens per user on a mesh "
                                  f"(backend 'device') is not built; expected one token")
    mesh = plan_mesh_decode(info.positions, num_units, unit, mesh_shape, kv_layout,
                            options.sliding_window_size, options.attention_sink is not None)
    tile = lambda x: None if x is None else as_tile_tensor(x)  # noqa: E731 - the shards' byte source
    return run_on_mesh(info, tile(q), tile(k), tile(v), devices, mesh, combine)


def _rank_shards(info: Any, q: Any, k: Any, v: Any, n: int, num_units: int, unit: int, kv_layout: str, combine: str,
                 backend: str, paged: bool, use_tensor: bool,
                 options: DecodeOptions) -> list[tuple[dict, str, tuple[int, ...]]]:
    """The worker path: decides what each of the n devices runs: its units of the sequence (shard_plan),
    its K/V (and page table, renumbered over the blocks it holds; attn_mask columns), each user's local
    position and window on it (_local_positions). The shards carry attention_sink, sliding_window_size,
    is_causal and attn_mask their own way (their `options` hold none of them but is_causal). Returns one
    (shard, combine, shape of an empty partial [1, B, NH, Dv]) per rank, for _cp_worker."""
    host = lambda x: as_tile_tensor(x) if _is_ttnn_tensor(x) else x  # noqa: E731 - picklable host copies
    q_h, k_h, v_h = host(q), host(k), host(v)
    sink = host(options.attention_sink)
    window = options.sliding_window_size
    mask = _mask_values(options.attn_mask, backend)
    # the shards' options: positions, window, sink and mask set per shard and call (_run_shard)
    shard_options = options.replace(cur_pos=None, cur_pos_tensor=None, attention_sink=None, sliding_window_size=None,
                                    attn_mask=None, is_causal=info.is_causal, return_lse=True, backend=backend)
    plan = shard_plan(num_units, unit, n, kv_layout)
    # non-causal: every user attends every key, as a causal user at the last logical position would
    positions = list(info.positions) if info.is_causal else [num_units * unit - 1] * info.batch

    per_rank = []
    for d in range(n):
        rows = _local_positions(plan, d, positions, window, sink is not None)
        local_pt, blocks = None, None
        if paged:
            pt = info.page_table_values[:, list(plan.units[d])]
            blocks = np.unique(pt.numpy())
            local_pt = torch.as_tensor(np.searchsorted(blocks, pt.numpy()), dtype=torch.int32)
        shard = dict(q=q_h, k=_shard_kv(k_h, plan, d, blocks), v=_shard_kv(v_h, plan, d, blocks),
                     rows=rows, use_tensor=use_tensor, sink=sink, options=shard_options.replace(page_table=local_pt),
                     attn_mask=None if mask is None else mask.index_select(3, _unit_positions(plan, d)).contiguous())
        per_rank.append((shard, combine, (1, info.batch, info.num_heads, info.head_dim_v)))
    return per_rank
