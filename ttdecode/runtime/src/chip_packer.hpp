// The Wormhole B0 packer's DST -> L1 format conversion, as tt-metal 0.81.1 configures it for a CB.
//
// This is what `pack_tile` writes on the chip; it is NOT ttdecode::formats / tile_formats.hpp's
// pack_tile, which follows ttnn's host tilizer (nearest-even, its own block-float rules) and is used
// for host-side conversions only.
//
// Configuration (what the JIT build and the LLK program for a CB of format F):
//   pack_src_format (tt-metal jit_build/data_format.cpp `get_single_pack_src_format`, with
//   bfp8_pack_precise = false, the ComputeConfigDescriptor default in 0.81.1):
//     fp32 DST : Float32 -> Float32, Float16_b -> Float16_b, Bfp8_b / Bfp4_b -> Bfp8_b
//     bf16 DST : Float32 -> Float16_b (unpack_conditional_dst_format of a kernel with B-exponent CBs),
//                Float16_b -> Float16_b, Bfp8_b / Bfp4_b -> Bfp8_b
//   The LLK (cpack_common.h `set_packer_config` / `reconfig_packer_data_format`) sets
//   IntermediateFormat = pack_src_format (ALU_FORMAT_SPEC_REG2_Dstacc), In_data_format = pack_src_format,
//   Out_data_format = F, Read_32b_data = fp32 DST, Read_raw (PCK_DEST_RD_CTRL_Read_int8) = 0 for float
//   formats, exponent thresholding off (only BFP*a formats with an fp32 DST turn it on), stochastic
//   rounding off (configure_unpack_AB<..., fpu_srnd_en = false, pack_srnd_en = false>).
//
// Conversions (ISA documentation, WormholeB0/TensixTile/TensixCoprocessor/Packers/FormatConversion.md):
//   early, Read_raw = 0:
//     FP32 -> FP32 (Float32 CB, fp32 DST): identity; denormals, -0 and NaN kept.
//     FP32/BF16 -> BF16 or E8M6 (IntermediateFormat BF16 / BFP8): "Rounding": round to nearest, ties
//       away from zero (on the magnitude; a carry may step into the next exponent, up to infinity);
//       denormals (exponent field 0) flushed to zero, -0 -> +0, NaN -> infinity (sign kept).
//   late:
//     BF16 -> BF16, BF16 -> FP32 (widening: the 16 low bits are zero).
//     E8M6 -> BFP8: "converted to BF16, then round to BFP8 with one shared 8b exponent per 16 datums":
//       shared exponent = the largest exponent field of the group (after the early conversion);
//       each datum's 7-bit significand (1.m6) is shifted right by (shared - own exponent), rounded to
//       nearest with ties away from zero (it cannot overflow: a shift of at least one halves it).
//     BFP8 -> BFP4: "converted to BFP8 ..., then truncate": the top 3 of the 7 magnitude bits.
//   A code whose magnitude is 0 gets sign 0: sign 1 with magnitude 0 means -2^128 / -infinity to the
//   unpacker (FloatBitPatterns.md, BFP8ToBF16), which the packer does not produce for a finite datum
//   (reading; the docs do not state it).
// Infinity in a block-float group: exponent 255 becomes the shared exponent, the finite datums of the
// group shift right by 255 - their exponent (to 0 unless within 2^7 of 2^128), the infinity keeps
// magnitude 64 (BFP8) / 4 (BFP4) and unpacks as inf.
#pragma once

#include <cstdint>
#include <cstring>

#include "tile_formats.hpp"

namespace ttrt::chip_packer {

namespace fmt = ttdecode::formats;

// Early format conversion with rounding (Read_raw = 0) to a float format with `mant_bits` mantissa
// bits (7: BF16, 6: E8M6) and an 8-bit exponent; returns fp32 bits with the dropped bits zero.
template <uint32_t mant_bits>
inline uint32_t early_round(uint32_t u) {
    static_assert(mant_bits >= 1 && mant_bits < 23, "mantissa width");
    constexpr uint32_t drop = 23 - mant_bits;
    const uint32_t sign = u & 0x80000000u;
    const uint32_t exp = (u >> 23) & 0xFFu;
    if (exp == 0) return 0;                          // zeros and denormals -> +0
    if (exp == 0xFF) return sign | 0x7F800000u;      // inf stays, NaN -> inf
    const uint32_t mag = ((u & 0x7FFFFFFFu) + (1u << (drop - 1))) & ~((1u << drop) - 1u);  // ties away
    return sign | mag;                               // a carry out of 0x7F7F... lands exactly on inf
}

// Code (sign | magnitude, 8 bits: 1 + 7) of one E8M6 datum `u` (fp32 bits from early_round<6>) under
// the group's shared exponent.
inline uint32_t bfp8_code(uint32_t u, uint32_t shared) {
    const uint32_t exp = (u >> 23) & 0xFFu;
    if (exp == 0) return 0;
    const uint32_t sig = 0x40u | ((u >> 17) & 0x3Fu);  // 1.m6 as a 7-bit integer
    const uint32_t d = shared - exp;
    uint32_t mag;
    if (d == 0) {
        mag = sig;
    } else if (d < 8) {
        mag = (sig + (1u << (d - 1))) >> d;  // round to nearest, ties away from zero
    } else {
        mag = 0;
    }
    return mag ? ((u >> 24) & 0x80u) | mag : 0u;
}

// Pack 1024 row-major DST values into one tile image of CB format `f`, as the chip's packer does.
// `fp32_dst`: fp32_dest_acc_en (DST values are fp32; otherwise they are bf16 values).
inline void pack_tile(fmt::DataFormat f, bool fp32_dst, const float* row_major, uint8_t* dst) {
    using fmt::kTileDim;
    using fmt::kTileValues;
    uint32_t in[kTileValues];
    std::memcpy(in, row_major, sizeof in);
    // Tile (face) order: face (r / 16, c / 16), then row r % 16, column c % 16.
    auto at = [&](uint32_t i) -> uint32_t {  // i in tile order -> row-major value bits
        const uint32_t face = i >> 8, r = ((face >> 1) << 4) | ((i >> 4) & 15), c = ((face & 1) << 4) | (i & 15);
        return in[r * kTileDim + c];
    };
    switch (f) {
        case fmt::DataFormat::Float32: {
            uint32_t out[kTileValues];  // little-endian in L1, as on the host
            if (fp32_dst) {
                for (uint32_t i = 0; i < kTileValues; ++i) out[i] = at(i);
            } else {
                for (uint32_t i = 0; i < kTileValues; ++i) out[i] = early_round<7>(at(i));
            }
            std::memcpy(dst, out, sizeof out);
            return;
        }
        case fmt::DataFormat::Float16_b: {
            uint16_t out[kTileValues];
            for (uint32_t i = 0; i < kTileValues; ++i) out[i] = static_cast<uint16_t>(early_round<7>(at(i)) >> 16);
            std::memcpy(dst, out, sizeof out);
            return;
        }
        case fmt::DataFormat::Bfp8_b:
        case fmt::DataFormat::Bfp4_b: {
            const bool bfp4 = f == fmt::DataFormat::Bfp4_b;
            uint8_t* body = dst + fmt::kBfpExponentBytes;
            for (uint32_t g = 0; g < fmt::kBfpExponentBytes; ++g) {
                uint32_t v[fmt::kBfpGroup];
                uint32_t shared = 0;
                for (uint32_t j = 0; j < fmt::kBfpGroup; ++j) {
                    v[j] = early_round<6>(at(g * fmt::kBfpGroup + j));
                    const uint32_t e = (v[j] >> 23) & 0xFFu;
                    shared = e > shared ? e : shared;
                }
                dst[g] = static_cast<uint8_t>(shared);
                if (!bfp4) {
                    for (uint32_t j = 0; j < fmt::kBfpGroup; ++j) body[g * 16 + j] = static_cast<uint8_t>(bfp8_code(v[j], shared));
                } else {
                    for (uint32_t j = 0; j < fmt::kBfpGroup; j += 2) {
                        uint32_t c[2];
                        for (uint32_t h = 0; h < 2; ++h) {
                            const uint32_t c8 = bfp8_code(v[j + h], shared);
                            const uint32_t mag = (c8 & 0x7Fu) >> 4;  // truncate BFP8 -> BFP4
                            c[h] = mag ? ((c8 >> 4) & 0x8u) | mag : 0u;
                        }
                        body[(g * 16 + j) / 2] = static_cast<uint8_t>(c[0] | (c[1] << 4));
                    }
                }
            }
            return;
        }
    }
    fmt::throw_bad_format(f);
}

}  // namespace ttrt::chip_packer
