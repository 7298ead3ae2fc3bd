// DST register hand-over between math and pack (tile_regs_*), as in tt-metal 0.81.1.
#pragma once

#include "api/compute/common_globals.h"

namespace ckernel {
ALWI void tile_regs_acquire() { ttrt_tile_regs(0); }
ALWI void tile_regs_wait() { ttrt_tile_regs(2); }
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void tile_regs_commit() {
    ttrt_tile_regs(1);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void tile_regs_release() {
    ttrt_tile_regs(3);
}
}  // namespace ckernel
