"""What one decode step asks of ttnn, as ttnn's own graph capture records it.

`capture_step(fn)` runs ``fn()`` under ``ttnn.graph.begin_graph_capture(RunMode.NORMAL)`` and sums up
the captured graph (`StepGraph`): the device operations it issued and whether each was a program-cache
hit, the device buffers it allocated and freed, and every host<->device move ttnn performed (its
``Tensor::to_device``, ``Tensor::cpu``, ``copy_to_device`` / ``copy_to_host`` nodes, wherever they were
called from). These are the preconditions of capturing the step in a trace (``ttnn.begin_trace_capture``):
the same programs every step (all cache hits), no data between host and device, and nothing allocated
but the step's outputs. The witness is ttnn itself, not a wrapper of our making, so a move hidden inside
another ttnn call is seen too. Runs on the mock Wormhole (`ttdecode.testing.mock`) or a real device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: Graph nodes (function names) that move tensor data between host and device.
MOVE_FUNCTIONS = ("Tensor::to_device", "Tensor::cpu", "tt::tt_metal::copy_to_device",
                  "tt::tt_metal::copy_to_host")


@dataclass
class StepGraph:
    """One captured step: ``device_ops`` (name, program-cache hit) in issue order, ``allocations`` and
    ``deallocations`` (buffer type, bytes), ``moves`` (names from `MOVE_FUNCTIONS`), ``calls`` (the
    top-level ttnn functions called, in order) and ``result`` (what ``fn`` returned)."""

    device_ops: list[tuple[str, bool]] = field(default_factory=list)
    allocations: list[tuple[str, int]] = field(default_factory=list)
    deallocations: list[tuple[str, int]] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    result: Any = None

    def misses(self) -> list[str]:
        """Device operations of the step that built a program (a program-cache miss)."""
        return [name for name, hit in self.device_ops if not hit]

    def to_json(self) -> dict:
        return {"device_ops": self.device_ops, "allocations": self.allocations,
                "deallocations": self.deallocations, "moves": self.moves, "calls": self.calls}


def summarize(graph: list[dict]) -> StepGraph:
    """A `StepGraph` of the node list ``ttnn.graph.end_graph_capture()`` returns."""
    out = StepGraph()
    depth = 0
    for node in graph:
        kind = node.get("node_type")
        params = node.get("params") or {}
        name = params.get("name", "")
        if kind == "function_start":
            if depth == 0:
                out.calls.append(name)
            depth += 1
            if "program_cache_hit" in params:
                out.device_ops.append((name, params["program_cache_hit"] in (True, "true", "1", 1)))
            if name in MOVE_FUNCTIONS:
                out.moves.append(name)
        elif kind == "function_end":
            depth -= 1
        elif kind == "buffer_allocate":
            out.allocations.append((str(params.get("type")), int(params.get("size", 0))))
        elif kind == "buffer_deallocate":
            out.deallocations.append((str(params.get("type")), int(params.get("size", 0))))
    return out


def capture_step(fn: Callable[[], Any]) -> StepGraph:
    """Run ``fn()`` once under ttnn's graph capture (normal run mode: it really runs) and sum it up."""
    import ttnn

    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    try:
        result = fn()
    finally:
        graph = ttnn.graph.end_graph_capture()
    step = summarize(graph)
    step.result = result
    return step
