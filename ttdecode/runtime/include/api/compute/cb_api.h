// Circular-buffer calls of compute kernels (tt-metal 0.81.1 signatures).
#pragma once

#include "api/compute/common_globals.h"

namespace ckernel {
ALWI void cb_wait_front(uint32_t cbid, uint32_t ntiles) { ttrt_cb_wait_front(int32_t(cbid), int32_t(ntiles)); }
ALWI void cb_pop_front(uint32_t cbid, uint32_t ntiles) { ttrt_cb_pop_front(int32_t(cbid), int32_t(ntiles)); }
ALWI void cb_reserve_back(uint32_t cbid, uint32_t ntiles) { ttrt_cb_reserve_back(int32_t(cbid), int32_t(ntiles)); }
ALWI void cb_push_back(uint32_t cbid, uint32_t ntiles) { ttrt_cb_push_back(int32_t(cbid), int32_t(ntiles)); }
// Byte address of tile `tile_index` of a CB this kernel waited for.
ALWI uint32_t get_tile_address(uint32_t cb_id, uint32_t tile_index) { return ttrt_compute_tile_address(cb_id, tile_index); }
ALWI uint32_t read_tile_value(uint32_t cb_id, uint32_t tile_index, uint32_t element_offset) {
    return reinterpret_cast<volatile uint32_t*>(uintptr_t(ttrt_compute_tile_address(cb_id, tile_index)))[element_offset];
}
}  // namespace ckernel
