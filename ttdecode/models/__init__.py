"""Models over the FlashDecode op: Llama decode (``ttdecode.models.llama``: the decoder; ``llama_spec``:
its shape from the Hugging Face config; ``tensor_parallel``: the split over devices; ``llama_host``: one
device's torch layers and workers; ``generation``: greedy generation; ``llama_device``: the device
backend, ``llama_device_weights`` its weights' device forms), its RoPE (``rope``) and paged KV cache with the per-user block allocator (``kv_cache``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ttdecode.models.llama import LlamaDecoder
    from ttdecode.models.llama_spec import LlamaSpec

__all__ = ["LlamaDecoder", "LlamaSpec"]


def __getattr__(name: str) -> Any:
    """``LlamaDecoder`` and ``LlamaSpec`` import torch on first use only (``python -m ttdecode llama
    --help`` loads ``ttdecode.models.cli`` without them)."""
    if name == "LlamaDecoder":
        from ttdecode.models.llama import LlamaDecoder

        return LlamaDecoder
    if name == "LlamaSpec":
        from ttdecode.models.llama_spec import LlamaSpec

        return LlamaSpec
    raise AttributeError(f"module 'ttdecode.models' has no attribute {name!r}")
