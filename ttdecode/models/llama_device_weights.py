"""The Llama decoder's weights in their device forms, and one chip's programs described ahead of time.

`llama_device.DeviceDecoder` puts these weights on its device or mesh; the host-side checks take the
same preparation (round trips through ttnn host tensors, tests/models/test_llama_device_weights.py):

* `weight_plan(spec, devices)`: every weight's device form: ttnn dtype, TILE layout, ``[in, out]``
  orientation (``ttnn.linear`` multiplies ``x @ w``), and its mesh placement (the dimension that
  ``ttnn.ShardTensorToMesh`` would split over the ``1 x devices`` mesh, or replicated), following
  the Megatron split of ``ttdecode.models.llama``: the fused QKV weight is column-parallel by KV
  head group, O and down projections are row-parallel (sharded on their input dim), gate/up
  column-parallel, the LM head split over the vocabulary.
* `device_weights(state, spec, devices, ttnn)`: per device, those weights as ttnn host tensors
  (``ttnn.from_torch`` in their ttnn dtype and TILE layout; the mesh mapper needs an open mesh
  device, so the per-device slices are cut here exactly as ``ShardTensorToMesh`` cuts them:
  contiguous equal chunks). Q and K rows are permuted from Hugging Face's half-split RoPE layout to
  the interleaved-pair layout (what ``ttnn.experimental.rotary_embedding_llama`` rotates, and what the
  step's ``ttdecode.rotary_kv_append`` is told to rotate, ``rotary_interleaved=True``); q.k is
  unchanged because both sides get the same permutation (`rope_permutation`).
* `attention_descriptor(spec, devices, batch, max_seq_len, block_size, kv_dtype, ttnn)`: one
  layer's FlashDecode on one chip (that chip's heads, the paged cache) as the op's real
  ``ttnn.ProgramDescriptor`` via ``ttdecode.ttnn_backend.build_program_descriptor``, with placeholder
  DRAM addresses and NoC coordinates (a device supplies both at launch).
* `rotary_append_descriptor(...)`: one layer's fused RoPE + cache append on one chip
  (``ttdecode.rotary_kv_append`` with the fused QKV output as its packed ``qkv`` input, interleaved
  pairs since the Q/K rows are permuted as above, the paged cache) as its real
  ``ttnn.ProgramDescriptor``, in place of ttnn's ``nlp_create_qkv_heads_decode`` +
  ``rotary_embedding_llama`` + ``paged_update_cache``; placeholder addresses as above.
* `DECODE_STEP_OPS`: the ttnn ops of the tensor-parallel step per layer, in order (the one-chip
  `DeviceDecoder` runs them without the collectives); a test checks that each exists in ttnn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings, MathFidelity
from ttdecode.distributed.device_context import rotary_program
from ttdecode.kv_pool import page_table_blocks
from ttdecode.models.llama_spec import LlamaSpec
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.ops.flash_decode.program_factory import build_program_for_device
from ttdecode.ttnn_backend.descriptor import build_program_descriptor

__all__ = ["WeightPlacement", "weight_plan", "device_torch_weights", "device_weights", "rope_permutation",
           "attention_descriptor", "rotary_append_descriptor", "DECODE_STEP_OPS"]

#: The ttnn calls of one tensor-parallel decode step (embedding, per layer, final norm, LM head, argmax).
DECODE_STEP_OPS = (
    "embedding",                                  # token ids -> [1, 1, B, hidden] (replicated table)
    "rms_norm",                                   # input norm
    "linear",                                     # fused QKV, this device's heads
    "reshape",                                    # [1, 1, B, W] -> [1, B, W] (a view of the same tiles)
    "generic_op",                                 # ttdecode.rotary_kv_append: unpack qkv, RoPE on q and k
                                                  # (interleaved pairs), K/V rows into their blocks
    "generic_op",                                 # ttdecode's FlashDecode program (paged)
    "reshape",                                    # concat heads: [1, B, NH, D] -> [1, 1, B, NH * D]
    "linear",                                     # O projection (row-parallel)
    "all_reduce",                                 # over the mesh when devices > 1
    "add",                                        # residual
    "rms_norm",                                   # post-attention norm
    "linear",                                     # gate (column-parallel; SiLU fused as its activation)
    "linear",                                     # up
    "mul",                                        # silu(gate) * up
    "linear",                                     # down (row-parallel)
    "all_reduce",
    "add",
    "rms_norm",                                   # final norm (after the last layer)
    "linear",                                     # LM head slice
    "all_gather",                                 # vocabulary slices -> logits
    "argmax",                                     # greedy decoding: only the ids leave the device
)


@dataclass(frozen=True)
class WeightPlacement:
    """One weight on the device: name, full ``[in, out]`` shape, ttnn dtype name, mesh split dim
    (None = replicated) and the per-device shape."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    shard_dim: Optional[int]
    device_shape: tuple[int, ...]


def weight_plan(spec: LlamaSpec, devices: int, *, weight_dtype: str = "bfloat8_b") -> list[WeightPlacement]:
    """Every weight's device placement for a ``1 x devices`` mesh (see the module doc)."""
    hs, d, n = spec.hidden_size, spec.head_dim, devices
    if spec.num_kv_heads % n or spec.intermediate_size % n:
        raise ValueError(f"devices: expected a divisor of the KV heads ({spec.num_kv_heads}) and of the MLP size "
                         f"({spec.intermediate_size}), got {n}")
    qkv = (spec.num_heads + 2 * spec.num_kv_heads) * d
    vocab = math.ceil(spec.vocab_size / n) * n
    inter = spec.intermediate_size

    def place(name: str, shape: tuple[int, ...], dtype: str, dim: Optional[int]) -> WeightPlacement:
        local = list(shape)
        if dim is not None:
            local[dim] //= n
        return WeightPlacement(name, shape, dtype, dim, tuple(local))

    out = [place("embedding", (spec.vocab_size, hs), "bfloat16", None)]
    for i in range(spec.num_layers):
        out += [
            place(f"{i}.attention_norm", (1, hs), "bfloat16", None),
            place(f"{i}.wqkv", (hs, qkv), weight_dtype, 1),
            place(f"{i}.wo", (spec.num_heads * d, hs), weight_dtype, 0),
            place(f"{i}.ffn_norm", (1, hs), "bfloat16", None),
            place(f"{i}.w_gate", (hs, inter), weight_dtype, 1),
            place(f"{i}.w_up", (hs, inter), weight_dtype, 1),
            place(f"{i}.w_down", (inter, hs), weight_dtype, 0),
        ]
    out += [place("norm", (1, hs), "bfloat16", None), place("lm_head", (hs, vocab), weight_dtype, 1)]
    return out


def rope_permutation(head_dim: int) -> torch.Tensor:
    """Row order taking a head from the half-split layout ``[x0..x(D/2-1), y0..]`` to interleaved
    pairs ``[x0, y0, x1, y1, ...]`` (what ``rotary_embedding_llama`` rotates)."""
    half = head_dim // 2
    return torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).reshape(-1)


def _permute_heads(w: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """Rows of a ``[heads * D, in]`` projection reordered per head by `rope_permutation`."""
    perm = rope_permutation(head_dim)
    return w.reshape(heads, head_dim, -1)[:, perm].reshape(heads * head_dim, -1)


def device_torch_weights(state: dict[str, torch.Tensor], spec: LlamaSpec, devices: int) -> list[dict[str, torch.Tensor]]:
    """Per device, the float32 ``[in, out]`` torch weights of `weight_plan` (slices as the mesh
    mapper cuts them; QKV fused per device as ``[q heads | k heads | v heads]`` of that device)."""
    d, n = spec.head_dim, devices
    group = spec.num_heads // spec.num_kv_heads
    nkv_l = spec.num_kv_heads // n
    f = lambda name: state[name].detach().to(torch.float32)  # noqa: E731
    vocab = math.ceil(spec.vocab_size / n) * n
    lm = state.get("lm_head.weight", state["model.embed_tokens.weight"]).detach().to(torch.float32)
    lm = torch.cat([lm, lm.new_zeros(vocab - lm.shape[0], lm.shape[1])]).T  # [hidden, vocab]
    per_device = []
    for r in range(n):
        w: dict[str, torch.Tensor] = {"embedding": f("model.embed_tokens.weight"),
                                      "norm": f("model.norm.weight")[None],
                                      "lm_head": lm.chunk(n, dim=1)[r]}
        for i in range(spec.num_layers):
            p = f"model.layers.{i}."
            q = _permute_heads(f(p + "self_attn.q_proj.weight"), spec.num_heads, d)
            k = _permute_heads(f(p + "self_attn.k_proj.weight"), spec.num_kv_heads, d)
            v = f(p + "self_attn.v_proj.weight")
            qs = q[r * nkv_l * group * d:(r + 1) * nkv_l * group * d]
            ks, vs = (t[r * nkv_l * d:(r + 1) * nkv_l * d] for t in (k, v))
            w[f"{i}.attention_norm"] = f(p + "input_layernorm.weight")[None]
            w[f"{i}.wqkv"] = torch.cat([qs, ks, vs]).T.contiguous()
            w[f"{i}.wo"] = f(p + "self_attn.o_proj.weight").T.chunk(n, dim=0)[r].contiguous()
            w[f"{i}.ffn_norm"] = f(p + "post_attention_layernorm.weight")[None]
            w[f"{i}.w_gate"] = f(p + "mlp.gate_proj.weight").T.chunk(n, dim=1)[r].contiguous()
            w[f"{i}.w_up"] = f(p + "mlp.up_proj.weight").T.chunk(n, dim=1)[r].contiguous()
            w[f"{i}.w_down"] = f(p + "mlp.down_proj.weight").T.chunk(n, dim=0)[r].contiguous()
        per_device.append(w)
    return per_device


def device_weights(state: dict[str, torch.Tensor], spec: LlamaSpec, devices: int, ttnn: Any,
                   *, weight_dtype: str = "bfloat8_b") -> list[dict[str, Any]]:
    """Per device, the weights as ttnn host tensors (TILE layout, `weight_plan`'s dtypes)."""
    plan = {p.name: p for p in weight_plan(spec, devices, weight_dtype=weight_dtype)}
    out = []
    for w in device_torch_weights(state, spec, devices):
        tensors = {}
        for name, t in w.items():
            p = plan[name]
            if tuple(t.shape) != p.device_shape:
                raise AssertionError(f"{name}: device shape {list(t.shape)} differs from the plan's {list(p.device_shape)}")
            tensors[name] = ttnn.from_torch(t, dtype=getattr(ttnn, p.dtype), layout=ttnn.TILE_LAYOUT)
        out.append(tensors)
    return out


class _PlaceholderView:
    """A DeviceView without a device: an 8x8 grid, NoC coordinates = logical ones, one placeholder
    DRAM address per tensor. Only to build the descriptor; a device supplies the real values."""

    def __init__(self, names: list[str]) -> None:
        self._addr = {name: 0x100000 * (i + 1) for i, name in enumerate(names)}

    def grid_size(self) -> tuple[int, int]:
        return (8, 8)

    def worker_core(self, core: Any) -> tuple[int, int]:
        return core.x, core.y

    def buffer_address(self, name: str) -> int:
        return self._addr[name]


def attention_descriptor(spec: LlamaSpec, devices: int, *, batch: int, max_seq_len: int, block_size: int = 64,
                         kv_dtype: DataType = DataType.bfloat8_b, kv_pages: str = "key_row") -> tuple[Any, Any]:
    """(plan, ``ttnn.ProgramDescriptor``) of one layer's paged FlashDecode on one chip of a
    ``devices``-way mesh (that chip's ``NH/devices`` q and ``NKV/devices`` KV heads, the pools in
    ``kv_pages``: "key_row" bank-local over a Wormhole's 12 banks, or "tile"), with the positions coming
    from the cur_pos tensor at run time."""
    max_blocks = page_table_blocks(math.ceil(max_seq_len / block_size), block_size)
    plan = make_plan(batch=batch, num_q_heads=spec.num_heads // devices, num_kv_heads=spec.num_kv_heads // devices,
                     seq_len=max_blocks * block_size, head_dim=spec.head_dim, kv_dtype=kv_dtype, cur_pos=None,
                     block_size=block_size, num_blocks=batch * max_blocks, kv_pages=kv_pages)
    compute = ComputeSettings(math_fidelity=MathFidelity.HiFi2, fp32_dest_acc_en=plan.fp32_dest_acc_en,
                              math_approx_mode=False)
    program = build_program_for_device(plan, scale=1 / math.sqrt(spec.head_dim), compute=compute)
    names = [t.name for t in program.tensors]
    return plan, build_program_descriptor(program, _PlaceholderView(names))


def rotary_append_descriptor(spec: LlamaSpec, devices: int, *, batch: int, max_seq_len: int, block_size: int = 64,
                             kv_dtype: DataType = DataType.bfloat8_b, kv_pages: str = "key_row") -> tuple[Any, Any]:
    """(Program, ``ttnn.ProgramDescriptor``) of one layer's fused RoPE + paged cache append on one
    chip of a ``devices``-way mesh: packed qkv ``[1, B, (NH + 2 NKV) / devices * D]`` from the fused
    projection, interleaved pairs (the permuted Q/K rows), the chip's paged K and V caches in
    ``kv_pages``."""
    nkv = spec.num_kv_heads // devices
    max_blocks = page_table_blocks(math.ceil(max_seq_len / block_size), block_size)
    program = rotary_program(batch=batch, num_q_heads=spec.num_heads // devices, num_kv_heads=nkv,
                             head_dim=spec.head_dim, cache_dtype=kv_dtype,
                             cache_shape=(batch * max_blocks, nkv, block_size, spec.head_dim), max_blocks=max_blocks,
                             grid=(8, 8), kv_pages=kv_pages)
    names = [t.name for t in program.tensors]
    return program, build_program_descriptor(program, _PlaceholderView(names))
