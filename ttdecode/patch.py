"""Route ttnn's decode-attention ops to ttdecode for a whole model: :func:`patch_ttnn`.

While patched, ``ttnn.transformer.scaled_dot_product_attention_decode`` and
``ttnn.transformer.paged_scaled_dot_product_attention_decode`` are ttdecode functions with ttnn
0.81.1's exact signatures (same parameter names, order, positional/keyword kinds and defaults). Each
call builds the call's ``DecodeOptions`` and runs it through the public API's ``ttdecode.api.decode`` (the
body of ``ttdecode.scaled_dot_product_attention_decode``) with ``backend="device"`` when Q, K or V is a ttnn
device tensor (else ``backend="auto"``: host inputs run on the host runtime). Every keyword ttnn takes
is either passed through or, when ttdecode does not implement it and a non-default value comes,
refused by name (never dropped):

* ``paged_cache_geometry`` (not None), ``cache_position_modulo`` (not None) and
  ``spec_multi_pos_tiles`` (not 0) of the paged op: ValueError naming the argument.
* ttnn's ``cur_pos=[]`` default is "no list given"; ``share_cache=None`` is ``False``.

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

import importlib
import threading
from typing import Any, Callable, Optional, Sequence

from ttdecode import api
from ttdecode.backend import on_device
from ttdecode.core.checks import fail
from ttdecode.ops.flash_decode.options import DecodeOptions

__all__ = ["PatchHandle", "patch_ttnn", "unpatch_ttnn", "is_patched", "ROUTED", "REFUSED"]

#: ttnn.transformer attribute -> the ttdecode function it is routed to while patched
ROUTED = ("scaled_dot_product_attention_decode", "paged_scaled_dot_product_attention_decode")

#: ttnn keywords ttdecode does not implement -> the one value accepted (ttnn's default)
REFUSED = {
    "paged_scaled_dot_product_attention_decode": {
        "paged_cache_geometry": None,
        "cache_position_modulo": None,
        "spec_multi_pos_tiles": 0,
    },
}

_lock = threading.RLock()
_originals: dict[str, Any] = {}  # attribute -> ttnn's op, while patched
_routed: dict[str, Callable[..., Any]] = {}  # attribute -> our function installed, while patched
_open: list["PatchHandle"] = []  # handles not yet restored


def _backend(*tensors: Any) -> str:
    """"device" when any of the tensors is a ttnn device tensor, else "auto"."""
    return "device" if any(on_device(t) for t in tensors if t is not None) else "auto"


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
        share_cache=bool(share_cache), program_config=program_config, compute_kernel_config=compute_kernel_config,
        memory_config=memory_config, backend=_backend(input_tensor_q, input_tensor_k, input_tensor_v),
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
        sliding_window_size=sliding_window_size, program_config=program_config,
        compute_kernel_config=compute_kernel_config, memory_config=memory_config,
        backend=_backend(input_tensor_q, input_tensor_k, input_tensor_v),
    ))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "scaled_dot_product_attention_decode": scaled_dot_product_attention_decode,
    "paged_scaled_dot_product_attention_decode": paged_scaled_dot_product_attention_decode,
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


def _transformer() -> Any:
    """``ttnn.transformer`` (ttnn is imported here, at patch time)."""
    return importlib.import_module("ttnn.transformer")


def _install() -> None:
    """Replace ttnn's two ops by ours, keeping the originals."""
    mod = _transformer()
    for name in ROUTED:
        _originals[name] = getattr(mod, name)
    for name in ROUTED:
        fn = _FUNCTIONS[name]
        setattr(mod, name, fn)
        _routed[name] = fn


def _restore_all() -> None:
    """Put ttnn's ops back. Raises RuntimeError (restoring nothing) when someone replaced one of the
    patched attributes meanwhile: overwriting their replacement would silently undo it."""
    mod = _transformer()
    foreign = [n for n in ROUTED if getattr(mod, n) is not _routed[n]]
    if foreign:
        raise RuntimeError(f"ttdecode.patch_ttnn: cannot restore ttnn.transformer.{', '.join(foreign)}: the "
                           f"attribute was replaced by someone else while patched (now {getattr(mod, foreign[0])!r})")
    for name in ROUTED:
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
    """True while ttnn's decode-attention ops are routed to ttdecode."""
    return bool(_open)
