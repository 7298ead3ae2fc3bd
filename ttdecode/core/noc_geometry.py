"""Wormhole NoC 0 geometry: where a logical worker core and a DRAM bank sit on the NoC torus, and the
router hops between them.

Pure integer arithmetic on the torus. The FlashDecode planner places pieces by it (short partial paths,
cores near their bank) and the perf model prices the partials' messages by it; neither decides anything
here.
"""

from __future__ import annotations

from ttdecode.core.program_description import CoreCoord

__all__ = ["NOC_GRID", "WORKER_COLUMNS", "WORKER_ROWS", "DRAM_GROUP_TILES", "NOC_SOURCES", "worker_noc_xy",
           "noc_hops", "dram_return_hops"]

#: Tile columns, rows of the NoC torus.
NOC_GRID: tuple[int, int] = (10, 12)
#: NoC x of logical worker x.
WORKER_COLUMNS: tuple[int, ...] = (1, 2, 3, 4, 6, 7, 8, 9)
#: NoC y of logical worker y.
WORKER_ROWS: tuple[int, ...] = (1, 2, 3, 4, 5, 7, 8, 9, 10, 11)
#: NoC 0 (x, y) of the three DRAM tiles of each GDDR6 group D0..D5 (two channels, i.e. two of the 12
#: banks, per group: bank b in group b // 2).
DRAM_GROUP_TILES = (((0, 0), (0, 1), (0, 11)), ((0, 5), (0, 6), (0, 7)), ((5, 0), (5, 1), (5, 11)),
                    ((5, 2), (5, 9), (5, 10)), ((5, 3), (5, 4), (5, 8)), ((5, 5), (5, 6), (5, 7)))

NOC_SOURCES: dict[str, str] = {
    "NOC_GRID": "Wormhole NoC: a 10x12 tile torus; NoC 0 runs +x/+y (tt-isa-documentation WormholeB0/NoC)",
    "WORKER_COLUMNS": "Tensix columns 1-4, 6-9 of the NoC grid (column 5 is DRAM/ARC; tt-isa-documentation "
                      "WormholeB0/NoC)",
    "WORKER_ROWS": "Tensix rows 1-5, 7-11 of an unharvested die (tt-isa-documentation WormholeB0/NoC); harvesting "
                   "moves rows (+-hops)",
    "DRAM_GROUP_TILES": "tt-isa-documentation Diagrams/Src/NoC.lua (TileLabel)",
}


def worker_noc_xy(core: CoreCoord) -> tuple[int, int]:
    """NoC 0 (x, y) of the logical worker `core`."""
    x = WORKER_COLUMNS[core.x] if core.x < len(WORKER_COLUMNS) else core.x + 1
    y = WORKER_ROWS[core.y] if core.y < len(WORKER_ROWS) else core.y + 1
    return x, y


def noc_hops(src: CoreCoord, dst: CoreCoord) -> int:
    """Router hops from src to dst on NoC 0 (one-way torus, +x then +y) between logical workers."""
    (sx, sy), (dx, dy) = worker_noc_xy(src), worker_noc_xy(dst)
    return (dx - sx) % NOC_GRID[0] + (dy - sy) % NOC_GRID[1]


def dram_return_hops(bank: int, core: CoreCoord) -> int:
    """Fewest NoC 0 hops (one-way torus, +x then +y) from one of bank `bank`'s DRAM tiles to the
    logical worker `core`: the way read data comes back. Used to keep cores near their bank
    (the planner's key_row_placement); the perf model prices no DRAM hops."""
    x, y = worker_noc_xy(core)
    return min((x - dx) % NOC_GRID[0] + (y - dy) % NOC_GRID[1] for dx, dy in DRAM_GROUP_TILES[bank // 2])
