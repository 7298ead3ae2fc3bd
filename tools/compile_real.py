#!/usr/bin/env python3
"""Compile a dataflow (reader / writer) kernel against the REAL tt-metal headers of the ttnn wheel.

The device JIT build compiles a kernel by compiling the firmware wrapper of its RISC-V core
(`brisck.cc` for the writer on BRISC / NoC 0, `ncrisck.cc` for the reader on NCRISC / NoC 1), which
includes a generated `kernel_includes.hpp` naming the kernel source. This script does the same with
Debian's clang-19 for riscv32 (the SFPI compiler is not available here): it writes the few generated
headers into a temp dir, passes the compile-time args the way the JIT does
(`-DKERNEL_COMPILE_TIME_ARGS=a,b,c`, read back by `get_compile_time_arg_val(i)`), the kernel defines as
`-D` macros, and the architecture / bank-count macros of a Wormhole N150. Only compute kernels cannot be
checked this way (their LLK headers need the SFPI toolchain's `sfpi.h`).

Usage: compile_real.py KERNEL.cpp [--kind reader|writer] [--ct-args 1,2,3] [-D NAME=VALUE ...] [-I DIR ...]
Exit status 0 when the kernel compiles; the compiler's diagnostics are printed otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

#: Debian packages that provide what this check needs.
APT_PACKAGES = ("clang-19", "g++-riscv64-linux-gnu")
#: The C++ standard library headers of Debian's riscv64 cross g++ (the riscv32 target reuses them).
RISCV_CXX_ROOT = Path("/usr/riscv64-linux-gnu/include/c++")
RISCV_SYSROOT_INCLUDE = Path("/usr/riscv64-linux-gnu/include")

#: Per-kind core settings, as the device runs them (architecture.md: reader NCRISC/NoC 1, writer BRISC/NoC 0).
KIND_SETTINGS: dict[str, dict[str, str]] = {
    "reader": {"wrapper": "ncrisck.cc", "COMPILE_FOR": "COMPILE_FOR_NCRISC", "PROCESSOR_INDEX": "1", "NOC_INDEX": "1"},
    "writer": {"wrapper": "brisck.cc", "COMPILE_FOR": "COMPILE_FOR_BRISC", "PROCESSOR_INDEX": "0", "NOC_INDEX": "0"},
}

#: Macros the JIT build passes for a Wormhole N150 worker (values that only matter to firmware paths
#: are placeholders: PCIE_NOC_X/Y, DISPATCH_MESSAGE_ADDR).
WORMHOLE_DEFINES: dict[str, str] = {
    "ARCH_WORMHOLE": "1",
    "TENSIX_FIRMWARE": "1",
    "LOCAL_MEM_EN": "0",
    "KERNEL_BUILD": "1",
    "NOC_MODE": "0",  # DM_DEDICATED_NOC
    "NUM_DRAM_BANKS": "12",
    "IS_NOT_POW2_NUM_DRAM_BANKS": "1",
    "LOG_BASE_2_OF_NUM_DRAM_BANKS": "4",
    "NUM_L1_BANKS": "64",
    "IS_NOT_POW2_NUM_L1_BANKS": "0",
    "LOG_BASE_2_OF_NUM_L1_BANKS": "6",
    "PROGRAMMABLE_CORE_TYPE": "0",  # TENSIX
    "PCIE_NOC_X": "0",
    "PCIE_NOC_Y": "3",
    "DISPATCH_MESSAGE_ADDR": "0",
}

#: Include directories of the wheel, relative to the `ttnn` package directory.
WHEEL_INCLUDE_DIRS = (
    ".",
    "tt_metal",
    "tt_metal/api",
    "tt_metal/hw/inc",
    "tt_metal/hw/inc/internal/tt-1xx",
    "tt_metal/hw/inc/internal/tt-1xx/wormhole",
    "tt_metal/hw/inc/internal/tt-1xx/wormhole/wormhole_b0_defines",
    "tt_metal/hw/inc/internal/tt-1xx/wormhole/noc",
    "tt_metal/hostdevcommon/api",
    "tt_metal/hw/ckernels/wormhole_b0/metal/common",
    "tt_metal/hw/ckernels/wormhole_b0/metal/llk_io",
    "tt_metal/tt-llk/tt_llk_wormhole_b0/common/inc",
    "tt_metal/hw/firmware/src/tt-1xx",
)

FIRMWARE_DIR = "tt_metal/hw/firmware/src/tt-1xx"

#: tt::DataFormat code and 32x32 tile bytes of each CB format name the project uses.
CB_FORMATS: dict[str, tuple[int, int]] = {
    "float32": (0, 4096),
    "bfloat16": (5, 2048),
    "bfloat8_b": (6, 1088),
    "bfloat4_b": (7, 576),
}
NUM_CIRCULAR_BUFFERS = 32


def chlkc_descriptors(cb_formats: Mapping[int, str] | None = None) -> str:
    """The per-CB format tables the JIT generates (chlkc_descriptors.h); unnamed CBs are bfloat16.

    Dataflow kernels need them for `get_tile_size(cb)` / `get_dataformat(cb)`.
    """
    fmt = ["bfloat16"] * NUM_CIRCULAR_BUFFERS
    for index, name in (cb_formats or {}).items():
        if not 0 <= index < NUM_CIRCULAR_BUFFERS:
            raise ValueError(f"cb_formats: CB index {index} outside 0..{NUM_CIRCULAR_BUFFERS - 1}")
        if name not in CB_FORMATS:
            raise ValueError(f"cb_formats[{index}]: expected one of {sorted(CB_FORMATS)}, got {name!r}")
        fmt[index] = name

    def table(ctype: str, name: str, values: list[int]) -> str:
        return f"constexpr {ctype} {name}[{NUM_CIRCULAR_BUFFERS}] = {{{', '.join(map(str, values))}}};\n"

    codes = [CB_FORMATS[f][0] for f in fmt]
    sizes = [CB_FORMATS[f][1] for f in fmt]
    out = ["#pragma once\n#include <cstdint>\n"]
    for side in ("unpack", "pack"):
        out.append(table("std::int32_t", f"{side}_src_format", codes))
        out.append(table("std::int32_t", f"{side}_dst_format", codes))
        out.append(table("std::uint32_t", f"{side}_tile_size", sizes))
        out.append(table("std::uint8_t", f"{side}_tile_r_dim", [32] * NUM_CIRCULAR_BUFFERS))
        out.append(table("std::uint8_t", f"{side}_tile_c_dim", [32] * NUM_CIRCULAR_BUFFERS))
        out.append(table("std::uint8_t", f"{side}_tile_face_r_dim", [16] * NUM_CIRCULAR_BUFFERS))
        out.append(table("std::uint8_t", f"{side}_tile_num_faces", [4] * NUM_CIRCULAR_BUFFERS))
        out.append(table("std::uint8_t", f"{side}_num_faces_r_dim", [2] * NUM_CIRCULAR_BUFFERS))
        out.append(table("std::uint8_t", f"{side}_num_faces_c_dim", [2] * NUM_CIRCULAR_BUFFERS))
        out.append(table("std::uint8_t", f"{side}_partial_face", [0] * NUM_CIRCULAR_BUFFERS))
        out.append(table("std::uint8_t", f"{side}_narrow_tile", [0] * NUM_CIRCULAR_BUFFERS))
    return "".join(out)


class ToolchainMissing(RuntimeError):
    """clang-19, the riscv libstdc++ headers or the ttnn wheel cannot be found."""


@dataclass
class CompileResult:
    """The outcome of one compile: `ok`, the command line and clang's diagnostics."""

    source: Path
    kind: str
    ok: bool
    command: list[str]
    diagnostics: str
    generated: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        state = "OK" if self.ok else "FAILED"
        return f"{state}: {self.kind} kernel {self.source}\n{self.diagnostics}".rstrip()


def find_clang() -> str:
    """Path of clang-19 (or $CLANG), or ToolchainMissing saying which apt package provides it."""
    clang = os.environ.get("CLANG") or shutil.which("clang-19")
    if not clang:
        raise ToolchainMissing(
            "clang-19 not found on PATH (nor $CLANG): install it with "
            f"`apt-get install -y {' '.join(APT_PACKAGES)}` (the Makefile does this)"
        )
    return clang


def find_riscv_cxx_includes() -> list[Path]:
    """The libstdc++ include dirs of Debian's riscv64 cross g++, or ToolchainMissing."""
    versions = sorted(
        (p for p in RISCV_CXX_ROOT.glob("*") if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    ) if RISCV_CXX_ROOT.is_dir() else []
    if not versions:
        raise ToolchainMissing(
            f"riscv libstdc++ headers not found under {RISCV_CXX_ROOT}: install them with "
            "`apt-get install -y g++-riscv64-linux-gnu` (the Makefile does this)"
        )
    top = versions[-1]
    return [top, top / "riscv64-linux-gnu", RISCV_SYSROOT_INCLUDE]


def find_wheel() -> Path:
    """The installed `ttnn` package directory (found without importing ttnn), or ToolchainMissing."""
    spec = importlib.util.find_spec("ttnn")
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainMissing("the ttnn==0.81.1 wheel is not installed in this Python environment")
    root = Path(list(spec.submodule_search_locations)[0])
    if not (root / "tt_metal/hw/inc/api/dataflow/dataflow_api.h").is_file():
        raise ToolchainMissing(f"{root} holds no tt_metal/hw/inc/api/dataflow/dataflow_api.h (not ttnn 0.81.1?)")
    return root


def kind_of(source: Path) -> str:
    """'reader' or 'writer' from the file name, or ValueError naming the file."""
    name = source.name.lower()
    found = [k for k in KIND_SETTINGS if k in name]
    if len(found) != 1:
        raise ValueError(f"source {source}: cannot tell reader from writer by its name; pass kind explicitly")
    return found[0]


_DEFINE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def build_command(
    source: Path,
    kind: str,
    gen_dir: Path,
    compile_time_args: Sequence[int] = (),
    defines: Mapping[str, str] | None = None,
    include_dirs: Sequence[Path] = (),
    output: Path | None = None,
    cb_formats: Mapping[int, str] | None = None,
    named_compile_time_args: Mapping[str, int] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The clang command line and the generated headers ({relative path: text}) for one kernel."""
    if kind not in KIND_SETTINGS:
        raise ValueError(f"kind: expected one of {sorted(KIND_SETTINGS)}, got {kind!r}")
    for i, v in enumerate(compile_time_args):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
            raise ValueError(f"compile_time_args[{i}]: expected a uint32, got {v!r}")
    settings = KIND_SETTINGS[kind]
    wheel = find_wheel()
    clang = find_clang()
    cxx = find_riscv_cxx_includes()
    src = source.resolve()
    generated = {
        # The JIT writes this next to the build: it pulls the kernel into the firmware wrapper.
        "kernel_includes.hpp": f'#include "{src}"\n',
        # Debian's riscv glibc headers ship the lp64 variant only; ilp32 needs none of its content.
        "gnu/stubs-ilp32.h": "/* ilp32 stub for compile checks */\n",
        # The JIT writes the CBs' data formats and tile sizes here (get_tile_size needs them).
        "chlkc_descriptors.h": chlkc_descriptors(cb_formats),
    }
    cmd = [
        clang,
        "--target=riscv32-unknown-elf",
        "-march=rv32im",
        "-mabi=ilp32",
        "-std=c++17",
        "-Os",
        "-fno-exceptions",
        "-fno-rtti",
        "-nostdinc++",
        "-Wno-missing-template-arg-list-after-template-kw",
        "-Wno-unknown-attributes",
        "-Wno-empty-body",
        "-isystem",
        str(gen_dir),
    ]
    for d in cxx:
        cmd += ["-isystem", str(d)]
    macros = dict(WORMHOLE_DEFINES)
    macros[settings["COMPILE_FOR"]] = "1"
    macros["PROCESSOR_INDEX"] = settings["PROCESSOR_INDEX"]
    macros["NOC_INDEX"] = settings["NOC_INDEX"]
    cmd += [f"-D{k}={v}" for k, v in macros.items()]
    if compile_time_args:
        cmd.append("-DKERNEL_COMPILE_TIME_ARGS=" + ",".join(str(v) for v in compile_time_args))
    if named_compile_time_args:  # the JIT's form: {"name",value},... read by get_named_compile_time_arg_val
        for name, v in named_compile_time_args.items():
            if not _DEFINE_NAME.match(name) or isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
                raise ValueError(f"named_compile_time_args: {name!r}={v!r}: expected an identifier and a uint32")
        pairs = ",".join(f'{{"{n}",{v}}}' for n, v in named_compile_time_args.items())
        cmd.append(f"-DKERNEL_COMPILE_TIME_ARG_MAP={pairs}")
        # The map makes compile_time_args.h include <string_view>, whose <cwchar> needs glibc's ISO C95
        # wide-char declarations: a Linux g++ defines _GNU_SOURCE itself, clang for riscv32-unknown-elf
        # does not (a compile-check detail of the host libstdc++ headers; the SFPI toolchain has its own).
        cmd.append("-D_GNU_SOURCE=1")
    for name, value in (defines or {}).items():
        if not _DEFINE_NAME.match(name):
            raise ValueError(f"defines: {name!r} is not a macro name")
        cmd.append(f"-D{name}={value}")
    cmd += ["-I", str(gen_dir), "-I", str(src.parent)]
    for d in include_dirs:
        cmd += ["-I", str(d)]
    for rel in WHEEL_INCLUDE_DIRS:
        cmd += ["-I", str((wheel / rel).resolve())]
    cmd += ["-c", str(wheel / FIRMWARE_DIR / settings["wrapper"]), "-o", str(output or gen_dir / "kernel.o")]
    return cmd, generated


def compile_kernel(
    source: Path | str,
    kind: str | None = None,
    compile_time_args: Sequence[int] = (),
    defines: Mapping[str, str] | None = None,
    include_dirs: Sequence[Path] = (),
    timeout: float = 120.0,
    cb_formats: Mapping[int, str] | None = None,
    named_compile_time_args: Mapping[str, int] | None = None,
) -> CompileResult:
    """Compile one dataflow kernel as the device JIT would; never raises for compile errors."""
    src = Path(source)
    if not src.is_file():
        raise FileNotFoundError(f"source: {src} is not a file")
    kind = kind or kind_of(src)
    with tempfile.TemporaryDirectory(prefix="ttdecode-compile-real-") as tmp:
        gen_dir = Path(tmp)
        cmd, generated = build_command(
            src, kind, gen_dir, compile_time_args, defines, include_dirs, cb_formats=cb_formats,
            named_compile_time_args=named_compile_time_args,
        )
        for rel, text in generated.items():
            path = gen_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return CompileResult(src, kind, proc.returncode == 0, cmd, proc.stderr, generated)


def compile_program_kernels(program: object) -> list[CompileResult]:
    """Compile every READER / WRITER kernel of a `ttdecode.program.Program` with its own args and defines."""
    from ttdecode.program import KernelKind, Program

    if not isinstance(program, Program):
        raise TypeError(f"program: expected a ttdecode.program.Program, got {type(program).__name__}")
    results = []
    for k in program.kernels:
        if k.kind is KernelKind.COMPUTE:
            continue
        formats = {cb.index: cb.data_format.value for cb in program.circular_buffers if any(c in k.cores for c in cb.cores.cores())}
        results.append(compile_kernel(k.source, k.kind.value, k.compile_time_args, k.defines, cb_formats=formats,
                                      named_compile_time_args=k.named_compile_time_args))
    return results


_CT_ARG_USE = re.compile(r"get_compile_time_arg_val\(\s*(\d+)\s*\)")
_NAMED_CT_ARG_USE = re.compile(r'get_named_compile_time_arg_val\(\s*"(\w+)"\s*\)')
_CHECK_ARGS = re.compile(r"^\s*//\s*compile-check-args:\s*([0-9xa-fA-F,\s]*)$", re.M)
_CHECK_DEFINE = re.compile(r"^\s*//\s*compile-check-define:\s*([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.M)
_CHECK_NAMED = re.compile(r"^\s*//\s*compile-check-named:\s*([A-Za-z_][A-Za-z0-9_]*)=([0-9xa-fA-F]+)\s*$", re.M)


def check_named_args(source: Path) -> dict[str, int]:
    """Named compile-time args to check a kernel with when no Program supplies them: every
    `get_named_compile_time_arg_val("name")` the kernel uses gets the value 1, unless a comment
    states another (`// compile-check-named: name=value`, for args with few valid values)."""
    text = Path(source).read_text()
    stated = {m.group(1): int(m.group(2), 0) for m in _CHECK_NAMED.finditer(text)}
    return {name: stated.get(name, 1) for name in dict.fromkeys(_NAMED_CT_ARG_USE.findall(text))}


def check_settings(source: Path) -> tuple[list[int], dict[str, str]]:
    """Compile-time args and defines to check a kernel with when no Program supplies them.

    A kernel may state them in comments (`// compile-check-args: 1,2,3`,
    `// compile-check-define: NAME=VALUE`); otherwise every `get_compile_time_arg_val(i)` it uses
    gets the value 1. Named args: `check_named_args`.
    """
    text = Path(source).read_text()
    stated = _CHECK_ARGS.search(text)
    if stated:
        args = _parse_ct_args(stated.group(1))
    else:
        used = [int(m) for m in _CT_ARG_USE.findall(text)]
        args = [1] * (max(used) + 1 if used else 0)
    defines = {m.group(1): m.group(2).strip() for m in _CHECK_DEFINE.finditer(text)}
    return args, defines


def _parse_ct_args(text: str) -> list[int]:
    return [int(v, 0) for v in text.split(",") if v.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", type=Path)
    parser.add_argument("--kind", choices=sorted(KIND_SETTINGS))
    parser.add_argument(
        "--ct-args", type=_parse_ct_args, default=None, help="default: from the kernel (see check_settings)"
    )
    parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("-I", dest="includes", action="append", default=[], type=Path)
    parser.add_argument("-v", "--verbose", action="store_true", help="print the clang command")
    args = parser.parse_args(argv)
    defines = dict(d.split("=", 1) if "=" in d else (d, "1") for d in args.defines)
    failed = 0
    try:
        for src in args.sources:
            ct_args, stated_defines = check_settings(src)
            if args.ct_args is not None:
                ct_args = args.ct_args
            res = compile_kernel(src, args.kind, ct_args, {**stated_defines, **defines}, args.includes,
                                 named_compile_time_args=check_named_args(src) or None)
            if args.verbose:
                print(" ".join(res.command))
            print(res.summary())
            failed += not res.ok
    except ToolchainMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
