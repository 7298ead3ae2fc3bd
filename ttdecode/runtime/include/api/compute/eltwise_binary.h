// Element-wise tile add / sub / mul from two CBs (tt-metal 0.81.1 signatures).
#pragma once

#include <cstdint>

#include "api/compute/common.h"

namespace ckernel {
template <bool full_init, EltwiseBinaryType eltwise_binary_type>
ALWI void binary_tiles_init(
    std::uint32_t icb0, std::uint32_t icb1, bool acc_to_dest = false, std::uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    static const char* const names[] = {"mul_init", "div_init", "add_init", "sub_init", "less_init"};
    ttrt_fpu_init(2 /*FPU_ELTWISE*/, int(eltwise_binary_type), acc_to_dest ? 1 : 0, icb0, icb1,
                  names[int(eltwise_binary_type)]);
}
ALWI void add_init(
    std::uint32_t icb0, std::uint32_t icb1, bool acc_to_dest = false, std::uint32_t call_line = __builtin_LINE()) {
    binary_tiles_init<true, EltwiseBinaryType::ELWADD>(icb0, icb1, acc_to_dest, call_line);
}
ALWI void sub_init(
    std::uint32_t icb0, std::uint32_t icb1, bool acc_to_dest = false, std::uint32_t call_line = __builtin_LINE()) {
    binary_tiles_init<true, EltwiseBinaryType::ELWSUB>(icb0, icb1, acc_to_dest, call_line);
}
ALWI void mul_init(
    std::uint32_t icb0, std::uint32_t icb1, bool acc_to_dest = true, std::uint32_t call_line = __builtin_LINE()) {
    binary_tiles_init<true, EltwiseBinaryType::ELWMUL>(icb0, icb1, acc_to_dest, call_line);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_tiles(
    std::uint32_t icb0, std::uint32_t icb1, std::uint32_t itile0, std::uint32_t itile1, std::uint32_t idst) {
    ttrt_binary(int(EltwiseBinaryType::ELWMUL), 0, icb0, icb1, itile0, itile1, idst, "mul_tiles");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_tiles(
    std::uint32_t icb0, std::uint32_t icb1, std::uint32_t itile0, std::uint32_t itile1, std::uint32_t idst) {
    ttrt_binary(int(EltwiseBinaryType::ELWADD), 0, icb0, icb1, itile0, itile1, idst, "add_tiles");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_tiles(
    std::uint32_t icb0, std::uint32_t icb1, std::uint32_t itile0, std::uint32_t itile1, std::uint32_t idst) {
    ttrt_binary(int(EltwiseBinaryType::ELWSUB), 0, icb0, icb1, itile0, itile1, idst, "sub_tiles");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_block(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t start_itile0, std::uint32_t start_itile1,
                    std::uint32_t start_idst, std::uint32_t ntiles) {
    for (std::uint32_t i = 0; i < ntiles; ++i) {
        mul_tiles<is_fp32_dest_acc_en>(icb0, icb1, start_itile0 + i, start_itile1 + i, start_idst + i);
    }
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_block(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t start_itile0, std::uint32_t start_itile1,
                    std::uint32_t start_idst, std::uint32_t ntiles) {
    for (std::uint32_t i = 0; i < ntiles; ++i) {
        add_tiles<is_fp32_dest_acc_en>(icb0, icb1, start_itile0 + i, start_itile1 + i, start_idst + i);
    }
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_block(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t start_itile0, std::uint32_t start_itile1,
                    std::uint32_t start_idst, std::uint32_t ntiles) {
    for (std::uint32_t i = 0; i < ntiles; ++i) {
        sub_tiles<is_fp32_dest_acc_en>(icb0, icb1, start_itile0 + i, start_itile1 + i, start_idst + i);
    }
}
}  // namespace ckernel
