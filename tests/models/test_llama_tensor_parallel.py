"""Tensor parallel Llama decode: devices=2 and devices=8 (worker processes on a gloo group) give
the logits of devices=1 within bf16 noise and the Hugging Face agreement of section 3.

Backend ``reference`` (the op's float64 reference; these cases pin the sharding, the collectives
and the per-device caches, not the kernels, which test_llama_hf runs on the host backend)."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.distributed import WorkerError
from ttdecode.models import LlamaDecoder

from _llama_cases import (assert_hf_agreement, hf_llama, joining_schedule, rel_l2,
                          teacher_forced_against_one_device)


@pytest.mark.slow
@pytest.mark.parametrize("devices, heads, kv_heads", [(2, 8, 2), (8, 16, 8)])
def test_tensor_parallel_matches_one_device_and_hf(devices, heads, kv_heads):
    hf = hf_llama(heads, kv_heads, 32 if devices == 8 else 64, vocab=516)  # 516: the LM head's vocab slices pad
    sched = joining_schedule(hf.config.vocab_size)
    options = dict(batch=sched.batch, max_seq_len=64, kv_dtype=ttdecode.bfloat8_b, backend="reference", block_size=32)

    results, worst = teacher_forced_against_one_device(hf, sched, options, devices=devices)
    assert worst <= 1e-2, f"devices={devices} vs devices=1: relative L2 {worst:.3g} > 1e-2"
    assert_hf_agreement(results)


@pytest.mark.slow
@pytest.mark.parametrize("devices, heads, kv_heads, head_dim", [(2, 8, 2, 64), (8, 16, 8, 32)])
def test_tensor_parallel_greedy_generate_equals_hf(devices, heads, kv_heads, head_dim):
    hf = hf_llama(heads, kv_heads, head_dim, separated=True, seed=3)
    prompt = torch.randint(0, hf.config.vocab_size, (2, 4), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                               do_sample=False, pad_token_id=0)
        top2 = hf(expected).logits[:, 3:-1].double().topk(2, dim=-1).values
        assert float((top2[..., 0] - top2[..., 1]).min()) > 1.0  # a clear greedy choice at every step
    with LlamaDecoder.from_hf(hf, batch=2, max_seq_len=32, devices=devices, backend="reference",
                              block_size=32) as dec:
        assert torch.equal(dec.generate(prompt, max_new_tokens=20), expected)


def test_tensor_parallel_on_host_kernels_matches_one_device():
    hf = hf_llama(8, 2, 64, layers=1)
    g = torch.Generator().manual_seed(2)
    seqs = torch.randint(0, hf.config.vocab_size, (2, 4), generator=g)
    options = dict(batch=2, max_seq_len=32, backend="host", block_size=32)
    one = LlamaDecoder.from_hf(hf, **options)
    with LlamaDecoder.from_hf(hf, devices=2, **options) as two:
        for t in range(4):
            pos = torch.tensor([t, t - 1 if t else -1])
            a, b = one.step(seqs[:, t], pos), two.step(seqs[:, t], pos)
            for i in range(2):
                if pos[i] >= 0:
                    assert rel_l2(b[i], a[i]) <= 1e-2


def test_devices_must_divide_the_kv_heads():
    hf = hf_llama(8, 2, 64)
    with pytest.raises(ValueError, match=r"devices: expected a divisor of the model's 2 KV heads .*got 8"):
        LlamaDecoder.from_hf(hf, batch=1, max_seq_len=32, devices=8, backend="reference")


def test_a_dead_device_worker_is_an_error_naming_the_device():
    import os
    import signal

    hf = hf_llama(8, 2, 64, layers=1)
    dec = LlamaDecoder.from_hf(hf, batch=1, max_seq_len=32, devices=2, backend="reference", block_size=32)
    try:
        dec.step(torch.tensor([1]), torch.tensor([0]))
        os.kill(dec._pool._procs[1].pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"device 1: the worker process died"):
            dec.step(torch.tensor([2]), torch.tensor([1]))
    finally:
        dec.close()
