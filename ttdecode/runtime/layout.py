"""The modelled Wormhole machine: L1 map, NoC coordinates, DRAM banks, and where a program's CBs,
semaphores, runtime args and DRAM tensors go.

L1 of every core (1464 KiB), device byte addresses:

- ``[0, 0x10000)``: firmware, mailboxes and the start of the kernel-config buffer. Not mapped on the
  host, so a kernel touching it (e.g. a null pointer) crashes with a clear error.
- ``[0x10000, L1_UNRESERVED_BASE)``: the rest of the kernel-config buffer. Semaphores (16 B apart, as
  ``get_semaphore`` computes) and the runtime args of the three kernels live here.
- ``[L1_UNRESERVED_BASE, 1464 KiB)``: circular buffers, allocated in CB-index order, each aligned to 32 B.

``L1_UNRESERVED_BASE`` is Wormhole's default unreserved L1 base in tt-metal 0.81.1: the end of the
firmware memory map (``MEM_MAP_END`` = 0x8960 in ``dev_mem_map.h``) plus the 69 KiB kernel-config buffer,
rounded up to 32 B (the HAL's largest alignment) = 0x19D60.

NoC coordinates are Wormhole's translated coordinates (NoC translation is on for every Wormhole board):
worker (x, y) of the logical grid is NoC (18 + x, 18 + y); both NoCs use the same coordinates. DRAM:
12 banks, two per GDDR channel; bank b is reached at the NoC coordinates of its channel (b // 2) with
the bank offset (b % 2) GiB; a tensor occupies the same address range in every bank.
"""

from __future__ import annotations

from dataclasses import dataclass

from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.program_description import CoreCoord, L1_BYTES_PER_CORE

#: End of the firmware memory map of a Wormhole Tensix core (tt-metal 0.81.1 dev_mem_map.h MEM_MAP_END).
MEM_MAP_END = 0x8960
#: Size of the kernel-config buffer that follows it (tt-metal's Wormhole HAL).
KERNEL_CONFIG_BYTES = 69 * 1024
#: First L1 byte available to circular buffers.
L1_UNRESERVED_BASE = ((MEM_MAP_END + KERNEL_CONFIG_BYTES - 1) | 31) + 1
#: First L1 byte mapped on the host.
L1_WINDOW_BASE = 0x10000
#: Semaphores: 16 B apart from here.
SEMAPHORE_BASE = 0x10000
MAX_SEMAPHORES = 16
SEMAPHORE_STRIDE = 16
#: Runtime args: from here, each kernel of a core (slot order: reader, writer, compute) gets its unique
#: args then its common args, each run 16 B aligned, up to L1_UNRESERVED_BASE (`args_areas`). The chip
#: keeps them in its kernel-config buffer; its limit is 4094 words per kernel (program.MAX_RUNTIME_ARGS).
ARGS_BASE = 0x10400
ARGS_ALIGNMENT = 16
#: Alignment of circular buffers in L1.
CB_ALIGNMENT = 32
#: DRAM: alignment of pages and tensors, first allocated address, gap left between tensors.
DRAM_ALIGNMENT = 32
DRAM_BASE = 0x100000
DRAM_GAP = 0x1000
#: Translated NoC coordinates of the worker at logical (0, 0).
WORKER_NOC_ORIGIN = 18
#: Largest logical worker grid of a Wormhole chip (columns, rows).
MAX_GRID = (8, 10)
#: Translated NoC (x, y) of the six GDDR channels (one endpoint each); bank b is on channel b // 2.
DRAM_CHANNEL_NOC = ((16, 16), (16, 21), (17, 16), (17, 19), (17, 20), (17, 21))
#: DRAM banks the host runtime models (Wormhole's: two per GDDR channel); a program's `dram_banks` must match.
DRAM_BANKS = 2 * len(DRAM_CHANNEL_NOC)
#: Bank offset inside the channel's address space.
DRAM_BANK_HALF = 1 << 30

#: tt-metal DataFormat values of the tile formats.
TT_DATA_FORMAT = {DataType.float32: 0, DataType.bfloat16: 5, DataType.bfloat8_b: 6, DataType.bfloat4_b: 7}

assert L1_UNRESERVED_BASE == 0x19D60


def args_areas(counts: list[tuple[int, int]], where: str) -> list[tuple[int, int]]:
    """L1 addresses (unique args, common args) of a core's kernels, given their (unique, common) counts
    in slot order, packed from ARGS_BASE. The host maps L1 from L1_WINDOW_BASE (lower addresses must
    crash like a null pointer), so it holds (L1_UNRESERVED_BASE - ARGS_BASE) / 4 = 9816 words of args per
    core: a core whose kernels need more is refused here, naming it (the chip's kernel-config buffer
    holds 3 x 4094)."""
    out, at = [], ARGS_BASE
    for unique, common in counts:
        rta = at
        at = rta + -(-4 * unique // ARGS_ALIGNMENT) * ARGS_ALIGNMENT
        crta = at
        at = crta + -(-4 * common // ARGS_ALIGNMENT) * ARGS_ALIGNMENT
        out.append((rta, crta))
    if at > L1_UNRESERVED_BASE:
        words = sum(u + c for u, c in counts)
        raise ValueError(f"{where}: {words} runtime-arg words over its kernels; the host runtime maps "
                         f"{(L1_UNRESERVED_BASE - ARGS_BASE) // 4} per core")
    return out


def noc_coord(core: CoreCoord) -> tuple[int, int]:
    """NoC (x, y) of a logical worker core, as kernels address it (`NocX` / `NocY`)."""
    if not (0 <= core.x < MAX_GRID[0] and 0 <= core.y < MAX_GRID[1]):
        raise ValueError(f"core {core} is outside the Wormhole worker grid {MAX_GRID[0]}x{MAX_GRID[1]}")
    return (WORKER_NOC_ORIGIN + core.x, WORKER_NOC_ORIGIN + core.y)


def dram_bank_noc(bank: int) -> tuple[int, int]:
    """NoC (x, y) of DRAM bank `bank`."""
    return DRAM_CHANNEL_NOC[bank // 2]


def dram_bank_offset(bank: int) -> int:
    return (bank % 2) * DRAM_BANK_HALF


def round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


@dataclass(frozen=True)
class CbPlacement:
    index: int
    addr: int
    page_size: int
    num_pages: int
    data_format: DataType
    tile_rows: int = 32  # 16: 16x32 tiles (faces 0-1); 8: 8x32 tiles (faces 0-1 of 8 rows)

    @property
    def tt_format(self) -> int:
        return TT_DATA_FORMAT[self.data_format]

    @property
    def tile_size(self) -> int:
        """Bytes of one tile of a plain format: rows x 32 datums (a 16x32 tile is faces 0-1 of a 32x32
        one; an 8x32 tile is two 8x16 faces)."""
        return tile_size(self.data_format) * self.tile_rows // 32


@dataclass(frozen=True)
class TensorPlacement:
    name: str
    base: int
    page_size: int
    aligned_page: int
    num_pages: int
    dram_banks: int  # the banks its pages are dealt over (page k in bank k % dram_banks)

    @property
    def bytes_per_bank(self) -> int:
        return self.aligned_page * -(-self.num_pages // self.dram_banks)


def place_cbs(core: CoreCoord, cbs) -> list[CbPlacement]:
    """Addresses of the CBs of one core, in index order from L1_UNRESERVED_BASE."""
    out: list[CbPlacement] = []
    addr = L1_UNRESERVED_BASE
    for cb in sorted(cbs, key=lambda c: c.index):
        addr = round_up(addr, CB_ALIGNMENT)
        if cb.tile_rows != 32 and cb.data_format not in (DataType.float32, DataType.bfloat16):
            raise ValueError(f"core {core}: CB {cb.index}: {cb.tile_rows}x32 tiles of {cb.data_format.value} are not modelled by "
                             "the host runtime (float32 and bfloat16 only)")
        out.append(CbPlacement(cb.index, addr, cb.page_size, cb.num_pages, cb.data_format, cb.tile_rows))
        addr += cb.total_size
    if addr > L1_BYTES_PER_CORE:
        detail = ", ".join(f"CB{c.index} {c.page_size}x{c.num_pages}" for c in out)
        raise ValueError(
            f"core {core}: circular buffers need {addr - L1_UNRESERVED_BASE} B of L1 from {L1_UNRESERVED_BASE:#x} "
            f"but only {L1_BYTES_PER_CORE - L1_UNRESERVED_BASE} B are free ({detail})"
        )
    return out


def place_tensors(tensors, dram_banks: int) -> list[TensorPlacement]:
    """DRAM base addresses: every tensor at the same address range in all `dram_banks` banks, in order."""
    out: list[TensorPlacement] = []
    addr = DRAM_BASE
    for t in tensors:
        aligned = round_up(t.page_size, DRAM_ALIGNMENT)
        p = TensorPlacement(t.name, addr, t.page_size, aligned, t.num_pages, dram_banks)
        out.append(p)
        addr = round_up(addr + p.bytes_per_bank + DRAM_GAP, DRAM_ALIGNMENT)
        if addr >= DRAM_BANK_HALF:
            raise ValueError(f"DRAM tensors exceed one bank's 1 GiB (at tensor {t.name!r})")
    return out


def place_l1_shards(tensors, cb_top: int) -> dict[str, int]:
    """L1 addresses of the height-sharded tensors (the same on each holder), allocated top down from the
    end of L1 as ttnn's L1 allocator does, every one above `cb_top` (the highest CB byte of any core of
    the program): a NoC access to that address of a core that holds no shard then lands in no region
    of it and is refused, as on the chip it reads another buffer."""
    out: dict[str, int] = {}
    top = L1_BYTES_PER_CORE
    for t in tensors:
        top = (top - t.page_size * t.shard_pages) // CB_ALIGNMENT * CB_ALIGNMENT
        if top < cb_top:
            raise ValueError(f"tensor {t.name!r}: its L1 shards ({t.page_size * t.shard_pages} B a core) and the "
                             f"circular buffers (up to {cb_top:#x}) do not both fit one core's L1")
        out[t.name] = top
    return out
