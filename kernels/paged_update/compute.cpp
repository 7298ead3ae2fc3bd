// SPDX-License-Identifier: Apache-2.0
//
// paged_update_cache compute (TRISC0-2). Per tile row of new rows: each bf16 tile is copied to DST
// (exact) and packed to cb_packed in the cache's format: the packer does the one rounding to the cache.

#include <stdint.h>

#include "api/compute/common.h"
#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/cb_api.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/tile_move_copy.h"
#include "common.hpp"

using namespace paged_update;

namespace {

constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t kv_row_tiles = get_named_compile_time_arg_val("kv_row_tiles");

}  // namespace

void kernel_main() {
    const uint32_t num_users = get_arg_val<uint32_t>(0);
    compute_kernel_hw_startup(cb_rows, cb_packed);
    copy_init(cb_rows);
    for (uint32_t i = 0; i < num_users * kv_row_tiles; ++i) {
        cb_wait_front(cb_rows, d_tiles);
        cb_reserve_back(cb_packed, d_tiles);
        for (uint32_t j = 0; j < d_tiles; ++j) {
            tile_regs_acquire();
            copy_tile(cb_rows, j, 0);
            tile_regs_commit();
            tile_regs_wait();
            pack_tile<true>(0, cb_packed, j);
            tile_regs_release();
        }
        cb_push_back(cb_packed, d_tiles);
        cb_pop_front(cb_rows, d_tiles);
    }
}
