"""Device time of our FlashDecode and of ttnn's op at the timing points (``kinds.TIMING_POINTS``).

Each call is captured once in a trace and the trace replayed `replays` times back to back; the time is the
wall time of the replays (one synchronize at the end) over their count, in microseconds: with no host work
between replays the device is the bottleneck, so this is the device time per call plus the trace's own
dispatch. When the installed tt-metal has its device profiler and the check runs with ``--profiler``
(``TT_METAL_DEVICE_PROFILER=1`` and the two variables that make ttnn post-process in the run), the
profiler's DEVICE KERNEL DURATION is reported too: the median over `PROFILED_CALLS` untraced calls (the
profiler's buffer holds a bounded number of programs; the kernels' duration does not depend on the trace).

The mock device captures no trace (capture crashes there) and times nothing: each call runs once untraced
(the path is exercised) and every figure is ``check.MOCK``.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable, Optional

import torch

from ttdecode.hwcheck.check import MOCK, short_error
from ttdecode.hwcheck.kinds import TimingPoint
from ttdecode.hwcheck.programs import decode_device_tensors, decode_host_tensors, decode_device_call, ttnn_decode_call

__all__ = ["PROFILER_ENV", "traced_us", "profiler_us", "time_point"]

#: The environment that turns on tt-metal's device profiler with in-run post-processing.
PROFILER_ENV = {"TT_METAL_DEVICE_PROFILER": "1", "TT_METAL_PROFILER_MID_RUN_DUMP": "1",
                "TT_METAL_PROFILER_CPP_POST_PROCESS": "1"}
_DURATION = "DEVICE KERNEL DURATION"
#: Untraced calls the profiler reads per op (a few: its buffer holds a bounded number of programs).
PROFILED_CALLS = 8


def traced_us(ttnn: Any, device: Any, call: Callable[[], Any], replays: int) -> float:
    """Microseconds per replay of a trace of one `call` (warmed up first: plan, program, JIT)."""
    ttnn.deallocate(call())
    tid = ttnn.begin_trace_capture(device, cq_id=0)
    out = call()  # kept alive while the trace lives
    ttnn.end_trace_capture(device, tid, cq_id=0)
    ttnn.execute_trace(device, tid, cq_id=0, blocking=True)
    t0 = time.perf_counter()
    for _ in range(replays):
        ttnn.execute_trace(device, tid, cq_id=0, blocking=False)
    ttnn.synchronize_device(device)
    seconds = time.perf_counter() - t0
    ttnn.release_trace(device, tid)
    ttnn.deallocate(out)
    return seconds / replays * 1e6


def profiler_on() -> bool:
    return all(os.environ.get(k) == v for k, v in PROFILER_ENV.items())


def profiler_us(ttnn: Any, device: Any, call: Callable[[], Any], calls: int = PROFILED_CALLS) -> Optional[float]:
    """The median DEVICE KERNEL DURATION (us) over `calls` untraced calls, read from tt-metal's device profiler;
    None when it has none (a build without the device profiler, or ``--profiler`` not given)."""
    if not profiler_on():
        return None
    ttnn.ReadDeviceProfiler(device)  # what ran before is not this op's
    for _ in range(calls):
        ttnn.deallocate(call())
    ttnn.synchronize_device(device)
    ttnn.ReadDeviceProfiler(device)
    found = []
    for programs in ttnn.profiler.get_latest_programs_perf_data().values():
        for prog in programs:
            for key, res in dict(prog.program_analyses_results).items():
                if _DURATION in str(key):
                    found.append(float(res.duration) / 1e3)
    return statistics.median(found) if found else None


def _timed(ttnn: Any, device: Any, call: Optional[Callable[[], Any]], replays: int, mock: bool) -> dict[str, Any]:
    if call is None:
        return {"us_per_call": None, "profiler_us": None, "error": "no such op"}
    try:
        if mock:
            ttnn.deallocate(call())
            return {"us_per_call": MOCK, "profiler_us": MOCK, "error": None}
        us = traced_us(ttnn, device, call, replays)
        return {"us_per_call": us, "profiler_us": profiler_us(ttnn, device, call), "error": None}
    except Exception as exc:  # a refused configuration: named in the report, the next point runs
        return {"us_per_call": None, "profiler_us": None, "error": short_error(exc)}


def time_point(point: TimingPoint, ttnn: Any, device: Any, mock: bool, replays: int) -> dict[str, Any]:
    """The report's timing entry of one point: ours and ttnn's op on the same device tensors."""
    p = point.call
    h = decode_host_tensors(p, torch.Generator().manual_seed(0))
    d = decode_device_tensors(p, h, ttnn, device)
    entry: dict[str, Any] = {"name": point.name, "label": point.label, "config": {
        k: list(v) if isinstance(v, tuple) else v for k, v in vars(p).items()},
        "calibration": list(point.calibration), "replays": replays,
        "ttnn_numerics": {"math_fidelity": point.ttnn_numerics[0], "fp32_dest_acc_en": point.ttnn_numerics[1]}}
    entry["ours"] = _timed(ttnn, device, decode_device_call(p, d), replays, mock)
    # ttnn's op reads its standard pool: tile pages (ours may read key-row pages)
    theirs = decode_device_tensors(p, h, ttnn, device, tile_pages=True) if p.pages == "key_row" else d
    entry["ttnn"] = _timed(ttnn, device, ttnn_decode_call(p, theirs, ttnn, point.ttnn_numerics), replays, mock)
    entry["status"] = "mock" if mock else "error" if entry["ours"]["error"] else "pass"
    for t in list(d.values()) + ([] if theirs is d else list(theirs.values())):
        if t is not None:
            ttnn.deallocate(t)
    return entry
