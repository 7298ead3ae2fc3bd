// SPDX-License-Identifier: Apache-2.0
//
// Combine reader (NCRISC). For each tile row of this core (32 (group, head) rows), for each of the
// n partials in order: the partial's LSE tile and its dv_tiles O tiles, from the interleaved DRAM
// tensors lses [n, G, H, 1] (fp32 tiles, the value in column 0) and outs [n, G, H, Dv]. Before
// handing them to the compute kernel it makes every row whose partial holds no key weigh nothing
// exactly: rows past H in the group's last tile get LSE -inf, and every row whose LSE is -inf gets
// its O row zeroed (a partial at -inf may hold anything there, NaN included; 0 x 0 adds nothing).

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "../shared/tile_layout.hpp"
#include "cbs.hpp"

using tile_layout::FACE;
using tile_layout::TILE;
using tile_layout::face_row_offset;
using namespace lse_combine;

namespace {

constexpr uint32_t FP32_TILE_BYTES = TILE * TILE * 4;

// Zero row `row` of one O tile in L1 (its two face rows), `value_bytes` per value.
template <uint32_t value_bytes>
void zero_row(uint32_t tile_l1, uint32_t row) {
    for (uint32_t half = 0; half < 2; ++half) {
        volatile tt_l1_ptr uint32_t* words =
            reinterpret_cast<volatile tt_l1_ptr uint32_t*>(tile_l1 + face_row_offset(row, half) * value_bytes);
        for (uint32_t w = 0; w < FACE * value_bytes / sizeof(uint32_t); ++w) {
            words[w] = 0;
        }
    }
}

}  // namespace

void kernel_main() {
    constexpr uint32_t num_partials = get_named_compile_time_arg_val("num_partials");
    constexpr uint32_t dv_tiles = get_named_compile_time_arg_val("dv_tiles");
    constexpr uint32_t tile_rows = get_named_compile_time_arg_val("tile_rows");        // T = G * ceil(H / 32), per partial
    constexpr uint32_t head_tiles = get_named_compile_time_arg_val("head_tiles");       // ceil(H / 32): tile rows per group
    constexpr uint32_t heads = get_named_compile_time_arg_val("heads");            // H: real rows per group
    constexpr uint32_t o_value_bytes = get_named_compile_time_arg_val("o_value_bytes");    // 2 (bf16 O) or 4 (fp32 O)
    static_assert(o_value_bytes == 2 || o_value_bytes == 4, "O partials are bf16 or fp32 tiles");
    constexpr uint32_t o_tile_bytes = TILE * TILE * o_value_bytes;

    const uint32_t outs_addr = get_arg_val<uint32_t>(0);
    const uint32_t lses_addr = get_arg_val<uint32_t>(1);
    const uint32_t first_row = get_arg_val<uint32_t>(2);  // first tile row of this core
    const uint32_t num_rows = get_arg_val<uint32_t>(3);   // tile rows of this core

    const InterleavedAddrGen<true> o_gen = {.bank_base_address = outs_addr, .page_size = o_tile_bytes};
    const InterleavedAddrGen<true> lse_gen = {.bank_base_address = lses_addr, .page_size = FP32_TILE_BYTES};

    for (uint32_t t = first_row; t < first_row + num_rows; ++t) {
        // Rows of this tile row that are real heads; the rest pad the group's last tile.
        const uint32_t head_row0 = (t % head_tiles) * TILE;
        const uint32_t live_rows = heads - head_row0 < TILE ? heads - head_row0 : TILE;
        for (uint32_t i = 0; i < num_partials; ++i) {
            cb_reserve_back(cb_lse_in, 1);
            cb_reserve_back(cb_o_in, dv_tiles);
            const uint32_t lse_l1 = get_write_ptr(cb_lse_in);
            const uint32_t o_l1 = get_write_ptr(cb_o_in);
            noc_async_read(lse_gen.get_noc_addr(i * tile_rows + t), lse_l1, FP32_TILE_BYTES);
            for (uint32_t d = 0; d < dv_tiles; ++d) {
                noc_async_read(o_gen.get_noc_addr((i * tile_rows + t) * dv_tiles + d), o_l1 + d * o_tile_bytes,
                               o_tile_bytes);
            }
            noc_async_read_barrier();
            volatile tt_l1_ptr uint32_t* lse = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(lse_l1);
            for (uint32_t row = 0; row < TILE; ++row) {
                const uint32_t at = face_row_offset(row, 0);  // column 0 of the row
                if (row >= live_rows) {
                    lse[at] = FP32_NEG_INF;
                }
                if (lse[at] == FP32_NEG_INF) {
                    for (uint32_t d = 0; d < dv_tiles; ++d) {
                        zero_row<o_value_bytes>(o_l1 + d * o_tile_bytes, row);
                    }
                }
            }
            cb_push_back(cb_lse_in, 1);
            cb_push_back(cb_o_in, dv_tiles);
        }
    }
}
