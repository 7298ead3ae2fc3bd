// FPU (matmul, element-wise, broadcast, reduce, copy) tile operations of the compute model (the SFPU ones are
// in sfpu.cpp); semantics in compute.cpp's header comment and ../README.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "compute_state.hpp"

namespace ttrt {

// ------------------------------------------------------------------ FPU operations

// Tile `idx` of `cb` as the FPU's source register srcA (srca) or srcB takes it: unpacked and its
// format checked against the unpacker's. The format comes with the values, never from a variable set
// elsewhere.
static Unpacked unpack_operand(Kernel& k, ComputeState& s, uint32_t cb, uint32_t idx, bool srca, const char* api) {
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
    check_unpack_geometry(s, srca, cb, u.rows, api);
    return u;
}

// The FPU ops other than matmul, copy and unary_bcast are modelled on 32x32 tiles only.
static void require_full_tiles(const Unpacked& u, uint32_t cb, const char* api) {
    if (u.rows == 32) return;
    fail(std::string(api) + ": CB " + std::to_string(cb) + " holds " + std::to_string(u.rows) + "x32 tiles; the host "
         "runtime models this op on 32x32 tiles only (matmul with a 16x32 or 8x32 in0, copy_tile, unary_bcast and "
         "pack_tile take them)");
}

// The operand in the source register: unpack_operand, then cut to the source register precision of
// its format (TF32 / bf16 for Float32 data). Returns whether the register holds TF32 (a Float32 CB
// with fp32_dest_acc_en), i.e. the SrcAStyle it implies.
static bool load_operand(Kernel& k, ComputeState& s, uint32_t cb, uint32_t idx, bool srca, const char* api,
                         float* out) {
    const Unpacked u = unpack_operand(k, s, cb, idx, srca, api);
    to_src(u.values, out, u.format, k.fp32_acc);
    return u.format == 0 && k.fp32_acc;
}

static void transpose(const float* in, float* out) {
    for (int r = 0; r < 32; ++r)
        for (int c = 0; c < 32; ++c) out[c * 32 + r] = in[r * 32 + c];
}

// Fills `op` from an unpacked tile: the source register values (to_src), transposed if asked, cut into
// the fidelity slices of its register (out[0] = phase-0 bits, out[1] = the bits of the later phase;
// SrcA: phase bit 0, SrcB: phase bit 1; products of slices are exact in fp32), and the skip masks the
// MVMUL model uses (see mvmul_tile). Plain loops the compiler vectorises; the values are the same on
// every path.
__attribute__((target_clones("avx512f", "avx2", "default")))
static void prepare_operand(const Unpacked& u, bool srca, bool transposed, bool fp32_acc, MatmulOperand& op) {
    alignas(64) float v[kTileValues], t[kTileValues];
    to_src(u.values, v, u.format, fp32_acc);
    const float* src = v;
    if (transposed) {
        transpose(v, t);
        src = t;
    }
    for (uint32_t i = 0; i < kTileValues; ++i) {
        op.s[0][i] = srca ? fid_a(src[i], 0) : fid_b(src[i], 0);
        op.s[1][i] = srca ? fid_a(src[i], 1) : fid_b(src[i], 2);
    }
    for (int sl = 0; sl < 2; ++sl) {
        if (srca) {
            uint32_t nonfinite = 0;
            for (int kk = 0; kk < 32; ++kk) {
                uint32_t any = 0;
                for (int j = 0; j < 32; ++j) any |= (bits(op.s[sl][kk * 32 + j]) & 0x7F800000u) == 0x7F800000u;
                nonfinite |= (any ? 1u : 0u) << kk;
            }
            op.nonfinite[sl] = nonfinite;
        } else {
            for (int r = 0; r < 64; ++r) {
                uint32_t m = 0;
                for (int c = 0; c < 16; ++c) m |= uint32_t(op.s[sl][r * 16 + c] != 0.f) << c;
                op.nonzero[sl][r] = uint16_t(m);
            }
        }
    }
}

// The prepared matmul operand of tile `idx` of `cb` (in0: srcB, in1: srcA), from the LRU cache when
// the same unpacked tile was prepared the same way before. The checks of unpack_operand run every call.
static const MatmulOperand& matmul_operand(Kernel& k, ComputeState& s, uint32_t cb, uint32_t idx, bool srca,
                                           bool transposed, const char* api) {
    const Unpacked u = unpack_operand(k, s, cb, idx, srca, api);
    MatmulOperand* set = srca ? s.mm_in1 : s.mm_in0;
    const int n = srca ? int(std::size(s.mm_in1)) : int(std::size(s.mm_in0));
    MatmulOperand* victim = set;
    for (int i = 0; i < n; ++i) {
        MatmulOperand& op = set[i];
        if (op.gen == u.gen && op.transposed == transposed && op.fp32 == k.fp32_acc) {
            op.used = ++s.mm_clock;
            return op;
        }
        if (op.used < victim->used) victim = &op;
    }
    prepare_operand(u, srca, transposed, k.fp32_acc, *victim);
    victim->gen = u.gen;
    victim->transposed = transposed;
    victim->fp32 = k.fp32_acc;
    victim->used = ++s.mm_clock;
    return *victim;
}

// The fidelity phases of a 32x32 tile product into DST, as the LLK issues MVMULs: phase p multiplies
// slice (p >> 1) & 1 of in0 (srcB) by slice p & 1 of in1 (srcA); for each output element, each
// 16-deep half of the inner dimension is one MVMUL, summed in fp32 from 0 in k order (MVMUL.md's
// model), then added to DST and written back with DST's rounding; phase after phase. b is k-major
// (B[k][j]).
//
// A zero a-value contributes nothing: its 32 products are signed zeros, and adding a signed zero to a
// running sum that starts at +0 (which can never become -0: x + (-x) is +0 in round-to-nearest) leaves
// it unchanged (a NaN or inf sum stays as it is), so such a product may be skipped or taken at will
// when b's row kk is finite (0 x inf or 0 x NaN would be NaN). The skip only saves host time (rows
// past a group, zero slices).
//
// Host order of work (no element can tell): DST row by row; per row, the phases that share an in0
// slice (0 and 1, then 2 and 3) run together, their up to four 16-deep sums (2 halves x 2 in1 slices)
// as independent accumulations over the union of their k sets (taking a product outside a sum's own
// set only adds a signed zero, see above), then DST gets the sums added in the order of the phases
// and halves. Every element sees exactly the model's sequence of operations.
// Compiled for AVX-512, AVX2 and baseline x86-64 (chosen when the runner loads): the same adds and
// multiplies in the same order (no contraction into FMAs: -ffp-contract=off), only wider.
template <int NB>  // in1 slices in the group: 1 or 2
static inline void mvmul_row_group(const float* __restrict ar, const uint16_t* a_nonzero, const MatmulOperand& b,
                                   int sb0, float* __restrict acc, bool fp32) {
    float r[NB][2][32];
    for (int x = 0; x < NB; ++x)
        for (int h = 0; h < 2; ++h)
            for (int j = 0; j < 32; ++j) r[x][h][j] = 0.f;
    uint32_t m = uint32_t(a_nonzero[0]) | (uint32_t(a_nonzero[1]));
    for (int x = 0; x < NB; ++x) m |= (b.nonfinite[sb0 + x] & 0xFFFFu) | (b.nonfinite[sb0 + x] >> 16);
    while (m) {
        const int t = __builtin_ctz(m);
        m &= m - 1;
        const float a0 = ar[t], a1 = ar[16 + t];
        for (int x = 0; x < NB; ++x) {
            const float* b0 = b.s[sb0 + x] + t * 32;
            const float* b1 = b.s[sb0 + x] + (16 + t) * 32;
            for (int j = 0; j < 32; ++j) r[x][0][j] += a0 * b0[j];
            for (int j = 0; j < 32; ++j) r[x][1][j] += a1 * b1[j];
        }
    }
    for (int x = 0; x < NB; ++x)
        for (int h = 0; h < 2; ++h) {
            if (fp32)
                for (int j = 0; j < 32; ++j) acc[j] += r[x][h][j];
            else
                for (int j = 0; j < 32; ++j) acc[j] = dst_round(acc[j] + r[x][h][j], false);
        }
}

__attribute__((target_clones("avx512f", "avx2", "default")))
static void mvmul_tile(const MatmulOperand& a, const MatmulOperand& b, float* __restrict c, int phases, bool fp32,
                       uint32_t rows) {
    for (int i = 0; i < int(rows); ++i) {
        float acc[32];
        float* cr = c + i * 32;
        for (int j = 0; j < 32; ++j) acc[j] = cr[j];
        for (int p = 0; p < phases; p += 2) {
            const int sa = (p >> 1) & 1;
            if (p + 1 < phases)  // phases p (in1 slice 0) and p + 1 (in1 slice 1)
                mvmul_row_group<2>(a.s[sa] + i * 32, a.nonzero[sa] + i * 2, b, 0, acc, fp32);
            else
                mvmul_row_group<1>(a.s[sa] + i * 32, a.nonzero[sa] + i * 2, b, 0, acc, fp32);
        }
        for (int j = 0; j < 32; ++j) cr[j] = acc[j];
    }
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
    // A 16x32 in0 (two faces: rows 0-15) gives a 16x32 result: the MVMULs of output rows 0-15 only,
    // written to faces 0-1 of the DST tile; an 8x32 in0 (face_r_dim 8) the MVMULs of rows 0-7 (one per
    // face pair and inner face instead of two), written to rows 0-7 of faces 0-1. in1 is a 32x32 tile
    // (its 32 rows are the inner dimension).
    const uint32_t rows = uint32_t(cb_rows(k, in0, api));
    if (cb_rows(k, in1, api) != 32) {
        fail(std::string(api) + ": in1 (CB " + std::to_string(in1) + ") holds " + std::to_string(cb_rows(k, in1, api)) +
             "x32 tiles; the host runtime models matmul with a 32x32 in1 only (in0 may be 16x32 or 8x32)");
    }
    const uint8_t mask = rows_mask(int(rows));
    // Mixed TF32/BF16 sources: each register is read as it holds (see ttrt_binary).
    for (uint32_t r = 0; r < rt; ++r) {
        const MatmulOperand& a = matmul_operand(k, s, in0, i0 + r * kt, false, false, api);  // in0 goes to srcB
        for (uint32_t c = 0; c < ct; ++c) {
            const MatmulOperand& b = matmul_operand(k, s, in1, i1 + c, true, transpose_b, api);  // in1 goes to srcA
            const uint32_t d = idst + r * ct + c;
            float* out = dst_tile(k, s, d, api);
            fill_half_faces(out, uint8_t(mask & ~s.defined[d]), 0.f);  // FPU reads a cleared half face as 0
            mvmul_tile(a, b, out, phases, k.fp32_acc, rows);
            s.defined[d] |= mask;
        }
    }
    k.counters.op_tiles[OP_MATMUL] += uint64_t(rt) * ct;
    // The LLK's unpack (llk_unpack_AB_matmul.h): with ct >= rt each in0 tile is unpacked once and
    // reused for its row's ct in1 tiles; otherwise each in1 tile once, reused for its column's rt in0 tiles.
    const uint32_t n0 = ct >= rt ? rt : rt * ct, n1 = ct >= rt ? rt * ct : ct;
    const uint32_t l1 = n0 * tile_l1_bytes(k, in0, api) + n1 * tile_l1_bytes(k, in1, api);
    record(k, EV_COMPUTE, OP_MATMUL, rt * ct, rows == 32 ? 0 : uint8_t(rows), l1,
           uint16_t(n0 + n1));  // flag: in0 rows of a 16x32 or 8x32 tile
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
    require_full_tiles(unpack(k, s, icb0, i0, api), icb0, api);
    require_full_tiles(unpack(k, s, icb1, i1, api), icb1, api);
    const bool tf32 = load_operand(k, s, icb0, i0, true, api, a);
    load_operand(k, s, icb1, i1, false, api, b);
    (void)tf32;  // mixed TF32/BF16 sources: each register is read as it holds (ReadBF16 is undefined in the docs)
    float* out = dst_tile(k, s, idst, api);
    if (s.defined[idst] != 0 && s.defined[idst] != kAllRows) check_faces(s, idst, kAllRows, api);
    const bool was = s.defined[idst] != 0;
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
    s.defined[idst] = kAllRows;
    const int opc = op == 0 ? OP_MUL : op == 2 ? OP_ADD : OP_SUB;
    const int counted = bcast ? opc + (OP_ADD_BCAST - OP_ADD) : opc;
    k.counters.op_tiles[counted] += 1;
    record(k, EV_COMPUTE, uint16_t(counted), 1, 0, tile_l1_bytes(k, icb0, api) + tile_l1_bytes(k, icb1, api), 2);
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
    require_full_tiles(unpack(k, s, icb, itile, api), icb, api);
    require_full_tiles(unpack(k, s, icb_scaler, itile_scaler, api), icb_scaler, api);
    // MAX: data in srcA, scaler in srcB; SUM/AVG swap the two (the scaler feeds srcA of a matmul).
    load_operand(k, s, icb, itile, is_max, api, a);
    load_operand(k, s, icb_scaler, itile_scaler, !is_max, api, sc);
    float* out = dst_tile(k, s, idst, api);
    if (s.defined[idst] != 0 && s.defined[idst] != kAllRows) check_faces(s, idst, kAllRows, api);
    const bool was = s.defined[idst] != 0;
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
    s.defined[idst] = kAllRows;
    const int opc = is_max ? OP_REDUCE_MAX : OP_REDUCE_SUM;
    k.counters.op_tiles[opc] += 1;
    record(k, EV_COMPUTE, uint16_t(opc), 1, 0, tile_l1_bytes(k, icb, api) + tile_l1_bytes(k, icb_scaler, api), 2);
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
    check_unpack_geometry(s, true, cb, u.rows, api);
    const bool to_dest = unpacks_to_dest(s, cb, u.format);
    check_copy_path(s, cb, to_dest, api, "copy_init");
    if (to_dest && s.fpu_a) fail("copy_tile: a transposing copy_init of an UnpackToDestFp32 CB is not modelled");
    if (u.rows != 32 && s.fpu_a) fail("copy_tile: a transposing copy of a 16x32 or 8x32 tile is not modelled");
    float tmp[kTileValues];
    // UnpackToDestFp32: the unpacker writes the Float32 tile into the fp32 DST as is. Otherwise the
    // tile passes through srcA in the unpacker's format (TF32 / bf16 for Float32 data, denormals
    // flushed) and MOVA2D widens it into DST.
    if (to_dest) std::memcpy(tmp, u.values, sizeof tmp);
    else to_src(u.values, tmp, u.format, k.fp32_acc);
    float* out = dst_tile(k, s, idst, api);
    // a 16x32 tile writes faces 0-1 (rows 0-15), an 8x32 tile rows 0-7 of faces 0-1; faces 2-3 keep
    // what they held
    const uint32_t n = 32 * u.rows;
    if (s.fpu_a) transpose(tmp, out);
    else std::memcpy(out, tmp, n * sizeof(float));
    for (uint32_t i = 0; i < n; ++i) out[i] = dst_round(out[i], k.fp32_acc);
    s.defined[idst] |= rows_mask(u.rows);
    uint32_t l1 = tile_l1_bytes(k, cb, api);
    if (u.rows == 8) {
        if (!to_dest) {
            // MOVA2D moves 16 rows per face whatever the face_r_dim (llk_math_eltwise_unary_datacopy.h):
            // rows 8-15 of faces 0-1 get srcA's stale rows 8-15
            garbage_rows(s, out, idst, kRows8to15);
        } else if (s.srca_xend_whole_face) {
            // unpacker A's X-end is a whole face since the last unpack to DST (TEN-3868): each face reads
            // 256 datums, so rows 8-15 of face 0 get the tile's face 1 and those of face 1 512 B past it
            garbage_rows(s, out, idst, kRows8to15);
            l1 *= 2;
        }
    }
    if (to_dest) s.srca_xend_whole_face = true;
    k.counters.op_tiles[OP_COPY] += 1;
    // flag: a 2-face tile's math moves 16 rows per face (16x32 and 8x32 alike); its L1 bytes as read
    record(k, EV_COMPUTE, OP_COPY, 1, u.rows == 32 ? 0 : 16, l1, 1);
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
    check_unpack_geometry(s, !to_dest, cb, u.rows, api);
    check_copy_path(s, cb, to_dest, api, "unary_bcast_init");
    float v[kTileValues];
    if (to_dest) std::memcpy(v, u.values, sizeof v);
    else to_src(u.values, v, u.format, k.fp32_acc);
    float* out = dst_tile(k, s, idst, api);
    // a 16x32 tile broadcasts into faces 0-1 (rows 0-15), an 8x32 tile into rows 0-7 of faces 0-1
    const uint32_t rows = u.rows;
    for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t c = 0; c < 32; ++c) {
            const float x = bcast == 1 ? v[r * 32] : bcast == 2 ? v[c] : v[0];
            out[r * 32 + c] = dst_round(x, k.fp32_acc);
        }
    s.defined[idst] |= rows_mask(u.rows);
    uint32_t l1 = tile_l1_bytes(k, cb, api);
    if (u.rows != 32) {
        // The LLK's broadcast is for 32x32 tiles (llk_unpack_A.h asserts num_faces == 4 when
        // ENABLE_LLK_ASSERT is on): of a 2-face tile it also unpacks "face 2", read past the tile, into
        // DST faces 2-3, and moves 16 rows per face from the source register (stale rows 8-15 of an
        // 8x32 tile's faces). The rows a 2-face tile holds come out right.
        garbage_rows(s, out, idst, uint8_t(kFaces2and3 | (rows == 8 ? kRows8to15 : 0)));
        if (rows == 8 && to_dest && s.srca_xend_whole_face) l1 *= 2;
    }
    if (to_dest) s.srca_xend_whole_face = true;
    k.counters.op_tiles[OP_COPY] += 1;
    record(k, EV_COMPUTE, OP_COPY, 1, u.rows == 32 ? 0 : 16, l1, 1);
}

}  // namespace ttrt
