// Umbrella compute header (tt-metal 0.81.1 layout): the common calls plus log_tile.
#pragma once

#include <cstdint>

#include "api/compute/common.h"
#include "ttrt/sfpu_flags.h"

namespace ckernel {
template <bool fast_and_approx = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void log_tile_init() {
    ttrt_sfpu_init(3 /*SF_LOG*/,
                   (fast_and_approx ? TTRT_SFPU_FAST_APPROX : 0) | (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0), 0,
                   "log_tile_init");
}
template <bool fast_and_approx = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void log_tile(uint32_t idst) {
    ttrt_sfpu_unary(3 /*SF_LOG*/, idst, int(VectorMode::RC), 0,
                    (fast_and_approx ? TTRT_SFPU_FAST_APPROX : 0) | (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0),
                    "log_tile");
}
}  // namespace ckernel
