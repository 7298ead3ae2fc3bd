"""Tensor x context parallel Llama decode on the host backend: ``devices=8, context_parallel=4`` (the T3K
configuration of the device path: TP 2 ways over KV head groups times CP 4 ways over the cache's blocks)
with the FlashDecode, rotary append and combine kernels on the host runtime, teacher-forced against
Hugging Face over 40 steps with users joining and leaving; positions cross a 32-position block, so two
CP ranks hold keys and two hold none (LSE -inf, weight 0 in the merge). The device path of the same
layout on a mock T3K 2 x 4: tests/mock/test_llama_tp_cp_device.py. Multi-token steps (prompt chunks, draft
verification, a rewind) of TP 2 x CP 2: each token row attends as its own one-token row on every rank."""

from __future__ import annotations

import pytest

import ttdecode
from ttdecode.models import LlamaDecoder

from _llama_cases import assert_hf_agreement, hf_llama, joining_schedule, multi_token_drafts, teacher_forced


@pytest.mark.slow
def test_tensor_times_context_parallel_on_host_kernels_matches_hf() -> None:
    hf = hf_llama(8, 2, 32, layers=1, vocab=256)
    sched = joining_schedule(hf.config.vocab_size, steps=40)
    with LlamaDecoder.from_hf(hf, batch=sched.batch, max_seq_len=128, kv_dtype=ttdecode.bfloat8_b, backend="host",
                              block_size=32, devices=8, context_parallel=4) as dec:
        assert dec._pool is not None and dec.allocator.cp == 4
        results = teacher_forced(dec, hf, sched)
    assert len(results) > 80
    assert_hf_agreement(results)


def test_tensor_times_context_parallel_multi_token_steps_on_host_kernels_match_hf() -> None:
    """`multi_token_drafts` (T of 8, 6, 5, 2, 18, 1; the 18 crossing the block at 32: two ranks write
    in one step) on ``devices=4, context_parallel=2``."""
    hf = hf_llama(8, 2, 64, layers=2)
    with LlamaDecoder.from_hf(hf, batch=2, max_seq_len=64, kv_dtype=ttdecode.bfloat8_b, backend="host",
                              block_size=32, devices=4, context_parallel=2) as dec:
        assert_hf_agreement(multi_token_drafts(dec, hf))
