"""The bank-local pool of 16-position blocks (block_size 16, kv_pages "key_row") on a mock N150 through the real
ttnn: ttdecode.allocate_kv_pool puts ttdecode.ttnn_backend.key_row_memory_config ([1, 1, 32, D] ND shards, one
padded tile row per (block, KV head): page k = block * NKV + h in bank k % NB) on the pool's padded shape
[num_blocks, NKV, 32, D], and ttnn accepts it; to_tile_pages / to_bank_local round-trip it (ttnn.to_memory_config,
the shape [.., 16, D] kept); the three writers (paged_update_cache, paged_fill_cache, rotary_kv_append) take it
with kv_pages "key_row": ttnn accepts each program, the JIT compiles each kernel, and a second step of the same
call runs from the cached step with no host <-> device move and no new program-cache entry. The mock computes
nothing (the bytes: tests/test_block16_key_row.py on the host runtime)."""

from __future__ import annotations

from ttdecode.testing.dry_run import check_jit, jit_records

KEY_ROW16 = r"""
import torch
import ttnn
import ttdecode
from ttdecode.ops.paged_fill import device_step as fd
from ttdecode.ops.paged_update import device_step as ud
from ttdecode.ops.rotary_append import device_step as rd
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import count_transfers
from ttdecode.ttnn_backend import dram_banks, key_row_memory_config

B, NH, NKV, D, BLOCK, MAX_BLOCKS = 2, 8, 2, 64, 16, 8
d = open_mock_device()
res = {"banks": dram_banks(d), "pools": {}}
for name, blocks, dt in (("pool", B * MAX_BLOCKS, "bfloat8_b"), ("small", 3, "bfloat16")):
    pool = ttdecode.allocate_kv_pool(blocks, NKV, BLOCK, D, dtype=dt, device=d)
    r = {"shape": list(pool.shape), "padded": list(pool.padded_shape),
         "layout": str(pool.memory_config().memory_layout),
         "nd_spec": pool.memory_config().nd_shard_spec == key_row_memory_config(ttnn, d, D).nd_shard_spec,
         "bank_local": ttdecode.is_bank_local(pool)}
    tiles = ttdecode.to_tile_pages(pool)
    back = ttdecode.to_bank_local(tiles)
    r["trip"] = [tiles.memory_config() == ttnn.DRAM_MEMORY_CONFIG, list(tiles.shape), ttdecode.is_bank_local(back),
                 list(back.shape), str(back.dtype) == str(pool.dtype)]
    ttnn.deallocate(tiles)
    ttnn.deallocate(back)
    res["pools"][name] = r
k_pool = ttdecode.allocate_kv_pool(B * MAX_BLOCKS, NKV, BLOCK, D, device=d)
v_pool = ttdecode.allocate_kv_pool(B * MAX_BLOCKS, NKV, BLOCK, D, device=d)
ints = lambda x: ttnn.from_torch(torch.tensor(x, dtype=torch.int32), dtype=ttnn.int32,
                                 layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
host_table = torch.randperm(B * MAX_BLOCKS, generator=torch.Generator().manual_seed(1)).view(B, MAX_BLOCKS).int()
table = ints(host_table.tolist())
pos = ints([15, 32])
rows = ttnn.from_torch(torch.randn(1, B, NKV, D), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=d)
prompt = ttnn.from_torch(torch.randn(1, NKV, 40, D), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=d)
qkv = ttnn.from_torch(torch.randn(1, B, (NH + 2 * NKV) * D), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=d)
cos, sin = rd.angles_to_device(torch.ones(B, D), torch.zeros(B, D), device=d, rotary_interleaved=True)
calls = {
    "update": lambda: ttdecode.paged_update_cache(k_pool, rows, update_idxs_tensor=pos, page_table=table,
                                                  kv_pages="key_row", backend="device"),
    "fill": lambda: ttdecode.paged_fill_cache(k_pool, prompt, table, batch_idx=1, kv_pages="key_row",
                                              backend="device"),
    "rotary": lambda: ttdecode.rotary_kv_append(qkv=qkv, k_cache=k_pool, v_cache=v_pool, cur_pos=pos, cos=cos,
                                                sin=sin, page_table=table, num_q_heads=NH, rotary_interleaved=True,
                                                kv_pages="key_row", backend="device")[0],
}
with count_transfers() as log:
    for name, call in calls.items():
        r = {"moves": [], "entries": []}
        for _ in range(2):
            log.clear()
            out = call()
            r["moves"].append(log.counts())
            r["entries"].append(int(d.num_program_cache_entries()))
        r["kept"] = out is k_pool if name != "rotary" else list(out.shape)
        res[name] = r
res["steps"] = [ud.cached_steps(), fd.cached_steps(), rd.cached_steps()]
programs = [s.program for s in ud._steps.values()] + [s.program for s in fd._steps.values()]
programs += [s.program for s in rd._steps.values()]
res["layouts"] = sorted({t.layout for p in programs for t in p.tensors if "cache" in t.name})
res["defines"] = sorted(k for p in programs for kern in p.kernels for k in kern.defines)
res["kernels"] = [{"name": k.name, "source": str(k.source), "kind": k.kind.value} for p in programs
                  for k in p.kernels]
emit(res)
ttnn.close_device(d)
"""


def test_key_row_block16_pool_and_writers_on_the_mock(run_mock, tmp_path) -> None:
    log = tmp_path / "jit.log"  # this test's own log and JIT cache: the kernels compiled here, by this run
    r = run_mock(KEY_ROW16, timeout=600, jit_log=str(log), cache=tmp_path / "cache")
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert not check_jit(res["kernels"], jit_records(log)), check_jit(res["kernels"], jit_records(log))
    assert res["banks"] == 12
    pools = res["pools"]
    # 32 pages (16 blocks x 2 heads) > 12 banks: ND-sharded; 6 pages: ttnn's legacy height sharding, the ND spec kept
    assert pools["pool"]["layout"] == "TensorMemoryLayout.ND_SHARDED", pools
    assert pools["small"]["layout"] == "TensorMemoryLayout.HEIGHT_SHARDED", pools
    for name, p in pools.items():
        assert p["shape"][2] == 16 and p["padded"][2] == 32, (name, p)  # one padded tile row per (block, head)
        assert p["nd_spec"] and p["bank_local"], (name, p)
        assert p["trip"] == [True, p["shape"], True, p["shape"], True], (name, p)
    for name in ("update", "fill", "rotary"):
        w = res[name]
        assert w["moves"][1] == {}, (name, w)  # the cached second step: no host <-> device move
        assert w["entries"][0] == w["entries"][1], (name, w)  # the second step: no new program-cache entry
    assert res["update"]["moves"][0] == res["fill"]["moves"][0] == {}, res  # (rotary: its constants uploaded once)
    assert res["update"]["kept"] and res["fill"]["kept"] and res["rotary"]["kept"] == [1, 2, 8, 64], res
    assert res["steps"] == [1, 1, 1], res["steps"]
    assert res["layouts"] == ["key_row"], res["layouts"]  # every writer addresses the pool's key-row pages
    assert res["defines"] == ["FILL_BLOCKS"], res["defines"]  # the fill's block-16 code built (JIT log above)
