"""Tensor x context parallel Llama decode on the host backend: ``devices=8, context_parallel=4`` (the T3K
configuration of the device path: TP 2 ways over KV head groups times CP 4 ways over the cache's blocks)
with the FlashDecode, rotary append and combine kernels on the host runtime, teacher-forced against
Hugging Face over 40 steps with users joining and leaving; positions cross a 32-position block, so two
CP ranks hold keys and two hold none (LSE -inf, weight 0 in the merge). The device path of the same
layout on a mock T3K 2 x 4: tests/mock/test_llama_tp_cp_device.py."""

from __future__ import annotations

import pytest

import ttdecode
from ttdecode.models import LlamaDecoder

from _llama_cases import assert_hf_agreement, hf_llama, joining_schedule, teacher_forced


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
