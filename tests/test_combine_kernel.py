"""The combine program (kernels/combine/*.cpp, ttdecode/combine.py) on the host runtime and on the device path.

Expected values come from ``combine_partials`` in float64 (the exact LSE merge, written from its
definition) on the same quantized inputs the kernels read; accuracy bar: ``ttdecode.accuracy``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ttdecode import ttnn_backend as dev
from ttdecode.ttnn_env import has_tenstorrent_device
from ttdecode.accuracy import check_close, check_lse
from ttdecode.ops.combine import (
    CombineError,
    build_combine_program,
    build_combine_program_for_device,
    combine_op_counts,
    make_combine_plan,
    run_combine,
)
from ttdecode.distributed.context import combine_partials
from ttdecode.core.formats import DataType
from ttdecode.core.program_description import KernelKind, UnpackToDestMode
from ttdecode.runtime.results import COMPUTE_OPS

NEG_INF = float("-inf")


def partials(n: int, b: int = 2, nh: int = 8, dv: int = 64, spread: float = 3.0, seed: int = 0,
             dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """outs [n, 1, B, NH, Dv] already in `dtype` (what the device holds), lses [n, 1, B, NH] float32."""
    g = torch.Generator().manual_seed(seed)
    outs = torch.randn(n, 1, b, nh, dv, generator=g).to(dtype).to(torch.float32)
    lses = (torch.randn(n, 1, b, nh, generator=g) * spread).to(torch.float32)
    return outs, lses


def reference(outs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 merge of the same values (rows at -inf may hold anything: they are zeroed here,
    where combine_partials' weight 0 would otherwise meet NaN)."""
    clean = torch.where(torch.isneginf(lses)[..., None], torch.zeros_like(outs), outs)
    return combine_partials(clean.double(), lses.double())


def check(out: torch.Tensor, lse: torch.Tensor, outs: torch.Tensor, lses: torch.Tensor, what: str) -> None:
    ref_o, ref_l = reference(outs, lses)
    check_close(out, ref_o, what)
    check_lse(lse, ref_l, what)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_kernel_merge_matches_the_float64_combine(n: int) -> None:
    outs, lses = partials(n, seed=n)
    out, lse = run_combine(outs, lses)
    assert out.dtype is torch.float32 and list(out.shape) == [1, 2, 8, 64] and list(lse.shape) == [1, 2, 8]
    check(out, lse, outs, lses, f"n={n}")
    ref_o, ref_l = reference(outs, lses)
    # fp32 arithmetic on the SFPU: far inside the bar
    assert (out.double() - ref_o).abs().max() < 1e-5 and (lse.double() - ref_l).abs().max() < 1e-5


def test_bf16_output_and_fp32_partials() -> None:
    """bf16 output (rounded once by the packer) and float32 partials (unpacked straight to DST)."""
    outs, lses = partials(3, dtype=torch.float32, seed=11)
    out, lse = run_combine(outs, lses, in_dtype=DataType.float32, out_dtype=DataType.bfloat16)
    assert out.dtype is torch.bfloat16
    check(out, lse, outs, lses, "fp32 in, bf16 out")
    ref_o, _ = reference(outs, lses)
    assert torch.equal(out, ref_o.float().to(torch.bfloat16)) or (out.float() - ref_o).abs().max() < 2 ** -7


def test_lses_far_apart_weigh_exactly() -> None:
    """LSEs 1e4 apart (exp(-1e4) underflows), 80 apart (weight ~1e-35), and huge magnitudes."""
    outs, lses = partials(3, b=1, nh=32, seed=5)
    lses[0, 0, 0, :8] = torch.tensor([1.0e4, -1.0e4, 80.0, 0.0, 3.0e4, -3.0e4, 1.0e30, -1.0e30])
    lses[1, 0, 0, :8] = torch.tensor([-1.0e4, 1.0e4, 0.0, 80.0, 3.0e4, -3.0e4, -1.0e30, 1.0e30])
    out, lse = run_combine(outs, lses)
    check(out, lse, outs, lses, "far-apart LSEs")
    # the dominant partial alone, bit for bit, where the others weigh 0 in fp32
    assert torch.equal(out[0, 0, 0], outs[0, 0, 0, 0]) and torch.equal(out[0, 0, 1], outs[1, 0, 0, 1])


def test_minus_inf_partials_weigh_nothing_and_dead_rows_give_zeros() -> None:
    outs, lses = partials(4, b=2, nh=8, seed=7)
    lses[1, 0, 0, :] = NEG_INF               # partial 1 holds no key of user 0
    outs[1, 0, 0, :, :] = float("nan")        # ... and garbage there
    outs[2, 0, 0, 3, :5] = float("inf")
    lses[2, 0, 0, 3] = NEG_INF
    lses[:, 0, 1, 2] = NEG_INF                # row (1, 2): no partial holds a key
    outs[:, 0, 1, 2, :] = float("nan")
    lses[[0, 1, 3], 0, 1, 5] = NEG_INF        # row (1, 5): one live partial
    out, lse = run_combine(outs, lses)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert torch.equal(out[0, 1, 2], torch.zeros(64)) and lse[0, 1, 2].item() == NEG_INF
    assert torch.equal(out[0, 1, 5], outs[2, 0, 1, 5]) and lse[0, 1, 5].item() == lses[2, 0, 1, 5].item()
    check(out, lse, outs, lses, "-inf partials")


def test_all_partials_dead_gives_zeros_and_minus_inf_everywhere() -> None:
    outs, lses = partials(3, b=1, nh=40, seed=9)   # 40 heads: two tile rows, the second padded
    lses.fill_(NEG_INF)
    out, lse = run_combine(outs, lses, out_dtype=DataType.bfloat16)
    assert torch.equal(out.float(), torch.zeros_like(out.float())) and bool(torch.isneginf(lse).all())


def test_one_live_partial_comes_back_bit_for_bit() -> None:
    outs, lses = partials(1, b=3, nh=8, dv=128, seed=2)
    out, lse = run_combine(outs, lses)
    assert torch.equal(out, outs[0]) and torch.equal(lse, lses[0])


def test_a_row_is_bit_identical_whatever_the_batch_and_the_core_split() -> None:
    """Batch invariance: user 0's merged rows do not depend on the other users, on the batch size or
    on how the tile rows are dealt to cores, nor on the schedule."""
    outs, lses = partials(5, b=4, nh=8, dv=64, seed=3)
    alone_o, alone_l = run_combine(outs[:, :, :1], lses[:, :, :1])
    full_o, full_l = run_combine(outs, lses, max_cores=3)
    other = outs.clone()
    other[:, :, 1:] = torch.randn_like(other[:, :, 1:]).to(torch.bfloat16).float()
    other_l = lses.clone()
    other_l[:, :, 2:] = NEG_INF
    mixed_o, mixed_l = run_combine(other, other_l, max_cores=1, schedule_seed=4)
    for o, l in ((full_o, full_l), (mixed_o, mixed_l)):
        assert torch.equal(o[:, :1], alone_o) and torch.equal(l[:, :1], alone_l)
    # the same rows flattened into one group (the all_to_all share layout) merge to the same bits
    flat_o, flat_l = run_combine(outs.reshape(5, 1, 1, 32, 64), lses.reshape(5, 1, 1, 32))
    assert torch.equal(flat_o.reshape(1, 4, 8, 64), full_o) and torch.equal(flat_l.reshape(1, 4, 8), full_l)


def test_op_counts_are_the_kernels_counters() -> None:
    """combine_op_counts (the cost model's input) equals what the runtime counts, per tile row."""
    for n, dv, fmt in ((3, 64, DataType.bfloat16), (1, 128, DataType.float32)):
        outs, lses = partials(n, b=2, nh=8, dv=dv, seed=n)
        _, _, res = run_combine(outs, lses, out_dtype=fmt, max_cores=2, return_result=True)
        ops = combine_op_counts(n, dv // 32, DataType.bfloat16, fmt)
        rows = 2
        counted = {op: res.counters.tiles(op) for op in COMPUTE_OPS if res.counters.tiles(op)}
        cores = len({k.core for k in res.counters.kernels})
        want = {"copy": rows * ops.copies, "max": rows * ops.sfpu_binary, "ternary": rows * ops.ternary,
                "exp": rows * ops.exps, "recip": rows * ops.recips, "log": rows * ops.logs, "pack": rows * ops.packs,
                "init": rows * ops.inits + cores}  # inits: one row's count, plus a start-up per core
        assert counted == {op: v for op, v in want.items() if v}
        assert res.counters.dram_read_bytes == rows * ops.dram_read_bytes
        assert res.counters.dram_write_bytes == rows * ops.dram_write_bytes


# ---- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("make, match", [
    (lambda o, l: (o[:, :, :, :, :48], l), "head_dim_v: expected a multiple of 32"),
    (lambda o, l: (o, l[:, :, :, :3]), r"lses: expected shape \[2, 2, 8\]"),
    (lambda o, l: (o[0, 0, 0], l), r"outs: expected shape \[n, G, H, Dv\]"),
    (lambda o, l: (o.to(torch.int32), l), "outs: expected a floating-point torch tensor"),
    (lambda o, l: (o, l.index_fill(3, torch.tensor([1]), float("nan"))), r"lses\[0, 0, 1\]: expected a finite LSE"),
    (lambda o, l: (o, l.index_fill(3, torch.tensor([2]), float("inf"))), r"lses\[0, 0, 2\]: expected a finite LSE"),
    (lambda o, l: (o, l.index_fill(3, torch.tensor([4]), -3.4e38)), r"lses\[0, 0, 4\]: expected a finite LSE >= -3.3895"),
])
def test_bad_partials_are_refused_naming_the_argument(make: Any, match: str) -> None:
    outs, lses = partials(2)
    with pytest.raises(CombineError, match=match):
        run_combine(*make(outs, lses))


def test_bad_plans_are_refused_at_plan_time() -> None:
    base = dict(partials=2, groups=1, heads=8, head_dim_v=64)
    with pytest.raises(CombineError, match="partials: expected an int >= 1, got 0"):
        make_combine_plan(**{**base, "partials": 0})
    with pytest.raises(CombineError, match="in_dtype: expected one of"):
        make_combine_plan(**base, in_dtype=DataType.bfloat8_b)
    with pytest.raises(CombineError, match="max_cores: expected at most 64"):
        make_combine_plan(**base, max_cores=65)
    with pytest.raises(CombineError, match=r"head_dim_v: 32768 needs \d+ B of CBs per core, L1 holds"):
        make_combine_plan(**{**base, "head_dim_v": 32768}, in_dtype=DataType.float32)
    plan = make_combine_plan(**base)
    with pytest.raises(CombineError, match=r"outs: expected shape \[2, 1, 8, 64\] \(from the plan\)"):
        build_combine_program(plan, *partials(2, b=2))


def test_cores_deal_the_tile_rows_in_contiguous_runs() -> None:
    plan = make_combine_plan(partials=3, groups=5, heads=40, head_dim_v=128, max_cores=4)
    assert plan.tile_rows == 10 and plan.core_rows == ((0, 3), (3, 3), (6, 2), (8, 2))
    assert make_combine_plan(partials=3, groups=1, heads=8, head_dim_v=128).core_rows == ((0, 1),)


# ---- the device path (no hardware: real ttnn descriptors, real-header compile) -------------------------


class GridView:
    """An 8x8 worker grid at NoC (18 + x, 18 + y) and made-up DRAM addresses."""

    addresses = {"outs": 0x100000, "lses": 0x200000, "out": 0x300000, "lse": 0x400000}

    def grid_size(self) -> tuple[int, int]:
        return (8, 8)

    def worker_core(self, core: Any) -> tuple[int, int]:
        return (18 + core.x, 18 + core.y)

    def buffer_address(self, name: str) -> int:
        return self.addresses[name]


def test_combine_program_converts_to_real_ttnn_descriptors(ttnn: Any) -> None:
    plan = make_combine_plan(partials=8, groups=32, heads=8, head_dim_v=128, in_dtype=DataType.bfloat16)
    prog = build_combine_program_for_device(plan)
    assert all(t.data is None for t in prog.tensors)
    desc = dev.build_program_descriptor(prog, GridView())
    assert [k.kernel_source.rsplit("/", 2)[-2:] for k in desc.kernels] == [
        ["combine", "reader.cpp"], ["combine", "writer.cpp"], ["combine", "compute.cpp"]]
    assert len(desc.cbs) == 12 and len(desc.semaphores) == 0
    reader_args = list(desc.kernels[0].runtime_args[7][3])  # core (7, 3): tile row 31
    assert reader_args == [0x100000, 0x200000, 31, 1]
    modes = list(desc.kernels[2].config.unpack_to_dest_mode)
    fp32 = [i for i, m in enumerate(modes) if m == ttnn.UnpackToDestMode.UnpackToDestFp32]
    assert fp32 == [0, 3, 4, 5, 6, 7, 8, 9]  # bf16 partials: cb_o_in stays Default
    f32_plan = make_combine_plan(partials=2, groups=1, heads=8, head_dim_v=64, in_dtype=DataType.float32)
    compute = next(k for k in build_combine_program_for_device(f32_plan).kernels if k.kind is KernelKind.COMPUTE)
    assert compute.compute.unpack_to_dest_mode[1] is UnpackToDestMode.UnpackToDestFp32


def test_the_device_combine_program_takes_what_all_gather_returns(ttnn: Any) -> None:
    """ttnn.all_gather(dim=0) of n per-device [1, B, NH, Dv] / [1, B, NH, 1] tensors gives [n, ...]:
    the program's inputs have exactly those shapes, with ttnn's tile pages, and convert to descriptors."""
    from ttdecode.distributed.device_combine import gathered_combine_program

    plan, prog = gathered_combine_program(8, (1, 32, 8, 128))
    shapes = {t.name: (t.shape, t.data_format) for t in prog.tensors}
    assert shapes == {"outs": ((8, 32, 8, 128), DataType.bfloat16), "lses": ((8, 32, 8, 1), DataType.float32),
                      "out": ((1, 32, 8, 128), DataType.bfloat16), "lse": ((1, 32, 8, 1), DataType.float32)}
    for spec in prog.tensors:
        dev.check_page_geometry(spec)  # the program's pages are ttnn's tile layout of the shape
    assert len(dev.build_program_descriptor(prog, GridView()).kernels) == 3
    with pytest.raises(ValueError, match=r"argument 'out': expected a per-device shape \[L>=1, B, NH, Dv\]"):
        gathered_combine_program(8, (32, 8, 128))


def test_device_combine_refuses_by_name_without_a_device() -> None:
    from ttdecode.distributed.device_combine import device_combine

    with pytest.raises(ValueError, match="argument 'combine'"):
        device_combine(None, None, mesh_device=None, combine="reduce_scatter")
    with pytest.raises(NotImplementedError, match="all_to_all_async only re-shards dim 2 <-> dim 3"):
        device_combine(None, None, mesh_device=None, combine="all_to_all")
    if not has_tenstorrent_device():
        with pytest.raises(RuntimeError, match="no Tenstorrent device found"):
            device_combine(None, None, mesh_device=None)


# ---- the cached combine step on a device (ttnn's device calls faked) ------------------------------


def _fake_device(ttnn: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Real ttnn descriptors; the device, its tensors, generic_op and the output allocation stand-ins
    (no device here). Records each generic_op call's descriptor, its runtime-arg counts and tensors."""
    from ttdecode.ops.combine import device_step as cd

    class Tensor:  # a ttnn tensor to the checks: a class called Tensor from a ttnn module
        next_address = 0x100000

        def __init__(self, dtype: Any, shape: tuple[int, ...], device: Any) -> None:
            self.dtype, self.layout, self.shape, self._device = dtype, ttnn.TILE_LAYOUT, tuple(shape), device
            self.address = Tensor.next_address
            Tensor.next_address += 0x100000

        def memory_config(self) -> Any:
            return ttnn.DRAM_MEMORY_CONFIG

        def buffer_address(self) -> int:
            return self.address

        def device(self) -> Any:
            return self._device

    Tensor.__module__ = "ttnn.fake"

    class Dev:
        def compute_with_storage_grid_size(self) -> Any:
            return ttnn.CoreCoord(8, 8)

        def worker_core_from_logical_core(self, c: Any) -> Any:
            return ttnn.CoreCoord(c.x + 18, c.y + 18)

    calls: list[tuple[Any, list, list]] = []

    def generic_op(tensors: list[Any], desc: Any) -> Any:
        counts = [(len(k.common_runtime_args), [len(k.runtime_args[x][y]) for r in k.core_ranges.ranges()
                                                for x in range(r.start.x, r.end.x + 1)
                                                for y in range(r.start.y, r.end.y + 1)])
                  for k in desc.kernels]
        calls.append((desc, counts, [t.address for t in tensors],
                      [list(desc.kernels[0].runtime_args[0][0]), list(desc.kernels[1].runtime_args[0][0])]))
        return tensors[-1]

    def move(*a: Any, **k: Any) -> Any:
        raise AssertionError("a host<->device move in a combine step")

    monkeypatch.setattr(ttnn, "generic_op", generic_op)
    monkeypatch.setattr(ttnn, "allocate_tensor_on_device",
                        lambda shape, dtype, layout, device, mem: Tensor(dtype, tuple(shape), device))
    monkeypatch.setattr(ttnn, "is_tensor_storage_on_device", lambda t: isinstance(t, Tensor))
    for name in ("to_torch", "from_torch", "to_device", "from_device"):
        monkeypatch.setattr(ttnn, name, move)
    cd.clear_combine_steps()
    return {"Tensor": Tensor, "device": Dev(), "calls": calls, "cd": cd}


def test_combine_on_device_plans_once_and_patches_addresses_per_call(ttnn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """20 calls of one shape: one step (plan, Program, descriptor), the same runtime-arg counts on
    every generic_op call, each call's input and fresh output addresses in the reader / writer args,
    no host<->device move; another shape is another step."""
    f = _fake_device(ttnn, monkeypatch)
    T, d, cd = f["Tensor"], f["device"], f["cd"]
    outs, lses = T(ttnn.bfloat16, (4, 8, 32, 128), d), T(ttnn.float32, (4, 8, 32, 1), d)
    results = [cd.combine_on_device(outs, lses) for _ in range(20)]
    calls = f["calls"]
    assert len(calls) == 20 and cd.cached_combine_steps() == 1
    assert len({id(c[0]) for c in calls}) == 1  # one descriptor, kept
    assert all(c[1] == calls[0][1] for c in calls)  # runtime-arg counts never change
    for (out, lse), (_, _, addresses, (reader0, writer0)) in zip(results, calls):
        assert addresses == [outs.address, lses.address, out.address, lse.address]
        assert reader0[:2] == [outs.address, lses.address] and writer0[:2] == [out.address, lse.address]
        assert out.shape == (1, 8, 32, 128) and out.dtype == ttnn.bfloat16 and lse.shape == (1, 8, 32, 1)
    assert len({out.address for out, _ in results}) == 20
    cd.combine_on_device(T(ttnn.bfloat16, (2, 8, 32, 128), d), T(ttnn.float32, (2, 8, 32, 1), d))
    assert cd.cached_combine_steps() == 2 and id(calls[-1][0]) != id(calls[0][0])


def test_a_cached_program_refuses_a_patch_that_would_change_its_arg_count(ttnn: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """PreparedProgram overwrites existing common runtime args only: an index at or past a kernel's
    count (or an unknown kernel) is refused before anything is written or launched."""
    f = _fake_device(ttnn, monkeypatch)
    T, d, cd = f["Tensor"], f["device"], f["cd"]
    outs, lses = T(ttnn.bfloat16, (2, 4, 8, 64), d), T(ttnn.float32, (2, 4, 8, 1), d)
    step = cd.get_combine_step(outs, lses)
    before = step.prepared.runtime_arg_counts()
    assert before == step.prepared.arg_counts and before["combine_reader"][0] == 0  # no common args
    with pytest.raises(dev.DeviceError, match=r"common_args\['combine_reader'\]: expected an index in \[0, 0\)"):
        step.prepared.run({"outs": outs, "lses": lses}, common_args={"combine_reader": {0: 7}})
    with pytest.raises(dev.DeviceError, match=r"common_args: 'nope' is not a kernel of the program"):
        step.prepared.run({"outs": outs, "lses": lses}, common_args={"nope": {0: 7}})
    assert f["calls"] == [] and step.prepared.runtime_arg_counts() == before


def test_combine_on_device_refuses_bad_tensors_by_name(ttnn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _fake_device(ttnn, monkeypatch)
    T, d, cd = f["Tensor"], f["device"], f["cd"]
    outs, lses = T(ttnn.bfloat16, (2, 4, 8, 64), d), T(ttnn.float32, (2, 4, 8, 1), d)
    cases = [
        ((torch.zeros(2, 4, 8, 64), lses), {}, r"outs: expected a ttnn tensor on the device, got Tensor"),
        ((outs, T(ttnn.float32, (2, 4, 8), d)), {}, r"lses: expected shape \[2, 4, 8, 1\]"),
        ((T(ttnn.bfloat16, (4, 8, 64), d), lses), {}, r"outs: expected shape \[n, G, H, Dv\]"),
        ((T(ttnn.bfloat8_b, (2, 4, 8, 64), d), lses), {}, r"outs: expected \['bfloat16', 'float32'\] tiles"),
        ((outs, T(ttnn.float32, (2, 4, 8, 1), object())), {}, r"lses: expected a tensor on outs' device"),
        ((outs, lses), {"out_dtype": DataType.bfloat8_b}, r"out_dtype: expected one of"),
    ]
    for args, kw, msg in cases:
        with pytest.raises(CombineError, match=msg):
            cd.combine_on_device(*args, **kw)
    with pytest.raises(dev.DeviceError, match="lses"):  # float32 LSEs: the prepared program's check
        cd.combine_on_device(outs, T(ttnn.bfloat16, (2, 4, 8, 1), d))
    assert f["calls"] == []
