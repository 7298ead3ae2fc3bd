// Element-wise max of two DST tiles into a third (tt-metal 0.81.1 signatures).
#pragma once

#include "api/compute/common_globals.h"

namespace ckernel {
ALWI void binary_max_tile(uint32_t idst0, uint32_t idst1, uint32_t odst, VectorMode vector_mode = VectorMode::RC) {
    ttrt_sfpu_binary(10 /*SF_MAX*/, idst0, idst1, odst, int(vector_mode), 0, "binary_max_tile");
}
ALWI void binary_max_tile_init() { ttrt_sfpu_init(10 /*SF_MAX*/, 0, 0, "binary_max_tile_init"); }
}  // namespace ckernel
