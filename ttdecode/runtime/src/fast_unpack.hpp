// Fast decoding of tile images for the compute model: lookup tables built from ttdecode::formats'
// own per-value decoder, so the result is bit-identical to ttdecode::formats::unpack_tile (the
// runner's --self-test compares the two).
#pragma once

#include <cstdint>

#include "tile_formats.hpp"

namespace ttrt {

// Same result as ttdecode::formats::unpack_tile(f, src, row_major). fast_unpack.cpp.
void fast_unpack_tile(ttdecode::formats::DataFormat f, const uint8_t* src, float* row_major);

}  // namespace ttrt
