// Umbrella compute header (tt-metal 0.81.1 layout): the common calls plus log_tile.
#pragma once

#include <cstdint>

#include "api/compute/common_globals.h"  // as the real one: not common.h (cb_api, reg_api, pack, hw_startup)
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
// sfpu_reduce (SFPU, fp32 compare-and-swap on DST): only PoolType::MAX with ReduceDim::REDUCE_ROW is
// modelled. Over the ct_dim x rt_dim block of DST tiles from idst, column 0 of the first tile of each
// tile row gets the exact row max; the other tiles' column 0 their own row max; every other element of
// the block is left undefined (the runtime fills it with NaN). `format` must be DST's
// (Float32 with fp32_dest_acc_en, Float16_b without).
template <PoolType pool_type, DataFormat format, ReduceDim reduce_dim = ReduceDim::REDUCE_COL,
          bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sfpu_reduce(uint32_t idst, uint32_t ct_dim = 1, uint32_t rt_dim = 1) {
    ttrt_sfpu_reduce(int(pool_type), int(format), int(reduce_dim), idst, ct_dim, rt_dim);
}
template <PoolType pool_type, DataFormat format, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sfpu_reduce_init() {
    if (pool_type != PoolType::MAX) ttrt_fail("sfpu_reduce_init: only PoolType::MAX is modelled by the host runtime");
    ttrt_sfpu_init(14 /*SF_REDUCE_MAX*/, 0, uint32_t(format), "sfpu_reduce_init");
}
}  // namespace ckernel
