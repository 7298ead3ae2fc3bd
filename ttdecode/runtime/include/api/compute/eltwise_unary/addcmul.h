// addcmul on DST tiles (tt-metal 0.81.1 signatures): odst = idst0 + value * idst1 * idst2 over all
// 1024 values, in the LLK's order (value * idst1 first, then one multiply-add), fp32 on the SFPU; a
// bf16 is_fp32_dest_acc_en rounds the result to bf16 (nearest) before the store.
#pragma once

#include "api/compute/common_globals.h"
#include "ttrt/sfpu_flags.h"

namespace ckernel {
template <DataFormat data_format, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void addcmul_tile(uint32_t idst0, uint32_t idst1, uint32_t idst2, uint32_t odst, uint32_t value) {
    static_assert(data_format == DataFormat::Float32 || data_format == DataFormat::Float16_b ||
                      data_format == DataFormat::Bfp8_b,
                  "addcmul_tile: only Float32, Float16_b and Bfp8_b are allowed (calculate_addcmul)");
    ttrt_sfpu_ternary(15 /*SF_ADDCMUL*/, idst0, idst1, idst2, odst, int(VectorMode::RC), value,
                      is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0, "addcmul_tile");
}
ALWI void addcmul_tile_init() { ttrt_sfpu_init(15 /*SF_ADDCMUL*/, 0, 0, "addcmul_tile_init"); }
}  // namespace ckernel
