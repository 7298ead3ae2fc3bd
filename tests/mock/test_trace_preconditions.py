"""The preconditions of capturing ttdecode's FlashDecode in a trace, witnessed by ttnn's own graph
capture (`ttdecode.testing.step_graph`) on a mock N150: after two warm-up calls, a cached call issues
only program-cache hits, moves no data between host and device, and allocates exactly one device buffer,
the output (bfloat16 tiles: 2048 B a 32x32 tile, its padded shape). Trace capture itself crashes on the
mock (REFERENCE.md section 5); a Wormhole user's traced loop is in the README."""

from __future__ import annotations

import pytest

STEP = r"""
import torch
import ttnn
import ttdecode
from ttdecode.testing.dry_run import emit
from ttdecode.testing.step_graph import capture_step
from ttdecode.testing.mock import open_mock_device

d = open_mock_device()
B, NH, NKV, D, BLOCK, BLOCKS = 4, 32, 8, 128, 64, 64
tile = dict(layout=ttnn.TILE_LAYOUT, device=d)
ints = dict(dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
q = ttnn.from_torch(torch.randn(1, B, NH, D), dtype=ttnn.bfloat16, **tile)
pos = ttnn.from_torch(torch.tensor([0, 70, 1000, -1], dtype=torch.int32), **ints)
if PAGED:
    k = ttnn.from_torch(torch.randn(BLOCKS, NKV, BLOCK, D), dtype=ttnn.bfloat8_b, **tile)
    v = ttnn.from_torch(torch.randn(BLOCKS, NKV, BLOCK, D), dtype=ttnn.bfloat8_b, **tile)
    table = ttnn.from_torch(torch.randperm(BLOCKS, dtype=torch.int32).reshape(B, -1), **ints)
    def attend():
        return ttdecode.paged_scaled_dot_product_attention_decode(
            q, k, v, page_table_tensor=table, cur_pos_tensor=pos, backend="device")
else:
    k = ttnn.from_torch(torch.randn(B, NKV, 1024, D), dtype=ttnn.bfloat8_b, **tile)
    v = ttnn.from_torch(torch.randn(B, NKV, 1024, D), dtype=ttnn.bfloat8_b, **tile)
    def attend():
        return ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos_tensor=pos, backend="device")

for _ in range(2):
    ttnn.deallocate(attend())
step = capture_step(attend)
out = step.result
res = step.to_json()
res["padded_shape"] = list(out.padded_shape)
res["dtype"] = str(out.dtype)
emit(res)
ttnn.close_device(d)
"""


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_a_cached_decode_call_is_trace_ready_as_ttnn_records_it(run_mock, paged: bool) -> None:
    r = run_mock(f"PAGED = {paged}\n" + STEP, timeout=300)
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["moves"] == [], f"host<->device moves in a cached call: {res['moves']}"
    assert res["device_ops"] and all(hit for _, hit in res["device_ops"]), res["device_ops"]
    assert res["dtype"] == "DataType.BFLOAT16"
    t, b, nh, dv = res["padded_shape"]
    out_bytes = t * b * (nh // 32) * (dv // 32) * 2048          # bfloat16 tiles, 2048 B each
    assert [tuple(a) for a in res["allocations"]] == [("DRAM", out_bytes)], res["allocations"]
    assert res["deallocations"] == [], res["deallocations"]
