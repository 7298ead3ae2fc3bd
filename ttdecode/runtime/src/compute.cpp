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
//   DST unpacks straight to DST (exact).
// * matmul_tiles: DST += A x B (B transposed if matmul_init asked). Element-wise add/sub: DST = A op B
//   (DST += ... when *_init got acc_to_dest); mul: DST += A * B always (ELWMUL accumulates; on a fresh
//   tile that is A * B). Broadcast COL uses column 0 of B, ROW row 0, SCALAR element (0, 0).
// * reduce_tile<MAX|SUM, REDUCE_ROW>: column 0 of DST gets max(previous, max_c A[r][c] * s_c) for MAX
//   (previous = -inf on an undefined tile; s_c = 2^floor(log2|S[0][c]|), the exponent-only scaling of
//   GMPOOL) or previous + sum_c A[r][c] * S[0][c] for SUM/AVG (S = the scaler tile); the other
//   columns become 0 on an undefined tile and are left alone otherwise. Between reduce_init<ROW> and
//   reduce_uninit the packer masks every packed tile to its columns 0 and 16 (the rest packs as 0).
// * SFPU ops (sfpu.cpp) run the LLK's algorithms lane by lane on the ISA's instruction models; the
//   approximation modes select them.
// * Math fidelity: matmul, mul (eltwise/bcast) and the SUM reduce run the LLK's fidelity phases on the
//   SrcA/SrcB fidelity bit slices (compute_ops.cpp; SrcASrcB.md, ELWMUL.md, MVMUL.md).
// * pack_tile converts DST to the CB's format as the packer does (chip_packer.hpp): BF16 / E8M6
//   rounding with ties away from zero, denormals and -0 -> +0, NaN -> inf, block-float groups of 16
//   sharing the largest exponent, BFP4 truncated from BFP8; Float32 from an fp32 DST is exact.
#include "compute_state.hpp"

#include <algorithm>
#include <limits>
#include <new>

#include "chip_packer.hpp"
#include "fast_unpack.hpp"

namespace ttrt {

const char* compute_op_name(int op) {
    static const char* names[kNumComputeOps] = {"matmul", "add", "sub", "mul", "add_bcast", "sub_bcast",
                                                "mul_bcast", "reduce_max", "reduce_sum", "copy", "exp", "recip",
                                                "log", "scalar", "max", "pack", "ternary", "init"};
    return op >= 0 && op < kNumComputeOps ? names[op] : "?";
}

void count_init(Kernel& k) {
    k.counters.op_tiles[OP_INIT] += 1;
    record(k, EV_COMPUTE, OP_INIT, 1);
}

ComputeState* new_compute_state(Kernel& k) {
    // A ComputeState is large (DST, tile and operand caches) and a kernel touches only part of it: it
    // lives in fresh zero pages (zeroed_pages), constructed without clearing them again, so it holds
    // what `new ComputeState()` would and pays only for the pages used.
    ComputeState* cs = new (zeroed_pages(sizeof(ComputeState), "a compute state")) ComputeState;
    cs->cap = k.dst_tiles;
    cs->unpack_to_dest = k.unpack_to_dest;
    return cs;
}

ComputeState& cs(Kernel& k) {
    if (!k.cs) fail(std::string(k.last_call) + ": a compute API call in a " + kind_name(k.kind) + " kernel");
    return *k.cs;
}

const char* df_name(int f) {
    switch (f) {
        case kUnpackToDest: return "Float32 unpacked to DST (UnpackToDestFp32)";
        case 0: return "Float32";
        case 5: return "Float16_b";
        case 6: return "Bfp8_b";
        case 7: return "Bfp4_b";
        case -1: return "(not configured)";
    }
    return "unsupported";
}

fmt::DataFormat codec_format(uint8_t df, const std::string& what) {
    switch (df) {
        case 0: return fmt::DataFormat::Float32;
        case 5: return fmt::DataFormat::Float16_b;
        case 6: return fmt::DataFormat::Bfp8_b;
        case 7: return fmt::DataFormat::Bfp4_b;
    }
    fail(what + ": data format " + std::to_string(df) + " is not modelled (Float32, Float16_b, Bfp8_b, Bfp4_b)");
}

// ------------------------------------------------------------------ state checks

void check_regs(Kernel& k, ComputeState& s, Regs want, const char* api) {
    if (s.regs == want) return;
    static const char* names[] = {"before tile_regs_acquire", "after tile_regs_acquire",
                                  "after tile_regs_commit", "after tile_regs_wait"};
    fail(std::string(api) + ": must run " + names[want] + ", but the DST registers are " + names[s.regs] +
         (want == REGS_ACQUIRED ? " (math ops go between tile_regs_acquire and tile_regs_commit)"
                                : " (pack_tile goes between tile_regs_wait and tile_regs_release)"));
    (void)k;
}

void check_dst(Kernel& k, ComputeState& s, uint32_t idst, const char* api) {
    if (idst >= uint32_t(s.cap)) {
        fail(std::string(api) + ": DST index " + std::to_string(idst) + " out of range: DST holds " +
             std::to_string(s.cap) + " tiles (fp32_dest_acc_en=" + (k.fp32_acc ? "true" : "false") +
             ", dst_full_sync_en=" + (k.full_sync ? "true" : "false") + ")");
    }
}

void check_fpu(ComputeState& s, int kind, int a, int b, const char* api, const char* init_name) {
    if (s.fpu == kind && s.fpu_a == a && (b < 0 || s.fpu_b == b)) return;
    fail(std::string(api) + ": the FPU is configured by " + s.fpu_init + ", not by " + init_name +
         " (call the op's init after any other op's init)");
}

void check_src_format(ComputeState& s, bool srca, uint32_t cb, uint8_t df, const char* api) {
    const int have = srca ? s.srca : s.srcb;
    const int want = unpack_key(s, cb, df);
    if (have == want) return;
    fail(std::string(api) + ": unpacker " + (srca ? "srcA" : "srcB") + " is configured for " + df_name(have) +
         " but CB " + std::to_string(cb) + " holds " + df_name(want) + " (call compute_kernel_hw_startup / " +
         (srca ? "reconfig_data_format_srca" : "reconfig_data_format_srcb") + " for it)");
}

// Decoded values of tile `idx` of a CB this kernel waited for (row-major floats).
Unpacked unpack(Kernel& k, ComputeState& s, uint32_t cb, uint32_t idx, const char* api) {
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
    // a 16x32 tile (2 faces) of a plain format is the first half of a 32x32 tile's image: faces 0-1;
    // an 8x32 tile is two 8x16 faces (face 0's 8 rows, then face 1's)
    const uint32_t full = fmt::tile_size_bytes(f);
    const uint32_t size = full * c.rows / 32;
    if (size > c.page_size) {
        fail(std::string(api) + ": CB " + std::to_string(cb) + " pages are " + std::to_string(c.page_size) +
             " B, smaller than a " + df_name(c.format) + " " + std::to_string(c.rows) + "x32 tile (" +
             std::to_string(size) + " B)");
    }
    const uint8_t* raw = k.core->l1 + addr;
    TileCacheEntry& e = s.cache[((addr >> 4) * 2654435761u >> 29) & 7];
    if (!(e.valid && e.addr == addr && e.format == c.format && e.rows == c.rows &&
          std::memcmp(e.raw, raw, size) == 0)) {
        std::memcpy(e.raw, raw, size);
        uint8_t image[4096];
        const uint8_t* from = e.raw;
        if (size < full) {
            // the rows a 16x32 or 8x32 tile lacks do not exist: all-ones bits, NaN in every plain format
            std::memset(image, 0xFF, full);
            const uint32_t face_row = full / 64;  // bytes of 16 datums
            const uint32_t face_rows = c.rows < 16 ? c.rows : 16;
            for (uint32_t fc = 0; fc < 2; ++fc)    // face fc's rows, at its place in a 32x32 image
                std::memcpy(image + fc * 16 * face_row, e.raw + fc * face_rows * face_row, face_rows * face_row);
            from = image;
        }
        fast_unpack_tile(f, from, e.values);
        e.addr = addr;
        e.format = c.format;
        e.rows = c.rows;
        e.valid = true;
        static uint64_t fills = 0;
        e.gen = ++fills;
    }
    return Unpacked{e.values, c.format, c.rows, e.gen};
}

int cb_rows(Kernel& k, uint32_t cb, const char* api) {
    if (cb >= uint32_t(kNumCbs) || !k.core->cbcfg[cb].present) {
        fail(std::string(api) + ": CB " + std::to_string(cb) + " is not configured on " + core_name(k.core));
    }
    return k.core->cbcfg[cb].rows;
}

// L1 bytes of one tile of a CB (its format's tile size x rows / 32): what an unpacker fetches for it
// or the packer writes (the cost model charges L1 traffic by these bytes).
uint32_t tile_l1_bytes(Kernel& k, uint32_t cb, const char* api) {
    const int rows = cb_rows(k, cb, api);
    return fmt::tile_size_bytes(codec_format(k.core->cbcfg[cb].format, api)) * uint32_t(rows) / 32;
}

static const char* shape_name(int rows) {
    return rows == 32 ? "32x32 tiles (4 faces)" : rows == 16 ? "16x32 tiles (2 faces)"
           : rows == 8 ? "8x32 tiles (2 faces of 8 rows)" : "no tile shape";
}

void set_geometry(ComputeState& s, int unit, int rows, const char* api) {
    int* f[] = {&s.srca_rows, &s.srcb_rows, &s.pack_rows};
    const char** by[] = {&s.srca_geometry, &s.srcb_geometry, &s.pack_geometry};
    *f[unit] = rows;
    *by[unit] = api;
}

void set_face_stride(ComputeState& s, int unit, int rows, const char* api) {
    (unit == 0 ? s.srca_face_rows : s.srcb_face_rows) = face_rows_of(rows);
    (unit == 0 ? s.srca_stride_by : s.srcb_stride_by) = api;
}

void fill_half_faces(float* t, uint8_t mask, float v) {
    for (int b = 0; b < 8; ++b) {
        if (!((mask >> b) & 1)) continue;
        const int f = b / 2;  // rows 8 (b % 2) .. +7 of face f
        for (uint32_t r = 8 * (b % 2); r < 8 * (b % 2) + 8; ++r) std::fill_n(t + (16 * (f / 2) + r) * 32 + 16 * (f % 2), 16, v);
    }
}

void garbage_rows(ComputeState& s, float* t, uint32_t d, uint8_t mask) {
    fill_half_faces(t, mask, std::numeric_limits<float>::quiet_NaN());
    s.defined[d] |= mask;
}

void check_unpack_geometry(ComputeState& s, bool srca, uint32_t cb, int rows, const char* api) {
    const int stride = srca ? s.srca_face_rows : s.srcb_face_rows;
    if (stride != face_rows_of(rows)) {
        fail(std::string(api) + ": unpacker " + (srca ? "srcA" : "srcB") + "'s face stride is set for " +
             std::to_string(stride) + "-row faces (by " + (srca ? s.srca_stride_by : s.srcb_stride_by) + ") but CB " +
             std::to_string(cb) + " holds " + shape_name(rows) + "; on the chip face 1 would be read from " +
             (stride > face_rows_of(rows) ? "past the tile" : "inside face 0") + ". Only compute_kernel_hw_startup "
             "and an (old, new) reconfig_data_format_src" + (srca ? "a" : "b") + " whose two CBs differ in tile "
             "shape program it (llk_unpack_common_api.h); a plain reconfig and the op inits do not");
    }
    const int have = srca ? s.srca_rows : s.srcb_rows;
    if (have == rows) return;
    fail(std::string(api) + ": unpacker " + (srca ? "srcA" : "srcB") + " is programmed for " + shape_name(have) +
         " (by " + (srca ? s.srca_geometry : s.srcb_geometry) + ") but CB " + std::to_string(cb) + " holds " +
         shape_name(rows) + "; on the chip it would unpack " + (have > rows ? "past the tile" : "part of the tile") +
         ". Only an op's init (or compute_kernel_hw_startup) programs the tile shape; a data-format reconfig "
         "does not (tt-metal issue #49266)");
}

void check_faces(ComputeState& s, uint32_t d, uint8_t mask, const char* api) {
    if ((s.defined[d] & mask) == mask) return;
    const uint8_t missing = uint8_t(mask & ~s.defined[d]);
    std::string faces;
    for (int f = 0; f < 4; ++f) {  // a whole face, or the half of it (8 rows) that lacks data
        const int m = (missing >> (2 * f)) & 3;
        if (m) faces += (faces.empty() ? "" : ", ") + std::to_string(f) + (m == 1 ? " (rows 0-7)" : m == 2 ? " (rows 8-15)" : "");
    }
    fail(std::string(api) + ": DST tile " + std::to_string(d) + " holds no data" +
         (s.defined[d] ? " in face(s) " + faces : std::string()) + " since tile_regs_acquire" +
         (s.defined[d] ? " (a 16x32 tile fills faces 0-1 only, an 8x32 tile rows 0-7 of faces 0-1)" : "") +
         " (SFPU reads of cleared DST rows are undefined on the device)");
}

float* dst_tile(Kernel& k, ComputeState& s, uint32_t idst, const char* api) {
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
    s.srca = unpack_key(s, icb0, f(icb0));
    s.srcb = unpack_key(s, icb1, f(icb1));
    s.pack = f(ocb);
    set_geometry(s, 0, k.core->cbcfg[icb0].rows, "compute_kernel_hw_startup");
    set_geometry(s, 1, k.core->cbcfg[icb1].rows, "compute_kernel_hw_startup");
    set_geometry(s, 2, k.core->cbcfg[ocb].rows, "compute_kernel_hw_startup");
    set_face_stride(s, 0, k.core->cbcfg[icb0].rows, "compute_kernel_hw_startup");
    set_face_stride(s, 1, k.core->cbcfg[icb1].rows, "compute_kernel_hw_startup");
    s.srca_xend_whole_face = false;
    s.fpu = FPU_NONE;
    s.fpu_init = "compute_kernel_hw_startup (no op init yet)";
    s.reduce_mask = false;
    s.started = true;
    count_init(k);
}

int cb_format(Kernel& k, uint32_t cb, const char* api) {
    if (cb >= uint32_t(kNumCbs) || !k.core->cbcfg[cb].present) {
        fail(std::string(api) + ": CB " + std::to_string(cb) + " is not configured on " + core_name(k.core));
    }
    return k.core->cbcfg[cb].format;
}

extern "C" void ttrt_reconfig_srca(uint32_t cb) {
    note("reconfig_data_format_srca", "%llu", cb);
    ComputeState& s = cs(cur());
    s.srca = unpack_key(s, cb, cb_format(cur(), cb, "reconfig_data_format_srca"));
    count_init(cur());
}
extern "C" void ttrt_reconfig_srcb(uint32_t cb) {
    note("reconfig_data_format_srcb", "%llu", cb);
    ComputeState& s = cs(cur());
    s.srcb = unpack_key(s, cb, cb_format(cur(), cb, "reconfig_data_format_srcb"));
    count_init(cur());
}
extern "C" void ttrt_pack_geometry(uint32_t cb, const char* api) {
    Kernel& k = cur();
    set_geometry(cs(k), 2, cb_rows(k, cb, api), api);
}
extern "C" void ttrt_reconfig_pack(uint32_t cb) {
    note("pack_reconfig_data_format", "%llu", cb);
    cs(cur()).pack = cb_format(cur(), cb, "pack_reconfig_data_format");
    count_init(cur());
}

// The (old, new) reconfigs of the LLK (llk_unpack_reconfig_data_format_srca/srcb(old, new),
// llk_pack_reconfig_data_format(old, new)) compare the two CBs and reprogram nothing when they match:
// the unpacker or packer then keeps whatever it was configured for, even when that is not `old` (a
// kernel that names the wrong old CB keeps a stale configuration, as on the chip). An unpack reconfig
// whose two CBs differ in face geometry (face_r_dim or num_faces) reprograms the formats and the face
// stride (FACE_ROW_MAJOR, llk_unpack_common_api.h); the pack one compares formats only.
static void reconfig_unpacker_from(int unit, uint32_t old_cb, uint32_t cb) {
    const char* api = unit == 0 ? "reconfig_data_format_srca" : "reconfig_data_format_srcb";
    Kernel& k = cur();
    ComputeState& s = cs(k);
    const int old_rows = cb_rows(k, old_cb, api), new_rows = cb_rows(k, cb, api);
    const bool geometry = face_rows_of(old_rows) != face_rows_of(new_rows) || (old_rows == 32) != (new_rows == 32);
    const int from = unpack_key(s, old_cb, cb_format(k, old_cb, api));
    if (geometry) {
        if (unit == 0) ttrt_reconfig_srca(cb);
        else ttrt_reconfig_srcb(cb);
        set_face_stride(s, unit, new_rows, unit == 0 ? "reconfig_data_format_srca(old, new) (tile shapes differ)"
                                                     : "reconfig_data_format_srcb(old, new) (tile shapes differ)");
    } else if (from != unpack_key(s, cb, cb_format(k, cb, api))) {
        if (unit == 0) ttrt_reconfig_srca(cb);
        else ttrt_reconfig_srcb(cb);
    } else {
        note(api, "%llu -> %llu: same format and tile shape, nothing reprogrammed", old_cb, cb);
    }
}
extern "C" void ttrt_reconfig_srca_from(uint32_t old_cb, uint32_t cb) { reconfig_unpacker_from(0, old_cb, cb); }
extern "C" void ttrt_reconfig_srcb_from(uint32_t old_cb, uint32_t cb) { reconfig_unpacker_from(1, old_cb, cb); }
extern "C" void ttrt_reconfig_pack_from(uint32_t old_cb, uint32_t cb) {
    if (cb_format(cur(), old_cb, "pack_reconfig_data_format") != cb_format(cur(), cb, "pack_reconfig_data_format")) {
        ttrt_reconfig_pack(cb);
    } else {
        note("pack_reconfig_data_format", "%llu -> %llu: same format, nothing reprogrammed", old_cb, cb);
    }
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
        std::fill(std::begin(s.defined), std::end(s.defined), uint8_t(0));  // ZEROACC of the section
    }
}

extern "C" void ttrt_fpu_init(int kind, int a, int b, uint32_t icb0, uint32_t icb1, const char* api) {
    note(api, "%llu, %llu", icb0, icb1);
    Kernel& k = cur();
    ComputeState& s = cs(k);
    const int df0 = cb_format(k, icb0, api);
    cb_format(k, icb1, api);
    s.fpu = kind;
    s.fpu_a = a;
    s.fpu_b = b;
    // copy_init / unary_bcast_init program the unpacker for their CB's path (to DST or through a
    // source register); the op must then copy a CB that takes the same path.
    if (kind == FPU_COPY || kind == FPU_UNARY_BCAST) s.fpu_b = unpacks_to_dest(s, icb0, uint8_t(df0)) ? 1 : 0;
    s.fpu_init = api;
    // The op inits program the unpackers' tile shape from their CBs (GEOMETRY_INITS below).
    const int f0 = cb_rows(k, icb0, api), f1 = cb_rows(k, icb1, api);
    if (kind == FPU_MATMUL) {  // in0 -> srcB, in1 -> srcA
        set_geometry(s, 0, f1, api);
        set_geometry(s, 1, f0, api);
    } else if (kind == FPU_COPY) {
        set_geometry(s, 0, f0, api);
    } else if (kind == FPU_UNARY_BCAST) {
        set_geometry(s, 0, f0, api);
        set_geometry(s, 1, f0, api);
    } else if (kind != FPU_NONE) {
        set_geometry(s, 0, f0, api);
        set_geometry(s, 1, f1, api);
    }
    if (kind != FPU_NONE) s.srca_xend_whole_face = false;  // the init programs unpacker A's X-end anew
    if (kind == FPU_REDUCE && b == int(0) /* REDUCE_ROW */) s.reduce_mask = true;
    count_init(k);
}

extern "C" void ttrt_reduce_uninit(void) {
    note("reduce_uninit");
    ComputeState& s = cs(cur());
    count_init(cur());
    s.reduce_mask = false;
    if (s.fpu == FPU_REDUCE) {
        s.fpu = FPU_NONE;
        s.fpu_init = "reduce_uninit (no op init since)";
    }
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
    const int rows = cb_rows(k, cb, api);
    if (s.pack_rows != rows) {
        fail(std::string("pack_tile: the packer is programmed for ") + shape_name(s.pack_rows) + " (by " +
             s.pack_geometry + ") but CB " + std::to_string(cb) + " holds " + shape_name(rows) +
             "; on the chip it would write " + (s.pack_rows > rows ? "past the page" : "part of the tile") +
             " (the packer's tile shape is programmed by compute_kernel_hw_startup and pack_reconfig_data_format)");
    }
    check_faces(s, idst, rows_mask(rows), api);
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
    if (rows == 32) {
        chip_packer::pack_tile(f, k.fp32_acc, src, k.core->l1 + addr);  // the chip's packer, not ttnn's tilizer
    } else {
        // faces 0-1 only, face_r_dim rows of each (plain formats: a face's rows are contiguous): the
        // first half of the 32x32 image for a 16x32 tile; rows 0-7 of face 0 then of face 1 for 8x32
        uint8_t image[4096];
        chip_packer::pack_tile(f, k.fp32_acc, src, image);
        const uint32_t face_row = fmt::tile_size_bytes(f) / 64;  // bytes of 16 datums
        const uint32_t face_rows = rows < 16 ? uint32_t(rows) : 16u;
        for (uint32_t fc = 0; fc < 2; ++fc)
            std::memcpy(k.core->l1 + addr + fc * face_rows * face_row, image + fc * 16 * face_row, face_rows * face_row);
    }
    k.counters.op_tiles[OP_PACK] += 1;
    // flag: the tile's rows when it is not 32x32 (the cost model's half / quarter tiles); the packer's L1 bytes
    record(k, EV_COMPUTE, OP_PACK, 1, rows == 32 ? 0 : uint8_t(rows), tile_l1_bytes(k, cb, "pack_tile"));
}

void check_compute_end(Kernel& k) {
    if (k.cs->regs != REGS_IDLE) {
        fail("compute kernel ended while holding the DST registers (tile_regs_acquire/commit/wait/release incomplete)");
    }
}

}  // namespace ttrt
