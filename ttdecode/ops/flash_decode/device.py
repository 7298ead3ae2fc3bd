"""FlashDecode on a Wormhole: its `Program` launched through ttnn (`ttdecode.device.launch`)."""

from __future__ import annotations

from typing import Any

from ttdecode.device import DeviceError, available, launch, require_ttnn
from ttdecode.formats import DataType
from ttdecode.program import Program


# ---- the decode op on a device ------------------------------------------------------------------


def to_torch_sink(inputs: Any) -> Any:
    """The attention sink as a float32 torch [NH, 32] (column 0 holds each head's logit)."""
    from ttdecode.ops.flash_decode.validate import sink_values

    # the host kernels' own reading of the sink (a torch [NH] through bf16; dequantize() refuses rank 1)
    sink = sink_values(inputs.attention_sink)
    if sink.dim() == 1:
        sink = sink[:, None].expand(-1, 32).contiguous()
    return sink


def decode_program(inputs: Any, plan: Any, compute: Any) -> Program:
    """The FlashDecode `Program` (no input bytes) the device runs for validated `inputs` and their `plan`
    (``ttdecode.ops.flash_decode.op.make_decode_plan``), with the call's scale and exp mode; `compute` from
    ``ttdecode.ops.flash_decode.op.compute_settings``. Used by `run_decode` and by the mesh path of context parallelism."""
    from ttdecode.ops.flash_decode.program import build_program_for_device

    return build_program_for_device(
        plan, scale=inputs.scale, compute=compute,
        exp_approx=inputs.program_config.resolved_exp_approx_mode(inputs.compute_kernel_config))


def run_decode(inputs: Any, plan: Any, compute: Any) -> Any:
    """Run the FlashDecode program of `plan` on the Wormhole holding the input tensors.

    `inputs` is the API's validated `DecodeInputs`: Q, K, V (none with MLA; and cur_pos_tensor, if given) must be
    ttnn tensors already on one device in interleaved DRAM; positions given as a list are uploaded as
    an int32 row-major tensor. A paged cache's page table goes to the kernels as the caller's ttnn
    tensor (int32 row-major [B, max_blocks] in DRAM; `launch` checks it), or uploaded from torch. Returns the output (and the LSE `[1, B, NH]` as float32 torch when
    `inputs.return_lse`), as ttnn tensors on the device for the output.
    """
    if not available():
        raise RuntimeError(
            "backend 'device': no Tenstorrent device found (no /dev/tenstorrent*); "
            "use backend='host' to run the same kernels on the host runtime"
        )
    ttnn = require_ttnn()
    from ttdecode.ops.flash_decode.program import decode_lse_rows

    tensors = {"q": inputs.q, "k": inputs.k}
    if inputs.v is not None:  # MLA (v=None): the kernels read V out of K
        tensors["v"] = inputs.v
    for name, meta in tensors.items():
        if meta.kind != "ttnn" or not ttnn.is_tensor_storage_on_device(meta.obj):
            raise DeviceError(f"{name}: backend 'device' expects a ttnn tensor on the device, got a {meta.kind} tensor")
    dev = inputs.q.obj.device()
    if inputs.cur_pos_tensor is not None and inputs.cur_pos_tensor.kind == "ttnn":
        cur_pos = inputs.cur_pos_tensor.obj
    else:
        import torch

        # non-causal decode has no positions: every user attends all S keys (the plan's S - 1)
        positions = list(inputs.positions) if inputs.positions is not None else list(plan.cur_pos)
        cur_pos = ttnn.from_torch(torch.tensor(positions, dtype=torch.int32),
                                  dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=dev)
    io_tensors = {name: meta.obj for name, meta in tensors.items()}
    io_tensors["cur_pos"] = cur_pos
    if inputs.paged:
        if inputs.page_table.kind == "ttnn":
            io_tensors["page_table"] = inputs.page_table.obj
        else:
            import torch

            io_tensors["page_table"] = ttnn.from_torch(inputs.page_table_values.to(torch.int32), dtype=ttnn.int32,
                                                       layout=ttnn.ROW_MAJOR_LAYOUT, device=dev)
    if plan.attention_sink:
        io_tensors["sink"] = ttnn.from_torch(to_torch_sink(inputs), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                             device=dev)
    if plan.has_attn_mask:
        mask = inputs.attn_mask
        if mask.kind == "ttnn" and ttnn.is_tensor_storage_on_device(mask.obj):
            io_tensors["attn_mask"] = mask.obj  # launch checks bf16, tile layout, DRAM, shape
        else:
            from ttdecode.ops.flash_decode.program import mask_tiles
            from ttdecode.tensor import as_tile_tensor, to_torch

            values = to_torch(mask_tiles(plan, as_tile_tensor(mask.obj, DataType.bfloat16)))
            io_tensors["attn_mask"] = ttnn.from_torch(values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                                      device=dev)
    outputs = launch(decode_program(inputs, plan, compute), io_tensors, dev)
    out = outputs[0]
    if not inputs.return_lse:
        return out
    return out, decode_lse_rows(plan, ttnn.to_torch(outputs[1]))
