"""FlashDecode on a Wormhole: plan once per decode shape, run per token (`plan_decode`, `FlashDecodeStep`).

A `FlashDecodeStep` is made once per decode *shape* -- the tensors' shapes, dtypes, layouts and memory
configs, the program and compute configs and the options, never the positions, the page-table
contents or the batch's values (`step_key`) -- and holds the plan, the `Program` and the ttnn
descriptor (`ttdecode.ttnn_backend.PreparedProgram`). Each call checks tensor metadata only, patches
the buffer addresses (and positions given as a list, as the reader's common runtime args) and calls
``ttnn.generic_op``: no plan, no program build, no data between host and device when the inputs are
device tensors::

    opts = ttdecode.DecodeOptions(cur_pos_tensor=pos, program_config=pc)
    step = ttdecode.plan_decode(q, k, v, opts)        # once per decode shape
    for _ in range(tokens):
        out = step.run(q, k, v, cur_pos_tensor=pos)   # one token

A call whose tensors have the TensorSpecs of an earlier validated call of the step skips even the
validation (`FlashDecodeStep.run_fast`: each tensor's TensorSpec and device compared, then
`PreparedProgram.run_ordered`); anything different takes the validating path. The public functions'
device backend keeps its steps in ``step_cache.DeviceSteps`` (bounded, least recently used out). On
a mock N150 a cached call's host time is measured against tt-metal's own op's by
perf/bench_device_overhead.py (figures in perf/README.md, "Host overhead through ttnn on the mock"); the
per-core runtime args go to ttnn once, `ttdecode.ttnn_backend.PreparedProgram`.

Placements. The kernels read K, V, the positions, the page table, the mask and the sink in DRAM
(interleaved, or K/V in bank-local pages), and Q in interleaved DRAM or where
``ttnn.experimental.nlp_create_qkv_heads_decode`` leaves it: height-sharded in L1 ([32 padded heads, D]
per user on B cores; `q_shards_of`), read from the shards' holders over the NoC. The writer writes an
interleaved DRAM output, or one height-sharded in L1 as the call's ``memory_config`` asks (tt_transformers'
SCORES_BATCHED_MM_OUTPUT_MEMCFG: [32, Dv] per user; `out_shards_of`), into its holders' shards. Any other
placement of an input (L1 interleaved, another sharding) is copied to interleaved DRAM by
``ttnn.to_memory_config`` before the program, and another output placement is met by
``ttnn.to_memory_config`` of the DRAM output after it (the DRAM one then freed). So a step issues, in
order: one ``to_memory_config`` per such input, ``generic_op``, one ``to_memory_config`` for such an
output, then ``deallocate`` of each temporary; with tt_transformers' placements, ``generic_op`` alone. All
are device ops (no host<->device data, traceable). Each such move and free adds host time to a cached call
(perf/bench_device_overhead.py; figures in perf/README.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from ttdecode.ttnn_backend.descriptor import DeviceError
from ttdecode.ttnn_backend.tensors import dram_banks, l1_shards
from ttdecode.core.formats import num_tiles
from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.ttnn_env import require_ttnn
from ttdecode.core.program_description import Program
from ttdecode.ops.flash_decode.op import Result, check_kernel_gaps, compute_settings, make_decode_plan
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.ops.flash_decode.validate import DecodeInputs, validate_decode, sink_values, as_bfloat16_tiles
from ttdecode.ops.flash_decode.program_factory import QShards, build_program_for_device
from ttdecode.ops.flash_decode.kernel_args import READER_COMMON_ARGS
from ttdecode.ops.flash_decode.program_inputs import mask_tiles
from ttdecode.core.tensor import to_torch
from ttdecode.ops.flash_decode.program_factory import decode_lse_rows

__all__ = ["FlashDecodeStep", "plan_decode", "MISS", "step_key", "device_of", "decode_program", "with_device_grid"]

#: Returned by `FlashDecodeStep.run_fast` when the call must take the validating path.
MISS = object()


# ---- the decode op on a device ------------------------------------------------------------------


def to_torch_sink(inputs: Any) -> Any:
    """The attention sink as a float32 torch [NH, 32] (column 0 holds each head's logit)."""
    # the host kernels' own reading of the sink (a torch [NH] through bf16; dequantize() refuses rank 1)
    sink = sink_values(inputs.attention_sink)
    if sink.dim() == 1:
        sink = sink[:, None].expand(-1, 32).contiguous()
    return sink


def decode_program(inputs: Any, plan: Any, compute: Any, positions: Optional[list[int]] = None,
                   q_shards: QShards = None, out_shards: QShards = None) -> Program:
    """The FlashDecode `Program` (no input bytes) the device runs for validated `inputs` and their `plan`
    (``ttdecode.ops.flash_decode.op.make_decode_plan``), with the call's scale and exp mode; `compute` from
    ``ttdecode.ops.flash_decode.op.compute_settings``; `positions` given: positions_in_args (the reader's
    common runtime args); `q_shards`: Q read from its L1 shards (`q_shards_of`); `out_shards`: the output
    written to L1 shards (`out_shards_of`). Used by `FlashDecodeStep` and by the mesh path of context
    parallelism."""
    return build_program_for_device(
        plan, scale=inputs.scale, compute=compute, positions=positions, q_shards=q_shards, out_shards=out_shards,
        exp_approx=inputs.program_config.resolved_exp_approx_mode(inputs.compute_kernel_config))


def q_shards_of(ttnn: Any, q: Any, head_dim: int) -> QShards:
    """Where the reader reads a device Q in place: a bfloat16 tile Q height-sharded in L1 (ROW_MAJOR
    orientation, shards of whole tile rows, D wide: ``nlp_create_qkv_heads_decode``'s placement) gives
    (its holders in shard order, tiles per shard); any other Q None (it is moved to interleaved DRAM)."""
    if q.dtype != ttnn.bfloat16 or q.layout != ttnn.TILE_LAYOUT:
        return None
    found = l1_shards(ttnn, q.memory_config(), head_dim)
    if found is None:
        return None
    holders, rows = found
    pages = rows * (head_dim // 32)
    if -(-num_tiles(tuple(q.shape)) // pages) > len(holders):
        return None
    return holders, pages


def out_shards_of(ttnn: Any, memory_config: Any, out_shape: tuple[int, ...], plan_lse: bool) -> QShards:
    """Where the writer writes the output [T, B, NH, Dv] in place: a height-sharded L1 `memory_config`
    (ROW_MAJOR, whole tile rows Dv wide, shards enough: `check_output_placement`) gives (holders, tiles per
    shard); None (interleaved, or another sharding: the DRAM output is moved by ``to_memory_config``)."""
    if memory_config is None or plan_lse:
        return None
    found = l1_shards(ttnn, memory_config, out_shape[-1])
    if found is None:
        return None
    holders, rows = found
    pages = rows * (out_shape[-1] // 32)
    if -(-num_tiles(out_shape) // pages) > len(holders):
        return None
    return holders, pages


# ---- inputs the kernels take in another form: the device's grid, block-float Q / mask ------------------


def device_grid_limit(device: Any) -> tuple[tuple[int, int], str]:
    """The grid limit on `device` (its ``compute_with_storage_grid_size()``: 8x8 on an N150, 8x10 on a
    Galaxy's unharvested chips) and the words naming it in a refusal."""
    g = device.compute_with_storage_grid_size()
    grid = (int(g.x), int(g.y))
    return grid, f"the device's compute grid {grid[0]}x{grid[1]} (device.compute_with_storage_grid_size())"


def with_device_grid(inputs: Any, device: Any) -> Any:
    """`inputs` with the program config's grid in force on `device`: its
    ``compute_with_storage_grid_size()`` when the config names none (tt-metal's rule without a program
    config), else the grid given, refused by name when beyond the device's grid."""
    grid, where = device_grid_limit(device)
    pc = inputs.program_config.resolve_grid(grid, grid, where)
    return inputs if pc is inputs.program_config else dataclasses.replace(inputs, program_config=pc)


def as_bfloat16_on_device(ttnn: Any, tensor: Any) -> tuple[Any, bool]:
    """A device tensor in the bfloat16 the kernels read: itself, or a bfloat8_b / bfloat4_b one through
    ``ttnn.typecast`` (a device op; exact: every block-float value is a bfloat16 value, the host runtime
    converts the same way, validate.as_bfloat16_tiles). Returns (tensor, True when it is a temporary the
    caller deallocates after the step)."""
    if tensor.dtype == ttnn.bfloat16:
        return tensor, False
    return ttnn.typecast(tensor, ttnn.bfloat16), True


# ---- placements the kernels do not read: moved on the device around the program ------------------


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


class FlashDecodeStep:
    """FlashDecode planned once for one decode shape on one device, run per token (module doc).

    Made by `plan_decode` (a step the caller keeps) or by the API's cache of steps
    (``step_cache.DeviceSteps``). The plan is made without positions (the program is valid for any:
    the kernels derive every chunk range from the positions at run time, and the plan's split is made
    for the cache's length). `run` takes one token's tensors; `launch` runs validated inputs of the
    step's `key`; `run_fast` is the cached call's path (tensor specs only).

    Attributes:
        options: the `DecodeOptions` the step was planned with (`run` takes its per-token values).
        key: the decode shape (`step_key`). plan, program, prepared: the plan, the `Program` and the
            ttnn descriptor (``PreparedProgram``). calls: how many times the program ran.
    """

    def __init__(self, options: DecodeOptions, inputs: DecodeInputs, device: Any) -> None:
        self.options = options
        self.device = device
        self.key = step_key(inputs, device)
        compute = compute_settings(inputs)
        inputs = with_device_grid(inputs, device)
        self.positions_in_args = inputs.cur_pos_tensor is None  # a list, or non-causal (S - 1 for all)
        self.plan = make_decode_plan(dataclasses.replace(inputs, cur_pos=None, positions=None),
                                     dram_banks=dram_banks(device), grid_limit=device_grid_limit(device))
        self.batch = inputs.batch
        self.seq_len = inputs.seq_len
        placeholder = [0] * inputs.batch if self.positions_in_args else None
        ttnn = require_ttnn()
        #: Q read where it lies, from its L1 shards (else moved to interleaved DRAM per call)
        self.q_shards = q_shards_of(ttnn, inputs.q.obj, inputs.head_dim)
        self.memory_config = inputs.memory_config
        q_shape = tuple(inputs.q.shape)
        self.out_shape = q_shape[:3] + (inputs.head_dim_v,)
        check_output_placement(ttnn, self.memory_config, self.out_shape, device)
        #: the output written where the memory config puts it, to its L1 shards (else DRAM, then moved)
        self.out_shards = out_shards_of(ttnn, self.memory_config, self.out_shape, plan_lse=inputs.return_lse)
        self.program = decode_program(inputs, self.plan, compute, positions=placeholder, q_shards=self.q_shards,
                                      out_shards=self.out_shards)
        self.prepared = PreparedProgram(self.program, device)

        self._positions_base = READER_COMMON_ARGS
        self.calls = 0
        self._fast_names: list[str] = []
        self._fast_specs: Optional[list[Any]] = None
        self._fast_moved: list[bool] = []  # per fast input: not in interleaved DRAM (moved there per step)
        self._ran_specs: dict[str, Any] = {}  # the TensorSpecs of the inputs `launch` last ran with, by name
        self._all_last = self.positions_args([self.seq_len - 1] * self.batch) if self.positions_in_args else None

    def run(self, q: Any, k: Any, v: Any, *, cur_pos: Any = None, cur_pos_tensor: Any = None,
            page_table: Any = None, output: Any = None) -> Result:
        """One decode step: Q ``[T, B, NH, D]``, K/V of the planned shape, and this token's positions
        (``cur_pos`` list or ``cur_pos_tensor``, as planned; none when non-causal) and page table (paged).
        The other options are the plan's. A call whose tensors have the TensorSpecs of an earlier
        validated one checks those only (`run_fast`); else it is validated in full and must be of the
        step's decode shape (ValueError otherwise: plan that shape). Returns the output (with the LSE
        when planned with ``return_lse``)."""
        if output is None and cur_pos is None:
            out = self.run_fast(q, k, v, cur_pos_tensor, page_table)
            if out is not MISS:
                return out
        options = self.options.replace(cur_pos=cur_pos, cur_pos_tensor=cur_pos_tensor, page_table=page_table)
        read = bool(options.validate_values)
        inputs = validate_decode(q, k, v, options, read_values=read)
        if step_key(inputs, device_of(inputs.q)) != self.key:
            raise ValueError("ttdecode: FlashDecodeStep.run: the tensors or positions are not of the decode shape "
                             "the step was planned for (shapes, formats, placements, a positions list or tensor); "
                             "plan_decode that shape")
        out = self.launch(inputs, output=output)
        if not read and _fast_options(options):
            self.remember_specs(q, k, v, cur_pos_tensor, page_table)
        return out

    def positions_args(self, positions: Any) -> dict[str, dict[int, int]]:
        """The reader's common-arg patch for B positions (two's complement words)."""
        base = self._positions_base
        return {"reader": {base + b: int(p) & 0xFFFFFFFF for b, p in enumerate(positions)}}

    def launch(self, inputs: DecodeInputs, *, output: Any = None) -> Result:
        """One decode step for validated `inputs` of the step's `key`. No data moves when the inputs are
        device tensors; a torch page table, sink or mask (host inputs) is uploaded. `output`: the
        caller's DRAM output tensor (else allocated, and moved to the planned memory config)."""
        ttnn = require_ttnn()
        plan = self.plan
        for name, meta in (("q", inputs.q), ("k", inputs.k), ("v", inputs.v)):
            if meta is not None and (meta.kind != "ttnn" or not _on_device(meta.obj)):
                raise DeviceError(f"{name}: backend 'device' expects a ttnn tensor on the device, got a "
                                  f"{meta.kind} tensor")
        temporaries: list[Any] = []
        if self.q_shards is not None:
            q = inputs.q.obj
        else:
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
                values = to_torch(mask_tiles(plan, as_bfloat16_tiles(mask)))
                io["attn_mask"] = ttnn.from_torch(values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                                  device=self.device)
        if output is not None and self.out_shards is not None:
            raise DeviceError("output: this step writes the output to the L1 shards of its memory_config; pass no "
                              "output tensor (or plan the step with an interleaved memory_config)")
        if self.out_shards is not None:
            output = self._sharded_output(ttnn)
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

        return out, decode_lse_rows(plan, ttnn.to_torch(outs[1]))


    def remember_specs(self, q: Any, k: Any, v: Any, cur_pos_tensor: Any, page_table: Any) -> bool:
        """Keep the TensorSpecs of a validated call's inputs for `run_fast` (False: they are not those
        `launch` last ran with -- in their placement, before any move to DRAM -- or the step needs an input
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
        # what `launch` moves to interleaved DRAM: Q (unless read from its L1 shards), the positions and the
        # page table held elsewhere; K and V are read where they lie (interleaved or bank-local pages)
        moves = {"cur_pos", "page_table"} | ({"q"} if self.q_shards is None else set())
        self._fast_moved = [n in moves and not is_dram_interleaved(ttnn, sp.memory_config)
                            for n, sp in zip(names, specs)]
        return True

    def run_fast(self, q: Any, k: Any, v: Any, cur_pos_tensor: Any, page_table: Any) -> Any:
        """The cached call's path: each input's TensorSpec (shape, dtype, layout, memory
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
        outs = self.prepared.run_ordered(ordered, common,
                                         None if self.out_shards is None else [self._sharded_output(ttnn)])
        for t in temporaries:
            ttnn.deallocate(t)
        self.calls += 1
        return outs[0] if self.out_shards is not None else in_placement(ttnn, outs[0], self.memory_config)

    def _sharded_output(self, ttnn: Any) -> Any:
        """The output [T, B, NH, Dv] bf16 tiles allocated in the call's height-sharded L1 memory config."""
        return ttnn.allocate_tensor_on_device(ttnn.Shape(list(self.out_shape)), ttnn.bfloat16, ttnn.TILE_LAYOUT,
                                              self.device, self.memory_config)


def _device_tensor(ttnn: Any, meta: Any, dtype: Any, layout: Any, device: Any) -> Any:
    """A ttnn device tensor as given, or a torch / host one uploaded (a host input: one move)."""
    if meta.kind == "ttnn" and _on_device(meta.obj):
        return meta.obj
    import torch

    values = meta.obj if meta.kind == "torch" else ttnn.to_torch(meta.obj)
    return ttnn.from_torch(values.to(torch.int32), dtype=dtype, layout=layout, device=device)


def _fast_options(options: DecodeOptions) -> bool:
    """True when a call of these options may take `FlashDecodeStep.run_fast` once its tensors' specs are
    known: positions in a tensor (or none), no mask, sink or LSE (what ``run_fast`` does not take)."""
    return (options.cur_pos is None and options.attn_mask is None and options.attention_sink is None
            and not options.return_lse)


def plan_decode(q: Any, k: Any, v: Any, options: Optional[DecodeOptions] = None) -> FlashDecodeStep:
    """Plan FlashDecode once for the decode shape of Q ``[T, B, NH, D]``, K/V (ttnn tensors on one
    Wormhole, shapes as in ``ttdecode.scaled_dot_product_attention_decode``) and `options` (None:
    defaults; the positions and page table in it are examples of the per-token values, never read
    into the plan). Validates in full and builds the program and its ttnn descriptor; returns the
    `FlashDecodeStep` whose ``run`` is one token. ``options.backend`` is not looked at (a step runs
    on the device holding Q)."""
    options = DecodeOptions() if options is None else options
    inputs = validate_decode(q, k, v, options, read_values=bool(options.validate_values))
    check_kernel_gaps("device", inputs)
    return FlashDecodeStep(options, inputs, device_of(inputs.q))


def device_of(q: Any) -> Any:
    """The device holding Q (its `TensorMeta`); DeviceError when Q is not a ttnn device tensor."""
    if q.kind != "ttnn" or not _on_device(q.obj):
        raise DeviceError(f"q: backend 'device' expects a ttnn tensor on the device, got a {q.kind} tensor")
    return q.obj.device()
