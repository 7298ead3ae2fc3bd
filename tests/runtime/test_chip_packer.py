"""The packer (DST -> CB) against a plain numpy reading of the ISA documentation and the LLK's configuration.

Sources:
- `WormholeB0/TensixTile/TensixCoprocessor/Packers/FormatConversion.md`: the early conversion with
  rounding (Read_raw = 0) rounds to nearest with ties away from zero, flushes denormals, turns -0 into
  +0 and NaN into infinity; FP32 -> FP32 is the identity; the late conversion to BFP8 rounds (ties
  away) to one shared exponent per 16 datums, BFP4 truncates the BFP8 result.
- `FloatBitPatterns.md` (BFP): magnitude m under exponent E means m / 2^6 * 2^(E - 127) (BFP8),
  m / 2^2 * 2^(E - 127) (BFP4); sign 1 with magnitude 0 is -infinity, so a zero magnitude gets sign 0.
- tt-metal `get_single_pack_src_format` (jit_build/data_format.cpp) with bfp8_pack_precise = false
  (ttnn 0.81.1's ComputeConfigDescriptor default): a Float16_b CB packs through BF16, a Bfp8_b / Bfp4_b
  CB through E8M6 ("BFP8" intermediate), a Float32 CB through FP32 with an fp32 DST and through BF16
  with a bf16 DST. The LLK (cpack_common.h) sets Read_raw = 0 and leaves stochastic rounding off.

Values are put in DST by `copy_tile` (a Float32 CB unpacked to DST for the fp32 DST, a bfloat16 CB
for the bf16 DST) and packed by `pack_tile` (kernels/tests/dst_op.cpp); the expected bytes are built
here from values, not from the runtime's code nor from ttdecode.core.formats.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings
from ttdecode.runtime import run_program

from programs import tile_op_program

F32, BF16, BFP8, BFP4 = DataType.float32, DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b


def _u(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def edge_tile() -> np.ndarray:
    """A 32x32 fp32 tile; each half row (16 values) is one block-float group of the packed tile."""
    g = np.random.default_rng(7)
    x = (g.standard_normal((32, 32)) * np.exp2(g.integers(-8, 8, (32, 32)))).astype(np.float32)
    one = 1.0
    groups = {
        # ties between two BF16 values (odd and even lower neighbour), both signs, and just below a tie
        (0, 0): [one + 2**-8, -(one + 2**-8), one + 3 * 2**-8, -(one + 3 * 2**-8), one + 2**-8 - 2**-23,
                 3 + 2**-6, 0.5 + 2**-10, -(0.5 + 2**-10), 1.5, 1.25, -1.75, 0.375, 2.0, -2.0, 0.0, 1.0],
        # ties between two E8M6 values and BFP8 rounding ties after the shift (shared exponent of 1.0)
        (0, 16): [one + 2**-7, -(one + 2**-7), one + 3 * 2**-7, 1.25 * 2**-5, -1.25 * 2**-5, 1.125 * 2**-5,
                  0.75 * 2**-6, 2**-7, -2**-7, 2**-8, 1.0, 1.75, -1.9, 0.24, -0.24, 0.9],
        # denormals, signed zeros, the smallest normal
        (1, 0): [2**-140, -(2**-140), 2**-127, -0.0, 0.0, 2**-126, -(2**-126), 3 * 2**-128, 1e-40, -1e-42,
                 2**-125, 2**-126 * 1.5, 0.0, -0.0, 2**-130, 2**-149],
        # infinities and NaNs next to finite values (the group's other datums shift out)
        (1, 16): [np.inf, 1.0, -3.0, 1e30, 0.5, -0.25, 2.0, 7.0, 1e-3, -1e-3, 100.0, -100.0, 3.0, 4.0, 5.0, 6.0],
        (2, 0): [-np.inf, 1.0, 2.0, -2.0] + [0.75] * 12,
        (2, 16): [np.nan, 1.0, -1.0, 3.5] + [1e20] * 12,
        # a wide exponent spread: one huge value and many small ones
        (3, 0): [2.0**20, 1.0, -1.0, 1e-3, 2.0**13, -(2.0**13 + 2.0**12), 2.0**14 * 1.5, 2**-20, 123.0, -4567.0,
                 2.0**19 * 1.99, 2.0**12 * 1.03, 0.5, 2.0**13 * 1.5, 2.0**13 * 1.0625, -(2.0**14)],
        # exact powers of two, from the smallest normal to the largest
        (3, 16): [2**-126, 2**-100, 2**-1, 1.0, 2.0, 2.0**64, 2.0**127, -(2.0**127), -(2**-126), 2**-64, 0.25, 4.0,
                  8.0, 16.0, -32.0, 2.0**100],
        # rounding carries into the next exponent (and, for BFP, changes the shared exponent); the
        # largest finite float rounds to infinity
        (4, 0): [1.999999, 0.999, -1.9999, 3.9999999, 1.0, 1.5, 0.5, 1.99, 1.9921875, 1.98, 1.0, 1.0, 1.0,
                 1.0, 1.0, 1.0],
        (4, 16): [3.4028235e38, -3.4028235e38, 3.3e38, 1.0, 2.0, 0.5, 0.25, 1e38, 1e37, 1e36, 1.0, 1.0, 1.0,
                  1.0, 1.0, 1.0],
        # a group whose largest value rounds up from 2^k - tiny: the others shift one more place
        (5, 0): [(2.0 - 2**-7) * 2**10, 1.0 * 2**9, 1.5 * 2**9 + 4, -(1.25 * 2**8 + 2), 3.0, -(2.0**10 - 1), 100.0,
                 1.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0],
        # an all-zero group (shared exponent 0)
        (5, 16): [0.0] * 8 + [-0.0] * 8,
    }
    for (r, c), vals in groups.items():
        assert len(vals) == 16
        x[r, c:c + 16] = np.array(vals, dtype=np.float64).astype(np.float32)
    x[2, 17] = np.float32(-np.nan)  # a negative NaN
    # the same groups again in faces 2 and 3 (rows 16..), so every face of the tile holds edge cases
    x[16:22] = x[0:6]
    return x


def early_round(x: np.ndarray, mant_bits: int) -> np.ndarray:
    """Early conversion with rounding (Read_raw = 0) to an 8-bit-exponent float with `mant_bits`
    mantissa bits: ties away from zero on the magnitude; denormals and -0 -> +0; NaN -> inf (sign kept);
    a rounding beyond the largest finite value gives inf."""
    x = np.asarray(x, dtype=np.float32)
    exp = (_u(x) >> 23) & 0xFF
    x64 = x.astype(np.float64)
    quantum = np.ldexp(1.0, exp.astype(np.int64) - 127 - mant_bits)
    with np.errstate(invalid="ignore", over="ignore"):
        r = np.floor(np.abs(x64) / quantum + 0.5) * quantum
        r = np.where(r >= 2.0**128, np.inf, r)
        signed = np.copysign(r, x64)
    sign_is_neg = (_u(x) >> 31) == 1
    special = np.where(sign_is_neg, -np.inf, np.inf)
    out = np.where(exp == 0, 0.0, np.where(exp == 255, special, signed))
    return out.astype(np.float32)


def tile_order(x: np.ndarray) -> np.ndarray:
    """1024 values in face order: faces (0,0), (0,16), (16,0), (16,16), each row-major."""
    return np.concatenate([x[r:r + 16, c:c + 16].reshape(-1) for r in (0, 16) for c in (0, 16)])


def bfp_image(y: np.ndarray, bfp4: bool) -> bytes:
    """Block-float tile image of E8M6 values `y` (tile order): 64 shared exponents, then the codes."""
    exps, codes = [], []
    for g in range(64):
        v = y[16 * g:16 * g + 16]
        e = (_u(v) >> 23) & 0xFF
        shared = int(e.max())
        unit = 2.0 ** (shared - 127 - 6)  # value of BFP8 magnitude 1 under this exponent
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = np.floor(np.abs(v.astype(np.float64)) / unit + 0.5)  # rounded, ties away
        # an infinity (the only datums with exponent 255 after the early rounding) keeps significand 1.0
        mag = np.where(e == 255, 64, np.where(e == 0, 0, scaled)).astype(np.int64)
        assert mag.max() <= 127
        neg = (_u(v) >> 31).astype(np.int64)
        if bfp4:
            mag = mag // 16  # truncate BFP8 -> BFP4
            codes.append(np.where(mag > 0, neg << 3 | mag, 0))
        else:
            codes.append(np.where(mag > 0, neg << 7 | mag, 0))
        exps.append(shared)
    c = np.concatenate(codes).astype(np.uint8)
    if bfp4:
        c = (c[0::2] | (c[1::2] << 4)).astype(np.uint8)
    return bytes(exps) + c.tobytes()


def chip_pack(dst: np.ndarray, out: DataType, fp32_dst: bool) -> bytes:
    """The tile image the packer writes for DST values `dst` (32x32; bf16 values for a bf16 DST)."""
    t = tile_order(dst)
    if out is F32:
        y = t if fp32_dst else early_round(t, 7)  # bf16 DST: pack_src Float16_b, then widened
        return _u(y).astype("<u4").tobytes()
    if out is BF16:
        return (_u(early_round(t, 7)) >> 16).astype("<u2").tobytes()
    return bfp_image(early_round(t, 6), bfp4=out is BFP4)


def run_pack(x: np.ndarray, out: DataType, fp32_dst: bool) -> tuple[bytes, np.ndarray]:
    """Copies x into DST and packs it into a CB of format `out`; returns the packed bytes and the DST
    values (fp32: x exactly, via unpack-to-dest; bf16: x as bfloat16 through SrcA)."""
    if fp32_dst:
        prog = tile_op_program("copy", {0: torch.from_numpy(x)}, 1, dtype=F32, out_dtype=out, unpack_to_dest=(0,),
                               kernel="dst_op.cpp", settings=ComputeSettings(fp32_dest_acc_en=True))
        dst = x
    else:
        xb = torch.from_numpy(x).to(torch.bfloat16)
        prog = tile_op_program("copy", {0: xb.float()}, 1, dtype=BF16, out_dtype=out, kernel="dst_op.cpp",
                               settings=ComputeSettings(fp32_dest_acc_en=False))
        dst = xb.float().numpy()
        dst = np.where(np.isnan(dst), np.float32(np.nan), dst)  # the bfloat16 CB holds NaN as 0x7FC0
    return bytes(run_program(prog).tensors["out"]), dst


@pytest.mark.parametrize("fp32_dst", [True, False], ids=["fp32-dst", "bf16-dst"])
@pytest.mark.parametrize("out", [F32, BF16, BFP8, BFP4], ids=lambda d: d.name)
def test_packer_converts_dst_to_each_cb_format_as_documented(out: DataType, fp32_dst: bool):
    x = edge_tile()
    got, dst = run_pack(x, out, fp32_dst)
    want = chip_pack(dst, out, fp32_dst)
    assert len(got) == len(want)
    if got != want:
        g, w = np.frombuffer(got, np.uint8), np.frombuffer(want, np.uint8)
        bad = np.flatnonzero(g != w)
        pytest.fail(f"{len(bad)} bytes differ, first at {bad[:8].tolist()}: got {g[bad[:8]].tolist()}, "
                    f"want {w[bad[:8]].tolist()}")


def test_bf16_pack_rounds_ties_away_and_flushes_specials():
    """Spelled-out cases of the early rounding to BF16 from an fp32 DST (FormatConversion.md)."""
    vals = np.array([1 + 2**-8, -(1 + 2**-8), 1 + 3 * 2**-8, 2**-130, -0.0, np.nan, 3.4028235e38], np.float32)
    x = np.zeros((32, 32), np.float32)
    x[0, :len(vals)] = vals
    got, _ = run_pack(x, BF16, fp32_dst=True)
    h = np.frombuffer(got, "<u2")[:len(vals)]
    # 1 + 2^-8 is halfway between bf16 1.0 (even) and 1 + 2^-7: ties away from zero take the odd one
    assert h.tolist() == [0x3F81, 0xBF81, 0x3F82, 0x0000, 0x0000, 0x7F80, 0x7F80]


def test_bfp8_pack_shares_the_largest_exponent_and_zeroes_a_group_with_infinity():
    x = np.zeros((32, 32), np.float32)
    x[0, :4] = [2.0**20, 1.0, -3.0, 2.0**13 * 1.5]  # group 0: exponent of 2^20, 1.0 and -3 shift out
    x[1, :3] = [np.inf, 5.0, -7.0]                   # group 1: shared exponent 255, finite datums -> 0
    got, _ = run_pack(x, BFP8, fp32_dst=True)
    exps, codes = np.frombuffer(got[:64], np.uint8), np.frombuffer(got[64:], np.uint8)
    assert exps[0] == 127 + 20 and codes[:4].tolist() == [64, 0, 0, 1]  # 1.5 * 2^13 / 2^14 = 0.75 -> 1
    assert exps[1] == 255 and codes[16:19].tolist() == [64, 0, 0]
