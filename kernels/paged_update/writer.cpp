// SPDX-License-Identifier: Apache-2.0
//
// paged_update_cache writer (BRISC). Reads every user's position once; per user of this core, each KV
// head's packed row becomes row pos % 32 of the cache tile holding position pos (through the user's
// page-table row for a paged cache), written by kernels/shared/cache_row.hpp (a cache tile read, only
// that row's bytes replaced, the tile written back). A user at a negative position writes no cache byte.

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "common.hpp"
#include "../shared/cache_row.hpp"

using namespace paged_update;

namespace {

constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t num_kv_heads = get_named_compile_time_arg_val("num_kv_heads");
constexpr uint32_t batch = get_named_compile_time_arg_val("batch");
constexpr bool paged = get_named_compile_time_arg_val("paged") == 1;
constexpr uint32_t seq_tiles = get_named_compile_time_arg_val("seq_tiles");      // contiguous: S / 32
constexpr uint32_t block_size = get_named_compile_time_arg_val("block_size");    // paged only
constexpr uint32_t max_blocks = get_named_compile_time_arg_val("max_blocks");    // paged only
// A cache page is one tile, or (kv_pages "key_row") one key-tile row of d_tiles tiles.
constexpr bool key_row_pages = get_named_compile_time_arg_val("key_row_pages") == 1;
constexpr uint32_t cache_tile_bytes = get_named_compile_time_arg_val("cache_tile_bytes");

using Cache = cache_row::CacheRows<d_tiles, num_kv_heads, paged, seq_tiles, block_size, 0, key_row_pages,
                                   cache_tile_bytes>;  // block ids not checked: the host checks host tables

}  // namespace

void kernel_main() {
    // Common runtime args (the same on every core): cache, positions, page_table (0 without paging).
    // Per-core runtime args: num_users, then the users.
    const uint32_t cache_addr = get_common_arg_val<uint32_t>(0);
    const uint32_t pos_addr = get_common_arg_val<uint32_t>(1);
    const uint32_t page_table_addr = get_common_arg_val<uint32_t>(2);
    const uint32_t num_users = get_arg_val<uint32_t>(0);
    constexpr uint32_t users_base = 1;
    constexpr uint32_t pos_bytes = batch * sizeof(int32_t);
    constexpr uint32_t page_table_row_bytes = max_blocks * sizeof(int32_t);
    constexpr uint32_t kv_row_tiles = row_tiles(num_kv_heads);

    const InterleavedAddrGen<true> cache_gen = {.bank_base_address = cache_addr, .page_size = Cache::page_bytes};

    // The writer's own scratch pages (never pushed): positions, and one user's page-table row.
    volatile tt_l1_ptr int32_t* positions = cache_row::read_int_page(pos_addr, pos_bytes, 0, get_write_ptr(cb_pos));
    uint32_t page_table_l1 = 0;
    if constexpr (paged) {
        page_table_l1 = get_write_ptr(cb_page_table);
    }
    volatile tt_l1_ptr int32_t* page_table_row = reinterpret_cast<volatile tt_l1_ptr int32_t*>(page_table_l1);

    for (uint32_t u = 0; u < num_users; ++u) {
        const uint32_t user = get_arg_val<uint32_t>(users_base + u);
        const int32_t pos = positions[user];
        if constexpr (paged) {
            if (pos >= 0) {
                cache_row::read_int_page(page_table_addr, page_table_row_bytes, user, page_table_l1);
            }
        }
        for (uint32_t r = 0; r < kv_row_tiles; ++r) {
            cb_wait_front(cb_packed, d_tiles);
            if (pos >= 0) {
                Cache::write_heads(cache_gen, get_write_ptr(cb_cache), get_read_ptr(cb_packed), r, user, (uint32_t)pos,
                                   page_table_row);
            }
            cb_pop_front(cb_packed, d_tiles);
        }
    }
}
