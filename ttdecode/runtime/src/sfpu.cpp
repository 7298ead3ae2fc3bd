// SFPU tile operations of the compute model (exp, reciprocal, log, scalar binops, binary max/add/sub/
// mul), computed lane by lane with the LLK's algorithms on the instruction models of sfpu.hpp.
#include "sfpu.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "compute_state.hpp"

namespace ttrt {
namespace sfpu {

// exp on an fp32 DST, accurate mode (_sfpu_exp_fp32_accurate_): j = round(a / ln2) as a 16-bit
// sign-magnitude integer, two-part Cody-Waite reduction, degree-6 polynomial, exponent insertion with
// the overflow / underflow / NaN handling of the LLK.
float exp_fp32_accurate(float a) {
    float j = mad(1.442695f, a, 0.f);
    const uint32_t sm = to_int(j, 32767, true);
    j = cast(sm);
    float f = mad(j, -6.93145752e-1f, a);
    f = mad(j, -1.42860677e-6f, f);
    float r = 1.37805939e-3f;
    r = mad(r, f, 8.37312452e-3f);
    r = mad(r, f, 4.16695364e-2f);
    r = mad(r, f, 1.66664720e-1f);
    r = mad(r, f, 4.99999851e-1f);
    const int32_t i = (sm & 0x80000000u) ? -int32_t(sm & 0x7fffffffu) : int32_t(sm);
    float y = mad(r, f, 1.f);
    r = mad(y, f, 1.f);
    // Underflow result: (y's bits - 1) * 0, which is NaN only when y was NaN.
    y = mad(f32(u32(y) - 1u), 0.f, 0.f);
    const int32_t e = int32_t(exp_field(u32(r))) + i;
    if (e >= 1) {
        y = mad(y, 1.f, std::numeric_limits<float>::infinity());
        if (e < 255) y = setexp(r, uint32_t(e));
    }
    return y;
}

// exp on a 16-bit DST, accurate mode (_sfpu_exp_21f_bf16_tti_, Moroz et al. exp_21f): z = x/ln2 + 127
// clamped to [0, 255] (the lower clamp only with ClampToNegative), z * 2^23 as an integer gives the
// exponent and a 23-bit fraction, a quadratic in the fraction gives the mantissa; the result is
// rounded to bf16 unless the op's template says fp32. Constants: LReg[12] = 1/ln2, LReg[13] = c2 from
// the init; 127 and 255 as bf16 immediates, c1 exact, c0 = fp16 0x3c02 (SFPLOADI FLOATA).
float exp_21f(float x, bool scale_en, uint16_t scale, bool clamp_negative, bool fp32_template, const Consts& k) {
    float v = x;
    if (scale_en) v = mad(f32(uint32_t(scale) << 16), v, 0.f);  // SFPMULI
    v = mad(v, k.c[0], 127.f);
    if (clamp_negative) v = swap_max(v, 0.f);
    v = swap_min(v, 255.f);
    const int32_t e = int32_t(exp_field(u32(v))) - 127;                    // SFPEXEXP
    uint32_t m = 0x800000u | (u32(v) & 0x7fffffu);                         // SFPEXMAN
    m = e >= 0 ? m << (uint32_t(e) & 31) : m >> (uint32_t(-e) & 31);      // SFPSHFT
    const float frac = cast(m & 0x7fffffu);                                // SFPEXMAN PAD9, SFPCAST
    float p = mad(frac, k.c[1], f32(0x33a85adau));                         // c1 = 7.839635e-8
    p = mad(p, frac, f32(0x3f804000u));                                    // c0 = fp16 0x3c02
    float y = f32((u32(p) & 0x807fffffu) | (m & 0x7f800000u));             // SFPSETEXP
    if (!fp32_template) y = to_bf16(y);
    return y;
}

// Approximate exp, first pass (ClampToNegative): max(x, LReg[14]) in SFPSWAP's order, stored back to DST.
float exp_approx_sanitize(float x, const Consts& k) { return swap_max(x, k.c[2]); }

// Approximate exp, second pass (Schraudolph): i = A*x + (B - C) rounded to an unsigned 16-bit integer
// (absolute value, saturating), shifted left 15 places into an fp32 bit pattern.
float exp_approx(float x, const Consts& k) {
    const float t = mad(k.c[0], x, k.c[1]);
    return f32(to_int(t, 65535, false) << 15);
}

// sfpu_reciprocal_iter: x = -(mantissa of `in` in [1, 2)), quadratic seed k2 - k1 x + k0 x^2 (the
// init's constants), Newton steps t = 1 - x y, y += y t (one for max_iter 0 or 1, two for 2),
// optional bf16 rounding, scaling by 2^(254 - exp(in)) built from ~in, sign of `in`.
float reciprocal(float in, int max_iter, bool round_to_bf16, const Consts& k) {
    const float nx = f32(0xbf800000u | (u32(in) & 0x7fffffu));
    float y = mad(k.c[0], nx, k.c[1]);
    const uint32_t scale_bits = ~u32(in);
    y = mad(y, nx, k.c[2]);
    float scale = f32(scale_bits & 0xff800000u);  // SFPSETMAN 0
    float t = mad(nx, y, 1.f);
    scale = mad(scale, 0.5f, 0.f);
    y = mad(y, t, y);
    if (max_iter > 1) {
        t = mad(nx, y, 1.f);
        y = mad(y, t, y);
    }
    if (round_to_bf16) y = to_bf16(y);
    y = mad(y, scale, 0.f);
    return copysgn(y, in);
}

// calculate_log_body (ttnn's Wormhole log): a = m * 2^k with m in [0.75, 1.5) by integer arithmetic,
// log1p(f = m - 1) = f + f^2 r(f) (r of degree 8 with an fp32 template, 2 otherwise), + k ln2; 0 -> -inf,
// +inf -> +inf, negative -> NaN. Constants LReg[12..14] from log_init.
float log(float a, bool fast_approx, bool fp32_template, const Consts& k) {
    if (!fast_approx) a = mad(a, 1.f, 0.f);
    int32_t e = int32_t(u32(a) - u32(0.75f));
    e = int32_t(uint32_t(e) & 0xff800000u);
    float m = f32(u32(a) - uint32_t(e));
    float result = std::numeric_limits<float>::quiet_NaN();
    m = mad(m, 1.f, -1.f);
    if (!(u32(a) & 0x80000000u)) {
        const float s = mad(m, m, 0.f);
        const uint32_t abs_e = e < 0 ? uint32_t(-int64_t(e)) : uint32_t(e);
        float r;
        if (fp32_template) {
            r = -0x1.92cp-5f;
            r = mad(r, m, 0x1.b84p-4f);
            r = mad(r, m, -0x1.0c4p-3f);
            r = mad(r, m, 0x1.274p-3f);
            r = mad(r, m, -0x1.55p-3f);
            r = mad(r, m, 0x1.998p-3f);
            r = mad(r, m, k.c[1]);
            r = mad(r, m, k.c[2]);
            r = mad(r, m, -0.5f);
        } else {
            r = mad(-0.25f, m, k.c[1]);
            r = mad(r, m, k.c[2]);
        }
        float ef = cast(abs_e);
        const uint32_t ea = exp_field(u32(a));
        if (ea != 255) a = f32((u32(a) & 0x807fffffu) | (((ea + 255u) & 0xffu) << 23));  // SFPDIVP2 add -1
        r = mad(r, s, m);
        ef = copysgn(ef, f32(uint32_t(e)));
        result = mad(ef, k.c[0], r);
        if (exp_field(u32(a)) == 255) result = mad(result, a, 0.f);
    }
    return result;
}

}  // namespace sfpu

using namespace sfpu;

static int sfpu_init_of(int op) { return op >= SF_ADD_S && op <= SF_RSUB_S ? SF_SCALAR_INIT : op; }

// The programmable constants each init leaves in LReg[12..14]; false when the init programs none.
static bool program_constants(Consts& k, int op, int flags, uint32_t param) {
    const bool approx = flags & F_APPROX, fp32 = flags & F_FP32;
    if (op == SF_EXP) {
        if (approx) {  // exp_init, APPROXIMATION_MODE && CLAMP_NEGATIVE
            const float scale = from_bits(param);
            k.c[0] = 256.0f * 1.4426950408889634f * scale;
            k.c[1] = 32500.818359375f;
            k.c[2] = -88.5f / scale;
        } else if (!fp32) {
            k.c[0] = 1.4426950216293334961f;
            k.c[1] = 4.791750143340323e-15f;
        } else {  // sfpu_reciprocal_init<false>()
            k.c[0] = 0.3232325017452239990234375f;
            k.c[1] = 1.4545459747314453125f;
            k.c[2] = 2.121212482452392578125f;
        }
    } else if (op == SF_RECIP) {
        if (!approx && !fp32) {  // round_to_bf16 seed
            k.c[0] = 0.32133400440216064453125f;
            k.c[1] = 1.4514148235321044921875f;
            k.c[2] = 2.1200883388519287109375f;
        } else {
            k.c[0] = 0.3232325017452239990234375f;
            k.c[1] = 1.4545459747314453125f;
            k.c[2] = 2.121212482452392578125f;
        }
    } else if (op == SF_LOG) {
        k.c[0] = 0.693147182f * 1.19209290e-7f;
        k.c[1] = fp32 ? -0x1.00001ap-2f : 0x1.744p-2f;
        k.c[2] = fp32 ? 0x1.555572p-2f : -0x1.008p-1f;
    } else {
        return false;
    }
    return true;
}

extern "C" void ttrt_sfpu_init(int op, int flags, uint32_t param, const char* api) {
    note(api);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    s.sfpu = op;
    s.sfpu_param = int(param);
    s.sfpu_flags = flags;
    s.sfpu_init = api;
    if (program_constants(s.sfpu_consts, op, flags, param)) s.consts_init = api;
    count_init(k);
}

// The SFPU state an init leaves. On Wormhole add/sub/mul_binary_tile_init (llk_math_eltwise_binary_sfpu_init
// <SfpuType::unused> with sfpu_binary_init<ADD|SUB|MUL>, which loads nothing: ckernel_sfpu_binary.h) and
// addcmul_tile_init (llk_math_eltwise_ternary_sfpu_init<SfpuType::addcmul>) run the same three steps:
// _init_sfpu_config_reg(), ADDR_MOD_7 with no increments, reset_counters (llk_math_eltwise_binary_sfpu.h,
// llk_math_eltwise_ternary_sfpu.h); no constant is programmed and the ops read none. So each of these inits
// serves all four ops. Every other init keeps its own state (binary_max_tile_init also sets ADDR_MOD_6, which
// the max's SFPSTORE uses; the unary inits program constants).
static int sfpu_state_of(int init) {
    return init == SF_ADD_B || init == SF_SUB_B || init == SF_MUL_B || init == SF_ADDCMUL ? SF_MUL_B : init;
}

// The accurate exp's init (exp_tile_init<false>: llk_math_eltwise_unary_sfpu_init<exponential> then
// sfpu::exp_init, ckernel_sfpu_exp.h) runs the binary family's three steps (_init_sfpu_config_reg,
// ADDR_MOD_7 without increments, reset_counters; exponential sets no ADDR_MOD_6,
// llk_math_eltwise_unary_sfpu.h) and then only programs LReg[12..14] (sfpu_reciprocal_init<false> with an
// fp32 DST, exp_21f's two constants with a 16-bit one), which the binary family's inits and ops neither
// write nor read. So that init serves the binary family's ops, and an accurate exp runs under the binary
// family's state as well as its own, as long as LReg[12..14] still hold its constants. The approximate
// exp's init also programs SFPLOADMACRO templates and the replay buffer: it keeps its own state.
static bool accurate_exp_init(const ComputeState& s) { return s.sfpu == SF_EXP && !(s.sfpu_flags & F_APPROX); }

static void check_sfpu(ComputeState& s, int op, int flags, const char* api) {
    if (op == SF_EXP && !(flags & F_APPROX)) {
        if (!accurate_exp_init(s) && sfpu_state_of(s.sfpu) != SF_MUL_B) {
            fail(std::string(api) + ": the SFPU is configured by " + s.sfpu_init + " (call this op's init first)");
        }
        Consts want;
        program_constants(want, SF_EXP, flags & F_FP32, 0);
        const Consts& have = s.sfpu_consts;
        // exp_21f (a 16-bit DST) programs and reads LReg[12..13] only; LReg[14] may hold anything
        const bool reads_c2 = flags & F_FP32;
        if (have.c[0] != want.c[0] || have.c[1] != want.c[1] || (reads_c2 && have.c[2] != want.c[2])) {
            fail(std::string(api) + ": LReg[12..14] hold the constants programmed by " + s.consts_init +
                 ", not this exp's (call exp_tile_init first)");
        }
        return;
    }
    if (sfpu_state_of(s.sfpu) == sfpu_state_of(sfpu_init_of(op))) return;
    if (sfpu_state_of(sfpu_init_of(op)) == SF_MUL_B && accurate_exp_init(s)) return;
    fail(std::string(api) + ": the SFPU is configured by " + s.sfpu_init + " (call this op's init first)");
}

// The values an SFPU call processes under the LLK's VectorMode and ITERATIONS. The LLK applies the
// function per face: RC faces 0-3, R faces 0 and 1 (rows 0-15), C faces 0 and 2 (columns 0-15), None
// face 0 (llk_math_eltwise_sfpu_common.h). Each application runs ITERATIONS vector steps from the
// face's first row: a step is one SFPLOAD / SFPSTORE of 32 lanes, the even or the odd columns of an
// aligned group of four Dst rows (tt-isa-documentation SFPLOAD.md: the address's top bits pick the
// four rows, the next bit the column parity), and the LLK advances 2 address units per step, so step
// i covers face rows 4 * (i / 2) .. + 3, columns of parity i % 2. 8 steps cover the whole face.
struct Lanes {
    uint32_t r1, c1;  // the faces' extent in the tile
    int iterations;   // steps per face (1..8)
    bool covers(uint32_t r, uint32_t c) const {
        return r < r1 && c < c1 && int(((r % 16) / 4) * 2 + (c & 1)) < iterations;
    }
    // Vector steps the call runs: faces x ITERATIONS (the compute event's flag; the cost model charges them).
    uint8_t steps() const { return uint8_t((r1 / 16) * (c1 / 16) * iterations); }
    // The DST half faces the call reads and writes (ComputeState::defined: bit 2f + h = rows 8h .. 8h + 7
    // of face f): steps 0-3 cover face rows 0-7, steps 4-7 rows 8-15.
    uint8_t faces() const {
        const uint8_t f = uint8_t(c1 == 32 ? (r1 == 32 ? 0xF : 0x3) : (r1 == 32 ? 0x5 : 0x1));
        uint8_t m = 0;
        for (int i = 0; i < 4; ++i)
            if ((f >> i) & 1) m |= uint8_t((iterations > 4 ? 3 : 1) << (2 * i));
        return m;
    }
};

static Lanes lanes_of(int vector_mode, int flags, const char* api) {
    Lanes l{32, 32, (flags >> TTRT_SFPU_ITERATIONS_SHIFT_) & 15};
    if (l.iterations == 0) l.iterations = 8;
    if (l.iterations > 8) {
        fail(std::string(api) + ": ITERATIONS " + std::to_string(l.iterations) +
             " runs past the face (8 vector steps cover a 16x16 face)");
    }
    if (vector_mode == 1) l.r1 = 16;
    else if (vector_mode == 2) l.c1 = 16;
    else if (vector_mode != 4) l.r1 = l.c1 = 16;
    return l;
}

// The faces the op covers must hold data (SFPU reads of cleared DST rows are undefined on the device).
static void check_defined(ComputeState& s, uint32_t d, const Lanes& lanes, const char* api) {
    check_faces(s, d, lanes.faces(), api);
}

// Applies `f` (value loaded from DST -> value to store) to the lanes of `t` that `vector_mode` covers.
template <class F>
static void for_lanes(float* t, const Lanes& lanes, bool fp32_dst, F f) {
    for (uint32_t r = 0; r < lanes.r1; ++r)
        for (uint32_t c = 0; c < lanes.c1; ++c) {
            if (!lanes.covers(r, c)) continue;
            float& x = t[r * 32 + c];
            x = store(f(load(x, fp32_dst)), fp32_dst);
        }
}

// A unary op on the lanes of DST tile `t` (the op's switch outside the lane loop).
static void unary_tile(int op, float* t, const Lanes& vector_mode, bool fp32_dst, uint32_t param, int flags, const Consts& kc) {
    const bool fp32 = flags & F_FP32, approx = flags & F_APPROX;
    const float p = from_bits(param);
    const uint16_t scale = uint16_t(param);
    switch (op) {
        case SF_EXP:
            if (approx) {
                // The approximate exp first rewrites DST with max(x, threshold), then reloads it.
                for_lanes(t, vector_mode, fp32_dst, [&](float x) { return exp_approx_sanitize(x, kc); });
                for_lanes(t, vector_mode, fp32_dst, [&](float x) { return exp_approx(x, kc); });
            } else if (!fp32) {
                const bool scale_en = flags & F_SCALE_EN, clamp = flags & F_CLAMP_NEG;
                for_lanes(t, vector_mode, fp32_dst,
                          [&](float x) { return exp_21f(x, scale_en, scale, clamp, false, kc); });
            } else if (flags & F_SCALE_EN) {
                const float s = f32(uint32_t(scale) << 16);
                for_lanes(t, vector_mode, fp32_dst, [&](float x) { return exp_fp32_accurate(mad(x, s, 0.f)); });
            } else {
                for_lanes(t, vector_mode, fp32_dst, [&](float x) { return exp_fp32_accurate(x); });
            }
            return;
        case SF_RECIP: {
            const int iters = approx ? 0 : fp32 ? 2 : 1;
            const bool round = !approx && !fp32;
            for_lanes(t, vector_mode, fp32_dst, [&](float x) { return reciprocal(x, iters, round, kc); });
            return;
        }
        case SF_LOG: {
            const bool fast = flags & F_FAST_APPROX;
            for_lanes(t, vector_mode, fp32_dst, [&](float x) {
                const float r = sfpu::log(x, fast, fp32, kc);
                return fp32 ? r : to_bf16(r);
            });
            return;
        }
        case SF_ADD_S: for_lanes(t, vector_mode, fp32_dst, [&](float x) { return mad(x, 1.f, p); }); return;
        case SF_SUB_S: for_lanes(t, vector_mode, fp32_dst, [&](float x) { return mad(p, -1.f, x); }); return;
        case SF_MUL_S:
        case SF_DIV_S:  // the LLK multiplies: param is the divisor's reciprocal
            for_lanes(t, vector_mode, fp32_dst, [&](float x) { return mad(x, p, 0.f); });
            return;
        case SF_RSUB_S:
            for_lanes(t, vector_mode, fp32_dst, [&](float x) {
                const float r = mad(x, -1.f, p);
                return fp32 ? r : bf16_rne_int(r);
            });
            return;
    }
    fail("sfpu unary op " + std::to_string(op) + " is not modelled");
}

extern "C" void ttrt_sfpu_unary(int op, uint32_t idst, int vector_mode, uint32_t param, int flags,
                                const char* api) {
    note(api, "dst %llu", idst);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_sfpu(s, op, flags, api);
    float* t = dst_tile(k, s, idst, api);
    Lanes lanes = lanes_of(vector_mode, flags, api);
    check_defined(s, idst, lanes, api);
    if (op == SF_EXP && (flags & F_APPROX) && (flags & F_CLAMP_NEG) && lanes.iterations < 8) {
        // The approximate exp with ClampToNegative (the SFPLOADMACRO path) is unrolled for 8 steps and
        // ignores ITERATIONS (ckernel_sfpu_exp.h, tt-llk#1486): it runs whole faces. The rows past the
        // asked steps are computed too; where they hold no data the chip reads whatever DST holds, so
        // they come out as garbage (NaN here), written.
        const uint8_t asked = lanes.faces();
        lanes.iterations = 8;
        garbage_rows(s, t, idst, uint8_t(lanes.faces() & ~asked & ~s.defined[idst]));
    }
    unary_tile(op, t, lanes, k.fp32_acc, param, flags, s.sfpu_consts);
    const int opc = op == SF_EXP ? OP_EXP : op == SF_RECIP ? OP_RECIP : op == SF_LOG ? OP_LOG : OP_SCALAR;
    k.counters.op_tiles[opc] += 1;
    record(k, EV_COMPUTE, uint16_t(opc), 1, lanes.steps());
}

// One lane of a binary op on two DST values (calculate_sfpu_binary, _binary_mul, _binary_max_min).
static float binary_lane(int op, float a, float b, int flags) {
    const bool fp32 = flags & F_FP32, nearest_even = flags & F_NEAREST_EVEN;
    switch (op) {
        case SF_MAX: return swap_max(b, a);
        case SF_ADD_B:
        case SF_SUB_B: {
            const float r = op == SF_ADD_B ? mad(a, 1.f, b) : mad(b, -1.f, a);
            return !fp32 && nearest_even ? bf16_rne_int(r) : r;
        }
        case SF_MUL_B: {
            const float r = mad(a, b, 0.f);
            if (fp32) return r;
            return u32(a) == 0 || u32(b) == 0 ? 0.f : bf16_rne_int(r);  // the LLK's `in == 0` (SFPSETCC EQ0)
        }
    }
    fail("sfpu binary op " + std::to_string(op) + " is not modelled");
}

extern "C" void ttrt_sfpu_binary(int op, uint32_t i0, uint32_t i1, uint32_t o, int vector_mode, int flags,
                                 const char* api) {
    note(api, "dst %llu, %llu -> %llu", i0, i1, o);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_sfpu(s, op, flags, api);
    float* a = dst_tile(k, s, i0, api);
    float* b = dst_tile(k, s, i1, api);
    float* out = dst_tile(k, s, o, api);
    const Lanes lanes = lanes_of(vector_mode, flags, api);
    check_defined(s, i0, lanes, api);
    check_defined(s, i1, lanes, api);
    // an SFPU result into a tile with no data: the rest of the tile is the cleared DST (zeros), as before
    const bool fresh = !s.defined[o];
    if (fresh) std::fill(out, out + kTileValues, 0.f);
    const bool fp32_dst = k.fp32_acc;
    for (uint32_t r = 0; r < lanes.r1; ++r)
        for (uint32_t c = 0; c < lanes.c1; ++c) {
            if (!lanes.covers(r, c)) continue;
            const uint32_t i = r * 32 + c;
            out[i] = store(binary_lane(op, load(a[i], fp32_dst), load(b[i], fp32_dst), flags), fp32_dst);
        }
    s.defined[o] = fresh ? kAllRows : uint8_t(s.defined[o] | lanes.faces());
    k.counters.op_tiles[OP_MAX] += 1;
    record(k, EV_COMPUTE, OP_MAX, 1, lanes.steps());
}

// addcmul_tile (ckernel_sfpu_addcmul.h, calculate_addcmul): out = in0 + (value * in1) * in2, per lane
// one SFPMUL (value * in1) then one SFPMAD (product * in2 + in0), each rounded once; with a 16-bit
// is_fp32_dest_acc_en the result is converted to bf16 by SFPSTOCHRND (nearest) before the store.
extern "C" void ttrt_sfpu_ternary(int op, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t o, int vector_mode,
                                  uint32_t param, int flags, const char* api) {
    note(api, "dst %llu, %llu, %llu -> %llu", i0, i1, i2, o);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_sfpu(s, op, flags, api);
    if (op != SF_ADDCMUL) fail("sfpu ternary op " + std::to_string(op) + " is not modelled");
    float* a = dst_tile(k, s, i0, api);
    float* b = dst_tile(k, s, i1, api);
    float* c = dst_tile(k, s, i2, api);
    float* out = dst_tile(k, s, o, api);
    const Lanes lanes = lanes_of(vector_mode, flags, api);
    check_defined(s, i0, lanes, api);
    check_defined(s, i1, lanes, api);
    check_defined(s, i2, lanes, api);
    // an SFPU result into a tile with no data: the rest of the tile is the cleared DST (zeros), as before
    const bool fresh = !s.defined[o];
    if (fresh) std::fill(out, out + kTileValues, 0.f);
    const bool fp32_dst = k.fp32_acc, fp32 = flags & F_FP32;
    const float value = from_bits(param);
    for (uint32_t r = 0; r < lanes.r1; ++r)
        for (uint32_t col = 0; col < lanes.c1; ++col) {
            if (!lanes.covers(r, col)) continue;
            const uint32_t i = r * 32 + col;
            const float prod = mad(value, load(b[i], fp32_dst), 0.f);
            const float res = mad(prod, load(c[i], fp32_dst), load(a[i], fp32_dst));
            out[i] = store(fp32 ? res : to_bf16(res), fp32_dst);
        }
    s.defined[o] = fresh ? kAllRows : uint8_t(s.defined[o] | lanes.faces());
    k.counters.op_tiles[OP_TERNARY] += 1;
    record(k, EV_COMPUTE, OP_TERNARY, 1, lanes.steps());
}

}  // namespace ttrt
