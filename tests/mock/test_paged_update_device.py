"""paged_update_cache as a device op on a mock N150 through the real ttnn.generic_op: a decode step's K rows
written into a bank-local pool (ttdecode.allocate_kv_pool, kv_pages "key_row") and into ttnn's interleaved
tile pool, positions and page table on the device. Pinned: the reader, compute and writer JIT-compile and
ttnn accepts the program; one cached step serves every call (no program-cache entry after the first, no
host <-> device move with device inputs; a positions list is one upload); rows in interleaved DRAM are read
there, rows height-sharded in L1 as nlp_create_qkv_heads_decode leaves them are read from their shards
(no to_memory_config); a contiguous cache runs too. The mock computes nothing (the bytes:
tests/test_paged_update.py on the host runtime)."""

from __future__ import annotations

import pytest

from ttdecode.testing.dry_run import check_jit, jit_records

UPDATE = r"""
import torch
import ttnn
import ttdecode
from ttdecode.ops.paged_update import device_step as ud
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import count_transfers

PAGES = "{pages}"
B, NKV, D, BLOCK = 4, 8, 128, 64
d = open_mock_device()
pool = ttdecode.allocate_kv_pool(16, NKV, BLOCK, D, dtype="bfloat8_b", kv_pages=PAGES, device=d)
rows = ttnn.from_torch(torch.randn(1, B, NKV, D), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=d)
table = ttnn.from_torch(torch.arange(16, dtype=torch.int32).reshape(B, 4), dtype=ttnn.int32, device=d)
pos = ttnn.from_torch(torch.tensor([0, 70, 130, 255], dtype=torch.int32), dtype=ttnn.int32, device=d)
grid = ttnn.num_cores_to_corerangeset(B, d.compute_with_storage_grid_size(), row_wise=True)
sharded = ttnn.to_memory_config(rows, ttnn.create_sharded_memory_config(
    shape=(32, D), core_grid=grid, strategy=ttnn.ShardStrategy.HEIGHT, orientation=ttnn.ShardOrientation.ROW_MAJOR,
    use_height_and_width_as_shard_shape=True))
res = {{"moves": [], "entries": [], "ops": []}}
_to_mc = ttnn.to_memory_config
def _count(*a, **k):
    res["ops"].append("to_memory_config")
    return _to_mc(*a, **k)
ttnn.to_memory_config = _count
with count_transfers() as log:
    for x in (rows, rows, sharded, sharded):
        log.clear()
        out = ttdecode.paged_update_cache(pool, x, update_idxs_tensor=pos, page_table=table, kv_pages=PAGES,
                                          backend="device")
        res["moves"].append(log.counts())
        res["entries"].append(int(d.num_program_cache_entries()))
        assert out is pool
    log.clear()
    ttdecode.paged_update_cache(pool, rows, update_idxs=[1, 2, -1, 3], page_table=table, kv_pages=PAGES,
                                backend="device")
    res["list_moves"] = log.counts()
cache = ttnn.from_torch(torch.zeros(B, NKV, 256, D), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
res["contiguous_ran"] = ttdecode.paged_update_cache(cache, rows, update_idxs_tensor=pos, backend="device") is cache
res["steps"] = ud.cached_steps()
res["kernels"] = [{{"name": k.name, "source": str(k.source), "kind": k.kind.value}}
                  for s in ud._steps.values() for k in s.program.kernels]
emit(res)
ttnn.close_device(d)
"""


@pytest.mark.parametrize("pages", ["key_row", "tile"], ids=["bank-local", "tile-pages"])
def test_paged_update_on_the_mock_one_step_per_placement(run_mock, tmp_path, pages: str) -> None:
    log = tmp_path / "jit.log"
    r = run_mock(UPDATE.format(pages=pages), timeout=300, jit_log=str(log), cache=tmp_path / "cache")
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert not check_jit(res["kernels"], jit_records(log)), check_jit(res["kernels"], jit_records(log))
    assert res["moves"] == [{}, {}, {}, {}], res["moves"]
    assert res["entries"][0] == res["entries"][1] and res["entries"][2] == res["entries"][3], res["entries"]
    assert res["list_moves"] == {"from_torch": 1}, res["list_moves"]  # the positions list, uploaded
    assert res["ops"] == [], res["ops"]  # sharded rows read where they lie: no to_memory_config
    assert res["contiguous_ran"] and res["steps"] == 3, res  # DRAM rows, sharded rows, the contiguous cache
