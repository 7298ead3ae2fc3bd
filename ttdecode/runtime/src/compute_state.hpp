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
    int sfpu = SF_NONE, sfpu_param = 0;  // the SFPU init and its parameter (approx flag / format)
    const char* sfpu_init = "(no init)";
    sfpu::Consts sfpu_consts;  // LReg[12..14] as the last SFPU init programmed them
    // configured unpacker / packer formats: tt DataFormat values, + kUnpackToDest for a Float32 CB
    // unpacked straight to DST (its unpack format is Float32, not TF32)
    int srca = -1, srcb = -1, pack = -1;
    uint32_t unpack_to_dest = 0;  // bit i: CB i is in UnpackToDestFp32 mode (the kernel's settings)
    bool reduce_mask = false;
    bool started = false;
    TileCacheEntry cache[8];
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
    const float* values;
    uint8_t format;
};
Unpacked unpack(Kernel& k, ComputeState& s, uint32_t cb, uint32_t idx, const char* api);
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

}  // namespace ttrt
