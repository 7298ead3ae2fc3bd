"""Context parallel Llama decode (issue 12): ``devices=N, context_parallel=C`` (TP N/C ways over heads
times CP C ways over the sequence, the cache's blocks dealt round-robin over the CP ranks) against
Hugging Face, teacher-forced with users joining and leaving, and against ``devices=1``.

Backend ``reference`` (the op's float64 reference on every shard: these cases pin the cache's split,
the local positions, the owner-only cache writes and the LSE merge over the CP group; the kernels
on shards are pinned in tests/distributed/test_context_parallel.py). Sequences run past several
32-position blocks so that every CP rank holds keys (at C = 8, ranks 5..7 hold none: LSE -inf)."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.models import LlamaDecoder

from _llama_cases import assert_hf_agreement, hf_llama, joining_schedule, teacher_forced


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("devices, cp, steps", [(2, 2, 72), (4, 2, 72), (8, 8, 150)])
def test_context_parallel_matches_one_device_and_hf(devices: int, cp: int, steps: int) -> None:
    hf = hf_llama(8, 2 if devices // cp <= 2 else 4, 32, layers=1, vocab=516)
    sched = joining_schedule(hf.config.vocab_size, steps=steps)
    options = dict(batch=sched.batch, max_seq_len=256, kv_dtype=ttdecode.bfloat8_b, backend="reference",
                   block_size=32)

    class Both:  # steps both decoders, checks CP against devices=1 at every step
        def __init__(self) -> None:
            self.one = LlamaDecoder.from_hf(hf, **options)
            self.many = LlamaDecoder.from_hf(hf, devices=devices, context_parallel=cp, **options)
            self.worst = 0.0

        def step(self, tokens, positions):
            a = self.one.step(tokens, positions)
            b = self.many.step(tokens, positions)
            active = positions >= 0
            self.worst = max([self.worst] + [_rel(b[i], a[i]) for i in range(len(a)) if active[i]])
            return b

    both = Both()
    try:
        results = teacher_forced(both, hf, sched)
    finally:
        both.many.close()
    assert both.worst <= 1e-2, f"devices={devices}, cp={cp} vs devices=1: relative L2 {both.worst:.3g} > 1e-2"
    assert_hf_agreement(results)


def test_context_parallel_on_host_kernels_matches_one_device() -> None:
    hf = hf_llama(8, 2, 32, layers=1)
    g = torch.Generator().manual_seed(2)
    seqs = torch.randint(0, hf.config.vocab_size, (2, 40), generator=g)
    options = dict(batch=2, max_seq_len=64, backend="host", block_size=32)
    one = LlamaDecoder.from_hf(hf, **options)
    with LlamaDecoder.from_hf(hf, devices=2, context_parallel=2, **options) as two:
        for t in range(40):
            pos = torch.tensor([t, t - 3 if t >= 3 else -1])
            a, b = one.step(seqs[:, t], pos), two.step(seqs[:, t], pos)
            for i in range(2):
                if pos[i] >= 0:
                    assert _rel(b[i], a[i]) <= 1e-2, (t, i)


@pytest.mark.parametrize("kw, arg", [
    (dict(devices=4, context_parallel=3), "context_parallel"),
    (dict(devices=2, context_parallel=2, max_seq_len=32), "context_parallel"),
    (dict(devices=8, context_parallel=2), "devices"),   # TP 4 ways over 2 KV heads
])
def test_bad_context_parallel_layouts_are_named(kw, arg) -> None:
    hf = hf_llama(8, 2, 32, layers=1)
    options = dict(batch=1, max_seq_len=64, backend="reference", block_size=32)
    options.update(kw)
    with pytest.raises(ValueError, match=arg):
        LlamaDecoder.from_hf(hf, **options)
