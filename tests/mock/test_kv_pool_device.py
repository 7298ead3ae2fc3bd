"""ttdecode.kv_pool on a mock N150 through the real ttnn: a bank-local pool allocated on the device,
converted to ttnn's interleaved tile pages and back with ttnn.to_memory_config (each a device program ttnn
builds and caches), the bank count taken from the device (dram_grid_size 12 x 1).

What the mock can show: ttnn accepts the ND-sharded config on the pool's shape and each conversion
(dtype, layout, shape kept; the configs as asked; a program-cache entry per direction, reused on a second
round trip). What it cannot: the bytes -- the mock device holds no data (every read back is zeros,
pinned below so that a mock that starts holding data makes this test check the round trip's bytes)."""

from __future__ import annotations

POOL = r"""
import torch
import ttnn
import ttdecode
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.ttnn_backend import dram_banks, key_row_memory_config

d = open_mock_device()
res = {"banks": dram_banks(d), "grid": [d.dram_grid_size().x, d.dram_grid_size().y], "pools": {}}
for name, dims, dt in (("llama", (16, 8, 64, 128), "bfloat8_b"), ("small", (3, 1, 32, 64), "bfloat4_b"),
                       ("bf16", (13, 1, 32, 64), "bfloat16")):
    r = {}
    pool = ttdecode.allocate_kv_pool(*dims, dtype=dt, device=d)
    mem = pool.memory_config()
    r["layout"] = str(mem.memory_layout)
    r["nd_spec_kept"] = mem.nd_shard_spec == key_row_memory_config(ttnn, d, dims[-1]).nd_shard_spec
    r["bank_local"] = ttdecode.is_bank_local(pool)
    r["entries"] = [int(d.num_program_cache_entries())]
    for trip in range(2):
        tiles = ttdecode.to_tile_pages(pool)
        r["entries"].append(int(d.num_program_cache_entries()))
        r.setdefault("tiles_interleaved", []).append(tiles.memory_config() == ttnn.DRAM_MEMORY_CONFIG
                                                     and not ttdecode.is_bank_local(tiles))
        back = ttdecode.to_bank_local(tiles)
        r["entries"].append(int(d.num_program_cache_entries()))
        r.setdefault("back_bank_local", []).append(ttdecode.is_bank_local(back))
        r.setdefault("meta_kept", []).append(
            [tuple(back.shape), str(back.dtype), str(back.layout)] == [dims, str(pool.dtype), str(pool.layout)]
            and [tuple(tiles.shape), str(tiles.dtype)] == [dims, str(pool.dtype)])
        r["same_object"] = ttdecode.to_bank_local(back) is back and ttdecode.to_tile_pages(tiles) is tiles
        r["readback_zero"] = bool((ttnn.to_torch(back).float() == 0).all())
        ttnn.deallocate(tiles)
        ttnn.deallocate(pool)
        pool = back
    res["pools"][name] = r
# a pool in tile pages from the start, and a tensor's contents put in the bank-local layout
t = ttnn.from_torch(torch.randn(4, 2, 64, 64), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
res["from_tile"] = ttdecode.is_bank_local(ttdecode.to_bank_local(t))
tile_pool = ttdecode.allocate_kv_pool(4, 2, 64, 64, kv_pages="tile", device=d)
res["tile_pool"] = tile_pool.memory_config() == ttnn.DRAM_MEMORY_CONFIG
emit(res)
ttnn.close_device(d)
"""


def test_pools_convert_between_tile_pages_and_bank_local_on_the_mock(run_mock) -> None:
    r = run_mock(POOL, timeout=300)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["banks"] == 12 and res["grid"] == [12, 1]
    pools = res["pools"]
    # more key-tile rows than banks: ND-sharded; at most 12 (3 rows): ttnn holds it as legacy height sharding,
    # the ND spec kept, and the checks accept it (is_key_row_memory_config compares the ND spec)
    assert pools["llama"]["layout"] == "TensorMemoryLayout.ND_SHARDED"
    assert pools["bf16"]["layout"] == "TensorMemoryLayout.ND_SHARDED"
    assert pools["small"]["layout"] == "TensorMemoryLayout.HEIGHT_SHARDED"
    for name, p in pools.items():
        assert p["nd_spec_kept"] and p["bank_local"], (name, p)
        assert p["tiles_interleaved"] == [True, True] and p["back_bank_local"] == [True, True], (name, p)
        assert p["meta_kept"] == [True, True] and p["same_object"], (name, p)
        # each direction is a device program: one cache entry each the first round trip, none the second
        e = p["entries"]
        assert e == [e[0], e[0] + 1, e[0] + 2, e[0] + 2, e[0] + 2], (name, e)
        assert p["readback_zero"], "the mock now holds data: check the round trip's bytes here"
    assert res["from_tile"] and res["tile_pool"]
