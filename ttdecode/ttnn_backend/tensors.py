"""The io tensors of a `Program` as ttnn holds them: dtype, layout, page geometry and memory config.

A program tensor (`ttdecode.core.program_description.DramTensor`) names its data format, layout
("tile", "key_row" or "row_major") and shape; these functions give the matching ttnn dtype, layout and
memory config, check a device tensor against its spec, and check that the program's page arithmetic
matches how ttnn lays the tensor out in DRAM. A mismatch raises a `DeviceError` naming what differs.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from ttdecode.core.formats import TILE_DIM, num_tiles, tile_size
from ttdecode.core.program_description import WORMHOLE_DRAM_BANKS, Program
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


def check_input_tensor(ttnn: ModuleType, spec: Any, tensor: Any) -> None:
    """An input must be an interleaved DRAM device tensor with the program's dtype, layout and shape."""
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
    if spec.layout == "key_row":
        check_key_row_memory_config(ttnn, mem, spec.shape[-1], what)
    elif mem.buffer_type != ttnn.BufferType.DRAM or mem.memory_layout != ttnn.TensorMemoryLayout.INTERLEAVED:
        raise DeviceError(f"{what}: expected an interleaved DRAM tensor, got {mem}")


def key_row_memory_config(ttnn: ModuleType, last_dim: int) -> Any:
    """The ttnn memory config of a K or V cache in kv_pages "key_row": a TILE tensor ND-sharded in
    DRAM with [1, 1, 32, last_dim] shards (one key-tile row each) dealt round robin over the 12 banks,
    so shard k -- the key-tile row k of the tile-order cache -- sits in bank k % 12, its tiles
    contiguous (what the reader's key-row pages address). Not run on a device here."""
    banks = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(WORMHOLE_DRAM_BANKS - 1, 0))])
    spec = ttnn.NdShardSpec(ttnn.Shape([1, 1, TILE_DIM, last_dim]), banks, ttnn.ShardOrientation.ROW_MAJOR,
                            ttnn.ShardDistributionStrategy.ROUND_ROBIN_1D)
    return ttnn.MemoryConfig(ttnn.BufferType.DRAM, spec)


def check_key_row_memory_config(ttnn: ModuleType, mem: Any, last_dim: int, what: str) -> None:
    """`mem` must be key_row_memory_config(ttnn, last_dim): DRAM, ND shards [1, 1, 32, last_dim] over
    the 12 banks in order, round robin."""
    want = key_row_memory_config(ttnn, last_dim)
    if mem != want:
        raise DeviceError(f"{what}: kv_pages='key_row' expects a DRAM tensor ND-sharded with [1, 1, {TILE_DIM}, "
                          f"{last_dim}] shards round robin over the {WORMHOLE_DRAM_BANKS} banks "
                          f"(ttdecode.ttnn_backend.key_row_memory_config), got {mem}")


def tensor_signature(program: Program) -> list[tuple[Any, ...]]:
    """Per tensor of `program`: (name, shape, element type, layout, is_output, in_place)."""
    return [(t.name, tuple(t.shape), element_name(t), t.layout, t.is_output, t.in_place) for t in program.tensors]
