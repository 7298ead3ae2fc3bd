// SPDX-License-Identifier: Apache-2.0
//
// paged_update_cache reader (NCRISC). The new rows [1, B, NKV, D] in bf16 tiles (each user's NKV heads in
// the rows of row_tiles(NKV) tile rows): per user of this core, each tile row (d_tiles consecutive tiles
// from page (user * kv_row_tiles + r) * d_tiles) is read into cb_rows and pushed for the compute kernel.
// The rows lie in interleaved DRAM or (ROWS_SHARDS defined) in the L1 shards of their holders, where
// nlp_create_qkv_heads_decode leaves them (shared/sharded_tiles.hpp).

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "common.hpp"
#include "../shared/sharded_tiles.hpp"

using namespace paged_update;

namespace {

constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t kv_row_tiles = get_named_compile_time_arg_val("kv_row_tiles");
constexpr uint32_t rows_tile_bytes = 2048;  // bf16

}  // namespace

void kernel_main() {
    // Common runtime args (the same on every core): the new rows' address. Per-core runtime args:
    // num_users, then the users.
    const uint32_t rows_addr = get_common_arg_val<uint32_t>(0);
    const uint32_t num_users = get_arg_val<uint32_t>(0);
    constexpr uint32_t users_base = 1;

#ifdef ROWS_SHARDS
    const ShardedTiles<ROWS_SHARD_PAGES, rows_tile_bytes> rows_gen = {rows_addr, ROWS_SHARD_ARGS};
#else
    const InterleavedAddrGen<true> rows_gen = {.bank_base_address = rows_addr, .page_size = rows_tile_bytes};
#endif
    for (uint32_t u = 0; u < num_users; ++u) {
        const uint32_t user = get_arg_val<uint32_t>(users_base + u);
        for (uint32_t r = 0; r < kv_row_tiles; ++r) {
            cb_reserve_back(cb_rows, d_tiles);
            const uint32_t l1 = get_write_ptr(cb_rows);
            const uint32_t first_page = (user * kv_row_tiles + r) * d_tiles;
            for (uint32_t j = 0; j < d_tiles; ++j) {
                noc_async_read(rows_gen.get_noc_addr(first_page + j), l1 + j * rows_tile_bytes, rows_tile_bytes);
            }
            noc_async_read_barrier();
            cb_push_back(cb_rows, d_tiles);
        }
    }
}
