"""Prompt fill of a paged KV pool: ``ttdecode.paged_fill_cache``, one Metalium program per call.

What it does (``ttnn.experimental.paged_fill_cache``'s job, as tt-transformers calls it after a prefill,
once for K and once for V, with its argument names): a prompt's K (or V) rows ``input_tensor [1, NKV,
S, D]`` of user ``batch_idx`` go into the pool ``cache_tensor [num_blocks, NKV, block_size, D]``
through the user's page-table row: position p of KV head h lands on row ``p % block_size`` of block
``page_table[batch_idx, p // block_size]``. Tiles are copied whole (no rounding: ``input_tensor`` is in
the pool's format; a torch float one on the host is packed in it first, as ``ttdecode.from_torch``
does): the ``ceil(S / 32)`` tile rows of each head, the last one with the input's padding rows (zeros)
past S when S is not a multiple of 32 -- rows a later decode step overwrites. Nothing else of the pool
changes.

The pool's DRAM pages are tiles (``kv_pages="tile"``, ttnn's interleaved pool) or key-tile rows
(``kv_pages="key_row"``, the bank-local pool of ``ttdecode.kv_pool``): the writer writes a key-tile
row as ``D / 32`` tile pages or as one page.

Program (`build_program`): the ``NKV * ceil(S / 32)`` key-tile rows dealt in runs over the grid's cores;
kernels ``kernels/paged_fill/{reader,writer}.cpp``: the reader copies a row of the input into L1, the
writer reads the user's page-table row once and writes each row where its positions live.

==========  ===========================================  ==========  ==========================
name        shape                                        layout      format
==========  ===========================================  ==========  ==========================
input       [1, NKV, S, D]                               tile        the pool's format
page_table  [B, max_blocks] int32                        row-major   4-byte words
cache       [num_blocks, NKV, block_size, D] (in place)  tile or     bfloat16, bfloat8_b or
                                                         key_row     bfloat4_b
==========  ===========================================  ==========  ==========================

Checks before any byte is written: shapes and formats, S within the user's row of the table
(``S <= max_blocks * block_size``), ``batch_idx`` a row of the table, and (host table) every block id
the prompt fills inside the pool. A page table on the device is not read back: its block ids are not
checked (the kernels write where they say, as ttnn's op).
"""

from __future__ import annotations

from typing import Any

from ttdecode import backend as backends
from ttdecode.core.checks import check_choice, check_grid
from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.tensor import TileTensor, as_tile_tensor
from ttdecode.ops.cache_write import run_on_backend
from ttdecode.ops.paged_fill.device_step import run_fill
from ttdecode.ops.paged_fill.program_factory import build_program, input_images
from ttdecode.kv_pool import HALF_TILE_BLOCK
from ttdecode.ops.paged_fill.validate import FillInputs, TILE, validate
from ttdecode.runtime import run_program

__all__ = ["paged_fill_cache"]


def _run_host(inp: FillInputs, grid: tuple[int, int]) -> TileTensor:
    result = run_program(build_program(inp, input_images(inp), grid))
    return TileTensor(inp.cache_shape, inp.cache_dtype, result.tensors["cache"])


def _half_tile_fill(inp: FillInputs, src: bytes, image: bytearray) -> None:
    """Block 16: rows 16 * half .. + 15 of input tile (h, t) to rows 0-15 of block 2t + half's tile (every
    block the prompt reaches), in each format's byte order (a block float's 64 exponent bytes, one per face
    row in face-row order, then its codes in face order); the padding rows keep their bytes."""
    size = tile_size(inp.cache_dtype)
    nkv, dt = inp.num_kv_heads, inp.d_tiles
    exp = 0 if inp.cache_dtype is DataType.bfloat16 else 64
    codes = (size - exp) // 2
    for h in range(nkv):
        for j_block in range(-(-inp.fill_len // HALF_TILE_BLOCK)):
            t, half = divmod(j_block, 2)
            block = int(inp.page_table[inp.batch_idx, j_block])
            for j in range(dt):
                at = ((h * inp.seq_tiles + t) * dt + j) * size
                to = ((block * nkv + h) * dt + j) * size
                image[to:to + exp // 2] = src[at + half * exp // 2:at + (half + 1) * exp // 2]
                image[to + exp:to + exp + codes] = src[at + exp + half * codes:at + exp + (half + 1) * codes]


def _run_reference(inp: FillInputs) -> TileTensor:
    """The tile pages copied in Python: tile j of row (h, t) of the input to the pool's tile (row k, j)
    (block 16: half tiles, `_half_tile_fill`)."""
    size = tile_size(inp.cache_dtype)
    nkv, bt, dt = inp.num_kv_heads, inp.block_size // TILE, inp.d_tiles
    src = as_tile_tensor(inp.fill).data
    image = bytearray(as_tile_tensor(inp.cache).data)
    if inp.block_size == HALF_TILE_BLOCK:
        _half_tile_fill(inp, src, image)
        return TileTensor(inp.cache_shape, inp.cache_dtype, bytes(image))
    for h in range(nkv):
        for t in range(inp.seq_tiles):
            block = int(inp.page_table[inp.batch_idx, t // bt])
            row_bytes = dt * size
            to = ((block * nkv + h) * bt + t % bt) * row_bytes
            at = (h * inp.seq_tiles + t) * row_bytes
            image[to:to + row_bytes] = src[at:at + row_bytes]
    return TileTensor(inp.cache_shape, inp.cache_dtype, bytes(image))


def paged_fill_cache(cache_tensor: Any, input_tensor: Any, page_table: Any, *, batch_idx: int,
                     kv_pages: str = "tile", grid: tuple[int, int] = (8, 8), backend: str = "auto") -> Any:
    """Write one user's prompt K (or V) into a paged pool through its page-table row; see the module doc.

    Args:
        cache_tensor: the pool ``[num_blocks, NKV, block_size, D]``: a TileTensor, or a TILE ttnn device tensor
            (interleaved DRAM for kv_pages "tile"; ``ttdecode.to_bank_local`` for "key_row"), in bfloat16
            / bfloat8_b / bfloat4_b.
        input_tensor: the prompt's rows ``[1, NKV, S, D]`` in the pool's format (host: also a torch
            float tensor, packed in it).
        page_table: ``[B, max_blocks]`` int (a torch tensor, or an int32 ROW_MAJOR ttnn device tensor).
        batch_idx: the user (a row of page_table) whose blocks receive the prompt.
        kv_pages: the pool's DRAM pages: "tile" or "key_row" (bank-local).
        grid: the compute grid the rows are dealt over. backend: "auto" | "host" | "device" | "reference".

    Returns:
        The pool with the prompt written: host and reference a new TileTensor (`cache_tensor` unchanged);
        the device writes `cache_tensor` in place and returns it.
    """
    check_choice("backend", backend, backends.BACKENDS)
    check_grid("grid", grid)
    inp = validate(cache_tensor, input_tensor, page_table, batch_idx, kv_pages)
    return run_on_backend(backend, cache_tensor, input_tensor, inp, grid, reference=_run_reference, device=run_fill,
                          host=_run_host)
