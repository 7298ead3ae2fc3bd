"""paged_fill_cache's program description: the key-tile rows dealt over the cores, the CBs, the two
kernels' arguments (one `Program` for the host runtime and the device)."""

from __future__ import annotations

from typing import Optional

from ttdecode.core import formats
from ttdecode.core.paths import kernels_dir
from ttdecode.core.program_description import (
    BufferAddress, CircularBuffer, CoreCoord, CoreRangeSet, DramTensor, Kernel, KernelKind, Program,
)
from ttdecode.core.tensor import as_tile_tensor
from ttdecode.ops.cache_write import cache_tensors, check_cbs_fit, int_tensors, int_words_cb
from ttdecode.kv_pool import HALF_TILE_BLOCK
from ttdecode.ops.paged_fill.validate import FillInputs

#: Circular-buffer indices (kernels/paged_fill/common.hpp numbers them the same).
FILL_CBS = {"rows": 0, "page_table": 1}
#: Common runtime-arg counts: reader the rows' address; writer the pool, the page table, the user.
READER_COMMON_ARGS = 1
WRITER_COMMON_ARGS = 3
#: The writer's common arg holding the user (batch_idx), patched per call on a device.
USER_ARG = 2
#: Key-tile rows in flight per core (cb_rows slots).
ROW_SLOTS = 2


def core_rows(num_rows: int, grid: tuple[int, int]) -> dict[CoreCoord, tuple[int, int]]:
    """`num_rows` key-tile rows dealt in consecutive runs over the first min(rows, cores) cores of the
    grid (row-major): core -> (first row, row count), the counts differing by at most one."""
    gx, gy = grid
    n = min(num_rows, gx * gy)
    out, first = {}, 0
    for i in range(n):
        count = num_rows // n + (1 if i < num_rows % n else 0)
        out[CoreCoord(i % gx, i // gx)] = (first, count)
        first += count
    return out


def input_images(inp: FillInputs) -> dict[str, bytes]:
    """The byte images of the program's inputs (the host runtime's): the rows, the page table, the pool."""
    return {"input": as_tile_tensor(inp.fill).data,
            "page_table": inp.page_table.numpy().astype("<i4").tobytes(),
            "cache": as_tile_tensor(inp.cache).data}


def _half_block_defines(inp: FillInputs) -> dict[str, str]:
    """Block 16 (a padded tile per block): the writer's FILL_BLOCKS, the blocks the prompt fills (ceil(S / 16))."""
    if inp.block_size != HALF_TILE_BLOCK:
        return {}
    return {"FILL_BLOCKS": str(-(-inp.fill_len // HALF_TILE_BLOCK))}


def build_program(inp: FillInputs, images: Optional[dict[str, bytes]] = None,
                  grid: tuple[int, int] = (8, 8)) -> Program:
    """The one program of a call; `images` None describes it without input bytes (the device path).
    The pool is written in place; the rows, NKV x ceil(S / 32) key-tile rows of D / 32 tiles, are dealt
    over the cores (`core_rows`)."""
    nkv, dt, st = inp.num_kv_heads, inp.d_tiles, inp.seq_tiles
    tile = formats.tile_size(inp.cache_dtype)
    rows = core_rows(nkv * st, grid)
    where = CoreRangeSet.of(list(rows))
    cbs = [CircularBuffer(FILL_CBS["rows"], where, inp.cache_dtype, tile, ROW_SLOTS * dt),
           int_words_cb(FILL_CBS["page_table"], where, inp.max_blocks)]
    check_cbs_fit(cbs, "cache_tensor", "a head_dim and page-table width", f"D={inp.cache_shape[3]}, "
                  f"{inp.max_blocks} blocks")
    src = kernels_dir() / "paged_fill"
    per_core = {c: [first, count] for c, (first, count) in rows.items()}
    writer_ct = {"d_tiles": dt, "tile_bytes": tile, "seq_tiles": st, "num_kv_heads": nkv,
                 "block_size": inp.block_size, "max_blocks": inp.max_blocks,
                 "key_row_pages": int(inp.kv_pages == "key_row")}
    writer_common = [BufferAddress("cache"), BufferAddress("page_table"), inp.batch_idx]
    assert len(writer_common) == WRITER_COMMON_ARGS
    kernels = [
        Kernel("fill_reader", src / "reader.cpp", KernelKind.READER, where, runtime_args=per_core,
               common_runtime_args=[BufferAddress("input")],
               named_compile_time_args={"d_tiles": dt, "tile_bytes": tile}),
        Kernel("fill_writer", src / "writer.cpp", KernelKind.WRITER, where, runtime_args=dict(per_core),
               common_runtime_args=writer_common, named_compile_time_args=writer_ct,
               defines=_half_block_defines(inp)),
    ]
    image = (lambda name: None) if images is None else images.__getitem__
    rows_shape = (1, nkv, inp.fill_len, inp.cache_shape[3])
    tensors = [
        DramTensor("input", inp.cache_dtype, tile, formats.num_tiles(rows_shape), rows_shape, "tile", image("input")),
        *int_tensors(inp.batch, inp.max_blocks, True, image, with_positions=False),
        *cache_tensors(("cache",), inp.cache_dtype, inp.cache_shape, inp.kv_pages, image),
    ]
    return Program(kernels=kernels, circular_buffers=cbs, semaphores=[], tensors=tensors)
