// Fast decoding of tile images for the compute model: lookup tables built from ttdecode::formats'
// own per-value decoder, so the result is bit-identical to ttdecode::formats::unpack_tile.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "tile_formats.hpp"

namespace ttrt {

// Row-major position of every tile-order position.
inline const uint16_t* tile_to_row_major() {
    static uint16_t map[1024];
    static bool ready = false;
    if (!ready) {
        for (uint32_t r = 0; r < 32; ++r)
            for (uint32_t c = 0; c < 32; ++c) map[ttdecode::formats::tile_order_index(r, c)] = uint16_t(r * 32 + c);
        ready = true;
    }
    return map;
}

// Float bits of (shared exponent, code) for a block-float format: lut[shared << code_bits | code].
inline const uint32_t* bfp_lut(ttdecode::formats::DataFormat f) {
    static std::vector<uint32_t> lut8, lut4;
    std::vector<uint32_t>& lut = f == ttdecode::formats::DataFormat::Bfp8_b ? lut8 : lut4;
    if (lut.empty()) {
        const uint32_t mag = ttdecode::formats::bfp_magnitude_bits(f);
        const uint32_t ncodes = 1u << (mag + 1);
        lut.resize(256 * ncodes);
        for (uint32_t e = 0; e < 256; ++e)
            for (uint32_t c = 0; c < ncodes; ++c) lut[e * ncodes + c] = ttdecode::formats::bfp_decode(uint8_t(c), e, mag);
    }
    return lut.data();
}

// Same result as ttdecode::formats::unpack_tile(f, src, row_major).
inline void fast_unpack_tile(ttdecode::formats::DataFormat f, const uint8_t* src, float* row_major) {
    using ttdecode::formats::DataFormat;
    const uint16_t* pos = tile_to_row_major();
    uint32_t* out = reinterpret_cast<uint32_t*>(row_major);
    switch (f) {
        case DataFormat::Float32:
            for (uint32_t i = 0; i < 1024; ++i) std::memcpy(&out[pos[i]], src + 4 * i, 4);
            return;
        case DataFormat::Float16_b:
            for (uint32_t i = 0; i < 1024; ++i) out[pos[i]] = uint32_t(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
            return;
        case DataFormat::Bfp8_b: {
            const uint32_t* lut = bfp_lut(f);
            const uint8_t* body = src + 64;
            for (uint32_t i = 0; i < 1024; ++i) out[pos[i]] = lut[(uint32_t(src[i >> 4]) << 8) | body[i]];
            return;
        }
        case DataFormat::Bfp4_b: {
            const uint32_t* lut = bfp_lut(f);
            const uint8_t* body = src + 64;
            for (uint32_t i = 0; i < 1024; ++i) {
                const uint32_t code = (body[i >> 1] >> (4 * (i & 1))) & 0xF;
                out[pos[i]] = lut[(uint32_t(src[i >> 4]) << 4) | code];
            }
            return;
        }
    }
    ttdecode::formats::unpack_tile(f, src, row_major);
}

}  // namespace ttrt
