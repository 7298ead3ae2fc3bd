// The Vector Unit (SFPU) of a Wormhole B0 Tensix core, lane by lane: the instructions the LLK's SFPU
// kernels issue (functional models from the ISA documentation, WormholeB0/TensixTile/TensixCoprocessor/
// SFP*.md) and, built from them, the algorithms of the ttnn 0.81.1 LLK (ckernel_sfpu_exp.h, _recip.h,
// _log.h, _binop_with_unary.h, _binary.h, _binary_max_min.h). Every value is an fp32 LReg lane; DST
// values enter through sfpload and leave through sfpstore. The tile-level entry points (ttrt_sfpu_*) are
// in sfpu.cpp; the semantics are listed in ../README.md ("What is modelled", SFPU).
#pragma once

#include <cstdint>
#include <cstring>

namespace ttrt::sfpu {

// Bits of the flags the compute API headers pass with an SFPU init or op (see include/ttrt/abi.h).
enum Flag : int {
    F_FP32 = 1,          // the call's is_fp32_dest_acc_en template argument
    F_NEAREST_EVEN = 2,  // DstRoundingMode::NearestEven (binary add/sub)
    F_APPROX = 4,        // approximation mode (exp's `approx`, recip's resolved mode)
    F_SCALE_EN = 8,      // exp_tile's scale_en
    F_FAST_APPROX = 16,  // log_tile's fast_and_approx
    F_CLAMP_NEG = 32,    // exp's InputClamping::ClampToNegative
};
// The call's ITERATIONS in bits 8-11 (0 = 8, whole faces): ttrt_sfpu_iterations_flag in ttrt/sfpu_flags.h.
constexpr int TTRT_SFPU_ITERATIONS_SHIFT_ = 8;

inline uint32_t u32(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t exp_field(uint32_t u) { return (u >> 23) & 0xff; }

// ------------------------------------------------------------------ instructions (SFP*.md)

// SFPMAD / SFPMUL / SFPADD / SFPMULI: a * b + c. Denormal inputs count as zero; the product is kept
// exact and the sum rounded once to nearest even (the page: "partially fused", one rounding); a
// denormal or -0 result is flushed to +0.
inline float mad(float a, float b, float c) {
    auto daz = [](float x) { return exp_field(u32(x)) == 0 ? 0.f : x; };
    const float r = float(double(daz(a)) * double(daz(b)) + double(daz(c)));
    return exp_field(u32(r)) == 0 ? 0.f : r;
}

// SFPSTOCHRND, FP32 -> bounded sign-magnitude integer, non-stochastic: round to nearest, ties away
// from zero; |x| < 0.5 -> 0, |x| >= 2^16 or NaN -> max; unsigned modes take the absolute value.
inline uint32_t to_int(float x, uint32_t max_mag, bool keep_sign) {
    const uint32_t c = u32(x);
    uint32_t sign = keep_sign ? (c & 0x80000000u) : 0;
    const int32_t e = int32_t(exp_field(c)) - 127;
    uint64_t mag;
    if (e < -1) {
        mag = 0, sign = 0;
    } else if (e >= 16) {
        mag = max_mag;
    } else {
        mag = 0x800000u | (c & 0x7fffffu);
        mag = e >= 0 ? mag << e : mag >> -e;
        mag = (mag >> 23) + ((mag & 0x7fffffu) >= 0x400000u);
        if (mag > max_mag) mag = max_mag;
        if (mag == 0) sign = 0;
    }
    return sign + uint32_t(mag);
}

// SFPSTOCHRND FP32 -> FP16B (bf16 held in fp32), non-stochastic: zero/denormal -> +0, ±inf/NaN ->
// ±inf, otherwise round to nearest with ties away from zero.
inline float to_bf16(float v) {
    uint32_t x = u32(v);
    const uint32_t e = exp_field(x);
    if (e == 0) return 0.f;
    if (e == 255) return f32(x & 0xff800000u);
    const uint32_t low = x & 0xffffu;
    x -= low;
    if ((low << 7) >= 0x400000u) x += 0x10000u;
    return f32(x);
}

// float32_to_bf16_rne of ckernel_sfpu_conversions.h: integer round to nearest even on the bit pattern.
inline float bf16_rne_int(float v) {
    const uint32_t x = u32(v);
    return f32((x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u);
}

// SFPCAST, sign-magnitude int32 -> FP32, round to nearest even.
inline float cast(uint32_t c) {
    const uint32_t sign = c & 0x80000000u, mag = c & 0x7fffffffu;
    const uint32_t lz = mag ? uint32_t(__builtin_clz(mag)) : 157u;
    const uint32_t norm = mag << (lz & 31);
    uint32_t d = sign + ((157u - lz) << 23) + (norm >> 8);
    if ((norm & 0x80u) && (norm & 0x17fu)) d += 1;
    return f32(d);
}

// SFPSWAP's ordering: sign-magnitude integers, i.e. -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.
inline bool signmag_less(uint32_t c, uint32_t d) {
    c ^= uint32_t(int32_t(c) >> 30) >> 1;
    d ^= uint32_t(int32_t(d) >> 30) >> 1;
    return int32_t(c) < int32_t(d);
}
inline float swap_max(float a, float b) { return signmag_less(u32(a), u32(b)) ? b : a; }
inline float swap_min(float a, float b) { return signmag_less(u32(b), u32(a)) ? b : a; }

// SFPSETEXP with the exponent taken from an integer's low 8 bits.
inline float setexp(float v, uint32_t e) { return f32((u32(v) & 0x807fffffu) | ((e & 0xff) << 23)); }
// SFPSETSGN: magnitude of v, sign of s.
inline float copysgn(float v, float s) { return f32((u32(v) & 0x7fffffffu) | (u32(s) & 0x80000000u)); }

// SFPLOAD of a DST datum: exact from an fp32 DST, bf16 << 16 from a 16-bit one.
inline float load(float dst, bool fp32_dst) { return fp32_dst ? dst : f32(u32(dst) & 0xffff0000u); }
// SFPSTORE to DST: exact into an fp32 DST; into a 16-bit one denormals flush to signed zero and the
// mantissa is truncated toward zero.
inline float store(float v, bool fp32_dst) {
    if (fp32_dst) return v;
    uint32_t x = u32(v);
    if (exp_field(x) == 0) x &= 0x80000000u;
    return f32(x & 0xffff0000u);
}

// ------------------------------------------------------------------ LLK algorithms (one lane)

// Programmable constants vConstFloatPrgm0..2 (LReg[12..14]) as the op's init left them.
struct Consts {
    float c[3] = {0.f, 0.f, 0.f};
};

float exp_fp32_accurate(float a);
float exp_21f(float x, bool scale_en, uint16_t scale, bool clamp_negative, bool fp32_template, const Consts& k);
float exp_approx(float x, const Consts& k);  // after the sanitize step (see exp_approx_sanitize)
float exp_approx_sanitize(float x, const Consts& k);
float reciprocal(float in, int max_iter, bool round_to_bf16, const Consts& k);
float log(float a, bool fast_approx, bool fp32_template, const Consts& k);

}  // namespace ttrt::sfpu
