"""A `Program` (``ttdecode.core.program_description``, the backend-neutral description) as ttnn's descriptor objects.

`build_program_descriptor` converts a `Program` into a ``ttnn.ProgramDescriptor`` and resolves the
runtime-argument placeholders for one device: `NocX(core)` / `NocY(core)` become the NoC (virtual,
translated) coordinates of a logical worker core, `BufferAddress(name)` the DRAM address of the named
tensor. The device and the tensors are seen through a `DeviceView`, so the conversion can be checked
without a device (tests pass a fake view and get real ttnn objects back); `TtnnDeviceView` is the view
over a ttnn device. Every value is checked on the way: a `DeviceError` names what cannot be expressed.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from ttdecode.core.formats import TILE_DIM, DataType
from ttdecode.core.program_description import (
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
    check_unpack_to_dest,
)
from ttdecode.ttnn_env import require_ttnn

if TYPE_CHECKING:  # pragma: no cover - typing only
    import ttnn

#: Largest value a 32-bit kernel argument can hold.
UINT32_MAX = 2**32 - 1


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
        tile=ttnn.TileDescriptor(cb.tile_rows, TILE_DIM) if cb.tile_rows != TILE_DIM else None,
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
