// 1/x on a DST tile (tt-metal 0.81.1 signatures); exact division, the approximation mode is recorded.
#pragma once

#include "api/compute/common_globals.h"

namespace ckernel {
enum class ReciprocalDestAcc { BF16, FP32 };
enum class ReciprocalApproxMode { Default, Precise, Approximate };
template <
    ReciprocalDestAcc dest_acc = DST_ACCUM_MODE ? ReciprocalDestAcc::FP32 : ReciprocalDestAcc::BF16,
    ReciprocalApproxMode approximation = ReciprocalApproxMode::Default>
ALWI void recip_tile_init() {
    ttrt_sfpu_init(2 /*SF_RECIP*/, approximation == ReciprocalApproxMode::Approximate ? 1 : 0, "recip_tile_init");
}
template <
    ReciprocalDestAcc dest_acc = DST_ACCUM_MODE ? ReciprocalDestAcc::FP32 : ReciprocalDestAcc::BF16,
    ReciprocalApproxMode approximation = ReciprocalApproxMode::Default>
ALWI void recip_tile(uint32_t idst, VectorMode vector_mode = VectorMode::RC) {
    ttrt_sfpu_unary(2 /*SF_RECIP*/, idst, int(vector_mode), 0, "recip_tile");
}
}  // namespace ckernel
