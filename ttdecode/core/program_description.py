"""The backend-neutral description of a Metalium program.

One `Program` feeds both backends: the host runtime (`ttdecode.runtime.run_program`) and the device
path (`ttdecode.ttnn_backend.to_program_descriptor` -> `ttnn.generic_op`). Nothing in here knows which one
runs it. Cores are *logical* worker coordinates of the compute grid. Runtime arguments may hold
placeholders (`NocX`, `NocY`, `BufferAddress`) that each backend resolves for its own machine.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Union

from ttdecode.core.formats import DataType, num_tiles, tile_size

#: Wormhole L1 per Tensix core, bytes.
L1_BYTES_PER_CORE = 1464 * 1024
#: DRAM banks of a Wormhole chip: the default of a program's and a plan's `dram_banks` (a device reports its own,
#: `device.dram_grid_size()`).
WORMHOLE_DRAM_BANKS = 12
#: Most runtime args a kernel may take on a core, its unique and common args together (tt-metal 0.81.1:
#: 4094 accepted, 4095 refused "Max allowable is 4094", measured through generic_op on the mock N150).
MAX_RUNTIME_ARGS = 4094
#: Circular buffer indices available to a program.
NUM_CIRCULAR_BUFFERS = 32


@dataclass(frozen=True, order=True)
class CoreCoord:
    """A logical worker core (x = column, y = row of the compute grid)."""

    x: int
    y: int


@dataclass(frozen=True)
class CoreRange:
    """An inclusive rectangle of logical cores."""

    start: CoreCoord
    end: CoreCoord

    def __post_init__(self) -> None:
        if self.end.x < self.start.x or self.end.y < self.start.y:
            raise ValueError(f"CoreRange end {self.end} lies before start {self.start}")

    def cores(self) -> Iterator[CoreCoord]:
        for y in range(self.start.y, self.end.y + 1):
            for x in range(self.start.x, self.end.x + 1):
                yield CoreCoord(x, y)


@dataclass(frozen=True)
class CoreRangeSet:
    """A set of logical cores, kept as disjoint rectangles (what ttnn's CoreRangeSet holds)."""

    ranges: tuple[CoreRange, ...]

    @staticmethod
    def of(cores: Iterable[CoreCoord]) -> "CoreRangeSet":
        """Pack cores into row runs (one CoreRange per maximal horizontal run)."""
        by_row: dict[int, list[int]] = {}
        for c in set(cores):
            by_row.setdefault(c.y, []).append(c.x)
        ranges: list[CoreRange] = []
        for y in sorted(by_row):
            xs = sorted(by_row[y])
            run_start = prev = xs[0]
            for x in xs[1:] + [None]:  # type: ignore[list-item]
                if x is not None and x == prev + 1:
                    prev = x
                    continue
                ranges.append(CoreRange(CoreCoord(run_start, y), CoreCoord(prev, y)))
                if x is not None:
                    run_start = prev = x
        return CoreRangeSet(tuple(ranges))

    def cores(self) -> list[CoreCoord]:
        return [c for r in self.ranges for c in r.cores()]

    def __contains__(self, core: object) -> bool:
        return any(
            isinstance(core, CoreCoord)
            and r.start.x <= core.x <= r.end.x
            and r.start.y <= core.y <= r.end.y
            for r in self.ranges
        )


# ---- runtime-argument placeholders ---------------------------------------------------------


@dataclass(frozen=True)
class NocX:
    """The NoC x coordinate of a logical worker core, as the running backend addresses it."""

    core: CoreCoord


@dataclass(frozen=True)
class NocY:
    """The NoC y coordinate of a logical worker core."""

    core: CoreCoord


@dataclass(frozen=True)
class BufferAddress:
    """The DRAM base address of the program tensor called `name`."""

    name: str


Arg = Union[int, NocX, NocY, BufferAddress]


class KernelKind(enum.Enum):
    READER = "reader"  # NCRISC, NoC 0 on a Wormhole (the JIT compiles it with NOC_INDEX=0)
    WRITER = "writer"  # BRISC, NoC 1 on a Wormhole (NOC_INDEX=1)
    COMPUTE = "compute"  # TRISC0/1/2


class MathFidelity(enum.Enum):
    LoFi = "LoFi"
    HiFi2 = "HiFi2"
    HiFi3 = "HiFi3"
    HiFi4 = "HiFi4"


class UnpackToDestMode(enum.Enum):
    """How the unpacker feeds DST from one CB (ttnn.UnpackToDestMode, per CB index).

    `UnpackToDestFp32`: a Float32 CB is unpacked straight into an fp32 DST, so `copy_tile` (and
    `unary_bcast`) keep all 32 bits; the LLK gives such a CB the unpack format Float32, which the FPU
    ops (matmul, eltwise, broadcast, reduce) cannot take through SrcA/SrcB. `Default`: the data goes
    through SrcA/SrcB (a Float32 CB is cut to TF32 with fp32 accumulation, to bf16 without).
    """

    Default = "Default"
    UnpackToDestFp32 = "UnpackToDestFp32"


def unpack_to_dest_modes(fp32_cbs: Iterable[int]) -> tuple[UnpackToDestMode, ...]:
    """The per-CB-index mode list (length 32) with UnpackToDestFp32 on `fp32_cbs`, Default elsewhere."""
    modes = [UnpackToDestMode.Default] * NUM_CIRCULAR_BUFFERS
    for i in fp32_cbs:
        if not 0 <= i < NUM_CIRCULAR_BUFFERS:
            raise ValueError(f"unpack_to_dest_mode: CB index {i} outside 0..{NUM_CIRCULAR_BUFFERS - 1}")
        modes[i] = UnpackToDestMode.UnpackToDestFp32
    return tuple(modes)


@dataclass(frozen=True)
class ComputeSettings:
    """Settings of a compute kernel (ttnn's ComputeConfigDescriptor).

    `unpack_to_dest_mode`: empty (every CB Default) or one `UnpackToDestMode` per CB index (32), as
    ttnn's `ComputeConfigDescriptor.unpack_to_dest_mode`. UnpackToDestFp32 needs fp32_dest_acc_en
    (a 32-bit unpack into a 16-bit DST is not a configuration the LLK defines) and a Float32 CB at
    that index (checked per program by `check_unpack_to_dest`).
    """

    math_fidelity: MathFidelity = MathFidelity.HiFi4
    fp32_dest_acc_en: bool = True
    math_approx_mode: bool = False
    dst_full_sync_en: bool = False
    unpack_to_dest_mode: tuple[UnpackToDestMode, ...] = ()

    def __post_init__(self) -> None:
        modes = tuple(self.unpack_to_dest_mode)
        object.__setattr__(self, "unpack_to_dest_mode", modes)
        if modes and len(modes) != NUM_CIRCULAR_BUFFERS:
            raise ValueError(f"unpack_to_dest_mode: expected {NUM_CIRCULAR_BUFFERS} entries (one per CB index) "
                             f"or none, got {len(modes)}")
        for i, m in enumerate(modes):
            if not isinstance(m, UnpackToDestMode):
                raise ValueError(f"unpack_to_dest_mode[{i}]: expected an UnpackToDestMode, got {m!r}")
        if self.unpack_to_dest_cbs and not self.fp32_dest_acc_en:
            raise ValueError(
                f"unpack_to_dest_mode: UnpackToDestFp32 on CBs {list(self.unpack_to_dest_cbs)} needs "
                "fp32_dest_acc_en=True (a 32-bit unpack into a 16-bit DST is undefined), got fp32_dest_acc_en=False"
            )

    @property
    def unpack_to_dest_cbs(self) -> tuple[int, ...]:
        """CB indices in UnpackToDestFp32 mode."""
        return tuple(i for i, m in enumerate(self.unpack_to_dest_mode) if m is UnpackToDestMode.UnpackToDestFp32)

    @property
    def dst_tiles(self) -> int:
        """Usable DST tiles: 16 x 16-bit tiles, halved by fp32 accumulation and by half-sync."""
        tiles = 16
        if self.fp32_dest_acc_en:
            tiles //= 2
        if not self.dst_full_sync_en:
            tiles //= 2
        return tiles


@dataclass
class Kernel:
    """One kernel source run on a set of cores.

    `source` is a file path (normally under `kernels/`). Compile-time args are positional
    (`get_compile_time_arg_val(i)`) or named (`named_compile_time_args`, read with
    `get_named_compile_time_arg_val("name")`; names are C identifiers); `defines` become `-D` macros. `runtime_args[core]` is the
    per-core argument list; every core of `cores` must have one (possibly empty).
    """

    name: str
    source: Path
    kind: KernelKind
    cores: CoreRangeSet
    compile_time_args: list[int] = field(default_factory=list)
    defines: dict[str, str] = field(default_factory=dict)
    runtime_args: dict[CoreCoord, list[Arg]] = field(default_factory=dict)
    common_runtime_args: list[Arg] = field(default_factory=list)
    compute: ComputeSettings | None = None
    named_compile_time_args: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for n, v in self.named_compile_time_args.items():
            if not isinstance(n, str) or not n.isidentifier():
                raise ValueError(f"kernel {self.name}: named compile-time arg {n!r}: expected a C identifier")
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
                raise ValueError(f"kernel {self.name}: named compile-time arg {n}={v!r}: expected an int in 0..2**32-1")
        if (self.kind is KernelKind.COMPUTE) != (self.compute is not None):
            raise ValueError(f"kernel {self.name}: compute settings belong to (and only to) a compute kernel")
        for core, args in self.runtime_args.items():
            if core not in self.cores:
                raise ValueError(f"kernel {self.name}: runtime args for {core}, which is not in its cores")
            if len(args) + len(self.common_runtime_args) > MAX_RUNTIME_ARGS:
                raise ValueError(
                    f"kernel {self.name}: {len(args)} runtime args + {len(self.common_runtime_args)} common on {core}, "
                    f"the limit is {MAX_RUNTIME_ARGS} together"
                )


@dataclass(frozen=True)
class CircularBuffer:
    """A circular buffer: `num_pages` pages of `page_size` bytes in `data_format`, on `cores`.

    `tile_rows`: the rows of its tiles, 32 (32x32 tiles, four 16x16 faces), 16 (16x32 half tiles:
    faces 0 and 1 only, ttnn's tile (16, 32)) or 8 (8x32 tiles: two 8x16 faces, face_r_dim 8, ttnn's
    tile (8, 32)); the compute kernel's unpackers and packer take a CB's
    tile shape from here, as the device build takes it from the CB's tile descriptor.
    """

    index: int
    cores: CoreRangeSet
    data_format: DataType
    page_size: int
    num_pages: int
    tile_rows: int = 32

    @property
    def total_size(self) -> int:
        return self.page_size * self.num_pages

    def __post_init__(self) -> None:
        if not 0 <= self.index < NUM_CIRCULAR_BUFFERS:
            raise ValueError(f"CB index {self.index} outside 0..{NUM_CIRCULAR_BUFFERS - 1}")
        if self.page_size <= 0 or self.num_pages <= 0:
            raise ValueError(f"CB {self.index}: page_size and num_pages must be positive")
        if self.tile_rows not in (8, 16, 32):
            raise ValueError(f"CB {self.index}: tile_rows must be 8 (8x32 tiles), 16 (16x32 tiles) or 32 (32x32 tiles), "
                             f"got {self.tile_rows}")


@dataclass(frozen=True)
class Semaphore:
    """A 32-bit word in L1 of every core in `cores`, found by kernels with `get_semaphore(id)`."""

    id: int
    cores: CoreRangeSet
    initial_value: int = 0


@dataclass
class DramTensor:
    """An interleaved DRAM tensor: page k lives in bank k % 12; or, with `shard_cores`, a height-sharded
    L1 tensor (ttnn's HEIGHT_SHARDED L1 memory config, ROW_MAJOR shard orientation): pages
    [i * shard_pages, (i + 1) * shard_pages) in the L1 of shard_cores[i], at one L1 address on every
    holder (`BufferAddress`), reached over the NoC at the holder's coordinates (`NocX` / `NocY`).

    `data` holds the input byte image (num_pages * page_size bytes); None for an output, which
    the backend allocates, and for an input the backend already holds (the device path). `in_place`:
    an input the kernels also write (a KV cache updated where it lies; the host runtime returns its
    image after the run, the device path passes the caller's tensor). `shape` is
    the logical shape, `layout` "tile", "row_major" or "key_row" (tile-format bytes in tile order, a
    page per key-tile row: shape[-1] / 32 tiles; page k still in bank k % 12). `element_type` names the element type of a
    row-major tensor whose elements are not a tile format ("int32", "uint32"); None means
    `data_format`.
    """

    name: str
    data_format: DataType
    page_size: int
    num_pages: int
    shape: tuple[int, ...]
    layout: str = "tile"
    data: bytes | None = None
    is_output: bool = False
    element_type: str | None = None
    in_place: bool = False
    # height-sharded in L1 on these cores (empty: interleaved DRAM), pages per shard (sharded only); not in
    # the repr, which stays that of an interleaved tensor (a sharded program's reader names its shards)
    shard_cores: tuple[CoreCoord, ...] = field(default=(), repr=False)
    shard_pages: int = field(default=0, repr=False)

    @property
    def sharded(self) -> bool:
        """Height-sharded in L1 (`shard_cores`), not interleaved in DRAM."""
        return bool(self.shard_cores)

    def __post_init__(self) -> None:
        if self.shard_cores and (self.layout != "tile" or self.in_place or self.shard_pages < 1
                                 or -(-self.num_pages // self.shard_pages) > len(self.shard_cores)):
            raise ValueError(f"tensor {self.name}: an L1-sharded tensor is a tile tensor (not in place) whose "
                             f"{self.num_pages} pages fit {len(self.shard_cores)} shards of shard_pages "
                             f"{self.shard_pages}")
        if self.in_place and self.is_output:
            raise ValueError(f"tensor {self.name}: in_place is for an input the kernels write, not an output")
        if self.element_type is not None and (self.layout != "row_major" or self.element_type not in ("int32", "uint32")):
            raise ValueError(
                f"tensor {self.name}: element_type is for row-major int32/uint32 tensors, got "
                f"{self.element_type!r} with layout {self.layout!r}"
            )
        if self.data is not None and len(self.data) != self.page_size * self.num_pages:
            raise ValueError(
                f"tensor {self.name}: data holds {len(self.data)} bytes, expected "
                f"{self.num_pages} pages x {self.page_size} B = {self.page_size * self.num_pages}"
            )


def kv_cache_tensor(name: str, fmt: DataType, shape: tuple[int, ...], kv_pages: str, data: bytes | None,
                    in_place: bool = False) -> DramTensor:
    """A K or V cache [.., rows, D] in DRAM: one tile a page ("tile"), or one key-tile row of D / 32 tiles a
    page ("key_row", DecodePlan.kv_pages). The byte image is the tile-order image either way."""
    per_page = shape[-1] // 32 if kv_pages == "key_row" else 1
    return DramTensor(name, fmt, tile_size(fmt) * per_page, num_tiles(shape) // per_page, shape,
                      "key_row" if kv_pages == "key_row" else "tile", data, in_place=in_place)


@dataclass
class Program:
    """Everything a backend needs to run one Metalium program."""

    kernels: list[Kernel]
    circular_buffers: list[CircularBuffer]
    semaphores: list[Semaphore]
    tensors: list[DramTensor]
    #: the DRAM banks the program's interleaved and key-row pages are dealt over (page k in bank k % dram_banks)
    dram_banks: int = WORMHOLE_DRAM_BANKS

    def tensor(self, name: str) -> DramTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"program has no tensor called {name!r}")

    def cores(self) -> list[CoreCoord]:
        seen: set[CoreCoord] = set()
        for k in self.kernels:
            seen.update(k.cores.cores())
        return sorted(seen, key=lambda c: (c.y, c.x))


def check_unpack_to_dest(program: Program) -> None:
    """Every CB a compute kernel puts in UnpackToDestFp32 mode is a Float32 CB on each of its cores
    (ttnn ignores the mode on other formats; here such a knob is refused, naming kernel and CB)."""
    for k in program.kernels:
        if k.compute is None:
            continue
        for i in k.compute.unpack_to_dest_cbs:
            for core in k.cores.cores():
                cb = next((c for c in program.circular_buffers if c.index == i and core in c.cores), None)
                if cb is None:
                    raise ValueError(f"kernel {k.name}: unpack_to_dest_mode[{i}] is UnpackToDestFp32 but core "
                                     f"({core.x},{core.y}) has no CB {i}")
                if cb.data_format is not DataType.float32:
                    raise ValueError(f"kernel {k.name}: unpack_to_dest_mode[{i}] is UnpackToDestFp32 but CB {i} "
                                     f"holds {cb.data_format.value}; the mode applies to float32 CBs only")
