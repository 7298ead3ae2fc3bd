// Reductions with a scaler tile (tt-metal 0.81.1 signatures); REDUCE_ROW with MAX, SUM or AVG.
#pragma once

#include <cstdint>

#include "api/compute/common.h"

namespace ckernel {
template <PoolType reduce_type, ReduceDim reduce_dim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reduce_init(
    std::uint32_t icb, std::uint32_t icb_scaler, std::uint32_t ocb, std::uint32_t call_line = __builtin_LINE()) {
    (void)ocb;
    (void)call_line;
    ttrt_fpu_init(3 /*FPU_REDUCE*/, int(reduce_type), int(reduce_dim), icb, icb_scaler, "reduce_init");
}
ALWI void reduce_uninit(std::uint32_t icb = 0) {
    (void)icb;
    ttrt_reduce_uninit();
}
template <PoolType reduce_type, ReduceDim reduce_dim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reduce_tile(
    std::uint32_t icb, std::uint32_t icb_scaler, std::uint32_t itile, std::uint32_t itile_scaler, std::uint32_t idst) {
    ttrt_reduce(int(reduce_type), int(reduce_dim), icb, icb_scaler, itile, itile_scaler, idst);
}
template <PoolType reduce_type, ReduceDim reduce_dim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reduce_block(
    std::uint32_t icb,
    std::uint32_t icb_scaler,
    std::uint32_t start_itile,
    std::uint32_t itile_scaler,
    std::uint32_t start_idst,
    std::uint32_t ntiles) {
    for (std::uint32_t i = 0; i < ntiles; ++i) {
        reduce_tile<reduce_type, reduce_dim, is_fp32_dest_acc_en>(
            icb, icb_scaler, start_itile + i, itile_scaler, start_idst + i);
    }
}
}  // namespace ckernel
