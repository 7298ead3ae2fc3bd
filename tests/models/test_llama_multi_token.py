"""LlamaDecoder.step with tokens [B, T] (multi-token decode, the verification of speculative draft
tokens) against Hugging Face's LlamaForCausalLM full forward, with the FlashDecode kernels on the host
runtime: a prompt prefilled in one T-token step, draft blocks verified, a rejected draft rewound."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.models import LlamaDecoder

from _llama_cases import assert_hf_agreement, hf_llama


def _t(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@pytest.mark.slow
def test_multi_token_steps_match_hf_and_a_rewind_drops_rejected_drafts():
    hf = hf_llama(8, 2, 64, layers=2)
    g = torch.Generator().manual_seed(4)
    seqs = torch.randint(0, hf.config.vocab_size, (2, 40), generator=g)
    alt = torch.randint(0, hf.config.vocab_size, (2, 40), generator=g)  # drafts that get rejected
    with torch.no_grad():
        ref = hf(seqs).logits.double()  # [2, 40, vocab]
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=64, kv_dtype=ttdecode.bfloat8_b, backend="host",
                               block_size=32)
    results = []

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
    assert_hf_agreement(results)


@pytest.mark.parametrize("tokens, positions, exc, pattern", [
    (torch.zeros(2, 33, dtype=torch.int64), _t(0, 0), ValueError,
     r"tokens: expected shape \[2\] or \[2, T\] with 1 <= T <= 32 .*got \[2, 33\]"),
    (torch.zeros(2, 4, dtype=torch.int64), _t(62, 0), ValueError,
     r"positions\[0\]: expected a first position \(of 4 tokens\) with position \+ 3 < max_seq_len=64, got 62"),
    (torch.tensor([[1, 2], [3, 512]]), _t(0, 0), ValueError, r"tokens\[1, 1\]: expected a token id in 0..511, got 512"),
    (torch.zeros(2, 3, dtype=torch.int64), _t(5, 0), ValueError, r"positions\[0\]: expected 0..0 .*got 5"),
])
def test_bad_multi_token_steps_are_refused_naming_the_argument(tokens, positions, exc, pattern):
    hf = hf_llama(8, 2, 64, layers=1)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=64, backend="reference", block_size=32)
    with pytest.raises(exc, match=pattern):
        dec.step(tokens, positions)
