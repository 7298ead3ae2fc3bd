"""Dry runs of a `Program` through `ttnn.generic_op` on the mock Wormhole.

`dry_run(program_or_factory)` (in a process whose environment `ttdecode.testing.mock.setup()` made,
before ttnn was imported) allocates the program's inputs on a mock N150 (zeros: the mock's DRAM
holds nothing), launches the program twice through `ttdecode.ttnn_backend.launch` and reports what tt-metal
did: whether it accepted the program (its validation, the JIT build of every kernel, compute included,
through the stand-in compiler), how long each launch took and whether the second launch was a
program-cache hit (`device.num_program_cache_entries()` unchanged).

`run_isolated(code)` runs such a check in its own process, under a timeout, with the mock
environment and a temp cwd (the mock can segfault or hang), and returns the JSON the child printed
with `emit(...)`. `check_jit(program, records)` says which kernels of a program the stand-in
compiler's log (`TTDECODE_JIT_LOG`) does not show compiled, for every RISC-V core they run on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

from ttdecode.core.program_description import KernelKind, Program
from ttdecode.ttnn_backend.tensors import key_row_memory_config, tensor_dtype
from ttdecode.ttnn_backend.launching import launch
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.mock import run_script

#: Prefix of the line a child process prints its result on.
RESULT_MARK = "TTDECODE_MOCK_RESULT:"

#: The RISC-V builds each kernel kind needs (the JIT: reader on NCRISC, writer on BRISC, compute
#: on the three TRISCs: unpack, math, pack).
PROCESSORS: dict[KernelKind, tuple[str, ...]] = {
    KernelKind.READER: ("ncrisc",),
    KernelKind.WRITER: ("brisc",),
    KernelKind.COMPUTE: ("trisc0", "trisc1", "trisc2"),
}
#: Stand-in compiler results that mean "compiled": an object (data movement) or LLVM IR then a
#: stub object (compute: the SFPU has no clang backend).
COMPILED = ("object", "ir+stub")


@dataclass
class DryRunReport:
    """What happened to one program on the mock device."""

    kernels: list[dict[str, str]]
    accepted: bool
    error: Optional[str] = None
    launch_seconds: list[float] = field(default_factory=list)
    cache_entries: list[int] = field(default_factory=list)  # before, after launch 1, after launch 2, ...

    @property
    def cache_hit(self) -> bool:
        """The launches after the first added no program-cache entry."""
        return self.accepted and len(self.cache_entries) >= 3 and len(set(self.cache_entries[1:])) == 1

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["cache_hit"] = self.cache_hit
        return d


def _allocate_input(ttnn: Any, spec: Any, device: Any) -> Any:
    if spec.layout == "key_row":
        layout, mem = ttnn.TILE_LAYOUT, key_row_memory_config(ttnn, device, spec.shape[-1])
    elif spec.layout == "row_major":
        layout, mem = ttnn.ROW_MAJOR_LAYOUT, ttnn.DRAM_MEMORY_CONFIG
    else:
        layout, mem = ttnn.TILE_LAYOUT, ttnn.DRAM_MEMORY_CONFIG
    return ttnn.allocate_tensor_on_device(ttnn.Shape(list(spec.shape)), tensor_dtype(ttnn, spec), layout, device, mem)


def dry_run(program: Union[Program, Callable[[], Program]], device: Any = None, launches: int = 2) -> DryRunReport:
    """Launch `program` `launches` times on `device` (default: a mock N150 opened and closed here)
    through `ttdecode.ttnn_backend.launch`; the report says whether tt-metal accepted it, the launch times
    and the program-cache entry counts."""
    import ttnn

    prog = program() if callable(program) else program
    if not isinstance(prog, Program):
        raise TypeError(f"dry_run: expected a Program (or a callable returning one), got {type(prog).__name__}")
    kernels = [{"name": k.name, "source": str(Path(k.source).resolve()), "kind": k.kind.value} for k in prog.kernels]
    own = device is None
    if own:
        device = open_mock_device()
    report = DryRunReport(kernels=kernels, accepted=False)
    try:
        io = {t.name: _allocate_input(ttnn, t, device) for t in prog.tensors if not t.is_output}
        report.cache_entries.append(int(device.num_program_cache_entries()))
        for _ in range(launches):
            t0 = time.perf_counter()
            launch(prog, io, device)
            report.launch_seconds.append(round(time.perf_counter() - t0, 4))
            report.cache_entries.append(int(device.num_program_cache_entries()))
        report.accepted = True
    except Exception as exc:  # tt-metal's refusal, kept verbatim for the caller
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        if own:
            ttnn.close_device(device)
    return report


def emit(obj: Any) -> None:
    """Print `obj` as the child's result line (read back by `run_isolated`)."""
    if hasattr(obj, "to_json"):
        obj = obj.to_json()
    sys.stdout.write(RESULT_MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


@dataclass
class IsolatedResult:
    returncode: int
    result: Optional[Any]
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        tail = "\n".join(self.stderr.strip().splitlines()[-40:])
        return f"child exit {self.returncode} after {self.seconds:.1f} s; stderr tail:\n{tail}"


def run_isolated(code: str, system: str = "n150", timeout: float = 300, jit_log: Optional[str] = None,
                 env: Optional[dict[str, str]] = None) -> IsolatedResult:
    """Run Python `code` in a fresh process on the mock (`system`), in a temp cwd, killed after
    `timeout` s (raises subprocess.TimeoutExpired). The code imports ttnn itself (the environment
    is set before it starts) and reports with `emit(...)`."""
    t0 = time.perf_counter()
    proc = run_script(["-c", code], system=system, timeout=timeout, jit_log=jit_log, env=env)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
    return IsolatedResult(proc.returncode, result, proc.stdout, proc.stderr, time.perf_counter() - t0)


def jit_records(log: Union[str, os.PathLike]) -> list[dict[str, Any]]:
    """The stand-in compiler's log (one JSON object per call)."""
    path = Path(log)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_jit(kernels: Iterable[dict[str, str]], records: list[dict[str, Any]]) -> list[str]:
    """Problems with the JIT build of `kernels` (DryRunReport.kernels) as the log shows it: a kernel
    source with no successful compile for one of the RISC-V cores of its kind, or with a failed one.
    (A kernel the JIT found in its cache was compiled earlier in the same cache's life: the log of
    the whole run is needed.)"""
    problems = []
    for k in kernels:
        src = os.path.realpath(k["source"])
        mine = [r for r in records if r.get("step") == "compile"
                and any(os.path.realpath(s) == src for s in r.get("kernels") or [])]
        for r in mine:
            if r.get("result") not in COMPILED:
                problems.append(f"kernel {k['name']} ({src}) on {r.get('processor')}: {r.get('result')}: "
                                f"{(r.get('stderr') or '')[-2000:]}")
        for proc in PROCESSORS[KernelKind(k["kind"])]:
            if not any(r.get("processor") == proc and r.get("result") in COMPILED for r in mine):
                problems.append(f"kernel {k['name']} ({src}): no successful {proc} compile in the JIT log")
    return problems
