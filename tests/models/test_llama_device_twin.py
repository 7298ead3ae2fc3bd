"""The device decoder's dataflow checked for numbers without a device: `llama_device.DeviceDecoder`
runs its step unchanged against a torch twin of the ttnn calls it makes (a stand-in ``ttnn`` module:
slice, typecast, relu, reshape, embedding, rms_norm, linear, add, mul, argmax, the host writes and
reads), with the weights, RoPE tables and caches quantized exactly as ``ttnn.from_torch`` quantizes
them (the real ttnn's host conversion), and our two programs replaced by plain torch (RoPE on
interleaved pairs + the paged append; paged attention). The mock Wormhole computes nothing, so this
is what says that the step's wiring -- weight orientation, the Q/K row permutation and the RoPE
tables, the input row's slices, the head concat, GQA, SwiGLU, the LM head -- computes Llama: the
teacher-forced logits meet Hugging Face's with the host backends' thresholds. Also tensor parallel on
a twin 1 x 2 mesh (the collectives as sums / concatenations over the devices; without the
all_reduce the relative L2 is 1.15). Activations stay float32 here (the chip's are bfloat16): the
device's own rounding is not what this checks."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ttdecode.models import LlamaDecoder
from ttdecode.models import llama_device as ld

from _llama_cases import assert_hf_agreement, hf_llama, joining_schedule, multi_token_drafts, teacher_forced


class TwinTensor:
    """A 'device tensor' of the twin: one float32 / int torch value per device of the mesh."""

    def __init__(self, ts: list) -> None:
        self.ts = ts

    @property
    def t(self) -> torch.Tensor:
        return self.ts[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.ts[0].shape)


def each(fn):
    """An op of the twin: `fn` on every device's values (tensor arguments aligned by device)."""
    def op(*args, **kwargs):
        n = next(len(a.ts) for a in args if isinstance(a, TwinTensor))
        pick = lambda a, d: a.ts[d] if isinstance(a, TwinTensor) else a  # noqa: E731
        return TwinTensor([fn(*(pick(a, d) for a in args), **{k: pick(v, d) for k, v in kwargs.items()})
                           for d in range(n)])
    return op


class TwinDevice:
    """A 1 x n mesh (n = 1: one chip)."""

    def __init__(self, n: int = 1) -> None:
        self.n = n

    def get_num_devices(self) -> int:
        return self.n

    def dram_grid_size(self) -> SimpleNamespace:
        return SimpleNamespace(x=12, y=1)  # a Wormhole's DRAM banks (the bank-local pools' memory config)


def twin_ttnn(ttnn: Any, n: int) -> SimpleNamespace:
    """The ttnn calls of DeviceDecoder on torch values over n devices; conversions through the real
    ttnn (host only); the collectives as sums and concatenations over the devices."""

    def quantized(t: torch.Tensor, dtype: Any) -> torch.Tensor:
        if not t.is_floating_point():
            return t.clone()
        host = ttnn.from_torch(t.to(torch.float32), dtype=dtype, layout=ttnn.TILE_LAYOUT)
        return ttnn.to_torch(host).to(torch.float32).reshape(t.shape)

    def from_torch(t, dtype=None, layout=None, device=None, memory_config=None, mesh_mapper=None):
        if device is None and mesh_mapper is None and t.is_floating_point():
            return ttnn.from_torch(t, dtype=dtype, layout=layout)  # a real host tensor (device_weights)
        if mesh_mapper is not None and mesh_mapper[0] == "shard":
            return TwinTensor([quantized(c.contiguous(), dtype) for c in t.chunk(n, dim=mesh_mapper[1])])
        return TwinTensor([quantized(t, dtype) for _ in range(n)])

    def to_device(host, device, memory_config=None):
        return TwinTensor([ttnn.to_torch(host).to(torch.float32)])

    def copy_host_to_device_tensor(src, dst):
        dst.ts = [t.clone() for t in src.ts]

    def rms_norm(x, weight, epsilon):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon) * weight.reshape(-1)

    def linear(x, w, activation=None):
        y = x @ w
        return torch.nn.functional.silu(y) if activation == "silu" else y

    return SimpleNamespace(
        DRAM_MEMORY_CONFIG=None, TILE_LAYOUT=ttnn.TILE_LAYOUT, ROW_MAJOR_LAYOUT=ttnn.ROW_MAJOR_LAYOUT,
        bfloat16=ttnn.bfloat16, bfloat8_b=ttnn.bfloat8_b, bfloat4_b=ttnn.bfloat4_b, float32=ttnn.float32,
        int32=ttnn.int32, uint32=ttnn.uint32, DataType=ttnn.DataType,
        # the host-side objects of a bank-local pool's memory config (ttdecode.ttnn_backend.key_row_memory_config)
        **{name: getattr(ttnn, name) for name in ("CoreRangeSet", "CoreRange", "CoreCoord", "NdShardSpec", "Shape",
                                                  "ShardOrientation", "ShardDistributionStrategy", "MemoryConfig",
                                                  "BufferType")},
        ReplicateTensorToMesh=lambda device: ("replicate",),
        ShardTensorToMesh=lambda device, dim: ("shard", dim),
        from_torch=from_torch, to_device=to_device, to_layout=lambda t, layout: ttnn.to_layout(t, layout),
        copy_host_to_device_tensor=copy_host_to_device_tensor,
        slice=each(lambda x, start, end: x[tuple(slice(a, b) for a, b in zip(start, end))]),
        typecast=each(lambda x, dtype: x.clone()), relu=each(lambda x: x.clamp(min=0)),
        reshape=each(lambda x, shape: x.reshape(shape)),
        embedding=each(lambda idx, table, layout=None, dtype=None, memory_config=None: table[idx.long()]),
        rms_norm=each(rms_norm), linear=each(linear), add=each(lambda a, b: a + b), mul=each(lambda a, b: a * b),
        argmax=each(lambda x, dim: x.argmax(dim)),
        all_reduce=lambda x: TwinTensor([sum(x.ts)] * len(x.ts)),
        all_gather=lambda x, dim: TwinTensor([torch.cat(x.ts, dim=dim)] * len(x.ts)),
        get_device_tensors=lambda x: [TwinTensor([t]) for t in x.ts],
        to_torch=lambda x: x.t.clone(), deallocate=lambda t: None,
    )


class TwinDecoder(ld.DeviceDecoder):
    """DeviceDecoder on the twin: our programs as torch (same inputs, same conventions), per device."""

    real_ttnn: Any = None
    weights = "bfloat8_b"

    def __init__(self, *args: Any, device: Any, **kwargs: Any) -> None:
        super().__init__(*args, device=device, ttnn=twin_ttnn(self.real_ttnn, device.n), weight_dtype=self.weights,
                         **kwargs)

    def _prepare_rotary(self, kv_dtype: Any, cache_shape: tuple[int, ...]) -> Any:
        self.cache_dtype = getattr(self.real_ttnn, kv_dtype.value)
        return None

    def _rotary_append(self, qkv, cos, sin, pos, table, kc, vc):
        self.ops["rotary_kv_append"] = self.ops.get("rotary_kv_append", 0) + 1
        b, nh, nkv, d = qkv.shape[1], self.nh, self.nkv, self.spec.head_dim  # b: the T B rows
        bs, real = self.block_size, self.real_ttnn
        out = []
        for dev in range(len(qkv.ts)):
            x = qkv.ts[dev].reshape(b, nh + 2 * nkv, d)
            rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).reshape(x.shape)  # pairs (2i, 2i+1)
            c, s = cos.ts[dev][:, None, :d], sin.ts[dev][:, None, :d]
            y = x * c + rot * s
            q, k, v = y[:, :nh], y[:, nh:nh + nkv], x[:, nh + nkv:]
            for u in range(b):
                p = int(pos.ts[dev][u])
                if p >= 0:
                    blk = int(table.ts[dev][u, p // bs])
                    # the row alone in its format (its own shared exponents), as the append writes it
                    for cache, rows in ((kc, k), (vc, v)):
                        tile = torch.zeros(nkv, 32, d)
                        tile[:, 0] = rows[u]
                        host = real.from_torch(tile, dtype=self.cache_dtype, layout=real.TILE_LAYOUT)
                        cache.ts[dev][blk, :, p % bs] = real.to_torch(host).to(torch.float32)[:, 0]
            out.append(q.to(torch.bfloat16).to(torch.float32)[None])
        return TwinTensor(out)

    def _attention(self, q, k, v, positions, page_table):
        self.ops["flash_decode"] = self.ops.get("flash_decode", 0) + 1
        b, nh, nkv, d, bs = self.batch, self.nh, self.nkv, self.spec.head_dim, self.block_size
        t = q.shape[0]  # tokens per user: token j of user u at positions[u] - (t - 1 - j)
        outs = []
        for dev in range(len(q.ts)):
            out = torch.zeros(t, b, nh, d)
            for u in range(b):
                last = int(positions.ts[dev][u])
                if last < 0:
                    continue
                for j in range(t):
                    p = last - (t - 1 - j)
                    blocks = page_table.ts[dev][u, : p // bs + 1].long()
                    keys = k.ts[dev][blocks].permute(1, 0, 2, 3).reshape(nkv, -1, d)[:, : p + 1]
                    vals = v.ts[dev][blocks].permute(1, 0, 2, 3).reshape(nkv, -1, d)[:, : p + 1]
                    qh = q.ts[dev][j, u].reshape(nkv, nh // nkv, d)
                    w = torch.softmax(qh @ keys.transpose(1, 2) / math.sqrt(d), dim=-1)
                    out[j, u] = (w @ vals).reshape(nh, d)
            outs.append(out)
        return TwinTensor(outs)


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
                               backend="device", device=TwinDevice(1))
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


@pytest.mark.parametrize("vocab", [512, 511])
def test_tensor_parallel_device_step_dataflow_matches_hf_teacher_forced(ttnn, monkeypatch, vocab):
    """The mesh decoder's split (weight_plan's shard dims over device_torch_weights' slices, each
    device's heads and caches, all_reduce after O and down, all_gather of the vocabulary) on the
    twin's 1 x N mesh: the host backends' thresholds with bfloat16 weights."""
    monkeypatch.setattr(TwinDecoder, "real_ttnn", ttnn)
    monkeypatch.setattr(TwinDecoder, "weights", "bfloat16")
    monkeypatch.setattr(ld, "DeviceDecoder", TwinDecoder)
    devices = 2
    hf = hf_llama(8, 2, 64, vocab=vocab)  # 511: the LM head's last slice zero-padded (cut before the argmax)
    sched = joining_schedule(hf.config.vocab_size)
    dec = LlamaDecoder.from_hf(hf, batch=sched.batch, max_seq_len=64, block_size=32, kv_dtype="bfloat16",
                               devices=devices, backend="device", device=TwinDevice(devices))
    assert dec._device.tp == devices and dec._device.nkv == 2 // devices
    assert_hf_agreement(teacher_forced(dec, hf, sched))
    assert dec._device.ops["all_reduce"] == 2 * 2 and dec._device.ops["all_gather"] == 1
    assert dec._device.ops["slice"] == 3 + (vocab % devices != 0)
    # the argmax on the device: ids within the vocabulary, equal to the logits' argmax
    tokens, positions = torch.tensor([3, 5, 7]), torch.tensor([0, 0, -1])
    dec2 = LlamaDecoder.from_hf(hf, batch=3, max_seq_len=64, block_size=32, kv_dtype="bfloat16", devices=devices,
                                backend="device", device=TwinDevice(devices))
    ids = dec2.next_tokens(tokens, positions)
    logits = dec.step(tokens, positions)
    assert ids.tolist()[:2] == logits.argmax(-1).tolist()[:2] and ids[2] == -1


def test_multi_token_device_steps_match_hf(ttnn, monkeypatch):
    """T tokens per user as one device step of T B rows (token-major: the rotary append's rows and
    FlashDecode's Q [T, B, NH, D]; FlashDecode at each user's last position, the append's page table
    repeated per token): the host backends' multi-token case meets Hugging Face with their thresholds."""
    monkeypatch.setattr(TwinDecoder, "real_ttnn", ttnn)
    monkeypatch.setattr(TwinDecoder, "weights", "bfloat16")
    monkeypatch.setattr(ld, "DeviceDecoder", TwinDecoder)
    hf = hf_llama(8, 2, 64, layers=2)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=64, kv_dtype="bfloat8_b", block_size=32, backend="device",
                               device=TwinDevice(1))
    assert_hf_agreement(multi_token_drafts(dec, hf))
    # greedy: the ids of every row (the device's argmax), -1 for an idle user
    tokens, positions = torch.tensor([[3, 5, 7], [1, 2, 4]]), torch.tensor([37, -1])
    ids = dec.next_tokens(tokens, positions)
    # one rotary append and one FlashDecode per layer for the step's T tokens, then the argmax
    ops = dec._device.ops
    assert (ops["rotary_kv_append"], ops["flash_decode"], ops["argmax"]) == (2, 2, 1), ops
    dec.step(tokens[:, :1], torch.tensor([37, -1]))  # rewinds user 0 to 37: the same rows again
    logits = dec.step(tokens, positions)
    assert ids.shape == (2, 3) and ids[1].tolist() == [-1, -1, -1]
    assert ids[0].tolist() == logits[0].argmax(-1).tolist()


def test_generate_on_the_device_twin_equals_the_host_backend(ttnn, monkeypatch):
    """generate's prompts in chunks of up to 32 tokens per user on the device path: the tokens of the
    host backend, in as many steps."""
    monkeypatch.setattr(TwinDecoder, "real_ttnn", ttnn)
    monkeypatch.setattr(TwinDecoder, "weights", "bfloat16")
    monkeypatch.setattr(ld, "DeviceDecoder", TwinDecoder)
    hf = hf_llama(8, 2, 64, layers=1)
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(0, hf.config.vocab_size, (n,), generator=g) for n in (5, 40)]
    got = {}
    for backend, device in (("host", None), ("device", TwinDevice(1))):
        dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=64, kv_dtype="bfloat16", block_size=32, backend=backend,
                                   device=device)
        got[backend] = (dec.generate(prompts, 4, progress=False), dec.generate_steps)
    assert got["device"][1] == got["host"][1] == (2, 3)
    for b in range(2):
        assert torch.equal(got["device"][0][b], got["host"][0][b])
