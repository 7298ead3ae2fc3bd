"""Route ttnn's decode-attention and KV-cache ops to ttdecode for a whole model: :func:`patch_ttnn`.

While patched, ``ttnn.transformer.scaled_dot_product_attention_decode`` and
``ttnn.transformer.paged_scaled_dot_product_attention_decode`` (`ROUTED`), and
``ttnn.experimental.paged_update_cache`` and ``ttnn.experimental.paged_fill_cache`` (`ROUTED_CACHE`), are
ttdecode functions with ttnn 0.81.1's exact signatures (same parameter names, order, positional/keyword
kinds and defaults).

* The two attention ops build the call's ``DecodeOptions`` and run it through the public API's
  ``ttdecode.api.decode`` (the body of ``ttdecode.scaled_dot_product_attention_decode``) with
  ``backend="device"`` when Q, K or V is a ttnn device tensor (else ``backend="auto"``: host inputs run
  on the host runtime). K/V's page layout comes from K's memory config: a bank-local cache
  (``ttdecode.ttnn_backend.key_row_memory_config``, e.g. a pool from ``ttdecode.allocate_kv_pool``) is read
  with ``kv_pages="key_row"`` (the program config converted to ttdecode's and that field set).
* The two cache ops run ttdecode's ``paged_update_cache`` / ``paged_fill_cache`` (``kv_pages="key_row"``)
  when the cache tensor is bank-local, and pass the call to ttnn's own op, unchanged, otherwise (ttnn's
  interleaved tile-page caches). So the smallest change that switches a model to the bank-local
  layout is to allocate its pools through ``ttdecode.allocate_kv_pool`` (or ``ttdecode.to_bank_local``)
  and run it under ``patch_ttnn()``.

Every keyword ttnn takes is either passed through or, when ttdecode does not implement it and a
non-default value comes, refused by name (never dropped; `REFUSED`):

* ``paged_cache_geometry`` (not None), ``cache_position_modulo`` (not None) and
  ``spec_multi_pos_tiles`` (not 0) of the paged attention op: ValueError naming the argument.
* on a bank-local cache: ``share_cache``, ``batch_offset``, ``mesh_coords``, ``block_size``,
  ``num_kv_heads`` and ``cache_position_modulo`` of paged_update_cache, ``batch_idx_tensor``,
  ``mesh_coords``, ``block_size``, ``cache_position_modulo`` and ``valid_seq_len_tensor`` of
  paged_fill_cache, other than ttnn's defaults. Their ``compute_kernel_config`` is taken and has no
  effect: ttdecode's update copies bf16 rows through DST (exact in any DST mode) to the packer, the fill
  copies tiles (no arithmetic for a fidelity or accumulation setting to change).
* ttnn's ``cur_pos=[]`` / ``update_idxs=[]`` defaults are "no list given"; ``share_cache=None`` is
  ``False``.

Use as a function (patched until :func:`unpatch_ttnn` or the handle's ``restore()``) or as a context
manager (restored on exit, exceptions included)::

    with ttdecode.patch_ttnn():
        model.decode(...)          # its ttnn.transformer.*_decode calls run ttdecode's kernels

Nesting and repeated patching count references: ttnn's originals come back when the last open handle
is restored; a handle's second ``restore()`` does nothing (like ``file.close()``);
:func:`unpatch_ttnn` restores at once and closes every handle. Code that bound the op to a name before
patching (``from ttnn.transformer import ...``) keeps ttnn's op: only the module attributes change.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from typing import Any, Callable, Optional, Sequence

from ttdecode import api
from ttdecode.backend import on_device
from ttdecode.config import SDPAProgramConfig
from ttdecode.core.checks import fail
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.ops.paged_fill.op import paged_fill_cache as fill_cache
from ttdecode.ops.paged_update.op import paged_update_cache as update_cache
from ttdecode.ttnn_backend.tensors import is_key_row_memory_config, key_row_memory_config
from ttdecode.ttnn_env import require_ttnn

__all__ = ["PatchHandle", "patch_ttnn", "unpatch_ttnn", "is_patched", "ROUTED", "ROUTED_CACHE", "REFUSED"]

#: ttnn.transformer attributes routed to the ttdecode functions of the same name while patched
ROUTED = ("scaled_dot_product_attention_decode", "paged_scaled_dot_product_attention_decode")
#: ttnn.experimental attributes routed to the ttdecode functions of the same name while patched
ROUTED_CACHE = ("paged_update_cache", "paged_fill_cache")

#: ttnn keywords ttdecode does not implement -> the one value accepted (ttnn's default)
REFUSED = {
    "paged_scaled_dot_product_attention_decode": {
        "paged_cache_geometry": None,
        "cache_position_modulo": None,
        "spec_multi_pos_tiles": 0,
    },
    "paged_update_cache": {
        "share_cache": None,
        "batch_offset": 0,
        "mesh_coords": None,
        "block_size": None,
        "num_kv_heads": None,
        "cache_position_modulo": None,
    },
    "paged_fill_cache": {
        "batch_idx_tensor": None,
        "mesh_coords": None,
        "block_size": None,
        "cache_position_modulo": None,
        "valid_seq_len_tensor": None,
    },
}

#: grid the cache ops deal their work over (ttdecode's default; inside any Wormhole's compute grid)
CACHE_GRID = (8, 8)

_lock = threading.RLock()
_originals: dict[str, Any] = {}  # attribute -> ttnn's op, while patched
_routed: dict[str, Callable[..., Any]] = {}  # attribute -> our function installed, while patched
_open: list["PatchHandle"] = []  # handles not yet restored


def _backend(*tensors: Any) -> str:
    """"device" when any of the tensors is a ttnn device tensor, else "auto"."""
    return "device" if any(on_device(t) for t in tensors if t is not None) else "auto"


def bank_local(tensor: Any) -> bool:
    """`tensor` is a ttnn device tensor in the bank-local page layout (kv_pages "key_row":
    ``key_row_memory_config`` of its device and last dim); interleaved tensors answer at the first test."""
    if tensor is None or not on_device(tensor):
        return False
    mem = tensor.memory_config()
    if mem.nd_shard_spec is None:
        return False
    return is_key_row_memory_config(mem, key_row_memory_config(require_ttnn(), tensor.device(),
                                                                int(tensor.shape[-1])))


def _pages_config(program_config: Any, k: Any) -> Any:
    """The program config for K's page layout: a bank-local K gets ttdecode's config of `program_config`
    with kv_pages "key_row"; otherwise `program_config` as given."""
    if not bank_local(k):
        return program_config
    return dataclasses.replace(SDPAProgramConfig.coerce(program_config), kv_pages="key_row")


def _refuse(op: str, given: dict[str, Any]) -> None:
    """Raise a ValueError naming the first ttnn keyword of `op` ttdecode does not implement that came
    with a value other than ttnn's default."""
    for name, default in REFUSED.get(op, {}).items():
        value = given[name]
        if value is not default and value != default:
            raise fail(name, f"{default!r} (ttnn's default: ttdecode's {op} does not implement "
                             f"{name}; the call is refused rather than run without it)", repr(value))


def scaled_dot_product_attention_decode(
    input_tensor_q: Any,
    input_tensor_k: Any,
    input_tensor_v: Any,
    *,
    is_causal: bool = True,
    attn_mask: Any = None,
    cur_pos: Sequence[int] = (),
    cur_pos_tensor: Any = None,
    attention_sink: Any = None,
    scale: Optional[float] = None,
    sliding_window_size: Optional[int] = None,
    memory_config: Any = None,
    program_config: Any = None,
    compute_kernel_config: Any = None,
    share_cache: Optional[bool] = None,
) -> Any:
    """``ttnn.transformer.scaled_dot_product_attention_decode`` (ttnn 0.81.1 signature) run by
    ``ttdecode.scaled_dot_product_attention_decode``. Q ``[1, B, NH, D]``, K/V ``[B, NKV, S, D]``;
    returns ``[1, B, NH, D]``. An empty ``cur_pos`` (ttnn's default) means none given."""
    positions = None if cur_pos is None or len(cur_pos) == 0 else list(cur_pos)
    return api.decode(input_tensor_q, input_tensor_k, input_tensor_v, DecodeOptions(
        is_causal=is_causal, attn_mask=attn_mask, cur_pos=positions, cur_pos_tensor=cur_pos_tensor,
        attention_sink=attention_sink, scale=scale, sliding_window_size=sliding_window_size,
        share_cache=bool(share_cache), program_config=_pages_config(program_config, input_tensor_k),
        compute_kernel_config=compute_kernel_config, memory_config=memory_config,
        backend=_backend(input_tensor_q, input_tensor_k, input_tensor_v),
    ))


def paged_scaled_dot_product_attention_decode(
    input_tensor_q: Any,
    input_tensor_k: Any,
    input_tensor_v: Any,
    page_table_tensor: Any,
    *,
    is_causal: bool = True,
    attn_mask: Any = None,
    cur_pos_tensor: Any = None,
    attention_sink: Any = None,
    scale: Optional[float] = None,
    sliding_window_size: Optional[int] = None,
    memory_config: Any = None,
    program_config: Any = None,
    compute_kernel_config: Any = None,
    paged_cache_geometry: Any = None,
    cache_position_modulo: Optional[int] = None,
    spec_multi_pos_tiles: int = 0,
) -> Any:
    """``ttnn.transformer.paged_scaled_dot_product_attention_decode`` (ttnn 0.81.1 signature) run by
    ``ttdecode.paged_scaled_dot_product_attention_decode``. Q ``[1, B, NH, D]``, K/V
    ``[num_blocks, NKV, block_size, D]``, page table int32 ``[B, max_blocks]``; returns
    ``[1, B, NH, D]``. ``paged_cache_geometry``, ``cache_position_modulo`` and
    ``spec_multi_pos_tiles`` other than ttnn's defaults are refused by name."""
    _refuse("paged_scaled_dot_product_attention_decode",
            {"paged_cache_geometry": paged_cache_geometry, "cache_position_modulo": cache_position_modulo,
             "spec_multi_pos_tiles": spec_multi_pos_tiles})
    return api.decode(input_tensor_q, input_tensor_k, input_tensor_v, DecodeOptions(
        paged=True, page_table=page_table_tensor, is_causal=is_causal, attn_mask=attn_mask,
        cur_pos_tensor=cur_pos_tensor, attention_sink=attention_sink, scale=scale,
        sliding_window_size=sliding_window_size, program_config=_pages_config(program_config, input_tensor_k),
        compute_kernel_config=compute_kernel_config, memory_config=memory_config,
        backend=_backend(input_tensor_q, input_tensor_k, input_tensor_v),
    ))


def paged_update_cache(
    cache_tensor: Any,
    input_tensor: Any,
    *,
    update_idxs: Sequence[int] = (),
    update_idxs_tensor: Any = None,
    share_cache: Optional[bool] = None,
    page_table: Any = None,
    batch_offset: int = 0,
    compute_kernel_config: Any = None,
    mesh_coords: Any = None,
    block_size: Optional[int] = None,
    num_kv_heads: Optional[int] = None,
    cache_position_modulo: Optional[int] = None,
) -> Any:
    """``ttnn.experimental.paged_update_cache`` (ttnn 0.81.1 signature). A bank-local `cache_tensor`:
    ``ttdecode.paged_update_cache`` (new rows ``[1, B, NKV, D]`` bf16 written at each user's position,
    in place; returns the cache). Any other cache: ttnn's own op with the call's arguments."""
    if not bank_local(cache_tensor):
        return _originals["paged_update_cache"](
            cache_tensor, input_tensor, update_idxs=list(update_idxs), update_idxs_tensor=update_idxs_tensor,
            share_cache=share_cache, page_table=page_table, batch_offset=batch_offset,
            compute_kernel_config=compute_kernel_config, mesh_coords=mesh_coords, block_size=block_size,
            num_kv_heads=num_kv_heads, cache_position_modulo=cache_position_modulo)
    _refuse("paged_update_cache",
            {"share_cache": share_cache or None, "batch_offset": batch_offset, "mesh_coords": mesh_coords,
             "block_size": block_size, "num_kv_heads": num_kv_heads, "cache_position_modulo": cache_position_modulo})
    return update_cache(cache_tensor, input_tensor, update_idxs=list(update_idxs) or None,
                        update_idxs_tensor=update_idxs_tensor, page_table=page_table, kv_pages="key_row",
                        grid=CACHE_GRID, backend="device")


def paged_fill_cache(
    cache_tensor: Any,
    input_tensor: Any,
    page_table: Any,
    *,
    batch_idx_tensor: Any = None,
    batch_idx: int = 0,
    compute_kernel_config: Any = None,
    mesh_coords: Any = None,
    block_size: Optional[int] = None,
    cache_position_modulo: Optional[int] = None,
    valid_seq_len_tensor: Any = None,
) -> Any:
    """``ttnn.experimental.paged_fill_cache`` (ttnn 0.81.1 signature). A bank-local `cache_tensor`:
    ``ttdecode.paged_fill_cache`` (a prompt's rows ``[1, NKV, S, D]`` in the pool's format through user
    `batch_idx`'s page-table row, in place; returns the pool). Any other cache: ttnn's own op."""
    if not bank_local(cache_tensor):
        return _originals["paged_fill_cache"](
            cache_tensor, input_tensor, page_table, batch_idx_tensor=batch_idx_tensor, batch_idx=batch_idx,
            compute_kernel_config=compute_kernel_config, mesh_coords=mesh_coords, block_size=block_size,
            cache_position_modulo=cache_position_modulo, valid_seq_len_tensor=valid_seq_len_tensor)
    _refuse("paged_fill_cache",
            {"batch_idx_tensor": batch_idx_tensor, "mesh_coords": mesh_coords, "block_size": block_size,
             "cache_position_modulo": cache_position_modulo, "valid_seq_len_tensor": valid_seq_len_tensor})
    return fill_cache(cache_tensor, input_tensor, page_table, batch_idx=batch_idx, kv_pages="key_row",
                      grid=CACHE_GRID, backend="device")


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "scaled_dot_product_attention_decode": scaled_dot_product_attention_decode,
    "paged_scaled_dot_product_attention_decode": paged_scaled_dot_product_attention_decode,
    "paged_update_cache": paged_update_cache,
    "paged_fill_cache": paged_fill_cache,
}


class PatchHandle:
    """One open :func:`patch_ttnn`: ``restore()`` (or leaving its ``with`` block) releases it; ttnn's
    ops come back when no handle is open. ``active`` is False once released."""

    def __init__(self) -> None:
        self.active = True

    def restore(self) -> None:
        """Release this handle (a second call does nothing); the last open handle restores ttnn's ops."""
        with _lock:
            if not self.active:
                return
            if _open == [self]:
                _restore_all()  # raises (changing nothing) when the attributes were replaced meanwhile
            self.active = False
            _open.remove(self)

    def __enter__(self) -> "PatchHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def __repr__(self) -> str:
        return f"<ttdecode.patch_ttnn handle {'active' if self.active else 'restored'}>"


def _targets() -> list[tuple[Any, str]]:
    """(module, attribute) of every routed op: ``ttnn.transformer``'s `ROUTED`, ``ttnn.experimental``'s
    `ROUTED_CACHE` (ttnn is imported here, at patch time)."""
    transformer = importlib.import_module("ttnn.transformer")
    experimental = importlib.import_module("ttnn.experimental")
    return [(transformer, n) for n in ROUTED] + [(experimental, n) for n in ROUTED_CACHE]


def _install() -> None:
    """Replace ttnn's ops by ours, keeping the originals."""
    targets = _targets()
    for mod, name in targets:
        _originals[name] = getattr(mod, name)
    for mod, name in targets:
        fn = _FUNCTIONS[name]
        setattr(mod, name, fn)
        _routed[name] = fn


def _restore_all() -> None:
    """Put ttnn's ops back. Raises RuntimeError (restoring nothing) when someone replaced one of the
    patched attributes meanwhile: overwriting their replacement would silently undo it."""
    targets = _targets()
    foreign = [(mod, n) for mod, n in targets if getattr(mod, n) is not _routed[n]]
    if foreign:
        mod, first = foreign[0]
        raise RuntimeError(f"ttdecode.patch_ttnn: cannot restore {', '.join(f'{m.__name__}.{n}' for m, n in foreign)}: "
                           f"the attribute was replaced by someone else while patched (now {getattr(mod, first)!r})")
    for mod, name in targets:
        setattr(mod, name, _originals.pop(name))
        del _routed[name]


def patch_ttnn() -> PatchHandle:
    """Route ttnn's decode-attention ops to ttdecode until the returned handle is restored (or
    :func:`unpatch_ttnn`); usable as ``with ttdecode.patch_ttnn(): ...``. See the module doc."""
    with _lock:
        if not _open:
            _install()
        handle = PatchHandle()
        _open.append(handle)
        return handle


def unpatch_ttnn() -> None:
    """Restore ttnn's ops now and release every open handle (nothing to do when not patched)."""
    with _lock:
        if _open:
            _restore_all()  # raises (changing nothing) when the attributes were replaced meanwhile
        for h in _open:
            h.active = False
        _open.clear()


def is_patched() -> bool:
    """True while ttnn's decode-attention and cache ops are routed to ttdecode."""
    return bool(_open)
