"""Models over the FlashDecode op: Llama decode (``ttdecode.models.llama``), its RoPE
(``rope``) and paged KV cache with the per-user block allocator (``kv_cache``)."""

from ttdecode.models.llama import LlamaDecoder, LlamaSpec

__all__ = ["LlamaDecoder", "LlamaSpec"]
