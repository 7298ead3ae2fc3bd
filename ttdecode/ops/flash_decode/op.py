"""FlashDecode's run per backend: the plan of validated inputs, the kernels on the host runtime and the
float64 reference (the device's run: ``device_step.FlashDecodeStep``, kept per decode shape by
``step_cache``). `ttdecode.api` calls these after validation and the backend choice."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.validate import (
    DecodeInputs, as_bfloat16_tiles, dequantize_input, sink_values, reached_blocks,
)
from ttdecode.config import WORMHOLE_GRID, host_grid_limit
from ttdecode.ops.flash_decode.plan import make_plan, power_of_two_scale
from ttdecode.core.program_description import WORMHOLE_DRAM_BANKS, ComputeSettings, MathFidelity
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.tensor import as_tile_tensor
from ttdecode.reference import sdpa_decode_reference

Result = Union[Any, tuple[Any, Any]]


def make_decode_plan(inputs: DecodeInputs, dram_banks: int = WORMHOLE_DRAM_BANKS,
                     grid_limit: Optional[tuple[tuple[int, int], str]] = None) -> Any:
    """The FlashDecode plan for these inputs (`plan.make_plan`; raises PlanError). A program config
    without a grid plans on the host runtime's WORMHOLE_GRID, a given grid must lie within the worker
    grid of a chip of the board the host runtime models (``config.host_grid_limit``: 8x9, or 8x10 on a
    Galaxy), or `grid_limit` (the limit (columns, rows) and the words naming it: the device path passes
    the device's grid, ``device_step.device_grid_limit``, having resolved the grid first: with_device_grid).
    `dram_banks`: the DRAM banks K/V pages are dealt over (the device's, ttnn_backend.dram_banks).
    Q is planned as bfloat16, the format the kernels read (a block-float Q is converted first)."""
    limit, where = host_grid_limit() if grid_limit is None else grid_limit
    pc = inputs.program_config.resolve_grid(limit, WORMHOLE_GRID, where)
    cc = inputs.compute_kernel_config
    return make_plan(
        batch=inputs.batch, num_q_heads=inputs.num_heads, num_kv_heads=inputs.num_kv_heads,
        seq_len=inputs.seq_len, head_dim=inputs.head_dim, head_dim_v=inputs.head_dim_v,
        kv_dtype=DataType(inputs.kv_dtype), q_dtype=DataType.bfloat16,
        cur_pos=inputs.cur_pos, grid=pc.compute_with_storage_grid_size,
        sub_core_grids=pc.sub_core_grids, k_chunk_size=pc.k_chunk_size,
        max_cores_per_head_batch=pc.max_cores_per_head_batch, fp32_dest_acc_en=cc.fp32_dest_acc_en,
        math_fidelity=cc.math_fidelity, exp_approx=pc.resolved_exp_approx_mode(cc),
        share_cache=inputs.share_cache, return_lse=inputs.return_lse,
        block_size=inputs.block_size, num_blocks=inputs.k.shape[0] if inputs.paged else None,
        sliding_window_size=inputs.sliding_window_size, attention_sink=inputs.attention_sink is not None,
        mla=inputs.v is None, is_causal=inputs.is_causal,
        attn_mask_batch=0 if inputs.attn_mask is None else inputs.attn_mask.shape[0],
        num_tokens=inputs.num_tokens, kv_pages=pc.kv_pages, chunk_cap=pc.chunk_cap,
        prescale_q=power_of_two_scale(inputs.scale), dram_banks=dram_banks,
    )


def kernel_gaps(inputs: DecodeInputs) -> list[str]:
    """Options the FlashDecode kernels do not implement yet (the reference backend does)."""
    gaps = []
    if inputs.compute_kernel_config.packer_l1_acc:
        gaps.append("compute_kernel_config.packer_l1_acc=True (the kernels accumulate in DST and never pack "
                    "onto L1; set it False)")
    return gaps


def compute_settings(inputs: DecodeInputs) -> Any:
    """The compute-kernel settings of a call (ttdecode.core.program_description.ComputeSettings): the compute config's
    math_approx_mode becomes the kernels' APPROX (it selects recip_tile's mode); the softmax exp's mode
    (SDPAProgramConfig.exp_approx_mode) travels as a compile-time arg (exp_approx)."""
    cc = inputs.compute_kernel_config
    return ComputeSettings(
        math_fidelity=MathFidelity(cc.math_fidelity),
        fp32_dest_acc_en=cc.fp32_dest_acc_en,
        math_approx_mode=cc.math_approx_mode,
    )


def check_kernel_gaps(backend: str, inputs: DecodeInputs) -> None:
    """Raise NotImplementedError naming the options the kernels do not implement (`kernel_gaps`) for a
    kernel backend ("host" or "device")."""
    gaps = kernel_gaps(inputs)
    if gaps:
        raise NotImplementedError(
            f"backend '{backend}': the FlashDecode kernels do not implement {', '.join(gaps)} yet; "
            f"backend='reference' computes every option"
        )


def run_host(inputs: DecodeInputs, plan: Any = None) -> Result:
    """Run the FlashDecode kernels on the host runtime for validated `inputs` and their `plan`
    (`make_decode_plan`; made here when None: the host plans each call, its positions included).
    The device backend's run: ``ttdecode.ops.flash_decode.device_steps``."""
    check_kernel_gaps("host", inputs)
    if plan is None:
        plan = make_decode_plan(inputs)
    out, lse, _ = run_flash_decode(
        plan,
        q=as_bfloat16_tiles(inputs.q),  # a block-float Q converted exactly, as the device's typecast does
        k=as_tile_tensor(inputs.k.obj, DataType.bfloat16),
        v=None if inputs.v is None else as_tile_tensor(inputs.v.obj, DataType.bfloat16),  # None: MLA
        cur_pos_source=inputs.positions,
        scale=inputs.scale,
        compute=compute_settings(inputs),
        exp_approx=inputs.program_config.resolved_exp_approx_mode(inputs.compute_kernel_config),
        page_table=inputs.page_table_values,  # None for a contiguous cache
        attention_sink=None if inputs.attention_sink is None else sink_values(inputs.attention_sink),
        attn_mask=None if inputs.attn_mask is None else as_bfloat16_tiles(inputs.attn_mask),
    )
    return (out, lse) if inputs.return_lse else out


# ---- the reference backend ----------------------------------------------------------------------


def _reached_table(inputs: DecodeInputs) -> Any:
    """The page table for the reference, whose own check wants every entry a block id: the entries no
    user reaches (validate.reached_blocks; never read by any backend, may hold -1 padding) set to 0."""
    table = inputs.page_table_values
    if table is None or inputs.positions is None:
        return table

    out = torch.zeros_like(table)
    for b, pos in enumerate(inputs.positions):
        for j in reached_blocks(int(pos), inputs.block_size, inputs.sliding_window_size, inputs.num_tokens):
            out[b, j] = table[b, j]
    return out


def run_reference(inputs: DecodeInputs) -> Result:
    """Float64 reference on the dequantized inputs; bfloat16 output, float32 LSE."""
    deq = lambda m: None if m is None else dequantize_input(m)  # noqa: E731
    out, lse = sdpa_decode_reference(
        deq(inputs.q), deq(inputs.k), deq(inputs.v),
        is_causal=inputs.is_causal,
        attn_mask=deq(inputs.attn_mask),
        cur_pos=list(inputs.positions) if inputs.positions is not None else None,
        attention_sink=None if inputs.attention_sink is None else sink_values(inputs.attention_sink).double(),
        scale=inputs.scale,
        sliding_window_size=inputs.sliding_window_size,
        share_cache=inputs.share_cache,
        page_table=_reached_table(inputs),
        head_dim_v=inputs.head_dim_v if inputs.v is None else None,
        return_lse=True,
        dtype=torch.float64,
    )
    out = out.to(torch.bfloat16)
    if inputs.return_lse:
        return out, lse.to(torch.float32)
    return out
