"""The bank-local pool of 16-position blocks (block_size 16, kv_pages "key_row") written on the host runtime.

The definition (one padded tile row a page): page k = block * NKV + h holds the D / 32 tiles of the 32 x D
rows of (block, KV head h); rows 0-15 are the block's positions, rows 16-31 padding that no writer touches.
Position p of user u goes to row p % 16 of page table[u, p // 16] * NKV + h. The expected pool images below
are built from that definition page by page (numpy values, each page packed with
`ttdecode.core.formats.pack_tiles`, the packer pinned against ttnn in tests/test_formats_ttnn.py), not from
the writers' code; the tile-pages writers of the same pool (tests/test_block16_writers.py) write the same bytes.
The device side: tests/mock/test_block16_key_row_device.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ttdecode
from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.program_description import kv_cache_tensor
from ttdecode.core.tensor import TileTensor
from ttdecode.ops.paged_update.program_factory import build_program as update_program
from ttdecode.ops.paged_update.validate import validate as validate_update

from tests.test_paged_update import identity_rotary

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b
BLOCK, NKV, D = 16, 3, 64
NAN = float("nan")
#: positions at the block and key-tile boundaries, and a skipped user
POSITIONS = [0, 15, 16, 31, -1, 32, 47, 48, 63]


def random_pages(num_blocks: int, g: torch.Generator) -> np.ndarray:
    """[num_blocks * NKV, 32, D] page values: rows 0-15 random, the padding rows 16-31 NaN."""
    pages = np.full((num_blocks * NKV, 2 * BLOCK, D), NAN, dtype=np.float32)
    pages[:, :BLOCK] = torch.randn(num_blocks * NKV, BLOCK, D, generator=g).to(torch.bfloat16).float().numpy()
    return pages


def pool_image(pages: np.ndarray, dtype: DataType) -> bytes:
    """The pool's bytes from its pages: page k's 32 x D rows as D / 32 tiles, pages in order k = 0, 1, ..."""
    return b"".join(formats.pack_tiles(torch.from_numpy(page), dtype) for page in pages)


def as_pool(pages: np.ndarray, dtype: DataType) -> TileTensor:
    return TileTensor((pages.shape[0] // NKV, NKV, BLOCK, D), dtype, pool_image(pages, dtype))


def page_values(pool: TileTensor) -> np.ndarray:
    """The pool's bytes read back page by page as [num_blocks * NKV, 32, D] (padding rows included)."""
    n = pool.shape[0] * NKV
    return formats.unpack_tiles(pool.data, pool.dtype, (n, 2 * BLOCK, D)).numpy()


def appended(pages: np.ndarray, rows: torch.Tensor, positions: list[int], table: torch.Tensor) -> np.ndarray:
    """The definition of an append: row p % 16 of page table[u, p // 16] * NKV + h gets user u's head h."""
    want = pages.copy()
    for u, p in enumerate(positions):
        if p < 0:
            continue
        for h in range(NKV):
            want[int(table[u, p // BLOCK]) * NKV + h, p % BLOCK] = rows[0, u, h].numpy()
    return want


def test_key_row_block16_pool_is_one_padded_tile_row_a_page() -> None:
    pool = ttdecode.allocate_kv_pool(5, NKV, BLOCK, D, dtype=BFP8)  # the bank-local default
    assert pool.shape == (5, NKV, BLOCK, D) and pool.data == bytes(5 * NKV * 2 * 1088)
    assert ttdecode.to_bank_local(pool) is pool and ttdecode.to_tile_pages(pool) is pool
    cache = kv_cache_tensor("cache", BFP8, pool.shape, "key_row", None)
    assert (cache.page_size, cache.num_pages, cache.layout) == (2 * 1088, 5 * NKV, "key_row")
    # a writer's program addresses the same pages
    inp = validate_update(pool, torch.zeros(1, 2, NKV, D), update_idxs=[0, 7], page_table=torch.tensor([[0], [1]]),
                          kv_pages="key_row")
    t = update_program(inp).tensor("cache")
    assert (t.page_size, t.num_pages, t.layout) == (2 * 1088, 5 * NKV, "key_row")


@pytest.mark.parametrize("writer", ["paged_update", "rotary_append"])
def test_key_row_block16_rows_land_on_their_pages(writer: str) -> None:
    g = torch.Generator().manual_seed(160)
    b, max_blocks = len(POSITIONS), 4
    num_blocks = b * max_blocks + 3
    pages = random_pages(num_blocks, g)
    pool = as_pool(pages, BF16)
    rows = (torch.randn(1, b, NKV, D, generator=g) * 3).to(torch.bfloat16).float()
    table = torch.randperm(num_blocks, generator=g)[: b * max_blocks].reshape(b, max_blocks).to(torch.int32)
    if writer == "paged_update":
        out = ttdecode.paged_update_cache(pool, rows, update_idxs=POSITIONS, page_table=table, kv_pages="key_row",
                                          grid=(2, 2), backend="host")
    else:
        out = identity_rotary(pool, rows, POSITIONS, table, "key_row")
    assert out.shape == pool.shape
    assert out.data == pool_image(appended(pages, rows, POSITIONS, table), BF16)  # padding NaN bytes kept too


@pytest.mark.parametrize("dtype", [BFP8, BFP4], ids=lambda d: d.value)
def test_key_row_block16_block_float_appends_write_only_their_rows(dtype: DataType) -> None:
    # The packer's rounding of a row is the tile writers' (pinned in tests/test_block16_writers.py): the
    # bank-local writers write those same bytes, and every other row of every page keeps its values.
    g = torch.Generator().manual_seed(161)
    b, max_blocks = len(POSITIONS), 4
    num_blocks = b * max_blocks
    pages = random_pages(num_blocks, g)
    pool = as_pool(pages, dtype)
    rows = (torch.randn(1, b, NKV, D, generator=g) * 3).to(torch.bfloat16).float()
    table = torch.randperm(num_blocks, generator=g).reshape(b, max_blocks).to(torch.int32)
    tile = ttdecode.paged_update_cache(pool, rows, update_idxs=POSITIONS, page_table=table, kv_pages="tile",
                                       backend="host")
    out = ttdecode.paged_update_cache(pool, rows, update_idxs=POSITIONS, page_table=table, kv_pages="key_row",
                                      backend="host")
    assert out.data == tile.data == identity_rotary(pool, rows, POSITIONS, table, "key_row").data
    written = np.zeros(pages.shape[:2], dtype=bool)
    for u, p in enumerate(POSITIONS):
        if p >= 0:
            written[int(table[u, p // BLOCK]) * NKV + np.arange(NKV), p % BLOCK] = True
    before, got = page_values(pool), page_values(out)
    np.testing.assert_array_equal(got[~written], before[~written])  # NaN padding included
    assert not np.isnan(got[written]).any()


@pytest.mark.parametrize("s", [1, 15, 16, 17, 31, 32, 47, 48, 80])
@pytest.mark.parametrize("dtype", [BF16, BFP8, BFP4], ids=lambda d: d.value)
def test_key_row_block16_fill_writes_the_prompts_pages(dtype: DataType, s: int) -> None:
    # Prompt position p of head h lands on row p % 16 of page table[user, p // 16] * NKV + h; the prompt's last
    # block is written whole (its rows from s on get the input tile's zero padding); every other page and
    # every padding row keeps its bytes. The tile copy is exact in every format: the expected image is the
    # input's values packed on the definition's pages.
    g = torch.Generator().manual_seed(162 + s)
    max_blocks, user = 6, 1
    num_blocks = 3 * max_blocks
    pages = random_pages(num_blocks, g)
    pages[:, :BLOCK] = formats.unpack_tiles(pool_image(pages, dtype), dtype, pages.shape).numpy()[:, :BLOCK]
    pool = as_pool(pages, dtype)
    fill = ttdecode.from_torch(torch.randn(1, NKV, s, D, generator=g) * 4, dtype=dtype)
    table = torch.randperm(num_blocks, generator=g).reshape(3, max_blocks).to(torch.int32)
    table[user, -(-s // BLOCK):] = -1  # entries past the prompt are never followed
    out = ttdecode.paged_fill_cache(pool, fill, table, batch_idx=user, kv_pages="key_row", grid=(2, 2),
                                    backend="host")
    values = np.zeros((NKV, -(-s // BLOCK) * BLOCK, D), dtype=np.float32)
    values[:, :s] = ttdecode.to_torch(fill).float().numpy()[0]
    want = pages.copy()
    for p in range(values.shape[1]):
        for h in range(NKV):
            want[int(table[user, p // BLOCK]) * NKV + h, p % BLOCK] = values[h, p]
    assert out.data == pool_image(want, dtype)
    assert out.data == ttdecode.paged_fill_cache(pool, fill, table, batch_idx=user, kv_pages="tile",
                                                 backend="host").data


def test_key_row_block16_writers_refuse_positions_past_the_table() -> None:
    pool = ttdecode.allocate_kv_pool(4, NKV, BLOCK, D, dtype=BF16)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"argument 'update_idxs\[1\]': expected a position < 32"):
        ttdecode.paged_update_cache(pool, torch.zeros(1, 2, NKV, D), update_idxs=[0, 32], page_table=table,
                                    kv_pages="key_row", backend="host")
    with pytest.raises(ValueError, match=r"argument 'input_tensor': expected S <= 32 positions"):
        ttdecode.paged_fill_cache(pool, torch.zeros(1, NKV, 33, D), table, batch_idx=0, kv_pages="key_row",
                                  backend="host")
