"""ttdecode: FlashDecode (decode-phase attention over a long KV cache) for Tenstorrent Wormhole.

Public API (drop-in for ``ttnn.transformer.scaled_dot_product_attention_decode``):

- :func:`scaled_dot_product_attention_decode`, :func:`paged_scaled_dot_product_attention_decode`
- :func:`plan_decode` -> :class:`FlashDecodeStep` (a Wormhole: plan once per decode shape, ``run`` per
  token) with the call's :class:`DecodeOptions`::

      step = ttdecode.plan_decode(q, k, v, ttdecode.DecodeOptions(cur_pos_tensor=pos))
      for _ in range(tokens):
          out = step.run(q, k, v, cur_pos_tensor=pos)   # pos advanced on the device between tokens
- :func:`rotary_kv_append` (fused RoPE + KV-cache append, one program per decode step)
- paged KV pools ``[num_blocks, NKV, block_size, D]``: :func:`allocate_kv_pool`, and the bank-local
  layout (kv_pages "key_row": a key-tile row a page, dealt round robin over the DRAM banks)
  :func:`to_bank_local` / :func:`to_tile_pages` / :func:`is_bank_local`::

      k_pool = ttdecode.allocate_kv_pool(64, 8, 64, 128, dtype=ttdecode.bfloat8_b, device=device)
      tiles = ttdecode.to_tile_pages(k_pool)     # ttnn's interleaved tile pages, and back:
      k_pool = ttdecode.to_bank_local(tiles)
- :func:`paged_fill_cache` (a prompt's K or V into a paged pool through one user's page-table row, as
  ``ttnn.experimental.paged_fill_cache``; tile pages or bank-local)
- :func:`paged_update_cache` (one decode step's K or V row per user into a cache at its position, as
  ``ttnn.experimental.paged_update_cache``; tile pages or bank-local)
- :func:`patch_ttnn` / :func:`unpatch_ttnn` (route ``ttnn.transformer``'s two decode-attention ops to
  this package for a whole model; a function or a context manager)
- :func:`context_parallel_decode` (the KV cache split along the sequence over devices) and
  :func:`combine_partials` (the exact LSE merge of partial results)
- :class:`SDPAProgramConfig`, :class:`ComputeKernelConfig`
- host tile tensors mirroring ttnn's host API: :func:`from_torch`, :func:`to_torch`, and the formats
  ``float32``, ``bfloat16``, ``bfloat8_b``, ``bfloat4_b``
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, imported on first use (``python -m ttdecode --help`` needs no torch)
    from ttdecode.api import (
        last_backend,
        paged_scaled_dot_product_attention_decode,
        scaled_dot_product_attention_decode,
    )
    from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig
    from ttdecode.distributed.context import combine_partials, context_parallel_decode
    from ttdecode.core.formats import DataType
    from ttdecode.ops.flash_decode.device_step import FlashDecodeStep, plan_decode
    from ttdecode.ops.flash_decode.options import DecodeOptions
    from ttdecode.ops.rotary_append.op import rotary_kv_append
    from ttdecode.kv_pool import allocate_kv_pool, is_bank_local, to_bank_local, to_tile_pages
    from ttdecode.ops.paged_fill.op import paged_fill_cache
    from ttdecode.ops.paged_update.op import paged_update_cache
    from ttdecode.patch import patch_ttnn, unpatch_ttnn
    from ttdecode.core.tensor import TileTensor, from_torch, to_torch

#: public name -> the module defining it (float32 ... bfloat4_b are DataType members)
_HOMES = {
    "scaled_dot_product_attention_decode": "ttdecode.api",
    "paged_scaled_dot_product_attention_decode": "ttdecode.api",
    "last_backend": "ttdecode.api",
    "DecodeOptions": "ttdecode.ops.flash_decode.options",
    "FlashDecodeStep": "ttdecode.ops.flash_decode.device_step",
    "plan_decode": "ttdecode.ops.flash_decode.device_step",
    "ComputeKernelConfig": "ttdecode.config",
    "SDPAProgramConfig": "ttdecode.config",
    "combine_partials": "ttdecode.distributed.context",
    "context_parallel_decode": "ttdecode.distributed.context",
    "DataType": "ttdecode.core.formats",
    "rotary_kv_append": "ttdecode.ops.rotary_append.op",
    "allocate_kv_pool": "ttdecode.kv_pool",
    "to_bank_local": "ttdecode.kv_pool",
    "to_tile_pages": "ttdecode.kv_pool",
    "is_bank_local": "ttdecode.kv_pool",
    "paged_fill_cache": "ttdecode.ops.paged_fill.op",
    "paged_update_cache": "ttdecode.ops.paged_update.op",
    "patch_ttnn": "ttdecode.patch",
    "unpatch_ttnn": "ttdecode.patch",
    "TileTensor": "ttdecode.core.tensor",
    "from_torch": "ttdecode.core.tensor",
    "to_torch": "ttdecode.core.tensor",
}
_DTYPES = ("float32", "bfloat16", "bfloat8_b", "bfloat4_b")


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562) and keep the name here."""
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    elif name in _DTYPES:
        value = getattr(importlib.import_module("ttdecode.core.formats").DataType, name)
    else:
        raise AttributeError(f"module 'ttdecode' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "scaled_dot_product_attention_decode",
    "paged_scaled_dot_product_attention_decode",
    "last_backend",
    "DecodeOptions",
    "plan_decode",
    "FlashDecodeStep",
    "context_parallel_decode",
    "combine_partials",
    "rotary_kv_append",
    "allocate_kv_pool",
    "to_bank_local",
    "to_tile_pages",
    "is_bank_local",
    "paged_fill_cache",
    "paged_update_cache",
    "patch_ttnn",
    "unpatch_ttnn",
    "SDPAProgramConfig",
    "ComputeKernelConfig",
    "DataType",
    "TileTensor",
    "from_torch",
    "to_torch",
    "float32",
    "bfloat16",
    "bfloat8_b",
    "bfloat4_b",
]
