"""Decode-step append of one K or V row per user: ``ttdecode.paged_update_cache``, one Metalium program per call.

What it does (``ttnn.experimental.paged_update_cache``'s job, as tt-transformers calls it each decode
step, once for K and once for V, with its argument names): user b's new rows ``input_tensor[0, b]``
(``[NKV, D]``, bfloat16, already rotated) go to row ``p % 32`` of the cache tile holding position
``p = update_idxs[b]`` of each KV head: in a paged pool ``[num_blocks, NKV, block_size, D]`` through the
user's page-table row (block ``page_table[b, p // block_size]``, row ``p % block_size``), in a contiguous
cache ``[B, NKV, S, D]`` at ``[b, h, p]``. A user at a negative position writes nothing.

The cache's DRAM pages are tiles (``kv_pages="tile"``, ttnn's interleaved cache) or key-tile rows
(``kv_pages="key_row"``; with a page table the bank-local pool of ``ttdecode.kv_pool``).

Numerics (the chip's; the host runtime follows them): the bf16 rows pass DST exactly and the packer
rounds them once to the cache's format; in bfloat8_b / bfloat4_b a face row (16 values) is one
shared-exponent group, so only the two groups of the written row change and every other byte of the
cache stays as it was (the writer copies the row's exponent bytes and codes into the cache tile).

Program (`build_program`): the users dealt over the grid's cores (core i: users i, i + n, ...); kernels
``kernels/paged_update/{reader,compute,writer}.cpp``:

===========  =====================================  ==========  ==========================
name         shape                                  layout      format
===========  =====================================  ==========  ==========================
rows         [1, B, NKV, D]                         tile        bfloat16
cur_pos      [B] int32                              row-major   4-byte words
page_table   [B, max_blocks] int32 (paged only)     row-major   4-byte words
cache        the cache, updated in place            tile or     bfloat16, bfloat8_b or
                                                    key_row     bfloat4_b
===========  =====================================  ==========  ==========================

Checks before any byte is written (host values): shapes and formats, each position within the user's
cache, (host table) each written block id inside the pool, and no cache tile written by two users in
one call. Positions or a page table on the device are not read back: not checked (the kernels write
where they say, as ttnn's op).
"""

from __future__ import annotations

from typing import Any

from ttdecode import backend as backends
from ttdecode.core.checks import check_choice, check_grid
from ttdecode.core.tensor import TileTensor, as_tile_tensor, from_torch, to_torch
from ttdecode.ops.cache_write import run_on_backend
from ttdecode.ops.paged_update.device_step import run_update
from ttdecode.ops.paged_update.program_factory import build_program, input_images
from ttdecode.ops.paged_update.validate import UpdateInputs, validate
from ttdecode.runtime import run_program

__all__ = ["paged_update_cache"]


def _run_host(inp: UpdateInputs, grid: tuple[int, int]) -> TileTensor:
    result = run_program(build_program(inp, input_images(inp), grid))
    return TileTensor(inp.cache_shape, inp.cache_dtype, result.tensors["cache"])


def _run_reference(inp: UpdateInputs) -> TileTensor:
    """The rows written in torch and the cache packed again by ``from_torch`` (its rounding, not the
    packer's: within one step of the cache's format of the device's and host runtime's)."""
    cache = to_torch(as_tile_tensor(inp.cache)).float().clone()
    rows = to_torch(as_tile_tensor(inp.rows)).float()[0]  # [B, NKV, D]
    for b, p in enumerate(inp.positions):
        if p < 0:
            continue
        if inp.paged:
            cache[int(inp.page_table[b, p // inp.block_size]), :, p % inp.block_size] = rows[b]
        else:
            cache[b, :, p] = rows[b]
    return from_torch(cache, inp.cache_dtype)


def paged_update_cache(cache_tensor: Any, input_tensor: Any, *, update_idxs: Any = None,
                       update_idxs_tensor: Any = None, page_table: Any = None, kv_pages: str = "tile",
                       grid: tuple[int, int] = (8, 8), backend: str = "auto") -> Any:
    """Write each user's new K (or V) rows at its position; see the module doc.

    Args:
        cache_tensor: a paged pool ``[num_blocks, NKV, block_size, D]`` (with `page_table`) or a contiguous
            cache ``[B, NKV, S, D]``: a TileTensor, or a TILE ttnn device tensor (interleaved DRAM for
            kv_pages "tile"; ``ttdecode.to_bank_local`` for "key_row"), in bfloat16 / bfloat8_b / bfloat4_b.
        input_tensor: the new rows ``[1, B, NKV, D]`` in bfloat16 (a torch float tensor is taken as bfloat16;
            on a device any memory config: a sharded one is copied to DRAM first).
        update_idxs: B ints, the users' positions (negative: no write); or `update_idxs_tensor`: int ``[B]``
            (a torch tensor, or an int32 ROW_MAJOR ttnn device tensor used where it lies).
        page_table: ``[B, max_blocks]`` int (torch, or an int32 ROW_MAJOR ttnn device tensor) for a paged pool.
        kv_pages: the cache's DRAM pages: "tile" or "key_row" (bank-local with a page table).
        grid: the compute grid the users are dealt over. backend: "auto" | "host" | "device" | "reference".

    Returns:
        The cache with the rows written: host and reference a new TileTensor (`cache_tensor` unchanged);
        the device writes `cache_tensor` in place and returns it.
    """
    check_choice("backend", backend, backends.BACKENDS)
    check_grid("grid", grid)
    inp = validate(cache_tensor, input_tensor, update_idxs=update_idxs, update_idxs_tensor=update_idxs_tensor,
                   page_table=page_table, kv_pages=kv_pages)
    return run_on_backend(backend, cache_tensor, input_tensor, inp, grid, reference=_run_reference, device=run_update,
                          host=_run_host)
