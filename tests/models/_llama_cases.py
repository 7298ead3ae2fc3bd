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


def multi_token_drafts(dec, hf: LlamaForCausalLM) -> list[tuple[float, bool]]:
    """Multi-token steps of a batch-2 decoder (max_seq_len 64, blocks of 32) against Hugging Face's full
    forward: a prompt prefilled in one 8-token step, users joining, draft blocks verified, a rejected
    draft rewound, 18 tokens across a block boundary, back to one token. Returns (relative L2, argmax
    equal) of every compared row."""
    g = torch.Generator().manual_seed(4)
    seqs = torch.randint(0, hf.config.vocab_size, (2, 40), generator=g)
    alt = torch.randint(0, hf.config.vocab_size, (2, 40), generator=g)  # drafts that get rejected
    with torch.no_grad():
        ref = hf(seqs).logits.double()  # [2, 40, vocab]
    results = []
    _t = lambda *values: torch.tensor(values, dtype=torch.int64)  # noqa: E731

    def compare(logits: torch.Tensor, start: list[int], t: int, users=(0, 1)) -> None:
        assert logits.shape == (2, t, hf.config.vocab_size)
        for b in users:
            if start[b] < 0:
                assert torch.all(logits[b] == 0)
                continue
            for j in range(t):
                r, x = ref[b, start[b] + j], logits[b, j].double()
                results.append((float((x - r).norm() / r.norm()), bool(x.argmax() == r.argmax())))

    # prefill: 8 tokens at positions 0..7 in one step (user 1 only 6 tokens later: idle now)
    compare(dec.step(seqs[:, :8], _t(0, -1)), [0, -1], 8)
    # user 0's tokens 8..13, user 1's prefill 0..5
    compare(dec.step(torch.stack([seqs[0, 8:14], seqs[1, :6]]), _t(8, 0)), [8, 0], 6)
    # user 0 verifies drafts at 14..18 of which only the first two are right: rewind to 16
    drafts = seqs[0, 14:19].clone()
    drafts[2:] = alt[0, 16:19]
    tokens = torch.stack([drafts, seqs[1, 6:11]])
    logits = dec.step(tokens, _t(14, 6))
    compare(logits[:, :2], [14, 6], 2, users=(0,))  # the accepted prefix (later rows saw the wrong drafts)
    compare(logits, [14, 6], 5, users=(1,))
    # rewind user 0 to position 16: two tokens, so its rejected row 18 stays in the cache, unattended
    compare(dec.step(torch.stack([seqs[0, 16:18], seqs[1, 11:13]]), _t(16, 11)), [16, 11], 2)
    # 18 tokens each, across the block boundary at 32
    compare(dec.step(torch.stack([seqs[0, 18:36], seqs[1, 13:31]]), _t(18, 13)), [18, 13], 18)
    compare(dec.step(seqs[:, 36], _t(36, -1)).unsqueeze(1), [36, -1], 1)  # back to one token per step
    assert len(results) == 8 + 6 + 6 + 2 + 5 + 2 * 2 + 2 * 18 + 1
    return results


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
