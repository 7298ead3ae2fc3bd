// 1/x on a DST tile (tt-metal 0.81.1 signatures), run with the LLK's algorithm: quadratic seed on the
// mantissa, then one Newton step (approximate mode, or a BF16 dest_acc with bf16 rounding) or two
// (FP32 dest_acc). ReciprocalApproxMode::Default follows the kernel's math_approx_mode (APPROX).
#pragma once

#include "api/compute/common_globals.h"
#include "ttrt/sfpu_flags.h"

namespace ckernel {
enum class ReciprocalDestAcc { BF16, FP32 };
enum class ReciprocalApproxMode { Default, Precise, Approximate };
template <
    ReciprocalDestAcc dest_acc = DST_ACCUM_MODE ? ReciprocalDestAcc::FP32 : ReciprocalDestAcc::BF16,
    ReciprocalApproxMode approximation = ReciprocalApproxMode::Default>
ALWI void recip_tile_init() {
    constexpr bool approximate = approximation == ReciprocalApproxMode::Default
                                     ? APPROX
                                     : approximation == ReciprocalApproxMode::Approximate;
    ttrt_sfpu_init(2 /*SF_RECIP*/,
                   (approximate ? TTRT_SFPU_APPROX : 0) |
                       (dest_acc == ReciprocalDestAcc::FP32 ? TTRT_SFPU_FP32_TEMPLATE : 0),
                   0, "recip_tile_init");
}
template <
    ReciprocalDestAcc dest_acc = DST_ACCUM_MODE ? ReciprocalDestAcc::FP32 : ReciprocalDestAcc::BF16,
    ReciprocalApproxMode approximation = ReciprocalApproxMode::Default>
ALWI void recip_tile(uint32_t idst, VectorMode vector_mode = VectorMode::RC) {
    constexpr bool approximate = approximation == ReciprocalApproxMode::Default
                                     ? APPROX
                                     : approximation == ReciprocalApproxMode::Approximate;
    ttrt_sfpu_unary(2 /*SF_RECIP*/, idst, int(vector_mode), 0,
                    (approximate ? TTRT_SFPU_APPROX : 0) |
                        (dest_acc == ReciprocalDestAcc::FP32 ? TTRT_SFPU_FP32_TEMPLATE : 0),
                    "recip_tile");
}
}  // namespace ckernel
