// SPDX-License-Identifier: Apache-2.0
//
// rotary_kv_append compute (TRISC0-2). Per user: the q tile rows (if any) and the k tile rows are
// rotated, y = x * cos + rotate_half(x) * sin, the v tile rows copied; each result is packed to its
// output CB (q: bf16; k, v: the cache's format, so the packer does the one rounding to the cache).
//
// Numbers. rotate_half(x) is a matmul of the bf16 x tiles (srcB) by blocks holding only 0, +1 and
// -1 (srcA) at HiFi4 into the fp32 DST: one non-zero product per output, exact. x (bf16 through
// srcA) and cos / sin (fp32 CBs unpacked straight to DST) arrive exactly; the products and the sum
// are SFPU ops in fp32 (one rounding each, as float32 torch computes x * cos + rot * sin). Columns
// past rotary_dim have cos 1 and sin 0 and rotate to 0, so they pass through unchanged; tiles
// wholly past it are copied.

#include <stdint.h>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/cb_api.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"
#include "api/compute/matmul.h"
#include "api/compute/eltwise_binary_sfpu.h"
#include "common.hpp"

using namespace rotary_append;

namespace {

constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t rot_tiles = get_named_compile_time_arg_val("rot_tiles");
constexpr uint32_t q_row_tiles = get_named_compile_time_arg_val("q_row_tiles");  // 0: no q
constexpr uint32_t kv_row_tiles = get_named_compile_time_arg_val("kv_row_tiles");
constexpr uint32_t num_pairs = get_named_compile_time_arg_val("num_pairs");
// Runtime args: num_users, then num_pairs (output tile, source tile) pairs sorted by output tile;
// pair p's block is tile p of cb_trans.
constexpr uint32_t pairs_base = 1;

inline void copy_to_dst(uint32_t cb, uint32_t tile, uint32_t dst) {
    reconfig_data_format_srca(cb);
    copy_init(cb);
    copy_tile(cb, tile, dst);
}

// Pack DST tile `dst` to page `page` of out_cb's reserved row.
inline void pack_result(uint32_t dst, uint32_t out_cb, uint32_t page) {
    tile_regs_commit();
    tile_regs_wait();
    pack_reconfig_data_format(out_cb);
    pack_tile<true>(dst, out_cb, page);
    tile_regs_release();
}

// One tile row of cb_x (d_tiles pages) to out_cb, rotated or copied.
void process_row(uint32_t out_cb, bool rotate) {
    cb_wait_front(cb_x, d_tiles);
    cb_reserve_back(out_cb, d_tiles);
    uint32_t p = 0;  // next pair
    for (uint32_t j = 0; j < d_tiles; ++j) {
        tile_regs_acquire();
        if (!rotate || j >= rot_tiles) {
            copy_to_dst(cb_x, j, 0);
            pack_result(0, out_cb, j);
            continue;
        }
        // DST 0 = rotate_half(x) for output tile j: the sum over its source tiles.
        reconfig_data_format(cb_trans, cb_x);  // matmul: in1 (blocks) -> srcA, in0 (x) -> srcB
        matmul_init(cb_x, cb_trans);
        while (p < num_pairs && get_arg_val<uint32_t>(pairs_base + 2 * p) == j) {
            matmul_tiles(cb_x, cb_trans, get_arg_val<uint32_t>(pairs_base + 2 * p + 1), p, 0);
            ++p;
        }
        copy_to_dst(cb_x, j, 1);      // x
        copy_to_dst(cb_cos, j, 2);    // cos
        mul_binary_tile_init();
        mul_binary_tile(1, 2, 1);     // x * cos
        copy_to_dst(cb_sin, j, 2);    // sin
        mul_binary_tile_init();
        mul_binary_tile(0, 2, 0);     // rotate_half(x) * sin
        add_binary_tile_init();
        add_binary_tile(1, 0, 1);
        pack_result(1, out_cb, j);
    }
    cb_push_back(out_cb, d_tiles);
    cb_pop_front(cb_x, d_tiles);
}

}  // namespace

void kernel_main() {
    const uint32_t num_users = get_arg_val<uint32_t>(0);
    compute_kernel_hw_startup(cb_x, cb_trans, cb_k_out);
    cb_wait_front(cb_trans, num_pairs);
    for (uint32_t u = 0; u < num_users; ++u) {
        cb_wait_front(cb_cos, rot_tiles);
        cb_wait_front(cb_sin, rot_tiles);
        for (uint32_t r = 0; r < q_row_tiles; ++r) {
            process_row(cb_q_out, true);
        }
        for (uint32_t r = 0; r < kv_row_tiles; ++r) {
            process_row(cb_k_out, true);
        }
        for (uint32_t r = 0; r < kv_row_tiles; ++r) {
            process_row(cb_v_out, false);
        }
        cb_pop_front(cb_cos, rot_tiles);
        cb_pop_front(cb_sin, rot_tiles);
    }
    cb_pop_front(cb_trans, num_pairs);
}
