// Fast tile decoding (see fast_unpack.hpp). A tile image holds its values face by face (four 16x16
// faces), each face row by row; a face row of 16 values is contiguous both in the image and in the
// row-major result, and in a block-float tile it is exactly one group sharing an exponent byte. So
// every format is decoded as 64 runs of 16 values, which the compiler vectorises (the block-float
// lookups become gathers from the 256-entry table row of the run's exponent).
#include "fast_unpack.hpp"

#include <cstring>
#include <vector>

namespace ttrt {
namespace {

namespace fmt = ttdecode::formats;

// Float bits of (shared exponent, code) for a block-float format: lut[shared << code_bits | code].
const uint32_t* bfp_lut(fmt::DataFormat f) {
    static std::vector<uint32_t> lut8, lut4;
    std::vector<uint32_t>& lut = f == fmt::DataFormat::Bfp8_b ? lut8 : lut4;
    if (lut.empty()) {
        const uint32_t mag = fmt::bfp_magnitude_bits(f);
        const uint32_t ncodes = 1u << (mag + 1);
        lut.resize(256 * ncodes);
        for (uint32_t e = 0; e < 256; ++e)
            for (uint32_t c = 0; c < ncodes; ++c) lut[e * ncodes + c] = fmt::bfp_decode(uint8_t(c), e, mag);
    }
    return lut.data();
}

// Row-major offset of run g (face g / 16, face row g % 16): tile_order_index(r, c) for the run's first value.
inline uint32_t run_offset(uint32_t g) {
    const uint32_t face = g >> 4;
    return ((face >> 1) * 16 + (g & 15)) * 32 + (face & 1) * 16;
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void unpack_runs(fmt::DataFormat f, const uint8_t* __restrict src, const uint32_t* __restrict lut,
                 uint32_t* __restrict out) {
    switch (f) {
        case fmt::DataFormat::Float32:
            for (uint32_t g = 0; g < 64; ++g) std::memcpy(out + run_offset(g), src + 64 * g, 64);
            return;
        case fmt::DataFormat::Float16_b:
            for (uint32_t g = 0; g < 64; ++g) {
                uint32_t* o = out + run_offset(g);
                const uint8_t* s = src + 32 * g;
                for (uint32_t j = 0; j < 16; ++j) o[j] = uint32_t(s[2 * j] | (s[2 * j + 1] << 8)) << 16;
            }
            return;
        case fmt::DataFormat::Bfp8_b:
            for (uint32_t g = 0; g < 64; ++g) {
                uint32_t* o = out + run_offset(g);
                const uint32_t* row = lut + (uint32_t(src[g]) << 8);
                const uint8_t* code = src + 64 + 16 * g;
                for (uint32_t j = 0; j < 16; ++j) o[j] = row[code[j]];
            }
            return;
        case fmt::DataFormat::Bfp4_b:
            for (uint32_t g = 0; g < 64; ++g) {
                uint32_t* o = out + run_offset(g);
                const uint32_t* row = lut + (uint32_t(src[g]) << 4);
                const uint8_t* code = src + 64 + 8 * g;
                for (uint32_t j = 0; j < 16; ++j) o[j] = row[(code[j >> 1] >> (4 * (j & 1))) & 0xF];
            }
            return;
    }
}

}  // namespace

void fast_unpack_tile(fmt::DataFormat f, const uint8_t* src, float* row_major) {
    switch (f) {
        case fmt::DataFormat::Float32:
        case fmt::DataFormat::Float16_b:
            unpack_runs(f, src, nullptr, reinterpret_cast<uint32_t*>(row_major));
            return;
        case fmt::DataFormat::Bfp8_b:
        case fmt::DataFormat::Bfp4_b:
            unpack_runs(f, src, bfp_lut(f), reinterpret_cast<uint32_t*>(row_major));
            return;
    }
    fmt::unpack_tile(f, src, row_major);
}

}  // namespace ttrt
