"""paged_fill_cache's argument checks: the pool, the prompt's rows, the page table and the user ->
`FillInputs`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ttdecode.core.checks import TensorMeta, check_int, describe, fail
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import TileTensor, from_torch
from ttdecode.config import KV_PAGES
from ttdecode.ops.cache_write import TILE, cache_meta, check_placement, host_table
from ttdecode.kv_pool import check_pool_rows


@dataclass
class FillInputs:
    """The validated arguments of one call (shapes in elements)."""

    cache_shape: tuple[int, int, int, int]  # [num_blocks, NKV, block_size, D]
    cache_dtype: DataType
    fill_len: int                  # S: the prompt's positions
    batch: int                     # B: the page table's users
    max_blocks: int                # the page table's width
    batch_idx: int                 # the user whose page-table row is followed
    kv_pages: str                  # the pool's DRAM pages: "tile" or "key_row" (bank-local)
    cache: Any                     # the caller's pool (TileTensor or ttnn device tensor)
    fill: Any                      # [1, NKV, S, D] in the pool's format (TileTensor or ttnn device tensor)
    page_table: Optional[torch.Tensor]  # int64 [B, max_blocks] on the host; None: on the device
    device_tensors: bool           # the pool and the rows are ttnn device tensors
    device_args: dict[str, Any] = field(default_factory=dict)  # "page_table" -> a ttnn device tensor

    @property
    def num_kv_heads(self) -> int:
        return self.cache_shape[1]

    @property
    def block_size(self) -> int:
        return self.cache_shape[2]

    @property
    def d_tiles(self) -> int:
        return self.cache_shape[3] // TILE

    @property
    def seq_tiles(self) -> int:
        """Tile rows of the prompt per KV head: ceil(S / 32) (the last one written whole)."""
        return -(-self.fill_len // TILE)


def _rows(fill: TensorMeta, nkv: int, d: int, dtype: DataType) -> Any:
    """The prompt's rows [1, NKV, S, D], S >= 1, in the pool's format (a torch float tensor on the host is
    packed in it). Returns the tensor the kernels read."""
    if len(fill.shape) != 4 or fill.shape[0] != 1 or fill.shape[1] != nkv or fill.shape[3] != d or fill.shape[2] < 1:
        raise fail("input_tensor", f"shape [1, NKV={nkv}, S >= 1, D={d}]", list(fill.shape))
    if fill.kind == "torch":
        if fill.dtype not in ("float32", "float64", "bfloat16"):
            raise fail("input_tensor", "a float tensor", fill.dtype, TypeError)
        return from_torch(fill.obj, dtype)
    if fill.dtype != dtype.value:
        raise fail("input_tensor", f"the pool's format {dtype.value} (the fill copies tiles; typecast first)",
                   fill.dtype, TypeError)
    return fill.obj


def _table(page_table: Any, batch_idx: Any) -> tuple[Optional[torch.Tensor], int, int, int, dict[str, Any]]:
    """The page table [B, max_blocks] int (host torch, or int32 ROW_MAJOR on the device) and batch_idx in
    0..B-1. Returns (the host table as int64 or None, B, max_blocks, batch_idx, device args)."""
    meta = describe("page_table", page_table)
    if len(meta.shape) != 2 or meta.shape[0] < 1 or meta.shape[1] < 1:
        raise fail("page_table", "shape [B, max_blocks] (both >= 1)", list(meta.shape))
    b, width = meta.shape
    user = check_int("batch_idx", batch_idx)
    if not 0 <= user < b:
        raise fail("batch_idx", f"a user in 0..{b - 1} (page_table's rows)", user)
    if meta.kind == "ttnn":
        import ttnn  # a ttnn tensor came in, so ttnn is imported already

        if (not ttnn.is_tensor_storage_on_device(page_table) or page_table.dtype != ttnn.int32
                or page_table.layout != ttnn.ROW_MAJOR_LAYOUT):
            raise fail("page_table", "an int32 ROW_MAJOR ttnn tensor on the device (or a host int tensor)",
                       f"{page_table.dtype} {page_table.layout}", TypeError)
        return None, b, width, user, {"page_table": page_table}
    return host_table(meta, page_table), b, width, user, {}


def validate(cache: Any, fill: Any, page_table: Any, batch_idx: Any, kv_pages: Any) -> FillInputs:
    """Every rule of `paged_fill_cache`; raises naming the argument, expected and got. In order: the
    pool (shape, format), kv_pages, the rows (shape, format), the page table and the user, the prompt's
    length against the user's blocks and (host table) each written block id inside the pool, and
    where the tensors live (all on one device, or all on the host)."""
    meta = describe("cache_tensor", cache)
    shape, dtype = cache_meta(meta, "pool", "shape [num_blocks, NKV, block_size, D] (block_size and D multiples "
                              "of 32; block_size 16 too)")
    if kv_pages not in KV_PAGES:
        raise fail("kv_pages", f"one of {list(KV_PAGES)}", repr(kv_pages))
    check_pool_rows("cache_tensor", shape, True)
    rows_meta = describe("input_tensor", fill)
    rows = _rows(rows_meta, shape[1], shape[3], dtype)
    table, b, width, user, device_args = _table(page_table, batch_idx)
    s = rows_meta.shape[2]
    if s > width * shape[2]:
        raise fail("input_tensor", f"S <= {width * shape[2]} positions (page_table's {width} blocks of "
                   f"{shape[2]})", s)
    if table is not None:
        for i in range(-(-s // shape[2])):
            blk = int(table[user, i])
            if not 0 <= blk < shape[0]:
                raise fail(f"page_table[{user}, {i}]", f"a block id in 0..{shape[0] - 1} (the prompt fills it)", blk)
    on_device = check_placement(cache, rows, meta.kind, "tile" if isinstance(rows, TileTensor) else "ttnn", "pool")
    if not on_device and device_args:
        raise fail("page_table", "a host int tensor when the pool is a host tensor", "a ttnn tensor", TypeError)
    return FillInputs(cache_shape=shape, cache_dtype=dtype, fill_len=s, batch=b, max_blocks=width, batch_idx=user,
                      kv_pages=kv_pages, cache=cache, fill=rows, page_table=table, device_tensors=on_device,
                      device_args=device_args)
