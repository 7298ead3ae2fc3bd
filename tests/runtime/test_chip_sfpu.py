"""The SFPU ops the kernels call, against a plain numpy model of the chip (tests/runtime/sfpu_ref.py,
written from the ISA pages and the LLK of ttnn 0.81.1), on edge inputs, for both DST formats and both
approximation modes. Each program runs twice on kernels/tests/sfpu_op.cpp: once with OP_NONE (the DST
values the op reads, whatever the unpacker made of the input) and once with the op; the expected
output is the numpy model applied to the first."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sfpu_ref as ref
from programs import crs, kernel_path, tensor_in, tensor_out
from ttdecode.core.formats import DataType, num_tiles, tile_size, unpack_tiles
from ttdecode.core.program_description import (BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, Kernel, KernelKind,
                              MathFidelity, Program)
from ttdecode.runtime import KernelError, run_program

F32 = DataType.float32
DSTS = [pytest.param(True, id="fp32-dst"), pytest.param(False, id="bf16-dst")]


def _tile(values) -> torch.Tensor:
    """One 32x32 tile holding `values` (float32) in row-major order, repeated to fill it."""
    v = np.asarray(values, np.float32).ravel()
    return torch.from_numpy(np.resize(v, 1024).reshape(32, 32).copy())


def _program(op: str, inputs: list[torch.Tensor], fp32_dst: bool, defines: dict[str, str] | None = None,
             approx: bool = False) -> Program:
    core = CoreCoord(0, 0)
    where = crs([core])
    n_out = len(inputs) if op == "none" else 1
    tensors = [tensor_in(f"in{cb}", x, F32) for cb, x in enumerate(inputs)]
    reader_args: list = [len(inputs)]
    for cb, x in enumerate(inputs):
        reader_args += [BufferAddress(f"in{cb}"), cb, num_tiles(x.shape)]
    reader = Kernel("inputs_reader", kernel_path("inputs_reader.cpp"), KernelKind.READER, where,
                    runtime_args={core: reader_args})
    defs = {f"OP_{op.upper()}": "1", **(defines or {})}
    if len(inputs) == 2:
        defs["TWO_INPUTS"] = "1"
    if len(inputs) == 3:
        defs["THREE_INPUTS"] = "1"
    compute = Kernel("sfpu_op", kernel_path("sfpu_op.cpp"), KernelKind.COMPUTE, where, compile_time_args=[1, 0],
                     defines=defs, runtime_args={core: []},
                     compute=ComputeSettings(math_fidelity=MathFidelity.HiFi4, fp32_dest_acc_en=fp32_dst,
                                             math_approx_mode=approx))
    writer = Kernel("copy_writer", kernel_path("copy_writer.cpp"), KernelKind.WRITER, where, compile_time_args=[16],
                    runtime_args={core: [BufferAddress("out"), 0, n_out]})
    cbs = [CircularBuffer(cb, where, F32, tile_size(F32), 2) for cb in range(len(inputs))]
    cbs.append(CircularBuffer(16, where, F32, tile_size(F32), 2))
    tensors.append(tensor_out("out", (32, 32 * n_out), F32))
    return Program([reader, compute, writer], cbs, [], tensors)


def _out(prog: Program) -> list[np.ndarray]:
    res = run_program(prog)
    t = prog.tensor("out")
    x = unpack_tiles(res.tensors["out"], t.data_format, t.shape).reshape(32, -1, 32).permute(1, 0, 2)
    return [np.ascontiguousarray(x[i].numpy().astype(np.float32)) for i in range(x.shape[0])]


def copied_to_bf16_dst(x: np.ndarray) -> np.ndarray:
    """copy_tile of a Float32 CB into a 16-bit DST: through SrcA as bf16 (mantissa truncated, denormals
    flushed to a signed zero); a NaN is held as the canonical +NaN (the NaN's sign is not pinned)."""
    u = ref.bits(x).astype(np.uint64)
    u = np.where(ref.expo(u) == 0, u & 0x80000000, u) & 0xFFFF0000
    v = ref.flt(u)
    return np.where(np.isnan(v), np.float32(np.nan), v).astype(np.float32)


def packed_from_bf16_dst(v: np.ndarray) -> np.ndarray:
    """pack_tile of a 16-bit DST into a Float32 CB (Packers/FormatConversion.md; pack_src Float16_b):
    the early BF16 rounding flushes denormals and -0 to +0 and turns NaN into infinity (sign kept)."""
    u = ref.bits(v).astype(np.uint64)
    e = ref.expo(u)
    u = np.where(e == 0, 0, np.where(e == 255, (u & 0x80000000) | 0x7F800000, u))
    return ref.flt(u)


def run_sfpu(op: str, inputs: list, fp32_dst: bool, defines: dict[str, str] | None = None,
             approx: bool = False) -> tuple[list[np.ndarray], np.ndarray]:
    """(the DST tiles the op reads, the op's output tile). With an fp32 DST the tiles are packed exactly
    (OP_NONE); a 16-bit DST packs through the packer's BF16 rounding, which loses -0 and NaN, so the
    tiles are modelled from the inputs and checked against the packed OP_NONE output instead."""
    tiles = [_tile(v) for v in inputs]
    pre = {k: v for k, v in (defines or {}).items() if k == "PRE_EXP_APPROX"}
    seen = _out(_program("none", tiles, fp32_dst, pre, approx))
    got = _out(_program(op, tiles, fp32_dst, defines, approx))[0]
    if not fp32_dst and not pre:
        dst = [copied_to_bf16_dst(t.numpy()) for t in tiles]
        for d, s in zip(dst, seen):
            assert (ref.bits(packed_from_bf16_dst(d)) == ref.bits(s)).all()
        seen = dst
    return seen, got


def assert_bits_equal(got: np.ndarray, want: np.ndarray, x: np.ndarray, fp32_dst: bool = True) -> None:
    """Bit-exact, NaNs of any payload equal. `want` is the DST result; with a 16-bit DST it reaches the
    Float32 CB through the packer's BF16 rounding (a NaN becomes an infinity of either sign)."""
    want = np.asarray(want, np.float32)
    if not fp32_dst:
        nan = np.isnan(want)
        want = packed_from_bf16_dst(want)
        got = np.where(nan & np.isinf(got), np.float32(np.nan), got)
        want = np.where(nan, np.float32(np.nan), want)
    both_nan = np.isnan(got) & np.isnan(want)
    bad = (ref.bits(got) != ref.bits(want)) & ~both_nan
    if bad.any():
        i = np.flatnonzero(bad.ravel())[:8]
        rows = [f"x={x.ravel()[j]!r} ({ref.bits(x).ravel()[j]:#010x}): got {got.ravel()[j]!r} "
                f"({ref.bits(got).ravel()[j]:#010x}), want {want.ravel()[j]!r} ({ref.bits(want).ravel()[j]:#010x})"
                for j in i]
        pytest.fail(f"{int(bad.sum())} of {bad.size} lanes differ:\n" + "\n".join(rows))


DENORM = np.float32(1e-40)
EDGE = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-30, -1e-30, DENORM, -DENORM, np.inf, -np.inf, np.nan,
                 -np.nan, 3.4e38, -3.4e38, 1.17549435e-38, 0.75, 1.5, 1e10, 1e-10, 65504.0],
                np.float32)
# exp: overflow/underflow edges of fp32 (88.72 / -87.34 / -103.97) and of the algorithms' clamps.
EXP_EDGE = np.concatenate([EDGE, np.array([88.7, 88.73, 89.0, 100.0, -87.3, -87.4, -88.0, -88.4, -88.5, -88.6,
                                           -100.0, -104.0, -1e5, 1e5, 0.1, -0.1, -5.0, 5.0, 20.0, -20.0, 0.72,
                                           0.73, 45.25, -45.25], np.float32)])
RNG = np.random.default_rng(9)
EXP_SWEEP = np.concatenate([EXP_EDGE, RNG.uniform(-90, 90, 1024 - EXP_EDGE.size).astype(np.float32)])
POS_SWEEP = np.concatenate([EDGE, np.exp(RNG.uniform(-87, 88, 1024 - EDGE.size)).astype(np.float32)])
POS_SWEEP[EDGE.size::2] *= -1  # negative values too


# ---------------------------------------------------------------- exp


@pytest.mark.parametrize("fp32_dst", DSTS)
def test_accurate_exp_is_the_llks_algorithm_for_the_dst_format(fp32_dst):
    (x,), got = run_sfpu("exp", [EXP_SWEEP], fp32_dst)
    xs = ref.load(x, fp32_dst)
    want = ref.exp_fp32_accurate(xs) if fp32_dst else ref.exp_21f(xs)
    assert_bits_equal(got, ref.store(want, fp32_dst), x, fp32_dst)


@pytest.mark.parametrize("fp32_dst", DSTS)
def test_approximate_exp_is_schraudolphs_bit_trick_after_the_clamp(fp32_dst):
    (x,), got = run_sfpu("exp", [EXP_SWEEP], fp32_dst, {"EXP_APPROX": "1"})
    assert_bits_equal(got, ref.store(ref.exp_approx(x, fp32_dst), fp32_dst), x, fp32_dst)


@pytest.mark.parametrize("fp32_dst", DSTS)
def test_exp_scale_en_multiplies_by_the_bf16_scale_first(fp32_dst):
    scale = 0x3E00  # bf16 0.125
    (x,), got = run_sfpu("exp", [EXP_SWEEP], fp32_dst, {"EXP_SCALE": str(scale)})
    xs = ref.load(x, fp32_dst)
    want = (ref.exp_fp32_accurate(ref.mad(xs, np.float32(0.125), 0)) if fp32_dst
            else ref.exp_21f(xs, scale_bf16=scale))
    assert_bits_equal(got, ref.store(want, fp32_dst), x, fp32_dst)


@pytest.mark.parametrize("mode,rows,cols", [("R", 16, 32), ("C", 32, 16), ("None", 16, 16)])
def test_exp_vector_mode_processes_only_its_faces(mode, rows, cols):
    (x,), got = run_sfpu("exp", [EXP_SWEEP], True, {"VECTOR_MODE": mode})
    want = x.copy()
    want[:rows, :cols] = ref.exp_fp32_accurate(x[:rows, :cols])
    assert_bits_equal(got, want, x)


def _steps_mask(mode: str, iterations: int) -> np.ndarray:
    """The lanes an SFPU call covers, from the ISA description alone: the LLK applies the function to
    the faces of the VectorMode (RC all, R 0-1, C 0 and 2, None 0), each application runs ITERATIONS
    vector steps, and step i (SFPLOAD.md: an aligned group of four Dst rows, even or odd columns; the
    LLK's dst_reg++ advances 2 address units) covers face rows 4*(i//2)..4*(i//2)+3, columns of parity i%2."""
    faces = {"RC": (0, 1, 2, 3), "R": (0, 1), "C": (0, 2), "None": (0,)}[mode]
    m = np.zeros((32, 32), bool)
    for f in faces:
        r0, c0 = 16 * (f // 2), 16 * (f % 2)
        for i in range(iterations):
            rows = slice(r0 + 4 * (i // 2), r0 + 4 * (i // 2) + 4)
            m[rows, c0 + (i % 2):c0 + 16:2] = True
    return m


@pytest.mark.parametrize("mode,iterations", [("R", 4), ("R", 2), ("RC", 3), ("C", 6), ("None", 1), ("R", 8)])
def test_exp_iterations_process_only_their_vector_steps_of_each_face(mode, iterations):
    (x,), got = run_sfpu("exp", [EXP_SWEEP], True, {"VECTOR_MODE": mode, "SFPU_ITERATIONS": str(iterations)})
    m = _steps_mask(mode, iterations)
    want = np.where(m, ref.exp_fp32_accurate(x), x)
    assert_bits_equal(got, want, x)


@pytest.mark.parametrize("op", ["sub_b", "mul_s", "max"])
@pytest.mark.parametrize("mode,iterations", [("R", 4), ("R", 6), ("RC", 2)])
def test_llk_sfpu_call_iterations_cover_four_rows_and_one_column_parity_per_step(op, mode, iterations):
    p = np.float32(0.3)
    defines = {"LLK_CALL": "1", "VECTOR_MODE": mode, "SFPU_ITERATIONS": str(iterations),
               "SCALAR_BITS": str(int(ref.bits(p)[0]))}
    seen, got = run_sfpu(op, [POS_SWEEP] if op == "mul_s" else [B_IN, B_IN2], True, defines)
    la = ref.load(seen[0], True)
    if op == "mul_s":
        full = ref.mad(la, p, 0)
    elif op == "sub_b":
        full = ref.mad(ref.load(seen[1], True), -1, la)
    else:
        full = ref.smax(la, ref.load(seen[1], True))
    want = np.where(_steps_mask(mode, iterations), ref.store(full, True), np.asarray(seen[0], np.float32))
    assert_bits_equal(got, want, seen[0])


def test_approximate_and_accurate_exp_differ_where_the_llk_says():
    x = np.array([0.0, -100.0, -88.3, 1.0], np.float32)
    (_,), acc = run_sfpu("exp", [x], True)
    (_,), apx = run_sfpu("exp", [x], True, {"EXP_APPROX": "1"})
    acc, apx = acc.ravel()[:4], apx.ravel()[:4]
    assert acc[0] == 1.0 and acc[1] == 0.0  # exact at 0; below fp32's range it underflows to 0
    # Schraudolph at 0: (127*256 - 11.18) rounded, << 15 -> 1 - 11/512; below -88.5 the clamp gives
    # |A * -88.5 + (B - C)| << 15, a denormal; -88.3 also maps to a denormal, not to exp(-88.3).
    assert apx[0] == np.float32(1 - 11 / 512)
    assert apx[1] == ref.flt(185 << 15) and 0 < apx[1] < 1.2e-38
    assert apx[2] != acc[2] and apx[2] < 1.2e-38
    assert abs(apx[3] / np.e - 1) < 0.05 and apx[3] != acc[3]


def _max_rel_err(got: np.ndarray, x: np.ndarray) -> float:
    want = np.exp(x.astype(np.float64))
    return float(np.max(np.abs(got.astype(np.float64) / want - 1)))


@pytest.mark.parametrize("fp32_dst,approx,bound", [(True, False, 2.0 ** -21), (False, False, 2.0 ** -7),
                                                   (True, True, 0.05), (False, True, 0.05)])
def test_exp_error_against_float64_on_a_sweep(fp32_dst, approx, bound, record_property):
    """exp over [-80, 80] (bf16-exact inputs, normal results): accurate fp32 within 2^-21 (a few ulp);
    exp_21f on a 16-bit DST within 2^-7 (its c0 is loaded as fp16 0x3c02 = 1.00195, not 1.0017248: up
    to 0.2% before the bf16 rounding); the approximate mode within 5% (Schraudolph's bound)."""
    x = ref.to_bf16_away(np.linspace(-80, 80, 1024, dtype=np.float32))
    (seen,), got = run_sfpu("exp", [x], fp32_dst, {"EXP_APPROX": "1"} if approx else None)
    err = _max_rel_err(got, seen)
    record_property("max_rel_err", err)
    assert err <= bound


# ---------------------------------------------------------------- reciprocal


@pytest.mark.parametrize("fp32_dst", DSTS)
@pytest.mark.parametrize("mode", ["default", "approx_via_math_approx_mode", "approximate", "precise"])
def test_reciprocal_seed_and_newton_steps(fp32_dst, mode):
    defines = {"approximate": {"RECIP_APPROXIMATE": "1"}, "precise": {"RECIP_PRECISE": "1"}}.get(mode, {})
    math_approx = mode == "approx_via_math_approx_mode"
    (x,), got = run_sfpu("recip", [POS_SWEEP], fp32_dst, defines, approx=math_approx)
    xs = ref.load(x, fp32_dst)
    if mode in ("approximate", "approx_via_math_approx_mode"):
        want = ref.reciprocal(xs, 0, False, ref.RECIP_SEED)
    elif fp32_dst:
        want = ref.reciprocal(xs, 2, False, ref.RECIP_SEED)
    else:
        want = ref.reciprocal(xs, 1, True, ref.RECIP_SEED_BF16)
    assert_bits_equal(got, ref.store(want, fp32_dst), x, fp32_dst)


def test_reciprocal_modes_differ_and_two_newton_steps_are_faithful(record_property):
    """On [1, 2): two Newton steps give 1/x within 1 ulp (the LLK's 'faithful'); the approximate mode's
    one step from the minimax seed (error 0.0101) squares the error to ~1e-4."""
    x = np.linspace(1, 2, 1024, endpoint=False, dtype=np.float32)
    (_,), precise = run_sfpu("recip", [x], True)
    (_,), approx = run_sfpu("recip", [x], True, {"RECIP_APPROXIMATE": "1"})
    exact = 1 / x.reshape(32, 32).astype(np.float64)
    err_p = np.max(np.abs(precise / exact - 1))
    err_a = np.max(np.abs(approx / exact - 1))
    record_property("max_rel_err", (float(err_p), float(err_a)))
    assert err_p <= 2.0 ** -23 and 2.0 ** -16 < err_a <= 1.1e-4


# ---------------------------------------------------------------- log


@pytest.mark.parametrize("fp32_dst", DSTS)
def test_log_is_the_llks_range_reduction_and_polynomial(fp32_dst):
    (x,), got = run_sfpu("log", [POS_SWEEP], fp32_dst)
    r = ref.log(ref.load(x, fp32_dst), fp32_dst)
    want = r if fp32_dst else ref.to_bf16_away(r)
    assert_bits_equal(got, ref.store(want, fp32_dst), x, fp32_dst)


def test_log_special_values():
    x = np.array([0.0, -0.0, np.inf, -1.0, 1.0, DENORM], np.float32)
    (_,), got = run_sfpu("log", [x], True)
    g = got.ravel()[:6]
    assert g[0] == -np.inf and g[1] == -np.inf and g[2] == np.inf and np.isnan(g[3]) and g[4] == 0.0


# ---------------------------------------------------------------- scalar binops


@pytest.mark.parametrize("fp32_dst", DSTS)
@pytest.mark.parametrize("op", ["add_s", "sub_s", "mul_s", "div_s", "rsub_s"])
def test_scalar_binop_is_one_sfpmad(fp32_dst, op):
    p = np.float32(0.3)  # not a bf16 value
    (x,), got = run_sfpu(op, [POS_SWEEP], fp32_dst, {"SCALAR_BITS": str(int(ref.bits(p)[0]))})
    xs = ref.load(x, fp32_dst)
    want = {"add_s": lambda: ref.mad(xs, 1, p), "sub_s": lambda: ref.mad(p, -1, xs),
            "mul_s": lambda: ref.mad(xs, p, 0), "div_s": lambda: ref.mad(xs, p, 0),  # the LLK multiplies
            "rsub_s": lambda: ref.mad(xs, -1, p)}[op]()
    if op == "rsub_s" and not fp32_dst:
        want = ref.bf16_rne_int(want)
    assert_bits_equal(got, ref.store(want, fp32_dst), x, fp32_dst)


def test_denormals_left_in_an_fp32_dst_by_approximate_exp_are_zero_to_the_next_op():
    x = np.array([-88.3, -88.4, -88.45, -200.0, 0.0], np.float32)
    (seen,), got = run_sfpu("mul_s", [x], True, {"PRE_EXP_APPROX": "1", "SCALAR_BITS": str(int(ref.bits(np.float32(2.0))[0]))})
    assert (ref.expo(ref.bits(seen.ravel()[:4])) == 0).all() and (seen.ravel()[:4] != 0).all()
    assert (got.ravel()[:4] == 0).all() and ref.bits(got.ravel()[:4]).max() == 0


# ---------------------------------------------------------------- binary ops on two DST tiles

B_IN = np.concatenate([EDGE, RNG.standard_normal(1024 - EDGE.size).astype(np.float32) * 1e3])
B_IN2 = np.concatenate([EDGE[::-1], RNG.standard_normal(1024 - EDGE.size).astype(np.float32) * 1e-3])


@pytest.mark.parametrize("fp32_dst", DSTS)
@pytest.mark.parametrize("op,nearest", [("max", False), ("add_b", False), ("add_b", True), ("sub_b", False),
                                        ("sub_b", True), ("mul_b", False)])
def test_binary_sfpu_op(fp32_dst, op, nearest):
    (a, b), got = run_sfpu(op, [B_IN, B_IN2], fp32_dst, {"NEAREST_EVEN": "1"} if nearest else None)
    la, lb = ref.load(a, fp32_dst), ref.load(b, fp32_dst)
    if op == "max":
        want = ref.smax(la, lb)
    elif op == "mul_b":
        want = ref.mad(la, lb, 0)
        if not fp32_dst:
            want = np.where((ref.bits(la) == 0) | (ref.bits(lb) == 0), np.float32(0), ref.bf16_rne_int(want))
    else:
        want = ref.mad(la, 1, lb) if op == "add_b" else ref.mad(lb, -1, la)
        if nearest and not fp32_dst:
            want = ref.bf16_rne_int(want)
    assert_bits_equal(got, ref.store(want, fp32_dst), a, fp32_dst)


@pytest.mark.parametrize("fp32_dst", DSTS)
@pytest.mark.parametrize("op", ["add_b", "sub_b", "mul_b", "mul_s"])
@pytest.mark.parametrize("mode,rows,cols", [("R", 16, 32), ("C", 32, 16), ("None", 16, 16), ("RC", 32, 32)])
def test_llk_sfpu_call_macro_runs_the_op_on_the_faces_of_its_vector_mode(fp32_dst, op, mode, rows, cols):
    """SFPU_BINARY_CALL / SFPU_UNARY_CALL (llk_math_eltwise_*_sfpu_macros.h) with a VectorMode: the
    LLK applies the function to faces 0-3 (RC), 0-1 (R: rows 0-15), 0 and 2 (C: columns 0-15) or 0
    (None) (_llk_math_eltwise_sfpu_apply_vector_mode_); those lanes get the *_tile op's value, the
    others keep what DST held."""
    p = np.float32(0.3)
    defines = {"LLK_CALL": "1", "VECTOR_MODE": mode, "SCALAR_BITS": str(int(ref.bits(p)[0]))}
    inputs = [POS_SWEEP] if op == "mul_s" else [B_IN, B_IN2]
    seen, got = run_sfpu(op, inputs, fp32_dst, defines)
    la = ref.load(seen[0], fp32_dst)
    if op == "mul_s":
        full = ref.mad(la, p, 0)
    else:
        lb = ref.load(seen[1], fp32_dst)
        full = {"add_b": lambda: ref.mad(la, 1, lb), "sub_b": lambda: ref.mad(lb, -1, la),
                "mul_b": lambda: ref.mad(la, lb, 0)}[op]()
        if op == "mul_b" and not fp32_dst:
            full = np.where((ref.bits(la) == 0) | (ref.bits(lb) == 0), np.float32(0), ref.bf16_rne_int(full))
    want = np.asarray(seen[0], np.float32).copy()
    want[:rows, :cols] = ref.store(full, fp32_dst)[:rows, :cols]
    assert_bits_equal(got, want, seen[0], fp32_dst)


def test_binary_max_orders_signed_zeros_and_nans_as_sfpswap():
    a = ref.flt(np.array([0x80000000, 0, 0x7FC00000, 0xFF800000]))  # -0, +0, +NaN, -inf
    b = ref.flt(np.array([0, 0x80000000, 0x3F800000, 0xFFC00000]))  # +0, -0, 1, -NaN
    (da, db), got = run_sfpu("max", [a, b], True)
    assert (ref.bits(da.ravel()[:4]) == ref.bits(a)).all() and (ref.bits(db.ravel()[:4]) == ref.bits(b)).all()
    g = got.ravel()[:4]
    assert ref.bits(g[0]) == 0 and ref.bits(g[1]) == 0 and np.isnan(g[2]) and g[3] == -np.inf


# ---------------------------------------------------------------- ternary op on three DST tiles

B_IN3 = np.concatenate([EDGE[5:], EDGE[:5], RNG.standard_normal(1024 - EDGE.size).astype(np.float32)])


@pytest.mark.parametrize("fp32_dst", DSTS)
@pytest.mark.parametrize("value", [1.0, -2.5])
def test_addcmul_is_one_sfpmul_then_one_sfpmad(fp32_dst, value):
    """addcmul_tile (ckernel_sfpu_addcmul.h): value * b (SFPMUL, one rounding), then product * c + a
    (SFPMAD, one rounding; SFPMAD.md), stored as is into an fp32 DST; a 16-bit DST stores the
    SFPSTOCHRND bf16 rounding (ties away) of the result."""
    bits = int(np.float32(value).view(np.uint32))
    (a, b, c), got = run_sfpu("addcmul", [B_IN, B_IN2, B_IN3], fp32_dst, {"SCALAR_BITS": f"{bits}u"})
    la, lb, lc = (ref.load(t, fp32_dst) for t in (a, b, c))
    want = ref.mad(ref.mad(np.float32(value), lb, 0), lc, la)
    if not fp32_dst:
        want = ref.to_bf16_away(want)
    assert_bits_equal(got, ref.store(want, fp32_dst), a, fp32_dst)



# ---------------------------------------------------------------- which init serves which op

# On Wormhole add/sub/mul_binary_tile_init and addcmul_tile_init run the same steps (_init_sfpu_config_reg,
# ADDR_MOD_7 without increments, reset_counters; sfpu_binary_init loads nothing for ADD/SUB/MUL):
# llk_math_eltwise_binary_sfpu.h, llk_math_eltwise_ternary_sfpu.h, ckernel_sfpu_binary.h.
@pytest.mark.parametrize("op,other", [("mul_b", "addcmul_tile_init()"), ("add_b", "mul_binary_tile_init()"),
                                      ("sub_b", "addcmul_tile_init()"), ("addcmul", "mul_binary_tile_init()"),
                                      ("addcmul", "sub_binary_tile_init()")])
def test_the_binary_sfpu_inits_and_addcmuls_leave_one_state_that_serves_all_four_ops(op, other):
    inputs = [B_IN, B_IN2, B_IN3] if op == "addcmul" else [B_IN, B_IN2]
    defines = {"SCALAR_BITS": "0x3f800000u"} if op == "addcmul" else {}
    _, own = run_sfpu(op, inputs, True, defines)
    _, got = run_sfpu(op, inputs, True, {**defines, "OTHER_INIT": other})
    assert_bits_equal(got, own, np.asarray(B_IN, np.float32).reshape(32, 32))


# binary_max_tile_init also sets ADDR_MOD_6 (the max's SFPSTORE advances by it; ckernel_sfpu_binary_max_min.h),
# which the binary inits leave as the last FPU init set it; the approximate exp's init also programs
# SFPLOADMACRO templates and the replay buffer (ckernel_sfpu_exp.h exp_init).
@pytest.mark.parametrize("op,other,api", [("max", "mul_binary_tile_init()", "binary_max_tile"),
                                          ("mul_b", "exp_tile_init<true>()", "mul_binary_tile")])
def test_an_sfpu_op_after_an_init_of_another_state_is_refused(op, other, api):
    with pytest.raises(KernelError, match=f"{api}: the SFPU is configured by"):
        run_program(_program(op, [_tile(B_IN), _tile(B_IN2)], True, {"OTHER_INIT": other}))


# The accurate exp's init (exp_tile_init<false>: llk_math_eltwise_unary_sfpu_init<exponential>, then
# sfpu::exp_init) runs the binary family's three steps (_init_sfpu_config_reg, ADDR_MOD_7 without
# increments, reset_counters; exponential sets no ADDR_MOD_6: llk_math_eltwise_unary_sfpu.h) and then only
# programs LReg[12..14] (sfpu_reciprocal_init<false> with an fp32 DST, exp_21f's constants with a 16-bit
# one: ckernel_sfpu_exp.h), which the binary family's inits and ops neither write nor read.
@pytest.mark.parametrize("fp32_dst", DSTS)
@pytest.mark.parametrize("op", ["add_b", "sub_b", "mul_b"])
def test_the_accurate_exps_init_serves_the_binary_sfpu_ops(op, fp32_dst):
    _, own = run_sfpu(op, [B_IN, B_IN2], fp32_dst)
    _, got = run_sfpu(op, [B_IN, B_IN2], fp32_dst, {"OTHER_INIT": "exp_tile_init<false>()"})
    assert_bits_equal(got, own, np.asarray(B_IN, np.float32).reshape(32, 32))


@pytest.mark.parametrize("fp32_dst", DSTS)
def test_an_accurate_exp_runs_under_the_binary_state_while_lreg_12_to_14_keep_its_constants(fp32_dst):
    _, own = run_sfpu("exp", [B_IN], fp32_dst)
    _, got = run_sfpu("exp", [B_IN], fp32_dst, {"PRE_INIT": "exp_tile_init<false>()",
                                                "OTHER_INIT": "sub_binary_tile_init()"})
    assert_bits_equal(got, own, np.asarray(B_IN, np.float32).reshape(32, 32))


def test_a_bf16_dst_exp_reads_lreg_12_and_13_only_so_an_earlier_lreg_14_does_not_matter():
    """exp_21f (a 16-bit DST) programs and reads LReg[12..13] (ckernel_sfpu_exp.h); a recip init before
    its own leaves LReg[14] as recip left it, which the exp never reads: the same bits as without it."""
    _, own = run_sfpu("exp", [B_IN], False)
    _, got = run_sfpu("exp", [B_IN], False, {"PRE_INIT": "recip_tile_init(); exp_tile_init<false>()",
                                              "OTHER_INIT": "sub_binary_tile_init()"})
    assert_bits_equal(got, own, np.asarray(B_IN, np.float32).reshape(32, 32))


@pytest.mark.parametrize("defines,message", [
    # no exp init since the kernel started: LReg[12..14] hold no exp constants
    ({"OTHER_INIT": "sub_binary_tile_init()"}, r"exp_tile: LReg\[12..14\] hold the constants programmed by \(no init\)"),
    # a log init since the exp's: its constants replaced the exp's
    ({"PRE_INIT": "exp_tile_init<false>(); log_tile_init()", "OTHER_INIT": "sub_binary_tile_init()"},
     r"exp_tile: LReg\[12..14\] hold the constants programmed by log_tile_init"),
    # the approximate exp needs its own init (templates, replay buffer)
    ({"EXP_APPROX": "1", "PRE_INIT": "exp_tile_init<true>()", "OTHER_INIT": "sub_binary_tile_init()"},
     "exp_tile: the SFPU is configured by sub_binary_tile_init"),
    # a recip init programs the same fp32 constants, but its state is not the binary family's
    ({"OTHER_INIT": "recip_tile_init()"}, "exp_tile: the SFPU is configured by recip_tile_init"),
])
def test_an_exp_without_its_constants_or_state_is_refused(defines, message):
    with pytest.raises(KernelError, match=message):
        run_program(_program("exp", [_tile(B_IN)], True, defines))
