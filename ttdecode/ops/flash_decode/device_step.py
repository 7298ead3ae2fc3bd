"""FlashDecode on a Wormhole: plan once per decode shape, run per step.

A `DecodeStep` is made once per decode *shape* -- the tensors' shapes, dtypes, layouts and memory
configs, the program and compute configs and the options, never the positions, the page-table
contents or the batch's values -- and holds the plan, the `Program` and the ttnn descriptor
(`ttdecode.ttnn_backend.PreparedProgram`). Each call checks tensor metadata only, patches the buffer
addresses (and positions given as a list, as the reader's common runtime args) and calls
``ttnn.generic_op``: no plan, no program build, no data between host and device when the inputs are
device tensors. `run_decode` keeps a bounded cache of steps (`STEP_CACHE_SIZE`, least recently used
out) keyed by `step_key`.

A cached call of device tensors skips even the validation (`try_fast`, called first by the API with
``backend="device"``): keyed by its options (`fast_key`), it compares each tensor's TensorSpec and
device with those of a validated call of the step (`DecodeStep.run_fast`) and calls
`PreparedProgram.run_ordered`; anything different falls back to the validating path. On a mock N150
this costs ~2.5x tt-metal's own op's host time per call (measured: perf/bench_device_overhead.py; the
per-core runtime args go to ttnn once, `ttdecode.ttnn_backend.PreparedProgram`).

Placements the kernels do not read (issue 28 item 4): the kernels read interleaved DRAM and the
writer writes it. A Q, cur_pos_tensor, page table, attention mask or sink in L1 (interleaved, or height-sharded as
``ttnn.experimental.nlp_create_qkv_heads_decode`` makes Q: [32 padded heads, D] per user on B cores)
is copied to interleaved DRAM by ``ttnn.to_memory_config`` before the program, and an output
``memory_config`` other than interleaved DRAM is met by ``ttnn.to_memory_config`` of the DRAM output
after it (the DRAM one then freed). So a step issues, in order: one ``to_memory_config`` per such
input, ``generic_op``, one ``to_memory_config`` for such an output, then ``deallocate`` of each
temporary. All are device ops (no host<->device data, traceable); the program, its runtime-arg count
and its cache entry are the same whatever the placements. Host cost measured on the mock N150
(B 4, S 2048, Llama-8B heads; median of 40 cached calls): 0.022 ms all-DRAM; 0.027 ms with ttnn
config objects (their fields' reprs compared per call); 0.054 ms with height-sharded Q, L1
cur_pos_tensor and a height-sharded output (three moves, three frees); tt-metal's own op 0.009 ms.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Callable, Optional

from ttdecode.ttnn_backend.descriptor import DeviceError
from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.ttnn_backend.step_cache import StepCache
from ttdecode.ttnn_env import has_tenstorrent_device, require_ttnn
from ttdecode.core.program_description import Program

#: Decode shapes whose steps `run_decode` keeps (a model has a handful: one per layer kind and batch).
STEP_CACHE_SIZE = 32

_steps = StepCache(STEP_CACHE_SIZE)  # step_key -> DecodeStep


# ---- the decode op on a device ------------------------------------------------------------------


def to_torch_sink(inputs: Any) -> Any:
    """The attention sink as a float32 torch [NH, 32] (column 0 holds each head's logit)."""
    from ttdecode.ops.flash_decode.validate import sink_values

    # the host kernels' own reading of the sink (a torch [NH] through bf16; dequantize() refuses rank 1)
    sink = sink_values(inputs.attention_sink)
    if sink.dim() == 1:
        sink = sink[:, None].expand(-1, 32).contiguous()
    return sink


def decode_program(inputs: Any, plan: Any, compute: Any, positions: Optional[list[int]] = None) -> Program:
    """The FlashDecode `Program` (no input bytes) the device runs for validated `inputs` and their `plan`
    (``ttdecode.ops.flash_decode.op.make_decode_plan``), with the call's scale and exp mode; `compute` from
    ``ttdecode.ops.flash_decode.op.compute_settings``; `positions` given: positions_in_args (the reader's
    common runtime args). Used by `DecodeStep` and by the mesh path of context parallelism."""
    from ttdecode.ops.flash_decode.program_factory import build_program_for_device

    return build_program_for_device(
        plan, scale=inputs.scale, compute=compute, positions=positions,
        exp_approx=inputs.program_config.resolved_exp_approx_mode(inputs.compute_kernel_config))


# ---- inputs the kernels take in another form: the device's grid, block-float Q / mask (issue 28) -------


def with_device_grid(inputs: Any, device: Any) -> Any:
    """`inputs` with the program config's grid in force on `device`: its
    ``compute_with_storage_grid_size()`` when the config names none (tt-metal's rule without a program
    config), else the grid given, refused by name when beyond the device's grid."""
    g = device.compute_with_storage_grid_size()
    grid = (int(g.x), int(g.y))
    pc = inputs.program_config.resolve_grid(grid, grid, f"the device's compute grid {grid[0]}x{grid[1]} "
                                            "(device.compute_with_storage_grid_size())")
    return inputs if pc is inputs.program_config else dataclasses.replace(inputs, program_config=pc)


def as_bfloat16_on_device(ttnn: Any, tensor: Any) -> tuple[Any, bool]:
    """A device tensor in the bfloat16 the kernels read: itself, or a bfloat8_b / bfloat4_b one through
    ``ttnn.typecast`` (a device op; exact: every block-float value is a bfloat16 value, the host runtime
    converts the same way, validate.as_bfloat16_tiles). Returns (tensor, True when it is a temporary the
    caller deallocates after the step)."""
    if tensor.dtype == ttnn.bfloat16:
        return tensor, False
    return ttnn.typecast(tensor, ttnn.bfloat16), True


# ---- placements the kernels do not read: moved on the device around the program (issue 28) -------


def is_dram_interleaved(ttnn: Any, mem: Any) -> bool:
    """True for interleaved DRAM, the placement the kernels read and the writer writes."""
    return mem.buffer_type == ttnn.BufferType.DRAM and mem.memory_layout == ttnn.TensorMemoryLayout.INTERLEAVED


def in_dram(ttnn: Any, tensor: Any, temporaries: list[Any]) -> Any:
    """`tensor` in interleaved DRAM: itself, or (from L1, interleaved or sharded) a copy made by
    ``ttnn.to_memory_config`` (a device op, the same data; appended to `temporaries` for the caller to
    deallocate after the step)."""
    if is_dram_interleaved(ttnn, tensor.memory_config()):
        return tensor
    moved = ttnn.to_memory_config(tensor, ttnn.DRAM_MEMORY_CONFIG)
    temporaries.append(moved)
    return moved


def check_output_placement(ttnn: Any, memory_config: Any, out_shape: tuple[int, ...], device: Any) -> None:
    """A sharded `memory_config` must hold the output ``[T, B, NH, Dv]`` (tiles: each user's NH rows
    padded to 32): height-sharded in L1 with a shard spec whose width is Dv, whose height is a
    multiple of 32, on cores of the device's grid enough for every row. Refused by name otherwise
    (ttnn's own failure would come from inside ``to_memory_config``)."""
    if memory_config is None or memory_config.memory_layout == ttnn.TensorMemoryLayout.INTERLEAVED:
        return
    spec = memory_config.shard_spec
    t, b, nh, dv = out_shape
    rows = t * b * (-(-nh // 32) * 32)
    h, w = (int(x) for x in spec.shape)
    cores = int(spec.grid.num_cores())
    g = device.compute_with_storage_grid_size()
    bbox = spec.grid.bounding_box()
    if w != dv or h % 32 or h <= 0 or -(-rows // h) > cores or bbox.end.x >= g.x or bbox.end.y >= g.y:
        raise ValueError(
            "ttdecode: argument 'memory_config': expected a height-sharded L1 config that holds the output "
            f"[T={t}, B={b}, NH={nh}, Dv={dv}] ({rows} tile rows: NH padded to 32 per user): shard width "
            f"Dv={dv}, shard height a multiple of 32, at least ceil({rows} / height) cores inside the "
            f"device's {g.x}x{g.y} grid; got shard shape [{h}, {w}] on {cores} cores ending at "
            f"({bbox.end.x}, {bbox.end.y})")


def in_placement(ttnn: Any, out: Any, memory_config: Any) -> Any:
    """The program's DRAM-interleaved output in the caller's `memory_config` (None or DRAM
    interleaved: itself; else ``ttnn.to_memory_config`` and the DRAM one deallocated)."""
    if memory_config is None or is_dram_interleaved(ttnn, memory_config):
        return out
    placed = ttnn.to_memory_config(out, memory_config)
    ttnn.deallocate(out)
    return placed


def _meta_key(meta: Any) -> Any:
    """What a step depends on of one tensor argument: its kind, shape, format and, on a device, its
    layout and memory config (never its values)."""
    if meta is None:
        return None
    if meta.kind != "ttnn":
        return (meta.kind, meta.shape, meta.dtype)
    obj = meta.obj
    mem = obj.memory_config() if _on_device(obj) else None
    return (meta.kind, meta.shape, meta.dtype, str(obj.layout), _on_device(obj), repr(mem))


def _on_device(obj: Any) -> bool:
    return bool(require_ttnn().is_tensor_storage_on_device(obj))


def step_key(inputs: Any, device: Any) -> tuple:
    """The cache key of a call: the decode shape and options, never positions, page-table contents or
    the batch's values. (A list of positions and a cur_pos_tensor are different programs.)"""
    return (
        id(device), _meta_key(inputs.q), _meta_key(inputs.k), _meta_key(inputs.v), inputs.paged,
        _meta_key(inputs.page_table), inputs.is_causal, inputs.cur_pos is not None,
        _meta_key(inputs.cur_pos_tensor), _meta_key(inputs.attn_mask), _meta_key(inputs.attention_sink),
        inputs.scale, inputs.sliding_window_size, inputs.share_cache, inputs.return_lse, inputs.head_dim_v,
        repr(inputs.program_config), repr(inputs.compute_kernel_config), repr(inputs.memory_config),
    )


class DecodeStep:
    """FlashDecode planned once for one decode shape on one device, run per step (module doc).

    `make_plan(inputs)` plans validated inputs (``op.make_decode_plan``); the step plans them without
    positions (the program is valid for any: the kernels derive every chunk range from the positions
    at run time, and the plan's split is made for the cache's length). `compute` is
    ``op.compute_settings(inputs)``.
    """

    def __init__(self, inputs: Any, compute: Any, make_plan: Callable[[Any], Any], device: Any) -> None:
        self.device = device
        inputs = with_device_grid(inputs, device)
        self.positions_in_args = inputs.cur_pos_tensor is None  # a list, or non-causal (S - 1 for all)
        self.plan = make_plan(dataclasses.replace(inputs, cur_pos=None, positions=None))
        self.batch = inputs.batch
        self.seq_len = inputs.seq_len
        placeholder = [0] * inputs.batch if self.positions_in_args else None
        self.program = decode_program(inputs, self.plan, compute, positions=placeholder)
        self.prepared = PreparedProgram(self.program, device)
        ttnn = require_ttnn()
        self.memory_config = inputs.memory_config
        q_shape = tuple(inputs.q.shape)
        check_output_placement(ttnn, self.memory_config, q_shape[:3] + (inputs.head_dim_v,), device)
        from ttdecode.ops.flash_decode.program_factory import READER_COMMON_ARGS

        self._positions_base = READER_COMMON_ARGS
        self.calls = 0
        self._fast_names: list[str] = []
        self._fast_specs: Optional[list[Any]] = None
        self._fast_moved: list[bool] = []  # per fast input: not in interleaved DRAM (moved there per step)
        self._ran_specs: dict[str, Any] = {}  # the TensorSpecs of the inputs `run` last ran with, by name
        self._all_last = self.positions_args([self.seq_len - 1] * self.batch) if self.positions_in_args else None

    def positions_args(self, positions: Any) -> dict[str, dict[int, int]]:
        """The reader's common-arg patch for B positions (two's complement words)."""
        base = self._positions_base
        return {"reader": {base + b: int(p) & 0xFFFFFFFF for b, p in enumerate(positions)}}

    def run(self, inputs: Any, *, output: Any = None) -> Any:
        """One decode step for `inputs` (validated; same key as the step's). No data moves when the
        inputs are device tensors; a torch page table, sink or mask (host inputs) is uploaded."""
        ttnn = require_ttnn()
        plan = self.plan
        for name, meta in (("q", inputs.q), ("k", inputs.k), ("v", inputs.v)):
            if meta is not None and (meta.kind != "ttnn" or not _on_device(meta.obj)):
                raise DeviceError(f"{name}: backend 'device' expects a ttnn tensor on the device, got a "
                                  f"{meta.kind} tensor")
        temporaries: list[Any] = []
        q, made = as_bfloat16_on_device(ttnn, in_dram(ttnn, inputs.q.obj, temporaries))
        if made:
            temporaries.append(q)
        io = {"q": q, "k": inputs.k.obj}
        if inputs.v is not None:
            io["v"] = inputs.v.obj
        common = None
        if self.positions_in_args:
            positions = inputs.positions if inputs.positions is not None else [self.seq_len - 1] * self.batch
            common = self.positions_args(positions)
        else:
            io["cur_pos"] = in_dram(ttnn, _device_tensor(ttnn, inputs.cur_pos_tensor, ttnn.int32,
                                                         ttnn.ROW_MAJOR_LAYOUT, self.device), temporaries)
        if inputs.paged:
            io["page_table"] = in_dram(ttnn, _device_tensor(ttnn, inputs.page_table, ttnn.int32,
                                                            ttnn.ROW_MAJOR_LAYOUT, self.device), temporaries)
        if plan.attention_sink:
            sink = inputs.attention_sink
            if sink.kind == "ttnn" and _on_device(sink.obj) and tuple(sink.shape) == (plan.num_q_heads, 32):
                io["sink"] = in_dram(ttnn, sink.obj, temporaries)  # checked by the prepared program (bf16, tile)
            else:
                io["sink"] = ttnn.from_torch(to_torch_sink(inputs), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                             device=self.device)
        if plan.has_attn_mask:
            mask = inputs.attn_mask
            if mask.kind == "ttnn" and _on_device(mask.obj):
                io["attn_mask"], made = as_bfloat16_on_device(ttnn, in_dram(ttnn, mask.obj, temporaries))
                if made:
                    temporaries.append(io["attn_mask"])
            else:
                from ttdecode.ops.flash_decode.program_factory import mask_tiles
                from ttdecode.ops.flash_decode.validate import as_bfloat16_tiles
                from ttdecode.core.tensor import to_torch

                values = to_torch(mask_tiles(plan, as_bfloat16_tiles(mask)))
                io["attn_mask"] = ttnn.from_torch(values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                                  device=self.device)
        outs = self.prepared.run(io, common_args=common, outputs=None if output is None else {"out": output})
        for t in temporaries:
            ttnn.deallocate(t)
        self.calls += 1
        given = {"q": inputs.q, "k": inputs.k, "v": inputs.v, "cur_pos": inputs.cur_pos_tensor,
                 "page_table": inputs.page_table}
        self._ran_specs = {n: getattr(m.obj, "spec", None) for n, m in given.items()
                           if m is not None and m.kind == "ttnn" and _on_device(m.obj)}
        out = outs[0] if output is not None else in_placement(ttnn, outs[0], self.memory_config)
        if not inputs.return_lse:
            return out
        from ttdecode.ops.flash_decode.program_factory import decode_lse_rows

        return out, decode_lse_rows(plan, ttnn.to_torch(outs[1]))


    def remember_specs(self, q: Any, k: Any, v: Any, cur_pos_tensor: Any, page_table: Any) -> bool:
        """Keep the TensorSpecs of a validated call's inputs for `run_fast` (False: they are not those
        `run` last ran with -- in their placement, before any move to DRAM -- or the step needs an input
        the fast path does not take)."""
        vals = {"q": q, "k": k, "v": v, "cur_pos": cur_pos_tensor, "page_table": page_table}
        names = [s.name for s in self.prepared.inputs]
        if any(vals.get(n) is None for n in names):
            return False
        try:
            specs = [vals[n].spec for n in names]
        except Exception:  # noqa: BLE001 - not fast-path material (a tensor without a TensorSpec)
            return False
        if any(self._ran_specs.get(n) is None or not (self._ran_specs[n] == sp) for n, sp in zip(names, specs)):
            return False
        if q.dtype != require_ttnn().bfloat16:  # a block-float Q is typecast per step: validating path
            return False
        ttnn = require_ttnn()
        self._fast_names = names
        self._fast_specs = specs
        self._fast_moved = [not is_dram_interleaved(ttnn, sp.memory_config) for sp in specs]
        return True

    def run_fast(self, q: Any, k: Any, v: Any, cur_pos_tensor: Any, page_table: Any) -> Any:
        """The cached call's path (`try_fast`): each input's TensorSpec (shape, dtype, layout, memory
        config) equal to that of the validated call `remember_specs` kept, on the step's device and
        allocated; nothing else is looked at. Returns `MISS` (having run nothing) when anything differs:
        the caller then validates in full."""
        specs = self._fast_specs
        if specs is None:
            return MISS
        vals = {"q": q, "k": k, "v": v, "cur_pos": cur_pos_tensor, "page_table": page_table}
        ordered = [vals[n] for n in self._fast_names]
        ttnn = require_ttnn()
        for t, spec in zip(ordered, specs):
            if (t is None or not ttnn.is_tensor_storage_on_device(t) or not t.is_allocated()
                    or not (t.spec == spec)):
                return MISS
        if q.device() is not self.device:
            return MISS
        common = None
        if self.positions_in_args:  # non-causal: S - 1 for every user
            common = self._all_last
        temporaries: list[Any] = []
        if any(self._fast_moved):
            ordered = [in_dram(ttnn, t, temporaries) if m else t for t, m in zip(ordered, self._fast_moved)]
        outs = self.prepared.run_ordered(ordered, common)
        for t in temporaries:
            ttnn.deallocate(t)
        self.calls += 1
        return in_placement(ttnn, outs[0], self.memory_config)


def _device_tensor(ttnn: Any, meta: Any, dtype: Any, layout: Any, device: Any) -> Any:
    """A ttnn device tensor as given, or a torch / host one uploaded (a host input: one move)."""
    if meta.kind == "ttnn" and _on_device(meta.obj):
        return meta.obj
    import torch

    values = meta.obj if meta.kind == "torch" else ttnn.to_torch(meta.obj)
    return ttnn.from_torch(values.to(torch.int32), dtype=dtype, layout=layout, device=device)


def get_step(inputs: Any, compute: Any, make_plan: Callable[[Any], Any]) -> DecodeStep:
    """The cached `DecodeStep` of these inputs' decode shape (made and cached on a miss)."""
    q = inputs.q
    if q.kind != "ttnn" or not _on_device(q.obj):
        raise DeviceError(f"q: backend 'device' expects a ttnn tensor on the device, got a {q.kind} tensor")
    device = q.obj.device()
    key = step_key(inputs, device)
    return _steps.get_or_make(key, lambda: DecodeStep(inputs, compute, make_plan, device))


def clear_steps() -> None:
    """Forget every cached step (their ttnn programs stay in the device's program cache)."""
    _steps.clear()
    _fast.clear()
    _converted.clear()


# ---- the cached call's fast path ----------------------------------------------------------------

#: Returned by `try_fast` / `DecodeStep.run_fast` when the call must take the validating path.
MISS = object()

#: fast key (the options) -> the steps of those options, most recent first (bounded like `_steps`).
_fast: "OrderedDict[Any, list[DecodeStep]]" = OrderedDict()
#: Steps (decode shapes) kept per fast key: e.g. the batch sizes a server alternates between.
FAST_STEPS_PER_KEY = 4

#: The options a fast key holds by value; anything else unhashable (a list of positions, a mask or
#: sink) leaves the call on the validating path. ttnn config objects are converted (`_own_config`).
_FAST_OPTIONS = ("is_causal", "scale", "sliding_window_size", "share_cache", "head_dim_v")

#: The fields of a ttnn config object its conversion reads (ttdecode.config ``from_ttnn``).
_TTNN_CONFIG_FIELDS = {
    "SDPAProgramConfig": ("compute_with_storage_grid_size", "sub_core_grids", "q_chunk_size", "k_chunk_size",
                          "exp_approx_mode", "max_cores_per_head_batch", "max_k_splits",
                          "matmul_math_fidelity", "segmented_accumulation"),
    "WormholeComputeKernelConfig": ("math_fidelity", "math_approx_mode", "fp32_dest_acc_en", "packer_l1_acc",
                                    "dst_full_sync_en"),
}
#: id(ttnn config object) -> (the object, a snapshot of its fields, ttdecode's frozen config of it).
_converted: "OrderedDict[int, tuple[Any, tuple, Any]]" = OrderedDict()


def _own_config(value: Any, own_type: type) -> Any:
    """`value` as a hashable ttdecode config for the fast key: None and ttdecode's own as they are; a
    ttnn config converted once per object (``own_type.coerce``) and reused while a snapshot of the
    fields the conversion reads (their reprs) is unchanged -- a mutated object is converted anew.
    Returns `MISS` for anything else or a config the conversion refuses (the validating path names
    the reason)."""
    if value is None or isinstance(value, own_type):
        return value
    fields = _TTNN_CONFIG_FIELDS.get(type(value).__name__)
    if fields is None:
        return MISS
    snapshot = tuple(repr(getattr(value, f, None)) for f in fields)
    hit = _converted.get(id(value))
    if hit is not None and hit[0] is value and hit[1] == snapshot:
        return hit[2]
    try:
        own = own_type.coerce(value)
    except (TypeError, ValueError):
        return MISS
    _converted[id(value)] = (value, snapshot, own)  # the object is held: its id is not reused meanwhile
    while len(_converted) > STEP_CACHE_SIZE:
        _converted.popitem(last=False)
    return own


def fast_key(q: Any, k: Any, v: Any, paged: bool, options: dict) -> Optional[tuple]:
    """The key of a call that may skip validation, or None. Only device tensors (Q, K, V, the
    cur_pos_tensor, the page table), no positions list, mask, sink or LSE; configs None, ttdecode's
    frozen (hashable) ones or ttnn config objects (converted to ttdecode's, `_own_config`); the output
    memory config by its repr. Then the call's options are in the key by value, and
    `DecodeStep.run_fast` compares every tensor's TensorSpec (shape, dtype, layout, memory config) and
    device with those of a validated call of the step: all that the validation of such a call looks at."""
    from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig

    if (options.get("cur_pos") is not None or options.get("attn_mask") is not None
            or options.get("attention_sink") is not None or options.get("return_lse")):
        return None
    pcfg = _own_config(options.get("program_config"), SDPAProgramConfig)
    ccfg = _own_config(options.get("compute_kernel_config"), ComputeKernelConfig)
    if pcfg is MISS or ccfg is MISS:
        return None
    mem = options.get("memory_config")
    if mem is not None and type(mem).__name__ != "MemoryConfig":
        return None
    try:
        key = (v is None, paged, options.get("cur_pos_tensor") is None, options.get("page_table") is None,
               tuple(options.get(name) for name in _FAST_OPTIONS), pcfg, ccfg, None if mem is None else repr(mem))
        hash(key)
    except TypeError:
        return None
    return key


def try_fast(q: Any, k: Any, v: Any, paged: bool, options: dict) -> Any:
    """Run a cached call without validation (`fast_key`, `DecodeStep.run_fast`), or return `MISS`."""
    key = fast_key(q, k, v, paged, options)
    if key is None:
        return MISS
    steps = _fast.get(key)
    if not steps:
        return MISS
    cur, table = options.get("cur_pos_tensor"), options.get("page_table")
    for step in steps:
        out = step.run_fast(q, k, v, cur, table)
        if out is not MISS:
            return out
    return MISS


def remember_fast(q: Any, k: Any, v: Any, paged: bool, options: dict, inputs: Any) -> None:
    """After a validated device call: later calls of the same key and tensor specs take the fast path."""
    key = fast_key(q, k, v, paged, options)
    if key is None:
        return
    step = _steps.get(step_key(inputs, q.device()))
    if step is None or not step.remember_specs(q, k, v, options.get("cur_pos_tensor"), options.get("page_table")):
        return
    steps = [step] + [s for s in _fast.get(key, []) if s is not step]
    _fast[key] = steps[:FAST_STEPS_PER_KEY]
    _fast.move_to_end(key)
    while len(_fast) > STEP_CACHE_SIZE:
        _fast.popitem(last=False)


def cached_steps() -> int:
    """How many decode steps are cached."""
    return len(_steps)


def run_decode(inputs: Any, compute: Any, make_plan: Callable[[Any], Any], *, output: Any = None) -> Any:
    """Run FlashDecode for validated `inputs` on the Wormhole holding them, through the cached step of
    their decode shape. Q, K, V (none with MLA) must be ttnn tensors on one device: K and V in
    interleaved DRAM, Q in DRAM or L1 (interleaved or height-sharded: copied to DRAM on the device,
    module doc); cur_pos_tensor and the page table on the device in DRAM or L1 likewise (a torch one is
    uploaded); the output in `inputs.memory_config` (None: interleaved DRAM);
    positions given as a list travel as runtime args. Returns the output (and the LSE ``[T, B, NH]`` as
    float32 torch when `inputs.return_lse`: a read back)."""
    q = inputs.q
    # Q already on a device means a device is open (a card, or the mock N150 of ttdecode.testing,
    # which has no /dev/tenstorrent*): only refuse when neither holds.
    if not (q.kind == "ttnn" and _on_device(q.obj)) and not has_tenstorrent_device():
        raise RuntimeError(
            "backend 'device': no Tenstorrent device found (no /dev/tenstorrent*); "
            "use backend='host' to run the same kernels on the host runtime"
        )
    return get_step(inputs, compute, make_plan).run(inputs, output=output)
