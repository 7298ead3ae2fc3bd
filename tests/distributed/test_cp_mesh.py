"""Context parallelism on a device mesh (``backend="device"``), checked up to the launch.

No Tenstorrent device here: the per-device FlashDecode descriptors, the ``MeshProgramDescriptor`` and the
host shards (``ttnn.from_host_shards``) are real ttnn 0.81.1 objects; ttnn's device calls are replaced by
recorders (as in tests/test_device_program.py). Expected shards and local positions are worked out here
from the layouts' definitions (module doc of ttdecode.distributed.context), and every device's expected
descriptor is the single-device op's (``validate_decode`` -> ``_make_plan`` -> ``decode_program``) on that
shard, never the mesh code's own output.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ttdecode
from ttdecode import ttnn_backend as dev
from ttdecode import ttnn_env
from ttdecode.ops.flash_decode.device_step import decode_program
from ttdecode.ops.flash_decode.op import compute_settings, make_decode_plan as _make_plan
from ttdecode.distributed.device_combine import lse_rows_to_tiles
from ttdecode.distributed.mesh_decode import (
    mesh_host_tensor,
    mesh_programs,
    padded_shards,
    plan_mesh_decode,
)
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.ops.flash_decode.validate import validate_decode

S, B, NH, NKV, D = 256, 4, 8, 2, 64  # 8 key tiles
POSITIONS = [S - 1, 0, -1, 100]


class GridView:
    """An 8x8 worker grid at NoC (18 + x, 18 + y); fixed addresses (a mesh tensor's is one for all devices)."""

    def grid_size(self) -> tuple[int, int]:
        return (8, 8)

    def worker_core(self, core: Any) -> tuple[int, int]:
        return (18 + core.x, 18 + core.y)

    def buffer_address(self, name: str) -> int:
        return 0x100000 * (1 + ["q", "k", "v", "cur_pos", "sink", "out", "lse"].index(name))


def held_positions(layout: str, n: int, d: int) -> list[int]:
    """Device d's global positions, from the layout's definition (8 tiles of 32)."""
    tiles = 8
    if layout == "interleaved":
        mine = [t for t in range(tiles) if t % n == d]
    else:
        sizes = [tiles // n + (1 if i < tiles % n else 0) for i in range(n)]
        mine = list(range(sum(sizes[:d]), sum(sizes[:d + 1])))
    return [t * 32 + i for t in mine for i in range(32)]


def local_position(p: int, held: list[int]) -> int:
    """The last local index among held positions <= p (-1: none, or a skipped user)."""
    return -1 if p < 0 else sum(1 for h in held if h <= p) - 1


def cache(seed: int = 0, dtype=ttdecode.bfloat8_b):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, B, NH, D, generator=g)
    k = ttdecode.from_torch(torch.randn(B, NKV, S, D, generator=g), dtype=dtype)
    v = ttdecode.from_torch(torch.randn(B, NKV, S, D, generator=g), dtype=dtype)
    return q, k, v


def core_args(kernel: Any, x: int, y: int) -> Any:
    """A kernel descriptor's runtime args on core (x, y), None where it has none."""
    try:
        return list(kernel.runtime_args[x][y])
    except IndexError:
        return None


def flat(desc: Any) -> list[Any]:
    """A ProgramDescriptor as plain values: kernels (source, args, per-core runtime args), CBs, semaphores."""
    kernels = []
    for k in desc.kernels:
        rt = [[core_args(k, x, y) for y in range(8)] for x in range(8)]  # the 8x8 grid, core by core
        kernels.append((k.kernel_source, list(k.compile_time_args), rt, list(k.common_runtime_args)))
    cbs = [(cb.total_size, [(f.buffer_index, f.page_size) for f in cb.format_descriptors]) for cb in desc.cbs]
    return [kernels, cbs, [(s.id, s.initial_value) for s in desc.semaphores]]


def op_on_shard_descriptor(q, k, v, layout: str, n: int, d: int, **kw) -> tuple[Any, list[int]]:
    """The single-device op's descriptor on device d's shard (built here from the definition)."""
    held = held_positions(layout, n, d)
    width = max(len(held_positions(layout, n, e)) for e in range(n))
    shard = lambda x: ttdecode.from_torch(  # noqa: E731
        torch.nn.functional.pad(ttdecode.to_torch(x)[:, :, held], (0, 0, 0, width - len(held))), dtype=x.dtype)
    local = [local_position(p, held) for p in POSITIONS]
    info = validate_decode(q, shard(k), shard(v), DecodeOptions(cur_pos=local, return_lse=True, **kw))
    prog = decode_program(info, _make_plan(info), compute_settings(info))
    return dev.build_program_descriptor(prog, GridView()), local


@pytest.mark.parametrize("layout, n", [("contiguous", 3), ("interleaved", 3), ("interleaved", 8)])
def test_each_devices_descriptor_is_the_op_on_its_shard(ttnn: Any, layout: str, n: int) -> None:
    q, k, v = cache()
    info = validate_decode(q, k, v, DecodeOptions(cur_pos=POSITIONS, return_lse=True))
    mesh = plan_mesh_decode(POSITIONS, 8, 32, (1, n), layout, None, False)
    assert len(mesh.launches) == 1 and mesh.local_seq_len == -(-8 // n) * 32
    (progs,) = mesh_programs(info, mesh)
    desc = dev.mesh_program_descriptor(progs, GridView())
    entries = list(desc)
    assert len(entries) == n
    for d, (rng, got) in enumerate(entries):
        coord = list(rng)
        assert len(coord) == 1 and tuple(coord[0]) == (0, d)  # one device per entry, row-major
        want, local = op_on_shard_descriptor(q, k, v, layout, n, d)
        assert list(mesh.launches[0][d].positions) == local
        assert flat(got) == flat(want), f"device {d}"
    # Without window or sink the devices' programs coincide (the positions reach the kernels through each
    # device's cur_pos shard, checked below); the shard length does reach them: the op on the whole cache differs.
    whole = decode_program(info, _make_plan(info), compute_settings(info))
    assert flat(entries[0][1]) != flat(dev.build_program_descriptor(whole, GridView()))
    # the kernels are the op's own sources on every device
    assert {k.kernel_source.rsplit("/", 1)[-1] for _, p in entries for k in p.kernels} == {
        "reader.cpp", "writer.cpp", "compute.cpp"}


@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
def test_shards_are_the_held_positions_padded_and_ttnn_keeps_their_bytes(ttnn: Any, layout: str) -> None:
    from ttdecode.distributed.mesh_decode import _ttnn_host
    from ttdecode.core.tensor import from_ttnn

    _, k, _ = cache(1)
    n = 3
    mesh = plan_mesh_decode(POSITIONS, 8, 32, (1, n), layout, None, False)
    shards = padded_shards(k, mesh)
    whole = ttdecode.to_torch(k)
    host = []
    for d, shard in enumerate(shards):
        held = held_positions(layout, n, d)
        values = ttdecode.to_torch(shard)
        assert values.shape == (B, NKV, 96, D)
        assert torch.equal(values[:, :, : len(held)], whole[:, :, held])
        assert not values[:, :, len(held):].any()  # zero padding tiles
        t = _ttnn_host(ttnn, shard)
        assert from_ttnn(t).data == shard.data  # the bfloat8_b tiles cross into ttnn byte for byte
        host.append(t)
    joined = mesh_host_tensor(ttnn, host, (1, n))
    parts = ttnn.get_device_tensors(joined)
    assert len(parts) == n and all(from_ttnn(p).data == s.data for p, s in zip(parts, shards))


def test_ttnn_refuses_shards_of_different_lengths_so_they_are_padded(ttnn: Any) -> None:
    """Why every shard is padded: ttnn's own check on a mesh tensor's shards."""
    a = ttnn.from_torch(torch.zeros(1, 1, 64, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    b = ttnn.from_torch(torch.zeros(1, 1, 32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    with pytest.raises(RuntimeError, match="same tensor spec"):
        mesh_host_tensor(ttnn, [a, b], (1, 2))


def test_window_and_sink_split_launches_and_the_sink_joins_once(ttnn: Any) -> None:
    q, k, v = cache(2)
    sink = torch.randn(NH)
    n, window = 4, 80
    info = validate_decode(q, k, v, DecodeOptions(cur_pos=POSITIONS, return_lse=True, sliding_window_size=window,
                                                attention_sink=sink))
    mesh = plan_mesh_decode(POSITIONS, 8, 32, (1, n), "interleaved", window, True)
    progs = mesh_programs(info, mesh)
    assert len(progs) == len(mesh.launches) >= 2
    for u, p in enumerate(POSITIONS):
        # every live user: the sink on exactly one (launch, device), the owner of its position
        joins = [(i, d) for i, launch in enumerate(mesh.launches) for d, share in enumerate(launch)
                 if share.sink and share.positions[u] >= 0]
        assert joins == ([] if p < 0 else [(joins[0][0], (p // 32) % n)]), u
        # its keys: the held positions in the window (p - 80, p], counted over launches and devices
        for d in range(n):
            held = held_positions("interleaved", n, d)
            in_window = [h for h in held if p - window < h <= p] if p >= 0 else []
            calls = [s for launch in mesh.launches for s in [launch[d]] if s.positions[u] >= 0]
            assert len(calls) == (1 if in_window else 0), (u, d)
            if in_window:
                assert calls[0].positions[u] == local_position(p, held)
                live = len(in_window)
                assert calls[0].window == (None if live == local_position(p, held) + 1 else live)
    for launch, by_coord in zip(mesh.launches, progs):
        names = {tuple(t.name for t in prog.tensors) for prog in by_coord.values()}
        assert len(names) == 1 and ("sink" in next(iter(names))) == launch[0].sink
        dev.mesh_program_descriptor(by_coord, GridView())
    mixed = {**progs[0], (0, 0): next(iter(progs[-1].values()))}
    with pytest.raises(dev.DeviceError, match=r"programs\[\(0, 1\)\]: its tensors .* differ"):
        dev.mesh_program_descriptor(mixed, GridView())


def test_lse_rows_become_the_combines_tiles(ttnn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The op's LSE rows -> [1, B, NH, 1] tiles: ttnn's reshape and to_layout for real (on host), the
    device-only ttnn.slice by its definition; the result must equal the op's own row decoding."""
    from ttdecode.ops.flash_decode.program_factory import decode_lse_rows

    q, k, v = cache(3)
    info = validate_decode(q, k, v, DecodeOptions(cur_pos=POSITIONS, return_lse=True))
    plan = _make_plan(info)
    rows = torch.randn(B * NKV, 32)

    def host_slice(t: Any, start: list[int], end: list[int]) -> Any:
        x = ttnn.to_torch(t)[start[0]:end[0], start[1]:end[1]].contiguous()
        return ttnn.from_torch(x, dtype=ttnn.float32, layout=ttnn.ROW_MAJOR_LAYOUT)

    monkeypatch.setattr(ttnn, "slice", host_slice)
    tiles = lse_rows_to_tiles(ttnn, ttnn.from_torch(rows, dtype=ttnn.float32, layout=ttnn.ROW_MAJOR_LAYOUT), B, NH, NKV)
    assert tiles.layout == ttnn.TILE_LAYOUT and tuple(tiles.shape) == (1, B, NH, 1)
    assert torch.equal(ttnn.to_torch(tiles)[..., 0], decode_lse_rows(plan, rows))


# ---- the whole chain, ttnn's device calls recorded ----------------------------------------------


class FakeMem:
    def __init__(self, ttnn: Any) -> None:
        self.buffer_type = ttnn.BufferType.DRAM
        self.memory_layout = ttnn.TensorMemoryLayout.INTERLEAVED


class FakeTensor:
    """A mesh tensor on the device: dtype, layout, shape, one address; `host` the uploaded host tensor."""

    count = 0

    def __init__(self, ttnn: Any, dtype: Any, layout: Any, shape: Any, host: Any = None) -> None:
        FakeTensor.count += 1
        self.dtype, self.layout, self.shape, self.host = dtype, layout, tuple(int(x) for x in shape), host
        self.address, self._mem = 0x10000 * FakeTensor.count, FakeMem(ttnn)

    def memory_config(self) -> Any:
        return self._mem

    def buffer_address(self) -> int:
        return self.address


class FakeMesh:
    """A MeshDevice's shape (as the (rows, cols) a ttnn.MeshShape iterates to), grid and NoC coordinates."""

    def __init__(self, ttnn: Any, rows: int, cols: int) -> None:
        self.ttnn, self.shape = ttnn, (rows, cols)

    def get_num_devices(self) -> int:
        return self.shape[0] * self.shape[1]

    def compute_with_storage_grid_size(self) -> Any:
        return self.ttnn.CoreCoord(8, 8)

    def dram_grid_size(self) -> Any:
        return self.ttnn.CoreCoord(12, 1)  # a Wormhole's DRAM banks

    def worker_core_from_logical_core(self, c: Any) -> Any:
        return self.ttnn.CoreCoord(c.x + 18, c.y + 18)


@pytest.fixture()
def recorded(ttnn: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []

    def rec(name: str, result: Any, *args: Any) -> Any:
        calls.append((name, args, result))
        return result

    monkeypatch.setattr(ttnn_env, "has_tenstorrent_device", lambda: True)  # looked up per call
    monkeypatch.setattr(ttnn, "is_tensor_storage_on_device", lambda t: isinstance(t, FakeTensor))
    monkeypatch.setattr(ttnn, "to_device", lambda t, mesh, memory_config=None: rec(
        "to_device", FakeTensor(ttnn, t.dtype, t.layout, t.shape, host=t), t, mesh))
    monkeypatch.setattr(ttnn, "allocate_tensor_on_device", lambda shape, dtype, layout, d, mem: rec(
        "allocate", FakeTensor(ttnn, dtype, layout, list(shape)), d))
    monkeypatch.setattr(ttnn, "generic_op", lambda io, desc: rec("generic_op", io[-1], io, desc))
    monkeypatch.setattr(ttnn, "slice", lambda t, s, e: rec(
        "slice", FakeTensor(ttnn, t.dtype, t.layout, [b - a for a, b in zip(s, e)]), t, s, e))
    monkeypatch.setattr(ttnn, "reshape", lambda t, shape: rec("reshape", FakeTensor(ttnn, t.dtype, t.layout, shape), t))
    monkeypatch.setattr(ttnn, "to_layout", lambda t, layout: rec("to_layout", FakeTensor(ttnn, t.dtype, layout, t.shape), t))

    def concat(ts: list[Any], dim: int) -> Any:
        shape = list(ts[0].shape)
        shape[dim] = sum(t.shape[dim] for t in ts)
        return rec("concat", FakeTensor(ttnn, ts[0].dtype, ts[0].layout, shape), ts, dim)

    def all_gather(t: Any, dim: int) -> Any:
        shape = list(t.shape)
        shape[dim] *= calls[0][1][1].get_num_devices()  # the mesh of the first upload
        return rec("all_gather", FakeTensor(ttnn, t.dtype, t.layout, shape), t, dim)

    monkeypatch.setattr(ttnn, "concat", concat)
    monkeypatch.setattr(ttnn, "all_gather", all_gather)
    real_parts, real_to_torch = ttnn.get_device_tensors, ttnn.to_torch  # host tensors keep the real ones
    monkeypatch.setattr(ttnn, "get_device_tensors", lambda t: [t] if isinstance(t, FakeTensor) else real_parts(t))
    monkeypatch.setattr(ttnn, "to_torch", lambda t, *a, **kw: torch.full(t.shape, 7.0) if isinstance(t, FakeTensor)
                        else real_to_torch(t, *a, **kw))
    return calls


@pytest.mark.parametrize("sink", [False, True])
def test_the_whole_chain_up_to_the_launches(ttnn: Any, recorded: list, sink: bool) -> None:
    q, k, v = cache(4)
    n = 4
    mesh_dev = FakeMesh(ttnn, 1, n)
    kw = dict(attention_sink=torch.randn(NH)) if sink else {}
    out, lse = ttdecode.context_parallel_decode(q, k, v, cur_pos=POSITIONS, devices=mesh_dev, kv_layout="contiguous",
                                                backend="device", return_lse=True, **kw)
    names = [c[0] for c in recorded]
    launches = 2 if sink else 1  # the sink's owners run a second launch
    uploads = names.index("allocate")
    assert names[:uploads] == ["to_device"] * (4 if sink else 3) + ["to_device"]  # q, k, v, (sink), cur_pos
    ops = [c for c in recorded if c[0] == "generic_op"]
    assert len(ops) == launches + 1
    for i, (_, (io, desc), _) in enumerate(ops[:launches]):
        assert isinstance(desc, ttnn.MeshProgramDescriptor) and len(list(desc)) == n
        # the io tensors: the uploaded mesh tensors in the program's order (q, k, v, cur_pos, sink), then the outputs
        with_sink = sink and i == 1  # the launches without the sink come first
        assert len(io) == (7 if with_sink else 6)
        assert [tuple(t.shape) for t in io[:3]] == [(1, B, NH, D), (B, NKV, 64, D), (B, NKV, 64, D)]
        assert io[3].dtype == ttnn.int32 and tuple(io[3].shape) == (B,)
        assert not with_sink or tuple(io[4].shape) == (NH, 32)
        assert tuple(io[-1].shape) == (B * NKV, 32) and tuple(io[-2].shape) == (1, B, NH, D)
    # the combine: n * L partials gathered on dim 0, one SPMD ProgramDescriptor
    gathers = [c for c in recorded if c[0] == "all_gather"]
    assert [(tuple(c[1][0].shape), c[1][1]) for c in gathers] == [((launches, B, NH, D), 0), ((launches, B, NH, 1), 0)]
    io, desc = ops[-1][1]
    assert isinstance(desc, ttnn.ProgramDescriptor)
    assert [tuple(t.shape) for t in io] == [(n * launches, B, NH, D), (n * launches, B, NH, 1), (1, B, NH, D), (1, B, NH, 1)]
    assert [k.kernel_source.rsplit("/", 2)[-2] for k in desc.kernels] == ["combine"] * 3
    slices = [c for c in recorded if c[0] == "slice"]
    assert len(slices) == launches and all(c[1][1:] == ([0, 0], [B * NKV, NH // NKV]) for c in slices)
    assert ("concat" in names) == sink
    assert out is io[-2] and lse.shape == (1, B, NH)


def test_the_cur_pos_shards_are_each_devices_local_positions(ttnn: Any, recorded: list) -> None:
    q, k, v = cache(5)
    n = 3
    ttdecode.context_parallel_decode(q, k, v, cur_pos=POSITIONS, devices=FakeMesh(ttnn, 1, n), kv_layout="interleaved",
                                     backend="device")
    (pos,) = [c[1][0] for c in recorded if c[0] == "to_device" and c[1][0].dtype == ttnn.int32]
    got = [ttnn.to_torch(t).tolist() for t in ttnn.get_device_tensors(pos)]  # the real host shards
    assert got == [[local_position(p, held_positions("interleaved", n, d)) for p in POSITIONS] for d in range(n)]


# ---- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, exc, match", [
    (dict(devices=9), TypeError, r"argument 'devices': expected a ttnn.MeshDevice"),
    (dict(mesh=(1, 9)), ValueError, r"argument 'devices': expected at most one device per unit .*8 key tiles"),
    (dict(mesh=(2, 2)), NotImplementedError, r"argument 'devices': a 2x2 mesh"),
    (dict(mesh=(1, 2), kv_layout="striped"), ValueError, r"argument 'kv_layout'"),
    (dict(mesh=(1, 2), combine="all_to_all"), NotImplementedError,
     r"argument 'combine': .*ttnn.experimental.all_to_all_async only re-shards dim 2 <-> dim 3"),
    (dict(mesh=(1, 2), page_table=torch.zeros(4, 2, dtype=torch.int32)), NotImplementedError,
     r"argument 'page_table': a paged cache on a mesh"),
])
def test_bad_mesh_input_is_named(ttnn: Any, kw: dict, exc: type, match: str) -> None:
    q, k, v = cache(6)
    if "mesh" in kw:
        kw["devices"] = FakeMesh(ttnn, *kw.pop("mesh"))
    with pytest.raises(exc, match=match):
        ttdecode.context_parallel_decode(q, k, v, cur_pos=POSITIONS, backend="device", **kw)


def test_a_meshdevice_shape_reads_as_rows_and_cols(ttnn: Any) -> None:
    from ttdecode.distributed.mesh_decode import mesh_shape_of

    class Mesh:
        shape = ttnn.MeshShape(1, 8)  # what ttnn.MeshDevice.shape returns (T3K)

    assert mesh_shape_of(Mesh()) == (1, 8)


def test_without_a_device_the_mesh_path_stops_at_the_upload_naming_it(ttnn: Any) -> None:
    if ttnn_env.has_tenstorrent_device():
        pytest.skip("a Tenstorrent device is present")
    q, k, v = cache(7)
    with pytest.raises(RuntimeError, match=r"no Tenstorrent device found .* ttnn.generic_op\(MeshProgramDescriptor\)"):
        ttdecode.context_parallel_decode(q, k, v, cur_pos=POSITIONS, devices=FakeMesh(ttnn, 1, 2), backend="device")


def test_auto_takes_the_mesh_path_for_a_meshdevice_when_a_device_is_present(ttnn: Any, recorded: list) -> None:
    q, k, v = cache(8)
    ttdecode.context_parallel_decode(q, k, v, cur_pos=POSITIONS, devices=FakeMesh(ttnn, 1, 2))
    assert [c[0] for c in recorded].count("generic_op") == 2  # one mesh launch, one combine
