"""Rotary position embedding of Llama: the default RoPE and the ``llama3`` frequency scaling.

Frequencies (``inv_freq``, ``[D/2]``, radians per position): ``theta ** (-2i / D)``. With
``rope_scaling={"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
"original_max_position_embeddings"}`` (Llama-3.1), wavelengths ``2*pi/inv_freq`` longer than
``original / low_freq_factor`` are divided by ``factor``, those shorter than
``original / high_freq_factor`` kept, and the band between blended linearly in
``original / wavelength``. The rotation uses the half-split layout of Hugging Face checkpoints:
``x * cos + rotate_half(x) * sin`` with ``rotate_half([a, b]) = [-b, a]`` over the last dim.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import torch

__all__ = ["inv_freq", "cos_sin", "apply_rope"]


def _scaling_type(rope_scaling: Optional[Mapping[str, Any]]) -> str:
    if not rope_scaling:
        return "default"
    kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
    return "default" if kind is None else str(kind)


def inv_freq(head_dim: int, theta: float, rope_scaling: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """Rotation frequencies ``[head_dim / 2]`` float64 (radians per position).

    ``rope_scaling``: None / ``{"rope_type": "default"}`` or ``llama3`` (see the module doc);
    any other type is refused by name."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float64) / head_dim
    freq = 1.0 / (float(theta) ** exponents)
    kind = _scaling_type(rope_scaling)
    if kind == "default":
        return freq
    if kind != "llama3":
        raise NotImplementedError(f"rope_scaling: expected None, 'default' or 'llama3', got rope_type {kind!r}")
    factor = float(rope_scaling["factor"])
    low = float(rope_scaling["low_freq_factor"])
    high = float(rope_scaling["high_freq_factor"])
    original = float(rope_scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > original / low, freq / factor, freq)
    blend = (original / wavelen - low) / (high - low)
    blended = (1 - blend) * scaled / factor + blend * scaled
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return torch.where(medium, blended, scaled)


def cos_sin(freq: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[B, D]`` float32 at int ``positions [B]`` (angles in float32 as Hugging Face's)."""
    angles = positions.to(torch.float32)[:, None] * freq.to(torch.float32)[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [B, H, D]`` by ``cos/sin [B, D]`` (half-split layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
