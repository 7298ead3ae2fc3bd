"""Llama decode against Hugging Face's LlamaForCausalLM (random weights, float32 eager attention).

Backends: ``host`` runs the FlashDecode kernels on the host runtime (these cases prove the
kernels inside the model); ``reference`` is the op's float64 reference (cases about the model
plumbing: configs, cache formats, checkpoint loading).
"""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.models import LlamaDecoder

from _llama_cases import assert_hf_agreement, hf_llama, joining_schedule, teacher_forced

CONFIGS = {"8q2kv_d64": (8, 2, 64), "16q2kv_d128": (16, 2, 128)}


@pytest.mark.slow
@pytest.mark.parametrize(
    "config, kv_dtype, backend, kv_pages",
    [
        ("8q2kv_d64", "bfloat8_b", "host", "key_row"),
        ("8q2kv_d64", "bfloat8_b", "host", "tile"),
        ("16q2kv_d128", "bfloat16", "host", "key_row"),
        ("8q2kv_d64", "bfloat16", "reference", "key_row"),
        ("16q2kv_d128", "bfloat8_b", "reference", "key_row"),
    ],
)
def test_teacher_forced_logits_match_hf_with_users_joining(config, kv_dtype, backend, kv_pages):
    """kv_pages "key_row" (the default, bank-local pools, balanced blocks) and "tile" (ttnn's pages)."""
    hf = hf_llama(*CONFIGS[config])
    sched = joining_schedule(hf.config.vocab_size)
    dec = LlamaDecoder.from_hf(hf, batch=sched.batch, max_seq_len=64, kv_dtype=getattr(ttdecode, kv_dtype),
                               backend=backend, block_size=32, kv_pages=kv_pages)
    assert dec.allocator.policy == ("balanced" if kv_pages == "key_row" else "first_free")
    results = teacher_forced(dec, hf, sched)
    assert len(results) == 6 + 8 + 5 + 3
    assert_hf_agreement(results)


@pytest.mark.slow
def test_greedy_generate_equals_hf_generate_on_host_kernels():
    hf = hf_llama(8, 2, 64, separated=True, seed=3)
    prompt = torch.randint(0, hf.config.vocab_size, (2, 4), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20,
                               do_sample=False, pad_token_id=0)
        # the test means something only if the greedy choice is clear: top-2 gap of every step
        logits = hf(expected).logits[:, 3:-1].double()
        top2 = logits.topk(2, dim=-1).values
        assert float((top2[..., 0] - top2[..., 1]).min()) > 1.0
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=32, kv_dtype=ttdecode.bfloat16, backend="host",
                               block_size=32)
    got = dec.generate(prompt, max_new_tokens=20)
    assert got.dtype == torch.int64 and got.shape == (2, 24)
    assert torch.equal(got, expected)


def test_from_pretrained_loads_a_saved_checkpoint_like_from_hf(tmp_path):
    hf = hf_llama(8, 2, 64, rope_scaling=None)  # default RoPE
    hf.save_pretrained(tmp_path)
    a = LlamaDecoder.from_pretrained(tmp_path, batch=1, max_seq_len=32, backend="reference", block_size=32)
    b = LlamaDecoder.from_hf(hf, batch=1, max_seq_len=32, backend="reference", block_size=32)
    sched = joining_schedule(hf.config.vocab_size)
    for t in range(4):
        tok, pos = torch.tensor([int(sched.users[0][1][t])]), torch.tensor([t])
        torch.testing.assert_close(a.step(tok, pos), b.step(tok, pos), rtol=1e-5, atol=1e-5)  # BLAS may round

    results = teacher_forced(LlamaDecoder.from_pretrained(tmp_path, batch=3, max_seq_len=32, backend="reference",
                                                          block_size=32), hf, sched)
    assert_hf_agreement(results)


def test_a_users_logits_are_bit_identical_whatever_the_other_slots_hold():
    # host kernels; the same decoder batch (slot count), other slots idle, busy or joining
    hf = hf_llama(8, 2, 64, layers=1)
    g = torch.Generator().manual_seed(0)
    mine, others = torch.randint(0, 512, (5,), generator=g), torch.randint(0, 512, (4, 5), generator=g)
    alone = LlamaDecoder.from_hf(hf, batch=4, max_seq_len=64, backend="host", block_size=32)
    crowded = LlamaDecoder.from_hf(hf, batch=4, max_seq_len=64, backend="host", block_size=32)
    for t in range(5):
        a = alone.step(torch.tensor([int(mine[t]), 0, 0, 0]), torch.tensor([t, -1, -1, -1]))
        tokens = others[:, t].clone()
        tokens[2] = mine[t]
        b = crowded.step(tokens, torch.tensor([t, max(t - 2, -1), t, t if t < 3 else -1]))
        assert torch.equal(a[0], b[2])


def test_the_constructor_logs_the_cache_size_in_one_line(caplog):
    hf = hf_llama(8, 2, 64, layers=1)
    with caplog.at_level("INFO", logger="ttdecode"):
        dec = LlamaDecoder.from_hf(hf, batch=3, max_seq_len=100, kv_dtype=ttdecode.bfloat8_b, backend="reference",
                                   block_size=32)
    lines = [r.getMessage() for r in caplog.records if "KV cache" in r.getMessage()]
    assert len(lines) == 1
    # 1 layer x K,V x (3 users x 4 blocks) x 2 heads x 32 x 64 values at 1088 bytes per 1024-value tile
    expected = 2 * 12 * 2 * 32 * 64 // 1024 * 1088
    assert dec.cache_bytes == expected and f"{expected / 2**20:.2f} MiB" in lines[0]
    assert "12 blocks" in lines[0] and "bfloat8_b" in lines[0]
