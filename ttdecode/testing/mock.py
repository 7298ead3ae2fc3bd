"""A mock Wormhole through the real ttnn 0.81.1: tt-metal's whole host side, no chip.

ttnn opens a *mock* device when (a) `TT_METAL_MOCK_CLUSTER_DESC_PATH` names a cluster descriptor and
(b) `TT_METAL_RUNTIME_ROOT` holds a toolchain answering like SFPI 7.89.0. Then Program construction,
validation, the JIT build (every kernel compiled, with the JIT's own flags and generated headers) and
the program cache run for real; device writes go nowhere and reads return zeros (no numerics, no
timing). This module builds what that needs and opens devices:

* a runtime root (`runtime_root()`): links to the wheel's `tt_metal/`, `ttnn/`, `runtime/hw` and the
  stand-in compiler `runtime/sfpi/compiler/bin/riscv-tt-elf-g++` (`toolchain/riscv_tt_elf_gxx.py`:
  clang-19 + ld.lld-19; strict for our kernels, stubs for ttnn's own that clang cannot build; TRISC
  builds against the stand-in `sfpi/sfpi.h`);
* mock cluster descriptors (`clusters/`): `n150` (one chip), `n300` (1x2), `t3k` (8 chips: 1x8 or 2x4),
  `galaxy` (one unharvested Galaxy chip, opened with ETH dispatch: an 8x10 worker grid), `galaxy32`
  (a whole 6U Galaxy: 32 unharvested chips, 4x8 or 8x4; with FABRIC_1D the first open builds some 120
  ERISC router variants, so keep its `TT_METAL_CACHE`);
* `mock_env(system)`: the environment variables (one `TT_METAL_CACHE` per system and dispatch type,
  reused across processes; not the cache `ttdecode.ttnn_env` uses for host-only conversions);
* `open_mock_device()` / `open_mock_mesh(shape)`: set the environment (before `import ttnn`) and open.

From a shell (`python -m ttdecode.testing.mock --help`):
  env [--system n150]            print `export ...` lines (eval them, then run any ttnn program)
  run [--system n150] SCRIPT ... run a Python script on the mock in a temp cwd, under a timeout
  check [--system n150]          open the mock system and print its grid (a smoke test)

tt-metal writes `./generated/` into the current directory: run mock programs in a temp cwd
(`run` does). The mock can segfault (trace capture) or hang (a bad ERISC binary): run each use in its
own process under a timeout (`ttdecode.testing.isolated`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ttdecode.ttnn_env import quiet_log_env

HERE = Path(__file__).resolve().parent
TOOLCHAIN_SCRIPT = HERE / "toolchain" / "riscv_tt_elf_gxx.py"
SFPI_DIR = HERE / "sfpi"
CLUSTERS_DIR = HERE / "clusters"

#: Environment variables tt-metal reads.
RUNTIME_ROOT_ENV = "TT_METAL_RUNTIME_ROOT"
MOCK_CLUSTER_ENV = "TT_METAL_MOCK_CLUSTER_DESC_PATH"
CACHE_ENV = "TT_METAL_CACHE"
#: Where this module keeps its runtime root, caches and temp cwds (default `<tmp>/ttdecode-mock-<uid>`).
HOME_ENV = "TTDECODE_MOCK_HOME"
#: Set in a process whose environment `setup()` prepared (the system's name).
SYSTEM_ENV = "TTDECODE_MOCK_SYSTEM"
#: A file the stand-in compiler appends one JSON line per call to.
JIT_LOG_ENV = "TTDECODE_JIT_LOG"

#: The Debian tools the stand-in needs.
CLANG = "clang-19"
LLD = "ld.lld-19"
APT_PACKAGES = ("clang-19", "lld-19", "g++-riscv64-linux-gnu")


@dataclass(frozen=True)
class MockSystem:
    """A mock cluster: its descriptor file, the mesh shapes it opens as and the dispatch core type
    `open_mock_device` opens it with ("worker", ttnn's default for one chip, or "eth")."""

    name: str
    descriptor: str
    chips: int
    mesh_shapes: tuple[tuple[int, int], ...]
    dispatch: str = "default"


SYSTEMS: dict[str, MockSystem] = {
    "n150": MockSystem("n150", "n150.yaml", 1, ((1, 1),)),
    "n300": MockSystem("n300", "n300.yaml", 2, ((1, 2), (1, 1))),
    "t3k": MockSystem("t3k", "t3k.yaml", 8, ((1, 8), (2, 4), (1, 2), (1, 1))),
    # one unharvested Galaxy chip: ETH dispatch leaves every Tensix row to the workers (an 8x10 grid)
    "galaxy": MockSystem("galaxy", "galaxy.yaml", 1, ((1, 1),), dispatch="eth"),
    # a whole Galaxy: 32 unharvested chips, every one on PCIe; WORKER dispatch (8x9 worker grids)
    "galaxy32": MockSystem("galaxy32", "galaxy32.yaml", 32, ((4, 8), (8, 4))),
}


class MockUnavailable(RuntimeError):
    """The mock cannot be set up here (no ttnn wheel, no clang-19 / ld.lld-19, ...)."""


# ---- locations ----------------------------------------------------------------------------------


def mock_home() -> Path:
    home = os.environ.get(HOME_ENV) or os.path.join(tempfile.gettempdir(), f"ttdecode-mock-{os.getuid()}")
    path = Path(home)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def wheel_dir() -> Path:
    """The installed ttnn package directory (found without importing ttnn)."""
    spec = importlib.util.find_spec("ttnn")
    if spec is None or not spec.submodule_search_locations:
        raise MockUnavailable("ttnn is not installed (pip install 'ttdecode[ttnn]', ttnn==0.81.1)")
    path = Path(list(spec.submodule_search_locations)[0]).resolve()
    for need in ("tt_metal", "runtime/hw", "ttnn"):
        if not (path / need).exists():
            raise MockUnavailable(f"the ttnn wheel at {path} has no {need}/ (expected ttnn==0.81.1)")
    return path


def missing_tools() -> list[str]:
    """Debian tools the stand-in compiler needs that are not on PATH / not installed."""
    missing = [t for t in (CLANG, LLD) if shutil.which(t) is None]
    if not Path("/usr/riscv64-linux-gnu/include/c++").is_dir():
        missing.append("g++-riscv64-linux-gnu (libstdc++ headers)")
    return missing


def _stamp(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


# ---- the runtime root ---------------------------------------------------------------------------

_WRAPPER = """#!/bin/sh
# The SFPI compiler stand-in of ttdecode.testing.mock (see {script}).
: "${{TTDECODE_JIT_WHEEL:={wheel}}}"
: "${{TTDECODE_JIT_SFPI:={sfpi}}}"
: "${{TTDECODE_JIT_SUPPORT:={support}}}"
export TTDECODE_JIT_WHEEL TTDECODE_JIT_SFPI TTDECODE_JIT_SUPPORT
exec "{python}" -S "{script}" "$@"
"""

#: The wheel's libraries that ship as GCC LTO bytecode: rebuilt from the wheel's sources with clang.
_LIB_SOURCES = {
    "substitutes.o": "tt_metal/hw/toolchain/substitutes.cpp",
    "noc.o": "tt_metal/hw/firmware/src/tt-1xx/wormhole/noc.c",
    "tdma_xmov.o": "tt_metal/hw/firmware/src/tt-1xx/tdma_xmov.c",
}

#: memset / memcpy / memmove for clang's calls (GCC's libc on the device provides them).
_MEMFUNCS = """\
typedef unsigned int size_t;
extern "C" {
void* memset(void* d, int c, size_t n) { unsigned char* p = (unsigned char*)d; while (n--) *p++ = (unsigned char)c; return d; }
void* memcpy(void* d, const void* s, size_t n) { unsigned char* p = (unsigned char*)d; const unsigned char* q = (const unsigned char*)s; while (n--) *p++ = *q++; return d; }
void* memmove(void* d, const void* s, size_t n) {
    unsigned char* p = (unsigned char*)d; const unsigned char* q = (const unsigned char*)s;
    if (p < q) { while (n--) *p++ = *q++; } else { p += n; q += n; while (n--) *--p = *--q; }
    return d;
}
}
"""

_LIB_INCLUDES = (
    "tt_metal/hw/inc", "tt_metal/hw/inc/internal/tt-1xx", "tt_metal/hw/inc/internal/tt-1xx/wormhole",
    "tt_metal/hw/inc/internal/tt-1xx/wormhole/wormhole_b0_defines", "tt_metal/hw/inc/internal/tt-1xx/wormhole/noc",
    "tt_metal/hostdevcommon/api", "tt_metal/hw/firmware/src/tt-1xx", "tt_metal/tt-llk/tt_llk_wormhole_b0/common/inc",
    "tt_metal/hw/ckernels/wormhole_b0/metal/common", "tt_metal/hw/ckernels/wormhole_b0/metal/llk_io", "tt_metal/api",
    "tt_metal",
)


def _build_support(support: Path, wheel: Path) -> None:
    """support/include/gnu/stubs-ilp32.h (glibc's riscv64 headers want it for ilp32) and
    support/lib/*.o (clang builds of the wheel's GCC-LTO-only objects, plus memset/memcpy)."""
    (support / "include" / "gnu").mkdir(parents=True, exist_ok=True)
    (support / "include" / "gnu" / "stubs-ilp32.h").write_text("/* ttdecode mock: nothing to stub */\n")
    lib = support / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    incs = [f"-I{wheel / d}" for d in _LIB_INCLUDES]
    base = [CLANG, "--target=riscv32-unknown-elf", "-march=rv32im", "-mabi=ilp32", "-mno-relax", "-O2",
            "-ffreestanding", "-fno-exceptions", "-DARCH_WORMHOLE", "-DTENSIX_FIRMWARE", "-DCOMPILE_FOR_BRISC",
            "-DNOC_INDEX=0", "-DNUM_DRAM_BANKS=12", "-DNUM_L1_BANKS=64", "-w"]
    cxx = ["-nostdinc++", "-isystem", _libstdcxx_dir(), "-isystem", f"{_libstdcxx_dir()}/riscv64-linux-gnu",
           "-isystem", str(support / "include"), "-isystem", "/usr/riscv64-linux-gnu/include"]
    with tempfile.TemporaryDirectory() as tmp:
        objs = []
        for name, src in _LIB_SOURCES.items():
            lang = ["-x", "c++", "-std=c++17", "-fno-rtti"]  # g++ builds the .c sources as C++ too
            out = Path(tmp) / name
            r = subprocess.run(base + cxx + incs + lang + ["-c", str(wheel / src), "-o", str(out)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise MockUnavailable(f"building {name} from {src} with clang failed:\n{r.stderr[-3000:]}")
            objs.append(out)
        mem_src = Path(tmp) / "memfuncs.cc"
        mem_src.write_text(_MEMFUNCS)
        mem_obj = Path(tmp) / "memfuncs.o"
        r = subprocess.run(base + ["-x", "c++", "-c", str(mem_src), "-o", str(mem_obj)], capture_output=True, text=True)
        if r.returncode != 0:
            raise MockUnavailable(f"building memset/memcpy failed:\n{r.stderr}")
        # substitutes.o carries memset/memcpy too, so the JIT's link (which names substitutes.o) finds them.
        merged = Path(tmp) / "substitutes.merged.o"
        r = subprocess.run([LLD, "-m", "elf32lriscv", "-r", str(Path(tmp) / "substitutes.o"), str(mem_obj),
                            "-o", str(merged)], capture_output=True, text=True)
        if r.returncode != 0:
            raise MockUnavailable(f"merging substitutes.o failed:\n{r.stderr}")
        shutil.copy(merged, lib / "substitutes.o")
        for name in ("noc.o", "tdma_xmov.o"):
            shutil.copy(Path(tmp) / name, lib / name)


def _libstdcxx_dir() -> str:
    root = Path("/usr/riscv64-linux-gnu/include/c++")
    vers = sorted((v.name for v in root.iterdir() if v.name[:1].isdigit()), key=lambda v: int(v.split(".")[0]))
    return str(root / vers[-1])


def runtime_root() -> Path:
    """The TT_METAL_RUNTIME_ROOT for the mock (built once per wheel and stand-in version)."""
    missing = missing_tools()
    if missing:
        raise MockUnavailable(f"the mock's stand-in compiler needs {', '.join(missing)} "
                              f"(Debian: apt-get install {' '.join(APT_PACKAGES)}; `make system-deps`)")
    wheel = wheel_dir()
    key = _stamp(wheel, HERE, sys.executable, _WRAPPER, _MEMFUNCS, _LIB_INCLUDES)
    root = mock_home() / f"root-{key}"
    if (root / ".complete").is_file():
        return root
    tmp = Path(tempfile.mkdtemp(prefix=f"root-{key}.", dir=mock_home()))
    try:
        for name in ("tt_metal", "ttnn"):
            (tmp / name).symlink_to(wheel / name)
        (tmp / "runtime").mkdir()
        (tmp / "runtime" / "hw").symlink_to(wheel / "runtime" / "hw")
        support = root / "support"  # final location, referenced by the wrapper
        _build_support(tmp / "support", wheel)
        bin_dir = tmp / "runtime" / "sfpi" / "compiler" / "bin"
        bin_dir.mkdir(parents=True)
        gxx = bin_dir / "riscv-tt-elf-g++"
        gxx.write_text(_WRAPPER.format(script=TOOLCHAIN_SCRIPT, wheel=wheel, sfpi=SFPI_DIR, support=support,
                                       python=sys.executable))
        gxx.chmod(0o755)
        (tmp / ".complete").write_text("ok\n")
        try:
            os.rename(tmp, root)
        except OSError:  # another process finished first
            if not (root / ".complete").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def cluster_descriptor(system: str) -> Path:
    if system not in SYSTEMS:
        raise ValueError(f"system: expected one of {sorted(SYSTEMS)}, got {system!r}")
    return CLUSTERS_DIR / SYSTEMS[system].descriptor


def standin_version() -> str:
    """A hash of the stand-in compiler and headers: the JIT keys its cache on the compiler's banner
    only (always SFPI 7.89.0's here), so a changed stand-in must not reuse binaries built by another."""
    files = [TOOLCHAIN_SCRIPT, *sorted(SFPI_DIR.glob("*.h"))]
    return _stamp(*(f.read_bytes() for f in files))


def cache_dir(system: str, dispatch: str = "worker") -> Path:
    """One TT_METAL_CACHE per mock system and dispatch type (the JIT keys its output on harvest masks
    and dispatch cores) and stand-in version, shared by every process that uses that system."""
    path = mock_home() / "cache" / f"{system}-{dispatch}-{standin_version()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def mock_env(system: str = "n150", dispatch: str = "worker", jit_log: Optional[str] = None,
             cache: Optional[str] = None) -> dict[str, str]:
    """The environment a process needs to open mock `system` (set it before `import ttnn`)."""
    root = runtime_root()
    env = {
        RUNTIME_ROOT_ENV: str(root),
        MOCK_CLUSTER_ENV: str(cluster_descriptor(system)),
        CACHE_ENV: (cache or str(cache_dir(system, dispatch))).rstrip("/") + "/",
        SYSTEM_ENV: system,
        **quiet_log_env(),  # tt-metal's info lines of every open and close, unless the user set a level
    }
    if jit_log:
        env[JIT_LOG_ENV] = str(jit_log)
    return env


def setup(system: str = "n150", dispatch: str = "worker", jit_log: Optional[str] = None,
          cache: Optional[str] = None) -> dict[str, str]:
    """Put `mock_env(system)` into os.environ. Must run before ttnn is imported in this process."""
    env = mock_env(system, dispatch, jit_log, cache)
    if "ttnn" in sys.modules and os.environ.get(SYSTEM_ENV) != system:
        raise RuntimeError("ttdecode.testing.mock.setup: ttnn is already imported in this process with another "
                           "environment; set the mock up before `import ttnn` (or use a subprocess)")
    os.environ.update(env)
    return env


def _ttnn() -> Any:
    import ttnn  # noqa: PLC0415 - imported after setup() on purpose

    return ttnn


def open_mock_device(system: str = "n150", **kwargs: Any) -> Any:
    """A mock Wormhole N150 (`ttnn.open_device(device_id=0)`), or the first chip of `system` (a Galaxy
    chip with ETH dispatch: its 8x10 worker grid); close it with `ttnn.close_device`."""
    if os.environ.get(SYSTEM_ENV) != system:
        setup(system, "eth" if SYSTEMS[system].dispatch == "eth" else "worker")
    ttnn = _ttnn()
    if SYSTEMS[system].dispatch == "eth":
        kwargs.setdefault("dispatch_core_config", ttnn.DispatchCoreConfig(ttnn.DispatchCoreType.ETH))
    return ttnn.open_device(device_id=0, **kwargs)


def open_mock_mesh(shape: Sequence[int] = (1, 2), system: Optional[str] = None, fabric: bool = False,
                   **kwargs: Any) -> Any:
    """A mock mesh (`ttnn.open_mesh_device`) with WORKER dispatch (ETH dispatch leaves ops that size
    work by the compute grid failing on the mock). `system` defaults to the smallest that holds
    `shape` (n300 for 1x2, t3k for 1x8 / 2x4, galaxy32 for 4x8 / 8x4). `fabric=True` sets FABRIC_1D first (CCL ops need it).
    Close with `ttnn.close_mesh_device`."""
    shape = tuple(int(s) for s in shape)
    if system is None:
        system = next((s.name for s in SYSTEMS.values() if shape in s.mesh_shapes), None)
        if system is None:
            raise ValueError(f"shape: no mock system opens a {shape} mesh; known: "
                             f"{ {s.name: s.mesh_shapes for s in SYSTEMS.values()} }")
    if os.environ.get(SYSTEM_ENV) != system:
        setup(system)
    ttnn = _ttnn()
    if fabric:
        ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    kwargs.setdefault("dispatch_core_config", ttnn.DispatchCoreConfig(ttnn.DispatchCoreType.WORKER))
    return ttnn.open_mesh_device(ttnn.MeshShape(*shape), **kwargs)


# ---- subprocesses ------------------------------------------------------------------------------


def run_script(argv: Sequence[str], system: str = "n150", timeout: float = 600, cwd: Optional[str] = None,
               jit_log: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
               capture: bool = True) -> subprocess.CompletedProcess:
    """Run `python argv...` with the mock environment, in a temp cwd (tt-metal writes ./generated/),
    under a timeout (the process group is killed on expiry: subprocess.TimeoutExpired)."""
    full_env = {**os.environ, **mock_env(system, jit_log=jit_log), **(env or {})}
    repo = str(HERE.parent.parent)
    full_env["PYTHONPATH"] = repo + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    own_cwd = cwd is None
    work = cwd or tempfile.mkdtemp(prefix="cwd-", dir=mock_home())
    try:
        proc = subprocess.Popen([sys.executable, *argv], cwd=work, env=full_env, start_new_session=True,
                                stdout=subprocess.PIPE if capture else None,
                                stderr=subprocess.PIPE if capture else None, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        if own_cwd:
            shutil.rmtree(work, ignore_errors=True)


# ---- CLI ---------------------------------------------------------------------------------------


def _cmd_env(args: argparse.Namespace) -> int:
    for k, v in mock_env(args.system, jit_log=args.jit_log).items():
        print(f"export {k}={_shquote(v)}")
    print("# tt-metal writes ./generated/ into the current directory: run in a scratch directory.")
    return 0


def _shquote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        r = run_script([args.script, *args.args], system=args.system, timeout=args.timeout, jit_log=args.jit_log,
                       capture=False, cwd=args.cwd)
    except subprocess.TimeoutExpired:
        print(f"mock run: {args.script} timed out after {args.timeout} s (killed)", file=sys.stderr)
        return 124
    return r.returncode


_CHECK = """\
import sys, time, ttnn
from ttdecode.testing.mock import SYSTEMS, open_mock_device, open_mock_mesh
system = sys.argv[1]
shape = SYSTEMS[system].mesh_shapes[0]
t = time.time()
if shape == (1, 1):
    d, close = open_mock_device(system), ttnn.close_device
else:
    d, close = open_mock_mesh(shape, system=system), ttnn.close_mesh_device
g = d.compute_with_storage_grid_size()
mesh = "" if shape == (1, 1) else f"{shape[0]}x{shape[1]} mesh, "
print(f"mock {system.upper()} open: {mesh}grid {g.x}x{g.y} in {time.time() - t:.2f} s")
close(d)
"""


def _cmd_check(args: argparse.Namespace) -> int:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(_CHECK)
    try:
        r = run_script([f.name, args.system], system=args.system, timeout=args.timeout, capture=True)
    finally:
        os.unlink(f.name)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
    return r.returncode


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: subcommands env, run and check (in ``parser.subcommands``)."""
    p = argparse.ArgumentParser(prog="python -m ttdecode.testing.mock",
                                description="A mock Wormhole (N150, N300, T3K, Galaxy) through the real ttnn 0.81.1: "
                                            "tt-metal's host side and JIT, no chip. Device writes go nowhere and "
                                            "reads return zeros. tt-metal's log is kept to errors unless "
                                            "TT_LOGGER_LEVEL is set (e.g. TT_LOGGER_LEVEL=info).")
    systems = sorted(SYSTEMS)
    system_help = ("mock cluster: " + ", ".join(f"{s.name} ({s.chips} chip{'s' if s.chips > 1 else ''})"
                                                for s in SYSTEMS.values()) + " (default: n150)")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("env", help="print the export lines of the mock environment")
    e.add_argument("--system", default="n150", choices=systems, help=system_help)
    e.add_argument("--jit-log", default=None,
                   help="file the stand-in compiler logs every call to, JSON lines (default: none)")
    e.set_defaults(fn=_cmd_env)
    r = sub.add_parser("run", help="run a Python script on the mock (temp cwd, timeout)")
    r.add_argument("--system", default="n150", choices=systems, help=system_help)
    r.add_argument("--timeout", type=float, default=900,
                   help="seconds before the script's process group is killed, exit 124 (default: 900)")
    r.add_argument("--jit-log", default=None,
                   help="file the stand-in compiler logs every call to, JSON lines (default: none)")
    r.add_argument("--cwd", default=None, help="working directory (default: a fresh temp dir)")
    r.add_argument("script", help="the Python script to run")
    r.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    r.set_defaults(fn=_cmd_run)
    c = sub.add_parser("check", help="open the mock system (N150, Galaxy chip: a device; N300, T3K, whole Galaxy: a mesh) and "
                                     "print its grid")
    c.add_argument("--system", default="n150", choices=systems, help=system_help)
    c.add_argument("--timeout", type=float, default=300,
                   help="seconds before the check's process is killed (default: 300)")
    c.set_defaults(fn=_cmd_check)
    p.subcommands = sub  # type: ignore[attr-defined]
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line (`python -m ttdecode.testing.mock --help`); exit 2 when the mock is unavailable."""
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except MockUnavailable as exc:
        print(f"mock unavailable: {exc}", file=sys.stderr)
        return 2
    except subprocess.TimeoutExpired as exc:
        print(f"mock {args.cmd}: timed out after {exc.timeout} s (killed)", file=sys.stderr)
        return 124


if __name__ == "__main__":
    sys.exit(main())
