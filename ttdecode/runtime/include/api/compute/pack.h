// Packing DST tiles into circular buffers (tt-metal 0.81.1 signatures).
#pragma once

#include <cstdint>

#include "api/compute/common_globals.h"

namespace ckernel {
ALWI void pack_init(std::uint32_t ocb, std::uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_reconfig_pack(ocb);
    ttrt_pack_geometry(ocb, "pack_init");  // llk_pack_init programs the packer for ocb's tile shape
}
template <bool out_of_order_output = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void pack_tile(std::uint32_t ifrom_dst, std::uint32_t icb, std::uint32_t output_tile_index = 0) {
    ttrt_pack_tile(ifrom_dst, icb, output_tile_index, out_of_order_output ? 1 : 0);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void pack_block(std::uint32_t ifrom_dst, std::uint32_t icb, std::uint32_t ntiles) {
    for (std::uint32_t i = 0; i < ntiles; ++i) ttrt_pack_tile(ifrom_dst + i, icb, 0, 0);
}
}  // namespace ckernel
