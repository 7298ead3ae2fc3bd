"""The bank-local paged FlashDecode over a pool of 16-position blocks (kv_pages "key_row", block_size 16) through
ttnn on a mock N150. The pool [num_blocks, NKV, 16, D] is made in ttnn's interleaved tile pages and moved into
ttdecode.ttnn_backend.key_row_memory_config ([1, 1, 32, D] ND shards: one padded key-tile row a shard, in bank
(block * NKV + h) % 12) with ttnn.to_memory_config, and back: ttnn takes the shard spec on the padded shape both
ways (the mock runs no device op, to_memory_config included, so the moved pages hold no values to compare here). A planned step on it is accepted by tt-metal, the JIT compiles its three kernels
with the block-16 reader (HALF_TILE_BLOCKS; GCC 12 too), and the steps after the first move nothing between host
and device and, from the second on, add no program-cache entry. The mock computes nothing (the numbers are
checked on the host runtime: tests/test_flash_decode_bank_paged16.py)."""

from __future__ import annotations

from tests.mock.test_bank_local_paged import check_steps

STEPS16 = r"""
from pathlib import Path
import torch
import ttnn
from ttdecode import SDPAProgramConfig
from ttdecode.ops.flash_decode.device_step import plan_decode
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import decode_steps
from ttdecode.ttnn_backend import dram_banks, is_key_row_memory_config, key_row_memory_config

d = open_mock_device()
B, NH, NKV, D, BLOCK, S = 4, 32, 8, 128, 16, 1024
blocks = B * S // BLOCK
tile = dict(layout=ttnn.TILE_LAYOUT, device=d)
ints = dict(dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
res = {}


def key_row_pool(dtype):
    # a tile-page pool moved into the key-row layout (what ttdecode.to_bank_local does on a device)
    host = torch.randn(blocks, NKV, BLOCK, D)
    tiles = ttnn.from_torch(host, dtype=dtype, memory_config=ttnn.DRAM_MEMORY_CONFIG, **tile)
    rows = ttnn.to_memory_config(tiles, key_row_memory_config(ttnn, d, D))
    back = ttnn.to_memory_config(rows, ttnn.DRAM_MEMORY_CONFIG)
    res["round_trip"] = [list(back.shape), ttnn.is_tensor_storage_on_device(back), back.memory_config().is_sharded()]
    res["shape"], res["padded_shape"] = list(rows.shape), list(rows.padded_shape)
    res["is_key_row"] = is_key_row_memory_config(rows.memory_config(), key_row_memory_config(ttnn, d, D))
    ttnn.deallocate(tiles)
    ttnn.deallocate(back)
    return rows


k = key_row_pool(ttnn.bfloat8_b)
v = key_row_pool(ttnn.bfloat8_b)
q = ttnn.from_torch(torch.randn(1, B, NH, D), dtype=ttnn.bfloat16, **tile)
table = ttnn.from_torch(torch.randperm(blocks, dtype=torch.int32).reshape(B, -1), **ints)
pos = ttnn.from_torch(torch.tensor([0, 15, 16, 1000], dtype=torch.int32), **ints)
pc = SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), k_chunk_size=0, kv_pages="key_row")
step = plan_decode(q, k, v, DecodeOptions(paged=True, page_table=table, cur_pos_tensor=pos, program_config=pc))
moves, entries, pos = decode_steps(ttnn, d, step, q, k, v, pos, table)
res.update({"moves": moves, "entries": entries, "bank_local": step.plan.bank_local,
            "block_size": step.plan.block_size, "dram_banks": step.plan.dram_banks, "device_banks": dram_banks(d),
            "pieces": step.plan.pieces_per_work, "spread_banks": step.plan.spread_banks,
            "kernels": [{"name": kk.name, "source": str(Path(kk.source).resolve()), "kind": kk.kind.value}
                        for kk in step.program.kernels],
            "defines": sorted(key for kk in step.program.kernels for key in kk.defines),
            "layouts": sorted({t.layout for t in step.program.tensors if t.name in ("k", "v")})})
for t in (q, k, v, table, pos):
    ttnn.deallocate(t)
emit(res)
ttnn.close_device(d)
"""


def test_block16_key_row_pool_steps_on_a_mock_n150(run_mock, mock_run) -> None:
    r = run_mock(STEPS16, timeout=420)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    # ttnn takes the key-row shard spec on the padded pool (one padded tile row a shard), and the round trip
    # tile -> key_row -> tile keeps every value
    assert res["shape"] == [256, 8, 16, 128] and res["padded_shape"] == [256, 8, 32, 128]
    assert res["is_key_row"] and res["round_trip"] == [[256, 8, 16, 128], True, False]
    assert res["block_size"] == 16
    assert res["defines"] == ["HALF_TILE_BLOCKS"], res["defines"]
    check_steps(res, mock_run["jit_log"])
