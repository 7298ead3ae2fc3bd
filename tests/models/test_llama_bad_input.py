"""Bad input to the Llama decoder: a clear error naming the argument, raised before any cache is
written; a sequence continued after the bad calls equals the same sequence on a fresh decoder.
Backend ``reference`` (the checks are about the decoder's validation and bookkeeping)."""

from __future__ import annotations

import json

import pytest
import torch

from ttdecode.models import LlamaDecoder

from _llama_cases import hf_llama

OPTIONS = dict(batch=2, max_seq_len=64, backend="reference", block_size=32)


@pytest.fixture(scope="module")
def hf():
    return hf_llama(8, 2, 64, layers=2)


def _snapshot(dec: LlamaDecoder) -> tuple:
    caches = tuple(bytes(c.image) for kv in dec._shard.caches for c in kv)
    alloc = dec.allocator
    return caches, tuple(map(tuple, alloc.blocks)), tuple(alloc.lengths), tuple(sorted(alloc._free))


def _t(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


BAD_STEPS = [
    # (tokens, positions, error type, message pattern)
    (_t(5, 6, 7), _t(3, 3, 0), ValueError, r"tokens: expected shape \[2\] .*batch=2.*got \[3\]"),
    (_t(5, 6), _t(3, 64), ValueError, r"positions\[1\]: expected a position < max_seq_len=64, got 64"),
    (_t(5, 512), _t(3, 3), ValueError, r"tokens\[1\]: expected a token id in 0..511, got 512"),
    (_t(-3, 6), _t(3, 3), ValueError, r"tokens\[0\]: expected a token id in 0..511, got -3"),
    (_t(5, 6), _t(3, -2), ValueError, r"positions\[1\]: expected -1 \(idle\) or a position >= 0, got -2"),
    (_t(5, 6), _t(3, 5), ValueError, r"positions\[1\]: expected 0..3 .*user 1 has 3 positions cached.*got 5"),
    (_t(5, 6), torch.tensor([3.0, 3.0]), TypeError, r"positions: expected an int64 tensor \[2\], got Tensor torch.float32"),
]


def test_each_bad_step_is_refused_before_any_cache_write_and_nothing_is_lost(hf):
    g = torch.Generator().manual_seed(11)
    seqs = torch.randint(0, 512, (2, 8), generator=g)
    dec = LlamaDecoder.from_hf(hf, **OPTIONS)
    fresh = LlamaDecoder.from_hf(hf, **OPTIONS)
    for t in range(3):
        dec.step(seqs[:, t], _t(t, t))
        fresh.step(seqs[:, t], _t(t, t))
    for tokens, positions, exc, pattern in BAD_STEPS:
        before = _snapshot(dec)
        with pytest.raises(exc, match=pattern):
            dec.step(tokens, positions)
        assert _snapshot(dec) == before, f"a refused step changed the caches ({pattern})"
    for t in range(3, 8):
        a = dec.step(seqs[:, t], _t(t, t))
        b = fresh.step(seqs[:, t], _t(t, t))
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_an_exhausted_block_pool_is_refused_before_any_cache_write():
    hf = hf_llama(8, 2, 64, layers=1)
    # 3 blocks of 32 positions for 2 users: user 0 takes 2 blocks, user 1 cannot take a second one
    dec = LlamaDecoder.from_hf(hf, num_blocks=3, **OPTIONS)
    fresh = LlamaDecoder.from_hf(hf, num_blocks=3, **OPTIONS)
    tok = _t(1, 2)
    for t in range(32):
        for d in (dec, fresh):
            d.step(tok, _t(t, t))
    for d in (dec, fresh):
        d.step(tok, _t(32, -1))  # user 0 takes the third block
    before = _snapshot(dec)
    with pytest.raises(ValueError, match=r"block pool: expected at most 0 free blocks .*got a need for 1"):
        dec.step(tok, _t(33, 32))
    assert _snapshot(dec) == before
    # user 0 restarts (gives back its 2 blocks): now user 1 can grow; both decoders agree
    a = dec.step(tok, _t(0, 32))
    b = fresh.step(tok, _t(0, 32))
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_model_that_is_not_a_llama_is_refused(tmp_path):
    with pytest.raises(TypeError, match=r"model: expected a transformers LlamaForCausalLM, got Linear"):
        LlamaDecoder.from_hf(torch.nn.Linear(2, 2), batch=1, max_seq_len=32)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(TypeError, match=r"path: expected a Llama checkpoint .*got 'gpt2'"):
        LlamaDecoder.from_pretrained(tmp_path, batch=1, max_seq_len=32)


def test_generate_refuses_more_sequences_than_batch(hf):
    dec = LlamaDecoder.from_hf(hf, **OPTIONS)
    with pytest.raises(ValueError, match=r"input_ids: expected 1..2 sequences \(batch=2\), got 3"):
        dec.generate(torch.zeros(3, 2, dtype=torch.int64), max_new_tokens=1)


def test_kv_pages_and_a_grid_below_the_banks_for_bank_local_pools_are_refused_by_name(hf):
    from ttdecode.config import SDPAProgramConfig

    with pytest.raises(ValueError, match=r"kv_pages: expected one of \['tile', 'key_row'\], got 'rows'"):
        LlamaDecoder.from_hf(hf, kv_pages="rows", **OPTIONS)
    small = SDPAProgramConfig(compute_with_storage_grid_size=(2, 4))
    with pytest.raises(ValueError, match=r"program_config: expected a grid of at least 12 cores with "
                                         r"kv_pages='key_row' .*got 8"):
        LlamaDecoder.from_hf(hf, program_config=small, **OPTIONS)
    rects = SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), sub_core_grids=[((0, 0), (1, 4))])
    with pytest.raises(ValueError, match=r"program_config: expected a grid of at least 12 cores .*got 10"):
        LlamaDecoder.from_hf(hf, program_config=rects, **OPTIONS)
    tile = LlamaDecoder.from_hf(hf, program_config=small, kv_pages="tile", **OPTIONS)  # any grid
    assert tile._shard.program_config.kv_pages == "tile" and tile.allocator.policy == "first_free"
    with pytest.raises(ValueError, match=r"program_config: expected kv_pages 'tile' \(the default\) or 'tile'"):
        LlamaDecoder.from_hf(hf, program_config=SDPAProgramConfig(kv_pages="key_row"), kv_pages="tile", **OPTIONS)
    # the default: the caller's config with the pools' pages, blocks balanced over the banks
    dec = LlamaDecoder.from_hf(hf, program_config=SDPAProgramConfig(k_chunk_size=64), **OPTIONS)
    assert dec._shard.program_config == SDPAProgramConfig(k_chunk_size=64, kv_pages="key_row")
    assert dec.allocator.policy == "balanced" and dec.allocator.classes == 6  # NKV 2, block 32: 12 / gcd(2 x 1, 12)
