"""The combine program: n partial attention results merged exactly by their LSE, as a Metalium program.

Context parallelism (``ttdecode.distributed.context``) leaves every device with a partial output
(normalized over its keys) and the LSE of every (user, head) row. This module describes the program
that merges them on one device (``kernels/combine/{reader,compute,writer}.cpp``): the online-softmax
merge of the FlashDecode tree, in fp32 on the SFPU (see the header of ``kernels/combine/compute.cpp``).
One :class:`CombinePlan` feeds both backends: :func:`build_combine_program` carries the input bytes
for the host runtime, :func:`build_combine_program_for_device` leaves them to the device, where
``ttdecode.device`` turns the same ``Program`` into ttnn descriptors.

DRAM tensors (tile layout, interleaved; G groups of H rows, e.g. G = B users of H = NH heads):

==========  ====================  ================================  ===============================
name        shape                 format                            what
==========  ====================  ================================  ===============================
outs        [n, G, H, Dv]         bfloat16 or float32 (in_dtype)    the n normalized partials
lses        [n, G, H, 1]          float32 (the value in column 0)   their LSEs (-inf: no key)
out         [1, G, H, Dv]         bfloat16 or float32 (out_dtype)   merged output (output)
lse         [1, G, H, 1]          float32                           merged LSE (output)
==========  ====================  ================================  ===============================

These are the shapes ``ttnn.all_gather(.., dim=0)`` makes from the per-device ``[1, B, NH, Dv]`` and
``[1, B, NH, 1]`` tensors. Work: the ``T = G * ceil(H / 32)`` tile rows are dealt to the cores in
contiguous runs (the first ``T % cores`` one more); a row's result does not depend on the others.

Runtime args per core: reader (outs, lses addresses, first tile row, tile rows), writer (out, lse
addresses, first tile row, tile rows), compute (tile rows).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from ttdecode import formats
from ttdecode.formats import DataType
from ttdecode.program import (
    L1_BYTES_PER_CORE,
    BufferAddress,
    CircularBuffer,
    ComputeSettings,
    CoreCoord,
    CoreRangeSet,
    DramTensor,
    Kernel,
    KernelKind,
    Program,
    unpack_to_dest_modes,
)
from ttdecode.tensor import from_torch

__all__ = ["CombineError", "CombinePlan", "CombineOps", "make_combine_plan", "build_combine_program",
           "build_combine_program_for_device", "run_combine", "combine_kernel_sources", "combine_op_counts",
           "COMBINE_CBS"]

TILE = 32
#: Formats the kernels take for the partial outputs and give the merged output.
O_FORMATS = (DataType.bfloat16, DataType.float32)
#: The most negative finite bf16 (0xFF7F): the floor of the kernel's running max (kernels/combine/cbs.hpp).
NEG_BIG = -(2.0 - 2.0 ** -7) * 2.0 ** 127
#: The compute grid of an N150 (8 x 8): cores are taken row by row.
GRID = (8, 8)
#: The combine's compute settings: fp32 DST (the statistics are fp32 on the SFPU), half-sync (4 tiles).
COMBINE_COMPUTE = ComputeSettings(fp32_dest_acc_en=True, dst_full_sync_en=False)

#: (name, index) of the program's circular buffers (kernels/combine/cbs.hpp).
COMBINE_CBS = (("lse_in", 0), ("o_in", 1), ("consts", 2), ("max_a", 3), ("max_b", 4), ("sum_a", 5), ("sum_b", 6),
               ("acc_a", 7), ("acc_b", 8), ("alpha", 9), ("out", 10), ("lse_out", 11))
#: The CBs the compute kernel reads with copy_tile / unary_bcast from fp32 pages: unpacked straight into
#: the fp32 DST (UnpackToDestFp32). cb_o_in joins them when the partials are float32.
_UNPACK_TO_DEST = ("lse_in", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b", "alpha")


class CombineError(ValueError):
    """Inputs or a plan the combine program cannot take; the message names the argument."""


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


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CombineError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


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


def combine_kernel_sources() -> dict[str, Path]:
    """Paths of kernels/combine/{reader,compute,writer}.cpp (beside the imported package)."""
    from ttdecode.paths import kernels_dir

    root = kernels_dir() / "combine"
    out = {name: root / f"{name}.cpp" for name in ("reader", "writer", "compute")}
    for name, path in out.items():
        if not path.is_file():
            raise CombineError(f"kernel source combine/{name}.cpp not found at {path}")
    return out


def combine_compute_settings(plan: CombinePlan) -> ComputeSettings:
    """The compute kernel's settings: fp32 DST, fp32 CBs read by copies unpacked straight to DST."""
    names = list(_UNPACK_TO_DEST) + (["o_in"] if plan.in_dtype is DataType.float32 else [])
    index = dict(COMBINE_CBS)
    return ComputeSettings(fp32_dest_acc_en=COMBINE_COMPUTE.fp32_dest_acc_en,
                           dst_full_sync_en=COMBINE_COMPUTE.dst_full_sync_en,
                           unpack_to_dest_mode=unpack_to_dest_modes(index[n] for n in names))


def _program(plan: CombinePlan, images: Optional[dict[str, bytes]]) -> Program:
    if not isinstance(plan, CombinePlan):
        raise CombineError(f"plan: expected a CombinePlan (make_combine_plan), got {type(plan).__name__}")
    cores = plan.cores
    core_set = CoreRangeSet.of(cores)
    src = combine_kernel_sources()
    compute = combine_compute_settings(plan)
    value_bytes = {DataType.bfloat16: 2, DataType.float32: 4}
    reader_ct = dict(num_partials=plan.partials, dv_tiles=plan.dv_tiles, tile_rows=plan.tile_rows,
                     head_tiles=plan.head_tiles, heads=plan.heads, o_value_bytes=value_bytes[plan.in_dtype])
    writer_ct = dict(dv_tiles=plan.dv_tiles, out_value_bytes=value_bytes[plan.out_dtype])
    compute_ct = dict(num_partials=plan.partials, dv_tiles=plan.dv_tiles, dst_tiles=compute.dst_tiles)
    rows = dict(zip(cores, plan.core_rows))
    kernels = [
        Kernel("combine_reader", src["reader"], KernelKind.READER, core_set, named_compile_time_args=reader_ct,
               runtime_args={c: [BufferAddress("outs"), BufferAddress("lses"), *rows[c]] for c in cores}),
        Kernel("combine_writer", src["writer"], KernelKind.WRITER, core_set, named_compile_time_args=writer_ct,
               runtime_args={c: [BufferAddress("out"), BufferAddress("lse"), *rows[c]] for c in cores}),
        Kernel("combine_compute", src["compute"], KernelKind.COMPUTE, core_set, named_compile_time_args=compute_ct,
               runtime_args={c: [rows[c][1]] for c in cores}, compute=compute),
    ]
    cbs = [CircularBuffer(cb.index, core_set, cb.data_format, cb.page_size, cb.num_pages) for cb in plan.circular_buffers]
    n, g, h, dv = plan.partials, plan.groups, plan.heads, plan.head_dim_v
    image = (lambda name: None) if images is None else images.__getitem__
    f32 = DataType.float32

    def tensor(name: str, dtype: DataType, shape: tuple[int, ...], output: bool = False) -> DramTensor:
        return DramTensor(name, dtype, formats.tile_size(dtype), formats.num_tiles(shape), shape, "tile",
                          None if output else image(name), is_output=output)

    tensors = [tensor("outs", plan.in_dtype, (n, g, h, dv)), tensor("lses", f32, (n, g, h, 1)),
               tensor("out", plan.out_dtype, (1, g, h, dv), True), tensor("lse", f32, (1, g, h, 1), True)]
    return Program(kernels=kernels, circular_buffers=cbs, semaphores=[], tensors=tensors)


def build_combine_program_for_device(plan: CombinePlan) -> Program:
    """The combine program without input bytes: on a device the partials already live in DRAM."""
    return _program(plan, None)


def _check_partials(outs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``outs [n, G, H, Dv]`` / ``lses [n, G, H]`` checked (floating point, matching shapes, no NaN or
    +inf LSE); 5-D / 4-D ``combine_partials`` shapes ``[n, 1, B, NH, ...]`` are taken too."""
    for arg, t in (("outs", outs), ("lses", lses)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise CombineError(f"{arg}: expected a floating-point torch tensor, got {got}")
    if outs.dim() == 5 and outs.shape[1] == 1:
        outs = outs[:, 0]
    if lses.dim() == 4 and lses.shape[1] == 1:
        lses = lses[:, 0]
    if outs.dim() != 4 or 0 in outs.shape:
        raise CombineError(f"outs: expected shape [n, G, H, Dv] (or [n, 1, B, NH, Dv]), got {list(outs.shape)}")
    if list(lses.shape) != list(outs.shape[:3]):
        raise CombineError(f"lses: expected shape {list(outs.shape[:3])} (outs without Dv), got {list(lses.shape)}")
    bad = torch.isnan(lses) | torch.isposinf(lses)
    if bool(bad.any()):
        at = [int(i) for i in bad.nonzero()[0]]
        raise CombineError(f"lses{at}: expected a finite LSE or -inf (no key), got {float(lses[tuple(at)])}")
    # The kernel's running max starts at the most negative bf16 (-BIG): a finite LSE below it would weigh 0.
    low = torch.isfinite(lses) & (lses.double() < NEG_BIG)
    if bool(low.any()):
        at = [int(i) for i in low.nonzero()[0]]
        raise CombineError(f"lses{at}: expected a finite LSE >= {NEG_BIG:.6g} (the kernel's floor) or -inf, "
                           f"got {float(lses[tuple(at)])}")
    return outs, lses


def build_combine_program(plan: CombinePlan, outs: torch.Tensor, lses: torch.Tensor) -> Program:
    """The combine program carrying its inputs (the host runtime): ``outs [n, G, H, Dv]`` are packed to
    the plan's in_dtype tiles (lossless for values already in that format), ``lses [n, G, H]`` to
    float32 tiles with the value in column 0."""
    outs, lses = _check_partials(outs, lses)
    want = [plan.partials, plan.groups, plan.heads, plan.head_dim_v]
    if list(outs.shape) != want:
        raise CombineError(f"outs: expected shape {want} (from the plan), got {list(outs.shape)}")
    images = {"outs": from_torch(outs.to(torch.float32), plan.in_dtype).data,
              "lses": from_torch(lses.to(torch.float32).unsqueeze(-1), DataType.float32).data}
    return _program(plan, images)


def _decode(plan: CombinePlan, tensors: dict[str, bytes]) -> tuple[torch.Tensor, torch.Tensor]:
    g, h, dv = plan.groups, plan.heads, plan.head_dim_v
    out = formats.unpack_tiles(tensors["out"], plan.out_dtype, (1, g, h, dv))
    lse = formats.unpack_tiles(tensors["lse"], DataType.float32, (1, g, h, 1))[..., 0]
    out = out.to(torch.bfloat16) if plan.out_dtype is DataType.bfloat16 else out.to(torch.float32)
    return out, lse.to(torch.float32)


def run_combine(outs: torch.Tensor, lses: torch.Tensor, *, in_dtype: DataType = DataType.bfloat16,
                out_dtype: DataType = DataType.float32, max_cores: int = 8,
                schedule_seed: Optional[int] = None, return_result: bool = False):
    """Merge partials with the combine kernels on the host runtime.

    Args:
        outs: ``[n, G, H, Dv]`` (or ``[n, 1, B, NH, Dv]``) normalized partial outputs; packed to
            ``in_dtype`` tiles (bfloat16 or float32) as the device would hold them.
        lses: ``[n, G, H]`` (or ``[n, 1, B, NH]``) their LSEs, finite or ``-inf``.
        out_dtype: the merged output's tiles (float32 or bfloat16).
        max_cores: the program's cores (at most one per tile row).

    Returns:
        ``(out [1, G, H, Dv], lse [1, G, H])`` (out in torch.bfloat16 or float32, lse float32), and the
        runtime's ``RunResult`` too with ``return_result``.
    """
    from ttdecode.runtime import run_program

    outs, lses = _check_partials(outs, lses)
    n, g, h, dv = outs.shape
    plan = make_combine_plan(partials=n, groups=g, heads=h, head_dim_v=dv, in_dtype=in_dtype,
                             out_dtype=out_dtype, max_cores=max_cores)
    result = run_program(build_combine_program(plan, outs, lses), schedule_seed=schedule_seed)
    out, lse = _decode(plan, result.tensors)
    return (out, lse, result) if return_result else (out, lse)


# ---- op counts (the cost model) ----------------------------------------------------------------------


@dataclass(frozen=True)
class CombineOps:
    """Tile operations of one tile row (32 rows) merged from n partials of dv_tiles O tiles (from the
    kernels' structure; pinned against the runtime's counters by tests/test_combine_kernel.py)."""

    copies: int        # copy_tile + unary_bcast into DST
    sfpu_binary: int   # add / sub / mul / max on tiles
    ternary: int       # addcmul on tiles (O * e + O_i * e_i)
    exps: int
    recips: int
    logs: int
    packs: int
    dram_read_bytes: int
    dram_write_bytes: int
    inits: int = 0     # configuration calls (op inits, data-format reconfigs), see combine_init_count


@functools.lru_cache(maxsize=None)
def combine_init_count(partials: int, dv_tiles: int, in_dtype: DataType = DataType.bfloat16,
                       out_dtype: DataType = DataType.bfloat16) -> int:
    """Configuration calls (op inits, data-format reconfigs) the compute kernel makes per tile row,
    counted by one run of the kernels on the host runtime: one tile row on one core, minus its
    hardware start-up. Which reconfigs the chip skips depends on which CBs share a data format, so
    the count is read from a run rather than written as a formula."""
    import torch

    outs = torch.zeros(partials, 1, 1, 8, dv_tiles * TILE)
    lses = torch.zeros(partials, 1, 1, 8)
    _, _, res = run_combine(outs, lses, in_dtype=in_dtype, out_dtype=out_dtype, max_cores=1, return_result=True)
    return int(res.counters.tiles("init")) - 1


def combine_op_counts(partials: int, dv_tiles: int, in_dtype: DataType = DataType.bfloat16,
                      out_dtype: DataType = DataType.bfloat16) -> CombineOps:
    """Op counts of one tile row (see :class:`CombineOps`)."""
    n, dv = partials, dv_tiles
    block = COMBINE_COMPUTE.dst_tiles - 1
    blocks = -(-dv // block)
    # first partial: factors 4 copies / 3 binary / 2 exp / 3 packs; sum 1 copy 1 pack; O: per block 1
    # copy of e_i + the O tiles, 1 mul per tile, 1 pack per tile.
    first = (4 + 1 + blocks + dv, 3 + dv, 2, 3 + 1 + dv)
    # each later partial: factors as above; sum 3 copies / 2 binary; O per block of dst_tiles - 2 tiles the
    # tiles and the two factors, then each O_i: 2 x tiles + 2 copies, 1 mul and 1 addcmul per tile.
    pair = COMBINE_COMPUTE.dst_tiles - 2
    later = (4 + 3 + 2 * dv + 2 * -(-dv // pair), 3 + 2 + dv, 2, 3 + 1 + dv)
    # finish: 1/max(l,1) 2 copies / 1 max / 1 recip / 1 pack; out: per block 1 + tiles copies, 1 mul and
    # 1 pack per tile; LSE: 2 copies, 1 add, 1 log, 1 pack.
    fin_copies, fin_binary, fin_packs = 2 + blocks + dv + 2, 1 + dv + 1, 1 + dv + 1
    return CombineOps(
        copies=first[0] + (n - 1) * later[0] + fin_copies,
        sfpu_binary=first[1] + (n - 1) * later[1] + fin_binary,
        ternary=(n - 1) * dv,
        exps=2 * n * 1,
        recips=1,
        logs=1,
        packs=first[3] + (n - 1) * later[3] + fin_packs,
        dram_read_bytes=n * (formats.tile_size(DataType.float32) + dv * formats.tile_size(in_dtype)),
        dram_write_bytes=formats.tile_size(DataType.float32) + dv * formats.tile_size(out_dtype),
        inits=combine_init_count(n, dv, in_dtype, out_dtype),
    )
