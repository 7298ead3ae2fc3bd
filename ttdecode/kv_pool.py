"""Paged KV pools ``[num_blocks, NKV, block_size, D]``: allocation, and the bank-local layout.

A paged K (or V) pool keeps its DRAM pages in one of two layouts (``kv_pages``, as the operators'
option of that name):

* "tile": a tile a page, dealt over the DRAM banks as ttnn's interleaved DRAM tensors
  (``ttnn.DRAM_MEMORY_CONFIG``; what ``ttnn.experimental.paged_update_cache`` and tt-transformers use);
* "key_row", the **bank-local** pool: a key-tile row a page (the Dt = D / 32 tiles of 32 consecutive
  positions of one (block, KV head)), page ``k = (block * NKV + h) * block_size / 32 + r`` in DRAM
  bank ``k % NB`` (NB the device's bank count, ``ttdecode.ttnn_backend.dram_banks``); on a device the
  ND-sharded ``ttdecode.ttnn_backend.key_row_memory_config`` applied to the pool's shape. Block size 16
  (`HALF_TILE_BLOCK`): one page per (block, KV head), ``k = block * NKV + h``, ttnn's padded tile row
  (rows 0-15 the block's positions, rows 16-31 padding), so a key tile of a user spans two pages
  (entries 2t and 2t + 1 of its page-table row) that may lie in two banks.

On the host a pool is a `TileTensor` whose bytes are the tile-order image either way (tile order
already keeps a key-tile row's Dt tiles together): the layout is said by the ``kv_pages`` option
of the call that reads or writes it, so `to_bank_local` and `to_tile_pages` return a host pool as it
is. On a device they move the pages with ``ttnn.to_memory_config`` (a device copy into a new tensor;
the caller deallocates the old one when done, so both exist for a moment)::

    import ttdecode
    pool = ttdecode.allocate_kv_pool(64, 8, 64, 128, dtype=ttdecode.bfloat8_b)      # host, bank-local
    k_pool = ttdecode.allocate_kv_pool(64, 8, 64, 128, device=device)              # device, zeros
    tiles = ttdecode.to_tile_pages(k_pool)           # interleaved tile pages (e.g. for ttnn's ops)
    k_pool = ttdecode.to_bank_local(tiles)           # and back
    ttdecode.rotary_kv_append(k, v, k_pool, v_pool, page_table=table, kv_pages="key_row", ...)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from ttdecode.config import KV_PAGES, SDPAProgramConfig
from ttdecode.core.checks import fail
from ttdecode.core.formats import DataType, DTypeLike, as_data_type, num_tiles, tile_size
from ttdecode.core.tensor import TileTensor, ttnn_data_type
from ttdecode.ttnn_backend.tensors import is_key_row_memory_config, key_row_memory_config
from ttdecode.ttnn_env import require_ttnn

__all__ = ["allocate_kv_pool", "to_bank_local", "to_tile_pages", "is_bank_local", "pages_program_config",
           "POOL_DTYPES", "HALF_TILE_BLOCK", "check_pool_rows", "page_table_blocks", "tile_rows_per_block"]

#: Formats a pool may hold (the caches' formats of the operators that write it).
POOL_DTYPES = (DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b)

#: The one block size below a key tile: ttnn's ``[num_blocks, NKV, 16, D]`` pool in the TILE layout, one tile
#: row per (block, KV head) whose rows 16-31 are padding (the DRAM bytes of a block of 32), in either
#: kv_pages layout (in key-row pages: a page per (block, KV head)).
HALF_TILE_BLOCK = 16


def page_table_blocks(blocks: int, block_size: int) -> int:
    """Page-table entries per user for `blocks` blocks of `block_size` positions: `blocks`, rounded up to an
    even count for HALF_TILE_BLOCK (two 16-position blocks make one key tile: FlashDecode takes an even
    count, whole key tiles per user). The extra entry holds no block of a decoder (its positions stay below
    max_seq_len), and FlashDecode reads only the blocks up to each user's position."""
    return blocks + blocks % 2 if block_size == HALF_TILE_BLOCK else blocks


def tile_rows_per_block(block_size: int) -> int:
    """Tile rows of one (block, KV head) in a pool of `block_size`-position blocks: block_size / 32, or 1
    for HALF_TILE_BLOCK (the padded tile)."""
    return -(-block_size // 32)


def check_pool_rows(name: str, shape: tuple[int, ...], paged: bool) -> None:
    """A cache's positions (dim 2 of `shape`): a multiple of 32, or HALF_TILE_BLOCK for a paged pool (in
    either kv_pages layout: a padded tile row per (block, KV head), in key-row pages a page of its own).
    Raises ValueError naming `name`."""
    rows = shape[2]
    if rows % 32 == 0:
        return
    if rows != HALF_TILE_BLOCK or not paged:
        raise fail(name, "S (contiguous) a multiple of 32, or block_size (paged) 16 or a multiple of 32",
                   list(shape))


def _check_dims(name: str, dims: tuple[int, ...]) -> None:
    """[num_blocks, NKV, block_size, D]: positive ints, block_size 16 or a multiple of 32, D a multiple of 32."""
    if len(dims) != 4 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in dims):
        raise fail(name, "4 positive ints [num_blocks, NKV, block_size, D]", list(dims))
    if (dims[2] % 32 and dims[2] != HALF_TILE_BLOCK) or dims[3] % 32:
        raise fail(name, "block_size and D multiples of 32 (a key-tile row holds 32 positions; block_size 16 "
                   "too: ttnn's padded tile row per block)", list(dims))


def allocate_kv_pool(num_blocks: int, num_kv_heads: int, block_size: int, head_dim: int, *,
                     dtype: DTypeLike = DataType.bfloat8_b, kv_pages: str = "key_row",
                     device: Optional[Any] = None) -> Any:
    """A zero-filled paged pool ``[num_blocks, num_kv_heads, block_size, head_dim]`` in `dtype`.

    Args:
        num_blocks, num_kv_heads, block_size, head_dim: the pool's shape (block_size and head_dim
            multiples of 32, or block_size 16: ttnn's padded tile row per block; elements).
        dtype: bfloat16, bfloat8_b or bfloat4_b (a ttdecode DataType or its name).
        kv_pages: "key_row" (bank-local, the default) or "tile" (ttnn's interleaved tile pages).
        device: None for a host `TileTensor`; a ttnn device for a TILE ttnn tensor in DRAM
            (``ttnn.zeros`` in `key_row_memory_config` or ``ttnn.DRAM_MEMORY_CONFIG``).
    """
    dims = (num_blocks, num_kv_heads, block_size, head_dim)
    _check_dims("shape", dims)
    dt = as_data_type(dtype, "dtype")
    if dt not in POOL_DTYPES:
        raise fail("dtype", f"one of {[d.value for d in POOL_DTYPES]}", dt.value, TypeError)
    if kv_pages not in KV_PAGES:
        raise fail("kv_pages", f"one of {list(KV_PAGES)}", repr(kv_pages))
    check_pool_rows("shape", dims, True)
    if device is None:
        return TileTensor(dims, dt, bytes(num_tiles(dims) * tile_size(dt)))  # zero bytes: 0.0 in every format
    ttnn = require_ttnn()
    mem = key_row_memory_config(ttnn, device, head_dim) if kv_pages == "key_row" else ttnn.DRAM_MEMORY_CONFIG
    return ttnn.zeros(list(dims), dtype=getattr(ttnn, dt.value), layout=ttnn.TILE_LAYOUT, device=device,
                      memory_config=mem)


def _pool_kind(pool: Any, name: str) -> str:
    """"host" (a TileTensor) or "device" (a TILE ttnn tensor on a device in a pool format), checking the
    shape [num_blocks, NKV, block_size, D]."""
    if isinstance(pool, TileTensor):
        _check_dims(name, pool.shape)
        if pool.dtype not in POOL_DTYPES:
            raise fail(name, f"one of {[d.value for d in POOL_DTYPES]}", pool.dtype.value, TypeError)
        return "host"
    cls = type(pool)
    if cls.__name__ == "Tensor" and cls.__module__.startswith("ttnn"):
        ttnn = require_ttnn()
        if not ttnn.is_tensor_storage_on_device(pool) or pool.layout != ttnn.TILE_LAYOUT:
            raise fail(name, "a TILE ttnn tensor on a device (or a host TileTensor)",
                       f"{pool.layout} on the {'device' if ttnn.is_tensor_storage_on_device(pool) else 'host'}",
                       TypeError)
        _check_dims(name, tuple(int(v) for v in pool.shape))
        if ttnn_data_type(pool) not in POOL_DTYPES:
            raise fail(name, f"one of {[d.value for d in POOL_DTYPES]}", pool.dtype, TypeError)
        return "device"
    raise fail(name, "a TileTensor or a ttnn tensor [num_blocks, NKV, block_size, D]", type(pool).__name__,
               TypeError)


def is_bank_local(pool: Any) -> bool:
    """A device pool in `key_row_memory_config` (its device's banks); a host pool: False (a host
    TileTensor carries no page layout: the call's ``kv_pages`` says it)."""
    if _pool_kind(pool, "pool") == "host":
        return False
    ttnn = require_ttnn()
    return is_key_row_memory_config(pool.memory_config(), key_row_memory_config(ttnn, pool.device(),
                                                                                 int(pool.shape[-1])))


def to_bank_local(pool: Any) -> Any:
    """`pool` in the bank-local layout (kv_pages "key_row"). Host TileTensor: `pool` itself (the same
    bytes). Device: a new tensor, ``ttnn.to_memory_config(pool, key_row_memory_config(...))`` (a device
    copy; `pool` itself when it is bank-local already); the caller deallocates the source."""
    kind = _pool_kind(pool, "pool")
    if kind == "host" or is_bank_local(pool):
        return pool
    ttnn = require_ttnn()
    return ttnn.to_memory_config(pool, key_row_memory_config(ttnn, pool.device(), int(pool.shape[-1])))


def to_tile_pages(pool: Any) -> Any:
    """`pool` in ttnn's interleaved tile pages (kv_pages "tile"). Host TileTensor: `pool` itself.
    Device: a new tensor, ``ttnn.to_memory_config(pool, ttnn.DRAM_MEMORY_CONFIG)`` (`pool` itself when
    it is interleaved DRAM already); the caller deallocates the source."""
    if _pool_kind(pool, "pool") == "host":
        return pool
    ttnn = require_ttnn()
    if pool.memory_config() == ttnn.DRAM_MEMORY_CONFIG:
        return pool
    return ttnn.to_memory_config(pool, ttnn.DRAM_MEMORY_CONFIG)


def pages_program_config(program_config: Any, kv_pages: Any, dram_banks: int, *,
                         owner: str = "") -> SDPAProgramConfig:
    """FlashDecode's `SDPAProgramConfig` for pools in `kv_pages` (a decoder's option): `program_config`
    (None, ours or ttnn's) with its ``kv_pages`` set to `kv_pages`.

    Refused by name (ValueError; `owner` prefixes the message, e.g. "ContextParallelDecode: "):
    `kv_pages` not in KV_PAGES; a `program_config` whose own kv_pages is "key_row" while `kv_pages` is
    "tile" (the pools' layout is the decoder's option); with "key_row", a `program_config` grid (or its
    sub_core_grids) of fewer cores than the `dram_banks` DRAM banks (the bank-local read keeps one core per
    bank): pass kv_pages="tile" for such a grid."""
    if not isinstance(kv_pages, str) or kv_pages not in KV_PAGES:
        raise ValueError(f"{owner}kv_pages: expected one of {list(KV_PAGES)}, got {kv_pages!r}")
    pc = SDPAProgramConfig.coerce(program_config)
    if pc.kv_pages != kv_pages and pc.kv_pages != "tile":
        raise ValueError(f"{owner}program_config: expected kv_pages 'tile' (the default) or {kv_pages!r} (the "
                         f"pools' layout is the kv_pages argument), got {pc.kv_pages!r}")
    if kv_pages == "key_row":
        cores: Optional[int] = None
        if pc.sub_core_grids is not None:
            cores = sum((x1 - x0 + 1) * (y1 - y0 + 1) for (x0, y0), (x1, y1) in pc.sub_core_grids)
        elif pc.compute_with_storage_grid_size is not None:
            cores = pc.compute_with_storage_grid_size[0] * pc.compute_with_storage_grid_size[1]
        if cores is not None and cores < dram_banks:
            raise ValueError(f"{owner}program_config: expected a grid of at least {dram_banks} cores with "
                             f"kv_pages='key_row' (the bank-local read keeps a core per DRAM bank; kv_pages='tile' "
                             f"takes any grid), got {cores}")
    return dataclasses.replace(pc, kv_pages=kv_pages)
