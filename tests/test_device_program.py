"""Program -> ttnn.ProgramDescriptor: real ttnn descriptor objects read back field by field.

The device and the tensors are replaced by a fake `DeviceView` (an 8x8 grid whose NoC coordinates
are the logical ones shifted by 18, as Wormhole's translated worker coordinates are); everything
else is the real ttnn 0.81.1. `launch` is exercised up to `ttnn.generic_op`, which needs a device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ttdecode import ttnn_backend as dev
from ttdecode.ttnn_env import has_tenstorrent_device
from ttdecode.core.formats import DataType
from ttdecode.core.program_description import (
    BufferAddress,
    CircularBuffer,
    ComputeSettings,
    CoreCoord,
    CoreRangeSet,
    DramTensor,
    Kernel,
    KernelKind,
    MathFidelity,
    NocX,
    NocY,
    Program,
    Semaphore,
    UnpackToDestMode,
    unpack_to_dest_modes,
)

#: tt::DataFormat codes (CBFormatDescriptor.data_format_as_uint8) of our DataTypes.
EXPECTED_FORMAT_CODES = {"float32": 0, "bfloat16": 5, "bfloat8_b": 6, "bfloat4_b": 7, "int32": 8, "uint32": 24}
NOC_SHIFT = 18




class FakeView:
    """An 8x8 grid, NoC coordinate = logical + 18, fixed tensor addresses."""

    def __init__(self, addresses: dict[str, int], grid: tuple[int, int] = (8, 8)) -> None:
        self.addresses = addresses
        self.grid = grid
        self.asked: list[CoreCoord] = []

    def grid_size(self) -> tuple[int, int]:
        return self.grid

    def worker_core(self, core: CoreCoord) -> tuple[int, int]:
        self.asked.append(core)
        return core.x + NOC_SHIFT, core.y + NOC_SHIFT

    def buffer_address(self, name: str) -> int:
        return self.addresses[name]


def cores(*xy: tuple[int, int]) -> CoreRangeSet:
    return CoreRangeSet.of(CoreCoord(x, y) for x, y in xy)


@pytest.fixture()
def sources(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("reader", "writer", "compute"):
        p = tmp_path / f"{name}.cpp"
        p.write_text("void kernel_main() {}\n")
        out[name] = p
    return out


def make_program(sources: dict[str, Path]) -> Program:
    """Three kernels on cores (0,0),(1,0),(3,2); CBs of every DataType; two semaphores."""
    c0, c1, c2 = CoreCoord(0, 0), CoreCoord(1, 0), CoreCoord(3, 2)
    where = cores((0, 0), (1, 0), (3, 2))
    reader = Kernel(
        name="reader",
        source=sources["reader"],
        kind=KernelKind.READER,
        cores=where,
        compile_time_args=[1, 32, 2**32 - 1],
        defines={"USE_MASK": "1", "CHUNK": "128"},
        runtime_args={
            c0: [BufferAddress("q"), NocX(c2), NocY(c2), 7],
            c1: [BufferAddress("k"), 0],
            c2: [],
        },
        common_runtime_args=[BufferAddress("out"), 5],
    )
    writer = Kernel(
        name="writer",
        source=sources["writer"],
        kind=KernelKind.WRITER,
        cores=cores((0, 0), (1, 0)),
        runtime_args={c0: [NocX(c1), NocY(c1)], c1: [NocX(c0), NocY(c0)]},
    )
    compute = Kernel(
        name="compute",
        source=sources["compute"],
        kind=KernelKind.COMPUTE,
        cores=where,
        compile_time_args=[4],
        runtime_args={c0: [3], c1: [4], c2: [5]},
        compute=ComputeSettings(MathFidelity.HiFi2, fp32_dest_acc_en=False, math_approx_mode=True, dst_full_sync_en=True),
    )
    cbs = [
        CircularBuffer(index=i, cores=where, data_format=dt, page_size=100 + i, num_pages=i + 1)
        for i, dt in enumerate(DataType)
    ]
    sems = [Semaphore(id=0, cores=where, initial_value=0), Semaphore(id=1, cores=cores((3, 2)), initial_value=9)]
    tensors = [
        DramTensor("q", DataType.bfloat16, 2048, 1, (1, 1, 32, 32), data=bytes(2048)),
        DramTensor("k", DataType.bfloat8_b, 1088, 1, (1, 1, 32, 32), data=bytes(1088)),
        DramTensor("out", DataType.bfloat16, 2048, 1, (1, 1, 32, 32), is_output=True),
    ]
    return Program([reader, writer, compute], cbs, sems, tensors)


ADDRESSES = {"q": 0x10000, "k": 0x20000, "out": 0x30000}


def ranges(crs: Any) -> list[tuple[int, int, int, int]]:
    return [(r.start.x, r.start.y, r.end.x, r.end.y) for r in crs.ranges()]


def test_kernels_keep_source_cores_args_and_defines(ttnn: Any, sources: dict[str, Path]) -> None:
    desc = dev.build_program_descriptor(make_program(sources), FakeView(ADDRESSES))
    assert len(desc.kernels) == 3
    reader = desc.kernels[0]
    assert reader.kernel_source == str(sources["reader"].resolve())
    assert reader.source_type == ttnn.KernelDescriptor.SourceType.FILE_PATH
    assert ranges(reader.core_ranges) == [(0, 0, 1, 0), (3, 2, 3, 2)]
    assert list(reader.compile_time_args) == [1, 32, 2**32 - 1]
    assert sorted(reader.defines) == [("CHUNK", "128"), ("USE_MASK", "1")]
    assert [str(p) for p in reader.compiler_include_paths] == [str(sources["reader"].parent.resolve())]
    assert ranges(desc.kernels[1].core_ranges) == [(0, 0, 1, 0)]


def test_placeholders_resolve_to_noc_coordinates_and_buffer_addresses(ttnn: Any, sources: dict[str, Path]) -> None:
    view = FakeView(ADDRESSES)
    desc = dev.build_program_descriptor(make_program(sources), view)
    reader, writer, compute = desc.kernels
    assert list(reader.runtime_args[0][0]) == [0x10000, 3 + NOC_SHIFT, 2 + NOC_SHIFT, 7]
    assert list(reader.runtime_args[1][0]) == [0x20000, 0]
    assert list(reader.runtime_args[3][2]) == []
    assert list(reader.common_runtime_args) == [0x30000, 5]
    assert list(writer.runtime_args[0][0]) == [1 + NOC_SHIFT, 0 + NOC_SHIFT]
    assert list(writer.runtime_args[1][0]) == [0 + NOC_SHIFT, 0 + NOC_SHIFT]
    assert [list(compute.runtime_args[x][y]) for x, y in [(0, 0), (1, 0), (3, 2)]] == [[3], [4], [5]]
    with pytest.raises(IndexError):  # no args were set on a core the kernel does not run on
        writer.runtime_args[3][2]
    assert CoreCoord(3, 2) in view.asked and CoreCoord(1, 0) in view.asked


def test_kernel_kinds_get_reader_writer_and_compute_configs(ttnn: Any, sources: dict[str, Path]) -> None:
    reader, writer, compute = dev.build_program_descriptor(make_program(sources), FakeView(ADDRESSES)).kernels
    assert isinstance(reader.config, ttnn.ReaderConfigDescriptor)
    assert isinstance(writer.config, ttnn.WriterConfigDescriptor)
    cfg = compute.config
    assert isinstance(cfg, ttnn.ComputeConfigDescriptor)
    assert cfg.math_fidelity == ttnn.MathFidelity.HiFi2
    assert (cfg.fp32_dest_acc_en, cfg.math_approx_mode, cfg.dst_full_sync_en) == (False, True, True)


@pytest.mark.parametrize("fidelity", list(MathFidelity))
def test_every_math_fidelity_maps_to_ttnn_of_the_same_name(ttnn: Any, sources: dict[str, Path], fidelity: MathFidelity) -> None:
    p = make_program(sources)
    p.kernels[2].compute = ComputeSettings(fidelity, fp32_dest_acc_en=True)
    cfg = dev.build_program_descriptor(p, FakeView(ADDRESSES)).kernels[2].config
    assert cfg.math_fidelity == getattr(ttnn.MathFidelity, fidelity.value)
    assert cfg.fp32_dest_acc_en is True


def test_circular_buffers_of_every_data_type_keep_index_format_and_sizes(ttnn: Any, sources: dict[str, Path]) -> None:
    desc = dev.build_program_descriptor(make_program(sources), FakeView(ADDRESSES))
    assert len(desc.cbs) == len(DataType)
    for i, (cb, dt) in enumerate(zip(desc.cbs, DataType)):
        assert cb.total_size == (100 + i) * (i + 1)
        assert ranges(cb.core_ranges) == [(0, 0, 1, 0), (3, 2, 3, 2)]
        (fmt,) = list(cb.format_descriptors)
        assert (fmt.buffer_index, fmt.page_size) == (i, 100 + i)
        assert dt.value in EXPECTED_FORMAT_CODES, f"add the tt::DataFormat code of {dt.value} to this test"
        assert fmt.data_format_as_uint8 == EXPECTED_FORMAT_CODES[dt.value]


@pytest.mark.parametrize("rows", [16, 8])
def test_a_cb_of_small_tiles_carries_its_tile_shape_and_a_32x32_cb_none(ttnn: Any, sources: dict[str, Path],
                                                                        rows: int) -> None:
    p = make_program(sources)
    f32 = DataType.float32
    p.circular_buffers[0] = CircularBuffer(0, p.circular_buffers[0].cores, f32, 128 * rows, 2, tile_rows=rows)
    p.circular_buffers[1] = CircularBuffer(1, p.circular_buffers[1].cores, f32, 4096, 2)
    desc = dev.build_program_descriptor(p, FakeView(ADDRESSES))
    (half,) = list(desc.cbs[0].format_descriptors)
    (full,) = list(desc.cbs[1].format_descriptors)
    assert (half.tile.height, half.tile.width) == (rows, 32)
    assert half.page_size == 128 * rows
    assert full.tile is None


def test_semaphores_keep_id_cores_and_initial_value(ttnn: Any, sources: dict[str, Path]) -> None:
    sems = dev.build_program_descriptor(make_program(sources), FakeView(ADDRESSES)).semaphores
    assert [(s.id, s.initial_value, s.core_type) for s in sems] == [
        (0, 0, ttnn.CoreType.WORKER),
        (1, 9, ttnn.CoreType.WORKER),
    ]
    assert ranges(sems[1].core_ranges) == [(3, 2, 3, 2)]


def test_to_program_descriptor_reads_a_ttnn_style_device_and_tensors(ttnn: Any, sources: dict[str, Path]) -> None:
    class Dev:
        def compute_with_storage_grid_size(self) -> Any:
            return ttnn.CoreCoord(8, 8)

        def worker_core_from_logical_core(self, c: Any) -> Any:
            return ttnn.CoreCoord(c.x + 1, c.y + 2)

    class T:
        def __init__(self, a: int) -> None:
            self.a = a

        def buffer_address(self) -> int:
            return self.a

    io = {name: T(a) for name, a in ADDRESSES.items()}
    desc = dev.to_program_descriptor(make_program(sources), io, Dev())
    assert list(desc.kernels[0].runtime_args[0][0]) == [0x10000, 4, 4, 7]


def test_unknown_tensor_name_is_refused_naming_it(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    p.kernels[0].runtime_args[CoreCoord(3, 2)] = [BufferAddress("cache")]
    with pytest.raises(dev.DeviceError, match=r"BufferAddress\('cache'\) names no tensor of the program"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


def test_tensor_missing_from_io_tensors_is_refused_naming_it(ttnn: Any, sources: dict[str, Path]) -> None:
    view = dev.TtnnDeviceView(object(), {})
    with pytest.raises(dev.DeviceError, match=r"BufferAddress\('q'\) needs a tensor called 'q'"):
        view.buffer_address("q")


def test_core_outside_the_grid_is_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    with pytest.raises(dev.DeviceError, match=r"kernel 'reader': core \(3, 2\) lies outside the device's 3x3"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES, grid=(3, 3)))


def test_placeholder_naming_a_core_outside_the_grid_is_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    p.kernels[1].runtime_args[CoreCoord(0, 0)] = [NocX(CoreCoord(8, 0))]
    with pytest.raises(dev.DeviceError, match=r"runtime arg 0 on core \(0, 0\): NocX names core \(8, 0\)"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


def test_cb_and_semaphore_outside_the_grid_are_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    p.kernels = []
    p.circular_buffers = [CircularBuffer(0, cores((9, 0)), DataType.bfloat16, 2048, 2)]
    with pytest.raises(dev.DeviceError, match=r"CB 0: core \(9, 0\) lies outside"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))
    p.circular_buffers = []
    p.semaphores = [Semaphore(2, cores((0, 8)))]
    with pytest.raises(dev.DeviceError, match=r"semaphore 2: core \(0, 8\) lies outside"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


@pytest.mark.parametrize("bad", [1.5, "3", None, True, [1]])
def test_runtime_arg_that_is_neither_int_nor_placeholder_is_refused(ttnn: Any, sources: dict[str, Path], bad: Any) -> None:
    p = make_program(sources)
    p.kernels[2].runtime_args[CoreCoord(1, 0)] = [4, bad]
    with pytest.raises(dev.DeviceError, match=r"kernel 'compute': runtime arg 1 on core \(1, 0\): expected an int"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


@pytest.mark.parametrize("value", [2**32, -1])
def test_runtime_arg_outside_uint32_is_refused(ttnn: Any, sources: dict[str, Path], value: int) -> None:
    p = make_program(sources)
    p.kernels[0].common_runtime_args = [value]
    with pytest.raises(dev.DeviceError, match=rf"common runtime arg 0: expected a uint32 \(0..4294967295\), got {value}"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


def test_compile_time_arg_and_resolved_address_overflow_are_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    p.kernels[2].compile_time_args = [2**32]
    with pytest.raises(dev.DeviceError, match=r"kernel 'compute': compile-time arg 0: expected a uint32"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))
    with pytest.raises(dev.DeviceError, match=r"address of 'k'\): expected a uint32.*got 4294967296"):
        dev.build_program_descriptor(make_program(sources), FakeView({**ADDRESSES, "k": 2**32}))


def test_core_without_runtime_args_is_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    del p.kernels[1].runtime_args[CoreCoord(1, 0)]
    with pytest.raises(dev.DeviceError, match=r"kernel 'writer': core \(1, 0\) has no runtime args"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


def test_missing_kernel_source_is_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    sources["writer"].unlink()
    with pytest.raises(dev.DeviceError, match=r"kernel 'writer': source .*writer.cpp' is not a file"):
        dev.build_program_descriptor(make_program(sources), FakeView(ADDRESSES))


def test_two_cbs_with_one_index_on_a_core_are_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    p.circular_buffers.append(CircularBuffer(1, cores((3, 2)), DataType.bfloat16, 2048, 1))
    with pytest.raises(dev.DeviceError, match=r"CB 1: core \(3, 2\) already holds a CB with index 1"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


def test_cbs_beyond_l1_are_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    p.circular_buffers.append(CircularBuffer(20, cores((0, 0)), DataType.bfloat16, 2048, 800))
    with pytest.raises(dev.DeviceError, match=r"core \(0, 0\) needs \d+ B of CBs, L1 holds 1499136 B"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


def test_duplicate_semaphore_id_on_a_core_is_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    p.semaphores.append(Semaphore(1, cores((3, 2), (4, 2))))
    with pytest.raises(dev.DeviceError, match=r"semaphore 1: core \(3, 2\) already holds semaphore 1"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))


def test_no_device_detected_without_a_tenstorrent_node() -> None:
    present = any(Path("/dev").glob("tenstorrent*"))
    assert has_tenstorrent_device() is present


# ---- launch, up to ttnn.generic_op ------------------------------------------------------------


def host_tensor(ttnn: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    import numpy as np

    return ttnn.Tensor(np.zeros(shape, dtype=np.float32), data_type=dtype, layout=ttnn.TILE_LAYOUT)


def test_launch_refuses_a_missing_input(ttnn: Any, sources: dict[str, Path]) -> None:
    with pytest.raises(dev.DeviceError, match=r"io_tensors: missing input tensor\(s\) \['k'\]"):
        dev.launch(make_program(sources), {"q": host_tensor(ttnn, (1, 1, 32, 32), ttnn.bfloat16)}, device=None)


def test_launch_refuses_host_tensors(ttnn: Any, sources: dict[str, Path]) -> None:
    io = {
        "q": host_tensor(ttnn, (1, 1, 32, 32), ttnn.bfloat16),
        "k": host_tensor(ttnn, (1, 1, 32, 32), ttnn.bfloat8_b),
    }
    with pytest.raises(dev.DeviceError, match=r"io_tensors\['q'\]: expected a tensor on the device"):
        dev.launch(make_program(sources), io, device=None)


def test_launch_refuses_an_output_passed_in_and_unknown_names(ttnn: Any, sources: dict[str, Path]) -> None:
    with pytest.raises(dev.DeviceError, match=r"'out' is an output; launch allocates it"):
        dev.launch(make_program(sources), {"out": object()}, device=None)
    with pytest.raises(dev.DeviceError, match=r"\['v'\] are not tensors of the program"):
        dev.launch(make_program(sources), {"v": object()}, device=None)


def test_launch_refuses_pages_that_disagree_with_ttnn_layout(
    ttnn: Any, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ttnn, "is_tensor_storage_on_device", lambda t: True)
    p = make_program(sources)
    p.tensors[2] = DramTensor("out", DataType.bfloat16, 2048, 2, (1, 1, 32, 32), is_output=True)
    io = {
        "q": _FakeDeviceTensor(ttnn, ttnn.bfloat16, (1, 1, 32, 32), 0),
        "k": _FakeDeviceTensor(ttnn, ttnn.bfloat8_b, (1, 1, 32, 32), 0),
    }
    with pytest.raises(dev.DeviceError, match=r"tensor 'out': program pages \(2 x 2048 B\) differ from ttnn's tile"):
        dev.launch(p, io, device=None)


class _FakeMem:
    def __init__(self, ttnn: Any) -> None:
        self.buffer_type = ttnn.BufferType.DRAM
        self.memory_layout = ttnn.TensorMemoryLayout.INTERLEAVED


class _FakeDeviceTensor:
    """Stands in for a ttnn device tensor (no device here): dtype/layout/shape/memory/address."""

    def __init__(self, ttnn: Any, dtype: Any, shape: tuple[int, ...], address: int) -> None:
        self.dtype, self.layout, self.shape, self.address = dtype, ttnn.TILE_LAYOUT, shape, address
        self._mem = _FakeMem(ttnn)

    def memory_config(self) -> Any:
        return self._mem

    def buffer_address(self) -> int:
        return self.address


def test_launch_allocates_outputs_and_passes_them_last_to_generic_op(
    ttnn: Any, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: dict[str, Any] = {}

    def allocate(shape: Any, dtype: Any, layout: Any, device: Any, mem: Any) -> Any:
        calls["allocate"] = (list(shape), dtype, layout, device, mem)
        return _FakeDeviceTensor(ttnn, dtype, tuple(shape), 0x30000)

    def generic_op(tensors: list[Any], descriptor: Any) -> Any:
        calls["generic_op"] = (tensors, descriptor)
        return tensors[-1]

    class Dev:
        def compute_with_storage_grid_size(self) -> Any:
            return ttnn.CoreCoord(8, 8)

        def worker_core_from_logical_core(self, c: Any) -> Any:
            return ttnn.CoreCoord(c.x + NOC_SHIFT, c.y + NOC_SHIFT)

    monkeypatch.setattr(ttnn, "allocate_tensor_on_device", allocate)
    monkeypatch.setattr(ttnn, "generic_op", generic_op)
    monkeypatch.setattr(ttnn, "is_tensor_storage_on_device", lambda t: isinstance(t, _FakeDeviceTensor))
    q = _FakeDeviceTensor(ttnn, ttnn.bfloat16, (1, 1, 32, 32), 0x10000)
    k = _FakeDeviceTensor(ttnn, ttnn.bfloat8_b, (1, 1, 32, 32), 0x20000)
    device = Dev()
    (out,) = dev.launch(make_program(sources), {"k": k, "q": q}, device)
    assert calls["allocate"][:3] == ([1, 1, 32, 32], ttnn.bfloat16, ttnn.TILE_LAYOUT)
    assert calls["allocate"][3] is device
    assert calls["allocate"][4] == ttnn.DRAM_MEMORY_CONFIG
    tensors, descriptor = calls["generic_op"]
    assert tensors == [q, k, out]
    assert isinstance(descriptor, ttnn.ProgramDescriptor)
    assert list(descriptor.kernels[0].common_runtime_args) == [0x30000, 5]


def test_launch_refuses_an_input_of_the_wrong_dtype(ttnn: Any, sources: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ttnn, "is_tensor_storage_on_device", lambda t: True)
    q = _FakeDeviceTensor(ttnn, ttnn.bfloat16, (1, 1, 32, 32), 0)
    k = _FakeDeviceTensor(ttnn, ttnn.bfloat16, (1, 1, 32, 32), 0)
    with pytest.raises(dev.DeviceError, match=r"io_tensors\['k'\]: expected dtype bfloat8_b, got DataType.BFLOAT16"):
        dev.launch(make_program(sources), {"q": q, "k": k}, device=None)


def test_generic_op_itself_needs_a_device_here(ttnn: Any) -> None:
    """What launch would hit on this machine: ttnn refuses to run a program on host tensors."""
    if has_tenstorrent_device():
        pytest.skip("a Tenstorrent device is present")
    with pytest.raises(RuntimeError, match=r"mesh_device != nullptr"):
        ttnn.generic_op([host_tensor(ttnn, (32, 32), ttnn.float32)], ttnn.ProgramDescriptor())


def test_unpack_to_dest_mode_reaches_the_real_compute_config_entry_by_entry(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    f32 = next(cb.index for cb in p.circular_buffers if cb.data_format is DataType.float32)
    assert len(dev.build_program_descriptor(p, FakeView(ADDRESSES)).kernels[2].config.unpack_to_dest_mode) == 0
    p.kernels[2].compute = ComputeSettings(fp32_dest_acc_en=True, unpack_to_dest_mode=unpack_to_dest_modes([f32]))
    modes = list(dev.build_program_descriptor(p, FakeView(ADDRESSES)).kernels[2].config.unpack_to_dest_mode)
    assert len(modes) == 32
    for i, m in enumerate(modes):
        want = UnpackToDestMode.UnpackToDestFp32 if i == f32 else UnpackToDestMode.Default
        assert m == getattr(ttnn.UnpackToDestMode, want.value), f"CB {i}"


def test_unpack_to_dest_on_a_cb_that_is_not_float32_is_refused(ttnn: Any, sources: dict[str, Path]) -> None:
    p = make_program(sources)
    bf16 = next(cb.index for cb in p.circular_buffers if cb.data_format is DataType.bfloat16)
    p.kernels[2].compute = ComputeSettings(fp32_dest_acc_en=True, unpack_to_dest_mode=unpack_to_dest_modes([bf16]))
    with pytest.raises(dev.DeviceError, match=rf"unpack_to_dest_mode\[{bf16}\] is UnpackToDestFp32 but CB {bf16} holds bfloat16"):
        dev.build_program_descriptor(p, FakeView(ADDRESSES))
