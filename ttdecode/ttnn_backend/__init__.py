"""The device backend: a `Program` as a `ttnn.ProgramDescriptor`, launched with `ttnn.generic_op`.

`to_program_descriptor` converts the backend-neutral description (`ttdecode.core.program_description`) into ttnn's
descriptor objects and resolves the runtime-argument placeholders for one device:
`NocX(core)` / `NocY(core)` become the NoC (virtual, translated) coordinates of a logical worker core,
`BufferAddress(name)` the DRAM address of the named tensor. The device and the tensors are seen
through a `DeviceView`, so the conversion can be checked without a device (tests pass a fake view and
get real ttnn objects back). `launch` allocates the outputs and calls `ttnn.generic_op`; it needs a
Tenstorrent device. `available()` says whether one is present.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Hashable, Mapping, Protocol, Sequence

from ttdecode.core.formats import DataType, num_tiles, tile_size

TILE = 32
from ttdecode.core.program_description import (
    NUM_DRAM_BANKS,
    check_unpack_to_dest,
    L1_BYTES_PER_CORE,
    Arg,
    BufferAddress,
    CircularBuffer,
    CoreCoord,
    CoreRangeSet,
    Kernel,
    KernelKind,
    NocX,
    NocY,
    Program,
    Semaphore,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import ttnn

#: Largest value a 32-bit kernel argument can hold.
UINT32_MAX = 2**32 - 1

#: Bytes per element of the formats a row-major tensor may use.
_ROW_MAJOR_ELEMENT_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "int32": 4, "uint32": 4}


class StepCache(OrderedDict):
    """The steps an operator keeps, one per shape (plan once, run per step): a dict bounded to `size`
    entries, the least recently used dropped first (a dropped step's ttnn program stays in the
    device's program cache)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The step of `key`, made by ``make()`` and kept on a miss; the most recently used either way."""
        step = self.get(key)
        if step is None:
            step = make()
            self[key] = step
            while len(self) > self.size:
                self.popitem(last=False)
        else:
            self.move_to_end(key)
        return step


class DeviceError(ValueError):
    """A Program cannot be expressed for, or launched on, the device as given."""


class DeviceView(Protocol):
    """What the conversion needs to know about the device and the tensors."""

    def grid_size(self) -> tuple[int, int]:
        """The logical worker grid as (columns, rows); cores outside it are rejected."""
        ...

    def worker_core(self, core: CoreCoord) -> tuple[int, int]:
        """The NoC (virtual / translated) coordinates (x, y) of a logical worker core."""
        ...

    def buffer_address(self, name: str) -> int:
        """The DRAM base address of the tensor called `name`."""
        ...


def require_ttnn() -> ModuleType:
    """Import ttnn (after the mock-cluster setup) or raise naming why it cannot be imported."""
    from ttdecode.ttnn_env import import_ttnn, ttnn_unavailable_reason

    module = import_ttnn()
    if module is None:
        raise RuntimeError(f"the device backend needs ttnn==0.81.1: {ttnn_unavailable_reason()}")
    return module


class TtnnDeviceView:
    """A `DeviceView` over a ttnn device (`MeshDevice` / `Device`) and named ttnn device tensors."""

    def __init__(self, device: Any, io_tensors: Mapping[str, "ttnn.Tensor"]) -> None:
        self._device = device
        self._tensors = io_tensors

    def grid_size(self) -> tuple[int, int]:
        grid = self._device.compute_with_storage_grid_size()
        return int(grid.x), int(grid.y)

    def worker_core(self, core: CoreCoord) -> tuple[int, int]:
        ttnn = require_ttnn()
        noc = self._device.worker_core_from_logical_core(ttnn.CoreCoord(core.x, core.y))
        return int(noc.x), int(noc.y)

    def buffer_address(self, name: str) -> int:
        if name not in self._tensors:
            raise DeviceError(
                f"io_tensors: BufferAddress({name!r}) needs a tensor called {name!r}; "
                f"got tensors {sorted(self._tensors)}"
            )
        return int(self._tensors[name].buffer_address())


def available() -> bool:
    """True when a Tenstorrent device is present (so `backend="auto"` may choose the device)."""
    from ttdecode.ttnn_env import has_tenstorrent_device

    return has_tenstorrent_device()


# ---- conversion ------------------------------------------------------------------------------


def _check_uint32(value: object, what: str) -> int:
    """`value` as an int in 0..2**32-1, or a DeviceError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeviceError(f"{what}: expected an int (0..{UINT32_MAX}), got {type(value).__name__} {value!r}")
    if not 0 <= value <= UINT32_MAX:
        raise DeviceError(f"{what}: expected a uint32 (0..{UINT32_MAX}), got {value}")
    return value


def _check_cores_in_grid(cores: CoreRangeSet, grid: tuple[int, int], what: str) -> None:
    for r in cores.ranges:
        for corner in (r.start, r.end):
            if not (0 <= corner.x < grid[0] and 0 <= corner.y < grid[1]):
                raise DeviceError(
                    f"{what}: core ({corner.x}, {corner.y}) lies outside the device's "
                    f"{grid[0]}x{grid[1]} worker grid (x in 0..{grid[0] - 1}, y in 0..{grid[1] - 1})"
                )


def core_range_set(ttnn: ModuleType, cores: CoreRangeSet) -> "ttnn.CoreRangeSet":
    """Our `CoreRangeSet` as a ttnn `CoreRangeSet` (same rectangles, same order)."""
    return ttnn.CoreRangeSet(
        [
            ttnn.CoreRange(ttnn.CoreCoord(r.start.x, r.start.y), ttnn.CoreCoord(r.end.x, r.end.y))
            for r in cores.ranges
        ]
    )


def ttnn_data_type(ttnn: ModuleType, dtype: DataType) -> "ttnn.DataType":
    """The ttnn DataType of the same name as our DataType (bfloat8_b -> ttnn.bfloat8_b, ...)."""
    if not isinstance(dtype, DataType):
        raise DeviceError(f"data_format: expected a ttdecode DataType, got {type(dtype).__name__} {dtype!r}")
    found = getattr(ttnn, dtype.value, None)
    if not isinstance(found, ttnn.DataType):
        raise DeviceError(f"data_format: ttnn has no DataType called {dtype.value!r}")
    return found


def resolve_arg(arg: Arg, view: DeviceView, known_tensors: Sequence[str], grid: tuple[int, int], what: str) -> int:
    """One runtime argument as a uint32: ints pass (range-checked), placeholders are resolved."""
    if isinstance(arg, (NocX, NocY)):
        core = arg.core
        if not (0 <= core.x < grid[0] and 0 <= core.y < grid[1]):
            raise DeviceError(
                f"{what}: {type(arg).__name__} names core ({core.x}, {core.y}), outside the device's "
                f"{grid[0]}x{grid[1]} worker grid"
            )
        x, y = view.worker_core(core)
        return _check_uint32(x if isinstance(arg, NocX) else y, f"{what} ({arg})")
    if isinstance(arg, BufferAddress):
        if arg.name not in known_tensors:
            raise DeviceError(
                f"{what}: BufferAddress({arg.name!r}) names no tensor of the program; "
                f"expected one of {list(known_tensors)}"
            )
        return _check_uint32(view.buffer_address(arg.name), f"{what} (address of {arg.name!r})")
    if isinstance(arg, bool) or not isinstance(arg, int):
        raise DeviceError(
            f"{what}: expected an int or a placeholder (NocX, NocY, BufferAddress), "
            f"got {type(arg).__name__} {arg!r}"
        )
    return _check_uint32(arg, what)


def _kernel_config(ttnn: ModuleType, kernel: Kernel) -> Any:
    if kernel.kind is KernelKind.READER:
        return ttnn.ReaderConfigDescriptor()
    if kernel.kind is KernelKind.WRITER:
        return ttnn.WriterConfigDescriptor()
    settings = kernel.compute
    assert settings is not None  # Kernel.__post_init__ guarantees it for COMPUTE
    config = ttnn.ComputeConfigDescriptor(
        math_fidelity=getattr(ttnn.MathFidelity, settings.math_fidelity.value),
        math_approx_mode=bool(settings.math_approx_mode),
        fp32_dest_acc_en=bool(settings.fp32_dest_acc_en),
        dst_full_sync_en=bool(settings.dst_full_sync_en),
    )
    # Not a constructor argument in 0.81.1: the per-CB-index list is set on the object.
    if settings.unpack_to_dest_mode:
        config.unpack_to_dest_mode = [getattr(ttnn.UnpackToDestMode, m.value) for m in settings.unpack_to_dest_mode]
    return config


def kernel_descriptor(
    ttnn: ModuleType, kernel: Kernel, view: DeviceView, known_tensors: Sequence[str], grid: tuple[int, int]
) -> "ttnn.KernelDescriptor":
    """One `Kernel` as a ttnn `KernelDescriptor` with every placeholder resolved."""
    what = f"kernel {kernel.name!r}"
    source = Path(kernel.source).resolve()
    if not source.is_file():
        raise DeviceError(f"{what}: source {str(kernel.source)!r} is not a file (resolved to {source})")
    _check_cores_in_grid(kernel.cores, grid, what)
    ct_args = [_check_uint32(v, f"{what}: compile-time arg {i}") for i, v in enumerate(kernel.compile_time_args)]
    named = [(n, _check_uint32(v, f"{what}: named compile-time arg {n!r}"))
             for n, v in kernel.named_compile_time_args.items()]
    defines = []
    for key, value in kernel.defines.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise DeviceError(f"{what}: define {key!r}={value!r}: expected str name and str value")
        defines.append((key, value))
    runtime_args = []
    for core in kernel.cores.cores():
        if core not in kernel.runtime_args:
            raise DeviceError(
                f"{what}: core ({core.x}, {core.y}) has no runtime args; every core of a kernel needs a "
                f"list (possibly empty)"
            )
        args = kernel.runtime_args[core]
        values = [
            resolve_arg(a, view, known_tensors, grid, f"{what}: runtime arg {i} on core ({core.x}, {core.y})")
            for i, a in enumerate(args)
        ]
        runtime_args.append((ttnn.CoreCoord(core.x, core.y), values))
    common = [
        resolve_arg(a, view, known_tensors, grid, f"{what}: common runtime arg {i}")
        for i, a in enumerate(kernel.common_runtime_args)
    ]
    return ttnn.KernelDescriptor(
        kernel_source=str(source),
        source_type=ttnn.KernelDescriptor.SourceType.FILE_PATH,
        core_ranges=core_range_set(ttnn, kernel.cores),
        compile_time_args=ct_args,
        named_compile_time_args=named,
        defines=defines,
        runtime_args=runtime_args,
        common_runtime_args=common,
        config=_kernel_config(ttnn, kernel),
        # The kernels include their siblings ("common.hpp") relative to their own directory.
        compiler_include_paths=[str(source.parent)],
    )


def cb_descriptor(ttnn: ModuleType, cb: CircularBuffer, grid: tuple[int, int]) -> "ttnn.CBDescriptor":
    """One `CircularBuffer` as a ttnn `CBDescriptor` with a single format descriptor; a CB of 16x32 or
    8x32 tiles (tile_rows 16 / 8) carries its tile shape (ttnn.TileDescriptor(rows, 32)), from which the
    device build gives the compute kernel the CB's face count and face height."""
    _check_cores_in_grid(cb.cores, grid, f"CB {cb.index}")
    fmt = ttnn.CBFormatDescriptor(
        buffer_index=cb.index,
        data_format=ttnn_data_type(ttnn, cb.data_format),
        page_size=_check_uint32(cb.page_size, f"CB {cb.index}: page_size"),
        tile=ttnn.TileDescriptor(cb.tile_rows, 32) if cb.tile_rows != 32 else None,
    )
    return ttnn.CBDescriptor(
        total_size=_check_uint32(cb.total_size, f"CB {cb.index}: total_size"),
        core_ranges=core_range_set(ttnn, cb.cores),
        format_descriptors=[fmt],
    )


def semaphore_descriptor(ttnn: ModuleType, sem: Semaphore, grid: tuple[int, int]) -> "ttnn.SemaphoreDescriptor":
    """One `Semaphore` as a ttnn `SemaphoreDescriptor` on worker cores."""
    what = f"semaphore {sem.id}"
    _check_cores_in_grid(sem.cores, grid, what)
    return ttnn.SemaphoreDescriptor(
        id=_check_uint32(sem.id, f"{what}: id"),
        core_type=ttnn.CoreType.WORKER,
        core_ranges=core_range_set(ttnn, sem.cores),
        initial_value=_check_uint32(sem.initial_value, f"{what}: initial_value"),
    )


def _check_l1_and_indices(program: Program) -> None:
    """No core holds two CBs with one index or two semaphores with one id, nor more CB bytes than L1."""
    cb_at: dict[tuple[CoreCoord, int], CircularBuffer] = {}
    bytes_at: dict[CoreCoord, int] = {}
    for cb in program.circular_buffers:
        for core in cb.cores.cores():
            if (core, cb.index) in cb_at:
                raise DeviceError(f"CB {cb.index}: core ({core.x}, {core.y}) already holds a CB with index {cb.index}")
            cb_at[(core, cb.index)] = cb
            bytes_at[core] = bytes_at.get(core, 0) + cb.total_size
    for core, total in bytes_at.items():
        if total > L1_BYTES_PER_CORE:
            raise DeviceError(
                f"circular_buffers: core ({core.x}, {core.y}) needs {total} B of CBs, L1 holds {L1_BYTES_PER_CORE} B"
            )
    sem_at: set[tuple[CoreCoord, int]] = set()
    for sem in program.semaphores:
        for core in sem.cores.cores():
            if (core, sem.id) in sem_at:
                raise DeviceError(f"semaphore {sem.id}: core ({core.x}, {core.y}) already holds semaphore {sem.id}")
            sem_at.add((core, sem.id))


def build_program_descriptor(program: Program, view: DeviceView) -> "ttnn.ProgramDescriptor":
    """`program` as a ttnn `ProgramDescriptor`, with placeholders resolved through `view`."""
    ttnn = require_ttnn()
    if not isinstance(program, Program):
        raise DeviceError(f"program: expected a ttdecode.core.program_description.Program, got {type(program).__name__}")
    grid = view.grid_size()
    known = [t.name for t in program.tensors]
    _check_l1_and_indices(program)
    try:
        check_unpack_to_dest(program)
    except ValueError as exc:
        raise DeviceError(str(exc)) from None
    return ttnn.ProgramDescriptor(
        kernels=[kernel_descriptor(ttnn, k, view, known, grid) for k in program.kernels],
        semaphores=[semaphore_descriptor(ttnn, s, grid) for s in program.semaphores],
        cbs=[cb_descriptor(ttnn, cb, grid) for cb in program.circular_buffers],
    )


def to_program_descriptor(
    program: Program, io_tensors: Mapping[str, "ttnn.Tensor"], device: Any
) -> "ttnn.ProgramDescriptor":
    """`program` as a ttnn `ProgramDescriptor` for `device`, addresses taken from `io_tensors`."""
    return build_program_descriptor(program, TtnnDeviceView(device, io_tensors))


# ---- launch --------------------------------------------------------------------------------


def _layout(ttnn: ModuleType, layout: str, what: str) -> Any:
    if layout in ("tile", "key_row"):
        return ttnn.TILE_LAYOUT
    if layout == "row_major":
        return ttnn.ROW_MAJOR_LAYOUT
    raise DeviceError(f"{what}: layout expected 'tile' or 'row_major', got {layout!r}")


def _element_name(spec: Any) -> str:
    """The element type of a program tensor as ttnn names it (a row-major int tensor's own type)."""
    return spec.element_type or spec.data_format.value


def tensor_dtype(ttnn: ModuleType, spec: Any) -> "ttnn.DataType":
    """The ttnn dtype a program tensor has on the device."""
    if spec.element_type is not None:
        return getattr(ttnn, spec.element_type)
    return ttnn_data_type(ttnn, spec.data_format)


def _check_page_geometry(spec: Any) -> None:
    """The program's page arithmetic must match how ttnn lays the tensor out in DRAM."""
    what = f"tensor {spec.name!r}"
    if spec.layout == "tile":
        want_size, want_pages = tile_size(spec.data_format), num_tiles(spec.shape)
    elif spec.layout == "key_row":
        row = spec.shape[-1] // TILE
        want_size, want_pages = tile_size(spec.data_format) * row, num_tiles(spec.shape) // row
    else:
        elem = _ROW_MAJOR_ELEMENT_BYTES.get(_element_name(spec))
        if elem is None:
            raise DeviceError(f"{what}: row-major layout needs float32/bfloat16/int32/uint32, got {_element_name(spec)}")
        want_size = spec.shape[-1] * elem
        want_pages = 1
        for d in spec.shape[:-1]:
            want_pages *= d
    if (spec.page_size, spec.num_pages) != (want_size, want_pages):
        raise DeviceError(
            f"{what}: program pages ({spec.num_pages} x {spec.page_size} B) differ from ttnn's "
            f"{spec.layout} layout of shape {tuple(spec.shape)} in {_element_name(spec)} "
            f"({want_pages} x {want_size} B)"
        )


def check_input_tensor(ttnn: ModuleType, spec: Any, tensor: Any) -> None:
    """An input must be an interleaved DRAM device tensor with the program's dtype, layout and shape."""
    what = f"io_tensors[{spec.name!r}]"
    if not ttnn.is_tensor_storage_on_device(tensor):
        raise DeviceError(f"{what}: expected a tensor on the device (ttnn.to_device), got one on the host")
    if tensor.dtype != tensor_dtype(ttnn, spec):
        raise DeviceError(f"{what}: expected dtype {_element_name(spec)}, got {tensor.dtype}")
    if tensor.layout != _layout(ttnn, spec.layout, what):
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
    banks = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(NUM_DRAM_BANKS - 1, 0))])
    spec = ttnn.NdShardSpec(ttnn.Shape([1, 1, TILE, last_dim]), banks, ttnn.ShardOrientation.ROW_MAJOR,
                            ttnn.ShardDistributionStrategy.ROUND_ROBIN_1D)
    return ttnn.MemoryConfig(ttnn.BufferType.DRAM, spec)


def check_key_row_memory_config(ttnn: ModuleType, mem: Any, last_dim: int, what: str) -> None:
    """`mem` must be key_row_memory_config(ttnn, last_dim): DRAM, ND shards [1, 1, 32, last_dim] over
    the 12 banks in order, round robin."""
    want = key_row_memory_config(ttnn, last_dim)
    if mem != want:
        raise DeviceError(f"{what}: kv_pages='key_row' expects a DRAM tensor ND-sharded with [1, 1, {TILE}, "
                          f"{last_dim}] shards round robin over the {NUM_DRAM_BANKS} banks "
                          f"(ttdecode.ttnn_backend.key_row_memory_config), got {mem}")


def _check_io(program: Program, io_tensors: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """The program's (inputs in generic_op order, outputs), with every given input checked against
    its spec (device tensor, dtype, layout, shape, interleaved DRAM) and the outputs' pages."""
    ttnn = require_ttnn()
    if not isinstance(program, Program):
        raise DeviceError(f"program: expected a ttdecode.core.program_description.Program, got {type(program).__name__}")
    inputs = [t for t in program.tensors if not t.is_output]
    outputs = [t for t in program.tensors if t.is_output]
    if not outputs and not any(t.in_place for t in inputs):
        raise DeviceError("program: expected at least one output or in-place tensor (ttnn.generic_op returns the "
                          "last of its io tensors), got none")
    # In-place inputs go after the plain inputs, so without outputs the last of them is the one
    # generic_op returns.
    inputs = [t for t in inputs if not t.in_place] + [t for t in inputs if t.in_place]
    names = {t.name for t in program.tensors}
    unknown = sorted(set(io_tensors) - names)
    if unknown:
        raise DeviceError(f"io_tensors: {unknown} are not tensors of the program (expected {sorted(names)})")
    for spec in outputs:
        if spec.name in io_tensors:
            raise DeviceError(f"io_tensors[{spec.name!r}]: {spec.name!r} is an output; launch allocates it")
    missing = [spec.name for spec in inputs if spec.name not in io_tensors]
    if missing:
        raise DeviceError(f"io_tensors: missing input tensor(s) {missing} (got {sorted(io_tensors)})")
    for spec in inputs:
        _check_page_geometry(spec)
        check_input_tensor(ttnn, spec, io_tensors[spec.name])
    for spec in outputs:
        _check_page_geometry(spec)
    return inputs, outputs


def _allocate_outputs(outputs: Sequence[Any], device: Any) -> dict[str, Any]:
    """The output tensors, interleaved in DRAM on `device` (on a MeshDevice: at one address on every device)."""
    ttnn = require_ttnn()
    return {
        spec.name: ttnn.allocate_tensor_on_device(
            ttnn.Shape(list(spec.shape)),
            tensor_dtype(ttnn, spec),
            _layout(ttnn, spec.layout, f"tensor {spec.name!r}"),
            device,
            ttnn.DRAM_MEMORY_CONFIG,
        )
        for spec in outputs
    }


def launch(program: Program, io_tensors: Mapping[str, "ttnn.Tensor"], device: Any) -> list["ttnn.Tensor"]:
    """Run `program` on `device` with `ttnn.generic_op`; returns the output tensors in program order.

    `io_tensors` holds every input tensor of the program (device tensors, interleaved DRAM, the
    program's dtype, layout and shape). The outputs are allocated here and must not be passed in.
    On a MeshDevice the one descriptor runs on every device (SPMD).
    """
    ttnn = require_ttnn()
    inputs, outputs = _check_io(program, io_tensors)
    allocated = _allocate_outputs(outputs, device)
    descriptor = to_program_descriptor(program, {**io_tensors, **allocated}, device)
    ordered = [io_tensors[s.name] for s in inputs] + [allocated[s.name] for s in outputs]
    ttnn.generic_op(ordered, descriptor)
    return [allocated[s.name] for s in outputs]


def _tensor_signature(program: Program) -> list[tuple[Any, ...]]:
    return [(t.name, tuple(t.shape), _element_name(t), t.layout, t.is_output, t.in_place) for t in program.tensors]


def mesh_program_descriptor(programs: Mapping[tuple[int, ...], Program], view: DeviceView) -> "ttnn.MeshProgramDescriptor":
    """One `ProgramDescriptor` per mesh coordinate (a one-device `MeshCoordinateRange` each) in a
    `ttnn.MeshProgramDescriptor`: generic_op's per-device form, where every device gets its own
    runtime args. A mesh tensor lives at one DRAM address on every device, so one `view` serves all.
    Every program must name the same tensors with the same specs (they share the io tensors)."""
    ttnn = require_ttnn()
    if not programs:
        raise DeviceError("programs: expected at least one (mesh coordinate, Program), got none")
    first_coord, first = next(iter(programs.items()))
    want = _tensor_signature(first)
    mesh = ttnn.MeshProgramDescriptor()
    for coord, program in programs.items():
        if not isinstance(program, Program):
            raise DeviceError(f"programs[{coord}]: expected a ttdecode.core.program_description.Program, got {type(program).__name__}")
        if _tensor_signature(program) != want:
            raise DeviceError(f"programs[{coord}]: its tensors {_tensor_signature(program)} differ from those of "
                              f"programs[{first_coord}] {want}; the devices of one launch share their io tensors")
        at = ttnn.MeshCoordinate(list(coord))
        mesh[ttnn.MeshCoordinateRange(at, at)] = build_program_descriptor(program, view)
    return mesh


def launch_mesh(programs: Mapping[tuple[int, ...], Program], io_tensors: Mapping[str, "ttnn.Tensor"],
                mesh_device: Any) -> list["ttnn.Tensor"]:
    """Run one program per device of `mesh_device` in a single `ttnn.generic_op` call
    (`ttnn.MeshProgramDescriptor`); `programs` maps each mesh coordinate (row, col) to its Program,
    all over the same io tensors (mesh tensors: one shard per device). Returns the output mesh tensors."""
    ttnn = require_ttnn()
    first = next(iter(programs.values()), None)
    if first is None:
        raise DeviceError("programs: expected at least one (mesh coordinate, Program), got none")
    inputs, outputs = _check_io(first, io_tensors)
    allocated = _allocate_outputs(outputs, mesh_device)
    descriptor = mesh_program_descriptor(programs, TtnnDeviceView(mesh_device, {**io_tensors, **allocated}))
    ordered = [io_tensors[s.name] for s in inputs] + [allocated[s.name] for s in outputs]
    ttnn.generic_op(ordered, descriptor)
    return [allocated[s.name] for s in outputs]


# ---- plan once, run per step ---------------------------------------------------------------


def _without_per_core_args(program: Program) -> Program:
    """`program` with every kernel's per-core runtime-arg list empty (cores, common args, all else kept)."""
    import dataclasses

    kernels = [dataclasses.replace(k, runtime_args={core: [] for core in k.runtime_args}) for k in program.kernels]
    return dataclasses.replace(program, kernels=kernels)


class _ZeroAddresses(TtnnDeviceView):
    """A device view whose tensors all sit at address 0: the descriptor is built once with these and
    every run patches the real addresses in."""

    def buffer_address(self, name: str) -> int:
        return 0


def _structure_hash(program: Program, per_core_values: bool = False) -> int:
    """A 64-bit hash of everything a ttnn Program bakes in at construction (kernels, their sources,
    compile-time args, defines, cores, configs, runtime-arg COUNTS, CBs, semaphores): set as the
    descriptor's custom_program_hash so that generic_op skips its descriptor walk on every call.
    `per_core_values`: the per-core runtime-arg VALUES too (a PreparedProgram that stops re-sending
    them must not share its cached ttnn program with one whose per-core values differ)."""
    import hashlib

    parts: list[Any] = []
    for k in program.kernels:
        parts.append((k.name, str(Path(k.source).resolve()), k.kind.value, repr(k.cores), tuple(k.compile_time_args),
                      tuple(sorted(k.named_compile_time_args.items())), tuple(sorted(k.defines.items())),
                      repr(k.compute), len(k.common_runtime_args),
                      tuple((c.x, c.y, len(a)) for c, a in sorted(k.runtime_args.items(), key=lambda i: (i[0].y, i[0].x)))))
        if per_core_values:
            parts.append(tuple((c.x, c.y, tuple(a)) for c, a in sorted(k.runtime_args.items(),
                                                                      key=lambda i: (i[0].y, i[0].x))))
    parts.append(tuple(repr(cb) for cb in program.circular_buffers))
    parts.append(tuple(repr(s) for s in program.semaphores))
    parts.append(_tensor_signature(program))
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


class PreparedProgram:
    """A `Program` made into a ttnn `ProgramDescriptor` once for one device, then run per step.

    Each `run` checks the io tensors' metadata only (on the device, dtype, layout, shape, memory
    config: no data moves), allocates the outputs (or takes the caller's), patches the buffer
    addresses -- and any common runtime args the caller names -- in place in the kept descriptor, and
    calls ``ttnn.generic_op``. The runtime-argument count of every kernel and core is fixed when the
    descriptor is built (ttnn's generic_op cache key ignores it, and a changed count on a cache hit
    corrupts memory), so every run of one PreparedProgram is the same cached ttnn program.

    Per-core args sent once: on a program-cache hit generic_op copies every non-empty per-core
    runtime-arg list of the descriptor into the cached program (per kernel and core; on a mesh once per
    device, measured ~8x the N150 cost on a T3K 1x8) and leaves a core whose list is EMPTY as the cached
    program has it. When no per-core arg is a buffer address (FlashDecode's addresses are all common
    args), the per-core args never change between runs, so after a run with the full descriptor has put
    the program in the device's cache the runs use `lean`: the same descriptor with every per-core list
    empty (common args and CBs as before). The cached program keeps its per-core args and their COUNT
    (nothing resizes them). `lean` would be wrong on a cache MISS (ttnn would build the program with no
    per-core args), so: the hash then covers the per-core VALUES too (no other program shares the
    entry), the full descriptor is used whenever the device's program-cache entry count differs from the
    count after this program's last run (any program built or the cache cleared in between: in a steady
    decode loop the count is constant) or a full run left the cache empty (a disabled cache), and a lean
    run that added an entry raises. What this cannot see: the cache cleared and refilled by other
    programs to exactly the former count between two runs (ttnn 0.81.1 cannot be asked whether one hash
    is cached); after ``clear_program_cache()`` call `reset_lean` on kept programs (`DecodeStep`s:
    ``ttdecode.ops.flash_decode.device_step.clear_steps()`` forgets them).
    """

    def __init__(self, program: Program, device: Any) -> None:
        ttnn = require_ttnn()
        if not isinstance(program, Program):
            raise DeviceError(f"program: expected a ttdecode.core.program_description.Program, got {type(program).__name__}")
        self.program = program
        self.device = device
        inputs = [t for t in program.tensors if not t.is_output]
        self.outputs = [t for t in program.tensors if t.is_output]
        if not self.outputs and not any(t.in_place for t in inputs):
            raise DeviceError("program: expected at least one output or in-place tensor, got none")
        self.inputs = [t for t in inputs if not t.in_place] + [t for t in inputs if t.in_place]
        for spec in self.inputs + self.outputs:
            _check_page_geometry(spec)
        self.descriptor = build_program_descriptor(program, _ZeroAddresses(device, {}))
        per_core_fixed = not any(isinstance(a, BufferAddress) for k in program.kernels
                                 for args in k.runtime_args.values() for a in args)
        counts_entries = callable(getattr(device, "num_program_cache_entries", None))
        use_lean = per_core_fixed and counts_entries
        self.descriptor.custom_program_hash = _structure_hash(program, per_core_values=use_lean)
        #: the descriptor with every per-core runtime-arg list empty (class doc), or None
        self.lean = None
        if use_lean:
            self.lean = build_program_descriptor(_without_per_core_args(program), _ZeroAddresses(device, {}))
            self.lean.custom_program_hash = self.descriptor.custom_program_hash
        #: the device's program-cache entry count after this program's last run (None: run full next)
        self._entries_primed: int | None = None
        # the expected metadata of each input, and the patch slots: (vector, index, tensor name)
        self._expect = []
        for spec in self.inputs:
            layout = _layout(ttnn, spec.layout, f"tensor {spec.name!r}")
            mem = (key_row_memory_config(ttnn, spec.shape[-1]) if spec.layout == "key_row"
                   else ttnn.DRAM_MEMORY_CONFIG)
            self._expect.append((spec, tensor_dtype(ttnn, spec), layout, tuple(spec.shape), mem))
        self._out_alloc = [(spec.name, ttnn.Shape(list(spec.shape)), tensor_dtype(ttnn, spec),
                            _layout(ttnn, spec.layout, f"tensor {spec.name!r}")) for spec in self.outputs]
        self._slots: list[tuple[Any, int, str]] = []
        self._common: dict[str, Any] = {}
        kernels = self.descriptor.kernels
        for kd, kernel in zip(kernels, program.kernels):
            common = kd.common_runtime_args
            self._common[kernel.name] = common
            for i, a in enumerate(kernel.common_runtime_args):
                if isinstance(a, BufferAddress):
                    self._slots.append((common, i, a.name))
            for core, args in kernel.runtime_args.items():
                if any(isinstance(a, BufferAddress) for a in args):
                    vec = kd.runtime_args[core.x][core.y]
                    for i, a in enumerate(args):
                        if isinstance(a, BufferAddress):
                            self._slots.append((vec, i, a.name))
        self.arg_counts = self.runtime_arg_counts()
        order = {spec.name: i for i, spec in enumerate(self.inputs + self.outputs)}
        self._slot_pos = [(vec, i, order[name]) for vec, i, name in self._slots]
        self._lean_common: dict[str, Any] = {}
        self._lean_slot_pos: list[tuple[Any, int, int]] = []
        if self.lean is not None:
            for kd, kernel in zip(self.lean.kernels, program.kernels):
                self._lean_common[kernel.name] = kd.common_runtime_args
                for i, a in enumerate(kernel.common_runtime_args):
                    if isinstance(a, BufferAddress):
                        self._lean_slot_pos.append((kd.common_runtime_args, i, order[a.name]))

    def reset_lean(self) -> None:
        """Run the full descriptor next (e.g. after the device's program cache was cleared)."""
        self._entries_primed = None

    def runtime_arg_counts(self) -> dict[str, tuple[int, dict[tuple[int, int], int]]]:
        """Per kernel: (common runtime-arg count, {core: runtime-arg count}) of the kept descriptor."""
        out = {}
        for kd, kernel in zip(self.descriptor.kernels, self.program.kernels):
            per_core = {(c.x, c.y): len(kd.runtime_args[c.x][c.y]) for c in kernel.runtime_args}
            out[kernel.name] = (len(kd.common_runtime_args), per_core)
        return out

    def check_inputs(self, io_tensors: Mapping[str, Any]) -> None:
        """Metadata only: each input a device tensor with the program's dtype, layout, shape and memory config."""
        ttnn = require_ttnn()
        if len(io_tensors) != len(self._expect) or any(spec.name not in io_tensors for spec, *_ in self._expect):
            raise DeviceError(f"io_tensors: expected exactly {[s.name for s, *_ in self._expect]}, got {sorted(io_tensors)}")
        for spec, dtype, layout, shape, mem in self._expect:
            t = io_tensors[spec.name]
            if (t.dtype != dtype or t.layout != layout or tuple(t.shape) != shape
                    or not ttnn.is_tensor_storage_on_device(t) or t.memory_config() != mem):
                check_input_tensor(ttnn, spec, t)  # raises naming what differs
                raise DeviceError(f"io_tensors[{spec.name!r}]: expected {mem}, got {t.memory_config()}")

    def _launch(self, tensors: Sequence[Any], common_args: Mapping[str, Mapping[int, int]] | None) -> None:
        """Patch the addresses of `tensors` (inputs then outputs, program order) and `common_args` into
        the descriptor this run uses (`lean` once the full one has primed the device's program cache;
        class doc) and call ``ttnn.generic_op``."""
        ttnn = require_ttnn()
        if self.lean is None:
            lean = False
        else:
            before = int(self.device.num_program_cache_entries())
            lean = self._entries_primed is not None and before == self._entries_primed
        desc, slots, common = ((self.lean, self._lean_slot_pos, self._lean_common) if lean
                               else (self.descriptor, self._slot_pos, self._common))
        for vec, i, pos in slots:
            vec[i] = tensors[pos].buffer_address()
        if common_args:
            self._patch_common(common_args, common)
        ttnn.generic_op(list(tensors), desc)
        if self.lean is not None:
            after = int(self.device.num_program_cache_entries())
            if not lean:  # no entry after a full run: the cache is disabled, so never lean
                self._entries_primed = after if after > 0 else None
            elif after != before:
                self._entries_primed = None
                raise DeviceError(
                    f"program cache: a run with per-core runtime args held back (PreparedProgram.lean) added a "
                    f"program-cache entry ({before} -> {after}): the cached program was gone (the cache cleared "
                    f"and refilled between runs?), so ttnn built it without per-core args; its outputs are "
                    f"invalid. Clear the device's program cache and run again")

    def _patch_common(self, common_args: Mapping[str, Mapping[int, int]],
                      into: Mapping[str, Any] | None = None) -> None:
        """Write {kernel name: {index: uint32}} into the kept common runtime args. Every index is checked
        first: a patch may only overwrite existing args, never add one (a cached program's arg COUNT must
        not change: on a cache hit that corrupts memory); nothing is written when one is refused."""
        into = self._common if into is None else into
        for kernel, values in common_args.items():
            vec = into.get(kernel)
            if vec is None:
                raise DeviceError(f"common_args: {kernel!r} is not a kernel of the program (expected one of "
                                  f"{sorted(self._common)})")
            n = len(vec)
            for i in values:
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
                    raise DeviceError(f"common_args[{kernel!r}]: expected an index in [0, {n}) (the kernel has {n} "
                                      f"common runtime args; a cached program's arg count never changes), got {i!r}")
        for kernel, values in common_args.items():
            vec = into[kernel]
            for i, value in values.items():
                vec[i] = value

    def run(self, io_tensors: Mapping[str, Any], *, common_args: Mapping[str, Mapping[int, int]] | None = None,
            outputs: Mapping[str, Any] | None = None, check: bool = True) -> list[Any]:
        """Run once: `io_tensors` the inputs by name; `common_args` {kernel name: {index: uint32}} patched
        into the kernels' common runtime args (their count never changes); `outputs` caller-given output
        tensors by name (else allocated in DRAM). Returns the output tensors in program order."""
        ttnn = require_ttnn()
        if check:
            self.check_inputs(io_tensors)
        allocated = dict(outputs or {})
        for name, shape, dtype, layout in self._out_alloc:
            if name not in allocated:
                allocated[name] = ttnn.allocate_tensor_on_device(shape, dtype, layout, self.device,
                                                                 ttnn.DRAM_MEMORY_CONFIG)
        ordered = [io_tensors[s.name] for s in self.inputs] + [allocated[s.name] for s in self.outputs]
        self._launch(ordered, common_args)
        return [allocated[s.name] for s in self.outputs]

    def run_ordered(self, inputs: Sequence[Any], common_args: Mapping[str, Mapping[int, int]] | None = None) -> list[Any]:
        """`run` without the checks, for a caller that has checked the inputs' metadata itself (the
        cached-call path of ``ttdecode.ops.flash_decode.device_step``): `inputs` the input tensors in
        `self.inputs` order; the outputs allocated in DRAM and returned in program order."""
        ttnn = require_ttnn()
        outs = [ttnn.allocate_tensor_on_device(shape, dtype, layout, self.device, ttnn.DRAM_MEMORY_CONFIG)
                for _, shape, dtype, layout in self._out_alloc]
        self._launch(list(inputs) + outs, common_args)
        return outs
