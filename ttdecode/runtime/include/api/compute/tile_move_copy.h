// Copy a CB tile into DST (tt-metal 0.81.1 signatures); transpose != 0 in copy_init transposes it.
#pragma once

#include <cstdint>

#include "api/compute/common_globals.h"
#include "api/compute/reconfig_data_format.h"  // the real one includes these two, not common.h

namespace ckernel {
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void copy_init(
    std::uint32_t cbid,
    std::uint32_t transpose = 0,
    std::uint32_t transpose_within_16x16_face = false,
    std::uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    if (transpose_within_16x16_face) ttrt_fail("copy_init: transpose_within_16x16_face is not modelled");
    ttrt_fpu_init(4 /*FPU_COPY*/, transpose ? 1 : 0, 0, cbid, cbid, "copy_init");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void copy_tile(std::uint32_t in_cb_id, std::uint32_t in_tile_index, std::uint32_t dst_tile_index) {
    ttrt_copy_tile(in_cb_id, in_tile_index, dst_tile_index);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void copy_block(std::uint32_t in_cb_id, std::uint32_t start_in_tile_index, std::uint32_t start_dst_tile_index,
                     std::uint32_t ntiles) {
    for (std::uint32_t i = 0; i < ntiles; ++i) ttrt_copy_tile(in_cb_id, start_in_tile_index + i, start_dst_tile_index + i);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("Renamed to copy_init(). This will be removed after 20-09-2026.")]] ALWI void copy_tile_init(
    std::uint32_t cbid, std::uint32_t call_line = __builtin_LINE()) {
    copy_init<is_fp32_dest_acc_en>(cbid, 0, false, call_line);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("Renamed to copy_init(). This will be removed after 20-09-2026.")]] ALWI void copy_tile_to_dst_init_short(
    std::uint32_t cbid,
    std::uint32_t transpose = 0,
    std::uint32_t transpose_within_16x16_face = false,
    std::uint32_t call_line = __builtin_LINE()) {
    copy_init<is_fp32_dest_acc_en>(cbid, transpose, transpose_within_16x16_face, call_line);
}
}  // namespace ckernel
