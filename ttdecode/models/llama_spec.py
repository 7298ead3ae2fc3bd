"""The shape of a Llama model as read from its Hugging Face config (`LlamaSpec`), the models' uniform
argument error (`fail`) and the most new tokens per user in one decode step (`MAX_TOKENS`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ttdecode.models import rope

__all__ = ["LlamaSpec", "MAX_TOKENS", "fail"]

#: Most new tokens per user in one step (the op's multi-token decode).
MAX_TOKENS = 32


def fail(arg: str, expected: str, got: object, exc: type = ValueError) -> Exception:
    """The error for a bad argument: ``<arg>: expected <expected>, got <got>`` of type ``exc``."""
    return exc(f"{arg}: expected {expected}, got {got}")


@dataclass(frozen=True)
class LlamaSpec:
    """The shape of a Llama model (from its Hugging Face config): sizes in elements, ``head_dim`` per
    head, ``rope_theta`` the RoPE base and ``rope_scaling`` the config's scaling dict (None: none)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Optional[dict]
    attention_bias: bool
    mlp_bias: bool

    @classmethod
    def from_config(cls, config: Any) -> "LlamaSpec":
        """From a Hugging Face ``LlamaConfig``; refuses other model types, activations other than SiLU
        and RoPE scalings `rope.inv_freq` does not know."""
        if getattr(config, "model_type", None) != "llama":
            raise fail("model", "a Hugging Face Llama (config.model_type 'llama')",
                       f"model_type {getattr(config, 'model_type', None)!r}", TypeError)
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise fail("model", "config.hidden_act 'silu' (SwiGLU)", repr(act), NotImplementedError)
        heads = int(config.num_attention_heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        scaling = getattr(config, "rope_scaling", None)
        rope.inv_freq(int(head_dim), float(config.rope_theta), scaling)  # refuses unknown scalings
        return cls(
            vocab_size=int(config.vocab_size), hidden_size=int(config.hidden_size),
            num_layers=int(config.num_hidden_layers), num_heads=heads,
            num_kv_heads=int(getattr(config, "num_key_value_heads", None) or heads), head_dim=int(head_dim),
            intermediate_size=int(config.intermediate_size), rms_norm_eps=float(config.rms_norm_eps),
            rope_theta=float(config.rope_theta), rope_scaling=dict(scaling) if scaling else None,
            attention_bias=bool(getattr(config, "attention_bias", False)),
            mlp_bias=bool(getattr(config, "mlp_bias", False)),
        )
