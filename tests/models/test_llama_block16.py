"""LlamaDecoder with 16-position cache blocks (``block_size=16``: ttnn's padded tile per block, a block's 16
rows in one tile row whose rows 16-31 are padding) against Hugging Face's LlamaForCausalLM, in both page
layouts: kv_pages "tile" (ttnn's interleaved pages, blocks "first_free") and "key_row" (the decoders' default:
the bank-local pool, a page per (block, KV head), blocks "balanced" in pairs so both halves of a key tile lie
in one bank). On the host kernels (the FlashDecode reader's half-tile build, the rotary append's block-16
writes), with context parallelism, and the device dataflow on the torch twin
(tests/models/test_llama_device_twin.py). The page tables take an even number of entries per user (two
16-position blocks make a key tile): max_seq_len 80 (5 blocks) checks the rounding."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.models import LlamaDecoder
from ttdecode.models import llama_device as ld
from ttdecode.models.kv_cache import BlockAllocator, ContextParallelAllocator, PagedKVCache

import test_llama_device_twin as twin
from _llama_cases import (assert_hf_agreement, hf_llama, joining_schedule, multi_token_drafts,
                          teacher_forced_against_one_device)

BLOCK = 16


def prompt_then_decode(dec: LlamaDecoder, hf, prompts: tuple[int, int], last: int) -> list[tuple[float, bool]]:
    """Two users: user b's first ``prompts[b]`` tokens in one multi-token step (user 1 idle when its prompt is
    longer), then one token per step for both until user 0 is at position ``last`` (every row teacher-forced).
    Returns (relative L2 against Hugging Face's full forward, argmax equal) of every row."""
    g = torch.Generator().manual_seed(16)
    seqs = torch.randint(0, hf.config.vocab_size, (2, last + 1), generator=g)
    with torch.no_grad():
        ref = hf(seqs).logits.double()
    results = []

    def compare(logits: torch.Tensor, user: int, start: int) -> None:
        for j in range(logits.shape[0]):
            r, x = ref[user, start + j], logits[j].double()
            results.append((float((x - r).norm() / r.norm()), bool(x.argmax() == r.argmax())))

    for b, n in enumerate(prompts):  # one user's prompt per step, the other slot idle
        pos = torch.tensor([0 if u == b else -1 for u in range(2)])
        tokens = seqs[:, :n].clone()
        out = dec.step(tokens, pos)
        assert torch.all(out[1 - b] == 0)
        compare(out[b], b, 0)
    at = list(prompts)
    while at[0] <= last:
        pos = torch.tensor([p if p <= last else -1 for p in at])
        out = dec.step(torch.stack([seqs[b, min(p, last)] for b, p in enumerate(at)]), pos)
        for b in range(2):
            if at[b] <= last:
                compare(out[b][None], b, at[b])
        at = [p + 1 for p in at]
    return results


def test_block16_sizes_pools_and_page_tables_in_padded_tiles():
    # page tables: ceil(max_seq_len / 16) entries per user, rounded up to an even count
    assert BlockAllocator(2, 80, BLOCK, 10).max_blocks == 6
    assert BlockAllocator(2, 64, BLOCK, 8).max_blocks == 4
    assert BlockAllocator(2, 80, 32, 6).max_blocks == 3
    cp = ContextParallelAllocator(2, 80, BLOCK, 6, 2)  # 5 global blocks: 3 on rank 0, 2 on rank 1
    assert cp.max_blocks == 5 and cp.local_max_blocks == 4
    assert [tuple(t.shape) for t in cp.page_tables()] == [(2, 4), (2, 4)]
    # a pool of 16-position blocks holds one tile row per (block, KV head): the bytes of 32 positions
    cache = PagedKVCache(5, 2, BLOCK, 64, ttdecode.bfloat8_b)
    assert cache.nbytes == 5 * 2 * 2 * 1088 == PagedKVCache(5, 2, 32, 64, ttdecode.bfloat8_b).nbytes
    assert cache.values().shape == (5, 2, BLOCK, 64)


def assert_pairs_share_a_bank(dec: LlamaDecoder, nkv: int, banks: int = 12) -> None:
    """Every key tile of every user (entries 2t, 2t + 1 it holds): both halves in one bank for every head."""
    for row, held in zip(dec.allocator.page_table().tolist(), dec.allocator.blocks):
        assert len(held) % 2 == 0, held
        for t in range(len(held) // 2):
            assert all((row[2 * t] * nkv + h) % banks == (row[2 * t + 1] * nkv + h) % banks for h in range(nkv)), row


def test_block16_takes_both_pages_and_other_block_sizes_are_named():
    hf = hf_llama(8, 2, 64, layers=1)
    options = dict(batch=1, max_seq_len=80, backend="reference")
    with pytest.raises(ValueError, match=r"block_size: expected a multiple of 32 or 16 .*got 24"):
        LlamaDecoder.from_hf(hf, block_size=24, kv_pages="tile", **options)
    # 1 layer x K,V x blocks x 2 KV heads x one padded 32 x 64 bfloat8_b tile row (2 tiles of 1088 bytes)
    tile = LlamaDecoder.from_hf(hf, block_size=BLOCK, kv_pages="tile", **options)
    assert tile.cache_bytes == 2 * 5 * 2 * 2 * 1088  # the default pool: 5 blocks per user
    assert tile.allocator.policy == "first_free" and tile.allocator.max_blocks == 6
    bank_local = LlamaDecoder.from_hf(hf, block_size=BLOCK, **options)  # the default pages, "key_row"
    assert bank_local.kv_pages == "key_row" and bank_local.allocator.policy == "balanced"
    assert bank_local.allocator.pairs and bank_local.allocator.max_blocks == 6
    assert bank_local.cache_bytes == 2 * 6 * 2 * 2 * 1088  # the default pool: 6 blocks per user (3 pairs)


@pytest.mark.parametrize("pages", ["tile", "key_row"])
def test_block16_host_kernels_match_hf_over_a_prompt_and_decode_steps_across_blocks(pages: str):
    # user 0: a 30-token prompt in one step (across the block at 16), then one token a step to position 50
    # (across 32 and 48); user 1: a 3-token prompt, then decoding alongside (to position 23, across 16)
    hf = hf_llama(8, 2, 64, layers=1)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=80, kv_dtype=ttdecode.bfloat8_b, backend="host",
                               block_size=BLOCK, kv_pages=pages)
    assert dec.allocator.max_blocks == 6
    results = prompt_then_decode(dec, hf, (30, 3), 50)
    assert len(results) == 30 + 3 + 21 + 21
    assert [len(b) for b in dec.allocator.blocks] == [4, 2]
    if pages == "key_row":
        assert_pairs_share_a_bank(dec, 2)
    assert_hf_agreement(results)


@pytest.mark.slow
@pytest.mark.parametrize("pages", ["tile", "key_row"])
def test_block16_host_kernels_multi_token_steps_match_hf(pages: str):
    # prefill, draft blocks verified, a rejected draft rewound, 18 tokens across the blocks at 16 and 32
    hf = hf_llama(8, 2, 64, layers=2)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=80, kv_dtype=ttdecode.bfloat8_b, backend="host",
                               block_size=BLOCK, kv_pages=pages)
    assert_hf_agreement(multi_token_drafts(dec, hf))


@pytest.mark.slow
@pytest.mark.parametrize("pages", ["tile", "key_row"])
def test_block16_context_parallel_on_host_kernels_matches_one_device_and_hf(pages: str):
    # 2 CP ranks: global blocks 0, 2, 4 on rank 0 and 1, 3 on rank 1 (local page tables of 4 entries)
    hf = hf_llama(8, 2, 32, layers=1)
    sched = joining_schedule(hf.config.vocab_size, steps=40)  # slot 1 reaches position 37: blocks 0..2
    options = dict(batch=sched.batch, max_seq_len=80, kv_dtype=ttdecode.bfloat8_b, backend="host",
                   block_size=BLOCK, kv_pages=pages)
    results, worst = teacher_forced_against_one_device(hf, sched, options, devices=2, context_parallel=2)
    assert worst <= 1e-2, f"context_parallel=2 vs devices=1: relative L2 {worst:.3g} > 1e-2"
    assert_hf_agreement(results)


@pytest.mark.parametrize("pages", ["tile", "key_row"])
def test_block16_device_dataflow_on_the_twin_matches_hf(ttnn, monkeypatch, pages: str):
    """The device path's step row (page table of 6 entries per user), rotary append rows and multi-token
    FlashDecode with 16-position blocks, on the torch twin of its ttnn calls: the host backends' thresholds
    with bfloat16 weights."""
    monkeypatch.setattr(twin.TwinDecoder, "real_ttnn", ttnn)
    monkeypatch.setattr(twin.TwinDecoder, "weights", "bfloat16")
    monkeypatch.setattr(ld, "DeviceDecoder", twin.TwinDecoder)
    hf = hf_llama(8, 2, 64, layers=2)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=80, kv_dtype="bfloat8_b", block_size=BLOCK,
                               kv_pages=pages, backend="device", device=twin.TwinDevice(1))
    assert dec._device.max_blocks == 6 and dec._device.step_width == 2 * 2 + 2 * 6
    # the default pool: 5 blocks per user, 6 (whole pairs) for the balanced bank-local pool
    assert dec._device.cache_shape == (2 * (6 if pages == "key_row" else 5), 2, BLOCK, 64)
    assert_hf_agreement(multi_token_drafts(dec, hf))
