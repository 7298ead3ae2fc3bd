"""rotary_kv_append's program description: the rotate-half blocks, the CBs, the kernels' arguments
(one `Program` for the host runtime and the device). The conventions and numerics: `ttdecode.ops.rotary_append.op`."""

from __future__ import annotations

import functools
import math
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.program_description import (
    BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, CoreRangeSet, DramTensor, Kernel,
    KernelKind, MathFidelity, Program, unpack_to_dest_modes,
)
from ttdecode.ops.cache_write import cache_tensors, check_cbs_fit, int_tensors, int_words_cb
from ttdecode.ops.rotary_append.validate import RotaryInputs, TILE
from ttdecode.core.tensor import as_tile_tensor
from ttdecode.runtime.layout import L1_UNRESERVED_BASE
from ttdecode.core.paths import kernels_dir

#: Circular-buffer indices (kernels/rotary_append/common.hpp numbers them the same).
ROTARY_CBS = {"cos": 0, "sin": 1, "x": 2, "trans": 3, "q_out": 4, "k_out": 5, "v_out": 6, "cache": 7, "pos": 8,
              "page_table": 9}
#: Common runtime-arg counts (every buffer address; kernels/rotary_append/{reader,writer}.cpp read them
#: with get_common_arg_val): reader qkv-or-q, k_new, v_new, cos, sin, trans; writer q_rot, k_cache,
#: v_cache, cur_pos, page_table (0 for an absent tensor).
READER_COMMON_ARGS = 6
WRITER_COMMON_ARGS = 5
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
                  grid: tuple[int, int] = (8, 8), positions_in_args: bool = False) -> Program:
    """The one program of a call; `images` None describes it without input bytes (the device path).
    `positions_in_args`: the B positions are the writer's common runtime args (`positions_args`; no
    ``cur_pos`` tensor) instead of a DRAM tensor the writer reads.

    Steps: the users dealt over the cores (_core_users), the circular buffers and their L1 check
    (_circular_buffers), the three kernels and their arguments (_kernels), the DRAM tensors (_tensors)."""
    blocks = rotate_half_blocks(inp.head_dim, inp.rotary_dim, inp.interleaved)
    users = _core_users(inp.batch, grid)
    where = CoreRangeSet.of(list(users))
    cbs = _circular_buffers(inp, where, len(blocks), positions_in_args)
    kernels = _kernels(inp, users, where, blocks, positions_in_args)
    tensors = _tensors(inp, len(blocks), images, positions_in_args)
    return Program(kernels=kernels, circular_buffers=cbs, semaphores=[], tensors=tensors)


def positions_args(positions: Sequence[int]) -> list[int]:
    """The writer's common-arg words after its WRITER_COMMON_ARGS addresses for B positions (-1: skip the
    user): each an int32 as a uint32 word (two's complement)."""
    return [int(p) & 0xFFFFFFFF for p in positions]


def _circular_buffers(inp: RotaryInputs, where: CoreRangeSet, num_blocks: int,
                      positions_in_args: bool) -> list[CircularBuffer]:
    """The CBs on every core of `where` (pages: tiles; sizes in bytes): two slots of a user's rows of cos,
    sin, x and the rotated outputs, the `num_blocks` rotate-half blocks, one cache tile, the positions
    (unless in args) and (paged) one page-table row. Refuses a head_dim whose CBs exceed one core's L1."""
    b, nh, d = inp.batch, inp.num_q_heads, inp.head_dim
    dt, rt = inp.d_tiles, inp.rot_tiles
    cache_tile = formats.tile_size(inp.cache_dtype)
    f32, bf16 = DataType.float32, DataType.bfloat16
    cb = ROTARY_CBS
    cbs = [
        CircularBuffer(cb["cos"], where, f32, 4096, 2 * rt),
        CircularBuffer(cb["sin"], where, f32, 4096, 2 * rt),
        CircularBuffer(cb["x"], where, bf16, 2048, 2 * dt),
        CircularBuffer(cb["trans"], where, bf16, 2048, num_blocks),
        CircularBuffer(cb["k_out"], where, inp.cache_dtype, cache_tile, 2 * dt),
        CircularBuffer(cb["v_out"], where, inp.cache_dtype, cache_tile, 2 * dt),
        CircularBuffer(cb["cache"], where, inp.cache_dtype, cache_tile, 1),
    ]
    if not positions_in_args:
        cbs.append(int_words_cb(cb["pos"], where, b))
    if nh > 0:
        cbs.append(CircularBuffer(cb["q_out"], where, bf16, 2048, 2 * dt))
    if inp.paged:
        cbs.append(int_words_cb(cb["page_table"], where, inp.max_blocks))
    check_cbs_fit(cbs, "k_cache", "a head_dim", f"D={d}", f", CBs from {L1_UNRESERVED_BASE:#x}")
    return cbs


def _kernels(inp: RotaryInputs, users: dict[CoreCoord, list[int]], where: CoreRangeSet,
             blocks: tuple[tuple[int, int, torch.Tensor], ...], positions_in_args: bool) -> list[Kernel]:
    """The reader, writer and compute kernels on `where`: their compile-time args (tiles per head, heads,
    the rotate-half block pairs, the cache's geometry), as common runtime args the buffers each reads or
    writes (and, `positions_in_args`, the writer the B positions), and per core its users (`users`: core ->
    user indices)."""
    b, nh, nkv = inp.batch, inp.num_q_heads, inp.num_kv_heads
    dt, rt = inp.d_tiles, inp.rot_tiles
    has_q = nh > 0
    src = kernels_dir() / "rotary_append"
    seq_tiles = 0 if inp.paged else inp.cache_shape[2] // TILE
    reader_ct = {"d_tiles": dt, "rot_tiles": rt, "num_q_heads": nh, "num_kv_heads": nkv, "packed": int(inp.packed),
                 "num_pairs": len(blocks)}
    compute_ct = {"d_tiles": dt, "rot_tiles": rt, "q_row_tiles": _row_tiles(nh), "kv_row_tiles": _row_tiles(nkv),
                  "num_pairs": len(blocks)}
    writer_ct = {"d_tiles": dt, "q_row_tiles": _row_tiles(nh), "num_kv_heads": nkv, "batch": b,
                 "paged": int(inp.paged), "seq_tiles": seq_tiles, "block_size": inp.block_size,
                 "max_blocks": inp.max_blocks, "num_blocks": inp.cache_shape[0] if inp.paged else 0,
                 "positions_in_args": int(positions_in_args),
                 "cache_tile_bytes": formats.tile_size(inp.cache_dtype), "key_row_pages": int(inp.kv_pages == "key_row")}
    if inp.packed:
        x_args: list = [BufferAddress("qkv"), 0, 0]
    else:
        x_args = [BufferAddress("q") if has_q else 0, BufferAddress("k_new"), BufferAddress("v_new")]
    pairs = [v for j, k, _ in blocks for v in (j, k)]
    # Every buffer address is a common runtime arg (the same on every core; READER_COMMON_ARGS /
    # WRITER_COMMON_ARGS words): the per-core lists hold only each core's users, so no per-core arg is an
    # address and ttdecode.ttnn_backend.PreparedProgram launches its lean descriptor once the program is cached.
    reader_common = [*x_args, BufferAddress("cos"), BufferAddress("sin"), BufferAddress("trans")]
    writer_common = [BufferAddress("q_rot") if has_q else 0, BufferAddress("k_cache"), BufferAddress("v_cache"),
                     0 if positions_in_args else BufferAddress("cur_pos"),
                     BufferAddress("page_table") if inp.paged else 0]
    assert len(reader_common) == READER_COMMON_ARGS and len(writer_common) == WRITER_COMMON_ARGS
    if positions_in_args:  # each call patches them (the count, B, is fixed)
        writer_common += positions_args(inp.positions if inp.positions is not None else [-1] * b)
    reader_rt = {c: [len(u), *u] for c, u in users.items()}
    compute_rt = {c: [len(u), *pairs] for c, u in users.items()}
    writer_rt = {c: [len(u), *u] for c, u in users.items()}
    return [
        Kernel("rotary_reader", src / "reader.cpp", KernelKind.READER, where, runtime_args=reader_rt,
               common_runtime_args=reader_common, named_compile_time_args=reader_ct),
        Kernel("rotary_writer", src / "writer.cpp", KernelKind.WRITER, where, runtime_args=writer_rt,
               common_runtime_args=writer_common, named_compile_time_args=writer_ct),
        Kernel("rotary_compute", src / "compute.cpp", KernelKind.COMPUTE, where, runtime_args=compute_rt,
               compute=COMPUTE, named_compile_time_args=compute_ct),
    ]


def _tensors(inp: RotaryInputs, num_blocks: int, images: Optional[dict[str, bytes]],
             positions_in_args: bool) -> list[DramTensor]:
    """The DRAM tensors (shapes in elements): the new rows (qkv, or q, k_new, v_new), cos, sin, the
    `num_blocks` rotate-half blocks, the positions (unless in args), (paged) the page table, the two
    caches written in place, and (with q) the rotated q out; their bytes from `images` (None: described
    without bytes)."""
    b, nh, nkv, d = inp.batch, inp.num_q_heads, inp.num_kv_heads, inp.head_dim
    rt = inp.rot_tiles
    f32, bf16 = DataType.float32, DataType.bfloat16
    image = (lambda name: None) if images is None else images.__getitem__

    def tile(name: str, shape: tuple[int, ...], fmt: DataType, **kw: Any) -> DramTensor:
        return DramTensor(name, fmt, formats.tile_size(fmt), formats.num_tiles(shape), shape, "tile",
                          None if kw.get("is_output") else image(name), **kw)

    tensors: list[DramTensor] = []
    if inp.packed:
        tensors.append(tile("qkv", (1, b, (nh + 2 * nkv) * d), bf16))
    else:
        if nh > 0:
            tensors.append(tile("q", (1, b, nh, d), bf16))
        tensors += [tile("k_new", (1, b, nkv, d), bf16), tile("v_new", (1, b, nkv, d), bf16)]
    tensors += [
        tile("cos", (b, rt * TILE), f32),
        tile("sin", (b, rt * TILE), f32),
        tile("trans", (num_blocks * TILE, TILE), bf16),
    ]
    tensors += int_tensors(b, inp.max_blocks, inp.paged, image, with_positions=not positions_in_args)
    tensors += cache_tensors(("k_cache", "v_cache"), inp.cache_dtype, inp.cache_shape, inp.kv_pages, image)
    if nh > 0:
        tensors.append(tile("q_rot", (1, b, nh, d), bf16, is_output=True))
    return tensors


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
