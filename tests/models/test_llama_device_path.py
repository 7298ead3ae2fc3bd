"""The Llama decoder's device path without a device (see ttdecode/models/llama_device.py): the
weight placement over the mesh, the RoPE row permutation the device rotary op needs, the weights as
real ttnn host tensors, the per-chip attention program descriptor, and the step's ttnn ops."""

from __future__ import annotations

import math

import pytest
import torch

from ttdecode.models import LlamaDecoder, LlamaSpec
from ttdecode.core.formats import DataType
from ttdecode.models import llama_device_weights as lw
from ttdecode.models import rope

from _llama_cases import hf_llama


def test_weight_shards_recombine_into_the_hf_projections():
    hf = hf_llama(16, 8, 32)
    spec = LlamaSpec.from_config(hf.config)
    state = hf.state_dict()
    shards = lw.device_torch_weights(state, spec, 8)
    perm = lw.rope_permutation(32)
    wq = state["model.layers.0.self_attn.q_proj.weight"].reshape(16, 32, -1)[:, perm].reshape(16 * 32, -1)
    wk = state["model.layers.0.self_attn.k_proj.weight"].reshape(8, 32, -1)[:, perm].reshape(8 * 32, -1)
    # device r holds q heads 2r, 2r+1 and kv head r, then the down projection's rows of its MLP slice
    for r, w in enumerate(shards):
        qkv = w["0.wqkv"].T
        assert torch.equal(qkv[:64], wq[64 * r:64 * (r + 1)])
        assert torch.equal(qkv[64:96], wk[32 * r:32 * (r + 1)])
        assert torch.equal(qkv[96:], state["model.layers.0.self_attn.v_proj.weight"][32 * r:32 * (r + 1)])
    down = torch.cat([w["0.w_down"] for w in shards], dim=0)
    assert torch.equal(down, state["model.layers.0.mlp.down_proj.weight"].T)
    for p in lw.weight_plan(spec, 8):
        assert tuple(shards[3][p.name].shape) == p.device_shape, p.name


def test_rope_permutation_turns_half_split_rotation_into_interleaved_pairs_and_keeps_q_dot_k():
    from ttdecode.models import rope

    d = 64
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, d, generator=g), torch.randn(1, 1, d, generator=g)
    cos, sin = rope.cos_sin(rope.inv_freq(d, 10000.0), torch.tensor([37]))
    perm = lw.rope_permutation(d)
    # interleaved-pair rotation written plainly: (x, y) -> (x cos - y sin, x sin + y cos) per pair
    def interleaved(x: torch.Tensor, angle_cos: torch.Tensor, angle_sin: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, 2)
        c, s = angle_cos[0, : d // 2], angle_sin[0, : d // 2]
        return torch.stack([x2[:, 0] * c - x2[:, 1] * s, x2[:, 0] * s + x2[:, 1] * c], dim=1).reshape(-1)
    q_half = rope.apply_rope(q, cos, sin)[0, 0]
    assert torch.allclose(interleaved(q[0, 0][perm], cos, sin), q_half[perm], atol=1e-6)
    k_half = rope.apply_rope(k, cos, sin)[0, 0]
    assert math.isclose(float(interleaved(q[0, 0][perm], cos, sin) @ interleaved(k[0, 0][perm], cos, sin)),
                        float(q_half @ k_half), rel_tol=1e-5)


def test_device_weights_are_ttnn_tile_tensors_in_the_planned_formats(ttnn):
    hf = hf_llama(8, 2, 64, layers=1)
    spec = LlamaSpec.from_config(hf.config)
    tensors = lw.device_weights(hf.state_dict(), spec, 2, ttnn)
    plan = {p.name: p for p in lw.weight_plan(spec, 2)}
    assert set(tensors[1]) == set(plan)
    for name, t in tensors[1].items():
        assert tuple(t.shape) == plan[name].device_shape
        assert t.layout == ttnn.TILE_LAYOUT and t.dtype == getattr(ttnn, plan[name].dtype)


@pytest.mark.parametrize("heads, kv_heads, devices", [(32, 8, 1), (64, 8, 8)])
def test_per_chip_attention_program_descriptor_builds_for_llama31_shapes(ttnn, heads, kv_heads, devices):
    spec = LlamaSpec(vocab_size=128256, hidden_size=heads * 128, num_layers=1, num_heads=heads,
                     num_kv_heads=kv_heads, head_dim=128, intermediate_size=28672, rms_norm_eps=1e-5,
                     rope_theta=500000.0, rope_scaling=None, attention_bias=False, mlp_bias=False)
    plan, desc = lw.attention_descriptor(spec, devices, batch=32, max_seq_len=8192)
    assert plan.num_q_heads == heads // devices and plan.num_kv_heads == kv_heads // devices
    assert plan.paged and plan.block_size == 64
    assert isinstance(desc, ttnn.ProgramDescriptor) and len(desc.kernels) == 3


@pytest.mark.parametrize("heads, kv_heads, devices", [(32, 8, 1), (64, 8, 8)])
def test_per_chip_rotary_append_descriptor_builds_for_llama31_shapes(ttnn, heads, kv_heads, devices):
    spec = LlamaSpec(vocab_size=128256, hidden_size=heads * 128, num_layers=1, num_heads=heads,
                     num_kv_heads=kv_heads, head_dim=128, intermediate_size=28672, rms_norm_eps=1e-5,
                     rope_theta=500000.0, rope_scaling=None, attention_bias=False, mlp_bias=False)
    program, desc = lw.rotary_append_descriptor(spec, devices, batch=32, max_seq_len=8192)
    assert isinstance(desc, ttnn.ProgramDescriptor) and len(desc.kernels) == 3
    qkv = program.tensor("qkv")
    assert qkv.shape == (1, 32, (heads + 2 * kv_heads) // devices * 128)
    assert program.tensor("k_cache").in_place and program.tensor("k_cache").data_format is DataType.bfloat8_b
    reader = desc.kernels[0]
    assert dict(reader.named_compile_time_args)["packed"] == 1
    assert dict(reader.named_compile_time_args)["num_q_heads"] == heads // devices


def test_interleaved_rotation_of_permuted_rows_is_the_permuted_half_split_rotation():
    """The device step's convention: rotary_kv_append with interleaved pairs on rope_permutation'd
    q/k rows gives exactly the permuted rows of the half-split rotation (host kernels)."""
    import ttdecode

    b, nh, nkv, d = 2, 2, 1, 64
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, b, n, d, generator=g) for n in (nh, nkv, nkv))
    cos, sin = rope.cos_sin(rope.inv_freq(d, 10000.0), torch.tensor([5, 40]))
    caches = [ttdecode.from_torch(torch.zeros(b, nkv, 64, d), dtype=DataType.bfloat16) for _ in range(2)]
    perm = lw.rope_permutation(d)
    half = ttdecode.rotary_kv_append(k, v, *caches, cur_pos=[5, 40], cos=cos, sin=sin, q=q, backend="host")
    pairs = ttdecode.rotary_kv_append(k[..., perm], v, *caches, cur_pos=[5, 40], cos=cos, sin=sin, q=q[..., perm],
                                      rotary_interleaved=True, backend="host")
    assert torch.equal(pairs[0], half[0][..., perm])
    k_half, k_pairs = ttdecode.to_torch(half[1]), ttdecode.to_torch(pairs[1])
    assert torch.equal(k_pairs, k_half[..., perm])


def test_every_ttnn_op_of_the_device_step_exists_in_ttnn(ttnn):
    for name in lw.DECODE_STEP_OPS:
        obj = ttnn
        for part in name.split("."):
            assert hasattr(obj, part), f"ttnn has no {name}"
            obj = getattr(obj, part)


def test_device_backend_without_a_device_is_refused_by_name():
    hf = hf_llama(8, 2, 64, layers=1)
    with pytest.raises(RuntimeError, match=r"backend: 'device' needs a Tenstorrent Wormhole"):
        LlamaDecoder.from_hf(hf, batch=1, max_seq_len=32, backend="device")
