"""The hardware check's watchdog: runs the worker (``ttdecode.hwcheck.worker``) in its own process and
reads its events; when one item runs past its time it kills the worker and names the item and its
configuration in the report.

Two guards: tt-metal's own operation timeout (``TT_METAL_OPERATION_TIMEOUT_SECONDS``, read by ttnn
0.81.1: a launch that does not complete in time raises inside the worker, and the item's entry carries the
error; set on a chip only, the mock waits on no device) and this watchdog (`Guard.item_seconds` per item, the device's open and the first JIT builds
included), for a hang the first does not catch. After a hang the board may need a reset (``tt-smi -r``)
before the next run; the items not reached are listed as ``not run``.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Optional

from ttdecode.hwcheck.timing import PROFILER_ENV
from ttdecode.hwcheck.worker import EVENT
from ttdecode.testing.mock import mock_env, mock_home

__all__ = ["Guard", "OPERATION_TIMEOUT_ENV", "WATCHER_ENV", "run_worker"]

#: tt-metal's operation timeout (seconds; a launch waited on longer raises).
OPERATION_TIMEOUT_ENV = "TT_METAL_OPERATION_TIMEOUT_SECONDS"
#: tt-metal's watcher (its polling interval in seconds).
WATCHER_ENV = "TT_METAL_WATCHER"


@dataclass(frozen=True)
class Guard:
    """item_seconds: the watchdog's limit per item; operation_seconds: tt-metal's operation timeout;
    watcher: run tt-metal's watcher (interval in seconds, 0: off); profiler: turn on the device profiler."""

    item_seconds: float = 900.0
    operation_seconds: int = 60
    watcher: int = 0
    profiler: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"watchdog_seconds_per_item": self.item_seconds, "operation_timeout_seconds": self.operation_seconds,
                "operation_timeout_env": OPERATION_TIMEOUT_ENV, "watcher_seconds": self.watcher,
                "profiler": self.profiler}


def worker_env(plan: dict[str, Any], guard: Guard) -> dict[str, str]:
    """The worker's environment: the mock's (when the plan names a mock system), the guards', the repository
    on PYTHONPATH."""
    env = dict(os.environ)
    if plan.get("mock"):
        env.update(mock_env(plan["mock"]))
    else:
        env[OPERATION_TIMEOUT_ENV] = str(guard.operation_seconds)
    if guard.watcher:
        env[WATCHER_ENV] = str(guard.watcher)
    if guard.profiler:
        env.update(PROFILER_ENV)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _items(plan: dict[str, Any]) -> list[tuple[str, str]]:
    items = [("programs", n) for n in plan["kinds"]] + [("timing", n) for n in plan["timing"]]
    return items + ([("readme_loop", "readme_loop")] if plan.get("readme_loop") else [])


class _Lines:
    """The worker's stdout as lines, each read waiting at most a deadline."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.buf = stream, b""

    def next(self, deadline: float) -> Optional[str]:
        """The next line; "" at end of stream; None when the deadline passes first."""
        fd = self.stream.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                line, self.buf = self.buf, b""
                return line.decode(errors="replace")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace") + "\n"


def run_worker(plan: dict[str, Any], guard: Guard, log: Any = None, worker: Optional[list[str]] = None
               ) -> dict[str, Any]:
    """Run the plan under the watchdog (`worker`: the worker's command before the plan, default
    ``python -m ttdecode.hwcheck.worker``; `log`: a stream for one line per item started). Returns ``device`` (the worker's device event or None), ``entries``
    ({section: [entries]}), ``hang`` (None, or the item, its configuration and the limit), ``crash`` (None,
    or the item the worker died in: a segfault, an abort), ``not_run``, ``exit`` (the worker's exit code, or
    "killed") and ``stderr_tail``."""
    cwd = tempfile.mkdtemp(prefix="hwcheck-", dir=str(mock_home()) if plan.get("mock") else None)
    err = tempfile.TemporaryFile()
    argv = (worker or [sys.executable, "-m", "ttdecode.hwcheck.worker"]) + [json.dumps(plan)]
    proc = subprocess.Popen(argv, cwd=cwd,
                            env=worker_env(plan, guard), stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    out: dict[str, Any] = {"device": None, "entries": {"programs": [], "timing": [], "readme_loop": []}, "hang": None}
    lines, current = _Lines(proc.stdout), {"section": "device", "name": "open", "config": "the device's open"}
    done = set()
    try:
        while True:
            line = lines.next(time.monotonic() + guard.item_seconds)
            if line is None:
                out["hang"] = {**current, "seconds": guard.item_seconds}
                os.killpg(proc.pid, 9)
                break
            if line == "":
                break
            if not line.startswith(EVENT):
                continue
            ev = json.loads(line[len(EVENT):])
            if ev["event"] == "device":
                out["device"] = ev["info"]
            elif ev["event"] == "start":
                current = {k: ev[k] for k in ("section", "name", "config")}
                if log:
                    print(f"  {ev['section']}: {ev['name']} ...", file=log, flush=True)
            elif ev["event"] == "done":
                out["entries"][ev["section"]].append(ev["entry"])
                done.add((ev["section"], ev["name"]))
    finally:
        code = proc.wait()
        err.seek(0)
        out["stderr_tail"] = err.read().decode(errors="replace")[-4000:]
        err.close()
        shutil.rmtree(cwd, ignore_errors=True)
    out["exit"] = "killed" if out["hang"] else code
    started = (current["section"], current["name"])
    out["crash"] = (None if out["hang"] or code == 0 or started in done
                    else {**current, "error": f"the worker process died (exit {code}) while running it"})
    stopped = out["hang"] or out["crash"]
    out["not_run"] = [{"section": s, "name": n} for s, n in _items(plan) if (s, n) not in done
                      and not (stopped and (stopped["section"], stopped["name"]) == (s, n))]
    return out
