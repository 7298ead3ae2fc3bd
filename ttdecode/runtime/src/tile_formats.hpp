// Tenstorrent tile formats for the host runtime: byte images of 32x32 tiles in float32, bfloat16,
// bfloat8_b and bfloat4_b, bit-identical to ttdecode/core/formats.py (which is pinned to ttnn 0.81.1's
// host packer by tests/test_formats_ttnn.py).
//
// Tile order: a tile is four 16x16 faces (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right),
// each row-major. The pack/unpack functions here take and give 1024 floats in ROW-MAJOR 32x32 order
// (untilized); `tile_order_index` maps a row-major (r, c) to its position in tile order.
//
// Byte images (little-endian):
//   Float32   : 1024 x 4 bytes, IEEE bits, tile order.
//   Float16_b : 1024 x 2 bytes, the float32 rounded to its top 16 bits (nearest, ties to even;
//               NaN -> 0x7FC0), tile order.
//   Bfp8_b    : 64 shared exponents (one per face row: face 0 rows 0..15, face 1 rows 0..15, ...),
//               then 1024 codes of 1 byte (sign bit 7, magnitude bits 6..0), tile order.
//   Bfp4_b    : 64 shared exponents, then 1024 codes of 4 bits (sign bit 3, magnitude 2..0);
//               value 2k in the low nibble of byte k, value 2k+1 in the high nibble.
// Block-float rules (per group of 16 values): see ttdecode/core/formats.py's module docstring.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ttdecode::formats {

// Same numbering as ttdecode.core.formats.DataType's order (float32, bfloat16, bfloat8_b, bfloat4_b).
enum class DataFormat : uint8_t { Float32 = 0, Float16_b = 1, Bfp8_b = 2, Bfp4_b = 3 };

constexpr uint32_t kTileDim = 32;
constexpr uint32_t kFaceDim = 16;
constexpr uint32_t kTileValues = kTileDim * kTileDim;
constexpr uint32_t kBfpGroup = kFaceDim;
constexpr uint32_t kBfpExponentBytes = kTileValues / kBfpGroup;  // 64

inline bool is_valid_format(uint32_t fmt) { return fmt <= static_cast<uint32_t>(DataFormat::Bfp4_b); }

inline const char* format_name(DataFormat fmt) {
    switch (fmt) {
        case DataFormat::Float32: return "Float32";
        case DataFormat::Float16_b: return "Float16_b";
        case DataFormat::Bfp8_b: return "Bfp8_b";
        case DataFormat::Bfp4_b: return "Bfp4_b";
    }
    return "unknown";
}

[[noreturn]] inline void throw_bad_format(DataFormat fmt) {
    throw std::invalid_argument("ttdecode::formats: unknown DataFormat " +
                                std::to_string(static_cast<unsigned>(fmt)) +
                                " (expected Float32=0, Float16_b=1, Bfp8_b=2, Bfp4_b=3)");
}

// Bytes of one 32x32 tile: 4096, 2048, 1088, 576.
inline uint32_t tile_size_bytes(DataFormat fmt) {
    switch (fmt) {
        case DataFormat::Float32: return 4 * kTileValues;
        case DataFormat::Float16_b: return 2 * kTileValues;
        case DataFormat::Bfp8_b: return kBfpExponentBytes + kTileValues;
        case DataFormat::Bfp4_b: return kBfpExponentBytes + kTileValues / 2;
    }
    throw_bad_format(fmt);
}

// Position of row-major element (r, c) of a 32x32 tile in tile (face) order.
constexpr uint32_t tile_order_index(uint32_t r, uint32_t c) {
    return ((r / kFaceDim) * 2 + (c / kFaceDim)) * (kFaceDim * kFaceDim) + (r % kFaceDim) * kFaceDim + (c % kFaceDim);
}

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// float32 bits -> bfloat16 bits: nearest, ties to even; any NaN -> 0x7FC0.
inline uint16_t bf16_bits_from_float_bits(uint32_t u) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        return 0x7FC0u;
    }
    const uint32_t lsb = (u >> 16) & 1u;
    return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

inline uint16_t float_to_bf16_bits(float f) { return bf16_bits_from_float_bits(float_bits(f)); }

inline float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Magnitude bits (implicit one included) of a block-float code: 7 for Bfp8_b, 3 for Bfp4_b.
inline uint32_t bfp_magnitude_bits(DataFormat fmt) {
    if (fmt == DataFormat::Bfp8_b) return 7;
    if (fmt == DataFormat::Bfp4_b) return 3;
    throw std::invalid_argument(std::string("ttdecode::formats: ") + format_name(fmt) + " is not a block-float format");
}

// Shared exponent of a group of 16 float32 values: the largest biased exponent field.
inline uint8_t bfp_shared_exponent(const uint32_t* bits16) {
    uint32_t e = 0;
    for (uint32_t i = 0; i < kBfpGroup; ++i) {
        const uint32_t ei = (bits16[i] >> 23) & 0xFFu;
        e = ei > e ? ei : e;
    }
    return static_cast<uint8_t>(e);
}

// Code of one float32 value (bits) under shared exponent `shared` with `mag_bits` magnitude bits.
// Precondition: shared >= the value's exponent field (true for bfp_shared_exponent of its group).
inline uint8_t bfp_encode(uint32_t bits, uint32_t shared, uint32_t mag_bits) {
    const uint32_t exp = (bits >> 23) & 0xFFu;
    if (exp == 0) {
        return 0;  // zeros and denormals
    }
    const uint32_t shift = shared > exp ? shared - exp : 0u;
    uint32_t sig = (bits & 0x7FFFFFu) | 0x800000u;
    sig = shift >= 24 ? 0u : (sig >> shift);
    const uint32_t drop = 24 - mag_bits;
    const uint32_t rest = sig & ((1u << drop) - 1u);
    uint32_t mag = sig >> drop;
    const uint32_t tie = 1u << (drop - 1);
    if (rest > tie || (rest == tie && (mag & 1u))) {
        mag += 1;
    }
    const uint32_t max_mag = (1u << mag_bits) - 1u;
    if (mag > max_mag) {
        mag = max_mag;
    }
    const uint32_t sign = mag != 0 ? (bits >> 31) : 0u;
    return static_cast<uint8_t>((sign << mag_bits) | mag);
}

// float32 bits of a code under shared exponent `shared` with `mag_bits` magnitude bits.
inline uint32_t bfp_decode(uint8_t code, uint32_t shared, uint32_t mag_bits) {
    const uint32_t sign = (code >> mag_bits) & 1u;
    uint32_t mag = code & ((1u << mag_bits) - 1u);
    if (mag == 0) {
        return sign << 31;
    }
    uint32_t k = 0;
    while ((mag & (1u << (mag_bits - 1))) == 0) {
        mag <<= 1;
        ++k;
    }
    if (k > shared) {
        return 0;  // below the exponent range: flushed to +0
    }
    const uint32_t frac = (mag << 1) & ((1u << mag_bits) - 1u);
    return (sign << 31) | ((shared - k) << 23) | (frac << (23 - mag_bits));
}

// Pack 1024 row-major floats into one tile image of `fmt` (tile_size_bytes(fmt) bytes at dst).
inline void pack_tile(DataFormat fmt, const float* row_major, uint8_t* dst) {
    uint32_t bits[kTileValues];  // tile order
    for (uint32_t r = 0; r < kTileDim; ++r) {
        for (uint32_t c = 0; c < kTileDim; ++c) {
            bits[tile_order_index(r, c)] = float_bits(row_major[r * kTileDim + c]);
        }
    }
    switch (fmt) {
        case DataFormat::Float32:
            for (uint32_t i = 0; i < kTileValues; ++i) {
                const uint32_t u = bits[i];
                for (uint32_t b = 0; b < 4; ++b) dst[4 * i + b] = static_cast<uint8_t>(u >> (8 * b));
            }
            return;
        case DataFormat::Float16_b:
            for (uint32_t i = 0; i < kTileValues; ++i) {
                const uint16_t h = bf16_bits_from_float_bits(bits[i]);
                dst[2 * i] = static_cast<uint8_t>(h);
                dst[2 * i + 1] = static_cast<uint8_t>(h >> 8);
            }
            return;
        case DataFormat::Bfp8_b:
        case DataFormat::Bfp4_b: {
            const uint32_t mag_bits = bfp_magnitude_bits(fmt);
            uint8_t* body = dst + kBfpExponentBytes;
            if (fmt == DataFormat::Bfp4_b) std::memset(body, 0, kTileValues / 2);
            for (uint32_t g = 0; g < kBfpExponentBytes; ++g) {
                const uint32_t* group = bits + g * kBfpGroup;
                const uint8_t shared = bfp_shared_exponent(group);
                dst[g] = shared;
                for (uint32_t j = 0; j < kBfpGroup; ++j) {
                    const uint32_t i = g * kBfpGroup + j;
                    const uint8_t code = bfp_encode(group[j], shared, mag_bits);
                    if (fmt == DataFormat::Bfp8_b) {
                        body[i] = code;
                    } else {
                        body[i / 2] = static_cast<uint8_t>(body[i / 2] | (code << (4 * (i % 2))));
                    }
                }
            }
            return;
        }
    }
    throw_bad_format(fmt);
}

// Unpack one tile image of `fmt` at src into 1024 row-major floats.
inline void unpack_tile(DataFormat fmt, const uint8_t* src, float* row_major) {
    uint32_t bits[kTileValues];  // tile order
    switch (fmt) {
        case DataFormat::Float32:
            for (uint32_t i = 0; i < kTileValues; ++i) {
                uint32_t u = 0;
                for (uint32_t b = 0; b < 4; ++b) u |= static_cast<uint32_t>(src[4 * i + b]) << (8 * b);
                bits[i] = u;
            }
            break;
        case DataFormat::Float16_b:
            for (uint32_t i = 0; i < kTileValues; ++i) {
                bits[i] = (static_cast<uint32_t>(src[2 * i]) | (static_cast<uint32_t>(src[2 * i + 1]) << 8)) << 16;
            }
            break;
        case DataFormat::Bfp8_b:
        case DataFormat::Bfp4_b: {
            const uint32_t mag_bits = bfp_magnitude_bits(fmt);
            const uint8_t* body = src + kBfpExponentBytes;
            for (uint32_t i = 0; i < kTileValues; ++i) {
                const uint8_t code = fmt == DataFormat::Bfp8_b ? body[i]
                                                               : static_cast<uint8_t>((body[i / 2] >> (4 * (i % 2))) & 0xFu);
                bits[i] = bfp_decode(code, src[i / kBfpGroup], mag_bits);
            }
            break;
        }
        default:
            throw_bad_format(fmt);
    }
    for (uint32_t r = 0; r < kTileDim; ++r) {
        for (uint32_t c = 0; c < kTileDim; ++c) {
            row_major[r * kTileDim + c] = bits_float(bits[tile_order_index(r, c)]);
        }
    }
}

}  // namespace ttdecode::formats
