"""The paged cache's row append (ttdecode.rotary_kv_append through kv_cache.append_rows), the block allocator,
and the RoPE frequencies against Hugging Face's."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.core.formats import DataType
from ttdecode.models import rope
from ttdecode.models.kv_cache import BlockAllocator, PagedKVCache, append_rows


@pytest.mark.parametrize("dtype", [DataType.bfloat8_b, DataType.bfloat16])
def test_row_append_quantizes_only_the_new_row_and_leaves_other_rows_bit_identical(dtype):
    """The decoder's cache update (kv_cache.append_rows = ttdecode.rotary_kv_append) with the identity
    rotation (cos 1, sin 0): rows filled one step at a time hold each row quantized alone."""
    g = torch.Generator().manual_seed(0)
    kc = PagedKVCache(num_blocks=3, num_kv_heads=2, block_size=64, head_dim=64, dtype=dtype)
    vc = PagedKVCache(num_blocks=3, num_kv_heads=2, block_size=64, head_dim=64, dtype=dtype)
    full = torch.randn(3, 2, 64, 64, generator=g)
    table = torch.tensor([[0], [1], [2]], dtype=torch.int32)  # user b owns block b
    ones, zeros = torch.ones(3, 64), torch.zeros(3, 64)
    # fill the cache one row per user and step, as decode steps do (the reference backend: ttnn's rounding)
    for r in range(64):
        append_rows(kc, vc, full[:, :, r], full[:, :, r], cur_pos=[r] * 3, page_table=table, cos=ones, sin=zeros,
                    backend="reference")
    # each row stored as the row alone quantized (bfloat8_b: 16 values of a row share an exponent)
    rows = full.to(torch.bfloat16).float()  # the op's inputs are bfloat16
    expected = torch.stack([ttdecode.to_torch(ttdecode.from_torch(rows[..., r:r + 1, :], dtype)).float()[..., 0, :]
                            for r in range(64)], dim=2)
    assert torch.equal(kc.values(), expected) and torch.equal(vc.values(), expected)
    # the op's input is a tile tensor of the same values
    assert torch.equal(ttdecode.to_torch(kc.tile_tensor()).float(), expected)
    before = bytearray(kc.image)
    new = torch.randn(3, 2, 64, generator=g) * 100  # a much larger row: other rows must not move
    append_rows(kc, vc, new, new, cur_pos=[-1, 37, -1], page_table=table, cos=ones, sin=zeros, backend="host")
    values = kc.values()
    mask = torch.ones(3, 2, 64, dtype=torch.bool)
    mask[1, :, 37] = False
    assert torch.equal(values[mask], expected[mask])
    assert sum(a != b for a, b in zip(before, kc.image)) <= 2 * 64 * 2 + 2 * 4  # one row of each head
    assert not torch.equal(values[1, :, 37], expected[1, :, 37])


def test_allocator_restart_rewind_and_page_table():
    a = BlockAllocator(batch=2, max_seq_len=128, block_size=32, num_blocks=5)
    for p in range(40):
        a.commit(a.plan([p, p if p < 10 else -1]))
    assert a.blocks == [[0, 2], [1]] and a.lengths == [40, 10]
    assert a.page_table().tolist() == [[0, 2, 0, 0], [1, 0, 0, 0]]
    a.commit(a.plan([0, 10]))  # user 0 restarts: its 2 blocks go back, it takes one again
    assert a.blocks[0] == [0] and a.lengths == [1, 11] and a.free_blocks == 3
    a.commit(a.plan([1, 5]))  # user 1 rewinds to position 5: keeps its first block
    assert a.blocks[1] == [1] and a.lengths == [2, 6]
    with pytest.raises(ValueError, match=r"positions\[0\]: expected 0..2 .*got 3"):
        a.plan([3, -1])


@pytest.mark.parametrize("scaling", [None, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}])
def test_rope_frequencies_equal_hugging_face(scaling):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(hidden_size=1024, num_attention_heads=8, head_dim=128, rope_theta=500000.0,
                      rope_scaling=scaling, max_position_embeddings=8192)
    hf_freq, _ = ROPE_INIT_FUNCTIONS["llama3" if scaling else "default"](cfg, "cpu")
    ours = rope.inv_freq(128, 500000.0, scaling)
    torch.testing.assert_close(ours.float(), hf_freq.float(), rtol=2e-6, atol=0)


def test_rope_refuses_unknown_scaling_by_name():
    with pytest.raises(NotImplementedError, match=r"rope_scaling: expected None, 'default' or 'llama3', got rope_type 'yarn'"):
        rope.inv_freq(64, 10000.0, {"rope_type": "yarn", "factor": 2.0})


def test_context_parallel_allocator_deals_blocks_round_robin_into_per_rank_pools():
    from ttdecode.models.kv_cache import ContextParallelAllocator

    bs, cp = 32, 3
    a = ContextParallelAllocator(batch=2, max_seq_len=7 * bs, block_size=bs, num_blocks=5, context_parallel=cp)
    assert [r.num_blocks for r in a.ranks] == [5] * cp and a.page_tables()[0].shape == (2, 3)  # ceil(7 / 3)
    for p in range(201):
        a.commit(a.plan([p, p if p < 40 else -1]))
    for c in range(cp):
        # independent count: user 0's global blocks 0..6 dealt j -> rank j % 3; user 1's blocks 0..1
        assert len(a.ranks[c].blocks[0]) == len([j for j in range(7) if j % cp == c])
        assert len(a.ranks[c].blocks[1]) == len([j for j in range(2) if j % cp == c])
        for p in (0, 31, 32, 100, 200):
            held = sum(1 for q in range(p + 1) if (q // bs) % cp == c)
            assert a.local_position(c, p) == held - 1, (c, p)
    assert a.ranks[0].page_table()[0].tolist() == a.ranks[0].blocks[0]  # local logical -> local physical
    # user 1 restarting at 0 gives back its blocks on every rank and takes one on rank 0 (block 0's owner)
    a.commit(a.plan([-1, 0]))
    assert [len(r.blocks[1]) for r in a.ranks] == [1, 0, 0] and a.lengths == [201, 1]


def test_the_decoder_rotates_and_appends_through_the_fused_op_on_its_backend(monkeypatch):
    """One rotary_kv_append per layer and step, on the decoder's backend, with q: the decoder's RoPE
    and cache update are the op's (no torch RoPE path left)."""
    from _llama_cases import hf_llama
    from ttdecode.ops.rotary_append import op as rotary
    from ttdecode.models import LlamaDecoder

    calls = []
    real = rotary.rotary_kv_append

    def spy(*args, **kwargs):
        calls.append((kwargs["backend"], kwargs["q"] is not None, list(kwargs["cur_pos"])))
        return real(*args, **kwargs)

    # ttdecode's public names resolve lazily to the op's current attribute: patch the package first, so that
    # what monkeypatch restores there is the real function, not the spy
    monkeypatch.setattr(ttdecode, "rotary_kv_append", spy)
    monkeypatch.setattr(rotary, "rotary_kv_append", spy)
    dec = LlamaDecoder.from_hf(hf_llama(4, 2, 64, layers=2), batch=2, max_seq_len=64, backend="host", block_size=32)
    dec.step(torch.tensor([1, 2]), torch.tensor([0, -1]))
    assert calls == [("host", True, [0, -1])] * 2
