"""ttdecode.paged_update_cache on the host runtime: each user's new K/V rows [1, B, NKV, D] written at its
position of a paged pool (tile pages and the bank-local pool) or a contiguous cache.

bfloat16 caches: an independent torch scatter of the rows (exact). Block-float caches: the bytes
rotary_kv_append writes for the same rows under the identity rotation (cos 1, sin 0: x * 1 + rot * 0 is
x in fp32, then the one packer rounding to the cache), so both ops round a row alike. Every cache byte
outside the written rows stays as it was."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.core.formats import DataType

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b


def scatter(cache: torch.Tensor, rows: torch.Tensor, positions: list[int], table: torch.Tensor | None) -> torch.Tensor:
    want = cache.clone()
    bs = cache.shape[2]
    for b, p in enumerate(positions):
        if p < 0:
            continue
        if table is None:
            want[b, :, p] = rows[0, b]
        else:
            want[int(table[b, p // bs]), :, p % bs] = rows[0, b]
    return want


def identity_rotary(cache: ttdecode.TileTensor, rows: torch.Tensor, positions: list[int], table, pages: str):
    """rotary_kv_append's K cache for `rows` rotated by angle 0 (V written to a scratch cache)."""
    b, d = rows.shape[1], rows.shape[3]
    cos, sin = torch.ones(b, d), torch.zeros(b, d)
    kc, _ = ttdecode.rotary_kv_append(rows, rows, cache, cache, cur_pos=positions, cos=cos, sin=sin,
                                      page_table=table, kv_pages=pages, backend="host")
    return kc


@pytest.mark.parametrize("pages", ["tile", "key_row"])
@pytest.mark.parametrize("dtype", [BF16, BFP8, BFP4], ids=lambda d: d.value)
def test_paged_rows_land_at_each_users_position(dtype: DataType, pages: str) -> None:
    """B 5 over a shuffled table (blocks of 64), positions in rows 0, 31, 32, 63 of a tile row and a skipped
    user; 3 KV heads, D 64, a 2x2 grid (users 0 and 4 on one core)."""
    g = torch.Generator().manual_seed(1)
    cache = ttdecode.from_torch(torch.randn(12, 3, 64, 64, generator=g), dtype=dtype)
    rows = (torch.randn(1, 5, 3, 64, generator=g) * 3).to(torch.bfloat16).float()
    table = torch.randperm(12, generator=g)[:10].reshape(5, 2).to(torch.int32)
    positions = [0, 31, -1, 95, 64]
    out = ttdecode.paged_update_cache(cache, rows, update_idxs=positions, page_table=table, kv_pages=pages,
                                      grid=(2, 2), backend="host")
    assert out.shape == cache.shape and out.dtype == dtype
    if dtype == BF16:
        assert torch.equal(ttdecode.to_torch(out).float(), scatter(ttdecode.to_torch(cache).float(), rows, positions,
                                                                  table))
    else:
        assert out.data == identity_rotary(cache, rows, positions, table, pages).data
    ref = ttdecode.paged_update_cache(cache, rows, update_idxs=positions, page_table=table, kv_pages=pages,
                                      backend="reference")
    if dtype == BF16:
        assert ref.data == out.data


def test_contiguous_cache_and_a_positions_tensor() -> None:
    g = torch.Generator().manual_seed(2)
    cache = ttdecode.from_torch(torch.randn(3, 2, 96, 32, generator=g), dtype=BF16)
    rows = torch.randn(1, 3, 2, 32, generator=g).to(torch.bfloat16).float()
    pos = torch.tensor([95, 0, 40], dtype=torch.int32)
    out = ttdecode.paged_update_cache(cache, rows, update_idxs_tensor=pos, backend="host")
    assert torch.equal(ttdecode.to_torch(out).float(), scatter(ttdecode.to_torch(cache).float(), rows, pos.tolist(),
                                                              None))


def test_paged_update_refuses_before_writing() -> None:
    cache = ttdecode.from_torch(torch.zeros(4, 2, 32, 64), dtype=BFP8)
    rows = torch.zeros(1, 2, 2, 64)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    run = ttdecode.paged_update_cache
    with pytest.raises(ValueError, match="'update_idxs': expected exactly one"):
        run(cache, rows, page_table=table, backend="host")
    with pytest.raises(ValueError, match="'update_idxs': expected exactly one"):
        run(cache, rows, update_idxs=[0, 1], update_idxs_tensor=torch.tensor([0, 1]), page_table=table)
    with pytest.raises(ValueError, match=r"'input_tensor': expected shape \[1, B, NKV=2, D=64\]"):
        run(cache, torch.zeros(1, 2, 3, 64), update_idxs=[0, 1], page_table=table, backend="host")
    with pytest.raises(TypeError, match="'input_tensor': expected bfloat16"):
        run(cache, ttdecode.from_torch(rows, dtype=BFP8), update_idxs=[0, 1], page_table=table, backend="host")
    with pytest.raises(ValueError, match=r"'update_idxs\[1\]': expected a position < 64"):
        run(cache, rows, update_idxs=[0, 64], page_table=table, backend="host")
    with pytest.raises(ValueError, match=r"'page_table\[1, 0\]': expected a block id in 0..3"):
        run(cache, rows, update_idxs=[0, 5], page_table=torch.tensor([[0, 1], [7, 3]]), backend="host")
    with pytest.raises(ValueError, match=r"'update_idxs\[1\]': expected a cache tile no other user writes"):
        run(cache, rows, update_idxs=[3, 9], page_table=torch.tensor([[0, 1], [0, 3]]), backend="host")
    with pytest.raises(ValueError, match="'cache_tensor': expected \\[B=2, NKV, S, D\\] without a page table"):
        run(cache, rows, update_idxs=[0, 1], backend="host")
    with pytest.raises(ValueError, match="'kv_pages'"):
        run(cache, rows, update_idxs=[0, 1], page_table=table, kv_pages="rows", backend="host")
    with pytest.raises(TypeError, match="'cache_tensor': expected ttnn tensors on the device"):
        run(cache, rows, update_idxs=[0, 1], page_table=table, backend="device")


def test_rows_read_from_their_l1_shards_give_the_dram_bytes() -> None:
    """nlp_create_qkv_heads_decode's placement: user b's [32 padded heads, D] on its own core (here cores
    that run no update kernel too): the reader reads the rows where they lie."""
    from ttdecode.core.program_description import CoreCoord
    from ttdecode.ops.paged_update import build_program, validate
    from ttdecode.ops.paged_update.program_factory import input_images
    from ttdecode.runtime import run_program

    g = torch.Generator().manual_seed(5)
    cache = ttdecode.from_torch(torch.randn(8, 2, 32, 64, generator=g), dtype=BFP8)
    rows = torch.randn(1, 3, 2, 64, generator=g)
    table = torch.tensor([[0, 1], [2, 3], [4, 5]], dtype=torch.int32)
    inp = validate(cache, rows, update_idxs=[5, 40, 63], page_table=table, kv_pages="key_row")
    want = run_program(build_program(inp, input_images(inp), (2, 1))).tensors["cache"]
    holders = (CoreCoord(0, 0), CoreCoord(6, 2), CoreCoord(1, 0))
    got = run_program(build_program(inp, input_images(inp), (2, 1), (holders, 2))).tensors["cache"]
    assert got == want and got != bytes(ttdecode.to_torch(cache).numel())
