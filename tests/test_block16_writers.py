"""The writers of a paged pool of 16-position blocks (block_size 16) on the host runtime.

ttnn's TILE layout of a ``[num_blocks, NKV, 16, D]`` pool holds one tile row per (block, KV head), rows 16-31
padding: position p of a user lands on tile row ``p % 16`` of block ``page_table[b, p // 16]``'s tile and the
padding rows keep their bytes. bfloat16: checked against an independent torch scatter (exact) and the padded
image's rows 16-31 unchanged; then a pool written step by step is read by FlashDecode against the float64
reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ttdecode
from ttdecode.accuracy import check_close
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import TileTensor
from ttdecode.ttnn_env import import_ttnn, ttnn_unavailable_reason

from tests.test_paged_update import identity_rotary, scatter

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b
BLOCK = 16
NAN = float("nan")


def padded_rows(pool: TileTensor) -> torch.Tensor:
    """The pool's tile image read as [num_blocks, NKV, 32, D]: rows 16-31 are the padding."""
    n, nkv, _, d = pool.shape
    return ttdecode.to_torch(TileTensor((n, nkv, 2 * BLOCK, d), pool.dtype, pool.data)).float()


def nan_padded_pool(blocks: torch.Tensor, dtype: DataType) -> TileTensor:
    """A [num_blocks, NKV, 16, D] pool whose padding rows hold NaN."""
    n, nkv, rows, d = blocks.shape
    full = torch.full((n, nkv, 2 * rows, d), NAN)
    full[:, :, :rows] = blocks
    return TileTensor(tuple(blocks.shape), dtype, ttdecode.from_torch(full, dtype=dtype).data)


POSITIONS = [0, 15, -1, 16, 31, 32, 47]


@pytest.mark.parametrize("writer", ["paged_update", "rotary_append"])
def test_block16_rows_land_in_their_blocks_and_the_padding_keeps_its_bytes(writer: str) -> None:
    g = torch.Generator().manual_seed(16)
    b, nkv, d, max_blocks = len(POSITIONS), 3, 64, 4
    num_blocks = b * max_blocks + 2
    blocks = torch.randn(num_blocks, nkv, BLOCK, d, generator=g)
    cache = nan_padded_pool(blocks, BF16)
    rows = (torch.randn(1, b, nkv, d, generator=g) * 3).to(torch.bfloat16).float()
    table = torch.randperm(num_blocks, generator=g)[: b * max_blocks].reshape(b, max_blocks).to(torch.int32)
    if writer == "paged_update":
        out = ttdecode.paged_update_cache(cache, rows, update_idxs=POSITIONS, page_table=table, grid=(2, 2),
                                          backend="host")
    else:
        out = identity_rotary(cache, rows, POSITIONS, table, "tile")
    assert out.shape == cache.shape
    assert torch.equal(ttdecode.to_torch(out).float(), scatter(ttdecode.to_torch(cache).float(), rows, POSITIONS, table))
    assert torch.isnan(padded_rows(out)[:, :, BLOCK:]).all()  # no write reached the padding


@pytest.mark.parametrize("dtype", [BFP8, BFP4], ids=lambda d: d.value)
def test_block16_block_float_writers_agree_and_keep_the_padding(dtype: DataType) -> None:
    g = torch.Generator().manual_seed(17)
    b, nkv, d, max_blocks = len(POSITIONS), 2, 64, 4
    num_blocks = b * max_blocks
    cache = nan_padded_pool(torch.randn(num_blocks, nkv, BLOCK, d, generator=g), dtype)
    rows = (torch.randn(1, b, nkv, d, generator=g) * 3).to(torch.bfloat16).float()
    table = torch.randperm(num_blocks, generator=g).reshape(b, max_blocks).to(torch.int32)
    out = ttdecode.paged_update_cache(cache, rows, update_idxs=POSITIONS, page_table=table, backend="host")
    assert out.data == identity_rotary(cache, rows, POSITIONS, table, "tile").data
    # every row but the written ones keeps its values; the written rows hold the rows as the host tilizer
    # (ttnn's from_torch) packs them in the pool's format, within one step of its rounding
    before = ttdecode.to_torch(cache).float()
    got = ttdecode.to_torch(out).float()
    written = torch.zeros_like(before, dtype=torch.bool)
    for u, p in enumerate(POSITIONS):
        if p >= 0:
            written[int(table[u, p // BLOCK]), :, p % BLOCK] = True
    assert torch.equal(got[~written], before[~written])
    packed = ttdecode.to_torch(ttdecode.from_torch(scatter(before, rows, POSITIONS, table), dtype=dtype)).float()
    # one code step: at most 2^-6 (bfloat8_b) / 2^-2 (bfloat4_b) of the group's largest value, twice that when
    # the tilizer's rounding lifts the group's shared exponent and the packer's does not
    step = 2.0 ** -(5 if dtype == BFP8 else 1)
    group_max = packed.abs().unflatten(-1, (-1, 16)).amax(dim=-1).repeat_interleave(16, dim=-1)
    tol = group_max * step
    assert ((got - packed).abs() <= tol)[written].all()
    assert torch.isnan(padded_rows(out)[:, :, BLOCK:]).all()


def test_block16_writers_refuse_what_they_cannot_write() -> None:
    # a contiguous cache takes whole key tiles only (block 16 in key-row pages: tests/test_block16_key_row.py)
    rows = torch.zeros(1, 2, 2, 64)
    contiguous = ttdecode.from_torch(torch.zeros(2, 2, BLOCK, 64), dtype=BF16)
    with pytest.raises(ValueError, match=r"argument 'cache_tensor': expected S \(contiguous\) a multiple of 32"):
        ttdecode.paged_update_cache(contiguous, rows, update_idxs=[0, 1], backend="host")
    with pytest.raises(ValueError, match=r"argument 'k_cache': expected S \(contiguous\) a multiple of 32"):
        ttdecode.rotary_kv_append(rows, rows, contiguous, contiguous, cur_pos=[0, 1], cos=torch.ones(2, 64),
                                  sin=torch.zeros(2, 64), backend="host")


def test_block16_pool_appended_step_by_step_is_read_by_flash_decode() -> None:
    # A NaN pool (padding too); each user's prompt scattered in by torch, then four decode steps appended by
    # rotary_kv_append (K and V, angle 0) and one more by paged_update_cache, across block and tile
    # boundaries (15 -> 16, 31 -> 32); FlashDecode reads the pool against the float64 reference of the rows.
    g = torch.Generator().manual_seed(18)
    b, nh, nkv, d, max_blocks = 3, 8, 2, 64, 6
    s, num_blocks = max_blocks * BLOCK, b * max_blocks + 2
    start = [12, 27, -1]  # the first appended position per user (-1: skipped throughout)
    k_all = torch.randn(b, nkv, s, d, generator=g).to(torch.bfloat16).float()
    v_all = torch.randn(b, nkv, s, d, generator=g).to(torch.bfloat16).float()
    table = torch.randperm(num_blocks, generator=g)[: b * max_blocks].reshape(b, max_blocks).to(torch.int32)
    k_blocks = torch.full((num_blocks, nkv, BLOCK, d), NAN)
    v_blocks = torch.full((num_blocks, nkv, BLOCK, d), NAN)
    for u, p0 in enumerate(start):
        for p in range(max(p0, 0)):
            k_blocks[table[u, p // BLOCK], :, p % BLOCK] = k_all[u, :, p]
            v_blocks[table[u, p // BLOCK], :, p % BLOCK] = v_all[u, :, p]
    kc, vc = nan_padded_pool(k_blocks, BF16), nan_padded_pool(v_blocks, BF16)
    cos, sin = torch.ones(b, d), torch.zeros(b, d)
    steps = 5
    for i in range(steps):
        pos = [p0 + i if p0 >= 0 else -1 for p0 in start]
        k_new = torch.stack([k_all[u, :, max(p, 0)] for u, p in enumerate(pos)]).unsqueeze(0)
        v_new = torch.stack([v_all[u, :, max(p, 0)] for u, p in enumerate(pos)]).unsqueeze(0)
        if i < steps - 1:
            kc, vc = ttdecode.rotary_kv_append(k_new, v_new, kc, vc, cur_pos=pos, cos=cos, sin=sin,
                                               page_table=table, backend="host")
        else:
            kc = ttdecode.paged_update_cache(kc, k_new, update_idxs=pos, page_table=table, backend="host")
            vc = ttdecode.paged_update_cache(vc, v_new, update_idxs=pos, page_table=table, backend="host")
    last = [p0 + steps - 1 if p0 >= 0 else -1 for p0 in start]
    q = torch.randn(1, b, nh, d, generator=g)
    out = ttdecode.paged_scaled_dot_product_attention_decode(q, kc, vc, table, cur_pos=last, backend="host")
    ref = ttdecode.reference.sdpa_decode_reference(q.to(torch.bfloat16).double(), k_all.double(), v_all.double(),
                                                   cur_pos=last, scale=1.0 / d ** 0.5)
    for u, p in enumerate(last):
        if p >= 0:
            check_close(out[:, u], ref[:, u], f"block 16 appended pool: user {u} (cur_pos {p})")
        else:
            assert torch.count_nonzero(out[:, u]) == 0


@pytest.mark.parametrize("s", [1, 15, 16, 17, 31, 32, 47, 80])
@pytest.mark.parametrize("dtype", [BF16, BFP8, BFP4], ids=lambda d: d.value)
def test_block16_fill_scatters_the_prompt_and_keeps_the_padding(dtype: DataType, s: int) -> None:
    # Position p of the prompt lands on row p % 16 of block table[user, p // 16] (an independent torch
    # scatter on the values); blocks past the prompt's last and the padding rows keep their bytes.
    g = torch.Generator().manual_seed(s)
    nkv, d, max_blocks, user = 2, 64, 6, 1
    num_blocks = 3 * max_blocks
    pool = nan_padded_pool(torch.randn(num_blocks, nkv, BLOCK, d, generator=g), dtype)
    fill = ttdecode.from_torch(torch.randn(1, nkv, s, d, generator=g) * 4, dtype=dtype)
    table = torch.randperm(num_blocks, generator=g).reshape(3, max_blocks).to(torch.int32)
    table[user, -(-s // BLOCK):] = -1  # entries past the prompt are never followed
    out = ttdecode.paged_fill_cache(pool, fill, table, batch_idx=user, grid=(2, 2), backend="host")
    # the prompt's last block is written whole: its positions from s on get the input tile's zero padding
    # (as the tile copy of larger blocks writes its last tile)
    blocks = -(-s // BLOCK)
    rows = torch.zeros(nkv, blocks * BLOCK, d)
    rows[:, :s] = ttdecode.to_torch(fill).float()[0]
    want = ttdecode.to_torch(pool).float().clone()
    for p in range(blocks * BLOCK):
        want[int(table[user, p // BLOCK]), :, p % BLOCK] = rows[:, p]
    got = ttdecode.to_torch(out).float()
    assert torch.equal(got, want)
    assert torch.isnan(padded_rows(out)[:, :, BLOCK:]).all()
    ref = ttdecode.paged_fill_cache(pool, fill, table, batch_idx=user, backend="reference")
    assert ref.data == out.data


def test_block16_pools_written_match_ttnn_tilized_layout() -> None:
    # ttnn's own layout of a [num_blocks, NKV, 16, D] pool (ttnn.from_torch, TILE, its zero padding) is the
    # expectation: our tile image of the same pool is its bytes, and each writer's output is the bytes ttnn
    # tilizes from the torch-level result (bfloat16: exact).
    ttnn = import_ttnn()
    if ttnn is None:
        pytest.skip(f"ttnn cannot be imported: {ttnn_unavailable_reason()}")

    def ttnn_image(x: torch.Tensor) -> bytes:
        t = ttnn.from_torch(x.to(torch.bfloat16), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
        assert list(t.padded_shape) == [*x.shape[:2], 2 * BLOCK, x.shape[3]]  # a padded tile row per block
        return np.from_dlpack(t.host_buffer().get_shard(ttnn.MeshCoordinate(0, 0))).tobytes()  # ttnn's raw bytes

    g = torch.Generator().manual_seed(19)
    b, nkv, d, max_blocks = len(POSITIONS), 2, 64, 4
    num_blocks = b * max_blocks
    blocks = torch.randn(num_blocks, nkv, BLOCK, d, generator=g).to(torch.bfloat16).float()
    pool = ttdecode.from_torch(blocks, dtype=BF16)
    assert pool.data == ttnn_image(blocks)
    table = torch.randperm(num_blocks, generator=g).reshape(b, max_blocks).to(torch.int32)
    rows = torch.randn(1, b, nkv, d, generator=g).to(torch.bfloat16).float()
    out = ttdecode.paged_update_cache(pool, rows, update_idxs=POSITIONS, page_table=table, backend="host")
    assert out.data == ttnn_image(scatter(blocks, rows, POSITIONS, table))
    out = identity_rotary(pool, rows, POSITIONS, table, "tile")
    assert out.data == ttnn_image(scatter(blocks, rows, POSITIONS, table))
    s, user = 37, 2
    fill = torch.randn(1, nkv, s, d, generator=g).to(torch.bfloat16).float()
    out = ttdecode.paged_fill_cache(pool, ttdecode.from_torch(fill, dtype=BF16), table, batch_idx=user,
                                    backend="host")
    want = blocks.clone()
    padded = torch.zeros(nkv, 48, d)
    padded[:, :s] = fill[0]
    for p in range(48):
        want[int(table[user, p // BLOCK]), :, p % BLOCK] = padded[:, p]
    assert out.data == ttnn_image(want)


@pytest.mark.parametrize("pages", ["tile", "key_row"])
def test_block16_pool_allocates_a_padded_tile_row_per_block(pages: str) -> None:
    pool = ttdecode.allocate_kv_pool(4, 2, BLOCK, 64, dtype=BFP8, kv_pages=pages)
    assert pool.shape == (4, 2, BLOCK, 64) and len(pool.data) == 4 * 2 * 2 * 1088  # a padded tile row per block
    assert ttdecode.to_bank_local(pool) is pool
    with pytest.raises(ValueError, match=r"argument 'shape': expected block_size and D multiples of 32 .*block_size 16 too"):
        ttdecode.allocate_kv_pool(4, 2, 8, 64, kv_pages=pages)
