"""LlamaDecoder.step with tokens [B, T] (multi-token decode, the verification of speculative draft
tokens) against Hugging Face's LlamaForCausalLM full forward, with the FlashDecode kernels on the host
runtime: a prompt prefilled in one T-token step, draft blocks verified, a rejected draft rewound."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.models import LlamaDecoder

from _llama_cases import assert_hf_agreement, hf_llama, multi_token_drafts


def _t(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@pytest.mark.slow
def test_multi_token_steps_match_hf_and_a_rewind_drops_rejected_drafts():
    hf = hf_llama(8, 2, 64, layers=2)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=64, kv_dtype=ttdecode.bfloat8_b, backend="host",
                               block_size=32)
    assert_hf_agreement(multi_token_drafts(dec, hf))


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
