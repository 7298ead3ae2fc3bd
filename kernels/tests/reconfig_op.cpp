// Test kernel for the (old, new) unpacker reconfig: CB 0 holds a Float32 tile, CBs 1 and 2 bf16 tiles.
// The unpackers start configured for CB START (compute_kernel_hw_startup), then
// reconfig_data_format_srca(OLD, 2) names OLD as the previous operand, and CB 2's tile is copied
// into DST and packed to CB 16. The LLK reprograms srcA only when OLD's format differs from CB 2's.
// Defines: START, OLD (CB indices 0..2).
#include <cstdint>

#include "api/compute/cb_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/pack.h"
#include "api/compute/reg_api.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"

void kernel_main() {
    constexpr uint32_t out = 16, in = 2;
    compute_kernel_hw_startup(START, START, out);
    for (uint32_t cb = 0; cb < 3; ++cb) {
        cb_wait_front(cb, 1);
    }
    reconfig_data_format_srca(OLD, in);  // the previous operand is named OLD
    copy_init(in);
    tile_regs_acquire();
    copy_tile(in, 0, 0);
    tile_regs_commit();
    tile_regs_wait();
    cb_reserve_back(out, 1);
    pack_tile(0, out);
    cb_push_back(out, 1);
    tile_regs_release();
    for (uint32_t cb = 0; cb < 3; ++cb) {
        cb_pop_front(cb, 1);
    }
}
