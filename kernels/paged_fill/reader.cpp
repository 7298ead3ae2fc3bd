// SPDX-License-Identifier: Apache-2.0
//
// paged_fill_cache reader (NCRISC). The prompt's rows [1, NKV, S, D] in tiles: key-tile row i of this
// core's range (i = h * seq_tiles + t: KV head h, positions [32 t, 32 t + 32)) is the d_tiles
// consecutive tiles from page i * d_tiles; each row is read into cb_rows and pushed for the writer.

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "common.hpp"

using namespace paged_fill;

namespace {

constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t tile_bytes = get_named_compile_time_arg_val("tile_bytes");

}  // namespace

void kernel_main() {
    // Common runtime args (the same on every core): the rows' address. Per-core runtime args: the first
    // key-tile row of this core and the row count.
    const uint32_t rows_addr = get_common_arg_val<uint32_t>(0);
    const uint32_t first_row = get_arg_val<uint32_t>(0);
    const uint32_t num_rows = get_arg_val<uint32_t>(1);

    const InterleavedAddrGen<true> rows_gen = {.bank_base_address = rows_addr, .page_size = tile_bytes};
    for (uint32_t i = first_row; i < first_row + num_rows; ++i) {
        cb_reserve_back(cb_rows, d_tiles);
        const uint32_t l1 = get_write_ptr(cb_rows);
        for (uint32_t j = 0; j < d_tiles; ++j) {
            noc_async_read(rows_gen.get_noc_addr(i * d_tiles + j), l1 + j * tile_bytes, tile_bytes);
        }
        noc_async_read_barrier();
        cb_push_back(cb_rows, d_tiles);
    }
}
