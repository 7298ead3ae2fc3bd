"""Fused RoPE + KV-cache append: ``ttdecode.rotary_kv_append``, one Metalium program per decode step.

What it does (ONNX Runtime's GQA fuses the same steps; ``UnpackQKVWithRoPEAndAppendKV`` with a packed
input): for every user b, rotate the new K heads (and Q, if given) by the user's angles,
``y = x * cos + rotate_half(x) * sin``, and write each KV head's new K and V row into the cache
tile that holds position ``cur_pos[b]``; a user at -1 writes nothing.

Conventions (``cos``/``sin`` ``[B, rotary_dim]`` always in Hugging Face's layout ``cat(c, c)``,
``c[i] = cos(theta_i * pos)``; the rotation touches the first ``rotary_dim`` columns, the rest pass):

* half-split (``rotary_interleaved=False``, Hugging Face's ``rotate_half``): pair i is
  ``(x[i], x[i + rotary_dim/2])``; ``rotate_half(x) = cat(-x2, x1)``; column c uses ``cos[:, c]``.
* interleaved pairs (``rotary_interleaved=True``, Meta's checkpoints, ONNX ``rotary_interleaved``):
  pair i is ``(x[2i], x[2i+1])``, rotated by ``theta_i``: ``rot[2i] = -x[2i+1]``,
  ``rot[2i+1] = x[2i]``; column c uses ``cos[:, c // 2]`` (the first half of the HF row).

Mapping to ttnn's rotary op. ``ttnn.experimental.rotary_embedding_llama(x, cos, sin, trans_mat,
is_decode_mode)`` computes ``x * cos + (x @ trans_mat) * sin`` on tiles: ``trans_mat`` is one
32x32 tile with ``T[2i+1, 2i] = -1`` and ``T[2i, 2i+1] = +1`` (interleaved pairs inside every
32-column tile) and cos/sin come in that interleaved layout, each angle repeated for both members
of its pair (``cos_ttnn[..., 2i] = cos_ttnn[..., 2i+1] = cos_hf[..., i]``). HF half-split
weights therefore need their Q and K output rows permuted to interleaved pairs before using it
(``ttdecode.models.llama_device_weights.rope_permutation``; q.k is unchanged). This op takes both
conventions directly: it builds the same kind of blocks (``rotate_half_blocks``: ``rot = x @ T``
with T holding only 0, +1 and -1) for the half-split too, where a block may pair two different
tiles of the head (output tile j takes its rotated values from the tile ``rotary_dim/2`` columns
away), and maps the HF cos/sin to per-column angles itself.

Numerics (the chip's; the host runtime follows them): T is applied by the FPU matmul at HiFi4 into
the fp32 DST (bf16 x in srcB, +-1 in srcA: one non-zero product per output, exact); x arrives in
DST exactly, cos/sin as float32 unpacked straight to DST (exact); ``x * cos``, ``rot * sin`` and
their sum are SFPU ops in fp32, one round-to-nearest-even each, as float32 torch computes them (the
SFPU flushes denormals). The packer then rounds once to the output's format: bf16 for ``q_rot``,
the cache's format for K and V (ties away from zero; block floats share the largest exponent of
each 16-value face row).

The append. A cache tile is read, the one row replaced, the tile written back; in bfloat8_b /
bfloat4_b a face row is one shared-exponent group, so only the two groups of that row change and
every other byte of the cache stays as it was (the writer copies the row's exponent bytes and codes;
nothing else is re-packed). Inputs are bfloat16 (``q``, ``k_new``, ``v_new`` ``[1, B, heads, D]``, or
``qkv [1, B, (NH + 2 NKV) * D]``); torch float tensors are taken as bfloat16, as the FlashDecode
API does; ``cos``/``sin`` are taken as float32. Caches: ``[B, NKV, S, D]`` (contiguous) or
``[num_blocks, NKV, block_size, D]`` with ``page_table [B, max_blocks]`` (paged), in bfloat16,
bfloat8_b or bfloat4_b, their DRAM pages tiles or key-tile rows (``kv_pages``; a paged cache in
key-tile rows is the bank-local pool of ``ttdecode.kv_pool``).

Program (`build_program`): cores of the grid each take users ``i, i + n, ...``; kernels
``kernels/rotary_append/{reader,compute,writer}.cpp`` with named compile-time args. Tensors:

===========  =====================================  ==========  =====================================
name         shape                                  layout      format
===========  =====================================  ==========  =====================================
q            [1, B, NH, D] (only with q)            tile        bfloat16
k_new/v_new  [1, B, NKV, D]                         tile        bfloat16
qkv          [1, B, (NH + 2 NKV) D] (packed only)   tile        bfloat16
cos, sin     [B, rot_tiles * 32], 1 / 0 padded      tile        float32
trans        [pairs * 32, 32]: the rotate-half      tile        bfloat16
             blocks, one per (output tile, source)
cur_pos      [B] int32 (unless the positions are    row-major   4-byte words
             the writer's runtime args)
page_table   [B, max_blocks] int32 (paged only)     row-major   4-byte words
k_cache,     the caches, updated in place           tile        the cache's format
v_cache
q_rot        [1, B, NH, D] (output, with q / qkv)   tile        bfloat16
===========  =====================================  ==========  =====================================

Every check (shapes, dtypes, positions beyond the cache, a page table too short, two users
writing one cache tile) runs before any cache byte is written -- on values the host holds; values
given as device tensors (below) are not read back, and so not checked: the kernels guard instead (a
position at or beyond the cache's capacity, or a page-table entry outside the pool, writes nothing;
no kernel reads or writes outside a tensor).

On a device (``backend="device"``, ``ttdecode.ops.rotary_append.device_step``): the program is planned
once per shape (a cached ``RotaryStep``: Program, ttnn descriptor, the rotate-half blocks uploaded
once) and each call patches addresses only. ``cur_pos`` and ``page_table`` may be int32 ROW_MAJOR
ttnn device tensors and ``cos`` / ``sin`` float32 TILE ttnn device tensors ``[B, rot_tiles * 32]``
holding the per-column angles above (``device.angles_to_device``; what the device decoder looks up
from its RoPE tables): then a step moves no data. Host positions (a list or torch ints) are the
writer's common runtime args, patched per call (no move); other host values (a torch page table,
HF-layout torch cos / sin) are uploaded, one move each per call. A call whose device tensors have the
TensorSpecs of an earlier validated call of the same options (and host positions, if any, B ints in
[-1, capacity)) skips the validation: tensor metadata only (``device_step.run_cached``), as
FlashDecode's cached call.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import TileTensor, dequantize, as_tile_tensor
from ttdecode import backend as backends
from ttdecode.core.checks import check_choice, check_grid, fail
from ttdecode.ops.rotary_append.validate import RotaryInputs, TILE, validate
from ttdecode.ops.rotary_append.program_factory import build_program, input_images, reference_rotate
from ttdecode.runtime import run_program
from ttdecode.ops.rotary_append import device_step
from ttdecode.config import KV_PAGES, host_grid_limit

__all__ = ["rotary_kv_append"]


# ---- backends ------------------------------------------------------------------------------------


def _run_host(inp: RotaryInputs, grid: tuple[int, int]) -> tuple[Optional[torch.Tensor], TileTensor, TileTensor]:
    result = run_program(build_program(inp, input_images(inp), grid))
    q_rot = None
    if inp.num_q_heads:
        shape = (1, inp.batch, inp.num_q_heads, inp.head_dim)
        q_rot = formats.unpack_tiles(result.tensors["q_rot"], DataType.bfloat16, shape).to(torch.bfloat16)
    kc = TileTensor(inp.cache_shape, inp.cache_dtype, result.tensors["k_cache"])
    vc = TileTensor(inp.cache_shape, inp.cache_dtype, result.tensors["v_cache"])
    return q_rot, kc, vc


def _new_rows(inp: RotaryInputs) -> tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
    """The dequantized new rows: q [B, NH, D] (None), k [B, NKV, D], v [B, NKV, D], float64."""
    nh, nkv, d = inp.num_q_heads, inp.num_kv_heads, inp.head_dim
    if inp.packed:
        x = dequantize(inp.x["qkv"])[0].reshape(inp.batch, nh + 2 * nkv, d)
        return x[:, :nh], x[:, nh:nh + nkv], x[:, nh + nkv:]
    q = dequantize(inp.x["q"])[0] if "q" in inp.x else None
    return q, dequantize(inp.x["k_new"])[0], dequantize(inp.x["v_new"])[0]


def replace_cache_row(image: bytearray, dtype: DataType, page: int, row: int, src_tile: bytes, src_row: int) -> None:
    """Row `row` of tile `page` of a cache image becomes row `src_row` of the tile image `src_tile`:
    the row's values (bfloat16) or its two shared exponents and codes (block floats); no other byte."""
    size = formats.tile_size(dtype)
    base = page * size
    exp_bytes = 0 if dtype is DataType.bfloat16 else formats.BFP_EXPONENT_BYTES
    row_bytes = {DataType.bfloat16: 32, DataType.bfloat8_b: 16, DataType.bfloat4_b: 8}[dtype]
    for half in range(2):
        to = ((row // 16) * 2 + half) * 16 + row % 16      # face rows in tile order
        fr = ((src_row // 16) * 2 + half) * 16 + src_row % 16
        if exp_bytes:
            image[base + to] = src_tile[fr]
        image[base + exp_bytes + to * row_bytes: base + exp_bytes + (to + 1) * row_bytes] = \
            src_tile[exp_bytes + fr * row_bytes: exp_bytes + (fr + 1) * row_bytes]


def cache_tile_index(inp: RotaryInputs, user: int, head: int, pos: int, j: int) -> int:
    """The page of the cache tile (column tile j) holding `user`'s position `pos` of KV head `head`."""
    nkv, rows, dt = inp.num_kv_heads, inp.cache_shape[2], inp.d_tiles
    if inp.paged:
        blk = int(inp.page_table[user, pos // rows])
        tile_row = (blk * nkv + head) * -(-rows // TILE) + (pos % rows) // TILE  # block 16: one padded tile row
    else:
        tile_row = (user * nkv + head) * (rows // TILE) + pos // TILE
    return tile_row * dt + j


def _run_reference(inp: RotaryInputs) -> tuple[Optional[torch.Tensor], TileTensor, TileTensor]:
    """Float64 rotation; the rows rounded into the cache format by the host tilizer (ttnn's)."""
    q, k, v = _new_rows(inp)
    rd, il = inp.rotary_dim, inp.interleaved
    q_rot = None if q is None else reference_rotate(q, inp.cos, inp.sin, rd, il).unsqueeze(0).to(torch.bfloat16)
    k = reference_rotate(k, inp.cos, inp.sin, rd, il)
    writes = [(b, p, h, j) for b, p in enumerate(inp.positions) if p >= 0
              for h in range(inp.num_kv_heads) for j in range(inp.d_tiles)]
    images = []
    for cache, rows in ((inp.k_cache, k), (inp.v_cache, v)):
        image = bytearray(as_tile_tensor(cache).data)
        if writes:
            # every new 32-value row alone in row 0 of its own tile, packed in one call
            row_tiles = torch.zeros(len(writes), TILE, TILE, dtype=torch.float64)
            for i, (b, p, h, j) in enumerate(writes):
                row_tiles[i, 0] = rows[b, h, j * TILE:(j + 1) * TILE]
            packed = formats.pack_tiles(row_tiles, inp.cache_dtype)
            size = formats.tile_size(inp.cache_dtype)
            for i, (b, p, h, j) in enumerate(writes):
                replace_cache_row(image, inp.cache_dtype, cache_tile_index(inp, b, h, p, j), p % inp.cache_shape[2] % TILE,
                                  packed[i * size:(i + 1) * size], 0)
        images.append(TileTensor(inp.cache_shape, inp.cache_dtype, bytes(image)))
    return q_rot, images[0], images[1]


def _run_device(inp: RotaryInputs, grid: tuple[int, int], key: Optional[tuple],
                tensors: Optional[dict[str, Any]]) -> tuple[Any, Any, Any]:
    """Through the cached step of the call's shape (``ttdecode.ops.rotary_append.device_step``): no rebuild
    per call, no upload of device inputs; with the call's fast `key` and `tensors` the step is kept for
    the cached-call path."""
    from ttdecode.ttnn_env import has_tenstorrent_device

    if not inp.device_tensors:
        if not has_tenstorrent_device():
            raise RuntimeError("backend 'device': no Tenstorrent device found (no /dev/tenstorrent*); use "
                               "backend='host' to run the same kernels on the host runtime")
        raise fail("k_cache", "ttnn tensors on the device for backend 'device'", "host tensors", TypeError)
    # tensors already on a device mean one is open (a card, or the mock N150 of ttdecode.testing)
    q_rot = device_step.run_rotary(inp, grid, key, tensors)
    return q_rot, inp.k_cache, inp.v_cache


def _check_grid_limit(grid: tuple[int, int], backend: str, inp: RotaryInputs) -> None:
    """`grid` within the worker grid the call runs on: the device's ``compute_with_storage_grid_size()``
    (8x10 on a Galaxy's unharvested chips), or on the host runtime a chip of the board it models
    (``ttdecode.config.host_grid_limit``). Raises ValueError naming ``grid``."""
    if backend == "device" and inp.device_tensors:
        g = inp.k_cache.device().compute_with_storage_grid_size()
        limit, where = (int(g.x), int(g.y)), "the device's compute grid (device.compute_with_storage_grid_size())"
    else:
        limit, where = host_grid_limit()
    if grid[0] > limit[0] or grid[1] > limit[1]:
        raise fail("grid", f"a grid within {where}: at most {limit[0]} columns x {limit[1]} rows", grid)


# ---- the API -------------------------------------------------------------------------------------


def rotary_kv_append(
    k_new: Any = None,
    v_new: Any = None,
    k_cache: Any = None,
    v_cache: Any = None,
    *,
    cur_pos: Any,
    cos: Any,
    sin: Any,
    page_table: Any = None,
    q: Any = None,
    qkv: Any = None,
    num_q_heads: Optional[int] = None,
    rotary_interleaved: bool = False,
    rotary_dim: Optional[int] = None,
    grid: tuple[int, int] = (8, 8),
    kv_pages: str = "tile",
    backend: str = "auto",
) -> tuple[Any, ...]:
    """Rotate the new K (and Q) rows and append K and V at each user's position; see the module doc.

    Args:
        k_new, v_new: ``[1, B, NKV, D]`` bfloat16 (torch floats are taken as bfloat16); or None with
            ``qkv``. k_cache, v_cache: ``[B, NKV, S, D]`` or paged ``[num_blocks, NKV, block_size, D]``,
            TileTensor or ttnn tensors in bfloat16 / bfloat8_b / bfloat4_b.
        cur_pos: ``[B]`` ints (list or int tensor); -1 skips the user (no cache byte written).
            Device backend: also an int32 ROW_MAJOR ttnn device tensor ``[B]`` (used in place).
        cos, sin: float ``[B, rotary_dim]`` in Hugging Face's layout ``cat(c, c)`` (taken as float32).
            Device backend: also float32 TILE ttnn device tensors ``[B, ceil(rotary_dim / 32) * 32]``
            of per-column angles for the convention (``ttdecode.ops.rotary_append.device_step.angles_to_device``).
        page_table: int ``[B, max_blocks]`` for a paged cache (device backend: also an int32
            ROW_MAJOR ttnn device tensor). q: ``[1, B, NH, D]``, rotated too.
        qkv: ``[1, B, (NH + 2 NKV) D]`` packed instead of q / k_new / v_new (``num_q_heads``, if
            given, is checked against it). rotary_interleaved: pairs (2i, 2i+1) instead of
            (i, i + rotary_dim/2). rotary_dim: rotated columns (even, <= D; default D).
        grid: the compute grid the users are dealt over (a program setting; default 8x8), within the
            device's grid (8x10 on a Galaxy chip) or, on the host runtime, the modelled board's
            (``ttdecode.config.host_grid_limit``).
        kv_pages: the caches' DRAM pages, as FlashDecode's ``SDPAProgramConfig.kv_pages``:
            "tile" (a tile a page) or "key_row" (a key-tile row a page, round robin over the
            device's DRAM banks; on a device ``ttdecode.ttnn_backend.key_row_memory_config``). With a
            paged cache "key_row" is the bank-local pool (``ttdecode.to_bank_local``): the page of
            block ``blk``, KV head h, tile row r is ``(blk * NKV + h) * block_size / 32 + r``.
        backend: "auto" | "host" | "device" | "reference" (as the FlashDecode API).

    Returns:
        ``(k_cache, v_cache)``, or ``(q_rot, k_cache, v_cache)`` with ``q`` / ``qkv``: host and
        reference give TileTensors (new images; the inputs are not modified) and ``q_rot`` as
        torch.bfloat16 ``[1, B, NH, D]``; the device updates the caller's caches in place and
        returns them, with ``q_rot`` as a ttnn tensor.
    """
    check_choice("backend", backend, backends.BACKENDS)
    check_grid("grid", grid)
    key = tensors = None
    if backend == "device":
        # a call whose device tensors have the TensorSpecs of an earlier validated call of these options
        # checks those only (device_step.run_cached)
        tensors = {"qkv": qkv, "q": q, "k_new": k_new, "v_new": v_new, "cos": cos, "sin": sin, "cur_pos": cur_pos,
                   "page_table": page_table, "k_cache": k_cache, "v_cache": v_cache}
        key = device_step.fast_key(repr((num_q_heads, rotary_interleaved, rotary_dim, grid, kv_pages)), tensors)
        q_rot = device_step.run_cached(key, tensors)
        if q_rot is not device_step.MISS:
            backends.record("device")
            return (k_cache, v_cache) if q_rot is None else (q_rot, k_cache, v_cache)
    inp = validate(k_new, v_new, k_cache, v_cache, cur_pos=cur_pos, cos=cos, sin=sin, page_table=page_table, q=q,
                   qkv=qkv, num_q_heads=num_q_heads, rotary_interleaved=rotary_interleaved, rotary_dim=rotary_dim)

    if kv_pages not in KV_PAGES:
        raise fail("kv_pages", f"one of {list(KV_PAGES)}", repr(kv_pages))
    inp.kv_pages = kv_pages
    chosen = backends.select_backend(k_new, v_new, k_cache, v_cache) if backend == "auto" else backend
    if chosen != "device" and inp.device_args:
        name = next(iter(inp.device_args))
        raise fail(name, f"a host value (torch tensor or list) for backend {chosen!r} (device tensors are "
                   "the device backend's form)", "a ttnn tensor on a device", TypeError)
    if chosen != "reference":
        _check_grid_limit(grid, chosen, inp)
    backends.record(chosen)
    if chosen == "reference":
        q_rot, kc, vc = _run_reference(inp)
    elif chosen == "device":
        q_rot, kc, vc = _run_device(inp, grid, key, tensors)
    else:
        q_rot, kc, vc = _run_host(inp, grid)
    return (kc, vc) if q_rot is None else (q_rot, kc, vc)
