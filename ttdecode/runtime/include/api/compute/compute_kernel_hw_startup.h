// Compute hardware start-up: sets the unpacker (srcA, srcB) and packer data formats.
#pragma once

#include "api/compute/common_globals.h"
#include "api/compute/src_order.h"

namespace ckernel {
template <SrcOrder src_order = SrcOrder::Regular>
ALWI void compute_kernel_hw_startup(uint32_t icb0, uint32_t icb1, uint32_t ocb) {
    constexpr bool reverse = (src_order == SrcOrder::Reverse);
    ttrt_hw_startup(reverse ? icb1 : icb0, reverse ? icb0 : icb1, ocb);
}
ALWI void compute_kernel_hw_startup(uint32_t icb0, uint32_t ocb) { compute_kernel_hw_startup(icb0, icb0, ocb); }
}  // namespace ckernel
