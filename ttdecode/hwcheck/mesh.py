"""The hardware check's mesh kinds (`kinds.Mesh`): context-parallel decode over a mesh of chips
(``ttdecode.context_parallel_decode(..., backend="device")``: FlashDecode on every shard of the sequence, the
partials merged with ttnn's all_gather and our combine program), checked against the float64 reference.

They run after the single-chip items: the worker closes its device and opens the mesh (FABRIC_1D, as ttnn's
CCL ops need). A system with fewer chips than a kind needs refuses it by name (status ``refused``, which is no
failure). On the mock the mesh opens but the mesh path launches on a chip only: the entry is ``mock`` and
says so.
"""

from __future__ import annotations

import math
import time
import zlib
from typing import Any, Optional

import torch

from ttdecode.core.formats import DataType
from ttdecode.core.tensor import from_torch, to_torch
from ttdecode.distributed.context import context_parallel_decode
from ttdecode.hwcheck.check import MOCK, metrics, passes
from ttdecode.hwcheck.kinds import Kind, Mesh
from ttdecode.reference import sdpa_decode_reference
from ttdecode.testing.mock import open_mock_mesh

__all__ = ["refusal", "check_mesh_kind"]


def refusal(p: Mesh, available: int) -> Optional[str]:
    """Why a system with `available` chips cannot run `p` (None: it can)."""
    if available >= p.devices:
        return None
    return (f"refused: needs a mesh of {p.devices} chips ({p.mesh[0]}x{p.mesh[1]}, a T3K); this system has "
            f"{available}")


def _open(ttnn: Any, shape: tuple[int, int], mock: Optional[str]) -> Any:
    if mock:
        return open_mock_mesh(shape, system=mock, fabric=True)
    ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    return ttnn.open_mesh_device(ttnn.MeshShape(*shape))


def _close(ttnn: Any, mesh: Any) -> None:
    ttnn.close_mesh_device(mesh)
    ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)


def check_mesh_kind(kind: Kind, ttnn: Any, mock: Optional[str], available: int) -> dict[str, Any]:
    """Run and judge one mesh kind on a mesh the system opens, or refuse it by name; the report's entry
    (``report.json.schema``: program)."""
    p = kind.params
    assert isinstance(p, Mesh)
    entry: dict[str, Any] = {"name": kind.name, "family": kind.family, "config": kind.config(), "calls": [],
                             "ttnn_op": None}
    why = refusal(p, available)
    if why:
        return {**entry, "status": "refused", "error": why, "seconds": 0.0}
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(zlib.crc32(kind.name.encode()))
    dtype = DataType(p.kv_dtype)
    q = torch.randn(1, p.b, p.nh, p.d, generator=g).bfloat16().float()
    k = from_torch(torch.randn(p.b, p.nkv, p.s, p.d, generator=g), dtype)
    v = from_torch(torch.randn(p.b, p.nkv, p.s, p.d, generator=g), dtype)
    scale = 1.0 / math.sqrt(p.d)
    ref = sdpa_decode_reference(q.double(), to_torch(k).double(), to_torch(v).double(), cur_pos=list(p.pos),
                                scale=scale)
    mesh = _open(ttnn, p.mesh, mock)
    try:
        out = context_parallel_decode(q, k, v, cur_pos=list(p.pos), devices=mesh, backend="device",
                                      combine=p.combine, scale=scale)
        got = ttnn.to_torch(ttnn.get_device_tensors(out)[0]).float().reshape(ref.shape)
    except RuntimeError as exc:
        if not mock:
            raise
        return {**entry, "status": "mock", "error": None, "seconds": round(time.perf_counter() - t0, 3),
                "verdict": f"{MOCK}: the mesh opened; the mesh path launches on a chip only ({str(exc)[:200]})"}
    finally:
        _close(ttnn, mesh)
    m = metrics({"out": got}, {"out": ref})
    ok = passes(m)
    entry["calls"] = [{"call": 1, "path": "none", "host_seconds": round(time.perf_counter() - t0, 4), "metrics": m}]
    return {**entry, "status": "pass" if ok else "fail", "error": None, "seconds": round(time.perf_counter() - t0, 3),
            "verdict": "the merged output meets the bar" if ok else "the merged output misses the bar"}
