"""Compiling the runner executable and the kernel libraries, cached by content hash.

Cache: ``$TTDECODE_CACHE`` or ``~/.cache/ttdecode``, subdirectory ``runtime/``. A kernel library's key
covers the wrapper and configuration sources, the kernel file and every file in its directory, the
runtime API headers, compile-time args, defines and the compiler's identity, so a second run with the
same inputs reuses the library and compiles nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC_DIR = HERE / "src"
INCLUDE_DIR = HERE / "include"

RUNNER_FLAGS = ["-std=c++17", "-O3", "-ffp-contract=off", "-g0", "-pthread", "-rdynamic", "-Wall", "-Wno-unused-function"]
# -fno-gnu-unique: inline variables must stay private to each loaded copy of a kernel (one per core).
KERNEL_FLAGS = ["-std=c++17", "-O2", "-g0", "-fPIC", "-shared", "-fno-gnu-unique", "-Wl,-Bsymbolic",
                "-Wno-deprecated-declarations"]


class CompilerNotFound(RuntimeError):
    pass


class KernelCompileError(RuntimeError):
    """A kernel source did not compile against the runtime's API headers."""


def cache_dir() -> Path:
    root = os.environ.get("TTDECODE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ttdecode")
    d = os.path.join(root, "runtime")
    os.makedirs(d, exist_ok=True)
    return Path(d)


@lru_cache(maxsize=None)
def _compiler_for(cxx_env: str | None) -> tuple[str, str]:
    candidates = [cxx_env] if cxx_env else ["g++", "clang++", "clang++-19", "c++"]
    for c in candidates:
        path = shutil.which(c) if c else None
        if path:
            try:
                ver = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            return path, ver.splitlines()[0] if ver else path
    if cxx_env:
        raise CompilerNotFound(f"$CXX={cxx_env!r} is not an executable C++ compiler")
    raise CompilerNotFound(
        "the ttdecode host runtime needs a C++17 compiler at run time: install g++ or clang++, or set $CXX"
    )


def compiler() -> tuple[str, str]:
    """(path, version line) of the C++ compiler: $CXX, else g++ / clang++ on PATH."""
    return _compiler_for(os.environ.get("CXX"))


def _flags_for(cxx_path: str, flags: list[str]) -> list[str]:
    if "clang" in os.path.basename(cxx_path):
        return [f for f in flags if f != "-fno-gnu-unique"]  # clang never emits GNU unique symbols
    return flags


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()[:24]


def _tree_bytes(root: Path, suffixes: tuple[str, ...]) -> list[bytes]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in suffixes:
            out.append(str(p.relative_to(root)).encode())
            out.append(p.read_bytes())
    return out


@lru_cache(maxsize=64)
def _tree_digest_of(root: Path, suffixes: tuple[str, ...], stamp: tuple) -> bytes:
    return _digest(_tree_bytes(root, suffixes)).encode()


def _tree_digest(root: Path, suffixes: tuple[str, ...]) -> bytes:
    """Digest of the names and contents of the files of `root` with these suffixes.

    Re-read only when a file's name, size or modification time changes (every program start asks for
    the kernel and header trees, and reading them each time was most of a small call's cost).
    """
    stamp: list[tuple[str, int, int]] = []
    _stamp_dir(str(root), suffixes, stamp)
    return _tree_digest_of(root, suffixes, tuple(stamp))


def _stamp_dir(d: str, suffixes: tuple[str, ...], out: list[tuple[str, int, int]]) -> None:
    """(path, mtime, size) of the files of `d` with these suffixes, by name, then its subdirectories
    by name (what os.walk visits, in the same order), with os.scandir: a warm call's cost."""
    files, dirs = [], []
    with os.scandir(d) as it:
        for e in it:
            if e.is_dir(follow_symlinks=False):
                dirs.append(e.path)
            elif os.path.splitext(e.name)[1] in suffixes:
                files.append(e)
    for e in sorted(files, key=lambda e: e.name):
        st = e.stat()
        out.append((e.path, st.st_mtime_ns, st.st_size))
    for sub in sorted(dirs):
        _stamp_dir(sub, suffixes, out)


class _Lock:
    """An exclusive file lock, so concurrent processes do not build the same artefact twice."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.f = open(self.path, "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _run_compiler(cmd: list[str], what: str, exc=RuntimeError) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise exc(f"compiling {what} failed:\n{' '.join(cmd)}\n{p.stderr.strip()}")


_runner_lock = threading.Lock()


def build_runner() -> tuple[Path, bool]:
    """Path of the runner executable (building it on first use); True if it was built now."""
    cxx, version = compiler()
    key = _digest([version.encode(), " ".join(RUNNER_FLAGS).encode(), _tree_digest(SRC_DIR, (".cpp", ".hpp", ".h"))])
    out = cache_dir() / f"runner-{key}" / "ttrt_runner"
    with _runner_lock:
        if out.exists():
            return out, False
        out.parent.mkdir(parents=True, exist_ok=True)
        with _Lock(out.parent / ".lock"):
            if out.exists():
                return out, False
            tmp = out.with_suffix(".tmp")
            sources = sorted(SRC_DIR.glob("*.cpp"))
            cmd = [cxx, *_flags_for(cxx, RUNNER_FLAGS), "-I", str(SRC_DIR), *map(str, sources), "-o", str(tmp), "-ldl"]
            _run_compiler(cmd, "the ttdecode runner")
            os.replace(tmp, out)
    return out, True


@dataclass(frozen=True)
class KernelBuild:
    """Everything that determines one kernel library."""

    source: Path
    compile_time_args: tuple[int, ...]
    defines: tuple[tuple[str, str], ...]
    config_header: str  # ttrt_kernel_config.h
    label: str          # for messages: kernel name and kind
    named_compile_time_args: tuple[tuple[str, int], ...] = ()  # get_named_compile_time_arg_val

    def wrapper(self) -> str:
        return (f'#include "{self.source}"\n'
                'extern "C" __attribute__((visibility("default"))) void ttrt_kernel_entry() { kernel_main(); }\n')

    def key(self, version: str, trees: dict[Path, bytes]) -> str:
        """Cache key; `trees` maps the kernel's source tree (`source_tree`) and INCLUDE_DIR to their
        `_tree_digest`."""
        parts = [version.encode(), " ".join(KERNEL_FLAGS).encode(), self.wrapper().encode(),
                 self.config_header.encode(), repr(self.compile_time_args).encode(), repr(self.defines).encode(),
                 repr(self.named_compile_time_args).encode(),
                 trees[source_tree(self.source)], trees[INCLUDE_DIR]]
        return _digest(parts)


def source_tree(source: Path) -> Path:
    """The directory whose files a kernel may include: the nearest enclosing `kernels` directory (a
    kernel in kernels/combine/ includes ../shared/tile_layout.hpp), else the source's own directory."""
    for p in source.parents:
        if p.name == "kernels":
            return p
    return source.parent


def _build_one(kb: KernelBuild, cxx: str, out: Path) -> tuple[Path, bool]:
    if out.exists():
        return out, False
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ttrt-build-") as tmp:
        t = Path(tmp)
        (t / "ttrt_kernel_config.h").write_text(kb.config_header)
        (t / "wrapper.cpp").write_text(kb.wrapper())
        args = ",".join(str(int(a) & 0xFFFFFFFF) for a in kb.compile_time_args)
        cmd = [cxx, *_flags_for(cxx, KERNEL_FLAGS), "-I", str(INCLUDE_DIR), "-I", str(t), "-I", str(kb.source.parent),
               f"-DKERNEL_COMPILE_TIME_ARGS={args}"]
        if kb.named_compile_time_args:  # tt-metal's form: {"name",value},...
            pairs = ",".join(f'{{"{n}",{int(v) & 0xFFFFFFFF}}}' for n, v in kb.named_compile_time_args)
            cmd.append(f"-DKERNEL_COMPILE_TIME_ARG_MAP={pairs}")
        cmd += [f"-D{k}={v}" if v != "" else f"-D{k}" for k, v in kb.defines]
        cmd += [str(t / "wrapper.cpp"), "-o", str(t / "k.so")]
        _run_compiler(cmd, f"{kb.label} ({kb.source})", KernelCompileError)
        tmp_out = out.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(t / "k.so", tmp_out)
        os.replace(tmp_out, out)
    return out, True


def build_kernels(builds: list[KernelBuild]) -> tuple[list[Path], int]:
    """Library paths for `builds` (same order) and how many had to be compiled."""
    cxx, version = compiler()
    unique = list(dict.fromkeys(builds))
    trees = {INCLUDE_DIR: _tree_digest(INCLUDE_DIR, (".h", ".hpp"))}
    for kb in unique:
        root = source_tree(kb.source)
        if root not in trees:
            trees[root] = _tree_digest(root, (".cpp", ".hpp", ".h", ".inc"))
    outs = {kb: cache_dir() / "kernels" / f"{kb.source.stem}-{kb.key(version, trees)}.so" for kb in unique}
    missing = [kb for kb in unique if not outs[kb].exists()]
    if missing:  # compile in parallel only when something is missing (the warm case needs no pool)
        workers = max(1, min(len(missing), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda kb: _build_one(kb, cxx, outs[kb]), missing))
    results = [(outs[kb], kb in missing) for kb in unique]
    paths = {kb: r[0] for kb, r in zip(unique, results)}
    return [paths[kb] for kb in builds], sum(1 for r in results if r[1])
