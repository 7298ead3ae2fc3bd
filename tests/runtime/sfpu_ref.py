"""A plain numpy model of the Wormhole B0 SFPU, written for the tests from the ISA documentation
(WormholeB0/TensixTile/TensixCoprocessor/SFP*.md functional models) and the ttnn 0.81.1 LLK sources
(ckernel_sfpu_exp.h, ckernel_sfpu_recip.h, ckernel_sfpu_log.h, ckernel_sfpu_binop_with_unary.h,
ckernel_sfpu_binary.h, ckernel_sfpu_binary_max_min.h). Independent of the runtime's C++: every
function works on float32 numpy arrays of any shape, one lane per element.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
INF = np.float32(np.inf)


def bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, F32)).view(np.uint32)  # at least 1-d


def flt(u) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(u, np.uint64).astype(np.uint32)).view(F32)


def expo(u) -> np.ndarray:
    return (np.asarray(u, np.uint64) >> 23) & 0xFF


def _daz(x) -> np.ndarray:
    x = np.asarray(x, F32)
    return np.where(expo(bits(x)) == 0, F32(0), x)


def mad(a, b, c) -> np.ndarray:
    """SFPMAD.md: denormal inputs are zero, one rounding of a*b+c, denormal or -0 results become +0."""
    a, b, c = np.broadcast_arrays(_daz(a), _daz(b), _daz(c))
    with np.errstate(all="ignore"):
        r = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)
    return np.where(expo(bits(r)) == 0, F32(0), r)


def to_int(x, max_mag: int, keep_sign: bool) -> np.ndarray:
    """SFPSTOCHRND_FloatInt.md, non-stochastic (ties away from zero): sign-magnitude uint32."""
    c = bits(x).astype(np.uint64)
    e = expo(c).astype(np.int64) - 127
    man = 0x800000 | (c & 0x7FFFFF)
    sh = np.where(e >= 0, man << np.clip(e, 0, 40).astype(np.uint64), man >> np.clip(-e, 0, 63).astype(np.uint64))
    mag = (sh >> 23) + ((sh & 0x7FFFFF) >= 0x400000)
    mag = np.minimum(mag, max_mag)
    mag = np.where(e < -1, 0, np.where(e >= 16, max_mag, mag)).astype(np.uint64)
    sign = (c & 0x80000000) if keep_sign else np.zeros_like(c)
    sign = np.where(mag == 0, 0, sign)
    return (sign + mag).astype(np.uint32)


def to_bf16_away(x) -> np.ndarray:
    """SFPSTOCHRND_FloatFloat.md FP32 -> FP16B: 0/denormal -> +0, inf/NaN -> signed inf, ties away."""
    u = bits(x).astype(np.uint64)
    e = expo(u)
    low = u & 0xFFFF
    r = (u - low) + np.where(low >= 0x8000, 0x10000, 0)
    r = np.where(e == 0, 0, np.where(e == 255, u & 0xFF800000, r))
    return flt(r)


def bf16_rne_int(x) -> np.ndarray:
    """float32_to_bf16_rne (ckernel_sfpu_conversions.h): (bits + 0x7fff + lsb) & 0xffff0000, mod 2^32."""
    u = bits(x).astype(np.uint64)
    return flt(((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF)


def cast_sm(c) -> np.ndarray:
    """SFPCAST.md: sign-magnitude int32 -> fp32, round to nearest even."""
    c = np.asarray(c, np.uint64)
    mag = (c & 0x7FFFFFFF).astype(np.float64).astype(F32)
    return np.where(c & 0x80000000, -mag, mag).astype(F32)


def _key(x) -> np.ndarray:
    u = bits(x).astype(np.int64)
    mag = u & 0x7FFFFFFF
    return np.where(u & 0x80000000, -1 - mag, mag)


def smax(a, b) -> np.ndarray:
    """SFPSWAP.md VEC_MIN_MAX: the larger in sign-magnitude order (-NaN < -inf < -0 < +0 < +inf < +NaN)."""
    a, b = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32))
    return np.where(_key(b) > _key(a), b, a)


def smin(a, b) -> np.ndarray:
    a, b = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32))
    return np.where(_key(b) < _key(a), b, a)


def load(dst, fp32_dst: bool) -> np.ndarray:
    """SFPLOAD.md: exact from FP32 DST; BF16 << 16 from a 16-bit DST."""
    return np.asarray(dst, F32) if fp32_dst else flt(bits(dst).astype(np.uint64) & 0xFFFF0000)


def store(v, fp32_dst: bool) -> np.ndarray:
    """SFPSTORE.md: exact into FP32 DST; into 16-bit DST denormals -> signed zero, then truncate."""
    if fp32_dst:
        return np.asarray(v, F32)
    u = bits(v).astype(np.uint64)
    u = np.where(expo(u) == 0, u & 0x80000000, u)
    return flt(u & 0xFFFF0000)


def setexp_int(v, e) -> np.ndarray:
    return flt((bits(v).astype(np.uint64) & 0x807FFFFF) | ((np.asarray(e, np.int64) & 0xFF).astype(np.uint64) << 23))


# ---------------------------------------------------------------- LLK algorithms


def exp_fp32_accurate(a) -> np.ndarray:
    """_sfpu_exp_fp32_accurate_ (exp on an fp32 DST, accurate mode)."""
    a = np.asarray(a, F32)
    j = mad(a, F32(1.442695), 0)
    sm = to_int(j, 32767, True)
    j = cast_sm(sm)
    f = mad(j, F32(-6.93145752e-1), a)
    f = mad(j, F32(-1.42860677e-6), f)
    r = np.full_like(a, F32(1.37805939e-3))
    for coef in (8.37312452e-3, 4.16695364e-2, 1.66664720e-1, 4.99999851e-1):
        r = mad(r, f, F32(coef))
    i = np.where(sm & 0x80000000, -(sm & 0x7FFFFFFF).astype(np.int64), sm.astype(np.int64))
    y = mad(r, f, 1)
    r = mad(y, f, 1)
    under = mad(flt(bits(y).astype(np.uint64) - 1), 0, 0)
    e = expo(bits(r)).astype(np.int64) + i
    over = mad(under, 1, INF)
    return np.where(e >= 1, np.where(e < 255, setexp_int(r, e), over), under)


def exp_21f(x, *, clamp_negative: bool = True, fp32_template: bool = False, scale_bf16: int | None = None):
    """_sfpu_exp_21f_bf16_tti_ (exp on a 16-bit DST, accurate mode)."""
    v = np.asarray(x, F32)
    if scale_bf16 is not None:
        v = mad(flt(scale_bf16 << 16), v, 0)
    v = mad(v, F32(1.4426950216293334961), F32(127))
    if clamp_negative:
        v = smax(v, F32(0))
    v = smin(v, F32(255))
    e = expo(bits(v)).astype(np.int64) - 127
    m = 0x800000 | (bits(v).astype(np.uint64) & 0x7FFFFF)
    m = np.where(e >= 0, m << (e & 31).astype(np.uint64), m >> ((-e) & 31).astype(np.uint64)) & 0xFFFFFFFF
    frac = (m & 0x7FFFFF).astype(F32)  # < 2^23: exact
    p = mad(frac, F32(4.791750143340323e-15), flt(0x33A85ADA))
    p = mad(p, frac, F32(1.001953125))  # SFPLOADI FLOATA 0x3c02
    y = flt((bits(p).astype(np.uint64) & 0x807FFFFF) | (m & 0x7F800000))
    return y if fp32_template else to_bf16_away(y)


def exp_approx(x, fp32_dst: bool, scale: float = 1.0) -> np.ndarray:
    """Approximate exp with ClampToNegative: sanitize max(x, -88.5/scale) back into DST, then
    Schraudolph: uint16(A*x + (B-C)) << 15. Returns what ends in DST (before the final store)."""
    a_coef = F32(F32(256.0) * F32(1.4426950408889634)) * F32(scale)
    thr = F32(-88.5) / F32(scale)
    s = load(store(smax(load(x, fp32_dst), thr), fp32_dst), fp32_dst)
    t = mad(a_coef, s, F32(32500.818359375))
    return flt(to_int(t, 65535, False).astype(np.uint64) << 15)


RECIP_SEED = (0.3232325017452239990234375, 1.4545459747314453125, 2.121212482452392578125)
RECIP_SEED_BF16 = (0.32133400440216064453125, 1.4514148235321044921875, 2.1200883388519287109375)


def reciprocal(x, max_iter: int, round_to_bf16: bool, seed) -> np.ndarray:
    """sfpu_reciprocal_iter."""
    x = np.asarray(x, F32)
    k0, k1, k2 = (F32(s) for s in seed)
    u = bits(x).astype(np.uint64)
    nx = flt(0xBF800000 | (u & 0x7FFFFF))
    y = mad(k0, nx, k1)
    y = mad(y, nx, k2)
    scale = flt((~u & 0xFFFFFFFF) & 0xFF800000)
    t = mad(nx, y, 1)
    scale = mad(scale, F32(0.5), 0)
    y = mad(y, t, y)
    if max_iter > 1:
        t = mad(nx, y, 1)
        y = mad(y, t, y)
    if round_to_bf16:
        y = to_bf16_away(y)
    y = mad(y, scale, 0)
    return flt((bits(y).astype(np.uint64) & 0x7FFFFFFF) | (u & 0x80000000))


def log(a, fp32_template: bool, fast_approx: bool = False) -> np.ndarray:
    """calculate_log_body of the metal LLK (log_tile), before the bf16 conversion of calculate_log."""
    a = np.asarray(a, F32)
    p0 = F32(F32(0.693147182) * F32(1.19209290e-7))
    p1 = F32(float.fromhex("-0x1.00001ap-2") if fp32_template else float.fromhex("0x1.744p-2"))
    p2 = F32(float.fromhex("0x1.555572p-2") if fp32_template else float.fromhex("-0x1.008p-1"))
    if not fast_approx:
        a = mad(a, 1, 0)
    au = bits(a).astype(np.int64)
    e = (au - int(bits(F32(0.75))[0])) & 0xFFFFFFFF
    e = e & 0xFF800000
    e_signed = np.where(e >= 2**31, e - 2**32, e)
    m = flt((au - e) & 0xFFFFFFFF)
    m = mad(m, 1, -1)
    s = mad(m, m, 0)
    if fp32_template:
        r = np.full_like(a, F32(float.fromhex("-0x1.92cp-5")))
        for coef in ("0x1.b84p-4", "-0x1.0c4p-3", "0x1.274p-3", "-0x1.55p-3", "0x1.998p-3"):
            r = mad(r, m, F32(float.fromhex(coef)))
        r = mad(r, m, p1)
        r = mad(r, m, p2)
        r = mad(r, m, F32(-0.5))
    else:
        r = mad(F32(-0.25), m, p1)
        r = mad(r, m, p2)
    ef = np.abs(e_signed).astype(np.float64).astype(F32)
    ea = expo(bits(a))
    a2 = np.where(ea == 255, a, flt((bits(a).astype(np.uint64) & 0x807FFFFF) | (((ea + 255) & 0xFF) << 23)))
    r = mad(r, s, m)
    ef = np.where(e_signed < 0, -ef, ef).astype(F32)
    result = mad(ef, p0, r)
    result = np.where(expo(bits(a2)) == 255, mad(result, a2, 0), result)
    return np.where(bits(a) & 0x80000000, F32(np.nan), result).astype(F32)
