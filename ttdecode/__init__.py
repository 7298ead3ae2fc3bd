"""ttdecode: FlashDecode (decode-phase attention over a long KV cache) for Tenstorrent Wormhole.

Public API (drop-in for ``ttnn.transformer.scaled_dot_product_attention_decode``):

- :func:`scaled_dot_product_attention_decode`, :func:`paged_scaled_dot_product_attention_decode`
- :func:`rotary_kv_append` (fused RoPE + KV-cache append, one program per decode step)
- :func:`context_parallel_decode` (the KV cache split along the sequence over devices) and
  :func:`combine_partials` (the exact LSE merge of partial results)
- :class:`SDPAProgramConfig`, :class:`ComputeKernelConfig`
- host tile tensors mirroring ttnn's host API: :func:`from_torch`, :func:`to_torch`, and the formats
  ``float32``, ``bfloat16``, ``bfloat8_b``, ``bfloat4_b``
"""

from ttdecode.api import (
    last_backend,
    paged_scaled_dot_product_attention_decode,
    scaled_dot_product_attention_decode,
)
from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig
from ttdecode.distributed.context import combine_partials, context_parallel_decode
from ttdecode.formats import DataType
from ttdecode.ops.rotary_append.op import rotary_kv_append
from ttdecode.tensor import TileTensor, from_torch, to_torch

float32 = DataType.float32
bfloat16 = DataType.bfloat16
bfloat8_b = DataType.bfloat8_b
bfloat4_b = DataType.bfloat4_b

__all__ = [
    "scaled_dot_product_attention_decode",
    "paged_scaled_dot_product_attention_decode",
    "last_backend",
    "context_parallel_decode",
    "combine_partials",
    "rotary_kv_append",
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
