"""The combine kernel's op counts in closed form (what the perf model prices; pinned against the
runtime's counters by tests/test_combine_kernel.py)."""

from __future__ import annotations

import functools

from dataclasses import dataclass

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.ops.combine.program_factory import COMBINE_COMPUTE
from ttdecode.ops.combine.plan import TILE
from ttdecode.ops.combine.op import run_combine

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
    # first partial: factors 2 copies / 3 binary / 2 exp / 3 packs; sum 1 copy 1 pack; O: per block 1
    # copy of e_i + the O tiles, 1 mul per tile, 1 pack per tile.
    first = (2 + 1 + blocks + dv, 3 + dv, 2, 3 + 1 + dv)
    # each later partial: factors as above; sum 3 copies / 2 binary; O per block of dst_tiles - 2 tiles the
    # tiles and the two factors, then each O_i: 2 x tiles + 2 copies, 1 mul and 1 addcmul per tile.
    pair = COMBINE_COMPUTE.dst_tiles - 2
    later = (2 + 3 + 2 * dv + 2 * -(-dv // pair), 3 + 2 + dv, 2, 3 + 1 + dv)
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
