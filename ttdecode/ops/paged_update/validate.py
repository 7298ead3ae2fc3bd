"""paged_update_cache's argument checks: the cache, the new rows, the positions and the page table ->
`UpdateInputs`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from ttdecode.core.checks import TensorMeta, describe, fail
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import from_torch
from ttdecode.config import KV_PAGES
from ttdecode.ops.cache_write import TILE, cache_meta, check_placement, host_table
from ttdecode.kv_pool import check_pool_rows


@dataclass
class UpdateInputs:
    """The validated arguments of one call (shapes in elements)."""

    cache_shape: tuple[int, int, int, int]  # [num_blocks, NKV, block_size, D] (paged) or [B, NKV, S, D]
    cache_dtype: DataType
    batch: int                     # B: the users (the new rows' second dim)
    paged: bool                    # a page table maps positions to blocks
    max_blocks: int                # the page table's width (0 without paging)
    kv_pages: str                  # the cache's DRAM pages: "tile" or "key_row" (bank-local when paged)
    cache: Any                     # the caller's cache (TileTensor or ttnn device tensor)
    rows: Any                      # [1, B, NKV, D] bfloat16 (TileTensor or ttnn device tensor)
    positions: Optional[tuple[int, ...]]     # per user; None: a device tensor (device_args)
    page_table: Optional[torch.Tensor]       # int64 [B, max_blocks] on the host; None: on the device or unpaged
    device_tensors: bool           # the cache and the rows are ttnn device tensors
    device_args: dict[str, Any] = field(default_factory=dict)  # "cur_pos" / "page_table" -> ttnn device tensors

    @property
    def num_kv_heads(self) -> int:
        return self.cache_shape[1]

    @property
    def head_dim(self) -> int:
        return self.cache_shape[3]

    @property
    def d_tiles(self) -> int:
        return self.cache_shape[3] // TILE

    @property
    def block_size(self) -> int:
        """Positions per block (paged) or 0."""
        return self.cache_shape[2] if self.paged else 0


def _rows(meta: TensorMeta, nkv: int, d: int) -> Any:
    """The new rows [1, B, NKV, D] in bfloat16 (a torch float tensor is taken as bfloat16). Returns the
    tensor the kernels read."""
    if len(meta.shape) != 4 or meta.shape[0] != 1 or meta.shape[2] != nkv or meta.shape[3] != d or meta.shape[1] < 1:
        raise fail("input_tensor", f"shape [1, B, NKV={nkv}, D={d}]", list(meta.shape))
    if meta.kind == "torch":
        if meta.dtype not in ("float32", "float64", "bfloat16"):
            raise fail("input_tensor", "a float tensor", meta.dtype, TypeError)
        return from_torch(meta.obj, DataType.bfloat16)
    if meta.dtype != "bfloat16":
        raise fail("input_tensor", "bfloat16 (the packer rounds the new rows to the cache's format)", meta.dtype,
                   TypeError)
    if meta.kind == "ttnn":
        import ttnn  # a ttnn tensor came in, so ttnn is imported already

        if meta.obj.layout != ttnn.TILE_LAYOUT:
            raise fail("input_tensor", "a TILE ttnn tensor", str(meta.obj.layout), TypeError)
    return meta.obj


def _device_ints(name: str, t: Any, shape: tuple[int, ...]) -> None:
    """An int32 ROW_MAJOR ttnn device tensor of `shape` (positions, a page table): metadata only."""
    import ttnn  # a ttnn tensor came in, so ttnn is imported already

    got = tuple(int(v) for v in t.shape)
    if (not ttnn.is_tensor_storage_on_device(t) or t.dtype != ttnn.int32 or t.layout != ttnn.ROW_MAJOR_LAYOUT
            or len(got) != len(shape) or any(w and g != w for g, w in zip(got, shape))):
        raise fail(name, f"an int32 ROW_MAJOR ttnn tensor {list(shape)} on the device (or host ints)",
                   f"{t.dtype} {t.layout} {list(got)}", TypeError)


def _positions(update_idxs: Any, update_idxs_tensor: Any, b: int) -> tuple[Optional[list[int]], dict[str, Any]]:
    """Exactly one of update_idxs (B ints) and update_idxs_tensor (int [B]: torch, or int32 ROW_MAJOR on
    the device). Returns (the host positions or None, device args)."""
    given = update_idxs is not None and not (isinstance(update_idxs, (list, tuple)) and len(update_idxs) == 0)
    if given == (update_idxs_tensor is not None):
        raise fail("update_idxs", "exactly one of update_idxs (B ints) and update_idxs_tensor",
                   "both" if given else "neither")
    if update_idxs_tensor is not None:
        meta = describe("update_idxs_tensor", update_idxs_tensor)
        if meta.kind == "ttnn":
            _device_ints("update_idxs_tensor", update_idxs_tensor, (b,))
            return None, {"cur_pos": update_idxs_tensor}
        if meta.kind != "torch" or update_idxs_tensor.is_floating_point() or meta.shape != (b,):
            raise fail("update_idxs_tensor", f"an int tensor [B={b}]", f"{meta.kind} {meta.dtype} {list(meta.shape)}",
                       TypeError)
        return [int(v) for v in update_idxs_tensor.tolist()], {}
    values = list(update_idxs)
    if len(values) != b or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise fail("update_idxs", f"{b} ints (one position per user)", values)
    return values, {}


def _table(page_table: Any, b: int) -> tuple[Optional[torch.Tensor], int, dict[str, Any]]:
    """The page table [B, max_blocks] int (host torch, or int32 ROW_MAJOR on the device). Returns (the
    host table as int64 or None, max_blocks, device args)."""
    meta = describe("page_table", page_table)
    if len(meta.shape) != 2 or meta.shape[0] != b or meta.shape[1] < 1:
        raise fail("page_table", f"shape [B={b}, max_blocks >= 1]", list(meta.shape))
    if meta.kind == "ttnn":
        _device_ints("page_table", page_table, (b, 0))
        return None, meta.shape[1], {"page_table": page_table}
    return host_table(meta, page_table), meta.shape[1], {}


def check_write_targets(positions: Sequence[int], shape: tuple[int, ...], table: Optional[torch.Tensor],
                        max_blocks: int, paged: bool) -> None:
    """Each user's position: negative (skip) or within its cache (S, or the table's blocks x block_size),
    its block id (host table) a block of the pool, and no cache tile written by two users in one call
    (two cores would read, change and write it back at once). Raises naming the first user at fault."""
    rows = shape[2]
    capacity = max_blocks * rows if paged else rows
    targets: dict[tuple[int, int], int] = {}
    for i, p in enumerate(positions):
        if p < 0:
            continue
        if p >= capacity:
            raise fail(f"update_idxs[{i}]", f"a position < {capacity} (the user's "
                       f"{'blocks x block_size' if paged else 'cache length S'}) or negative (no write)", p)
        if not paged:
            key = (i, p // TILE)
        elif table is None:
            continue  # the block ids stay on the device: not checked
        else:
            blk = int(table[i, p // rows])
            if not 0 <= blk < shape[0]:
                raise fail(f"page_table[{i}, {p // rows}]", f"a block id in 0..{shape[0] - 1} (user {i} writes "
                           f"position {p} there)", blk)
            key = (blk, (p % rows) // TILE)
        if key in targets:
            raise fail(f"update_idxs[{i}]", f"a cache tile no other user writes in this call (user {targets[key]} "
                       "writes the same tile)", p)
        targets[key] = i


def validate(cache: Any, rows: Any, *, update_idxs: Any = None, update_idxs_tensor: Any = None,
             page_table: Any = None, kv_pages: Any = "tile") -> UpdateInputs:
    """Every rule of `paged_update_cache`; raises naming the argument, expected and got. In order: the
    cache (shape, format), kv_pages, the new rows (shape, format), the positions, the page table, the
    write targets (host values only) and where the tensors live (all on one device, or all on the host)."""
    meta = describe("cache_tensor", cache)
    shape, dtype = cache_meta(meta, "cache", "shape [num_blocks, NKV, block_size, D] or [B, NKV, S, D] "
                              "(block_size / S and D multiples of 32; block_size 16 too)")
    if kv_pages not in KV_PAGES:
        raise fail("kv_pages", f"one of {list(KV_PAGES)}", repr(kv_pages))
    rows_meta = describe("input_tensor", rows)
    kernel_rows = _rows(rows_meta, shape[1], shape[3])
    b = rows_meta.shape[1]
    positions, device_args = _positions(update_idxs, update_idxs_tensor, b)
    paged = page_table is not None
    table, width = None, 0
    if paged:
        table, width, table_args = _table(page_table, b)
        device_args.update(table_args)
    elif shape[0] != b:
        raise fail("cache_tensor", f"[B={b}, NKV, S, D] without a page table (or pass page_table)", list(shape))
    check_pool_rows("cache_tensor", shape, paged)
    if positions is not None:
        check_write_targets(positions, shape, table, width, paged)
    on_device = check_placement(cache, rows, meta.kind, rows_meta.kind, "cache")
    if not on_device and device_args:
        name = next(iter(device_args))
        raise fail("update_idxs_tensor" if name == "cur_pos" else name, "a host value when the cache is a host tensor",
                   "a ttnn tensor", TypeError)
    return UpdateInputs(cache_shape=shape, cache_dtype=dtype, batch=b, paged=paged, max_blocks=width,
                        kv_pages=kv_pages, cache=cache, rows=kernel_rows,
                        positions=None if positions is None else tuple(positions), page_table=table,
                        device_tensors=on_device, device_args=device_args)
