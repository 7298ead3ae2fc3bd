"""The io tensors of a `Program` as ttnn holds them: dtype, layout, page geometry and memory config.

A program tensor (`ttdecode.core.program_description.DramTensor`) names its data format, layout
("tile", "key_row" or "row_major") and shape; these functions give the matching ttnn dtype, layout and
memory config, check a device tensor against its spec, and check that the program's page arithmetic
matches how ttnn lays the tensor out in DRAM. A mismatch raises a `DeviceError` naming what differs.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional

from ttdecode.core.formats import TILE_DIM, num_tiles, tile_size
from ttdecode.core.program_description import CoreCoord, Program
from ttdecode.ttnn_backend.descriptor import DeviceError, ttnn_data_type

if TYPE_CHECKING:  # pragma: no cover - typing only
    import ttnn

#: Bytes per element of the formats a row-major tensor may use.
_ROW_MAJOR_ELEMENT_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "int32": 4, "uint32": 4}


def tensor_layout(ttnn: ModuleType, layout: str, what: str) -> Any:
    """The ttnn layout of a program tensor's `layout`: TILE_LAYOUT for "tile" and "key_row",
    ROW_MAJOR_LAYOUT for "row_major"."""
    if layout in ("tile", "key_row"):
        return ttnn.TILE_LAYOUT
    if layout == "row_major":
        return ttnn.ROW_MAJOR_LAYOUT
    raise DeviceError(f"{what}: layout expected 'tile' or 'row_major', got {layout!r}")


def element_name(spec: Any) -> str:
    """The element type of a program tensor as ttnn names it (a row-major int tensor's own type)."""
    return spec.element_type or spec.data_format.value


def tensor_dtype(ttnn: ModuleType, spec: Any) -> "ttnn.DataType":
    """The ttnn dtype a program tensor has on the device."""
    if spec.element_type is not None:
        return getattr(ttnn, spec.element_type)
    return ttnn_data_type(ttnn, spec.data_format)


def check_page_geometry(spec: Any) -> None:
    """The program's page arithmetic must match how ttnn lays the tensor out in DRAM."""
    what = f"tensor {spec.name!r}"
    if spec.layout == "tile":
        want_size, want_pages = tile_size(spec.data_format), num_tiles(spec.shape)
    elif spec.layout == "key_row":
        row = spec.shape[-1] // TILE_DIM
        want_size, want_pages = tile_size(spec.data_format) * row, num_tiles(spec.shape) // row
    else:
        elem = _ROW_MAJOR_ELEMENT_BYTES.get(element_name(spec))
        if elem is None:
            raise DeviceError(f"{what}: row-major layout needs float32/bfloat16/int32/uint32, got {element_name(spec)}")
        want_size = spec.shape[-1] * elem
        want_pages = 1
        for d in spec.shape[:-1]:
            want_pages *= d
    if (spec.page_size, spec.num_pages) != (want_size, want_pages):
        raise DeviceError(
            f"{what}: program pages ({spec.num_pages} x {spec.page_size} B) differ from ttnn's "
            f"{spec.layout} layout of shape {tuple(spec.shape)} in {element_name(spec)} "
            f"({want_pages} x {want_size} B)"
        )


def l1_shards(ttnn: ModuleType, mem: Any, page_bytes_wide: int) -> Optional[tuple[tuple[CoreCoord, ...], int]]:
    """The holders (in shard order) and tile rows per shard of a height-sharded L1 memory config with
    ROW_MAJOR orientation whose shard width is `page_bytes_wide` columns (a tile tensor's last dim) and
    whose shard height is whole tiles; None for any other placement."""
    spec = mem.shard_spec if mem.buffer_type == ttnn.BufferType.L1 else None
    if (spec is None or mem.memory_layout != ttnn.TensorMemoryLayout.HEIGHT_SHARDED
            or spec.orientation != ttnn.ShardOrientation.ROW_MAJOR):
        return None
    height, width = (int(v) for v in spec.shape)
    if width != page_bytes_wide or height % TILE_DIM or height <= 0:
        return None
    holders = tuple(CoreCoord(int(c.x), int(c.y)) for c in ttnn.corerange_to_cores(spec.grid, row_wise=True))
    return holders, height // TILE_DIM


def holds_shards(ttnn: ModuleType, mem: Any, spec: Any) -> bool:
    """`mem` places a program tensor's pages as its L1 shards say (`spec.shard_cores`, `spec.shard_pages`)."""
    found = l1_shards(ttnn, mem, spec.shape[-1])
    return found is not None and found[0] == tuple(spec.shard_cores) and \
        found[1] * (spec.shape[-1] // TILE_DIM) == spec.shard_pages


def check_input_tensor(ttnn: ModuleType, spec: Any, tensor: Any) -> None:
    """An input must be an interleaved DRAM device tensor (or, for a sharded program tensor, held in the
    program's L1 shards) with the program's dtype, layout and shape."""
    what = f"io_tensors[{spec.name!r}]"
    if not ttnn.is_tensor_storage_on_device(tensor):
        raise DeviceError(f"{what}: expected a tensor on the device (ttnn.to_device), got one on the host")
    if tensor.dtype != tensor_dtype(ttnn, spec):
        raise DeviceError(f"{what}: expected dtype {element_name(spec)}, got {tensor.dtype}")
    if tensor.layout != tensor_layout(ttnn, spec.layout, what):
        raise DeviceError(f"{what}: expected {spec.layout} layout, got {tensor.layout}")
    if tuple(tensor.shape) != tuple(spec.shape):
        raise DeviceError(f"{what}: expected shape {tuple(spec.shape)}, got {tuple(tensor.shape)}")
    mem = tensor.memory_config()
    if spec.sharded:
        if not holds_shards(ttnn, mem, spec):
            raise DeviceError(f"{what}: expected a height-sharded L1 tensor of {spec.shard_pages} tiles a shard on "
                              f"cores {[(c.x, c.y) for c in spec.shard_cores]}, got {mem}")
    elif spec.layout == "key_row":
        check_key_row_memory_config(ttnn, mem, tensor.device(), spec.shape[-1], what)
    elif mem.buffer_type != ttnn.BufferType.DRAM or mem.memory_layout != ttnn.TensorMemoryLayout.INTERLEAVED:
        raise DeviceError(f"{what}: expected an interleaved DRAM tensor, got {mem}")


def dram_banks(device: Any) -> int:
    """The DRAM bank count of `device` (a ttnn device or mesh device): its ``dram_grid_size()``, x * y
    (12 x 1 on a Wormhole N150, the mock N150 included)."""
    grid = device.dram_grid_size()
    return int(grid.x) * int(grid.y)


def key_row_memory_config(ttnn: ModuleType, device: Any, last_dim: int) -> Any:
    """The ttnn memory config of a K or V cache (or paged pool) in kv_pages "key_row": a TILE tensor
    ND-sharded in DRAM with [1, 1, 32, last_dim] shards (one key-tile row each) dealt round robin over
    `device`'s DRAM banks (`dram_banks`: NB), so shard k -- the key-tile row k of the tile-order tensor
    -- sits in bank k % NB, its tiles contiguous (what the kernels' key-row pages address). A tensor of
    at most NB key-tile rows is held by ttnn as the equal legacy height-sharded config (one shard a
    bank): compare with `is_key_row_memory_config`, not ``==``."""
    grid = device.dram_grid_size()
    banks = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(grid.x - 1, grid.y - 1))])
    spec = ttnn.NdShardSpec(ttnn.Shape([1, 1, TILE_DIM, last_dim]), banks, ttnn.ShardOrientation.ROW_MAJOR,
                            ttnn.ShardDistributionStrategy.ROUND_ROBIN_1D)
    return ttnn.MemoryConfig(ttnn.BufferType.DRAM, spec)


def is_key_row_memory_config(mem: Any, want: Any) -> bool:
    """`mem` (a tensor's memory config) places pages as `want` (a `key_row_memory_config`): the same
    buffer type and ND shard spec. ttnn reports a tensor of at most NB shards as legacy height
    sharding with that ND spec kept, so the configs themselves may differ."""
    return mem.buffer_type == want.buffer_type and mem.nd_shard_spec == want.nd_shard_spec


def check_key_row_memory_config(ttnn: ModuleType, mem: Any, device: Any, last_dim: int, what: str) -> None:
    """`mem` must be key_row_memory_config(ttnn, device, last_dim) (`is_key_row_memory_config`): DRAM,
    ND shards [1, 1, 32, last_dim] over the device's banks in order, round robin."""
    if not is_key_row_memory_config(mem, key_row_memory_config(ttnn, device, last_dim)):
        raise DeviceError(f"{what}: kv_pages='key_row' expects a DRAM tensor ND-sharded with [1, 1, {TILE_DIM}, "
                          f"{last_dim}] shards round robin over the device's {dram_banks(device)} DRAM banks "
                          f"(ttdecode.ttnn_backend.key_row_memory_config), got {mem}")


def tensor_signature(program: Program) -> list[tuple[Any, ...]]:
    """Per tensor of `program`: (name, shape, element type, layout, is_output, in_place), and for an
    L1-sharded one its holders and pages per shard."""
    return [(t.name, tuple(t.shape), element_name(t), t.layout, t.is_output, t.in_place)
            + ((tuple((c.x, c.y) for c in t.shard_cores), t.shard_pages) if t.sharded else ())
            for t in program.tensors]
