// Flags the SFPU compute API headers pass to the host runtime with an init or op (ttrt::sfpu::Flag in
// src/sfpu.hpp): which LLK algorithm the call's template arguments select.
#pragma once

namespace ckernel {
constexpr int TTRT_SFPU_FP32_TEMPLATE = 1;  // the call's is_fp32_dest_acc_en
constexpr int TTRT_SFPU_NEAREST_EVEN = 2;   // DstRoundingMode::NearestEven
constexpr int TTRT_SFPU_APPROX = 4;         // approximation mode
constexpr int TTRT_SFPU_SCALE_EN = 8;       // exp_tile's scale_en
constexpr int TTRT_SFPU_FAST_APPROX = 16;   // log's fast_and_approx
constexpr int TTRT_SFPU_CLAMP_NEG = 32;     // exp's InputClamping::ClampToNegative
// The call's ITERATIONS (vector steps per face application), in bits 8-11; 0 there means 8 (whole faces).
constexpr int TTRT_SFPU_ITERATIONS_SHIFT = 8;
constexpr int ttrt_sfpu_iterations_flag(int iterations) {
    return iterations == 8 ? 0 : (iterations << TTRT_SFPU_ITERATIONS_SHIFT);
}
}  // namespace ckernel
