// SPDX-License-Identifier: Apache-2.0
//
// Combine writer (BRISC). Makes the compute kernel's constant tiles (ones, -BIG), then writes each
// merged tile row: its dv_tiles O tiles to out [1, G, H, Dv] and its LSE tile to lse [1, G, H, 1]
// (fp32 tiles, the value in every column of a row).

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "../shared/tile_layout.hpp"
#include "cbs.hpp"

using tile_layout::TILE;
using namespace lse_combine;

namespace {

constexpr uint32_t FP32_TILE_BYTES = TILE * TILE * 4;

// Fill a bf16 tile in L1 with one value.
void fill_bf16_tile(uint32_t l1_addr, uint16_t value) {
    volatile tt_l1_ptr uint16_t* tile = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(l1_addr);
    for (uint32_t i = 0; i < TILE * TILE; ++i) {
        tile[i] = value;
    }
}

}  // namespace

void kernel_main() {
    constexpr uint32_t dv_tiles = get_named_compile_time_arg_val("dv_tiles");
    constexpr uint32_t out_value_bytes = get_named_compile_time_arg_val("out_value_bytes");  // 2 (bf16 output) or 4 (fp32)
    static_assert(out_value_bytes == 2 || out_value_bytes == 4, "the merged O is bf16 or fp32 tiles");
    constexpr uint32_t out_tile_bytes = TILE * TILE * out_value_bytes;

    const uint32_t out_addr = get_arg_val<uint32_t>(0);
    const uint32_t lse_addr = get_arg_val<uint32_t>(1);
    const uint32_t first_row = get_arg_val<uint32_t>(2);
    const uint32_t num_rows = get_arg_val<uint32_t>(3);

    const InterleavedAddrGen<true> out_gen = {.bank_base_address = out_addr, .page_size = out_tile_bytes};
    const InterleavedAddrGen<true> lse_gen = {.bank_base_address = lse_addr, .page_size = FP32_TILE_BYTES};

    // The constants stay in cb_consts for the whole kernel (the compute kernel never pops them).
    cb_reserve_back(cb_consts, 2);
    fill_bf16_tile(get_write_ptr(cb_consts), BF16_ONE);
    fill_bf16_tile(get_write_ptr(cb_consts) + TILE * TILE * 2, BF16_NEG_BIG);
    cb_push_back(cb_consts, 2);

    for (uint32_t t = first_row; t < first_row + num_rows; ++t) {
        cb_wait_front(cb_out, dv_tiles);
        const uint32_t out_l1 = get_read_ptr(cb_out);
        for (uint32_t d = 0; d < dv_tiles; ++d) {
            noc_async_write(out_l1 + d * out_tile_bytes, out_gen.get_noc_addr(t * dv_tiles + d), out_tile_bytes);
        }
        cb_wait_front(cb_lse_out, 1);
        noc_async_write(get_read_ptr(cb_lse_out), lse_gen.get_noc_addr(t), FP32_TILE_BYTES);
        noc_async_write_barrier();
        cb_pop_front(cb_out, dv_tiles);
        cb_pop_front(cb_lse_out, 1);
    }
}
