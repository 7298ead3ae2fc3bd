"""paged_fill_cache on a Wormhole: plan once per shape, run per call.

A `FillStep` is made once per *shape* -- the device, the grid, the pool's shape, format and pages
(kv_pages), the prompt's length S, the page table's shape -- never the user (batch_idx) or the
page table's contents. It holds the `Program` and its ttnn descriptor (`PreparedProgram`); each call
checks tensor metadata, patches the buffer addresses and the user (the writer's common runtime arg
`USER_ARG`) and calls ``ttnn.generic_op``. A prompt length the step cache has not seen builds a new
step (a model that pads its prompts to a few lengths builds a few). A host page table (torch) is
uploaded, one move per call; a device one (int32 ROW_MAJOR) is used where it lies.
"""

from __future__ import annotations

from typing import Any

from ttdecode.ops.cache_write import check_on_device, tensor_key, upload_ints
from ttdecode.ops.paged_fill.program_factory import USER_ARG, build_program
from ttdecode.ops.paged_fill.validate import FillInputs
from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.ttnn_backend.step_cache import StepCache
from ttdecode.ttnn_env import require_ttnn

__all__ = ["FillStep", "run_fill", "clear_steps", "cached_steps", "STEP_CACHE_SIZE"]

#: Shapes whose steps `run_fill` keeps (one per padded prompt length a model uses).
STEP_CACHE_SIZE = 16

_steps = StepCache(STEP_CACHE_SIZE)  # step_key -> FillStep


def step_key(inp: FillInputs, grid: tuple[int, int], device: Any) -> tuple:
    """The cache key of a call: what the program depends on; never the user or the table's values."""
    return (id(device), grid, inp.cache_shape, inp.cache_dtype, inp.kv_pages, inp.fill_len, inp.batch,
            inp.max_blocks, tensor_key(inp.cache), tensor_key(inp.fill))


class FillStep:
    """paged_fill_cache planned once for one shape on one device, run per call (module doc)."""

    def __init__(self, inp: FillInputs, grid: tuple[int, int], device: Any) -> None:
        self.device = device
        self.program = build_program(inp, None, grid)
        self.prepared = PreparedProgram(self.program, device)
        self.calls = 0

    def run(self, inp: FillInputs) -> None:
        """Fill `inp`'s pool in place for `inp`'s user."""
        ttnn = require_ttnn()
        table = inp.device_args.get("page_table")
        if table is None:
            table = upload_ints(ttnn, inp.page_table, self.device)
        io = {"input": inp.fill, "page_table": table, "cache": inp.cache}
        check_on_device(io, self.device, "the pool's")
        self.prepared.run(io, common_args={"fill_writer": {USER_ARG: inp.batch_idx}})
        self.calls += 1


def run_fill(inp: FillInputs, grid: tuple[int, int]) -> None:
    """paged_fill_cache on the device holding `inp`'s tensors, through the cached step of its shape."""
    device = inp.cache.device()
    _steps.get_or_make(step_key(inp, grid, device), lambda: FillStep(inp, grid, device)).run(inp)


def clear_steps() -> None:
    """Forget every cached step."""
    _steps.clear()


def cached_steps() -> int:
    """How many fill steps are cached."""
    return len(_steps)
