"""The hardware check's worker process: opens the device, runs the items its plan names and prints one
event line per step (`EVENT` then JSON) so the watchdog (``ttdecode.hwcheck.runner``) can name what was
running when it fires.

    python -m ttdecode.hwcheck.worker PLAN_JSON

The plan: ``{"mock": system or null, "kinds": [names], "timing": [names], "readme_loop": bool,
"replays": int, "calls": int}``. Events: ``device`` (what was opened), ``start`` (section and name, the
configuration), ``done`` (the report entry), ``end``. The mock's environment must be set before this
process starts (the runner does).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
import traceback
from typing import Any, Callable

from ttdecode.hwcheck.check import MOCK, check_kind
from ttdecode.hwcheck.kinds import KINDS, TIMING_POINTS, Mesh
from ttdecode.hwcheck.mesh import check_mesh_kind
from ttdecode.hwcheck.readme_loop import readme_traced_loop
from ttdecode.hwcheck.timing import profiler_on, time_point
from ttdecode.testing.mock import open_mock_device
from ttdecode.ttnn_env import require_ttnn

__all__ = ["EVENT", "TRACE_REGION_BYTES", "emit", "main"]

#: The prefix of an event line.
EVENT = "HWCHECK_EVENT "
#: The device's trace region: the README loop's 8 MiB and the largest timing point's trace.
TRACE_REGION_BYTES = 32 << 20


def emit(event: str, **fields: Any) -> None:
    """One event line on stdout, flushed (the watchdog reads it at once)."""
    sys.stdout.write(EVENT + json.dumps({"event": event, **fields}, default=str) + "\n")
    sys.stdout.flush()


def _open(ttnn: Any, mock: str | None) -> Any:
    if mock:
        return open_mock_device(mock, trace_region_size=TRACE_REGION_BYTES)
    return ttnn.open_device(device_id=0, trace_region_size=TRACE_REGION_BYTES)


def _ttnn_version() -> str:
    try:
        return importlib.metadata.version("ttnn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (no ttnn distribution metadata)"


def _device_info(ttnn: Any, device: Any, mock: str | None) -> dict[str, Any]:
    grid = device.compute_with_storage_grid_size()
    return {"mock": mock, "arch": str(device.arch()), "grid": [grid.x, grid.y],
            "devices": int(ttnn.GetNumAvailableDevices()), "ttnn_version": _ttnn_version(),
            "profiler": profiler_on()}


def _guarded(section: str, name: str, described: Any, run: Callable[[], dict[str, Any]], **known: Any) -> None:
    """Announce, run and report one item; an exception becomes the entry's error, with the `known` fields
    (the next item runs)."""
    emit("start", section=section, name=name, config=described)
    t0 = time.perf_counter()
    try:
        entry = run()
    except Exception as exc:
        entry = {"name": name, **known, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000],
                 "traceback": traceback.format_exc()[-4000:], "seconds": round(time.perf_counter() - t0, 3)}
    emit("done", section=section, name=name, entry=entry)


def _readme_entry(ttnn: Any, device: Any, mock: str | None) -> dict[str, Any]:
    if mock:
        return {"name": "readme_loop", "status": "mock", "seconds": MOCK,
                "note": "not run: trace capture crashes on the mock"}
    t0 = time.perf_counter()
    readme_traced_loop(ttnn, device)
    return {"name": "readme_loop", "status": "pass", "seconds": round(time.perf_counter() - t0, 4)}


def run(plan: dict[str, Any]) -> int:
    """Open the device and run the plan's items (module doc); 0 once every item reported."""
    ttnn = require_ttnn()
    mock = plan.get("mock")
    device = _open(ttnn, mock)
    info = _device_info(ttnn, device, mock)
    emit("device", info=info)
    kinds = {k.name: k for k in KINDS}
    points = {p.name: p for p in TIMING_POINTS}
    meshed = [n for n in plan["kinds"] if isinstance(kinds[n].params, Mesh)]  # after the rest, on a mesh
    for name in [n for n in plan["kinds"] if n not in meshed]:
        kind = kinds[name]
        _guarded("programs", name, kind.config(),
                 lambda: check_kind(kind, ttnn, device, bool(mock), plan.get("calls", 3)),
                 family=kind.family, config=kind.config())
    for name in plan["timing"]:
        _guarded("timing", name, points[name].label,
                 lambda: time_point(points[name], ttnn, device, bool(mock), plan.get("replays", 200)))
    if plan.get("readme_loop"):
        _guarded("readme_loop", "readme_loop", "README.md: the traced decode loop",
                 lambda: _readme_entry(ttnn, device, mock))
    ttnn.close_device(device)
    for name in meshed:
        kind = kinds[name]
        _guarded("programs", name, kind.config(), lambda: check_mesh_kind(kind, ttnn, mock, info["devices"]),
                 family=kind.family, config=kind.config())
    emit("end")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run(json.loads(args[0]))


if __name__ == "__main__":
    sys.exit(main())
