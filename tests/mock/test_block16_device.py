"""Paged pools of 16-position blocks (block_size 16) on a mock N150 through the real ttnn: what ttnn 0.81.1's own
paged_update_cache / paged_fill_cache / paged SDPA decode accept for such a pool, and ttdecode's device path on the
same pool (paged_update_cache, paged_fill_cache, rotary_kv_append, FlashDecode): ttnn accepts each program and the
JIT compiles every kernel with its block-16 code. The mock computes nothing: acceptance and shapes are checked,
the bytes on the host runtime (tests/test_block16_writers.py, tests/test_flash_decode_block16.py)."""

from __future__ import annotations

from ttdecode.testing.dry_run import check_jit, jit_records

BLOCK16 = r"""
import torch
import ttnn
import ttdecode
from ttdecode.ops.flash_decode import device_steps as fds
from ttdecode.ops.paged_fill import device_step as fd
from ttdecode.ops.paged_update import device_step as ud
from ttdecode.ops.rotary_append import device_step as rd
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device

B, NH, NKV, D, BLOCK, MAX_BLOCKS = 2, 8, 2, 64, 16, 8
d = open_mock_device()
def dev(x, dt=ttnn.bfloat16):
    return ttnn.from_torch(x, dtype=dt, layout=ttnn.TILE_LAYOUT, device=d)
def ints(x):
    return ttnn.from_torch(torch.tensor(x, dtype=torch.int32), dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
res = {{}}
def attempt(name, fn):
    try:
        out = fn()
        res[name] = ["ok", list(out.shape) if hasattr(out, "shape") else None]
    except Exception as e:
        res[name] = ["err", str(e).splitlines()[0][:300]]
host_table = torch.randperm(B * MAX_BLOCKS, generator=torch.Generator().manual_seed(1)).view(B, MAX_BLOCKS).int()
table = ints(host_table.tolist())
pos = ints([20, 100])
k_pool = dev(torch.randn(B * MAX_BLOCKS, NKV, BLOCK, D), ttnn.{dtype})
v_pool = dev(torch.randn(B * MAX_BLOCKS, NKV, BLOCK, D), ttnn.{dtype})
res["pool_padded_shape"] = list(k_pool.padded_shape)
rows = dev(torch.randn(1, B, NKV, D))
prompt = dev(torch.randn(1, NKV, 40, D), ttnn.{dtype})
grid = ttnn.num_cores_to_corerangeset(B, d.compute_with_storage_grid_size(), row_wise=True)
sharded = ttnn.to_memory_config(rows, ttnn.create_sharded_memory_config(  # the input ttnn's op wants
    shape=(32, D), core_grid=grid, strategy=ttnn.ShardStrategy.HEIGHT, orientation=ttnn.ShardOrientation.ROW_MAJOR,
    use_height_and_width_as_shard_shape=True))
attempt("update/ttnn", lambda: ttnn.experimental.paged_update_cache(k_pool, sharded, update_idxs_tensor=pos,
                                                                    page_table=table))
attempt("fill/ttnn", lambda: ttnn.experimental.paged_fill_cache(k_pool, prompt, table, batch_idx=1))
q = dev(torch.randn(1, B, NH, D))
pc = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=ttnn.CoreCoord(8, 8), q_chunk_size=0, k_chunk_size=0)
attempt("sdpa/ttnn", lambda: ttnn.transformer.paged_scaled_dot_product_attention_decode(
    q, k_pool, v_pool, page_table_tensor=table, cur_pos_tensor=pos, program_config=pc))
attempt("update/ours", lambda: ttdecode.paged_update_cache(k_pool, rows, update_idxs_tensor=pos, page_table=table,
                                                           backend="device"))
attempt("fill/ours", lambda: ttdecode.paged_fill_cache(k_pool, prompt, table, batch_idx=1, backend="device"))
cos, sin = torch.ones(B, D), torch.zeros(B, D)
attempt("rotary/ours", lambda: ttdecode.rotary_kv_append(rows, rows, k_pool, v_pool, cur_pos=[20, 100], cos=cos,
                                                         sin=sin, page_table=host_table, q=q, backend="device")[0])
attempt("sdpa/ours", lambda: ttdecode.paged_scaled_dot_product_attention_decode(
    q, k_pool, v_pool, table, cur_pos_tensor=torch.tensor([20, 100], dtype=torch.int32), backend="device",
    sliding_window_size={window}))
programs = [s.program for s in ud._steps.values()] + [s.program for s in fd._steps.values()]
programs += [s.program for s in rd._steps.values()] + [s.program for s in fds.STEPS.steps()]
res["defines"] = sorted(k for p in programs for kern in p.kernels for k in kern.defines)
res["kernels"] = [{{"name": k.name, "source": str(k.source), "kind": k.kind.value}} for p in programs
                  for k in p.kernels]
emit(res)
ttnn.close_device(d)
"""


def _run(run_mock, tmp_path, dtype: str, window: str) -> dict:
    log = tmp_path / "jit.log"
    r = run_mock(BLOCK16.format(dtype=dtype, window=window), timeout=600, jit_log=str(log), cache=tmp_path / "cache")
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert not check_jit(res["kernels"], jit_records(log)), check_jit(res["kernels"], jit_records(log))
    return res


def test_block16_pool_on_the_mock_ttnn_and_ours(run_mock, tmp_path) -> None:
    res = _run(run_mock, tmp_path, "bfloat8_b", "None")
    assert res["pool_padded_shape"] == [16, 2, 32, 64]  # one padded tile row per (block, KV head)
    for op in ("update", "fill", "rotary", "sdpa"):
        assert res[f"{op}/ours"][0] == "ok", (op, res[f"{op}/ours"])
    assert res["sdpa/ours"] == ["ok", [1, 2, 8, 64]]
    # ttnn's own ops take the same pool
    for op in ("update", "fill"):
        assert res[f"{op}/ttnn"] == ["ok", [16, 2, 16, 64]], (op, res[f"{op}/ttnn"])
    assert res["sdpa/ttnn"] == ["ok", [1, 2, 8, 64]], res["sdpa/ttnn"]
    # the block-16 code of the fill's writer and FlashDecode's reader was built (the JIT log checked above)
    assert res["defines"] == ["FILL_BLOCKS", "HALF_TILE_BLOCKS"], res["defines"]
