"""FlashDecode's program inputs checked against the plan and turned into the byte images the host runtime
reads: the positions (int32 words), the page table ([B, max_blocks] int32, one row-major page per user),
the attention sink (bf16 tiles [NH, 32], column 0) and the additive mask (bf16 tiles [B or 1, 1, NH, S]);
and the K/V shapes a plan takes."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.split import TILE
from ttdecode.core.tensor import TileTensor, from_torch, to_torch
from ttdecode.ops.flash_decode.plan import DecodePlan
from ttdecode.ops.flash_decode.validate import reached_blocks

__all__ = ["FactoryError", "Positions", "expect_tile_tensor", "positions_bytes", "page_table_bytes", "sink_tiles",
           "mask_shape", "mask_tiles", "kv_shapes"]

Positions = Union[Sequence[int], torch.Tensor]


class FactoryError(ValueError):
    """Inputs that do not match the plan; the message names the argument."""


def expect_tile_tensor(name: str, t: Any, shape: tuple[int, ...], dtype: DataType) -> TileTensor:
    """`t` itself: a TileTensor of `shape` and `dtype` (the plan's); otherwise FactoryError naming `name`."""
    if not isinstance(t, TileTensor):
        raise FactoryError(f"{name}: expected a ttdecode TileTensor, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise FactoryError(f"{name}: expected shape {list(shape)} (from the plan), got {list(t.shape)}")
    if t.dtype is not dtype:
        raise FactoryError(f"{name}: expected {dtype.value} tiles (from the plan), got {t.dtype.value}")
    return t


def positions_bytes(plan: DecodePlan, cur_pos_source: Optional[Positions]) -> bytes:
    """The int32 positions page: from the list or tensor given, else from the plan."""
    if cur_pos_source is None:
        if plan.cur_pos is None:
            raise FactoryError("cur_pos_source: the plan has no positions (cur_pos_tensor), so they must be given")
        values = list(plan.cur_pos)
    elif isinstance(cur_pos_source, torch.Tensor):
        if cur_pos_source.is_floating_point() or cur_pos_source.dim() != 1:
            raise FactoryError(
                f"cur_pos_source: expected a 1-D integer tensor [B={plan.batch}], got "
                f"{cur_pos_source.dtype} shape {list(cur_pos_source.shape)}"
            )
        values = [int(x) for x in cur_pos_source.detach().cpu().tolist()]
    else:
        values = [int(x) for x in cur_pos_source]
    if len(values) != plan.batch:
        raise FactoryError(f"cur_pos_source: expected {plan.batch} positions (one per user), got {len(values)}")
    for b, p in enumerate(values):
        if not -1 <= p < plan.seq_len:
            raise FactoryError(f"cur_pos_source[{b}]: expected -1..{plan.seq_len - 1}, got {p}")
    if plan.cur_pos is not None and tuple(values) != tuple(plan.cur_pos):
        raise FactoryError(f"cur_pos_source: {values} differ from the plan's positions {list(plan.cur_pos)}")
    return np.asarray(values, dtype="<i4").tobytes()


def page_table_bytes(plan: DecodePlan, page_table: Any) -> bytes:
    """The int32 page-table image [B, max_blocks] (row-major, one page per user) of a paged plan."""
    if not plan.paged:
        if page_table is not None:
            raise FactoryError("page_table: expected None (the plan is for a contiguous cache), got a page table")
        return b""
    shape = [plan.batch, plan.max_blocks]
    if not isinstance(page_table, torch.Tensor) or page_table.is_floating_point() or page_table.is_complex() \
            or page_table.dtype is torch.bool:
        got = f"{page_table.dtype} tensor" if isinstance(page_table, torch.Tensor) else type(page_table).__name__
        raise FactoryError(f"page_table: expected an integer torch tensor {shape} (the paged plan's), got {got}")
    if list(page_table.shape) != shape:
        raise FactoryError(f"page_table: expected shape {shape} (B, max_blocks of the plan), got {list(page_table.shape)}")
    table = page_table.detach().cpu().to(torch.int64)
    wide = (table < -(1 << 31)) | (table >= 1 << 31)
    if bool(wide.any()):
        b, j = (int(i) for i in wide.nonzero()[0])
        raise FactoryError(f"page_table[{b}, {j}]: expected an int32 value, got {int(table[b, j])}")
    # the entries the users' positions reach must be block ids; the kernels never read the others
    # (validate.reached_blocks); positions read by the kernels (plan.cur_pos None): the kernels guard
    for b, pos in enumerate(plan.cur_pos or ()):
        for j in reached_blocks(int(pos), plan.block_size, plan.sliding_window_size, plan.num_tokens):
            if not 0 <= int(table[b, j]) < plan.num_blocks:
                raise FactoryError(f"page_table[{b}, {j}]: expected a block id in 0..{plan.num_blocks - 1} "
                                   f"(user {b} at position {pos} reads it), got {int(table[b, j])}")
    return table.numpy().astype("<i4").tobytes()


def sink_tiles(plan: DecodePlan, attention_sink: Any) -> TileTensor:
    """The sink as the kernels read it: bf16 tiles [NH, 32], the head's logit in column 0.
    Takes a torch float tensor [NH] or [NH, 32] (column 0) or a TileTensor [NH, 32]."""
    nh = plan.num_q_heads
    if isinstance(attention_sink, TileTensor):
        attention_sink = to_torch(attention_sink)
    if not isinstance(attention_sink, torch.Tensor) or not attention_sink.is_floating_point():
        got = f"{attention_sink.dtype} tensor" if isinstance(attention_sink, torch.Tensor) else type(attention_sink).__name__
        raise FactoryError(f"attention_sink: expected a float tensor [NH={nh}] or [NH={nh}, 32], got {got}")
    shape = list(attention_sink.shape)
    if shape == [nh]:
        column0 = attention_sink
    elif shape == [nh, TILE]:
        column0 = attention_sink[:, 0]
    else:
        raise FactoryError(f"attention_sink: expected shape [{nh}] or [{nh}, 32], got {shape}")
    tile = torch.zeros(nh, TILE, dtype=torch.float32)
    tile[:, 0] = column0.detach().cpu().to(torch.float32)
    return from_torch(tile, DataType.bfloat16)


def mask_shape(plan: DecodePlan) -> tuple[int, int, int, int]:
    """The attn_mask tensor of a plan with a mask: [attn_mask_batch, 1, NH, S]."""
    return (plan.attn_mask_batch, 1, plan.num_q_heads, plan.seq_len)


def mask_tiles(plan: DecodePlan, attn_mask: Any) -> TileTensor:
    """The additive mask as the reader streams it: bf16 tiles [B or 1, 1, NH, S] (rows are heads).
    Takes a torch float tensor (stored as bfloat16) or a bfloat16 TileTensor; values must be finite
    or -inf (a NaN or +inf would turn whole rows into NaN on the chip)."""
    shape = mask_shape(plan)
    if isinstance(attn_mask, TileTensor):
        mask = expect_tile_tensor("attn_mask", attn_mask, shape, DataType.bfloat16)
        values = to_torch(mask)
    elif isinstance(attn_mask, torch.Tensor) and attn_mask.is_floating_point():
        if tuple(attn_mask.shape) != shape:
            raise FactoryError(f"attn_mask: expected shape {list(shape)} (from the plan), got {list(attn_mask.shape)}")
        values = attn_mask.detach().cpu().to(torch.bfloat16).to(torch.float32)
        mask = from_torch(values, DataType.bfloat16)
    else:
        got = f"{attn_mask.dtype} tensor" if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
        raise FactoryError(f"attn_mask: expected a float tensor or bfloat16 TileTensor {list(shape)}, got {got}")
    if bool(torch.isnan(values).any()) or bool(torch.isposinf(values).any()):
        raise FactoryError("attn_mask: expected finite values or -inf, got NaN or +inf entries")
    return mask


def kv_shapes(plan: DecodePlan) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """K and V shapes: [B or 1, NKV, S, D/Dv], or [num_blocks, NKV, block_size, D/Dv] when paged."""
    if plan.paged:
        lead, rows = plan.num_blocks, plan.block_size
    else:
        lead, rows = (1 if plan.share_cache else plan.batch), plan.seq_len
    nkv = plan.num_kv_heads
    return (lead, nkv, rows, plan.head_dim), (lead, nkv, rows, plan.head_dim_v)
