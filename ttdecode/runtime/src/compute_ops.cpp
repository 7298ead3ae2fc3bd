// FPU (matmul, element-wise, broadcast, reduce, copy) tile operations of the compute model (the SFPU ones are
// in sfpu.cpp); semantics in compute.cpp's header comment and ../README.md.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute_state.hpp"

namespace ttrt {

// ------------------------------------------------------------------ FPU operations

// Tile `idx` of `cb` as the FPU sees it in srcA (srca) or srcB: unpacked, its format checked against
// the unpacker's, then cut to the source register precision of that same format (TF32 / bf16 for
// Float32 data). The format comes with the values, never from a variable set elsewhere. Returns
// whether the register holds TF32 (a Float32 CB with fp32_dest_acc_en), i.e. the SrcAStyle it implies.
static bool load_operand(Kernel& k, ComputeState& s, uint32_t cb, uint32_t idx, bool srca, const char* api,
                         float* out) {
    if (cb < 32 && ((s.unpack_to_dest >> cb) & 1u)) {
        // tt-metal gives a Float32 CB in UnpackToDestFp32 mode the unpack format Float32, which no FPU
        // operand path takes: the LLK's is_unpacker_format_conversion_supported_dest(Float32, Float32,
        // unpack_to_dest=false) is false (and SrcA/SrcB hold 19-bit data). Refused, not guessed.
        fail(std::string(api) + ": CB " + std::to_string(cb) + " is in UnpackToDestFp32 mode (unpack_to_dest_mode " +
             "of the compute kernel), so it unpacks as Float32 straight to DST; an FPU op cannot read it through " +
             (srca ? "srcA" : "srcB") + " (the LLK does not support that conversion). Give the FPU op a Default-mode CB, "
             "or read this one with copy_tile / unary_bcast");
    }
    const Unpacked u = unpack(k, s, cb, idx, api);
    check_src_format(s, srca, cb, u.format, api);
    to_src(u.values, out, u.format, k.fp32_acc);
    return u.format == 0 && k.fp32_acc;
}

// Fidelity slices of a source tile: out[0] = phase-0 bits, out[1] = the bits of the later phase
// (SrcA: phase bit 0; SrcB: phase bit 1). Products of slices are exact in fp32.
static void slices(const float* in, bool srca, float (*out)[kTileValues]) {
    for (uint32_t i = 0; i < kTileValues; ++i) {
        out[0][i] = srca ? fid_a(in[i], 0) : fid_b(in[i], 0);
        out[1][i] = srca ? fid_a(in[i], 1) : fid_b(in[i], 2);
    }
}

// One fidelity phase of a 32x32 tile product into DST, as the LLK issues MVMULs: for each output
// element, each 16-deep half of the inner dimension is one MVMUL, summed in fp32 from 0 in k order
// (MVMUL.md's model), then added to DST and written back with DST's rounding. b is k-major (B[k][j]).
//
// A zero a-value contributes nothing: its 32 products are signed zeros, and adding a signed zero to a
// running sum that starts at +0 (which can never become -0: x + (-x) is +0 in round-to-nearest) leaves
// it unchanged, so it is skipped when b's row kk is finite (0 x inf or 0 x NaN would be NaN).
// `b_row_finite[kk]` says so; the skip only saves host time (rows past a group, zero slices).
// Compiled for AVX-512, AVX2 and baseline x86-64 (chosen when the runner loads): the same adds and
// multiplies in the same order (no contraction into FMAs: -ffp-contract=off), only wider.
__attribute__((target_clones("avx512f", "avx2", "default")))
static void mvmul_phase(const float* __restrict a, const float* __restrict b, const bool* b_row_finite,
                        float* __restrict c, bool fp32) {
    for (int i = 0; i < 32; ++i) {
        for (int h = 0; h < 2; ++h) {
            float row[32];
            for (int j = 0; j < 32; ++j) row[j] = 0.f;
            for (int kk = h * 16; kk < h * 16 + 16; ++kk) {
                const float av = a[i * 32 + kk];
                if (av == 0.f && b_row_finite[kk]) continue;
                const float* br = b + kk * 32;
                for (int j = 0; j < 32; ++j) row[j] += av * br[j];
            }
            float* cr = c + i * 32;
            if (fp32)
                for (int j = 0; j < 32; ++j) cr[j] += row[j];
            else
                for (int j = 0; j < 32; ++j) cr[j] = dst_round(cr[j] + row[j], false);
        }
    }
}

static void transpose(const float* in, float* out) {
    for (int r = 0; r < 32; ++r)
        for (int c = 0; c < 32; ++c) out[c * 32 + r] = in[r * 32 + c];
}

extern "C" void ttrt_matmul(uint32_t in0, uint32_t in1, uint32_t i0, uint32_t i1, uint32_t idst, uint32_t ct,
                            uint32_t rt, uint32_t kt, const char* api) {
    note(api, "in0=%llu, in1=%llu, tiles %llu, %llu, dst %llu", in0, in1, i0, i1, idst);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    if (s.fpu != FPU_MATMUL) check_fpu(s, FPU_MATMUL, 0, -1, api, "matmul_init");
    const bool transpose_b = s.fpu_a != 0;
    const int phases = fidelity_phases(k.fidelity);
    float a[kTileValues], b[kTileValues], tmp[kTileValues];
    float as[2][kTileValues], bs[2][kTileValues];
    bool finite[2][32];
    for (uint32_t r = 0; r < rt; ++r) {
        load_operand(k, s, in0, i0 + r * kt, false, api, a);  // in0 goes to srcB
        slices(a, false, as);
        for (uint32_t c = 0; c < ct; ++c) {
            const bool tf32 = load_operand(k, s, in1, i1 + c, true, api, tmp);  // in1 goes to srcA
            if (transpose_b) transpose(tmp, b);
            else std::memcpy(b, tmp, sizeof b);
            (void)tf32;  // mixed TF32/BF16 sources: each register is read as it holds (see ttrt_binary)
            slices(b, true, bs);
            for (int sl = 0; sl < 2; ++sl) {
                for (int kk = 0; kk < 32; ++kk) {
                    bool f = true;
                    for (int j = 0; j < 32; ++j) f = f && std::isfinite(bs[sl][kk * 32 + j]);
                    finite[sl][kk] = f;
                }
            }
            const uint32_t d = idst + r * ct + c;
            float* out = dst_tile(k, s, d, api);
            if (!s.defined[d]) std::fill(out, out + kTileValues, 0.f);
            for (int p = 0; p < phases; ++p)
                mvmul_phase(as[(p >> 1) & 1], bs[p & 1], finite[p & 1], out, k.fp32_acc);
            s.defined[d] = true;
        }
    }
    k.counters.op_tiles[OP_MATMUL] += uint64_t(rt) * ct;
    record(k, EV_COMPUTE, OP_MATMUL, rt * ct);
}

extern "C" void ttrt_binary(int op, int bcast, uint32_t icb0, uint32_t icb1, uint32_t i0, uint32_t i1, uint32_t idst,
                            const char* api) {
    note(api, "%llu, %llu, tiles %llu, %llu, dst %llu", icb0, icb1, i0, i1, idst);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_fpu(s, FPU_ELTWISE, op | (bcast << 8), -1, api,
              bcast ? "the matching *_bcast_*_init" : "the matching add_init / sub_init / mul_init");
    float a[kTileValues], b[kTileValues];
    const bool tf32 = load_operand(k, s, icb0, i0, true, api, a);
    load_operand(k, s, icb1, i1, false, api, b);
    (void)tf32;  // mixed TF32/BF16 sources: each register is read as it holds (ReadBF16 is undefined in the docs)
    float* out = dst_tile(k, s, idst, api);
    const bool was = s.defined[idst];
    const bool acc = s.fpu_b != 0;
    // ELWMUL runs the fidelity phases (llk_math_eltwise_binary.h); ELWADD/ELWSUB are LoFi only.
    const int phases = op == 0 ? fidelity_phases(k.fidelity) : 1;
    for (uint32_t r = 0; r < 32; ++r) {
        for (uint32_t c = 0; c < 32; ++c) {
            const uint32_t i = r * 32 + c;
            float bv = b[i];
            if (bcast == 1) bv = b[r * 32];       // COL: column 0
            else if (bcast == 2) bv = b[c];       // ROW: row 0
            else if (bcast == 3) bv = b[0];       // SCALAR
            const float prev = was ? out[i] : 0.f;
            if (op == 0) {  // ELWMUL always accumulates, one DST write per phase (ELWMUL.md)
                float v = prev;
                for (int p = 0; p < phases; ++p) v = dst_round(fid_a(a[i], p) * fid_b(bv, p) + v, k.fp32_acc);
                out[i] = v;
                continue;
            }
            float v;
            if (op == 2) v = (acc ? prev : 0.f) + (a[i] + bv);  // ELWADD
            else v = (acc ? prev : 0.f) + (a[i] - bv);          // ELWSUB
            out[i] = dst_round(v, k.fp32_acc);
        }
    }
    s.defined[idst] = true;
    const int opc = op == 0 ? OP_MUL : op == 2 ? OP_ADD : OP_SUB;
    const int counted = bcast ? opc + (OP_ADD_BCAST - OP_ADD) : opc;
    k.counters.op_tiles[counted] += 1;
    record(k, EV_COMPUTE, uint16_t(counted), 1);
}

extern "C" void ttrt_reduce(int pool, int dim, uint32_t icb, uint32_t icb_scaler, uint32_t itile, uint32_t itile_scaler,
                            uint32_t idst) {
    const char* api = "reduce_tile";
    note(api, "%llu, %llu, tiles %llu, %llu, dst %llu", icb, icb_scaler, itile, itile_scaler, idst);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_fpu(s, FPU_REDUCE, pool, dim, api, "reduce_init with the same PoolType and ReduceDim");
    if (dim != 0) fail("reduce_tile: only ReduceDim::REDUCE_ROW is modelled by the host runtime");
    if (pool == 3) fail("reduce_tile: PoolType::MIN has no hardware reduce (GMPOOL/GAPOOL only)");
    const bool is_max = pool == 2;
    float a[kTileValues], sc[kTileValues];
    // MAX: data in srcA, scaler in srcB; SUM/AVG swap the two (the scaler feeds srcA of a matmul).
    load_operand(k, s, icb, itile, is_max, api, a);
    load_operand(k, s, icb_scaler, itile_scaler, !is_max, api, sc);
    float* out = dst_tile(k, s, idst, api);
    const bool was = s.defined[idst];
    if (!was) std::fill(out, out + kTileValues, 0.f);
    for (uint32_t r = 0; r < 32; ++r) {
        float v;
        if (is_max) {
            v = was ? out[r * 32] : -INFINITY;
            for (uint32_t c = 0; c < 32; ++c) {
                const float w = sc[c];
                if (w == 0.f) continue;  // an exponent of 0 scales to -inf: the column drops out
                const float scale = std::ldexp(1.f, std::ilogb(w));
                v = std::max(v, a[r * 32 + c] * scale);
            }
        } else {
            // GAPOOL runs the fidelity phases (llk_math_reduce.h); the data sits in srcB, the scaler in
            // srcA; each phase adds each 16-column half, summed in fp32 from 0, to DST with its rounding.
            v = was ? out[r * 32] : 0.f;
            for (int p = 0; p < fidelity_phases(k.fidelity); ++p)
                for (uint32_t h = 0; h < 2; ++h) {
                    float acc = 0.f;
                    for (uint32_t c = h * 16; c < h * 16 + 16; ++c) acc += fid_b(a[r * 32 + c], p) * fid_a(sc[c], p);
                    v = dst_round(v + acc, k.fp32_acc);
                }
        }
        out[r * 32] = is_max ? dst_round(v, k.fp32_acc) : v;
    }
    s.defined[idst] = true;
    const int opc = is_max ? OP_REDUCE_MAX : OP_REDUCE_SUM;
    k.counters.op_tiles[opc] += 1;
    record(k, EV_COMPUTE, uint16_t(opc), 1);
}

// The copy path of one CB: straight to DST (exact) or through srcA (to_src) on the way to DST.
static void check_copy_path(ComputeState& s, uint32_t cb, bool to_dest, const char* api, const char* init) {
    if (s.fpu_b == (to_dest ? 1 : 0)) return;
    fail(std::string(api) + ": CB " + std::to_string(cb) + (to_dest ? " unpacks straight to DST (UnpackToDestFp32)"
                                                                     : " unpacks through a source register") +
         ", but the last " + init + " was for a CB that " + (to_dest ? "goes through a source register" :
         "unpacks to DST") + " (call " + init + " for this CB)");
}

extern "C" void ttrt_copy_tile(uint32_t cb, uint32_t itile, uint32_t idst) {
    const char* api = "copy_tile";
    note(api, "cb=%llu, tile %llu, dst %llu", cb, itile, idst);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_fpu(s, FPU_COPY, s.fpu == FPU_COPY ? s.fpu_a : 0, -1, api, "copy_init");
    const Unpacked u = unpack(k, s, cb, itile, api);
    check_src_format(s, true, cb, u.format, api);
    const bool to_dest = unpacks_to_dest(s, cb, u.format);
    check_copy_path(s, cb, to_dest, api, "copy_init");
    if (to_dest && s.fpu_a) fail("copy_tile: a transposing copy_init of an UnpackToDestFp32 CB is not modelled");
    float tmp[kTileValues];
    // UnpackToDestFp32: the unpacker writes the Float32 tile into the fp32 DST as is. Otherwise the
    // tile passes through srcA in the unpacker's format (TF32 / bf16 for Float32 data, denormals
    // flushed) and MOVA2D widens it into DST.
    if (to_dest) std::memcpy(tmp, u.values, sizeof tmp);
    else to_src(u.values, tmp, u.format, k.fp32_acc);
    float* out = dst_tile(k, s, idst, api);
    if (s.fpu_a) transpose(tmp, out);
    else std::memcpy(out, tmp, sizeof tmp);
    for (uint32_t i = 0; i < kTileValues; ++i) out[i] = dst_round(out[i], k.fp32_acc);
    s.defined[idst] = true;
    k.counters.op_tiles[OP_COPY] += 1;
    record(k, EV_COMPUTE, OP_COPY, 1);
}

// unary_bcast<COL|ROW|SCALAR> (bcast 1|2|3): a 32-bit CB in UnpackToDestFp32 mode is unpacked to DST
// and broadcast there by MOVD2B/MOVB2D in two 16-bit halves (exact); any other CB goes through srcB
// (unpacker B, so srcB's format must be configured for it) and MOVB2D broadcasts it.
extern "C" void ttrt_unary_bcast(int bcast, uint32_t cb, uint32_t itile, uint32_t idst) {
    const char* api = "unary_bcast";
    note(api, "cb=%llu, tile %llu, dst %llu", cb, itile, idst);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_fpu(s, FPU_UNARY_BCAST, bcast, -1, api, "unary_bcast_init with the same BroadcastType");
    const Unpacked u = unpack(k, s, cb, itile, api);
    const bool to_dest = unpacks_to_dest(s, cb, u.format);
    check_src_format(s, !to_dest, cb, u.format, api);
    check_copy_path(s, cb, to_dest, api, "unary_bcast_init");
    float v[kTileValues];
    if (to_dest) std::memcpy(v, u.values, sizeof v);
    else to_src(u.values, v, u.format, k.fp32_acc);
    float* out = dst_tile(k, s, idst, api);
    for (uint32_t r = 0; r < 32; ++r)
        for (uint32_t c = 0; c < 32; ++c) {
            const float x = bcast == 1 ? v[r * 32] : bcast == 2 ? v[c] : v[0];
            out[r * 32 + c] = dst_round(x, k.fp32_acc);
        }
    s.defined[idst] = true;
    k.counters.op_tiles[OP_COPY] += 1;
    record(k, EV_COMPUTE, OP_COPY, 1);
}

}  // namespace ttrt
