"""FPU multiplies (MVMUL, ELWMUL, GAPOOL) against a plain numpy reading of the ISA documentation.

Sources: SrcASrcB.md (fidelity phases, TF32/BF16 registers), ELWMUL.md (SrcAFidelityBits / SrcBFidelityBits,
DST accumulate and RoundToBF16 per phase), MVMUL.md (Dst += SrcB @ SrcA, 16-deep products summed in fp32),
the LLK (llk_math_matmul.h / llk_math_eltwise_binary.h: LoFi issues phase 0, HiFiN phases 0..N-1).
The expected values are computed here, never by the runtime.
"""
import numpy as np
import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings, MathFidelity
from ttdecode.runtime import run_program

from programs import out_tiles, tile_op_program

F32, BF16 = DataType.float32, DataType.bfloat16
PHASES = {MathFidelity.LoFi: 1, MathFidelity.HiFi2: 2, MathFidelity.HiFi3: 3, MathFidelity.HiFi4: 4}


def _u(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def _f(u: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(u, dtype=np.uint32).view(np.float32)


def src_register(x: np.ndarray, keep: int) -> np.ndarray:
    """What the unpacker leaves in SrcA/SrcB: denormals flushed to signed zero, Float32 mantissas cut by
    the mask `keep` (TF32 or BF16)."""
    u = _u(x).copy()
    denorm = (u >> 23) & 0xFF == 0
    u[denorm] &= 0x80000000
    finite = (u >> 23) & 0xFF != 0xFF
    u[finite] &= keep
    return _f(u)


def fid_a(x: np.ndarray, phase: int) -> np.ndarray:
    """SrcAFidelityBits: top 4 mantissa bits (even phase) or the next 5 (odd phase)."""
    if phase & 1 == 0:
        return _f(_u(x) & 0xFFF80000)
    return (x - _f(_u(x) & 0xFFF83FFF)).astype(np.float32)


def fid_b(x: np.ndarray, phase: int) -> np.ndarray:
    """SrcBFidelityBits: top 6 mantissa bits (phase bit 1 clear) or the next 4."""
    if phase & 2 == 0:
        return _f(_u(x) & 0xFFFE0000)
    return (x - _f(_u(x) & 0xFFFE1FFF)).astype(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """RoundToBF16 on finite values: to nearest, ties to even."""
    u = _u(x).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return _f(u.astype(np.uint32))


def dst_write(x: np.ndarray, fp32: bool) -> np.ndarray:
    return x.astype(np.float32) if fp32 else round_bf16(x.astype(np.float32))


def model_matmul(a: np.ndarray, b: np.ndarray, phases: int, fp32: bool) -> np.ndarray:
    """a (CB in0 -> SrcB) @ b (CB in1 -> SrcA): per phase, each 16-deep MVMUL summed in fp32, added to DST."""
    c = np.zeros((32, 32), np.float32)
    for p in range(phases):
        sb, sa = fid_b(a, p), fid_a(b, p)
        for h in range(2):
            x = np.zeros((32, 32), np.float32)
            for k in range(h * 16, h * 16 + 16):
                x = (x + np.outer(sb[:, k], sa[k, :]).astype(np.float32)).astype(np.float32)
            c = dst_write(c + x, fp32)
    return c


def model_mul(a: np.ndarray, b: np.ndarray, phases: int, fp32: bool) -> np.ndarray:
    """ELWMUL, a in SrcA, b in SrcB: each phase's exact slice product is added to DST and written back."""
    d = np.zeros_like(a)
    for p in range(phases):
        d = dst_write((fid_a(a, p) * fid_b(b, p)).astype(np.float32) + d, fp32)
    return d


def edge_tile(rng: np.random.Generator, fp32_data: bool) -> np.ndarray:
    """Random signs, mantissas that use every bit, exponents over 2^-8..2^8, plus -0, +0, denormals."""
    mant = rng.integers(0, 1 << 23, size=(32, 32), dtype=np.uint32)
    exp = rng.integers(127 - 8, 127 + 8, size=(32, 32), dtype=np.uint32)
    sign = rng.integers(0, 2, size=(32, 32), dtype=np.uint32)
    u = (sign << 31) | (exp << 23) | mant
    u[0, :4] = [0x80000000, 0, 0x00000123, 0x80400000]  # -0, +0, denormals
    if not fp32_data:
        u &= 0xFFFF0000  # exact bf16 values (incl. a bf16 denormal)
    return _f(u)


def run(op: str, a: np.ndarray, b: np.ndarray, dtype: DataType, fid: MathFidelity, fp32: bool) -> np.ndarray:
    prog = tile_op_program(op, {0: torch.from_numpy(a.copy()), 1: torch.from_numpy(b.copy())}, 1, dtype=dtype,
                           out_dtype=F32, settings=ComputeSettings(math_fidelity=fid, fp32_dest_acc_en=fp32))
    return out_tiles(run_program(prog), prog)[0].numpy()


@pytest.mark.parametrize("fp32", [True, False], ids=["fp32dst", "bf16dst"])
@pytest.mark.parametrize("fid", list(PHASES), ids=lambda f: f.name)
@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: d.value)
@pytest.mark.parametrize("op", ["matmul", "mul"])
def test_fpu_multiply_follows_fidelity_phases(op, dtype, fid, fp32):
    rng = np.random.default_rng(7)
    a, b = edge_tile(rng, dtype is F32), edge_tile(rng, dtype is F32)
    # Float32 unpacks to TF32 with fp32_dest_acc_en, else to BF16 (truncated); bf16 data is exact.
    keep = 0xFFFFFFFF if dtype is BF16 else 0xFFFFE000 if fp32 else 0xFFFF0000
    ra, rb = src_register(a, keep), src_register(b, keep)
    model = model_matmul if op == "matmul" else model_mul
    want = model(ra, rb, PHASES[fid], fp32)
    got = run(op, a, b, dtype, fid, fp32)
    np.testing.assert_array_equal(_u(got), _u(want))


@pytest.mark.parametrize("op", ["matmul", "mul"])
def test_lofi_and_hifi4_differ_where_the_docs_say(op):
    # A bf16 SrcA value with its low 3 mantissa bits set: LoFi (phase 0 only) does not see them.
    a = np.full((32, 32), 1.0 + 2.0**-7, np.float32)
    b = np.full((32, 32), 1.0 + 2.0**-6 + 2.0**-7, np.float32)  # SrcB's last bf16 bit: phase 2 only
    a_, b_ = (a, b) if op == "mul" else (b, a)  # the first value sits in SrcA either way
    lo = run(op, a_, b_, BF16, MathFidelity.LoFi, True)
    hi = run(op, a_, b_, BF16, MathFidelity.HiFi4, True)
    k = 32 if op == "matmul" else 1
    assert np.all(lo == np.float32(k * 1.0 * (1.0 + 2.0**-6)))  # only the phase-0 slices multiply
    assert np.all(hi == np.float32(k * (1.0 + 2.0**-7) * (1.0 + 2.0**-6 + 2.0**-7)))


def model_reduce_sum_row(data: np.ndarray, scaler_row: np.ndarray, phases: int, fp32: bool) -> np.ndarray:
    """SUM reduce along rows (GAPOOL, data in SrcB, scaler row in SrcA): per phase, each 16-column half
    summed in fp32 from 0, then added to DST with DST's rounding. Returns the 32 row sums."""
    out = np.zeros(32, np.float32)
    for p in range(phases):
        prod = (fid_b(data, p) * fid_a(scaler_row, p)[None, :]).astype(np.float32)
        for h in range(2):
            x = np.zeros(32, np.float32)
            for c in range(h * 16, h * 16 + 16):
                x = (x + prod[:, c]).astype(np.float32)
            out = dst_write(out + x, fp32)
    return out


@pytest.mark.parametrize("fp32", [True, False], ids=["fp32dst", "bf16dst"])
@pytest.mark.parametrize("fid", [MathFidelity.LoFi, MathFidelity.HiFi4], ids=lambda f: f.name)
def test_sum_reduce_follows_fidelity_phases(fid, fp32):
    rng = np.random.default_rng(11)
    data = edge_tile(rng, False)
    scaler = np.full((32, 32), 1.0 + 2.0**-3 + 2.0**-6, np.float32)  # bits in both SrcA slices
    prog = tile_op_program("reduce_sum", {0: torch.from_numpy(data.copy()), 2: torch.from_numpy(scaler)}, 1,
                           dtype=BF16, out_dtype=F32, settings=ComputeSettings(math_fidelity=fid, fp32_dest_acc_en=fp32))
    got = out_tiles(run_program(prog), prog)[0].numpy()[:, 0]
    want = model_reduce_sum_row(src_register(data, 0xFFFFFFFF), scaler[0], PHASES[fid], fp32)
    np.testing.assert_array_equal(_u(got), _u(want))
