"""The device decoder's dataflow checked for numbers without a device: `llama_device.DeviceDecoder`
runs its step unchanged against a torch twin of the ttnn calls it makes (a stand-in ``ttnn`` module:
slice, typecast, relu, reshape, embedding, rms_norm, linear, add, mul, argmax, the host writes and
reads), with the weights, RoPE tables and caches quantized exactly as ``ttnn.from_torch`` quantizes
them (the real ttnn's host conversion), and our two programs replaced by plain torch (RoPE on
interleaved pairs + the paged append; paged attention). The mock Wormhole computes nothing, so this
is what says that the step's wiring -- weight orientation, the Q/K row permutation and the RoPE
tables, the input row's slices, the head concat, GQA, SwiGLU, the LM head -- computes Llama: the
teacher-forced logits meet Hugging Face's with the host backends' thresholds. Activations stay
float32 here (the chip's are bfloat16): the device's own rounding is not what this checks."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ttdecode.models import LlamaDecoder
from ttdecode.models import llama_device as ld

from _llama_cases import assert_hf_agreement, hf_llama, joining_schedule, teacher_forced


class TwinTensor:
    """A 'device tensor' of the twin: float32 / int torch values."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.t.shape)


class TwinDevice:
    def get_num_devices(self) -> int:
        return 1


def twin_ttnn(ttnn: Any) -> SimpleNamespace:
    """The ttnn calls of DeviceDecoder on torch values; conversions through the real ttnn (host only)."""

    def quantized(t: torch.Tensor, dtype: Any) -> torch.Tensor:
        if not t.is_floating_point():
            return t.clone()
        host = ttnn.from_torch(t.to(torch.float32), dtype=dtype, layout=ttnn.TILE_LAYOUT)
        return ttnn.to_torch(host).to(torch.float32).reshape(t.shape)

    def from_torch(t, dtype=None, layout=None, device=None, memory_config=None, mesh_mapper=None):
        if device is None and t.is_floating_point():
            return ttnn.from_torch(t, dtype=dtype, layout=layout)  # a real host tensor (device_weights)
        return TwinTensor(quantized(t, dtype))

    def to_device(host, device, memory_config=None):
        return TwinTensor(ttnn.to_torch(host).to(torch.float32))

    def copy_host_to_device_tensor(src, dst):
        dst.t = src.t.clone()

    def rms_norm(x, weight, epsilon):
        v = x.t
        return TwinTensor(v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + epsilon) * weight.t.reshape(-1))

    def linear(x, w, activation=None):
        y = x.t @ w.t
        return TwinTensor(torch.nn.functional.silu(y) if activation == "silu" else y)

    def embedding(idx, table, layout=None, dtype=None, memory_config=None):
        return TwinTensor(table.t[idx.t.long()])

    return SimpleNamespace(
        DRAM_MEMORY_CONFIG=None, TILE_LAYOUT=ttnn.TILE_LAYOUT, ROW_MAJOR_LAYOUT=ttnn.ROW_MAJOR_LAYOUT,
        bfloat16=ttnn.bfloat16, bfloat8_b=ttnn.bfloat8_b, bfloat4_b=ttnn.bfloat4_b, float32=ttnn.float32,
        int32=ttnn.int32, uint32=ttnn.uint32, DataType=ttnn.DataType,
        from_torch=from_torch, to_device=to_device, to_layout=lambda t, layout: ttnn.to_layout(t, layout),
        copy_host_to_device_tensor=copy_host_to_device_tensor,
        slice=lambda x, start, end: TwinTensor(x.t[tuple(slice(a, b) for a, b in zip(start, end))]),
        typecast=lambda x, dtype: TwinTensor(x.t.clone()), relu=lambda x: TwinTensor(x.t.clamp(min=0)),
        reshape=lambda x, shape: TwinTensor(x.t.reshape(shape)), embedding=embedding, rms_norm=rms_norm,
        linear=linear, add=lambda a, b: TwinTensor(a.t + b.t), mul=lambda a, b: TwinTensor(a.t * b.t),
        argmax=lambda x, dim: TwinTensor(x.t.argmax(dim)), to_torch=lambda x: x.t.clone(),
        deallocate=lambda t: None,
    )


class TwinDecoder(ld.DeviceDecoder):
    """DeviceDecoder on the twin: our programs as torch (same inputs, same conventions)."""

    real_ttnn: Any = None
    weights = "bfloat8_b"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, ttnn=twin_ttnn(self.real_ttnn), weight_dtype=self.weights, **kwargs)

    def _prepare_rotary(self, kv_dtype: Any, cache_shape: tuple[int, ...]) -> Any:
        self.cache_dtype = getattr(self.real_ttnn, kv_dtype.value)
        return None

    def _rotary_append(self, qkv, cos, sin, pos, table, kc, vc):
        b, nh, nkv, d = self.batch, self.nh, self.nkv, self.spec.head_dim
        x = qkv.t.reshape(b, nh + 2 * nkv, d)
        rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).reshape(x.shape)  # pairs (2i, 2i+1)
        c, s = cos.t[:, None, :d], sin.t[:, None, :d]
        q, k = (x * c + rot * s)[:, :nh], (x * c + rot * s)[:, nh:nh + nkv]
        v = x[:, nh + nkv:]
        bs = self.block_size
        for u in range(b):
            p = int(pos.t[u])
            if p >= 0:
                blk = int(table.t[u, p // bs])
                # one row written into the cache in its format (the row alone: its own shared exponents)
                for cache, rows in ((kc, k), (vc, v)):
                    tile = torch.zeros(nkv, 32, d)
                    tile[:, 0] = rows[u]
                    host = self.real_ttnn.from_torch(tile, dtype=self.cache_dtype, layout=self.real_ttnn.TILE_LAYOUT)
                    cache.t[blk, :, p % bs] = self.real_ttnn.to_torch(host).to(torch.float32)[:, 0]
        return TwinTensor(q.to(torch.bfloat16).to(torch.float32)[None])

    def _attention(self, q, k, v, positions, page_table):
        self.ops["flash_decode"] = self.ops.get("flash_decode", 0) + 1
        b, nh, nkv, d, bs = self.batch, self.nh, self.nkv, self.spec.head_dim, self.block_size
        out = torch.zeros(1, b, nh, d)
        for u in range(b):
            p = int(positions.t[u])
            if p < 0:
                continue
            blocks = page_table.t[u, : p // bs + 1].long()
            keys = k.t[blocks].permute(1, 0, 2, 3).reshape(nkv, -1, d)[:, : p + 1]
            vals = v.t[blocks].permute(1, 0, 2, 3).reshape(nkv, -1, d)[:, : p + 1]
            group = nh // nkv
            qh = q.t[0, u].reshape(nkv, group, d)
            w = torch.softmax(qh @ keys.transpose(1, 2) / math.sqrt(d), dim=-1)
            out[0, u] = (w @ vals).reshape(nh, d)
        return TwinTensor(out)


@pytest.mark.parametrize("weights, kv_dtype", [("bfloat16", "bfloat16"), ("bfloat16", "bfloat8_b"),
                                               ("bfloat8_b", "bfloat8_b")])
def test_device_step_dataflow_matches_hf_teacher_forced(ttnn, monkeypatch, weights, kv_dtype):
    """bfloat16 weights: the host backends' thresholds. bfloat8_b weights (the device's default) add
    their own rounding: measured max 2.6e-2, mean 2.2e-2 relative L2, argmax 100% on this model;
    checked with the max and argmax thresholds and a 3e-2 mean."""
    monkeypatch.setattr(TwinDecoder, "real_ttnn", ttnn)
    monkeypatch.setattr(TwinDecoder, "weights", weights)
    monkeypatch.setattr(ld, "DeviceDecoder", TwinDecoder)
    hf = hf_llama(8, 2, 64)  # the host backends' HF comparison's model (test_llama_hf)
    sched = joining_schedule(hf.config.vocab_size)
    dec = LlamaDecoder.from_hf(hf, batch=sched.batch, max_seq_len=64, block_size=32, kv_dtype=kv_dtype,
                               backend="device", device=TwinDevice())
    assert isinstance(dec._device, TwinDecoder)
    results = teacher_forced(dec, hf, sched)
    if weights == "bfloat16":
        assert_hf_agreement(results)
    else:
        errs = [e for e, _ in results]
        assert max(errs) <= 5e-2 and sum(errs) / len(errs) <= 3e-2, (max(errs), sum(errs) / len(errs))
        assert sum(a for _, a in results) / len(results) >= 0.95
    # greedy through the device's argmax: the ids of the logits
    tokens, positions = torch.tensor([3, 5, 7]), torch.tensor([0, -1, 0])
    ids = dec.next_tokens(tokens, positions)
    assert ids[1] == -1 and dec._device.ops.get("argmax") == 1
