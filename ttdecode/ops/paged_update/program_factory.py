"""paged_update_cache's program description: the users dealt over the cores, the CBs, the three kernels'
arguments (one `Program` for the host runtime and the device)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.paths import kernels_dir
from ttdecode.core.program_description import (
    BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, CoreRangeSet, DramTensor, Kernel, KernelKind,
    NocX, NocY, Program,
)
from ttdecode.core.tensor import as_tile_tensor
from ttdecode.ops.cache_write import cache_tensors, check_cbs_fit, int_tensors, int_words_cb
from ttdecode.ops.paged_update.validate import TILE, UpdateInputs

#: Circular-buffer indices (kernels/paged_update/common.hpp numbers them the same).
UPDATE_CBS = {"rows": 0, "packed": 1, "cache": 2, "pos": 3, "page_table": 4}
#: Common runtime-arg counts: reader the new rows; writer the cache, the positions, the page table (0
#: without paging).
READER_COMMON_ARGS = 1
WRITER_COMMON_ARGS = 3
#: The compute kernel copies bf16 tiles through DST (exact in any DST mode) and packs them to the
#: cache's format: no arithmetic for a fidelity or DST setting to change.
COMPUTE = ComputeSettings()


def core_users(batch: int, grid: tuple[int, int]) -> dict[CoreCoord, list[int]]:
    """Users dealt over the first min(B, cores) cores of the grid (row-major): core i gets i, i + n, ..."""
    gx, gy = grid
    n = min(batch, gx * gy)
    return {CoreCoord(i % gx, i // gx): list(range(i, batch, n)) for i in range(n)}


def kv_row_tiles(inp: UpdateInputs) -> int:
    """Tile rows of one user's new rows (its NKV heads sit in tile rows, 32 a tile row)."""
    return -(-inp.num_kv_heads // TILE)


def input_images(inp: UpdateInputs) -> dict[str, bytes]:
    """The byte images of the program's inputs (the host runtime's): rows, positions, page table, cache."""
    images = {"rows": as_tile_tensor(inp.rows, DataType.bfloat16).data,
              "cur_pos": np.asarray(inp.positions, dtype="<i4").tobytes(),
              "cache": as_tile_tensor(inp.cache).data}
    if inp.paged:
        images["page_table"] = inp.page_table.numpy().astype("<i4").tobytes()
    return images


def _circular_buffers(inp: UpdateInputs, where: CoreRangeSet) -> list[CircularBuffer]:
    """Two slots of a tile row of new rows (bf16) and packed (cache format), one cache tile, the positions
    and (paged) one page-table row; refuses a head_dim whose CBs exceed one core's L1."""
    dt, cache_tile = inp.d_tiles, formats.tile_size(inp.cache_dtype)
    cbs = [CircularBuffer(UPDATE_CBS["rows"], where, DataType.bfloat16, 2048, 2 * dt),
           CircularBuffer(UPDATE_CBS["packed"], where, inp.cache_dtype, cache_tile, 2 * dt),
           CircularBuffer(UPDATE_CBS["cache"], where, inp.cache_dtype, cache_tile, 1),
           int_words_cb(UPDATE_CBS["pos"], where, inp.batch)]
    if inp.paged:
        cbs.append(int_words_cb(UPDATE_CBS["page_table"], where, inp.max_blocks))
    check_cbs_fit(cbs, "cache_tensor", "a head_dim and page-table width", f"D={inp.head_dim}, {inp.max_blocks} blocks")
    return cbs


#: New rows held height-sharded in L1: (the holder cores in shard order, tiles per shard). None: DRAM.
RowShards = Optional[tuple[tuple[CoreCoord, ...], int]]


def build_program(inp: UpdateInputs, images: Optional[dict[str, bytes]] = None,
                  grid: tuple[int, int] = (8, 8), rows_shards: RowShards = None) -> Program:
    """The one program of a call; `images` None describes it without input bytes (the device path). The
    cache is written in place; the users are dealt over the cores (`core_users`). `rows_shards`: the new
    rows read from their L1 shards (the holders' NoC coordinates follow the reader's common arg)."""
    users = core_users(inp.batch, grid)
    where = CoreRangeSet.of(list(users))
    dt, nkv, rt = inp.d_tiles, inp.num_kv_heads, kv_row_tiles(inp)
    src = kernels_dir() / "paged_update"
    writer_ct = {"d_tiles": dt, "num_kv_heads": nkv, "batch": inp.batch, "paged": int(inp.paged),
                 "seq_tiles": 0 if inp.paged else inp.cache_shape[2] // TILE, "block_size": inp.block_size,
                 "max_blocks": inp.max_blocks, "key_row_pages": int(inp.kv_pages == "key_row"),
                 "cache_tile_bytes": formats.tile_size(inp.cache_dtype)}
    writer_common = [BufferAddress("cache"), BufferAddress("cur_pos"), BufferAddress("page_table") if inp.paged else 0]
    assert len(writer_common) == WRITER_COMMON_ARGS
    per_core = {c: [len(u), *u] for c, u in users.items()}
    reader_common: list = [BufferAddress("rows")]
    defines = {}
    if rows_shards is not None:
        holders, pages = rows_shards
        defines = {"ROWS_SHARDS": str(len(holders)), "ROWS_SHARD_PAGES": str(pages),
                   "ROWS_SHARD_ARGS": str(len(reader_common))}
        reader_common += [a for c in holders for a in (NocX(c), NocY(c))]
    kernels = [
        Kernel("update_reader", src / "reader.cpp", KernelKind.READER, where, runtime_args=per_core,
               common_runtime_args=reader_common, defines=defines,
               named_compile_time_args={"d_tiles": dt, "kv_row_tiles": rt}),
        Kernel("update_writer", src / "writer.cpp", KernelKind.WRITER, where, runtime_args=dict(per_core),
               common_runtime_args=writer_common, named_compile_time_args=writer_ct),
        Kernel("update_compute", src / "compute.cpp", KernelKind.COMPUTE, where,
               runtime_args={c: [len(u)] for c, u in users.items()}, compute=COMPUTE,
               named_compile_time_args={"d_tiles": dt, "kv_row_tiles": rt}),
    ]
    return Program(kernels=kernels, circular_buffers=_circular_buffers(inp, where), semaphores=[],
                   tensors=_tensors(inp, images, rows_shards))


def _tensors(inp: UpdateInputs, images: Optional[dict[str, bytes]], rows_shards: RowShards) -> list[DramTensor]:
    """The tensors: the new rows [1, B, NKV, D] bf16 (in DRAM or L1 shards), the positions, (paged) the page
    table, the cache written in place; their bytes from `images` (None: described without bytes)."""
    image: Any = (lambda name: None) if images is None else images.__getitem__
    rows_shape = (1, inp.batch, inp.num_kv_heads, inp.head_dim)
    rows = DramTensor("rows", DataType.bfloat16, 2048, formats.num_tiles(rows_shape), rows_shape, "tile", image("rows"),
                      shard_cores=() if rows_shards is None else tuple(rows_shards[0]),
                      shard_pages=0 if rows_shards is None else rows_shards[1])
    return [rows, *int_tensors(inp.batch, inp.max_blocks, inp.paged, image),
            *cache_tensors(("cache",), inp.cache_dtype, inp.cache_shape, inp.kv_pages, image)]
