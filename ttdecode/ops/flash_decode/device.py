"""FlashDecode on a Wormhole: plan once per decode shape, run per step.

A `DecodeStep` is made once per decode *shape* -- the tensors' shapes, dtypes, layouts and memory
configs, the program and compute configs and the options, never the positions, the page-table
contents or the batch's values -- and holds the plan, the `Program` and the ttnn descriptor
(`ttdecode.device.PreparedProgram`). Each call checks tensor metadata only, patches the buffer
addresses (and positions given as a list, as the reader's common runtime args) and calls
``ttnn.generic_op``: no plan, no program build, no data between host and device when the inputs are
device tensors. `run_decode` keeps a bounded cache of steps (`STEP_CACHE_SIZE`, least recently used
out) keyed by `step_key`.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Callable, Optional

from ttdecode.device import DeviceError, PreparedProgram, available, require_ttnn
from ttdecode.formats import DataType
from ttdecode.program import Program

#: Decode shapes whose steps `run_decode` keeps (a model has a handful: one per layer kind and batch).
STEP_CACHE_SIZE = 32

_steps: "OrderedDict[Any, DecodeStep]" = OrderedDict()


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
    from ttdecode.ops.flash_decode.program import build_program_for_device

    return build_program_for_device(
        plan, scale=inputs.scale, compute=compute, positions=positions,
        exp_approx=inputs.program_config.resolved_exp_approx_mode(inputs.compute_kernel_config))


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
        self.positions_in_args = inputs.cur_pos_tensor is None  # a list, or non-causal (S - 1 for all)
        self.plan = make_plan(dataclasses.replace(inputs, cur_pos=None, positions=None))
        self.batch = inputs.batch
        self.seq_len = inputs.seq_len
        placeholder = [0] * inputs.batch if self.positions_in_args else None
        self.program = decode_program(inputs, self.plan, compute, positions=placeholder)
        self.prepared = PreparedProgram(self.program, device)
        from ttdecode.ops.flash_decode.program import READER_COMMON_ARGS

        self._positions_base = READER_COMMON_ARGS
        self.calls = 0

    def positions_args(self, positions: Any) -> dict[str, dict[int, int]]:
        """The reader's common-arg patch for B positions (two's complement words)."""
        base = self._positions_base
        return {"reader": {base + b: int(p) & 0xFFFFFFFF for b, p in enumerate(positions)}}

    def run(self, inputs: Any, *, output: Any = None) -> Any:
        """One decode step for `inputs` (validated; same key as the step's). No data moves when the
        inputs are device tensors; a torch page table, sink or mask (host inputs) is uploaded."""
        ttnn = require_ttnn()
        plan = self.plan
        io = {"q": inputs.q.obj, "k": inputs.k.obj}
        if inputs.v is not None:
            io["v"] = inputs.v.obj
        for name, meta in (("q", inputs.q), ("k", inputs.k), ("v", inputs.v)):
            if meta is not None and (meta.kind != "ttnn" or not _on_device(meta.obj)):
                raise DeviceError(f"{name}: backend 'device' expects a ttnn tensor on the device, got a "
                                  f"{meta.kind} tensor")
        common = None
        if self.positions_in_args:
            positions = inputs.positions if inputs.positions is not None else [self.seq_len - 1] * self.batch
            common = self.positions_args(positions)
        else:
            io["cur_pos"] = _device_tensor(ttnn, inputs.cur_pos_tensor, ttnn.int32, ttnn.ROW_MAJOR_LAYOUT,
                                           self.device)
        if inputs.paged:
            io["page_table"] = _device_tensor(ttnn, inputs.page_table, ttnn.int32, ttnn.ROW_MAJOR_LAYOUT,
                                              self.device)
        if plan.attention_sink:
            sink = inputs.attention_sink
            if sink.kind == "ttnn" and _on_device(sink.obj) and tuple(sink.shape) == (plan.num_q_heads, 32):
                io["sink"] = sink.obj  # checked by the prepared program (bf16, tile, DRAM)
            else:
                io["sink"] = ttnn.from_torch(to_torch_sink(inputs), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                             device=self.device)
        if plan.has_attn_mask:
            mask = inputs.attn_mask
            if mask.kind == "ttnn" and _on_device(mask.obj):
                io["attn_mask"] = mask.obj
            else:
                from ttdecode.ops.flash_decode.program import mask_tiles
                from ttdecode.tensor import as_tile_tensor, to_torch

                values = to_torch(mask_tiles(plan, as_tile_tensor(mask.obj, DataType.bfloat16)))
                io["attn_mask"] = ttnn.from_torch(values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                                  device=self.device)
        outs = self.prepared.run(io, common_args=common, outputs=None if output is None else {"out": output})
        self.calls += 1
        if not inputs.return_lse:
            return outs[0]
        from ttdecode.ops.flash_decode.program import decode_lse_rows

        return outs[0], decode_lse_rows(plan, ttnn.to_torch(outs[1]))


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
    step = _steps.get(key)
    if step is None:
        step = DecodeStep(inputs, compute, make_plan, device)
        _steps[key] = step
        while len(_steps) > STEP_CACHE_SIZE:
            _steps.popitem(last=False)
    else:
        _steps.move_to_end(key)
    return step


def clear_steps() -> None:
    """Forget every cached step (their ttnn programs stay in the device's program cache)."""
    _steps.clear()


def cached_steps() -> int:
    """How many decode steps are cached."""
    return len(_steps)


def run_decode(inputs: Any, compute: Any, make_plan: Callable[[Any], Any], *, output: Any = None) -> Any:
    """Run FlashDecode for validated `inputs` on the Wormhole holding them, through the cached step of
    their decode shape. Q, K, V (none with MLA) must be ttnn tensors on one device in interleaved DRAM;
    cur_pos_tensor and the page table are read by the kernels where they lie (a torch one is uploaded);
    positions given as a list travel as runtime args. Returns the output (and the LSE ``[T, B, NH]`` as
    float32 torch when `inputs.return_lse`: a read back)."""
    if not available():
        raise RuntimeError(
            "backend 'device': no Tenstorrent device found (no /dev/tenstorrent*); "
            "use backend='host' to run the same kernels on the host runtime"
        )
    return get_step(inputs, compute, make_plan).run(inputs, output=output)
