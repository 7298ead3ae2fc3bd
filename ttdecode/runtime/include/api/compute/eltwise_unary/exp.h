// exp on a DST tile (tt-metal 0.81.1 signatures). Exact expf in every mode; the approximation flag is
// recorded, not modelled. With scale_en the input is first multiplied by the bf16 `scale`.
#pragma once

#include "api/compute/common_globals.h"

namespace ckernel {
enum class InputClamping : uint8_t {
    ClampToNegative = 1,
    None = 0,
};
template <
    bool approx = false,
    uint32_t scale = 0x3F800000,
    InputClamping input_clamping = InputClamping::ClampToNegative,
    bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void exp_tile_init() {
    static_assert(scale == 0x3F800000, "exp_tile_init: a non-default scale is not modelled");
    ttrt_sfpu_init(1 /*SF_EXP*/, approx ? 1 : 0, "exp_tile_init");
}
template <
    bool approx = false,
    bool scale_en = false,
    InputClamping input_clamping = InputClamping::ClampToNegative,
    int iterations = 8,
    bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void exp_tile(uint32_t idst, VectorMode vector_mode = VectorMode::RC, uint16_t scale = p_sfpu::kCONST_1_FP16B) {
    ttrt_sfpu_unary(1 /*SF_EXP*/, idst, int(vector_mode), scale_en ? (uint32_t(scale) << 16) : 0u, "exp_tile");
}
}  // namespace ckernel
