"""paged_update_cache on a Wormhole: plan once per shape, run per call.

An `UpdateStep` is made once per *shape* -- the device, the grid, the cache's shape, format and pages
(kv_pages), B, paged or not and the page table's width, the tensors' layouts and memory configs --
never the positions, the page table's contents or the rows. It holds the `Program` and its ttnn
descriptor (`PreparedProgram`); each call checks tensor metadata, patches the buffer addresses and
calls ``ttnn.generic_op``. Positions and a page table given as int32 ROW_MAJOR device tensors are used
where they lie; host values are uploaded (one move each). New rows height-sharded in L1 with whole tile
rows a shard (``ttnn.experimental.nlp_create_qkv_heads_decode``'s placement: each user's NKV heads,
padded to 32 rows, on one core) are read where they lie, from their holders' L1; rows held any other
way but interleaved DRAM are copied there by ``ttnn.to_memory_config`` before the program (a device op)
and that copy deallocated after it.
"""

from __future__ import annotations

from typing import Any

from ttdecode.core.formats import num_tiles
from ttdecode.ops.cache_write import check_on_device, tensor_key, upload_ints
from ttdecode.ops.paged_update.program_factory import RowShards, build_program
from ttdecode.ops.paged_update.validate import UpdateInputs
from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.ttnn_backend.step_cache import StepCache
from ttdecode.ttnn_backend.tensors import l1_shards
from ttdecode.ttnn_env import require_ttnn

__all__ = ["UpdateStep", "run_update", "clear_steps", "cached_steps", "STEP_CACHE_SIZE"]

#: Shapes whose steps `run_update` keeps (a model has a handful: K and V of each layer kind and batch).
STEP_CACHE_SIZE = 16

_steps = StepCache(STEP_CACHE_SIZE)  # step_key -> UpdateStep


def step_key(inp: UpdateInputs, grid: tuple[int, int], device: Any) -> tuple:
    """The cache key of a call: what the program depends on; never positions or the table's values."""
    return (id(device), grid, inp.cache_shape, inp.cache_dtype, inp.kv_pages, inp.batch, inp.paged, inp.max_blocks,
            tensor_key(inp.cache), tensor_key(inp.rows))


def _in_dram(ttnn: Any, t: Any, temporaries: list[Any]) -> Any:
    """`t` in interleaved DRAM: itself, or a ``ttnn.to_memory_config`` copy kept in `temporaries`."""
    mem = t.memory_config()
    if mem.buffer_type == ttnn.BufferType.DRAM and mem.memory_layout == ttnn.TensorMemoryLayout.INTERLEAVED:
        return t
    moved = ttnn.to_memory_config(t, ttnn.DRAM_MEMORY_CONFIG)
    temporaries.append(moved)
    return moved


def rows_shards_of(ttnn: Any, inp: UpdateInputs) -> RowShards:
    """Where the reader reads device rows in place: height-sharded in L1, ROW_MAJOR, whole tile rows of
    D columns a shard -> (holders in shard order, tiles per shard); otherwise None (moved to DRAM)."""
    found = l1_shards(ttnn, inp.rows.memory_config(), inp.head_dim)
    if found is None:
        return None
    holders, rows = found
    pages = rows * inp.d_tiles
    if -(-num_tiles((1, inp.batch, inp.num_kv_heads, inp.head_dim)) // pages) > len(holders):
        return None
    return holders, pages


class UpdateStep:
    """paged_update_cache planned once for one shape on one device, run per call (module doc)."""

    def __init__(self, inp: UpdateInputs, grid: tuple[int, int], device: Any) -> None:
        self.device = device
        self.rows_shards = rows_shards_of(require_ttnn(), inp)
        self.program = build_program(inp, None, grid, self.rows_shards)
        self.prepared = PreparedProgram(self.program, device)
        self.calls = 0

    def _ints(self, inp: UpdateInputs, name: str, host: Any) -> Any:
        """A device int tensor of the call as it is, or the host value uploaded (int32 ROW_MAJOR)."""
        if name in inp.device_args:
            return inp.device_args[name]
        return upload_ints(require_ttnn(), host, self.device)

    def run(self, inp: UpdateInputs) -> None:
        """Write `inp`'s rows into its cache in place."""
        ttnn = require_ttnn()
        temporaries: list[Any] = []
        rows = inp.rows if self.rows_shards is not None else _in_dram(ttnn, inp.rows, temporaries)
        io = {"rows": rows, "cur_pos": self._ints(inp, "cur_pos", inp.positions),
              "cache": inp.cache}
        if inp.paged:
            io["page_table"] = self._ints(inp, "page_table", inp.page_table)
        check_on_device(io, self.device, "the cache's")
        self.prepared.run(io)
        for t in temporaries:
            ttnn.deallocate(t)
        self.calls += 1


def run_update(inp: UpdateInputs, grid: tuple[int, int]) -> None:
    """paged_update_cache on the device holding `inp`'s tensors, through the cached step of its shape."""
    device = inp.cache.device()
    _steps.get_or_make(step_key(inp, grid, device), lambda: UpdateStep(inp, grid, device)).run(inp)


def clear_steps() -> None:
    """Forget every cached step."""
    _steps.clear()


def cached_steps() -> int:
    """How many update steps are cached."""
    return len(_steps)
