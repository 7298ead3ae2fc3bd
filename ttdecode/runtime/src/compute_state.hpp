// Internal state of the compute model, shared by compute.cpp (configuration, DST hand-over, pack) and
// compute_ops.cpp (the FPU and SFPU tile operations).
#pragma once

#include <cstring>
#include <string>

#include "compute.hpp"
#include "sfpu.hpp"
#include "tile_formats.hpp"

namespace ttrt {

namespace fmt = ttdecode::formats;

enum Regs { REGS_IDLE, REGS_ACQUIRED, REGS_COMMITTED, REGS_WAITED };

struct TileCacheEntry {
    uint32_t addr = 0;
    uint8_t format = 0xff;
    uint8_t rows = 0;  // tile rows (32, 16, 8)
    uint8_t raw[4096];
    float values[kTileValues];
    bool valid = false;
    uint64_t gen = 0;  // unique per fill (values), so derived data can be cached against it
};

// A matmul source tile as the MVMULs read it (compute_ops.cpp): the source register values cut into
// their two fidelity slices, and per slice which products may be skipped. Cached per unpacked tile
// (TileCacheEntry::gen), so a tile reused by many matmuls (Q, the ones tile) is sliced once.
struct MatmulOperand {
    uint64_t gen = 0;       // TileCacheEntry::gen of the tile (0: empty)
    bool transposed = false, fp32 = false;
    uint64_t used = 0;      // last use (LRU)
    float s[2][kTileValues];
    // in0 (srcB): bit t of nonzero[sl][i * 2 + h] says s[sl][i][16h + t] != 0 (NaN included)
    uint16_t nonzero[2][64];
    // in1 (srcA): bit kk of nonfinite[sl] says row kk of s[sl] holds an inf or NaN
    uint32_t nonfinite[2];
};

struct ComputeState {
    int cap = 0;
    float dst[kMaxDst][kTileValues];
    // Which half faces of each DST tile hold data written since tile_regs_acquire: bit 2f + h = rows
    // 8h .. 8h + 7 of face f (face f of a 32x32 tile is rows 16 (f / 2) .. +15, columns 16 (f % 2) ..
    // +15; see rows_mask). A 16x32 tile fills faces 0-1, an 8x32 tile rows 0-7 of faces 0-1; the rest
    // stays as cleared (undefined here: no op may read it).
    uint8_t defined[kMaxDst] = {};
    Regs regs = REGS_IDLE;
    int fpu = FPU_NONE, fpu_a = 0, fpu_b = 0;
    const char* fpu_init = "(no init)";
    int sfpu = SF_NONE, sfpu_param = 0;  // the SFPU init and its parameter (approx flag / format)
    int sfpu_flags = 0;                  // the init's flags (sfpu::Flags: approx, fp32)
    const char* sfpu_init = "(no init)";
    sfpu::Consts sfpu_consts;  // LReg[12..14] as the last SFPU init programmed them
    const char* consts_init = "(no init)";  // the init that programmed them
    // configured unpacker / packer formats: tt DataFormat values, + kUnpackToDest for a Float32 CB
    // unpacked straight to DST (its unpack format is Float32, not TF32)
    int srca = -1, srcb = -1, pack = -1;
    // The tile shape (tile rows: 32 = 32x32, 16 = 16x32, 8 = 8x32) each unpacker and the packer were
    // last programmed for, and by which call. Only the calls that program a unit's tile geometry change
    // these (see compute.cpp); a data-format reconfig does not (tt-metal issue #49266).
    int srca_rows = 0, srcb_rows = 0, pack_rows = 0;
    const char* srca_geometry = "(not configured)";
    const char* srcb_geometry = "(not configured)";
    const char* pack_geometry = "(not configured)";
    // The unpackers' face stride in L1 (Tile_x_dim / XDim = face rows x 16): 16-row faces (32x32 and
    // 16x32 tiles) or 8-row faces (8x32). Programmed by compute_kernel_hw_startup and by an (old, new)
    // reconfig whose two CBs differ in face geometry (llk_unpack_common_api.h: FACE_ROW_MAJOR); not by
    // the op inits, nor by a plain reconfig (cunpack_common.h). With the wrong stride the unpacker reads
    // face 1 of an 8x32 tile from past the tile (or face 1 of a 16-row tile from its face 0's rows 8-15).
    int srca_face_rows = 0, srcb_face_rows = 0;
    const char* srca_stride_by = "(not configured)";
    const char* srcb_stride_by = "(not configured)";
    // After an unpack-to-DST of a 32-bit tile the LLK's TEN-3868 workaround leaves unpacker A's X-end
    // at a whole 16-row face (cunpack_common.h unpack_to_dest_tile_done); only an unpack-A init
    // (copy_init, unary_bcast_init, the other op inits) sets it back to the CB's face rows. An 8x32
    // tile copied to DST meanwhile is read 256 datums per face: rows 0-7 of its faces land right,
    // rows 8-15 of each DST face get the tile's face 1 and 512 B read past the tile.
    bool srca_xend_whole_face = false;
    uint32_t unpack_to_dest = 0;  // bit i: CB i is in UnpackToDestFp32 mode (the kernel's settings)
    bool reduce_mask = false;
    bool started = false;
    TileCacheEntry cache[8];
    MatmulOperand mm_in0[8], mm_in1[4];  // prepared matmul operands (srcB / srcA), LRU
    uint64_t mm_clock = 0;
};

ComputeState& cs(Kernel& k);
constexpr int kUnpackToDest = 0x100;
// True when CB `cb` (of format `df`) is unpacked straight to DST: a Float32 CB in UnpackToDestFp32
// mode (tt-metal gives it the unpack format Float32; llk_unpack_A then writes DST, not SrcA).
inline bool unpacks_to_dest(const ComputeState& s, uint32_t cb, uint8_t df) {
    return df == 0 && cb < 32 && ((s.unpack_to_dest >> cb) & 1u);
}
// The unpacker configuration a CB needs: its format, marked when it unpacks to DST.
inline int unpack_key(const ComputeState& s, uint32_t cb, int df) {
    return df | (unpacks_to_dest(s, cb, uint8_t(df)) ? kUnpackToDest : 0);
}
const char* df_name(int f);
fmt::DataFormat codec_format(uint8_t df, const std::string& what);
int cb_format(Kernel& k, uint32_t cb, const char* api);
void check_regs(Kernel& k, ComputeState& s, Regs want, const char* api);
void check_dst(Kernel& k, ComputeState& s, uint32_t idst, const char* api);
void check_fpu(ComputeState& s, int kind, int a, int b, const char* api, const char* init_name);
void check_src_format(ComputeState& s, bool srca, uint32_t cb, uint8_t df, const char* api);
// Decoded values (row-major) of tile `idx` of a CB this kernel waited for, with the CB's data format.
// Values and format travel together: callers never read a format that an unpack in the same
// expression is still to set (argument evaluation order is unspecified in C++). `values` points into
// a small cache and stays valid only until the next unpack.
struct Unpacked {
    const float* values;  // the rows past a 16x32 or 8x32 tile's are NaN (no data)
    uint8_t format;
    uint8_t rows;         // tile rows: 32 (32x32), 16 (16x32: rows 0-15) or 8 (8x32: rows 0-7)
    uint64_t gen;  // TileCacheEntry::gen: equal gens mean equal values
};
Unpacked unpack(Kernel& k, ComputeState& s, uint32_t cb, uint32_t idx, const char* api);
// Tile rows of CB `cb` (32: 32x32, 16: 16x32, 8: 8x32).
int cb_rows(Kernel& k, uint32_t cb, const char* api);
uint32_t tile_l1_bytes(Kernel& k, uint32_t cb, const char* api);
// Every half face of a DST tile (ComputeState::defined).
constexpr uint8_t kAllRows = 0xFF;
// The half faces of DST a tile of `rows` rows occupies: all of a 32x32 tile, faces 0-1 of a 16x32
// tile, rows 0-7 of faces 0-1 of an 8x32 tile (the chip keeps DST's 16-row face pitch: an 8x32
// tile's faces start where a 32x32 tile's do).
constexpr uint8_t rows_mask(int rows) { return rows == 32 ? 0xFF : rows == 16 ? 0x0F : 0x05; }
// DST row r (0-31) of a tile belongs to half face bit rows_bit(r, column half).
constexpr int half_face_bit(uint32_t r, uint32_t c) { return int(((r / 16) * 2 + c / 16) * 2 + (r % 16) / 8); }
// The unpacker (srcA or srcB) must be programmed for the tile shape of the CB it unpacks: on the
// chip a mismatch unpacks the wrong number of faces or face rows (part of the tile, or past it).
void check_unpack_geometry(ComputeState& s, bool srca, uint32_t cb, int rows, const char* api);
// Program unit `unit` (0 srcA, 1 srcB, 2 packer) for tiles of `rows` rows, by call `api`.
void set_geometry(ComputeState& s, int unit, int rows, const char* api);
// Program unpacker `unit` (0 srcA, 1 srcB)'s face stride for tiles of `rows` rows, by call `api`.
void set_face_stride(ComputeState& s, int unit, int rows, const char* api);
// Face rows of a tile of `rows` rows (face_r_dim): 8 for 8x32 tiles, else 16.
constexpr int face_rows_of(int rows) { return rows == 8 ? 8 : 16; }
// Sets the half faces of DST tile `t` in `mask` (ComputeState::defined's bits) to `v`.
void fill_half_faces(float* t, uint8_t mask, float v);
// Rows 8-15 of faces 0-1 / all of faces 2-3 (half-face masks).
constexpr uint8_t kRows8to15 = 0x0A, kFaces2and3 = 0xF0;
// The half faces in `mask` of DST tile `d` an op leaves holding garbage (NaN here, and written: the chip
// writes them with stale source-register rows or data read past the tile).
void garbage_rows(ComputeState& s, float* t, uint32_t d, uint8_t mask);
// DST tile `d` must hold data in every half face of `mask` (SFPU reads, packs).
void check_faces(ComputeState& s, uint32_t d, uint8_t mask, const char* api);
float* dst_tile(Kernel& k, ComputeState& s, uint32_t idst, const char* api);

// ------------------------------------------------------------------ precision

inline uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Value written into DST: bf16 (nearest even) unless DST is fp32.
inline float dst_round(float x, bool fp32) {
    if (fp32) return x;
    return fmt::bf16_bits_to_float(fmt::float_to_bf16_bits(x));
}

// Operand as seen in srcA/srcB: denormals flushed; Float32 data truncated to TF32 or bf16 (the
// unpacker's format for a Default-mode Float32 CB: TF32 with fp32 accumulation, else bf16). The one
// place the SrcA/SrcB conversion lives (copy_tile, unary_bcast and the FPU ops all use it).
inline void to_src(const float* in, float* out, uint8_t df, bool fp32_acc) {
    const uint32_t keep = df == 0 ? (fp32_acc ? 0xFFFFE000u : 0xFFFF0000u) : 0xFFFFFFFFu;
    for (uint32_t i = 0; i < kTileValues; ++i) {
        uint32_t u = bits(in[i]);
        if (((u >> 23) & 0xFF) == 0) u &= 0x80000000u;
        else if (((u >> 23) & 0xFF) != 0xFF) u &= keep;
        out[i] = from_bits(u);
    }
}

// ------------------------------------------------------------------ fidelity phases (SrcASrcB.md, ELWMUL.md)

// Number of fidelity phases the LLK issues per multiply (llk_math_matmul.h / llk_math_eltwise_binary.h /
// llk_math_reduce.h: LoFi runs one, HiFiN runs N, phases 0..N-1 from FIDELITY_BASE 0).
inline int fidelity_phases(int fidelity) { return fidelity <= 0 ? 1 : fidelity; }

// SrcAFidelityBits (ELWMUL.md): phase bit 0 clear -> sign, exponent, implicit 1 and the top 4 mantissa bits;
// set -> the next 5 mantissa bits (x minus its value with those bits cleared).
inline float fid_a(float x, int phase) {
    const uint32_t u = bits(x);
    if ((phase & 1) == 0) return from_bits(u & 0xfff80000u);
    return x - from_bits(u & 0xfff83fffu);
}
// SrcBFidelityBits: phase bit 1 clear -> top 6 mantissa bits; set -> the next 4.
inline float fid_b(float x, int phase) {
    const uint32_t u = bits(x);
    if ((phase & 2) == 0) return from_bits(u & 0xfffe0000u);
    return x - from_bits(u & 0xfffe1fffu);
}

}  // namespace ttrt
