"""Context parallel Llama decode: ``devices=N, context_parallel=C`` (TP N/C ways over heads
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

from _llama_cases import (assert_hf_agreement, hf_llama, joining_schedule, rel_l2,
                          teacher_forced_against_one_device)


@pytest.mark.slow
@pytest.mark.parametrize("devices, cp, steps", [(2, 2, 72), (4, 2, 72), (8, 8, 150)])
def test_context_parallel_matches_one_device_and_hf(devices: int, cp: int, steps: int) -> None:
    hf = hf_llama(8, 2 if devices // cp <= 2 else 4, 32, layers=1, vocab=516)
    sched = joining_schedule(hf.config.vocab_size, steps=steps)
    options = dict(batch=sched.batch, max_seq_len=256, kv_dtype=ttdecode.bfloat8_b, backend="reference",
                   block_size=32)

    results, worst = teacher_forced_against_one_device(hf, sched, options, devices=devices, context_parallel=cp)
    assert worst <= 1e-2, f"devices={devices}, cp={cp} vs devices=1: relative L2 {worst:.3g} > 1e-2"
    assert_hf_agreement(results)


@pytest.mark.slow
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
                    assert rel_l2(b[i], a[i]) <= 1e-2, (t, i)


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


@pytest.mark.parametrize("devices, cp", [(2, 2), (8, 8)])
def test_each_context_parallel_device_holds_one_cth_of_the_cache(devices: int, cp: int, caplog) -> None:
    hf = hf_llama(8, 2, 32, layers=1)
    batch, seq, block = 3, 600, 32  # 19 blocks of 32 positions per user
    with caplog.at_level("INFO", logger="ttdecode"):
        dec = LlamaDecoder.from_hf(hf, devices=devices, context_parallel=cp, batch=batch, max_seq_len=seq,
                                   kv_dtype=ttdecode.bfloat8_b, backend="reference", block_size=block)
    dec.close()
    # one block on one device: K and V x 1 layer x 2 KV heads x one 32x32 bfloat8_b tile (1088 bytes)
    block_bytes = 2 * 1 * 2 * 1088
    whole = batch * 19 * block_bytes
    per_user = {2: 10, 8: 3}[cp]  # ceil(19 / C) blocks of each user on its busiest rank
    assert dec.cache_bytes_per_device == batch * per_user * block_bytes
    assert abs(dec.cache_bytes_per_device - whole / cp) <= batch * block_bytes
    assert dec.cache_bytes == devices * dec.cache_bytes_per_device
    lines = [r.getMessage() for r in caplog.records if "KV cache" in r.getMessage()]
    assert len(lines) == 1 and f"{dec.cache_bytes_per_device / 2**20:.2f} MiB per device" in lines[0]
    assert f"{batch * per_user} blocks" in lines[0]


def _alloc_state(dec: LlamaDecoder) -> tuple:
    a = dec.allocator
    return tuple(a.lengths), tuple((tuple(map(tuple, r.blocks)), tuple(r.lengths), tuple(sorted(r._free)))
                                   for r in a.ranks)


def test_an_exhausted_context_parallel_pool_is_named_and_refused_before_any_cache_write() -> None:
    hf = hf_llama(8, 2, 32, layers=1)
    # 2 blocks per user, dealt over 2 ranks; each device's pool holds 1 block (the default would be 2)
    options = dict(devices=2, context_parallel=2, batch=2, max_seq_len=64, backend="reference", block_size=32,
                   num_blocks=1)
    tok = torch.tensor([3, 4])
    with LlamaDecoder.from_hf(hf, **options) as dec, LlamaDecoder.from_hf(hf, **options) as fresh:
        for t in range(33):  # user 0 takes block 0 on rank 0 and block 1 on rank 1: both pools full
            for d in (dec, fresh):
                d.step(tok, torch.tensor([t, -1]))
        before = _alloc_state(dec)
        with pytest.raises(ValueError, match=r"num_blocks \(the block pool of context-parallel rank 0 of 2\): "
                                             r"expected at most 0 free blocks .*got a need for 1"):
            dec.step(tok, torch.tensor([33, 0]))  # user 1 starting needs a block on rank 0
        assert _alloc_state(dec) == before
        for t in (33, 34):  # the refused step wrote nothing: both decoders continue alike
            a, b = dec.step(tok, torch.tensor([t, -1])), fresh.step(tok, torch.tensor([t, -1]))
            torch.testing.assert_close(a, b, rtol=0, atol=0)
