"""A Galaxy-style unharvested Wormhole chip on the mock (ttnn 0.81.1): one chip of board type ubb (ttnn's
ClusterType.GALAXY), harvest mask 0, opened with ETH dispatch (``ttdecode.testing.mock``, system
"galaxy"), reports the whole 8 x 10 worker grid. ttdecode's FlashDecode (`backend="device"`) plans and
launches on it with an 8 x 10 grid, with tt-metal's Galaxy Llama sub-core grids ``((1, 0), (3, 9))``
and ``((5, 0), (6, 9))``, and with a ttnn.SDPAProgramConfig over rows 0-9; rotary_kv_append deals 80
users over the 8 x 10 grid. The mock computes nothing (no numerics: tests/test_galaxy_grid.py runs the
kernels on row 9 on the host runtime). One chip: the whole 32-chip Galaxy is system "galaxy32"
(tests/mock/test_galaxy32_mock.py)."""

from __future__ import annotations

GALAXY = r"""
import torch
import ttnn
import ttdecode
from ttdecode.config import SDPAProgramConfig
from ttdecode.ops.rotary_append.device_step import angles_to_device
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import count_transfers

d = open_mock_device("galaxy")
g = d.compute_with_storage_grid_size()
res = {"grid": [g.x, g.y], "cluster": str(ttnn.cluster.get_cluster_type()), "shapes": []}
B, NH, NKV, D, S = 8, 8, 1, 128, 2048
put = lambda t, dt, lay=ttnn.TILE_LAYOUT: ttnn.from_torch(t, dtype=dt, layout=lay, device=d)
q = put(torch.randn(1, B, NH, D), ttnn.bfloat16)
k, v = (put(torch.randn(B, NKV, S, D), ttnn.bfloat8_b) for _ in range(2))
pos = put(torch.full((B,), 1000, dtype=torch.int32), ttnn.int32, ttnn.ROW_MAJOR_LAYOUT)
rows09 = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(0, 9)),
                            ttnn.CoreRange(ttnn.CoreCoord(1, 0), ttnn.CoreCoord(3, 9))])
configs = [
    SDPAProgramConfig(compute_with_storage_grid_size=(8, 10)),
    SDPAProgramConfig(compute_with_storage_grid_size=(8, 10), sub_core_grids=[((1, 0), (3, 9)), ((5, 0), (6, 9))]),
    ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(4, 10), q_chunk_size=0, k_chunk_size=0,
                           exp_approx_mode=False, sub_core_grids=rows09),
]
with count_transfers() as log:
    for pc in configs:
        for step in range(3):
            out = ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos_tensor=pos, program_config=pc,
                                                               backend="device")
            res["shapes"].append(list(out.shape))
            ttnn.deallocate(out)
    qkv = put(torch.randn(1, 80, (NH + 2 * NKV) * D), ttnn.bfloat16)
    kc, vc = (put(torch.zeros(80, NKV, 64, D), ttnn.bfloat8_b) for _ in range(2))
    cos, sin = angles_to_device(torch.ones(80, D), torch.zeros(80, D), device=d)
    log.clear()
    for step in range(3):
        q_rot, _, _ = ttdecode.rotary_kv_append(qkv=qkv, k_cache=kc, v_cache=vc, cur_pos=[i % 64 for i in range(80)],
                                                cos=cos, sin=sin, grid=(8, 10), backend="device")
        res["shapes"].append(list(q_rot.shape))
        ttnn.deallocate(q_rot)
    res["rotary_moves"] = log.counts()
try:
    ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos_tensor=pos, backend="device",
                                                 program_config=SDPAProgramConfig(compute_with_storage_grid_size=(8, 11)))
except ValueError as exc:
    res["refused"] = str(exc)
emit(res)
ttnn.close_device(d)
"""


def test_a_galaxy_chip_on_the_mock_reports_8x10_and_runs_rows_0_to_9(run_mock) -> None:
    r = run_mock(GALAXY, timeout=600, system="galaxy")
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["grid"] == [8, 10] and res["cluster"] == "ClusterType.GALAXY", res
    assert res["shapes"] == [[1, 8, 8, 128]] * 9 + [[1, 80, 8, 128]] * 3
    # the rotate-half blocks uploaded once (the step's first call); positions are runtime args
    assert res["rotary_moves"] == {"from_torch": 1}, res["rotary_moves"]
    assert "argument 'program_config.compute_with_storage_grid_size': expected a grid within the device's compute " \
           "grid 8x10 (device.compute_with_storage_grid_size()): at most 8 columns x 10 rows, got (8, 11)" \
           in res["refused"], res["refused"]
