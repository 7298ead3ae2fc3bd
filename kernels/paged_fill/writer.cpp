// SPDX-License-Identifier: Apache-2.0
//
// paged_fill_cache writer (BRISC). Reads the user's page-table row once, then writes each key-tile row
// of this core's range (i = h * seq_tiles + t) where the user's position 32 t of KV head h lives: block
// page_table[user][32 t / block_size], pool key-tile row k = (block * NKV + h) * (block_size / 32) +
// (32 t % block_size) / 32. In tile pages (kv_pages "tile") tiles k * d_tiles + j, one write each; in
// key-row pages (the bank-local pool, kv_pages "key_row") page k, one write of the d_tiles tiles.
// Blocks of 16 positions (block_size 16, FILL_BLOCKS = ceil(S / 16) blocks filled): a block is one tile row
// (in key-row pages a page of its own) whose rows 16-31 are padding; rows 0-15 of input tile t go to rows
// 0-15 of block 2t's tile, rows 16-31 to rows 0-15 of block 2t + 1's (if the prompt reaches it), and the
// padding is never written.

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "common.hpp"

using namespace paged_fill;

namespace {

constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t tile_bytes = get_named_compile_time_arg_val("tile_bytes");
constexpr uint32_t seq_tiles = get_named_compile_time_arg_val("seq_tiles");        // ceil(S / 32)
constexpr uint32_t num_kv_heads = get_named_compile_time_arg_val("num_kv_heads");
constexpr uint32_t block_size = get_named_compile_time_arg_val("block_size");
constexpr uint32_t max_blocks = get_named_compile_time_arg_val("max_blocks");
constexpr bool key_row_pages = get_named_compile_time_arg_val("key_row_pages") == 1;

#ifdef FILL_BLOCKS
constexpr bool half_blocks = true;
constexpr uint32_t fill_blocks = FILL_BLOCKS;
#else
constexpr bool half_blocks = false;
constexpr uint32_t fill_blocks = 0;
#endif
static_assert(!half_blocks || block_size == TILE / 2, "FILL_BLOCKS: 16-position blocks");
constexpr uint32_t block_tiles = block_size >= TILE ? block_size / TILE : 1;
constexpr uint32_t row_bytes = d_tiles * tile_bytes;

// Rows 16 * half .. 16 * half + 15 of the tile at src (L1) to rows 0-15 (faces 0-1) of the tile at dst:
// bfloat16 one write; a block float's exponents (one byte per face row, in face-row order) and codes (face
// order) one write each.
void write_half_tile(uint32_t src, uint64_t dst, uint32_t half) {
    constexpr uint32_t exponent_bytes = tile_bytes == 2048 ? 0 : 64;  // one per face row of 16 values
    constexpr uint32_t half_codes = (tile_bytes - exponent_bytes) / 2;
    if constexpr (exponent_bytes > 0) {
        noc_async_write(src + half * exponent_bytes / 2, dst, exponent_bytes / 2);
    }
    noc_async_write(src + exponent_bytes + half * half_codes, dst + exponent_bytes, half_codes);
}

}  // namespace

void kernel_main() {
    // Common runtime args (the same on every core): the pool, the page table, the user (patched per call).
    // Per-core runtime args: the first key-tile row of this core and the row count.
    const uint32_t cache_addr = get_common_arg_val<uint32_t>(0);
    const uint32_t page_table_addr = get_common_arg_val<uint32_t>(1);
    const uint32_t user = get_common_arg_val<uint32_t>(2);
    const uint32_t first_row = get_arg_val<uint32_t>(0);
    const uint32_t num_rows = get_arg_val<uint32_t>(1);
    constexpr uint32_t page_table_row_bytes = max_blocks * sizeof(int32_t);

    const InterleavedAddrGen<true> cache_gen = {.bank_base_address = cache_addr,
                                                .page_size = key_row_pages ? row_bytes : tile_bytes};
    const InterleavedAddrGen<true> page_table_gen = {.bank_base_address = page_table_addr,
                                                     .page_size = page_table_row_bytes};
    if (num_rows == 0) {
        return;
    }
    const uint32_t page_table_l1 = get_write_ptr(cb_page_table);  // the writer's own scratch (never pushed)
    noc_async_read(page_table_gen.get_noc_addr(user), page_table_l1, page_table_row_bytes);
    noc_async_read_barrier();
    volatile tt_l1_ptr int32_t* page_table_row = reinterpret_cast<volatile tt_l1_ptr int32_t*>(page_table_l1);

    for (uint32_t i = first_row; i < first_row + num_rows; ++i) {
        const uint32_t head = i / seq_tiles;
        const uint32_t t = i % seq_tiles;
        cb_wait_front(cb_rows, d_tiles);
        const uint32_t src = get_read_ptr(cb_rows);
        if constexpr (half_blocks) {
            for (uint32_t half = 0; half < 2 && 2 * t + half < fill_blocks; ++half) {
                const uint32_t key_row = (uint32_t)page_table_row[2 * t + half] * num_kv_heads + head;
                for (uint32_t j = 0; j < d_tiles; ++j) {
                    const uint64_t dst = key_row_pages ? cache_gen.get_noc_addr(key_row, j * tile_bytes)
                                                       : cache_gen.get_noc_addr(key_row * d_tiles + j);
                    write_half_tile(src + j * tile_bytes, dst, half);
                }
            }
            noc_async_write_barrier();
            cb_pop_front(cb_rows, d_tiles);
            continue;
        }
        const uint32_t block = (uint32_t)page_table_row[t / block_tiles];
        const uint32_t key_row = (block * num_kv_heads + head) * block_tiles + t % block_tiles;
        if constexpr (key_row_pages) {
            noc_async_write(src, cache_gen.get_noc_addr(key_row), row_bytes);
        } else {
            for (uint32_t j = 0; j < d_tiles; ++j) {
                noc_async_write(src + j * tile_bytes, cache_gen.get_noc_addr(key_row * d_tiles + j), tile_bytes);
            }
        }
        noc_async_write_barrier();
        cb_pop_front(cb_rows, d_tiles);
    }
}
