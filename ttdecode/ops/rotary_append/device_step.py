"""rotary_kv_append on a Wormhole: plan once per shape, run per step.

A `RotaryStep` is made once per *shape* -- the device, the grid, B, NH, NKV, D, rotary_dim, the
convention, packed or not, the caches' shape, format and pages, paged or not and the page table's
width, and the tensors' layouts and memory configs; never the positions, the page table's contents,
the angles or the rows -- and holds the `Program`, its ttnn descriptor
(`ttdecode.ttnn_backend.PreparedProgram`) and the rotate-half blocks ``trans`` (constant per shape:
uploaded once, when the step is made). Each call checks tensor metadata, patches the buffer
addresses and calls ``ttnn.generic_op``: no plan, no program build, and the same runtime-argument
counts on every call (the buffer addresses are common runtime args, the per-core args each core's
users, fixed by the shape; no per-core arg is an address, so after the first run `PreparedProgram`
launches its lean descriptor, which ttnn does not re-copy per core on a cache hit). `run_rotary` keeps a bounded cache of steps (`STEP_CACHE_SIZE`, least recently used out).

Inputs of a call (device inputs are used where they lie; host inputs are uploaded, one move each,
except positions):

==============  ======================================================  ===========================
argument        device input (no move)                                  host input (uploaded)
==============  ======================================================  ===========================
q/k_new/v_new,  ttnn bfloat16 tiles on the device (required)            --
qkv, caches
cur_pos         ttnn int32 ROW_MAJOR ``[B]``                            list / int torch ``[B]``:
                                                                        the writer's runtime args
                                                                        (no move)
page_table      ttnn int32 ROW_MAJOR ``[B, max_blocks]``                int torch: one ``from_torch``
cos, sin        ttnn float32 TILE ``[B, ceil(rotary_dim/32)*32]``: the  torch ``[B, rotary_dim]``
                per-column angles (``program.column_angles`` of the     (HF layout): converted by
                HF cos/sin for the call's convention; cos 1 / sin 0     column_angles, one
                past rotary_dim) -- what ``ttnn.embedding`` of          ``from_torch`` each
                ``ttdecode.models.llama_device.rope_tables`` gives
==============  ======================================================  ===========================

Host positions are runtime args: a list (or torch ints) of B positions becomes the writer's common
runtime args (``program_factory.positions_args``, patched per call; a step of its own, planned with
``positions_in_args``), so no positions tensor is uploaded. `angles_to_device` makes the device form
of cos/sin from Hugging Face's (once, e.g. a table per position as the device decoder keeps). Values
that live on the device are not checked on the host (see ``validate``): the writer skips a position
at or beyond the cache's capacity and a block id outside the pool.

The cached call (`run_cached`): after a validated call with ``backend="device"`` the step is kept
under its fast key (`fast_key`: the call's options and which arguments are given); a later call of
that key whose device tensors have the kept TensorSpecs, on the step's device, runs the prepared
program directly (``RotaryStep.run_fast``): no validation, no upload, the positions (if host values)
patched into the writer's args.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

import torch

from ttdecode.core.checks import fail
from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.ttnn_backend.step_cache import StepCache
from ttdecode.ttnn_env import require_ttnn
from ttdecode.ops.rotary_append.program_factory import (
    WRITER_COMMON_ARGS, build_program, column_angles, positions_args, rotate_half_blocks,
)
from ttdecode.ops.cache_write import check_on_device, tensor_key, upload_ints
from ttdecode.ops.rotary_append.validate import RotaryInputs, TILE

__all__ = ["RotaryStep", "run_rotary", "run_cached", "fast_key", "get_step", "angles_to_device", "clear_steps",
           "cached_steps", "STEP_CACHE_SIZE", "MISS", "FAST_TENSORS"]

#: Shapes whose steps `run_rotary` keeps (a model has one or two: one per batch).
STEP_CACHE_SIZE = 16

#: Steps kept per fast key (e.g. the batch sizes a server alternates between).
FAST_STEPS_PER_KEY = 4
#: Returned by `run_cached` / `RotaryStep.run_fast` when the call must take the validating path.
MISS = object()

_steps = StepCache(STEP_CACHE_SIZE)  # step_key -> RotaryStep
_fast: "OrderedDict[tuple, list[RotaryStep]]" = OrderedDict()  # fast key -> steps, newest first


def step_key(inp: RotaryInputs, grid: tuple[int, int], device: Any) -> tuple:
    """The cache key of a call: what the program depends on (shapes, formats, options, the new rows'
    and caches' layouts and memory configs, positions given as values or as a tensor); never
    positions, page-table contents or values."""
    return (id(device), grid, inp.batch, inp.num_q_heads, inp.num_kv_heads, inp.head_dim, inp.rotary_dim,
            inp.interleaved, inp.packed, inp.cache_dtype, tuple(inp.cache_shape), inp.paged, inp.max_blocks,
            inp.kv_pages, inp.positions is not None,
            tuple((name, tensor_key(t)) for name, t in sorted(inp.x.items())),
            tensor_key(inp.k_cache), tensor_key(inp.v_cache))


#: The tensor arguments of the public function a cached call may take as device tensors, by program name.
FAST_TENSORS = ("qkv", "q", "k_new", "v_new", "cos", "sin", "cur_pos", "page_table", "k_cache", "v_cache")


class RotaryStep:
    """rotary_kv_append planned once for one shape on one device, run per step (module doc).

    `run` takes validated inputs; `run_fast` a call whose device tensors have the TensorSpecs of the
    validated call `remember_specs` kept (nothing else looked at: the cached call's path)."""

    def __init__(self, inp: RotaryInputs, grid: tuple[int, int], device: Any) -> None:
        ttnn = require_ttnn()
        self.device = device
        self.batch = inp.batch
        #: host positions are the writer's common runtime args (patched per call), not an uploaded tensor
        self.positions_in_args = inp.positions is not None
        self.capacity = inp.max_blocks * inp.block_size if inp.paged else inp.cache_shape[2]
        self.program = build_program(inp, None, grid, positions_in_args=self.positions_in_args)
        self.prepared = PreparedProgram(self.program, device)
        blocks = rotate_half_blocks(inp.head_dim, inp.rotary_dim, inp.interleaved)
        # the rotate-half blocks: constant for the shape, uploaded once per step (one move)
        self.trans = ttnn.from_torch(torch.cat([blk for _, _, blk in blocks]).to(torch.float32),
                                     dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
        self.has_q = inp.num_q_heads > 0
        self.calls = 0
        self._fast_names: list[str] = []  # the program's inputs in PreparedProgram order ("trans" is ours)
        self._fast_specs: Optional[list[Any]] = None

    def io_tensors(self, inp: RotaryInputs) -> dict[str, Any]:
        """The program's inputs: the caller's device tensors as they are, host inputs uploaded (host
        positions are runtime args, `positions_common`)."""
        ttnn = require_ttnn()
        dev = self.device
        io = dict(inp.x)
        io["k_cache"], io["v_cache"] = inp.k_cache, inp.v_cache
        io["trans"] = self.trans
        width = inp.rot_tiles * TILE
        for name, fill, src in (("cos", 1.0, inp.cos), ("sin", 0.0, inp.sin)):
            if name in inp.device_args:
                io[name] = src
            else:
                io[name] = ttnn.from_torch(column_angles(src, inp.rotary_dim, inp.interleaved, width, fill),
                                           dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=dev)
        if not self.positions_in_args:
            io["cur_pos"] = inp.device_args["cur_pos"]
        if inp.paged:
            if "page_table" in inp.device_args:
                io["page_table"] = inp.device_args["page_table"]
            else:
                io["page_table"] = upload_ints(ttnn, inp.page_table, dev)
        check_on_device(io, dev, "k_cache's")
        return io

    def positions_common(self, positions: Any) -> Optional[dict[str, dict[int, int]]]:
        """The writer's common-arg patch for B host positions (None: positions in a tensor)."""
        if not self.positions_in_args:
            return None
        return {"rotary_writer": dict(enumerate(positions_args(positions), start=WRITER_COMMON_ARGS))}

    def run(self, inp: RotaryInputs) -> Optional[Any]:
        """One step for validated `inp` (the step's key): the caches updated in place; returns q_rot
        (a ttnn tensor) or None without q."""
        outs = self.prepared.run(self.io_tensors(inp), common_args=self.positions_common(inp.positions))
        self.calls += 1
        return outs[0] if self.has_q else None

    def remember_specs(self, tensors: dict[str, Any]) -> bool:
        """Keep the TensorSpecs of a validated call's device tensors (`tensors`: the public function's
        tensor arguments by program name, None when not given) for `run_fast`. False (nothing kept) when
        an input of the program is not such a device tensor (a host input is uploaded per call)."""
        names = [s.name for s in self.prepared.inputs]
        specs = []
        for name in names:
            t = self.trans if name == "trans" else tensors.get(name)
            try:
                specs.append(t.spec)
            except AttributeError:  # None, a torch tensor or list, a tensor without a TensorSpec
                return False
        self._fast_names, self._fast_specs = names, specs
        return True

    def run_fast(self, tensors: dict[str, Any], positions: Any) -> Any:
        """The cached call's path: each input's TensorSpec (shape, dtype, layout, memory config) equal
        to that of the validated call `remember_specs` kept, each on the step's device and allocated;
        host `positions` (with positions in args) B ints in [-1, capacity). Values on the device are not
        read (the kernels write nothing for a position or block beyond the cache). Returns `MISS`
        (having run nothing) when anything differs: the caller then validates in full; else q_rot (or
        None without q)."""
        specs = self._fast_specs
        if specs is None:
            return MISS
        ttnn = require_ttnn()
        ordered = [self.trans if n == "trans" else tensors.get(n) for n in self._fast_names]
        dev = self.device
        for t, spec in zip(ordered, specs):
            if (t is None or not ttnn.is_tensor_storage_on_device(t) or not t.is_allocated()
                    or not (t.spec == spec) or t.device() is not dev):
                return MISS
        common = None
        if self.positions_in_args:
            if (not isinstance(positions, (list, tuple)) or len(positions) != self.batch
                    or not all(type(p) is int and -1 <= p < self.capacity for p in positions)):
                return MISS
            common = self.positions_common(positions)
        elif positions is not None:
            return MISS
        outs = self.prepared.run_ordered(ordered, common)
        self.calls += 1
        return outs[0] if self.has_q else None


def get_step(inp: RotaryInputs, grid: tuple[int, int]) -> RotaryStep:
    """The cached `RotaryStep` of this call's shape (made and cached on a miss)."""
    device = inp.k_cache.device()
    key = step_key(inp, grid, device)
    return _steps.get_or_make(key, lambda: RotaryStep(inp, grid, device))


def run_rotary(inp: RotaryInputs, grid: tuple[int, int], fast_key: Optional[tuple] = None,
               tensors: Optional[dict[str, Any]] = None) -> Optional[Any]:
    """rotary_kv_append on the device holding `inp`'s tensors, through the cached step of its shape.
    Returns q_rot (ttnn) or None; the caches are updated in place. With `fast_key` (`fast_key` of the
    call) and the call's tensor arguments by name, the step is kept for `run_cached` of later calls."""
    step = get_step(inp, grid)
    out = step.run(inp)
    if fast_key is not None and tensors is not None and step.remember_specs(tensors):
        steps = [step] + [s for s in _fast.get(fast_key, []) if s is not step]
        _fast[fast_key] = steps[:FAST_STEPS_PER_KEY]
        _fast.move_to_end(fast_key)
        while len(_fast) > STEP_CACHE_SIZE:
            _fast.popitem(last=False)
    return out


def fast_key(options: Any, tensors: dict[str, Any]) -> Optional[tuple]:
    """The key of a call that may skip validation, or None: `options` the call's settings in a hashable
    form (the repr of num_q_heads, rotary_interleaved, rotary_dim, grid, kv_pages) and the type of each
    tensor argument (`tensors` by program name: None, a ttnn tensor, a list of positions, a torch
    tensor ...), so a call meets only steps remembered from calls that gave the same kinds."""
    try:
        key = (options, tuple(type(tensors[n]) for n in FAST_TENSORS))
        hash(key)
    except TypeError:
        return None
    return key


def run_cached(key: Optional[tuple], tensors: dict[str, Any]) -> Any:
    """Run a call without validation through a kept step of its fast key (``RotaryStep.run_fast``),
    or return `MISS` (having run nothing)."""
    steps = _fast.get(key) if key is not None else None
    if not steps:
        return MISS
    cur = tensors["cur_pos"]
    positions = cur if isinstance(cur, (list, tuple)) else None
    for step in steps:
        out = step.run_fast(tensors, positions)
        if out is not MISS:
            return out
    return MISS


def angles_to_device(cos: torch.Tensor, sin: torch.Tensor, *, device: Any, rotary_interleaved: bool = False,
                     rotary_dim: Optional[int] = None) -> tuple[Any, Any]:
    """Hugging Face's cos / sin ``[N, rotary_dim]`` (``cat(c, c)``) as the device form the kernels
    read: ttnn float32 TILE ``[N, ceil(rotary_dim / 32) * 32]`` of per-column angles for the
    convention (`column_angles`; cos 1 / sin 0 past rotary_dim). Two moves (one each): made once, then
    passed to every call (N = B, or a per-position table looked up on the device by ``ttnn.embedding``
    with ``layout=TILE_LAYOUT, dtype=float32`` as ``ttdecode.models.llama_device`` does)."""
    ttnn = require_ttnn()
    if isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor) and tuple(cos.shape) != tuple(sin.shape):
        raise fail("sin", f"cos's shape {list(cos.shape)}", list(sin.shape))
    out = []
    for name, t, fill in (("cos", cos, 1.0), ("sin", sin, 0.0)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() != 2:
            got = f"{t.dtype} shape {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise fail(name, "a float torch tensor [N, rotary_dim] in Hugging Face's layout", got, TypeError)
        rd = t.shape[1] if rotary_dim is None else rotary_dim
        if t.shape[1] != rd or rd % 2 or rd < 2:
            raise fail(name, f"an even rotary_dim={rd} >= 2 columns", list(t.shape))
        if not torch.equal(t[:, : rd // 2], t[:, rd // 2:]):
            raise fail(name, "Hugging Face's layout cat(c, c) (the two halves equal)", "halves that differ")
        width = -(-rd // TILE) * TILE
        out.append(ttnn.from_torch(column_angles(t.detach().cpu(), rd, rotary_interleaved, width, fill),
                                   dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, device=device))
    return out[0], out[1]


def clear_steps() -> None:
    """Forget every cached step (their ttnn programs stay in the device's program cache)."""
    _steps.clear()
    _fast.clear()


def cached_steps() -> int:
    """How many rotary steps are cached."""
    return len(_steps)
