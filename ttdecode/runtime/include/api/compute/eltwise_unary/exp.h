// exp on a DST tile (tt-metal 0.81.1 signatures), run by the host runtime with the LLK's algorithm for
// the template arguments: approx -> Schraudolph's bit trick after clamping the input at -88.5 (the
// init's `scale` folds into its constants; exp_tile's scale_en is not used on that path); accurate with
// an fp32 is_fp32_dest_acc_en -> the Cody-Waite + polynomial fp32 exp; accurate otherwise -> exp_21f
// rounded to bf16. With scale_en the accurate paths first multiply by the bf16 `scale`.
#pragma once

#include "api/compute/common_globals.h"
#include "ttrt/sfpu_flags.h"

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
    static_assert(!approx || input_clamping == InputClamping::ClampToNegative,
                  "exp_tile_init: approx with InputClamping::None (the unclamped fast exp) is not modelled by the "
                  "host runtime");
    ttrt_sfpu_init(1 /*SF_EXP*/,
                   (approx ? TTRT_SFPU_APPROX : 0) | (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) |
                       (input_clamping == InputClamping::ClampToNegative ? TTRT_SFPU_CLAMP_NEG : 0),
                   scale, "exp_tile_init");
}
template <
    bool approx = false,
    bool scale_en = false,
    InputClamping input_clamping = InputClamping::ClampToNegative,
    int iterations = 8,
    bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void exp_tile(uint32_t idst, VectorMode vector_mode = VectorMode::RC, uint16_t scale = p_sfpu::kCONST_1_FP16B) {
    static_assert(iterations >= 1 && iterations <= 8, "exp_tile: iterations 1..8 (vector steps per face)");
    static_assert(!approx || input_clamping == InputClamping::ClampToNegative,
                  "exp_tile: approx with InputClamping::None (the unclamped fast exp) is not modelled by the host "
                  "runtime");
    ttrt_sfpu_unary(1 /*SF_EXP*/, idst, int(vector_mode), uint32_t(scale),
                    (approx ? TTRT_SFPU_APPROX : 0) | (scale_en ? TTRT_SFPU_SCALE_EN : 0) |
                        (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) |
                        (input_clamping == InputClamping::ClampToNegative ? TTRT_SFPU_CLAMP_NEG : 0) |
                        ttrt_sfpu_iterations_flag(iterations),
                    "exp_tile");
}
}  // namespace ckernel
