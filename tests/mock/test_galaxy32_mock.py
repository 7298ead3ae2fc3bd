"""A whole Wormhole Galaxy on the mock (ttnn 0.81.1, ``ttdecode.testing.mock`` system "galaxy32"): 32
unharvested ubb chips with the 6U ethernet wiring open as a 4 x 8 and as an 8 x 4 ``ttnn.MeshDevice``
(WORKER dispatch: 8 x 9 worker grids), ttnn's cluster type GALAXY, chips 0-31. Opened without the
fabric: with FABRIC_1D the first open builds some 120 ERISC router variants through the stand-in
compiler, too many for `make test`; the opt-in tools/galaxy_tp_cp.py runs the TP x CP Llama on the
4 x 8 mesh (all_gather and all_reduce along both axes) against galaxy32's kept cache."""

from __future__ import annotations

GALAXY32 = r"""
import ttnn
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_mesh

res = {"meshes": []}
for shape in ((4, 8), (8, 4)):
    d = open_mock_mesh(shape, system="galaxy32")
    res["cluster"] = str(ttnn.cluster.get_cluster_type())
    g = d.compute_with_storage_grid_size()
    res["meshes"].append({"shape": [d.shape[i] for i in range(d.shape.dims())], "devices": d.get_num_devices(),
                          "grid": [g.x, g.y],
                          "ids": sorted(d.get_device_ids())})
    ttnn.close_mesh_device(d)
emit(res)
"""


def test_a_whole_galaxy_opens_as_4x8_and_8x4_meshes_on_the_mock(run_mock) -> None:
    r = run_mock(GALAXY32, timeout=300, system="galaxy32")
    assert r.returncode == 0 and r.result is not None, r.describe()
    res = r.result
    assert res["cluster"] == "ClusterType.GALAXY", res
    assert [m["shape"] for m in res["meshes"]] == [[4, 8], [8, 4]]
    for m in res["meshes"]:
        assert m["devices"] == 32 and m["grid"] == [8, 9] and m["ids"] == list(range(32)), m
