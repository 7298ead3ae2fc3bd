"""ttdecode.kv_pool on the host: a paged pool [num_blocks, NKV, block_size, D] allocated as zeros, and the
bank-local layout a relabel of the same tile-order bytes (the layout is the call's kv_pages option).
The device side (ttnn.to_memory_config on the mock N150): tests/mock/test_kv_pool_device.py."""

from __future__ import annotations

import pytest
import torch

import ttdecode
from ttdecode.core.formats import DataType


@pytest.mark.parametrize("dtype", [DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b], ids=lambda d: d.value)
def test_a_host_pool_is_zeros_in_its_format(dtype: DataType) -> None:
    pool = ttdecode.allocate_kv_pool(3, 2, 64, 96, dtype=dtype)
    assert isinstance(pool, ttdecode.TileTensor) and pool.shape == (3, 2, 64, 96) and pool.dtype is dtype
    assert torch.equal(ttdecode.to_torch(pool).float(), torch.zeros(3, 2, 64, 96))
    assert pool.data == ttdecode.from_torch(torch.zeros(3, 2, 64, 96), dtype=dtype).data


def test_host_conversion_is_a_relabel_of_the_same_bytes() -> None:
    pool = ttdecode.from_torch(torch.randn(4, 2, 32, 64), dtype=ttdecode.bfloat8_b)
    assert ttdecode.to_bank_local(pool) is pool and ttdecode.to_tile_pages(pool) is pool
    assert not ttdecode.is_bank_local(pool)  # a host tensor carries no page layout: the call's kv_pages says it


def test_the_pool_functions_refuse_what_is_not_a_pool() -> None:
    with pytest.raises(ValueError, match="block_size and D multiples of 32"):
        ttdecode.allocate_kv_pool(3, 2, 48, 64)
    with pytest.raises(ValueError, match="4 positive ints"):
        ttdecode.allocate_kv_pool(0, 2, 32, 64)
    with pytest.raises(TypeError, match="argument 'dtype'"):
        ttdecode.allocate_kv_pool(3, 2, 32, 64, dtype="float32")
    with pytest.raises(ValueError, match="argument 'kv_pages'"):
        ttdecode.allocate_kv_pool(3, 2, 32, 64, kv_pages="rows")
    with pytest.raises(TypeError, match="argument 'pool'"):
        ttdecode.to_bank_local(torch.zeros(3, 2, 32, 64))
    with pytest.raises(ValueError, match="4 positive ints"):
        ttdecode.to_tile_pages(ttdecode.from_torch(torch.zeros(2, 32, 64)))
