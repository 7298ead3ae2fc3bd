"""Small random Hugging Face Llamas and the teacher-forced comparison used by the model tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}


def hf_llama(heads: int, kv_heads: int, head_dim: int, *, layers: int = 2, hidden: int = 256,
             intermediate: int = 512, vocab: int = 512, seed: int = 0, separated: bool = False,
             rope_scaling: dict | None = LLAMA3_ROPE) -> LlamaForCausalLM:
    """A random-weight float32 Llama with eager attention (no network).

    ``separated``: unit-normal embeddings and an LM head of 2x its random rows plus 0.05x the
    embedding of a fixed permutation of the vocabulary, so each step's top logit stands clear of
    the second (the greedy test checks the gap it relies on)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim, max_position_embeddings=256,
        rope_theta=10000.0, rope_scaling=rope_scaling, rms_norm_eps=1e-5, initializer_range=0.05,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, attn_implementation="eager",
    )
    model = LlamaForCausalLM(cfg).eval()
    if separated:
        g = torch.Generator().manual_seed(7)
        perm = torch.randperm(vocab, generator=g)
        with torch.no_grad():
            model.model.embed_tokens.weight.normal_(0, 1, generator=g)
            model.lm_head.weight.copy_(2 * model.lm_head.weight + 0.05 * model.model.embed_tokens.weight[perm])
    return model


@dataclass(frozen=True)
class Schedule:
    """Who is where at each step: ``users[s]`` = (slot, token sequence, start step)."""

    users: tuple[tuple[int, torch.Tensor, int], ...]
    steps: int
    batch: int


def joining_schedule(vocab: int, steps: int = 10, seed: int = 1) -> Schedule:
    """3 slots: slot 0 from step 0 (leaves after 6 steps; a new user restarts slot 0 at step 7),
    slot 1 joins at step 2, slot 2 at step 5."""
    g = torch.Generator().manual_seed(seed)
    seq = lambda n: torch.randint(0, vocab, (n,), generator=g)  # noqa: E731
    users = ((0, seq(6), 0), (1, seq(steps - 2), 2), (2, seq(steps - 5), 5), (0, seq(steps - 7), 7))
    return Schedule(users, steps, 3)


def teacher_forced(decoder, hf: LlamaForCausalLM, sched: Schedule) -> list[tuple[float, bool]]:
    """Run the schedule on ``decoder``; per (user, step): (relative L2 of the logits against the
    Hugging Face full forward of that user's tokens, argmax equal)."""
    with torch.no_grad():
        refs = [hf(seq[None]).logits[0].double() for _, seq, _ in sched.users]
    results = []
    for step in range(sched.steps):
        tokens = torch.zeros(sched.batch, dtype=torch.int64)
        positions = torch.full((sched.batch,), -1, dtype=torch.int64)
        owner = {}
        for u, (slot, seq, start) in enumerate(sched.users):
            p = step - start
            if 0 <= p < len(seq):
                tokens[slot], positions[slot] = seq[p], p
                owner[slot] = (u, p)
        logits = decoder.step(tokens, positions).double()
        for slot in range(sched.batch):
            if slot not in owner:
                assert torch.all(logits[slot] == 0), "an idle slot returns zero logits"
                continue
            u, p = owner[slot]
            ref = refs[u][p]
            results.append((float((logits[slot] - ref).norm() / ref.norm()),
                            bool(logits[slot].argmax() == ref.argmax())))
    return results


def assert_hf_agreement(results: list[tuple[float, bool]]) -> None:
    """The agreement thresholds: rel L2 <= 5e-2 every step, <= 2e-2 mean, argmax equal >= 95%."""
    errs = [e for e, _ in results]
    agree = sum(a for _, a in results) / len(results)
    assert max(errs) <= 5e-2, f"max relative L2 {max(errs):.3g} > 5e-2"
    assert sum(errs) / len(errs) <= 2e-2, f"mean relative L2 {sum(errs) / len(errs):.3g} > 2e-2"
    assert agree >= 0.95, f"argmax agreement {agree:.2%} < 95%"


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative L2 distance of `a` from `b` (float64)."""
    return float((a.double() - b.double()).norm() / b.double().norm())


def teacher_forced_against_one_device(hf: LlamaForCausalLM, sched: Schedule, options: dict,
                                      **many: object) -> tuple[list[tuple[float, bool]], float]:
    """Teacher-force a decoder built with `many` (devices=N, context_parallel=C, ...) and a one-device
    decoder side by side; returns the HF agreement of the many-device decoder and its worst relative L2
    against the one-device logits over the active users of every step."""
    from ttdecode.models import LlamaDecoder

    class Both:
        def __init__(self) -> None:
            self.one = LlamaDecoder.from_hf(hf, **options)
            self.many = LlamaDecoder.from_hf(hf, **many, **options)
            self.worst = 0.0

        def step(self, tokens, positions):
            a = self.one.step(tokens, positions)
            b = self.many.step(tokens, positions)
            active = positions >= 0
            self.worst = max([self.worst] + [rel_l2(b[i], a[i]) for i in range(len(a)) if active[i]])
            return b

    both = Both()
    try:
        results = teacher_forced(both, hf, sched)
    finally:
        both.many.close()
    return results, both.worst
