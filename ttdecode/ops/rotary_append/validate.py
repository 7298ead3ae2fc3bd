"""rotary_kv_append's argument checks: shapes, formats, positions, conventions -> `RotaryInputs`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.tensor import TileTensor, ttnn_data_type
from ttdecode.core.checks import fail
from ttdecode.kv_pool import check_pool_rows

TILE = 32
#: Cache formats the append writes.
CACHE_DTYPES = (DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b)


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
    positions: Optional[tuple[int, ...]]  # None: cur_pos is a device tensor (device_args)
    page_table: Optional[torch.Tensor]  # int64 [B, max_blocks]
    cos: torch.Tensor           # float32 [B, rotary_dim], HF layout
    sin: torch.Tensor
    x: dict[str, Any]           # "q"/"k_new"/"v_new" or "qkv" -> the caller's tensor
    k_cache: Any
    v_cache: Any
    device_tensors: bool        # the caller's tensors are ttnn tensors on a device
    kv_pages: str = "tile"  # the caches' DRAM pages: tiles, or key-tile rows ("key_row")
    #: cur_pos / page_table / cos / sin given as ttnn device tensors (the device backend's form, read by
    #: the kernels where they lie): name -> tensor. Then `positions` is None (cur_pos), `page_table`
    #: None (its width in `device_max_blocks`), `cos` / `sin` the ttnn tensors.
    device_args: dict[str, Any] = field(default_factory=dict)
    device_max_blocks: int = 0

    @property
    def d_tiles(self) -> int:
        return self.head_dim // TILE

    @property
    def rot_tiles(self) -> int:
        return math.ceil(self.rotary_dim / TILE)

    @property
    def max_blocks(self) -> int:
        if "page_table" in self.device_args:
            return self.device_max_blocks
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
    """Every rule of `rotary_kv_append`; raises naming the argument, expected and got.

    Steps, in this order (a call with several faults is refused for the first): the caches, which fix
    NKV, S and D (_check_caches); the new rows, which fix B and NH (_new_rows); the angles (_angles);
    the positions and the page table, and the cache tile each user writes (_positions, _page_table,
    _check_write_targets); where the tensors live (_device_tensors).

    cos, sin, cur_pos and page_table may also be ttnn tensors on the device (the device backend's
    form, with device caches and rows): only their metadata is checked (_device_angles,
    _device_ints, _device_table); their values are never read back, so positions beyond the cache,
    block ids outside the pool and two users writing one cache tile are NOT refused for values that
    live on the device -- the kernels write where they say (as tt-metal's paged_update_cache)."""
    kc_shape, kc_dt, rd = _check_caches(k_cache, v_cache, rotary_interleaved, rotary_dim)
    _, nkv, rows, d = kc_shape
    packed, b, nh, x = _new_rows(k_new, v_new, q, qkv, num_q_heads, nkv, d)
    on_device = {}
    for name, t in (("cos", cos), ("sin", sin), ("cur_pos", cur_pos), ("page_table", page_table)):
        if _is_ttnn(t):
            if not _on_device(t):
                raise fail(name, "a host torch tensor (or list), or a ttnn tensor on the device", "a ttnn host tensor",
                           TypeError)
            on_device[name] = t
    rt_width = math.ceil(rd / TILE) * TILE
    cos_v = _device_angles("cos", cos, b, rt_width) if "cos" in on_device else _angles("cos", cos, b, rd)
    sin_v = _device_angles("sin", sin, b, rt_width) if "sin" in on_device else _angles("sin", sin, b, rd)
    positions = None if "cur_pos" in on_device else _int_list("cur_pos", cur_pos, b)
    if positions is None:
        _device_ints("cur_pos", cur_pos, (b,))
    paged = page_table is not None
    table, device_blocks = None, 0
    if "page_table" in on_device:
        device_blocks = _device_table(page_table, b)
    elif paged:
        table = _page_table(page_table, b)
    if not paged and kc_shape[0] != b:
        raise fail("k_cache", f"batch dim B={b} (one cache per user; paged caches take page_table=)", kc_shape[0])
    check_pool_rows("k_cache", kc_shape, paged)
    if positions is not None and "page_table" in on_device:
        _check_positions_in(positions, device_blocks * rows)
    elif positions is not None:
        _check_write_targets(positions, kc_shape, table)
    device_tensors = _device_tensors([*x.values(), k_cache, v_cache])
    if on_device and not device_tensors:
        name = next(iter(on_device))
        raise fail(name, "a host value (torch tensor or list) when the caches and new rows are host tensors",
                   "a ttnn tensor on a device", TypeError)
    return RotaryInputs(
        batch=b, num_q_heads=nh, num_kv_heads=nkv, head_dim=d, rotary_dim=rd, interleaved=rotary_interleaved,
        packed=packed, cache_dtype=kc_dt, cache_shape=kc_shape, paged=paged,
        positions=None if positions is None else tuple(positions), page_table=table, cos=cos_v, sin=sin_v, x=x,
        k_cache=k_cache, v_cache=v_cache, device_tensors=device_tensors, device_args=on_device,
        device_max_blocks=device_blocks,
    )


def _check_caches(k_cache: Any, v_cache: Any, rotary_interleaved: Any,
                  rotary_dim: Any) -> tuple[tuple[int, ...], DataType, int]:
    """validate's first step: the caches fix NKV, S (block_size when paged) and D. Both are TileTensors
    or ttnn tensors of one shape [B or num_blocks, NKV, S, D] (S and D multiples of 32) and one of
    CACHE_DTYPES; `rotary_interleaved` is a bool and the rotated columns an even count in 2..D. Returns
    (the cache shape, its format, rotary_dim: the rotated columns per head, D when None)."""
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
    if d % TILE or rows % (TILE // 2):
        raise fail("k_cache", "S (block_size) and D multiples of 32 (block_size 16 too)", list(kc_shape))
    if not isinstance(rotary_interleaved, bool):
        raise fail("rotary_interleaved", "a bool", repr(rotary_interleaved), TypeError)
    rd = d if rotary_dim is None else rotary_dim
    if isinstance(rd, bool) or not isinstance(rd, int) or not (2 <= rd <= d and rd % 2 == 0):
        raise fail("rotary_dim", f"an even int in 2..D={d} (None: D)", repr(rotary_dim))
    return kc_shape, kc_dt, rd


def _new_rows(k_new: Any, v_new: Any, q: Any, qkv: Any, num_q_heads: Optional[int], nkv: int,
              d: int) -> tuple[bool, int, int, dict[str, Any]]:
    """The new rows fix B and NH: either one packed `qkv` [1, B, (NH + 2 NKV) x D] (NH >= 1, and
    = num_q_heads when given) or k_new and v_new [1, B, NKV, D] with an optional q [1, B, NH, D]; each
    bfloat16 (or torch floats). Returns (packed, B users, NH q heads (0 without q), name -> the caller's
    tensor)."""
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
    return packed, b, nh, x


def _angles(name: str, t: Any, b: int, rd: int) -> torch.Tensor:
    """`cos` or `sin`: a finite float torch tensor [B, rotary_dim] in Hugging Face's rotate-half layout
    cat(c, c) (one angle per pair of columns). Returns it as float32 on the host."""
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


def _ttnn_meta(t: Any) -> str:
    return f"{t.dtype} {t.layout} shape {list(t.shape)}"


def _device_angles(name: str, t: Any, b: int, width: int) -> Any:
    """`cos` or `sin` in the device form: a ttnn float32 tile tensor [B, width] on the device, width =
    ceil(rotary_dim / 32) * 32, holding the per-column angles the kernels multiply by
    (``ttdecode.ops.rotary_append.program_factory.column_angles`` of the HF cos/sin for the call's convention;
    columns past rotary_dim cos 1, sin 0). Only its metadata is checked (its values stay on the
    device). Returns it."""
    import ttnn

    if tuple(int(v) for v in t.shape) != (b, width) or t.dtype != ttnn.float32 or t.layout != ttnn.TILE_LAYOUT:
        raise fail(name, f"a float32 TILE ttnn tensor [B={b}, {width}] of per-column angles (column_angles; the "
                   f"kernels' form) or a torch [B, rotary_dim] in Hugging Face's layout", _ttnn_meta(t), TypeError)
    return t


def _device_ints(name: str, t: Any, shape: tuple[int, ...]) -> None:
    """An int32 ROW_MAJOR ttnn device tensor of `shape` (cur_pos, a page table): metadata only."""
    import ttnn

    if tuple(int(v) for v in t.shape) != shape or t.dtype != ttnn.int32 or t.layout != ttnn.ROW_MAJOR_LAYOUT:
        raise fail(name, f"an int32 ROW_MAJOR ttnn tensor {list(shape)} on the device (or host ints)", _ttnn_meta(t),
                   TypeError)


def _device_table(page_table: Any, b: int) -> int:
    """A page table on the device: int32 ROW_MAJOR [B, max_blocks >= 1]. Returns max_blocks."""
    shape = tuple(int(v) for v in page_table.shape)
    if len(shape) != 2 or shape[0] != b or shape[1] < 1:
        raise fail("page_table", f"shape [B={b}, max_blocks >= 1]", list(shape))
    _device_ints("page_table", page_table, shape)
    return shape[1]


def _check_positions_in(positions: Sequence[int], capacity: int) -> None:
    """Host positions with a page table on the device: each -1 or below the table's capacity (the
    block ids, and so which cache tile a user writes, stay on the device: not checked)."""
    for i, p in enumerate(positions):
        if p < -1:
            raise fail(f"cur_pos[{i}]", "-1 (skip the user) or a position >= 0", p)
        if p >= capacity:
            raise fail(f"cur_pos[{i}]", f"a position < {capacity} (page_table's blocks x block_size)", p)


def _page_table(page_table: Any, b: int) -> torch.Tensor:
    """A paged cache's table: an int torch tensor [B, max_blocks >= 1] of block ids. Returns it as int64 on
    the host (the block ids are checked where a user writes, _check_write_targets)."""
    if not isinstance(page_table, torch.Tensor) or page_table.is_floating_point() or page_table.dim() != 2 \
            or page_table.dtype is torch.bool:
        got = (f"{page_table.dtype} shape {list(page_table.shape)}" if isinstance(page_table, torch.Tensor)
               else type(page_table).__name__)
        raise fail("page_table", f"an int tensor [B={b}, max_blocks]", got, TypeError)
    if page_table.shape[0] != b or page_table.shape[1] < 1:
        raise fail("page_table", f"shape [B={b}, max_blocks >= 1]", list(page_table.shape))
    return page_table.detach().cpu().to(torch.int64)


def _check_write_targets(positions: Sequence[int], kc_shape: tuple[int, ...], table: Optional[torch.Tensor]) -> None:
    """Each user's position (keys): -1 (skip) or within its cache (S, or the page table's blocks x
    block_size), its block id (paged) a block of the pool, and no cache tile (32 rows) written by two
    users in one call. Decides nothing; raises naming the first user at fault."""
    paged = table is not None
    rows = kc_shape[2]
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


def _device_tensors(things: Sequence[Any]) -> bool:
    """Where the call runs: True when every tensor is a ttnn tensor on a device, False when all are on
    the host; a mix is refused (named on k_cache)."""
    kinds = {_is_ttnn(t) and _on_device(t) for t in things}
    if len(kinds) > 1:
        raise fail("k_cache", "all tensors on the device or all on the host", "a mix")
    return kinds == {True}


def _on_device(t: Any) -> bool:
    import ttnn

    return bool(ttnn.is_tensor_storage_on_device(t))
