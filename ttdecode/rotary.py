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
(``ttdecode.models.llama_device.rope_permutation``; q.k is unchanged). This op takes both
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
bfloat8_b or bfloat4_b.

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
cur_pos      [B] int32                              row-major   4-byte words
page_table   [B, max_blocks] int32 (paged only)     row-major   4-byte words
k_cache,     the caches, updated in place           tile        the cache's format
v_cache
q_rot        [1, B, NH, D] (output, with q / qkv)   tile        bfloat16
===========  =====================================  ==========  =====================================

Every check (shapes, dtypes, positions beyond the cache, a page table too short, two users
writing one cache tile) runs before any cache byte is written.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ttdecode import formats
from ttdecode.formats import DataType
from ttdecode.program import (
    kv_cache_tensor,
    BufferAddress,
    CircularBuffer,
    ComputeSettings,
    CoreCoord,
    CoreRangeSet,
    DramTensor,
    Kernel,
    KernelKind,
    MathFidelity,
    Program,
    unpack_to_dest_modes,
)
from ttdecode.tensor import TileTensor
from ttdecode.validate import fail

__all__ = ["rotary_kv_append", "rotate_half_blocks", "RotaryInputs", "build_program", "ROTARY_CBS", "CACHE_DTYPES"]

TILE = 32
#: Cache formats the append writes.
CACHE_DTYPES = (DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b)
#: Circular-buffer indices (kernels/rotary_append/common.hpp numbers them the same).
ROTARY_CBS = {"cos": 0, "sin": 1, "x": 2, "trans": 3, "q_out": 4, "k_out": 5, "v_out": 6, "cache": 7, "pos": 8,
              "page_table": 9}
#: The compute kernel's settings: HiFi4 makes the +-1 matmul exact (bf16 x needs both srcB fidelity
#: phases), fp32 DST for the SFPU's fp32 arithmetic, cos/sin unpacked straight to DST.
COMPUTE = ComputeSettings(math_fidelity=MathFidelity.HiFi4, fp32_dest_acc_en=True,
                          unpack_to_dest_mode=unpack_to_dest_modes([ROTARY_CBS["cos"], ROTARY_CBS["sin"]]))


# ---- the rotation --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def rotate_half_matrix(head_dim: int, rotary_dim: int, interleaved: bool) -> torch.Tensor:
    """T ``[D, D]`` float64 with ``rotate_half(x) = x @ T`` over the first ``rotary_dim`` columns
    (columns past it rotate to 0). Entries 0, +1, -1. Cached: callers must not modify it."""
    t = torch.zeros(head_dim, head_dim, dtype=torch.float64)
    half = rotary_dim // 2
    for c in range(rotary_dim):
        if interleaved:
            src, sign = (c + 1, -1.0) if c % 2 == 0 else (c - 1, 1.0)
        else:
            src, sign = (c + half, -1.0) if c < half else (c - half, 1.0)
        t[src, c] = sign
    return t


@functools.lru_cache(maxsize=32)
def rotate_half_blocks(head_dim: int, rotary_dim: int, interleaved: bool) -> tuple[tuple[int, int, torch.Tensor], ...]:
    """The non-zero 32x32 blocks of `rotate_half_matrix` as (output tile j, source tile k, block),
    sorted by j then k: ``rot tile j = sum over its pairs of x tile k @ block``. Cached (read only)."""
    t = rotate_half_matrix(head_dim, rotary_dim, interleaved)
    out = []
    for j in range(math.ceil(rotary_dim / TILE)):
        for k in range(head_dim // TILE):
            block = t[k * TILE:(k + 1) * TILE, j * TILE:(j + 1) * TILE]
            if bool(block.ne(0).any()):
                out.append((j, k, block.clone()))
    return tuple(out)


def column_angles(cs: torch.Tensor, rotary_dim: int, interleaved: bool, padded_width: int, fill: float) -> torch.Tensor:
    """HF-layout cos or sin ``[B, rotary_dim]`` as the per-column values the kernels multiply by,
    ``[B, padded_width]`` float32, columns past rotary_dim set to `fill` (cos 1, sin 0)."""
    b = cs.shape[0]
    if interleaved:
        cols = cs[:, : rotary_dim // 2].repeat_interleave(2, dim=1)
    else:
        cols = cs
    out = torch.full((b, padded_width), fill, dtype=torch.float32)
    out[:, :rotary_dim] = cols.to(torch.float32)
    return out


def reference_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
                     interleaved: bool) -> torch.Tensor:
    """Float64 ``x * cos + rotate_half(x) * sin`` for x ``[B, H, D]``, HF cos/sin ``[B, rotary_dim]``."""
    x = x.to(torch.float64)
    d = x.shape[-1]
    t = rotate_half_matrix(d, rotary_dim, interleaved)
    src, sign = t.abs().argmax(0), t.sum(0)  # column c of rotate_half(x) is sign[c] * x[src[c]]
    c = column_angles(cos.to(torch.float64), rotary_dim, interleaved, d, 1.0).to(torch.float64)
    s = column_angles(sin.to(torch.float64), rotary_dim, interleaved, d, 0.0).to(torch.float64)
    # column_angles rounds to float32 (what the kernels read); the reference takes the same values
    return x * c[:, None, :] + x[..., src] * sign * s[:, None, :]


# ---- validation ----------------------------------------------------------------------------------


@dataclass
class RotaryInputs:
    """The validated arguments of one call (shapes in the docstring of the module)."""

    batch: int
    num_q_heads: int            # 0 without q
    num_kv_heads: int
    head_dim: int
    rotary_dim: int
    interleaved: bool
    packed: bool
    cache_dtype: DataType
    cache_shape: tuple[int, ...]
    paged: bool
    positions: tuple[int, ...]
    page_table: Optional[torch.Tensor]  # int64 [B, max_blocks]
    cos: torch.Tensor           # float32 [B, rotary_dim], HF layout
    sin: torch.Tensor
    x: dict[str, Any]           # "q"/"k_new"/"v_new" or "qkv" -> the caller's tensor
    k_cache: Any
    v_cache: Any
    device_tensors: bool        # the caller's tensors are ttnn tensors on a device
    kv_pages: str = "tile"  # the caches' DRAM pages: tiles, or key-tile rows ("key_row")

    @property
    def d_tiles(self) -> int:
        return self.head_dim // TILE

    @property
    def rot_tiles(self) -> int:
        return math.ceil(self.rotary_dim / TILE)

    @property
    def max_blocks(self) -> int:
        return 0 if self.page_table is None else int(self.page_table.shape[1])

    @property
    def block_size(self) -> int:
        return self.cache_shape[2] if self.paged else 0


def _is_ttnn(x: object) -> bool:
    cls = type(x)
    return cls.__name__ == "Tensor" and cls.__module__.startswith("ttnn")


def _shape_dtype(name: str, x: Any) -> tuple[tuple[int, ...], Optional[DataType]]:
    """(shape, storage format or None for a torch tensor) of a tensor argument."""
    if isinstance(x, TileTensor):
        return x.shape, x.dtype
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise fail(name, "a float tensor", f"a {x.dtype} tensor", TypeError)
        return tuple(int(d) for d in x.shape), None
    if _is_ttnn(x):
        from ttdecode.tensor import ttnn_data_type

        return tuple(int(d) for d in x.shape), ttnn_data_type(x)
    raise fail(name, "a torch.Tensor, ttdecode TileTensor or ttnn.Tensor", type(x).__name__, TypeError)


def _check_input(name: str, x: Any, shape: tuple[int, ...]) -> None:
    got_shape, dt = _shape_dtype(name, x)
    if got_shape != shape:
        raise fail(name, f"shape {list(shape)}", list(got_shape))
    if dt is not None and dt is not DataType.bfloat16:
        raise fail(name, "bfloat16 (the rotation reads bf16 rows; torch floats are taken as bfloat16)", dt.value,
                   TypeError)


def _int_list(name: str, x: Any, n: int) -> list[int]:
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() or x.is_complex() or x.dtype is torch.bool or x.dim() != 1:
            raise fail(name, f"an int tensor [B={n}] or a list of {n} ints", f"{x.dtype} shape {list(x.shape)}",
                       TypeError)
        values = [int(v) for v in x.detach().cpu().tolist()]
    elif isinstance(x, (list, tuple)):
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in x):
            raise fail(name, f"{n} ints", repr(list(x)), TypeError)
        values = [int(v) for v in x]
    else:
        raise fail(name, f"an int tensor [B={n}] or a list of {n} ints", type(x).__name__, TypeError)
    if len(values) != n:
        raise fail(name, f"{n} positions (one per user, B={n})", len(values))
    return values


def validate(k_new: Any, v_new: Any, k_cache: Any, v_cache: Any, *, cur_pos: Any, cos: Any, sin: Any,
             page_table: Any, q: Any, qkv: Any, num_q_heads: Optional[int], rotary_interleaved: Any,
             rotary_dim: Any) -> RotaryInputs:
    """Every rule of `rotary_kv_append`; raises naming the argument, expected and got."""
    # the caches first: they fix NKV and D
    kc_shape, kc_dt = _shape_dtype("k_cache", k_cache)
    vc_shape, vc_dt = _shape_dtype("v_cache", v_cache)
    for name, dt in (("k_cache", kc_dt), ("v_cache", vc_dt)):
        if dt is None:
            raise fail(name, "a TileTensor or ttnn tensor in bfloat16 / bfloat8_b / bfloat4_b (the cache's storage "
                       "format)", "a torch tensor", TypeError)
        if dt not in CACHE_DTYPES:
            raise fail(name, f"one of {[d.value for d in CACHE_DTYPES]}", dt.value, TypeError)
    if len(kc_shape) != 4:
        raise fail("k_cache", "4 dims [B, NKV, S, D] or [num_blocks, NKV, block_size, D]", list(kc_shape))
    if vc_shape != kc_shape or vc_dt is not kc_dt:
        raise fail("v_cache", f"k_cache's shape {list(kc_shape)} and format {kc_dt.value}",
                   f"{list(vc_shape)} {vc_dt.value}")
    _, nkv, rows, d = kc_shape
    if d % TILE or rows % TILE:
        raise fail("k_cache", "S (block_size) and D multiples of 32", list(kc_shape))
    if not isinstance(rotary_interleaved, bool):
        raise fail("rotary_interleaved", "a bool", repr(rotary_interleaved), TypeError)
    rd = d if rotary_dim is None else rotary_dim
    if isinstance(rd, bool) or not isinstance(rd, int) or not (2 <= rd <= d and rd % 2 == 0):
        raise fail("rotary_dim", f"an even int in 2..D={d} (None: D)", repr(rotary_dim))

    # the new rows
    packed = qkv is not None
    if packed:
        if q is not None or k_new is not None or v_new is not None:
            raise fail("qkv", "either qkv or q / k_new / v_new", "both")
        shp, _ = _shape_dtype("qkv", qkv)
        if len(shp) != 3 or shp[0] != 1 or shp[2] % d:
            raise fail("qkv", f"shape [1, B, (NH + 2 * {nkv}) * {d}]", list(shp))
        b = shp[1]
        nh = shp[2] // d - 2 * nkv
        if nh < 1 or (num_q_heads is not None and nh != num_q_heads):
            raise fail("qkv", f"(NH + 2 * NKV={nkv}) * D={d} columns with NH >= 1"
                       + ("" if num_q_heads is None else f" = {num_q_heads}"), f"{shp[2]} columns")
        _check_input("qkv", qkv, shp)
        x = {"qkv": qkv}
    else:
        if k_new is None or v_new is None:
            raise fail("k_new", "k_new and v_new tensors [1, B, NKV, D] (or qkv=)", "None", TypeError)
        shp, _ = _shape_dtype("k_new", k_new)
        if len(shp) != 4 or shp[0] != 1:
            raise fail("k_new", f"shape [1, B, NKV={nkv}, D={d}]", list(shp))
        b = shp[1]
        _check_input("k_new", k_new, (1, b, nkv, d))
        _check_input("v_new", v_new, (1, b, nkv, d))
        nh = 0
        x = {"k_new": k_new, "v_new": v_new}
        if q is not None:
            qs, _ = _shape_dtype("q", q)
            if len(qs) != 4 or qs[:2] != (1, b) or qs[3] != d or qs[2] < 1:
                raise fail("q", f"shape [1, B={b}, NH, D={d}]", list(qs))
            nh = qs[2]
            _check_input("q", q, qs)
            x = {"q": q, **x}
    if b < 1:
        raise fail("k_new" if not packed else "qkv", "B >= 1 users", b)

    # angles
    def angles(name: str, t: Any) -> torch.Tensor:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise fail(name, f"a float torch tensor [B={b}, rotary_dim={rd}]", type(t).__name__, TypeError)
        if list(t.shape) != [b, rd]:
            raise fail(name, f"shape [B={b}, rotary_dim={rd}] (Hugging Face's rotate-half layout)", list(t.shape))
        v = t.detach().cpu().to(torch.float32)
        if not bool(torch.isfinite(v).all()):
            raise fail(name, "finite values", "inf or NaN")
        if not torch.equal(v[:, : rd // 2], v[:, rd // 2:]):
            raise fail(name, "Hugging Face's layout cat(c, c) (the two halves equal; one angle per pair)",
                       "halves that differ")
        return v

    cos_v, sin_v = angles("cos", cos), angles("sin", sin)

    # positions and pages
    positions = _int_list("cur_pos", cur_pos, b)
    paged = page_table is not None
    table = None
    if paged:
        if not isinstance(page_table, torch.Tensor) or page_table.is_floating_point() or page_table.dim() != 2 \
                or page_table.dtype is torch.bool:
            got = (f"{page_table.dtype} shape {list(page_table.shape)}" if isinstance(page_table, torch.Tensor)
                   else type(page_table).__name__)
            raise fail("page_table", f"an int tensor [B={b}, max_blocks]", got, TypeError)
        if page_table.shape[0] != b or page_table.shape[1] < 1:
            raise fail("page_table", f"shape [B={b}, max_blocks >= 1]", list(page_table.shape))
        table = page_table.detach().cpu().to(torch.int64)
    if not paged and kc_shape[0] != b:
        raise fail("k_cache", f"batch dim B={b} (one cache per user; paged caches take page_table=)", kc_shape[0])
    capacity = table.shape[1] * rows if paged else rows
    targets: dict[tuple[int, int], int] = {}
    for i, p in enumerate(positions):
        if p < -1:
            raise fail(f"cur_pos[{i}]", "-1 (skip the user) or a position >= 0", p)
        if p < 0:
            continue
        if p >= capacity:
            what = (f"a position < {capacity} (page_table holds {table.shape[1]} blocks of {rows})" if paged
                    else f"a position < S={rows} (the cache's length)")
            raise fail(f"cur_pos[{i}]", what, p)
        if paged:
            blk = int(table[i, p // rows])
            if not 0 <= blk < kc_shape[0]:
                raise fail(f"page_table[{i}, {p // rows}]", f"a block id in 0..{kc_shape[0] - 1} (user {i} writes "
                           f"position {p} there)", blk)
            key = (blk, (p % rows) // TILE)
        else:
            key = (i, p // TILE)
        if key in targets:
            raise fail(f"cur_pos[{i}]", f"a cache tile no other user writes in this call (user {targets[key]} "
                       "writes the same tile)", p)
        targets[key] = i

    things = [*x.values(), k_cache, v_cache]
    kinds = {_is_ttnn(t) and _on_device(t) for t in things}
    if len(kinds) > 1:
        raise fail("k_cache", "all tensors on the device or all on the host", "a mix")
    device_tensors = kinds == {True}
    return RotaryInputs(
        batch=b, num_q_heads=nh, num_kv_heads=nkv, head_dim=d, rotary_dim=rd, interleaved=rotary_interleaved,
        packed=packed, cache_dtype=kc_dt, cache_shape=kc_shape, paged=paged, positions=tuple(positions),
        page_table=table, cos=cos_v, sin=sin_v, x=x, k_cache=k_cache, v_cache=v_cache,
        device_tensors=device_tensors,
    )


def _on_device(t: Any) -> bool:
    import ttnn

    return bool(ttnn.is_tensor_storage_on_device(t))


# ---- the program ---------------------------------------------------------------------------------


def _core_users(batch: int, grid: tuple[int, int]) -> dict[CoreCoord, list[int]]:
    """Users dealt over the first min(B, cores) cores of the grid (row-major): core i gets i, i + n, ..."""
    gx, gy = grid
    n = min(batch, gx * gy)
    cores = [CoreCoord(i % gx, i // gx) for i in range(n)]
    return {c: list(range(i, batch, n)) for i, c in enumerate(cores)}


def _row_tiles(heads: int) -> int:
    return -(-heads // TILE)


def input_images(inp: RotaryInputs) -> dict[str, bytes]:
    """The byte images of every input tensor of the program (the host runtime's inputs)."""
    from ttdecode.tensor import as_tile_tensor

    images = {name: as_tile_tensor(t, DataType.bfloat16).data for name, t in inp.x.items()}
    images.update(derived_images(inp))
    images["k_cache"] = as_tile_tensor(inp.k_cache).data
    images["v_cache"] = as_tile_tensor(inp.v_cache).data
    return images


def derived_images(inp: RotaryInputs) -> dict[str, bytes]:
    """The tensors the op derives from its arguments: cos, sin, trans, cur_pos, page_table."""
    width = inp.rot_tiles * TILE
    cos = column_angles(inp.cos, inp.rotary_dim, inp.interleaved, width, 1.0)
    sin = column_angles(inp.sin, inp.rotary_dim, inp.interleaved, width, 0.0)
    blocks = rotate_half_blocks(inp.head_dim, inp.rotary_dim, inp.interleaved)
    trans = torch.cat([blk for _, _, blk in blocks]).to(torch.float32)
    out = {
        "cos": formats.pack_tiles(cos, DataType.float32),
        "sin": formats.pack_tiles(sin, DataType.float32),
        "trans": formats.pack_tiles(trans, DataType.bfloat16),
        "cur_pos": np.asarray(inp.positions, dtype="<i4").tobytes(),
    }
    if inp.paged:
        out["page_table"] = inp.page_table.numpy().astype("<i4").tobytes()
    return out


def build_program(inp: RotaryInputs, images: Optional[dict[str, bytes]] = None,
                  grid: tuple[int, int] = (8, 8)) -> Program:
    """The one program of a call; `images` None describes it without input bytes (the device path)."""
    b, nh, nkv, d = inp.batch, inp.num_q_heads, inp.num_kv_heads, inp.head_dim
    dt, rt = inp.d_tiles, inp.rot_tiles
    blocks = rotate_half_blocks(d, inp.rotary_dim, inp.interleaved)
    users = _core_users(b, grid)
    cores = list(users)
    where = CoreRangeSet.of(cores)
    cache_tile = formats.tile_size(inp.cache_dtype)
    has_q = nh > 0
    f32, bf16 = DataType.float32, DataType.bfloat16
    cb = ROTARY_CBS
    cbs = [
        CircularBuffer(cb["cos"], where, f32, 4096, 2 * rt),
        CircularBuffer(cb["sin"], where, f32, 4096, 2 * rt),
        CircularBuffer(cb["x"], where, bf16, 2048, 2 * dt),
        CircularBuffer(cb["trans"], where, bf16, 2048, len(blocks)),
        CircularBuffer(cb["k_out"], where, inp.cache_dtype, cache_tile, 2 * dt),
        CircularBuffer(cb["v_out"], where, inp.cache_dtype, cache_tile, 2 * dt),
        CircularBuffer(cb["cache"], where, inp.cache_dtype, cache_tile, 1),
        CircularBuffer(cb["pos"], where, f32, -(-4 * b // 32) * 32, 1),
    ]
    if has_q:
        cbs.append(CircularBuffer(cb["q_out"], where, bf16, 2048, 2 * dt))
    if inp.paged:
        cbs.append(CircularBuffer(cb["page_table"], where, f32, -(-4 * inp.max_blocks // 32) * 32, 1))

    # Resource limit: every CB of a core, 32-byte aligned, above the firmware and kernel-config area.
    from ttdecode.program import L1_BYTES_PER_CORE
    from ttdecode.runtime.layout import CB_ALIGNMENT, L1_UNRESERVED_BASE

    l1 = L1_UNRESERVED_BASE + sum(-(-c.total_size // CB_ALIGNMENT) * CB_ALIGNMENT for c in cbs)
    if l1 > L1_BYTES_PER_CORE:
        raise fail("k_cache", f"a head_dim whose circular buffers fit one core's L1 ({L1_BYTES_PER_CORE} B, CBs "
                   f"from {L1_UNRESERVED_BASE:#x})", f"D={d} needing {l1} B")

    from ttdecode.paths import kernels_dir

    src = kernels_dir() / "rotary_append"
    seq_tiles = 0 if inp.paged else inp.cache_shape[2] // TILE
    reader_ct = {"d_tiles": dt, "rot_tiles": rt, "num_q_heads": nh, "num_kv_heads": nkv, "packed": int(inp.packed),
                 "num_pairs": len(blocks)}
    compute_ct = {"d_tiles": dt, "rot_tiles": rt, "q_row_tiles": _row_tiles(nh), "kv_row_tiles": _row_tiles(nkv),
                  "num_pairs": len(blocks)}
    writer_ct = {"d_tiles": dt, "q_row_tiles": _row_tiles(nh), "num_kv_heads": nkv, "batch": b,
                 "paged": int(inp.paged), "seq_tiles": seq_tiles, "block_size": inp.block_size,
                 "max_blocks": inp.max_blocks, "cache_tile_bytes": cache_tile,
                 "key_row_pages": int(inp.kv_pages == "key_row")}
    if inp.packed:
        x_args: list = [BufferAddress("qkv"), 0, 0]
    else:
        x_args = [BufferAddress("q") if has_q else 0, BufferAddress("k_new"), BufferAddress("v_new")]
    pairs = [v for j, k, _ in blocks for v in (j, k)]
    reader_rt = {c: [*x_args, BufferAddress("cos"), BufferAddress("sin"), BufferAddress("trans"), len(u), *u]
                 for c, u in users.items()}
    compute_rt = {c: [len(u), *pairs] for c, u in users.items()}
    writer_rt = {c: [BufferAddress("q_rot") if has_q else 0, BufferAddress("k_cache"), BufferAddress("v_cache"),
                     BufferAddress("cur_pos"), BufferAddress("page_table") if inp.paged else 0, len(u), *u]
                 for c, u in users.items()}
    kernels = [
        Kernel("rotary_reader", src / "reader.cpp", KernelKind.READER, where, runtime_args=reader_rt,
               named_compile_time_args=reader_ct),
        Kernel("rotary_writer", src / "writer.cpp", KernelKind.WRITER, where, runtime_args=writer_rt,
               named_compile_time_args=writer_ct),
        Kernel("rotary_compute", src / "compute.cpp", KernelKind.COMPUTE, where, runtime_args=compute_rt,
               compute=COMPUTE, named_compile_time_args=compute_ct),
    ]

    image = (lambda name: None) if images is None else images.__getitem__

    def tile(name: str, shape: tuple[int, ...], fmt: DataType, **kw: Any) -> DramTensor:
        return DramTensor(name, fmt, formats.tile_size(fmt), formats.num_tiles(shape), shape, "tile",
                          None if kw.get("is_output") else image(name), **kw)

    tensors: list[DramTensor] = []
    if inp.packed:
        tensors.append(tile("qkv", (1, b, (nh + 2 * nkv) * d), bf16))
    else:
        if has_q:
            tensors.append(tile("q", (1, b, nh, d), bf16))
        tensors += [tile("k_new", (1, b, nkv, d), bf16), tile("v_new", (1, b, nkv, d), bf16)]
    tensors += [
        tile("cos", (b, rt * TILE), f32),
        tile("sin", (b, rt * TILE), f32),
        tile("trans", (len(blocks) * TILE, TILE), bf16),
        DramTensor("cur_pos", f32, 4 * b, 1, (b,), "row_major", image("cur_pos"), element_type="int32"),
    ]
    if inp.paged:
        tensors.append(DramTensor("page_table", f32, 4 * inp.max_blocks, b, (b, inp.max_blocks), "row_major",
                                  image("page_table"), element_type="int32"))
    tensors += [kv_cache_tensor(name, inp.cache_dtype, inp.cache_shape, inp.kv_pages, image(name), in_place=True)
                for name in ("k_cache", "v_cache")]
    if has_q:
        tensors.append(tile("q_rot", (1, b, nh, d), bf16, is_output=True))
    return Program(kernels=kernels, circular_buffers=cbs, semaphores=[], tensors=tensors)


def device_program(*, batch: int, num_q_heads: int, num_kv_heads: int, head_dim: int, cache_dtype: DataType,
                   cache_shape: tuple[int, ...], max_blocks: int = 0, rotary_dim: Optional[int] = None,
                   interleaved: bool = False, packed: bool = True, grid: tuple[int, int] = (8, 8)) -> Program:
    """The program of a call whose tensors live on a device and are not at hand (a model's step
    described ahead of time): the same `build_program`, without input bytes. ``max_blocks`` > 0
    describes a paged cache ``[num_blocks, NKV, block_size, D]`` with a ``[B, max_blocks]`` table."""
    rd = head_dim if rotary_dim is None else rotary_dim
    inp = RotaryInputs(
        batch=batch, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, rotary_dim=rd,
        interleaved=interleaved, packed=packed, cache_dtype=cache_dtype, cache_shape=tuple(cache_shape),
        paged=max_blocks > 0, positions=(-1,) * batch,
        page_table=torch.zeros(batch, max_blocks, dtype=torch.int64) if max_blocks > 0 else None,
        cos=torch.ones(batch, rd), sin=torch.zeros(batch, rd), x={}, k_cache=None, v_cache=None,
        device_tensors=True,
    )
    return build_program(inp, None, grid)


# ---- backends ------------------------------------------------------------------------------------


def _run_host(inp: RotaryInputs, grid: tuple[int, int]) -> tuple[Optional[torch.Tensor], TileTensor, TileTensor]:
    from ttdecode.runtime import run_program

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
    from ttdecode.tensor import dequantize

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
        tile_row = (blk * nkv + head) * (rows // TILE) + (pos % rows) // TILE
    else:
        tile_row = (user * nkv + head) * (rows // TILE) + pos // TILE
    return tile_row * dt + j


def _run_reference(inp: RotaryInputs) -> tuple[Optional[torch.Tensor], TileTensor, TileTensor]:
    """Float64 rotation; the rows rounded into the cache format by the host tilizer (ttnn's)."""
    from ttdecode.tensor import as_tile_tensor

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
                replace_cache_row(image, inp.cache_dtype, cache_tile_index(inp, b, h, p, j), p % TILE,
                                  packed[i * size:(i + 1) * size], 0)
        images.append(TileTensor(inp.cache_shape, inp.cache_dtype, bytes(image)))
    return q_rot, images[0], images[1]


def _run_device(inp: RotaryInputs, grid: tuple[int, int]) -> tuple[Any, Any, Any]:
    from ttdecode import device

    if not device.available():
        raise RuntimeError("backend 'device': no Tenstorrent device found (no /dev/tenstorrent*); use backend='host' "
                           "to run the same kernels on the host runtime")
    if not inp.device_tensors:
        raise fail("k_cache", "ttnn tensors on the device for backend 'device'", "host tensors", TypeError)
    import ttnn

    dev = inp.k_cache.device()
    io = device_io_tensors(inp, dev, ttnn)
    outputs = device.launch(build_program(inp, None, grid), io, dev)
    q_rot = outputs[0] if inp.num_q_heads else None
    return q_rot, inp.k_cache, inp.v_cache


def device_io_tensors(inp: RotaryInputs, dev: Any, ttnn: Any) -> dict[str, Any]:
    """The program's input tensors on `dev`: the caller's, plus the derived ones uploaded."""
    io = dict(inp.x)
    io["k_cache"], io["v_cache"] = inp.k_cache, inp.v_cache
    width = inp.rot_tiles * TILE
    tile = ttnn.TILE_LAYOUT
    for name, fill, src in (("cos", 1.0, inp.cos), ("sin", 0.0, inp.sin)):
        io[name] = ttnn.from_torch(column_angles(src, inp.rotary_dim, inp.interleaved, width, fill),
                                   dtype=ttnn.float32, layout=tile, device=dev)
    blocks = rotate_half_blocks(inp.head_dim, inp.rotary_dim, inp.interleaved)
    io["trans"] = ttnn.from_torch(torch.cat([blk for _, _, blk in blocks]).to(torch.float32), dtype=ttnn.bfloat16,
                                  layout=tile, device=dev)
    io["cur_pos"] = ttnn.from_torch(torch.tensor(inp.positions, dtype=torch.int32), dtype=ttnn.int32,
                                    layout=ttnn.ROW_MAJOR_LAYOUT, device=dev)
    if inp.paged:
        io["page_table"] = ttnn.from_torch(inp.page_table.to(torch.int32), dtype=ttnn.int32,
                                           layout=ttnn.ROW_MAJOR_LAYOUT, device=dev)
    return io


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
        cos, sin: float ``[B, rotary_dim]`` in Hugging Face's layout ``cat(c, c)`` (taken as float32).
        page_table: int ``[B, max_blocks]`` for a paged cache. q: ``[1, B, NH, D]``, rotated too.
        qkv: ``[1, B, (NH + 2 NKV) D]`` packed instead of q / k_new / v_new (``num_q_heads``, if
            given, is checked against it). rotary_interleaved: pairs (2i, 2i+1) instead of
            (i, i + rotary_dim/2). rotary_dim: rotated columns (even, <= D; default D).
        grid: the compute grid the users are dealt over (a program setting; default 8x8).
        kv_pages: the caches' DRAM pages, as FlashDecode's ``SDPAProgramConfig.kv_pages``:
            "tile" (a tile a page) or "key_row" (a key-tile row a page, round robin over the
            12 banks; contiguous caches only; on a device ``ttdecode.device.key_row_memory_config``).
        backend: "auto" | "host" | "device" | "reference" (as the FlashDecode API).

    Returns:
        ``(k_cache, v_cache)``, or ``(q_rot, k_cache, v_cache)`` with ``q`` / ``qkv``: host and
        reference give TileTensors (new images; the inputs are not modified) and ``q_rot`` as
        torch.bfloat16 ``[1, B, NH, D]``; the device updates the caller's caches in place and
        returns them, with ``q_rot`` as a ttnn tensor.
    """
    from ttdecode import api

    if not isinstance(backend, str) or backend not in api.BACKENDS:
        raise fail("backend", f"one of {list(api.BACKENDS)}", repr(backend),
                   ValueError if isinstance(backend, str) else TypeError)
    if (not isinstance(grid, tuple) or len(grid) != 2
            or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in grid)):
        raise fail("grid", "a tuple (x, y) of ints >= 1", repr(grid))
    inp = validate(k_new, v_new, k_cache, v_cache, cur_pos=cur_pos, cos=cos, sin=sin, page_table=page_table, q=q,
                   qkv=qkv, num_q_heads=num_q_heads, rotary_interleaved=rotary_interleaved, rotary_dim=rotary_dim)
    from ttdecode.config import KV_PAGES

    if kv_pages not in KV_PAGES:
        raise fail("kv_pages", f"one of {list(KV_PAGES)}", repr(kv_pages))
    if kv_pages == "key_row" and inp.paged:
        raise fail("kv_pages", "'tile' with a paged cache (its blocks keep tile pages)", repr(kv_pages))
    inp.kv_pages = kv_pages
    chosen = api._select_backend() if backend == "auto" else backend
    api._last_backend = chosen
    if chosen == "reference":
        q_rot, kc, vc = _run_reference(inp)
    elif chosen == "device":
        q_rot, kc, vc = _run_device(inp, grid)
    else:
        q_rot, kc, vc = _run_host(inp, grid)
    return (kc, vc) if q_rot is None else (q_rot, kc, vc)
