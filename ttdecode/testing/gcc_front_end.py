"""A second compiler front end for our kernels: GCC 12 on the JIT's own compile lines.

The device compiler is SFPI's GCC 15; the mock Wormhole builds kernels with clang-19 (the stand-in
`toolchain/riscv_tt_elf_gxx.py`). This module takes the compile lines the JIT gave the stand-in
(its log, `TTDECODE_JIT_LOG`: one JSON line per call) for our kernels, one build per kernel source
and processor (reader on NCRISC, writer on BRISC, compute on TRISC0-2), and compiles each again with
Debian's `riscv64-linux-gnu-g++` (GCC 12), in the JIT's build directory with its generated headers:

* every warning option of the JIT's line is kept as it is (`-Wall -Werror`, the `-Wno-error=...`
  list): the JIT's line is a GCC line, none of its warning options is clang-only;
* SFPI-only options are dropped (`-ftt-*` language extensions, `-mcpu=tt-wh*`, `-mtt-*`,
  `-fno-rvtt*`), and so are the dependency file (`-MMD`, `-MF`) and the output (`-o`: each build
  writes to a temp dir, never into the JIT's cache);
* the additions GCC 12 (or the mock's build directory) needs are the rows of `ADDITIONS`, each with
  its reason; nothing else is added;
* it compiles only (`-c`, with the JIT's own `-flto`: front end and early passes write GIMPLE, no
  assembler runs; the Tensix `.ttinsn` instructions of the compute headers never reach one).

Not covered: SFPI's C++ extensions (`-ftt-nttp` class-type template parameters, ...) are missing in
GCC 12, and tt-metal's `api/core_local_mem.h` has a `static_assert(false)` in a template that GCC 12
rejects before P2593 (our kernels include neither). TRISC builds use the project's stand-in `sfpi.h`
(`ttdecode/testing/sfpi/`), as the clang builds do: SFPU code generation is the SFPI compiler's alone.

`relocate(build, dest, sources)` copies a build's directory and points it at other kernel sources
(a mutated copy), so the same JIT line can be given to both front ends (`compile_with_gcc`,
`compile_with_standin`).

From a shell: `python -m ttdecode.testing.gcc_front_end JIT_LOG` compiles every build of our
kernels that JIT_LOG shows (a log written by `python -m ttdecode.testing.mock run --jit-log JIT_LOG`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from ttdecode.testing import mock

#: Debian's cross compiler (package g++-riscv64-linux-gnu, installed by `make system-deps`).
GCC = "riscv64-linux-gnu-g++"

#: Stand-in compiler results of a successful compile (data movement: an object; compute: LLVM IR
#: then a stub object).
COMPILED = ("object", "ir+stub")


@dataclass(frozen=True)
class Addition:
    """Options added to every GCC line (`processors`: prefixes of the processors it applies to)."""

    options: tuple[str, ...]
    processors: tuple[str, ...]
    reason: str


#: What GCC 12 (and the mock's build directories) need beyond the JIT's own line: the one list.
#: `{sfpi}` / `{support}` are filled in with the stand-in SFPI headers / the mock's support headers.
ADDITIONS: tuple[Addition, ...] = (
    Addition(("-march=rv32im", "-mabi=ilp32"), ("brisc", "ncrisc", "trisc"),
             "GCC 12 knows no Tensix CPU (the JIT's -mcpu=tt-wh / tt-wh-tensix is dropped) and defaults to "
             "rv64, where the headers' 32-bit address casts fail -Werror=int-to-pointer-cast: the baby cores' "
             "base ISA instead"),
    Addition(("-Wno-attributes",), ("brisc", "ncrisc", "trisc"),
             "SFPI's address-space attributes (rvtt_l1_ptr, rvtt_reg_ptr) are unknown to GCC 12; -Wattributes "
             "is on by default and -Werror makes it an error"),
    Addition(("-D__riscv_xtttensixwh=1",), ("trisc",),
             "SFPI's GCC predefines it for Wormhole's Tensix: the LLK headers then take SFPI's instruction "
             "macros (`.ttinsn` with an immediate operand) instead of an assembler `.error` fallback, so GCC "
             "reads the code SFPI reads (clang gets the same branch through __clang__)"),
    Addition(("-isystem", "{sfpi}"), ("trisc",),
             "sfpi.h / lltt.h come with the SFPI toolchain, not the ttnn wheel: the project's stand-in headers "
             "(what the clang builds use too)"),
    Addition(("-isystem", "{support}"), ("brisc", "ncrisc", "trisc"),
             "Debian's riscv64 glibc headers (reached through the JIT's pch.h: <cstdio>, ...) want "
             "gnu/stubs-ilp32.h for ilp32; the mock's support directory has an empty one"),
    Addition(("-Wno-invalid-pch",), ("brisc", "ncrisc", "trisc"),
             "the mock's pch.h.gch is a text placeholder (no precompiled header): GCC reads pch.h as text "
             "and would warn about the placeholder on every build"),
)


@dataclass(frozen=True)
class KernelBuild:
    """One JIT compile of kernel source(s) for one processor, as the stand-in compiler's log shows it."""

    kernels: tuple[str, ...]  # the kernel sources the build includes (absolute paths)
    processor: str  # brisc, ncrisc, trisc0, trisc1, trisc2
    argv: tuple[str, ...]  # the JIT's compile line (SFPI GCC options), without the compiler
    cwd: str  # the JIT's build directory for this processor (its generated headers: `.` and `..`)

    @property
    def name(self) -> str:
        """`<kernel dir>/<file>@<processor>`, e.g. `flash_decode/reader.cpp@ncrisc`."""
        return ",".join("/".join(Path(k).parts[-2:]) for k in self.kernels) + f"@{self.processor}"


@dataclass(frozen=True)
class CompileResult:
    """One compiler's verdict on one build."""

    build: KernelBuild
    command: tuple[str, ...]
    returncode: int
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        return f"{self.build.name}: exit {self.returncode}\n{self.stderr[-3000:]}"


# ---- the JIT's log -------------------------------------------------------------------------------


def read_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The stand-in compiler's log: one dict per call (`step`, `processor`, `kernels`, `strict`, `argv`,
    `cwd`, `result`, ...)."""
    p = Path(path)
    if not p.is_file():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def kernel_builds(records: Iterable[Mapping[str, Any]]) -> list[KernelBuild]:
    """One build per (kernel sources, processor) among the strict (our kernels, not ttnn's own)
    successful compiles of the log, in log order; the first compile of each pair is kept."""
    seen: dict[tuple[tuple[str, ...], str], KernelBuild] = {}
    for r in records:
        if r.get("step") != "compile" or not r.get("strict") or r.get("result") not in COMPILED:
            continue
        kernels = tuple(os.path.realpath(k) for k in r.get("kernels") or [])
        key = (kernels, str(r.get("processor")))
        if kernels and key not in seen:
            seen[key] = KernelBuild(kernels, key[1], tuple(r["argv"]), str(r["cwd"]))
    return list(seen.values())


# ---- the GCC line --------------------------------------------------------------------------------


def _sfpi_only(arg: str) -> bool:
    """SFPI GCC options GCC 12 does not have."""
    return arg.startswith(("-ftt-", "-mcpu=tt-", "-mtt-", "-fno-rvtt")) or arg == "-mno-tt-tensix-optimize-replay"


def translate(argv: Sequence[str]) -> list[str]:
    """The JIT's line without SFPI-only options, the dependency file and the output (see module doc)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a in ("-MMD", "-MD", "-c") or _sfpi_only(a):
            continue
        else:
            out.append(a)
    return out


def additions(processor: str, sfpi: str | os.PathLike, support: str | os.PathLike) -> list[str]:
    """The `ADDITIONS` options for `processor`, paths filled in."""
    out: list[str] = []
    for add in ADDITIONS:
        if processor.startswith(add.processors):
            out += [o.format(sfpi=sfpi, support=support) for o in add.options]
    return out


def gcc_command(build: KernelBuild, output: str, gcc: str = GCC) -> list[str]:
    """The GCC 12 compile-only line of `build`, writing `output`: the JIT's options, then the
    `ADDITIONS` (after them, so `-Wno-attributes` / `-Wno-invalid-pch` win over the JIT's `-Wall`)."""
    support = mock.runtime_root() / "support" / "include"
    return [gcc, *translate(build.argv), *additions(build.processor, mock.SFPI_DIR, support), "-c", "-o", output]


def compile_with_gcc(build: KernelBuild, gcc: str = GCC, timeout: float = 300) -> CompileResult:
    """Compile `build` with GCC 12 in its build directory (output to a temp dir, removed; messages in
    the C locale: plain quotes)."""
    env = {**os.environ, "LC_ALL": "C"}
    with tempfile.TemporaryDirectory(prefix="gcc-front-end-") as tmp:
        cmd = gcc_command(build, os.path.join(tmp, "kernel.o"), gcc)
        r = subprocess.run(cmd, cwd=build.cwd, capture_output=True, text=True, timeout=timeout, env=env)
    return CompileResult(build, tuple(cmd), r.returncode, r.stderr)


def compile_all(builds: Sequence[KernelBuild], jobs: int = 2, gcc: str = GCC) -> list[CompileResult]:
    """`compile_with_gcc` for every build, `jobs` at a time; results in the order of `builds`."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda b: compile_with_gcc(b, gcc), builds))


def compile_with_standin(build: KernelBuild, log: str | os.PathLike, timeout: float = 300) -> CompileResult:
    """Give `build`'s JIT line to the mock's stand-in compiler (clang-19), as the JIT does, in its
    build directory; the stand-in appends its record to `log`. Writes the outputs the line names."""
    cmd = [str(mock.runtime_root() / "runtime" / "sfpi" / "compiler" / "bin" / "riscv-tt-elf-g++"), *build.argv]
    env = {**os.environ, mock.JIT_LOG_ENV: str(log)}
    r = subprocess.run(cmd, cwd=build.cwd, capture_output=True, text=True, timeout=timeout, env=env)
    return CompileResult(build, tuple(cmd), r.returncode, r.stderr)


# ---- a build pointed at other sources --------------------------------------------------------------


def relocate(build: KernelBuild, dest: str | os.PathLike, sources: Mapping[str, str]) -> KernelBuild:
    """A copy of `build` whose build directory (the JIT's `..` of `cwd`: generated headers and every
    processor's directory) lives under `dest`, with each kernel source `old` of `sources` replaced by
    `sources[old]`: in the generated files that include it, in the `-I` of its folder and in the
    line's paths into the build directory (outputs, dependency file)."""
    old_dir = Path(build.cwd).parent
    new_dir = Path(dest) / old_dir.name
    shutil.copytree(old_dir, new_dir, ignore=shutil.ignore_patterns("*.o", "*.elf", "*.d"))
    real = {os.path.realpath(k): os.path.realpath(v) for k, v in sources.items()}
    for f in new_dir.iterdir():
        if f.is_file() and f.suffix in (".h", ".hpp", ".cpp"):
            text = f.read_text()
            for old, new in real.items():
                text = text.replace(f'"{old}"', f'"{new}"')
            f.write_text(text)
    dirs = {f"-I{os.path.dirname(k)}": f"-I{os.path.dirname(v)}" for k, v in real.items()}
    argv = tuple(dirs.get(a, a.replace(str(old_dir) + os.sep, str(new_dir) + os.sep)) for a in build.argv)
    kernels = tuple(real.get(k, k) for k in build.kernels)
    return replace(build, kernels=kernels, argv=argv, cwd=str(new_dir / Path(build.cwd).name))


# ---- CLI -------------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ttdecode.testing.gcc_front_end",
                                description="Compile every build of our kernels a mock JIT log shows again with "
                                            "GCC 12 (riscv64-linux-gnu-g++), under the JIT's own warning options.")
    p.add_argument("jit_log", help="the stand-in compiler's log (TTDECODE_JIT_LOG of a mock run)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--show-command", action="store_true", help="print each GCC line")
    args = p.parse_args(argv)
    builds = kernel_builds(read_log(args.jit_log))
    if not builds:
        print(f"{args.jit_log}: no compile of our kernels in the log", file=sys.stderr)
        return 2
    failed = 0
    for res in compile_all(builds, args.jobs):
        print(f"{'ok  ' if res.ok else 'FAIL'} {res.build.name}")
        if args.show_command:
            print("    " + " ".join(res.command))
        if not res.ok:
            failed += 1
            print(res.stderr, file=sys.stderr)
    print(f"{len(builds) - failed} of {len(builds)} builds compiled with {GCC}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
