// Unpacker / packer data-format reconfiguration (tt-metal 0.81.1 signatures). The runtime tracks the
// configured formats and rejects an unpack or pack through a CB of another format. The (old, new)
// forms reprogram only when the two CBs' formats differ, as the LLK does.
#pragma once

#include "api/compute/common_globals.h"
#include "api/compute/src_order.h"

namespace ckernel {
template <SrcOrder src_order = SrcOrder::Regular>
ALWI void reconfig_data_format(const uint32_t icb0_new_operand, const uint32_t icb1_new_operand) {
    constexpr bool reverse = (src_order == SrcOrder::Reverse);
    ttrt_reconfig_srca(reverse ? icb1_new_operand : icb0_new_operand);
    ttrt_reconfig_srcb(reverse ? icb0_new_operand : icb1_new_operand);
}
template <SrcOrder src_order = SrcOrder::Regular>
ALWI void reconfig_data_format(
    const uint32_t icb0_old_operand,
    const uint32_t icb0_new_operand,
    const uint32_t icb1_old_operand,
    const uint32_t icb1_new_operand) {
    constexpr bool reverse = (src_order == SrcOrder::Reverse);
    ttrt_reconfig_srca_from(reverse ? icb1_old_operand : icb0_old_operand, reverse ? icb1_new_operand : icb0_new_operand);
    ttrt_reconfig_srcb_from(reverse ? icb0_old_operand : icb1_old_operand, reverse ? icb0_new_operand : icb1_new_operand);
}
ALWI void reconfig_data_format_srca(const uint32_t srca_new_operand) { ttrt_reconfig_srca(srca_new_operand); }
ALWI void reconfig_data_format_srca(const uint32_t srca_old_operand, const uint32_t srca_new_operand) {
    ttrt_reconfig_srca_from(srca_old_operand, srca_new_operand);
}
ALWI void reconfig_data_format_srcb(const uint32_t srcb_new_operand) { ttrt_reconfig_srcb(srcb_new_operand); }
ALWI void reconfig_data_format_srcb(const uint32_t srcb_old_operand, const uint32_t srcb_new_operand) {
    ttrt_reconfig_srcb_from(srcb_old_operand, srcb_new_operand);
}
// is_tile_dim_reconfig_en: the LLK then also runs llk_pack_init(new_cb_id), which programs the packer
// for the new CB's tile shape; without it the packer keeps the tile shape it had.
template <bool is_tile_dim_reconfig_en = false>
ALWI void pack_reconfig_data_format(const uint32_t new_cb_id) {
    ttrt_reconfig_pack(new_cb_id);
    if constexpr (is_tile_dim_reconfig_en) ttrt_pack_geometry(new_cb_id, "pack_reconfig_data_format<true>");
}
template <bool is_tile_dim_reconfig_en = false>
ALWI void pack_reconfig_data_format(const uint32_t old_cb_id, const uint32_t new_cb_id) {
    ttrt_reconfig_pack_from(old_cb_id, new_cb_id);
    if constexpr (is_tile_dim_reconfig_en) ttrt_pack_geometry(new_cb_id, "pack_reconfig_data_format<true>");
}
}  // namespace ckernel
