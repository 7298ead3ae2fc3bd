"""The combine's plan: the tile rows dealt over the cores and the circular buffers (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.program_description import (
    L1_BYTES_PER_CORE,
    CoreCoord,
)
from ttdecode.ops.combine.validate import CombineError, O_FORMATS, _positive_int

TILE = 32
#: The compute grid of an N150 (8 x 8): cores are taken row by row.
GRID = (8, 8)

#: (name, index) of the program's circular buffers (kernels/combine/cbs.hpp).
COMBINE_CBS = (("lse_in", 0), ("o_in", 1), ("consts", 2), ("max_a", 3), ("max_b", 4), ("sum_a", 5), ("sum_b", 6),
               ("acc_a", 7), ("acc_b", 8), ("alpha", 9), ("out", 10), ("lse_out", 11))


@dataclass(frozen=True)
class CBPlan:
    """One circular buffer of the combine program."""

    name: str
    index: int
    data_format: DataType
    num_pages: int

    @property
    def page_size(self) -> int:
        return formats.tile_size(self.data_format)

    @property
    def total_size(self) -> int:
        return self.page_size * self.num_pages


@dataclass(frozen=True)
class CombinePlan:
    """The combine of ``partials`` results ``[G, H, Dv]`` on ``len(core_rows)`` cores.

    ``core_rows[c] = (first tile row, tile rows)`` of core c (cores in row-major order of the grid).
    """

    partials: int
    groups: int
    heads: int
    head_dim_v: int
    in_dtype: DataType
    out_dtype: DataType
    core_rows: tuple[tuple[int, int], ...]
    circular_buffers: tuple[CBPlan, ...] = field(repr=False)

    @property
    def head_tiles(self) -> int:
        return -(-self.heads // TILE)

    @property
    def tile_rows(self) -> int:
        return self.groups * self.head_tiles

    @property
    def dv_tiles(self) -> int:
        return self.head_dim_v // TILE

    @property
    def cores(self) -> list[CoreCoord]:
        return [CoreCoord(c % GRID[0], c // GRID[0]) for c in range(len(self.core_rows))]

    @property
    def l1_bytes_per_core(self) -> int:
        return sum(cb.total_size for cb in self.circular_buffers)


def make_combine_plan(*, partials: int, groups: int, heads: int, head_dim_v: int,
                      in_dtype: DataType = DataType.bfloat16, out_dtype: DataType = DataType.bfloat16,
                      max_cores: int = GRID[0] * GRID[1]) -> CombinePlan:
    """The plan of a combine of ``partials`` results ``[groups, heads, head_dim_v]``.

    ``in_dtype`` / ``out_dtype``: bfloat16 or float32 tiles of the partial / merged outputs;
    ``max_cores``: at most this many cores of the 8 x 8 grid (one tile row each at least). Checks the
    L1 use of a core here, at plan time.
    """
    partials = _positive_int("partials", partials)
    groups = _positive_int("groups", groups)
    heads = _positive_int("heads", heads)
    head_dim_v = _positive_int("head_dim_v", head_dim_v)
    max_cores = _positive_int("max_cores", max_cores)
    if head_dim_v % TILE:
        raise CombineError(f"head_dim_v: expected a multiple of {TILE} (whole O tiles), got {head_dim_v}")
    for name, dt in (("in_dtype", in_dtype), ("out_dtype", out_dtype)):
        if dt not in O_FORMATS:
            raise CombineError(f"{name}: expected one of {[d.value for d in O_FORMATS]}, got {getattr(dt, 'value', dt)!r}")
    if max_cores > GRID[0] * GRID[1]:
        raise CombineError(f"max_cores: expected at most {GRID[0] * GRID[1]} (the {GRID[0]}x{GRID[1]} grid), got {max_cores}")
    rows = groups * -(-heads // TILE)
    cores = min(rows, max_cores)
    base, extra = divmod(rows, cores)
    core_rows, first = [], 0
    for c in range(cores):
        n = base + (1 if c < extra else 0)
        core_rows.append((first, n))
        first += n
    dv = head_dim_v // TILE
    f32 = DataType.float32
    cbs = (
        CBPlan("lse_in", 0, f32, 2),
        CBPlan("o_in", 1, in_dtype, 2 * dv),
        CBPlan("consts", 2, DataType.bfloat16, 2),
        CBPlan("max_a", 3, f32, 1), CBPlan("max_b", 4, f32, 1),
        CBPlan("sum_a", 5, f32, 1), CBPlan("sum_b", 6, f32, 1),
        CBPlan("acc_a", 7, f32, dv), CBPlan("acc_b", 8, f32, dv),
        CBPlan("alpha", 9, f32, 2),
        CBPlan("out", 10, out_dtype, dv),
        CBPlan("lse_out", 11, f32, 1),
    )
    assert tuple((cb.name, cb.index) for cb in cbs) == COMBINE_CBS
    plan = CombinePlan(partials, groups, heads, head_dim_v, in_dtype, out_dtype, tuple(core_rows), cbs)
    if plan.l1_bytes_per_core > L1_BYTES_PER_CORE:
        raise CombineError(f"head_dim_v: {head_dim_v} needs {plan.l1_bytes_per_core} B of CBs per core, "
                           f"L1 holds {L1_BYTES_PER_CORE} B")
    return plan
