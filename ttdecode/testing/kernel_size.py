"""Kernel image sizes of device programs on the mock Wormhole, ours beside tt-metal's.

What counts: a program's five images on a Tensix core (BRISC, NCRISC, TRISC0-2) share the kernel-config
buffer (`KERNEL_CONFIG_BYTES`, with the runtime args, CB configuration and semaphores); NCRISC runs from
its IRAM (`NCRISC_IRAM_BYTES`).

Where the bytes come from:

* data movement (BRISC, NCRISC): the real images, the loadable bytes (PT_LOAD file sizes) of the ELFs the
  mock JIT linked (clang-19 objects, ld.lld-19, the JIT's own linker scripts);
* compute (TRISC0-2): a proxy. The mock links TRISC builds as stubs (clang has no SFPU backend), so each
  TRISC build of the JIT's log is compiled again by Debian's GCC 12 (`gcc_front_end`: the JIT's own line
  and flags, the stand-in `sfpi.h`) at the JIT's -O3 to assembly; every Tensix instruction the LLK emits
  (`.ttinsn N`, one 32-bit word in the instruction stream) is assembled as a `.word`, the rest by GNU as;
  the proxy is the object's allocated bytes with contents (code, read-only and initialised data). SFPU
  code is missing on both sides (the stand-in `sfpi.h` is empty), the firmware wrapper (`trisck.cc`) is in
  both. Compare ratios against tt-metal's kernels built the same way, not absolutes.

Programs are told apart in the JIT's log by marks: the child process that runs them calls `end_program`
after each one, which appends a mark record naming it and makes the next program build every kernel
again (the JIT's in-memory kernel cache cleared, the device's program cache cleared, the on-disk build
directories moved aside: the mark records where, and `programs` maps the log's paths there).
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ttdecode.testing import gcc_front_end as gfe

#: NCRISC kernels run from its instruction RAM (wormhole dev_mem_map.h MEM_NCRISC_KERNEL_SIZE), bytes.
NCRISC_IRAM_BYTES = 16_384
#: tt-metal's default kernel-config buffer per core (69 KiB): the program's images, runtime args, CB
#: configuration and semaphores, bytes.
KERNEL_CONFIG_BYTES = 70_656
#: The goals against tt-metal's own kernel: our compute total at most this ratio ...
TOTAL_RATIO_GOAL = 1.0
#: ... and no TRISC image above this ratio.
TRISC_RATIO_GOAL = 1.2

TRISCS = ("trisc0", "trisc1", "trisc2")
DATA_MOVEMENT = ("brisc", "ncrisc")
PROCESSORS = DATA_MOVEMENT + TRISCS
MARK_STEP = "program_mark"
GNU_AS = "riscv64-linux-gnu-as"

_TTINSN = re.compile(r"^(\s*)\.ttinsn\b", re.M)


@dataclass
class ProgramImages:
    """One program's kernel images: `bytes[processor]` (the largest where several kernels of the program
    run on one processor kind) and where each came from (`origins[processor]`: a TRISC build's kernel
    sources, a linked ELF's build directory)."""

    label: str
    bytes: dict[str, int] = field(default_factory=dict)
    origins: dict[str, list[str]] = field(default_factory=dict)

    @property
    def compute(self) -> int:
        """T0 + T1 + T2 proxy bytes."""
        return sum(self.bytes.get(p, 0) for p in TRISCS)

    @property
    def total(self) -> int:
        """All five images (data movement real, compute proxy), bytes."""
        return sum(self.bytes.get(p, 0) for p in PROCESSORS)


# ---- the child's side: marks ------------------------------------------------------------------------


def end_program(label: str, ttnn: Any, device: Any, log: str | os.PathLike, cache: str | os.PathLike) -> None:
    """Close the program `label` in the JIT log `log` (every record since the previous mark is its) and
    make the next program build all its kernels again: the device's program cache and the JIT's kernel
    cache cleared, the build directories under `cache` (TT_METAL_CACHE) moved to `kernels@<n>`."""
    n = sum(1 for r in gfe.read_log(log) if r.get("step") == MARK_STEP)
    moved = {}
    for d in glob.glob(os.path.join(str(cache), "*", "kernels")):
        os.rename(d, f"{d}@{n}")
        moved[d + os.sep] = f"{d}@{n}{os.sep}"
    with open(log, "a") as f:
        f.write(json.dumps({"step": MARK_STEP, "label": label, "moved": moved}) + "\n")
    device.clear_program_cache()
    ttnn.device.ClearKernelCache()


# ---- reading the log -----------------------------------------------------------------------------------


def _moved(text: str, moved: Mapping[str, str]) -> str:
    for old, new in moved.items():
        text = text.replace(old, new)
    return text


def programs(records: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """label -> the compile and link records of that program, paths mapped to where `end_program` moved
    its build directories."""
    out: dict[str, list[dict[str, Any]]] = {}
    pending: list[Mapping[str, Any]] = []
    for r in records:
        if r.get("step") == MARK_STEP:
            moved = r.get("moved") or {}
            out[r["label"]] = [{**p, "cwd": _moved(str(p.get("cwd", "")), moved),
                                "argv": [_moved(a, moved) for a in p.get("argv") or []]} for p in pending]
            pending = []
        elif r.get("step") in ("compile", "link"):
            pending.append(r)
    return out


def _linked(argv: Sequence[str]) -> str:
    """The ELF a link record made: its `-o`, without the temporary `.<n>_<pid>` the JIT renames away."""
    return re.sub(r"\.\d+_\d+(\.elf)$", r"\1", argv[list(argv).index("-o") + 1])


# ---- sizes -----------------------------------------------------------------------------------------------


def _elf32(path: str | os.PathLike) -> tuple[bytes, tuple[int, ...]]:
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 1:
        raise ValueError(f"{path}: not a 32-bit ELF")
    return data, struct.unpack_from("<HHIIIIIHHHHHH", data, 16)


def load_bytes(path: str | os.PathLike) -> int:
    """The loadable bytes of a linked ELF: the sum of its PT_LOAD segments' file sizes."""
    data, h = _elf32(path)
    phoff, phentsize, phnum = h[4], h[8], h[9]
    total = 0
    for i in range(phnum):
        p_type, _, _, _, p_filesz = struct.unpack_from("<IIIII", data, phoff + i * phentsize)
        total += p_filesz if p_type == 1 else 0
    return total


def allocated_bytes(path: str | os.PathLike) -> int:
    """The bytes of an object file's allocated sections with contents (code, read-only and initialised
    data: SHF_ALLOC, not SHT_NOBITS)."""
    data, h = _elf32(path)
    shoff, shentsize, shnum = h[5], h[10], h[11]
    total = 0
    for i in range(shnum):
        _, sh_type, sh_flags, _, _, sh_size = struct.unpack_from("<IIIIII", data, shoff + i * shentsize)
        if sh_flags & 0x2 and sh_type != 8:
            total += sh_size
    return total


def proxy_command(build: gfe.KernelBuild, output: str) -> list[str]:
    """GCC 12's line for the proxy: `gcc_front_end`'s line for `build` without LTO and debug information,
    to assembly (`-S`) at the JIT's own -O level."""
    cmd = [a for a in gfe.gcc_command(build, output) if not a.startswith("-flto") and a != "-g"]
    cmd[cmd.index("-c")] = "-S"
    return cmd


def proxy_bytes(build: gfe.KernelBuild, timeout: float = 300) -> int:
    """A TRISC build's proxy size (module doc), bytes. RuntimeError with GCC's or as' message on failure."""
    env = {**os.environ, "LC_ALL": "C"}
    with tempfile.TemporaryDirectory(prefix="kernel-size-") as tmp:
        asm, obj = os.path.join(tmp, "kernel.s"), os.path.join(tmp, "kernel.o")
        r = subprocess.run(proxy_command(build, asm), cwd=build.cwd, capture_output=True, text=True,
                           timeout=timeout, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"{build.name}: GCC 12 failed:\n{r.stderr[-3000:]}")
        text = _TTINSN.sub(r"\1.word", Path(asm).read_text())
        Path(asm).write_text(text)
        r = subprocess.run([GNU_AS, "-march=rv32im", "-mabi=ilp32", "-o", obj, asm], capture_output=True,
                           text=True, timeout=timeout, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"{build.name}: {GNU_AS} failed:\n{r.stderr[-3000:]}")
        return allocated_bytes(obj)


def _jobs(label: str, recs: list[dict[str, Any]]) -> list[tuple[str, str, str, Any]]:
    """(label, processor, origin, what to size) of one program: a KernelBuild (TRISC; origin its kernel
    sources) or a linked ELF's path (origin its build directory)."""
    jobs = []
    for r in recs:
        proc = str(r.get("processor"))
        if r["step"] == "compile" and proc in TRISCS and r.get("result") in gfe.COMPILED:
            kernels = tuple(os.path.realpath(k) for k in r.get("kernels") or [])
            jobs.append((label, proc, ",".join(kernels), gfe.KernelBuild(kernels, proc, tuple(r["argv"]), r["cwd"])))
        elif r["step"] == "link" and proc in DATA_MOVEMENT:
            jobs.append((label, proc, r["cwd"], _linked(r["argv"])))
    return jobs


def measure(records: Iterable[Mapping[str, Any]], jobs: int = 2) -> dict[str, ProgramImages]:
    """Every marked program of a JIT log, sized (module doc); label -> its images."""
    marked = programs(records)
    work = [j for label, recs in marked.items() for j in _jobs(label, recs)]

    def size(job: tuple[str, str, str, Any]) -> int:
        what = job[3]
        return proxy_bytes(what) if isinstance(what, gfe.KernelBuild) else load_bytes(what)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        sizes = list(pool.map(size, work))
    out = {label: ProgramImages(label) for label in marked}
    for (label, proc, origin, _), n in zip(work, sizes):
        img = out[label]
        img.bytes[proc] = max(img.bytes.get(proc, 0), n)
        img.origins.setdefault(proc, []).append(origin)
    return out


# ---- comparison --------------------------------------------------------------------------------------------


def ratios(ours: ProgramImages, theirs: ProgramImages) -> dict[str, float]:
    """Ours / theirs per TRISC and for the compute total ("compute")."""
    out = {p: ours.bytes.get(p, 0) / theirs.bytes[p] for p in TRISCS if theirs.bytes.get(p)}
    out["compute"] = ours.compute / theirs.compute
    return out


def table(pairs: Sequence[tuple[ProgramImages, ProgramImages]]) -> str:
    """A text table, one line per (ours, tt-metal's) pair: T0/T1/T2 proxy bytes ours and theirs, the
    ratios, our BRISC / NCRISC real bytes and our five-image total."""
    head = (f"{'program':32s} {'ours T0/T1/T2':>21s} {'tt-metal T0/T1/T2':>21s} {'T0':>5s} {'T1':>5s} {'T2':>5s}"
            f" {'total':>5s}  {'BRISC':>6s} {'NCRISC':>6s} {'5 images':>8s}")
    lines = [head]
    for ours, theirs in pairs:
        r = ratios(ours, theirs)
        tri = "/".join(str(ours.bytes.get(p, 0)) for p in TRISCS)
        ref = "/".join(str(theirs.bytes.get(p, 0)) for p in TRISCS)
        lines.append(f"{ours.label:32s} {tri:>21s} {ref:>21s} " + " ".join(f"{r.get(p, 0):5.2f}" for p in TRISCS)
                     + f" {r['compute']:5.2f}  {ours.bytes.get('brisc', 0):6d} {ours.bytes.get('ncrisc', 0):6d}"
                     f" {ours.total:8d}")
    return "\n".join(lines)


def worst(pairs: Sequence[tuple[ProgramImages, ProgramImages]]) -> dict[str, tuple[float, str]]:
    """The largest ratio of each TRISC and of the compute total over `pairs`: name -> (ratio, program)."""
    out: dict[str, tuple[float, str]] = {}
    for ours, theirs in pairs:
        for name, r in ratios(ours, theirs).items():
            if name not in out or r > out[name][0]:
                out[name] = (r, ours.label)
    return out
