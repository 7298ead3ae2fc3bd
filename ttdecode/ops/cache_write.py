"""The pieces the cache-writing operators share (``paged_update``, ``paged_fill``, ``rotary_append``): the
cache tensor's checks, where the tensors live, the backend choice, the cache's circular buffers and
tensors in a program, and the device step's tensor keys and int uploads.

Shapes are in elements, sizes in bytes. A cache is a paged pool ``[num_blocks, NKV, block_size, D]`` or a
contiguous cache ``[B, NKV, S, D]`` in bfloat16 / bfloat8_b / bfloat4_b; positions ``[B]`` and a page
table ``[B, max_blocks]`` are int32 words.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ttdecode import backend as backends
from ttdecode.core.checks import TensorMeta, fail
from ttdecode.core.formats import DataType, as_data_type
from ttdecode.core.program_description import (
    L1_BYTES_PER_CORE, CircularBuffer, CoreRangeSet, DramTensor, kv_cache_tensor,
)
from ttdecode.kv_pool import POOL_DTYPES
from ttdecode.runtime.layout import CB_ALIGNMENT, L1_UNRESERVED_BASE

TILE = 32

__all__ = ["TILE", "cache_meta", "host_table", "check_placement", "run_on_backend", "int_words_cb",
           "check_cbs_fit", "int_tensors", "cache_tensors", "tensor_key", "upload_ints", "check_on_device"]


# ---- argument checks ------------------------------------------------------------------------------


def cache_meta(meta: TensorMeta, owner: str, shape_text: str) -> tuple[tuple[int, int, int, int], DataType]:
    """The cache: a TileTensor or ttnn tensor ``[.., NKV, rows, D]`` (D a multiple of 32, rows of 16; the
    caller's kv_pool.check_pool_rows says which row counts its layout takes) in a pool format. `owner`
    names it in messages ("cache" or "pool"); `shape_text` the shapes it may take. Returns (its shape,
    its format)."""
    if meta.kind == "torch":
        raise fail("cache_tensor", f"a TileTensor or ttnn tensor in bfloat16 / bfloat8_b / bfloat4_b (the {owner}'s "
                   "format)", "a torch tensor", TypeError)
    if len(meta.shape) != 4 or meta.shape[2] % (TILE // 2) or meta.shape[3] % TILE or min(meta.shape) < 1:
        raise fail("cache_tensor", shape_text, list(meta.shape))
    if meta.dtype not in [d.value for d in POOL_DTYPES]:
        raise fail("cache_tensor", f"one of {[d.value for d in POOL_DTYPES]}", meta.dtype, TypeError)
    return meta.shape, as_data_type(meta.dtype)  # type: ignore[return-value]


def host_table(meta: TensorMeta, page_table: Any) -> torch.Tensor:
    """A host page table ``[B, max_blocks]`` (its shape checked by the caller) as int64 on the CPU;
    anything but a torch int tensor: TypeError."""
    if meta.kind != "torch" or page_table.is_floating_point() or page_table.dtype is torch.bool:
        raise fail("page_table", "an int tensor [B, max_blocks]", f"{meta.kind} {meta.dtype}", TypeError)
    return page_table.detach().cpu().to(torch.int64)


def check_placement(cache: Any, rows: Any, cache_kind: str, rows_kind: str, owner: str) -> bool:
    """The cache and the new rows both ttnn tensors on the device, or both on the host (`owner` names the
    cache in messages). Returns whether they are on the device."""
    on_device = cache_kind == "ttnn"
    if on_device != (rows_kind == "ttnn"):
        raise fail("cache_tensor", f"the {owner} and input_tensor both on the device (ttnn) or both on the host",
                   "a mix", TypeError)
    if on_device:
        import ttnn  # ttnn tensors came in, so ttnn is imported already

        if not all(ttnn.is_tensor_storage_on_device(t) for t in (cache, rows)):
            raise fail("cache_tensor", "ttnn tensors on the device (ttnn.to_device)", "a ttnn host tensor", TypeError)
    return on_device


def run_on_backend(backend: str, cache: Any, rows: Any, inp: Any, grid: tuple[int, int], *,
                   reference: Callable[[Any], Any], device: Callable[[Any, tuple[int, int]], None],
                   host: Callable[[Any, tuple[int, int]], Any]) -> Any:
    """Run a validated call (`inp`, its tensors on the device when ``inp.device_tensors``) on `backend`
    ("auto": where its tensors are), checked against where they are and recorded
    (`ttdecode.backend.record`): ``reference(inp)`` or ``host(inp, grid)`` return a new cache;
    ``device(inp, grid)`` writes ``inp.cache`` in place, which is returned."""
    chosen = backends.select_backend(cache, rows) if backend == "auto" else backend
    if chosen == "device" and not inp.device_tensors:
        raise fail("cache_tensor", "ttnn tensors on the device for backend 'device'", "host tensors", TypeError)
    if chosen != "device" and inp.device_tensors:
        raise fail("cache_tensor", f"host tensors for backend {chosen!r}", "ttnn tensors on the device", TypeError)
    backends.record(chosen)
    if chosen == "reference":
        return reference(inp)
    if chosen == "device":
        device(inp, grid)
        return inp.cache
    return host(inp, grid)


# ---- the program's cache pieces -----------------------------------------------------------------


def int_words_cb(index: int, where: CoreRangeSet, count: int) -> CircularBuffer:
    """A one-page CB of `count` int32 words (positions, a page-table row), the page rounded up to 32 B."""
    return CircularBuffer(index, where, DataType.float32, -(-4 * count // 32) * 32, 1)


def check_cbs_fit(cbs: Sequence[CircularBuffer], arg: str, what: str, got: str, detail: str = "") -> None:
    """Refuse CBs that end past one core's L1 (each 32-byte aligned, above the firmware and kernel-config
    area), naming `arg`: expected "`what` whose circular buffers fit one core's L1 (.. B`detail`)", got
    "`got` needing .. B"."""
    end = L1_UNRESERVED_BASE + sum(-(-c.total_size // CB_ALIGNMENT) * CB_ALIGNMENT for c in cbs)
    if end > L1_BYTES_PER_CORE:
        raise fail(arg, f"{what} whose circular buffers fit one core's L1 ({L1_BYTES_PER_CORE} B{detail})",
                   f"{got} needing {end} B")


def int_tensors(batch: int, max_blocks: int, paged: bool, images: Callable[[str], Any],
                with_positions: bool = True) -> list[DramTensor]:
    """The row-major int32 inputs: the positions ``cur_pos [B]`` (unless `with_positions` is False) and
    (paged) the page table ``[B, max_blocks]``; `images`: name -> bytes or None."""
    f32 = DataType.float32
    tensors = []
    if with_positions:
        tensors.append(DramTensor("cur_pos", f32, 4 * batch, 1, (batch,), "row_major", images("cur_pos"),
                                  element_type="int32"))
    if paged:
        tensors.append(DramTensor("page_table", f32, 4 * max_blocks, batch, (batch, max_blocks), "row_major",
                                  images("page_table"), element_type="int32"))
    return tensors


def cache_tensors(names: Sequence[str], dtype: DataType, shape: tuple[int, ...], kv_pages: str,
                  images: Callable[[str], Any]) -> list[DramTensor]:
    """The caches `names` (one shape, format and page kind), written in place; `images`: name -> bytes or None."""
    return [kv_cache_tensor(name, dtype, shape, kv_pages, images(name), in_place=True) for name in names]


# ---- the device step ----------------------------------------------------------------------------


def tensor_key(t: Any) -> tuple:
    """What a step depends on of a ttnn tensor: shape, format, layout and memory config."""
    return (tuple(t.shape), str(t.dtype), str(t.layout), repr(t.memory_config()))


def upload_ints(ttnn: Any, values: Any, device: Any) -> Any:
    """Host ints (positions, a page table) as an int32 ROW_MAJOR tensor on `device` (one move)."""
    return ttnn.from_torch(torch.as_tensor(values, dtype=torch.int32), dtype=ttnn.int32,
                           layout=ttnn.ROW_MAJOR_LAYOUT, device=device)


def check_on_device(io: dict[str, Any], device: Any, whose: str) -> None:
    """Every tensor of `io` (program name -> ttnn tensor) on `device`, named in messages as `whose`
    device ("the cache's", "k_cache's")."""
    for name, t in io.items():
        if t.device() is not device:
            raise fail(name, f"a tensor on {whose} device", "a tensor on another device")

