// Compute kernels on the host: DST register file, unpack/pack through the CB data formats, FPU and
// SFPU tile operations, and the ordering/configuration rules of the Tensix compute API.
//
// Semantics (Wormhole B0, from the LLK sources and the Tensix ISA documentation):
// * DST holds `dst_tiles` tiles (16 x 16-bit tiles, halved by fp32_dest_acc_en, halved again in half-sync
//   mode). A DST tile is either undefined or holds 1024 values. tile_regs_release clears the section
//   the packer used (ZEROACC), so after tile_regs_acquire every tile is undefined; FPU instructions read
//   an undefined tile as 0 (GMPOOL as -inf), the packer may not pack it, SFPU reads of it are undefined
//   behaviour (an error here).
// * Values in DST are fp32 with fp32_dest_acc_en, else bf16 (every write rounds to nearest even).
// * FPU operands (srcA/srcB) of a Float32 CB are truncated to TF32 (10 mantissa bits) with
//   fp32_dest_acc_en, else to bf16; bf16/bfp8/bfp4 data is exact. copy_tile of Float32 data into an fp32
//   DST unpacks straight to DST (exact). SFPU ops compute in fp32.
// * matmul_tiles: DST += A x B (B transposed if matmul_init asked). Element-wise add/sub: DST = A op B
//   (DST += ... when *_init got acc_to_dest); mul: DST += A * B always (ELWMUL accumulates; on a fresh
//   tile that is A * B). Broadcast COL uses column 0 of B, ROW row 0, SCALAR element (0, 0).
// * reduce_tile<MAX|SUM, REDUCE_ROW>: column 0 of DST gets max(previous, max_c A[r][c] * s_c) for MAX
//   (previous = -inf on an undefined tile; s_c = 2^floor(log2|S[0][c]|), the exponent-only scaling of
//   GMPOOL) or previous + sum_c A[r][c] * S[0][c] for SUM/AVG (S = the scaler tile); the other
//   columns become 0 on an undefined tile and are left alone otherwise. Between reduce_init<ROW> and
//   reduce_uninit the packer masks every packed tile to its columns 0 and 16 (the rest packs as 0).
// * Math fidelity and approximation modes are recorded, not modelled (exp/recip/log are exact).
#include "compute.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "fast_unpack.hpp"
#include "tile_formats.hpp"

namespace ttrt {

namespace fmt = ttdecode::formats;

const char* compute_op_name(int op) {
    static const char* names[kNumComputeOps] = {"matmul", "add", "sub", "mul", "add_bcast", "sub_bcast",
                                                "mul_bcast", "reduce_max", "reduce_sum", "copy", "exp", "recip",
                                                "log", "scalar", "max", "pack"};
    return op >= 0 && op < kNumComputeOps ? names[op] : "?";
}

enum Regs { REGS_IDLE, REGS_ACQUIRED, REGS_COMMITTED, REGS_WAITED };

struct TileCacheEntry {
    uint32_t addr = 0;
    uint8_t format = 0xff;
    uint8_t raw[4096];
    float values[kTileValues];
    bool valid = false;
};

struct ComputeState {
    int cap = 0;
    float dst[kMaxDst][kTileValues];
    bool defined[kMaxDst] = {};
    Regs regs = REGS_IDLE;
    int fpu = FPU_NONE, fpu_a = 0, fpu_b = 0;
    const char* fpu_init = "(no init)";
    int sfpu = SF_NONE;
    const char* sfpu_init = "(no init)";
    int srca = -1, srcb = -1, pack = -1;  // configured tt DataFormat values
    bool reduce_mask = false;
    bool started = false;
    TileCacheEntry cache[8];
};

ComputeState* new_compute_state(Kernel& k) {
    ComputeState* cs = new ComputeState();
    cs->cap = k.dst_tiles;
    return cs;
}

static ComputeState& cs(Kernel& k) {
    if (!k.cs) fail(std::string(k.last_call) + ": a compute API call in a " + kind_name(k.kind) + " kernel");
    return *k.cs;
}

static const char* df_name(int f) {
    switch (f) {
        case 0: return "Float32";
        case 5: return "Float16_b";
        case 6: return "Bfp8_b";
        case 7: return "Bfp4_b";
        case -1: return "(not configured)";
    }
    return "unsupported";
}

static fmt::DataFormat codec_format(uint8_t df, const std::string& what) {
    switch (df) {
        case 0: return fmt::DataFormat::Float32;
        case 5: return fmt::DataFormat::Float16_b;
        case 6: return fmt::DataFormat::Bfp8_b;
        case 7: return fmt::DataFormat::Bfp4_b;
    }
    fail(what + ": data format " + std::to_string(df) + " is not modelled (Float32, Float16_b, Bfp8_b, Bfp4_b)");
}

// ------------------------------------------------------------------ precision

static inline uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static inline float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Value written into DST: bf16 (nearest even) unless DST is fp32.
static inline float dst_round(float x, bool fp32) {
    if (fp32) return x;
    return fmt::bf16_bits_to_float(fmt::float_to_bf16_bits(x));
}

// Operand as seen in srcA/srcB: denormals flushed; Float32 data truncated to TF32 or bf16.
static void to_src(const float* in, float* out, uint8_t df, bool fp32_acc) {
    const uint32_t keep = df == 0 ? (fp32_acc ? 0xFFFFE000u : 0xFFFF0000u) : 0xFFFFFFFFu;
    for (uint32_t i = 0; i < kTileValues; ++i) {
        uint32_t u = bits(in[i]);
        if (((u >> 23) & 0xFF) == 0) u &= 0x80000000u;
        else if (((u >> 23) & 0xFF) != 0xFF) u &= keep;
        out[i] = from_bits(u);
    }
}

// ------------------------------------------------------------------ state checks

static void check_regs(Kernel& k, ComputeState& s, Regs want, const char* api) {
    if (s.regs == want) return;
    static const char* names[] = {"before tile_regs_acquire", "after tile_regs_acquire",
                                  "after tile_regs_commit", "after tile_regs_wait"};
    fail(std::string(api) + ": must run " + names[want] + ", but the DST registers are " + names[s.regs] +
         (want == REGS_ACQUIRED ? " (math ops go between tile_regs_acquire and tile_regs_commit)"
                                : " (pack_tile goes between tile_regs_wait and tile_regs_release)"));
    (void)k;
}

static void check_dst(Kernel& k, ComputeState& s, uint32_t idst, const char* api) {
    if (idst >= uint32_t(s.cap)) {
        fail(std::string(api) + ": DST index " + std::to_string(idst) + " out of range: DST holds " +
             std::to_string(s.cap) + " tiles (fp32_dest_acc_en=" + (k.fp32_acc ? "true" : "false") +
             ", dst_full_sync_en=" + (k.full_sync ? "true" : "false") + ")");
    }
}

static void check_fpu(ComputeState& s, int kind, int a, int b, const char* api, const char* init_name) {
    if (s.fpu == kind && s.fpu_a == a && (b < 0 || s.fpu_b == b)) return;
    fail(std::string(api) + ": the FPU is configured by " + s.fpu_init + ", not by " + init_name +
         " (call the op's init after any other op's init)");
}

static void check_src_format(ComputeState& s, bool srca, uint32_t cb, uint8_t df, const char* api) {
    const int have = srca ? s.srca : s.srcb;
    if (have == int(df)) return;
    fail(std::string(api) + ": unpacker " + (srca ? "srcA" : "srcB") + " is configured for " + df_name(have) +
         " but CB " + std::to_string(cb) + " holds " + df_name(df) + " (call compute_kernel_hw_startup / " +
         (srca ? "reconfig_data_format_srca" : "reconfig_data_format_srcb") + " for it)");
}

// Decoded values of tile `idx` of a CB this kernel waited for (row-major floats).
static const float* unpack(Kernel& k, ComputeState& s, uint32_t cb, uint32_t idx, const char* api, uint8_t* df_out) {
    if (cb >= uint32_t(kNumCbs) || !k.core->cbcfg[cb].present) {
        fail(std::string(api) + ": CB " + std::to_string(cb) + " is not configured on " + core_name(k.core));
    }
    const CbConfig& c = k.core->cbcfg[cb];
    const CbView& v = k.cb[cb];
    if (idx >= v.waited) {
        fail(std::string(api) + ": reads tile " + std::to_string(idx) + " of CB " + std::to_string(cb) + " but only " +
             std::to_string(v.waited) + " pages were made visible by cb_wait_front");
    }
    uint32_t addr = v.rd + idx * c.page_size;
    const uint32_t limit = c.addr + c.page_size * c.num_pages;
    if (addr >= limit) addr -= c.page_size * c.num_pages;
    const fmt::DataFormat f = codec_format(c.format, api);
    const uint32_t size = fmt::tile_size_bytes(f);
    if (size > c.page_size) {
        fail(std::string(api) + ": CB " + std::to_string(cb) + " pages are " + std::to_string(c.page_size) +
             " B, smaller than a " + df_name(c.format) + " tile (" + std::to_string(size) + " B)");
    }
    const uint8_t* raw = k.core->l1 + addr;
    TileCacheEntry& e = s.cache[((addr >> 4) * 2654435761u >> 29) & 7];
    if (!(e.valid && e.addr == addr && e.format == c.format && std::memcmp(e.raw, raw, size) == 0)) {
        std::memcpy(e.raw, raw, size);
        fast_unpack_tile(f, raw, e.values);
        e.addr = addr;
        e.format = c.format;
        e.valid = true;
    }
    *df_out = c.format;
    return e.values;
}

static float* dst_tile(Kernel& k, ComputeState& s, uint32_t idst, const char* api) {
    check_dst(k, s, idst, api);
    return s.dst[idst];
}

// ------------------------------------------------------------------ configuration

extern "C" void ttrt_hw_startup(uint32_t icb0, uint32_t icb1, uint32_t ocb) {
    note("compute_kernel_hw_startup", "%llu, %llu, %llu", icb0, icb1, ocb);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    auto f = [&](uint32_t cb) -> int {
        if (cb >= uint32_t(kNumCbs) || !k.core->cbcfg[cb].present) {
            fail("compute_kernel_hw_startup: CB " + std::to_string(cb) + " is not configured on " + core_name(k.core));
        }
        return k.core->cbcfg[cb].format;
    };
    s.srca = f(icb0);
    s.srcb = f(icb1);
    s.pack = f(ocb);
    s.fpu = FPU_NONE;
    s.fpu_init = "compute_kernel_hw_startup (no op init yet)";
    s.reduce_mask = false;
    s.started = true;
}

static int cb_format(Kernel& k, uint32_t cb, const char* api) {
    if (cb >= uint32_t(kNumCbs) || !k.core->cbcfg[cb].present) {
        fail(std::string(api) + ": CB " + std::to_string(cb) + " is not configured on " + core_name(k.core));
    }
    return k.core->cbcfg[cb].format;
}

extern "C" void ttrt_reconfig_srca(uint32_t cb) {
    note("reconfig_data_format_srca", "%llu", cb);
    cs(cur()).srca = cb_format(cur(), cb, "reconfig_data_format_srca");
}
extern "C" void ttrt_reconfig_srcb(uint32_t cb) {
    note("reconfig_data_format_srcb", "%llu", cb);
    cs(cur()).srcb = cb_format(cur(), cb, "reconfig_data_format_srcb");
}
extern "C" void ttrt_reconfig_pack(uint32_t cb) {
    note("pack_reconfig_data_format", "%llu", cb);
    cs(cur()).pack = cb_format(cur(), cb, "pack_reconfig_data_format");
}

extern "C" void ttrt_tile_regs(int step) {
    static const char* names[] = {"tile_regs_acquire", "tile_regs_commit", "tile_regs_wait", "tile_regs_release"};
    note(names[step]);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    const Regs from[] = {REGS_IDLE, REGS_ACQUIRED, REGS_COMMITTED, REGS_WAITED};
    if (s.regs != from[step]) {
        static const char* state[] = {"released (idle)", "acquired", "committed", "waited"};
        fail(std::string(names[step]) + ": out of order: the DST registers are " + state[s.regs] +
             "; the sequence is tile_regs_acquire, math, tile_regs_commit, tile_regs_wait, pack, tile_regs_release");
    }
    s.regs = Regs((step + 1) % 4);
    if (step == 0 || step == 3) {
        std::fill(std::begin(s.defined), std::end(s.defined), false);  // ZEROACC of the section
    }
}

extern "C" void ttrt_fpu_init(int kind, int a, int b, uint32_t icb0, uint32_t icb1, const char* api) {
    note(api, "%llu, %llu", icb0, icb1);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    cb_format(k, icb0, api);
    cb_format(k, icb1, api);
    s.fpu = kind;
    s.fpu_a = a;
    s.fpu_b = b;
    s.fpu_init = api;
    if (kind == FPU_REDUCE && b == int(0) /* REDUCE_ROW */) s.reduce_mask = true;
}

extern "C" void ttrt_reduce_uninit(void) {
    note("reduce_uninit");
    ComputeState& s = cs(cur());
    s.reduce_mask = false;
    if (s.fpu == FPU_REDUCE) {
        s.fpu = FPU_NONE;
        s.fpu_init = "reduce_uninit (no op init since)";
    }
}

// ------------------------------------------------------------------ FPU operations

// C += A x B over 32x32 tiles (row-major); the inner loop vectorises.
static void matmul_acc(const float* __restrict a, const float* __restrict b, float* __restrict c) {
    for (int i = 0; i < 32; ++i) {
        float row[32];
        for (int j = 0; j < 32; ++j) row[j] = 0.f;
        for (int kk = 0; kk < 32; ++kk) {
            const float av = a[i * 32 + kk];
            const float* br = b + kk * 32;
            for (int j = 0; j < 32; ++j) row[j] += av * br[j];
        }
        for (int j = 0; j < 32; ++j) c[i * 32 + j] += row[j];
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
    float a[kTileValues], b[kTileValues], tmp[kTileValues];
    for (uint32_t r = 0; r < rt; ++r) {
        uint8_t df;
        const float* av = unpack(k, s, in0, i0 + r * kt, api, &df);
        check_src_format(s, false, in0, df, api);  // in0 goes to srcB
        to_src(av, a, df, k.fp32_acc);
        for (uint32_t c = 0; c < ct; ++c) {
            const float* bv = unpack(k, s, in1, i1 + c, api, &df);
            check_src_format(s, true, in1, df, api);  // in1 goes to srcA
            to_src(bv, tmp, df, k.fp32_acc);
            if (transpose_b) transpose(tmp, b);
            else std::memcpy(b, tmp, sizeof b);
            const uint32_t d = idst + r * ct + c;
            float* out = dst_tile(k, s, d, api);
            if (!s.defined[d]) std::fill(out, out + kTileValues, 0.f);
            matmul_acc(a, b, out);
            for (uint32_t i = 0; i < kTileValues; ++i) out[i] = dst_round(out[i], k.fp32_acc);
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
    uint8_t df;
    float a[kTileValues], b[kTileValues];
    to_src(unpack(k, s, icb0, i0, api, &df), a, df, k.fp32_acc);
    check_src_format(s, true, icb0, df, api);
    to_src(unpack(k, s, icb1, i1, api, &df), b, df, k.fp32_acc);
    check_src_format(s, false, icb1, df, api);
    float* out = dst_tile(k, s, idst, api);
    const bool was = s.defined[idst];
    const bool acc = s.fpu_b != 0;
    for (uint32_t r = 0; r < 32; ++r) {
        for (uint32_t c = 0; c < 32; ++c) {
            const uint32_t i = r * 32 + c;
            float bv = b[i];
            if (bcast == 1) bv = b[r * 32];       // COL: column 0
            else if (bcast == 2) bv = b[c];       // ROW: row 0
            else if (bcast == 3) bv = b[0];       // SCALAR
            const float prev = was ? out[i] : 0.f;
            float v;
            if (op == 0) v = prev + a[i] * bv;                       // ELWMUL always accumulates
            else if (op == 2) v = (acc ? prev : 0.f) + (a[i] + bv);  // ELWADD
            else v = (acc ? prev : 0.f) + (a[i] - bv);               // ELWSUB
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
    uint8_t df, sdf;
    float a[kTileValues], sc[kTileValues];
    to_src(unpack(k, s, icb, itile, api, &df), a, df, k.fp32_acc);
    to_src(unpack(k, s, icb_scaler, itile_scaler, api, &sdf), sc, sdf, k.fp32_acc);
    // MAX: data in srcA, scaler in srcB; SUM/AVG swap the two (the scaler feeds srcA of a matmul).
    check_src_format(s, is_max, icb, df, api);
    check_src_format(s, !is_max, icb_scaler, sdf, api);
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
            float acc = 0.f;
            for (uint32_t c = 0; c < 32; ++c) acc += a[r * 32 + c] * sc[c];
            v = (was ? out[r * 32] : 0.f) + acc;
        }
        out[r * 32] = dst_round(v, k.fp32_acc);
    }
    s.defined[idst] = true;
    const int opc = is_max ? OP_REDUCE_MAX : OP_REDUCE_SUM;
    k.counters.op_tiles[opc] += 1;
    record(k, EV_COMPUTE, uint16_t(opc), 1);
}

extern "C" void ttrt_copy_tile(uint32_t cb, uint32_t itile, uint32_t idst) {
    const char* api = "copy_tile";
    note(api, "cb=%llu, tile %llu, dst %llu", cb, itile, idst);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_fpu(s, FPU_COPY, s.fpu == FPU_COPY ? s.fpu_a : 0, -1, api, "copy_init");
    uint8_t df;
    const float* v = unpack(k, s, cb, itile, api, &df);
    check_src_format(s, true, cb, df, api);
    float tmp[kTileValues];
    if (df == 0 && k.fp32_acc) std::memcpy(tmp, v, sizeof tmp);  // Float32 unpacks straight to an fp32 DST
    else to_src(v, tmp, df, false);
    float* out = dst_tile(k, s, idst, api);
    if (s.fpu_a) transpose(tmp, out);
    else std::memcpy(out, tmp, sizeof tmp);
    for (uint32_t i = 0; i < kTileValues; ++i) out[i] = dst_round(out[i], k.fp32_acc);
    s.defined[idst] = true;
    k.counters.op_tiles[OP_COPY] += 1;
    record(k, EV_COMPUTE, OP_COPY, 1);
}

// ------------------------------------------------------------------ SFPU operations

static int sfpu_init_of(int op) { return op >= SF_ADD_S && op <= SF_RSUB_S ? SF_SCALAR_INIT : op; }

extern "C" void ttrt_sfpu_init(int op, int approx, const char* api) {
    note(api);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    s.sfpu = op;
    s.sfpu_init = api;
    (void)approx;
}

static void check_sfpu(ComputeState& s, int op, const char* api) {
    if (s.sfpu == sfpu_init_of(op)) return;
    fail(std::string(api) + ": the SFPU is configured by " + s.sfpu_init + " (call this op's init first)");
}

static void region(int vector_mode, uint32_t& r1, uint32_t& c1) {
    r1 = 32, c1 = 32;
    if (vector_mode == 1) r1 = 16;        // VectorMode::R: faces 0 and 1
    else if (vector_mode == 2) c1 = 16;   // VectorMode::C: faces 0 and 2
    else if (vector_mode != 4) r1 = c1 = 16;  // face 0 only
}

extern "C" void ttrt_sfpu_unary(int op, uint32_t idst, int vector_mode, uint32_t param, const char* api) {
    note(api, "dst %llu", idst);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_sfpu(s, op, api);
    float* t = dst_tile(k, s, idst, api);
    if (!s.defined[idst]) {
        fail(std::string(api) + ": DST tile " + std::to_string(idst) + " holds no data since tile_regs_acquire "
             "(SFPU reads of cleared DST rows are undefined on the device)");
    }
    const float p = from_bits(param);
    uint32_t r1, c1;
    region(vector_mode, r1, c1);
    for (uint32_t r = 0; r < r1; ++r) {
        for (uint32_t c = 0; c < c1; ++c) {
            float& x = t[r * 32 + c];
            float v = x;
            switch (op) {
                case SF_EXP: v = std::exp(param ? x * p : x); break;
                case SF_RECIP: v = 1.0f / x; break;
                case SF_LOG: v = std::log(x); break;
                case SF_ADD_S: v = x + p; break;
                case SF_SUB_S: v = x - p; break;
                case SF_MUL_S: v = x * p; break;
                case SF_DIV_S: v = x / p; break;
                case SF_RSUB_S: v = p - x; break;
            }
            x = dst_round(v, k.fp32_acc);
        }
    }
    const int opc = op == SF_EXP ? OP_EXP : op == SF_RECIP ? OP_RECIP : op == SF_LOG ? OP_LOG : OP_SCALAR;
    k.counters.op_tiles[opc] += 1;
    record(k, EV_COMPUTE, uint16_t(opc), 1);
}

extern "C" void ttrt_sfpu_binary(int op, uint32_t i0, uint32_t i1, uint32_t o, int vector_mode, const char* api) {
    note(api, "dst %llu, %llu -> %llu", i0, i1, o);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_ACQUIRED, api);
    check_sfpu(s, op, api);
    float* a = dst_tile(k, s, i0, api);
    float* b = dst_tile(k, s, i1, api);
    float* out = dst_tile(k, s, o, api);
    for (uint32_t d : {i0, i1}) {
        if (!s.defined[d]) {
            fail(std::string(api) + ": DST tile " + std::to_string(d) + " holds no data since tile_regs_acquire");
        }
    }
    if (!s.defined[o]) std::fill(out, out + kTileValues, 0.f);
    uint32_t r1, c1;
    region(vector_mode, r1, c1);
    for (uint32_t r = 0; r < r1; ++r)
        for (uint32_t c = 0; c < c1; ++c) {
            const uint32_t i = r * 32 + c;
            out[i] = dst_round(std::max(a[i], b[i]), k.fp32_acc);
        }
    s.defined[o] = true;
    k.counters.op_tiles[OP_MAX] += 1;
    record(k, EV_COMPUTE, OP_MAX, 1);
}

// ------------------------------------------------------------------ pack

extern "C" void ttrt_pack_tile(uint32_t idst, uint32_t cb, uint32_t out_index, int out_of_order) {
    const char* api = "pack_tile";
    note(api, "dst %llu -> cb %llu", idst, cb);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    check_regs(k, s, REGS_WAITED, api);
    check_dst(k, s, idst, api);
    if (!s.defined[idst]) {
        fail("pack_tile: DST tile " + std::to_string(idst) + " was not written since tile_regs_acquire");
    }
    const int df = cb_format(k, cb, api);
    if (s.pack != df) {
        fail(std::string("pack_tile: the packer is configured for ") + df_name(s.pack) + " but CB " +
             std::to_string(cb) + " holds " + df_name(df) + " (call pack_reconfig_data_format)");
    }
    const CbConfig& c = k.core->cbcfg[cb];
    CbView& v = k.cb[cb];
    const uint32_t page = out_of_order ? out_index : v.pack_next;
    if (page >= v.reserved) {
        fail("pack_tile: writes page " + std::to_string(page) + " of CB " + std::to_string(cb) + " but only " +
             std::to_string(v.reserved) + " pages are reserved (cb_reserve_back)");
    }
    if (!out_of_order) ++v.pack_next;
    uint32_t addr = v.wr + page * c.page_size;
    if (addr >= c.addr + c.page_size * c.num_pages) addr -= c.page_size * c.num_pages;
    const fmt::DataFormat f = codec_format(uint8_t(df), api);
    float tmp[kTileValues];
    const float* src = s.dst[idst];
    if (s.reduce_mask) {  // reduce_init<ROW> leaves the packer keeping only the first datum of each face row
        for (uint32_t i = 0; i < kTileValues; ++i) tmp[i] = (i % 16 == 0) ? src[i] : 0.f;
        src = tmp;
    }
    fmt::pack_tile(f, src, k.core->l1 + addr);
    k.counters.op_tiles[OP_PACK] += 1;
    record(k, EV_COMPUTE, OP_PACK, 1);
}

void check_compute_end(Kernel& k) {
    if (k.cs->regs != REGS_IDLE) {
        fail("compute kernel ended while holding the DST registers (tile_regs_acquire/commit/wait/release incomplete)");
    }
}

}  // namespace ttrt
