"""The package's imports run one way: no circle, and no arrow from a lower room up to a higher one.

Every import statement counts, those inside functions too (a lazy import is still an arrow). The rooms,
lowest first (tech_report/architecture.md draws them); a module may import its own room and the rooms
below it, never a room beside or above it (``ops.combine`` may not import ``ops.flash_decode``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Iterator

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ttdecode"

#: Rooms in layers, lowest first. A room is a module or a package prefix.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ttdecode.core.formats", "ttdecode.core.paths", "ttdecode.reference", "ttdecode.accuracy", "ttdecode.ttnn_env"),
    ("ttdecode.core.program_description", "ttdecode.core.tensor"),
    ("ttdecode.core.split", "ttdecode.core.checks", "ttdecode.core.noc_geometry"),
    ("ttdecode.core",),  # the package's docstring only
    ("ttdecode.config",),
    # the ttnn backend's modules, one way: descriptors, then tensors, then launches; the package's API on top
    ("ttdecode.ttnn_backend.descriptor", "ttdecode.ttnn_backend.step_cache"),
    ("ttdecode.ttnn_backend.tensors",),
    ("ttdecode.ttnn_backend.launching", "ttdecode.ttnn_backend.prepared"),
    ("ttdecode.runtime", "ttdecode.ttnn_backend"),
    # the perf model, bottom up: constants; the evaluator; closed-form op counts; the counters' reading, the
    # pricing of a split candidate and tt-metal's structure (each over the ones below); never the planner
    ("ttdecode.perf_model.constants",),
    ("ttdecode.perf_model.pipeline",),
    ("ttdecode.perf_model.evaluator",),
    ("ttdecode.perf_model.op_counts",),
    ("ttdecode.perf_model.counters", "ttdecode.perf_model.ttmetal_structure", "ttdecode.perf_model.bank_paged"),
    ("ttdecode.perf_model.pricing",),
    ("ttdecode.perf_model", "ttdecode.backend", "ttdecode.testing", "ttdecode.kv_pool"),
    ("ttdecode.ops.cache_write",),  # what the cache-writing operators share
    ("ttdecode.ops.flash_decode", "ttdecode.ops.combine", "ttdecode.ops.rotary_append",
     "ttdecode.ops.paged_fill", "ttdecode.ops.paged_update"),
    ("ttdecode.api",),
    ("ttdecode.patch",),  # ttnn's decode-attention ops routed to the public API
    ("ttdecode.distributed",),
    ("ttdecode.models",),
    ("ttdecode.demo", "ttdecode.hwcheck"),  # the hardware check runs every operator
    ("ttdecode.__main__",),
    ("ttdecode",),  # the package's public face (ttdecode/__init__.py) is the top: nothing inside imports it
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def room_of(module: str) -> tuple[int, str]:
    """(layer, room) of a module: the longest room name that is the module or a package prefix of it."""
    best = None
    for layer, rooms in enumerate(LAYERS):
        for room in rooms:
            if (module == room or module.startswith(room + ".")) and (best is None or len(room) > len(best[1])):
                best = (layer, room)
    if best is None:
        raise AssertionError(f"{module} is in no room of tests/test_imports.py LAYERS: add it where it belongs")
    return best


def imports_of(module: str, nodes: Iterable[ast.AST] | None = None) -> set[str]:
    """The package modules `module` imports (`from ttdecode import x` counts ttdecode.x when x is a module,
    else the package ttdecode itself); ``nodes``: the statements to read (default: the whole module)."""
    path = MODULES[module]
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    if nodes is None:
        nodes = ast.walk(ast.parse(path.read_text(), str(path)))
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in MODULES else origin for a in node.names]
        else:
            continue
        for t in targets:
            if t.startswith("ttdecode.kernels"):
                continue
            # `import ttdecode.x.y` reaches ttdecode.x.y; keep the deepest package module named
            while t and t not in MODULES and "." in t:
                t = t.rsplit(".", 1)[0]
            if t.startswith("ttdecode.kernels"):  # the kernel sources' folder, package data
                continue
            if t in MODULES and t != module:
                out.add(t)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}

#: Function-level imports of a module from another room, each with its reason. A lazy import is allowed only
#: to keep a light importer light (the CLI's ``--help`` imports no torch) or to read a name tests patch in
#: its home module at call time; never to dodge an import circle (move the shared thing down instead).
ALLOWED_LAZY: dict[tuple[str, str], str] = {
    ("ttdecode.__main__", "ttdecode.core.formats"): "imports torch; `python -m ttdecode --help` must not",
    ("ttdecode.__main__", "ttdecode.core.tensor"): "imports torch; `python -m ttdecode --help` must not",
    ("ttdecode.__main__", "ttdecode.ops.flash_decode.plan"): "imports torch; `python -m ttdecode --help` must not",
    ("ttdecode.__main__", "ttdecode.api"): "imports torch; `python -m ttdecode --help` must not",
    ("ttdecode.__main__", "ttdecode.demo"): "imports torch; `python -m ttdecode --help` must not",
    ("ttdecode.config", "ttdecode.core.split"): "imports torch; the CLI reads config for `--help`",
    ("ttdecode.models.cli", "ttdecode.core.formats"): "imports torch; `python -m ttdecode llama --help` must not",
    ("ttdecode.distributed.context", "ttdecode.api"): "tests patch api.run_host and api.decode; read at call time",
    ("ttdecode.distributed.device_combine", "ttdecode.ttnn_env"):
        "tests patch ttnn_env.has_tenstorrent_device; read at call time",
    ("ttdecode.distributed.mesh_decode", "ttdecode.ttnn_env"):
        "tests patch ttnn_env.has_tenstorrent_device; read at call time",
    ("ttdecode.models.llama", "ttdecode.ttnn_env"): "tests patch ttnn_env.has_tenstorrent_device; read at call time",
    ("ttdecode.ops.rotary_append.op", "ttdecode.ttnn_env"):
        "tests patch ttnn_env.has_tenstorrent_device; read at call time",
}


def function_bodies(module: str) -> Iterator[ast.AST]:
    """The statements inside the functions (and methods) of `module`."""
    path = MODULES[module]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in node.body:
                yield from ast.walk(stmt)


LAZY = {m: imports_of(m, function_bodies(m)) for m in MODULES}


def test_every_module_sits_in_a_room() -> None:
    for m in MODULES:
        room_of(m)


def test_no_arrow_runs_up_or_sideways() -> None:
    bad = []
    for m, targets in GRAPH.items():
        layer, room = room_of(m)
        for t in sorted(targets):
            t_layer, t_room = room_of(t)
            if t_room != room and t_layer >= layer:
                bad.append(f"{m} ({room}) imports {t} ({t_room})")
    assert not bad, "imports against the rooms' order:\n" + "\n".join(bad)


def test_no_import_circle() -> None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t):] + [t]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_the_checker_sees_a_circle_and_an_upward_arrow(tmp_path: Path) -> None:
    """The rules above are not vacuous: the graph has arrows, and a lower room importing a higher one is
    caught (ttdecode.core.program_description -> ttdecode.ops.flash_decode.plan would be)."""
    assert sum(len(v) for v in GRAPH.values()) > 50
    assert room_of("ttdecode.core.program_description")[0] < room_of("ttdecode.ops.flash_decode.plan")[0]
    assert "ttdecode.core.split" in GRAPH["ttdecode.perf_model.counters"]
    assert "ttdecode.perf_model.pricing" in GRAPH["ttdecode.ops.flash_decode.plan.split_choices"]
    assert room_of("ttdecode.perf_model.pricing")[0] < room_of("ttdecode.ops.flash_decode.plan.split_choices")[0]
    for m in GRAPH:
        if m.startswith("ttdecode.perf_model"):
            assert not any(t.startswith("ttdecode.ops.flash_decode.plan") for t in GRAPH[m]), m


def test_a_lazy_import_of_another_room_is_listed_with_its_reason() -> None:
    bad = []
    for m, targets in LAZY.items():
        for t in sorted(targets):
            if room_of(t)[1] != room_of(m)[1] and (m, t) not in ALLOWED_LAZY:
                bad.append(f"{m} imports {t} inside a function")
    assert not bad, ("move these imports to the module's top, or list them in ALLOWED_LAZY with the reason "
                     "(never an import circle):\n" + "\n".join(bad))


def test_every_allowed_lazy_import_still_exists() -> None:
    stale = [f"{m} -> {t}" for m, t in ALLOWED_LAZY if t not in LAZY.get(m, set()) or room_of(m)[1] == room_of(t)[1]]
    assert not stale, "ALLOWED_LAZY entries no function-level import needs any more:\n" + "\n".join(stale)
    assert all(reason.strip() for reason in ALLOWED_LAZY.values())
