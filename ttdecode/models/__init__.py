"""Models over the FlashDecode op: Llama decode (``ttdecode.models.llama``), its RoPE
(``rope``) and paged KV cache with the per-user block allocator (``kv_cache``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ttdecode.models.llama import LlamaDecoder, LlamaSpec

__all__ = ["LlamaDecoder", "LlamaSpec"]


def __getattr__(name: str) -> Any:
    """``LlamaDecoder`` and ``LlamaSpec`` import torch on first use only (``python -m ttdecode llama
    --help`` loads ``ttdecode.models.cli`` without them)."""
    if name in __all__:
        from ttdecode.models import llama

        return getattr(llama, name)
    raise AttributeError(f"module 'ttdecode.models' has no attribute {name!r}")
