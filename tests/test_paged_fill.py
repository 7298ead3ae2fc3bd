"""ttdecode.paged_fill_cache on the host runtime: a prompt's K/V [1, NKV, S, D] written into a paged pool
through one user's page-table row, in tile pages and in the bank-local pool (kv_pages "key_row").

The expectation is an independent torch scatter on the values: position p of head h of the prompt (its
zero padding up to a whole tile included) goes to row p % block_size of block table[user, p //
block_size]; the tile copy keeps every value (the prompt is in the pool's format). Every byte of the
pool the prompt does not reach stays as it was."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.core.formats import DataType

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b


def expected_values(pool: ttdecode.TileTensor, fill: ttdecode.TileTensor, table: torch.Tensor,
                    user: int) -> torch.Tensor:
    """The pool's values [num_blocks, NKV, block_size, D] after the fill, by a torch scatter."""
    want = ttdecode.to_torch(pool).float().clone()
    rows = ttdecode.to_torch(fill).float()[0]  # [NKV, S, D]
    s, bs = rows.shape[1], pool.shape[2]
    padded = torch.zeros(rows.shape[0], -(-s // 32) * 32, rows.shape[2])
    padded[:, :s] = rows
    pos = torch.arange(padded.shape[1])
    blocks = table[user].to(torch.int64)[pos // bs]
    want[blocks, :, pos % bs, :] = padded.transpose(0, 1)
    return want


def reached_rows(pool_shape: tuple[int, ...], s: int, table: torch.Tensor, user: int) -> set[int]:
    """Key-tile rows (tile order: (block * NKV + h) * bt + r) the prompt writes."""
    _, nkv, bs, _ = pool_shape
    bt = bs // 32
    return {(int(table[user, t // bt]) * nkv + h) * bt + t % bt for h in range(nkv) for t in range(-(-s // 32))}


def check_fill(out: ttdecode.TileTensor, pool: ttdecode.TileTensor, fill: ttdecode.TileTensor, table: torch.Tensor,
               user: int) -> None:
    assert out.shape == pool.shape and out.dtype == pool.dtype
    assert torch.equal(ttdecode.to_torch(out).float(), expected_values(pool, fill, table, user))
    row_bytes = len(pool.data) // (pool.shape[0] * pool.shape[1] * pool.shape[2] // 32)
    reached = reached_rows(pool.shape, fill.shape[2], table, user)
    for k in range(len(pool.data) // row_bytes):
        if k not in reached:
            assert out.data[k * row_bytes:(k + 1) * row_bytes] == pool.data[k * row_bytes:(k + 1) * row_bytes], k


def case(dtype: DataType, blocks: int, nkv: int, bs: int, d: int, s: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    pool = ttdecode.from_torch(torch.randn(blocks, nkv, bs, d, generator=g), dtype=dtype)
    fill = ttdecode.from_torch(torch.randn(1, nkv, s, d, generator=g) * 4, dtype=dtype)
    return pool, fill


@pytest.mark.parametrize("pages", ["tile", "key_row"])
@pytest.mark.parametrize("dtype", [BF16, BFP8, BFP4], ids=lambda d: d.value)
def test_a_prompt_crossing_blocks_with_a_partial_last_tile(dtype: DataType, pages: str) -> None:
    """S = 150 over blocks of 64 (three blocks, the last tile row 22 positions + padding), shuffled table, the
    user in the middle of the table; other users' blocks untouched."""
    pool, fill = case(dtype, 11, 2, 64, 64, 150, 1)
    table = torch.tensor([[0, 1, 2, 3], [9, 4, 6, 10], [5, 7, 8, 3]], dtype=torch.int32)
    out = ttdecode.paged_fill_cache(pool, fill, table, batch_idx=1, kv_pages=pages, backend="host")
    check_fill(out, pool, fill, table, 1)
    assert out.data == ttdecode.paged_fill_cache(pool, fill, table, batch_idx=1, kv_pages=pages,
                                                 backend="reference").data


@pytest.mark.parametrize("pages", ["tile", "key_row"])
def test_whole_blocks_of_one_tile_row_and_many_cores(pages: str) -> None:
    """block_size 32 (a block is one key-tile row), S = 256 exactly 8 blocks, 8 KV heads, D 128: 64 rows dealt
    over a 3x2 grid (runs of 10 and 11), under a perturbed schedule too."""
    pool, fill = case(BFP8, 20, 8, 32, 128, 256, 2)
    table = torch.randperm(20, generator=torch.Generator().manual_seed(3))[:16].reshape(2, 8).to(torch.int32)
    out = ttdecode.paged_fill_cache(pool, fill, table, batch_idx=0, kv_pages=pages, grid=(3, 2), backend="host")
    check_fill(out, pool, fill, table, 0)

    from ttdecode.ops.paged_fill import build_program, validate
    from ttdecode.ops.paged_fill.program_factory import input_images
    from ttdecode.runtime import run_program

    inp = validate(pool, fill, table, 0, pages)
    seeded = run_program(build_program(inp, input_images(inp), (3, 2)), schedule_seed=7)
    assert seeded.tensors["cache"] == out.data


def test_a_torch_prompt_is_packed_in_the_pools_format() -> None:
    pool, _ = case(BFP4, 4, 1, 64, 32, 40, 4)
    x = torch.randn(1, 1, 40, 32, generator=torch.Generator().manual_seed(5))
    table = torch.tensor([[3, 1]], dtype=torch.int64)
    out = ttdecode.paged_fill_cache(pool, x, table, batch_idx=0, kv_pages="key_row", backend="host")
    check_fill(out, pool, ttdecode.from_torch(x, dtype=BFP4), table, 0)


def test_paged_fill_refuses_before_writing() -> None:
    pool, fill = case(BFP8, 4, 2, 64, 64, 100, 6)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    run = ttdecode.paged_fill_cache
    with pytest.raises(TypeError, match="'input_tensor': expected the pool's format bfloat8_b"):
        run(pool, ttdecode.from_torch(torch.zeros(1, 2, 100, 64)), table, batch_idx=0, backend="host")
    with pytest.raises(ValueError, match=r"'input_tensor': expected shape \[1, NKV=2"):
        run(pool, ttdecode.from_torch(torch.zeros(1, 1, 100, 64), dtype=BFP8), table, batch_idx=0, backend="host")
    with pytest.raises(ValueError, match=r"'input_tensor': expected S <= 128"):
        run(pool, case(BFP8, 4, 2, 64, 64, 129, 6)[1], table, batch_idx=0, backend="host")
    with pytest.raises(ValueError, match=r"'batch_idx': expected a user in 0..1"):
        run(pool, fill, table, batch_idx=2, backend="host")
    with pytest.raises(ValueError, match=r"'page_table\[1, 1\]': expected a block id in 0..3"):
        run(pool, fill, torch.tensor([[0, 1], [2, 4]]), batch_idx=1, backend="host")
    with pytest.raises(ValueError, match="'kv_pages'"):
        run(pool, fill, table, batch_idx=0, kv_pages="rows", backend="host")
    with pytest.raises(TypeError, match="'cache_tensor'"):
        run(torch.zeros(4, 2, 64, 64), fill, table, batch_idx=0, backend="host")
    with pytest.raises(TypeError, match="'cache_tensor': expected ttnn tensors on the device"):
        run(pool, fill, table, batch_idx=0, backend="device")
    # a block id past the prompt's blocks is not read: refused only where the prompt writes
    out = run(pool, ttdecode.from_torch(torch.ones(1, 2, 64, 64), dtype=BFP8), torch.tensor([[0, 99], [2, 3]]),
              batch_idx=0, backend="host")
    assert out.data[len(out.data) // 2:] == pool.data[len(pool.data) // 2:]
