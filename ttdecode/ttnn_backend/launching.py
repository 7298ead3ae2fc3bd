"""One launch of a `Program` with ``ttnn.generic_op``: check the io tensors, allocate the outputs,
build the descriptor, run. `launch` runs one program (on a MeshDevice the same program on every device);
`launch_mesh` one program per device in a single call (``ttnn.MeshProgramDescriptor``). Both need a
Tenstorrent device (or the mock one of ``ttdecode.testing``). A step run many times keeps its descriptor
instead: ``ttdecode.ttnn_backend.prepared.PreparedProgram``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ttdecode.core.program_description import Program
from ttdecode.ttnn_backend.descriptor import (
    DeviceError,
    DeviceView,
    TtnnDeviceView,
    build_program_descriptor,
    to_program_descriptor,
)
from ttdecode.ttnn_backend.tensors import (
    check_input_tensor,
    check_page_geometry,
    tensor_dtype,
    tensor_layout,
    tensor_signature,
)
from ttdecode.ttnn_env import require_ttnn

if TYPE_CHECKING:  # pragma: no cover - typing only
    import ttnn


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
        check_page_geometry(spec)
        check_input_tensor(ttnn, spec, io_tensors[spec.name])
    for spec in outputs:
        check_page_geometry(spec)
    return inputs, outputs


def _allocate_outputs(outputs: Sequence[Any], device: Any) -> dict[str, Any]:
    """The output tensors, interleaved in DRAM on `device` (on a MeshDevice: at one address on every device)."""
    ttnn = require_ttnn()
    return {
        spec.name: ttnn.allocate_tensor_on_device(
            ttnn.Shape(list(spec.shape)),
            tensor_dtype(ttnn, spec),
            tensor_layout(ttnn, spec.layout, f"tensor {spec.name!r}"),
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


def mesh_program_descriptor(programs: Mapping[tuple[int, ...], Program], view: DeviceView) -> "ttnn.MeshProgramDescriptor":
    """One `ProgramDescriptor` per mesh coordinate (a one-device `MeshCoordinateRange` each) in a
    `ttnn.MeshProgramDescriptor`: generic_op's per-device form, where every device gets its own
    runtime args. A mesh tensor lives at one DRAM address on every device, so one `view` serves all.
    Every program must name the same tensors with the same specs (they share the io tensors)."""
    ttnn = require_ttnn()
    if not programs:
        raise DeviceError("programs: expected at least one (mesh coordinate, Program), got none")
    first_coord, first = next(iter(programs.items()))
    want = tensor_signature(first)
    mesh = ttnn.MeshProgramDescriptor()
    for coord, program in programs.items():
        if not isinstance(program, Program):
            raise DeviceError(f"programs[{coord}]: expected a ttdecode.core.program_description.Program, got {type(program).__name__}")
        if tensor_signature(program) != want:
            raise DeviceError(f"programs[{coord}]: its tensors {tensor_signature(program)} differ from those of "
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
