// SPDX-License-Identifier: Apache-2.0
//
// rotary_kv_append writer (BRISC). Per user of this core: the rotated q tile rows go to q_rot; each
// k and v head's row becomes row cur_pos % 32 of the cache tile holding position cur_pos (through
// the user's page-table row for a paged cache). A cache tile is read, only that row's bytes are
// replaced by the head's row of the packed result, and the tile is written back: in bfloat16 the
// row's 2 x 32 bytes, in bfloat8_b / bfloat4_b its two shared exponents and codes (a block-float
// group is one face row, so the row packed among other heads has the bytes it has in the cache).
// A user at -1 writes no cache byte. The writer never reads or writes outside a tensor: a position at
// or beyond the cache's capacity (S, or the page table's max_blocks x block_size) or a page-table entry
// outside the pool's num_blocks writes nothing (values on the device are not checked on the host).

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "common.hpp"

using namespace rotary_append;

namespace {

constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t q_row_tiles = get_named_compile_time_arg_val("q_row_tiles");  // 0: no q
constexpr uint32_t num_kv_heads = get_named_compile_time_arg_val("num_kv_heads");
constexpr uint32_t batch = get_named_compile_time_arg_val("batch");
constexpr bool paged = get_named_compile_time_arg_val("paged") == 1;
constexpr uint32_t seq_tiles = get_named_compile_time_arg_val("seq_tiles");      // contiguous: S / 32
constexpr uint32_t block_size = get_named_compile_time_arg_val("block_size");    // paged only
constexpr uint32_t max_blocks = get_named_compile_time_arg_val("max_blocks");    // paged only
constexpr uint32_t num_blocks = get_named_compile_time_arg_val("num_blocks");    // paged only: the pool's blocks
// 1: the positions are common runtime args (after the addresses), not read from the cur_pos tensor.
constexpr bool positions_in_args = get_named_compile_time_arg_val("positions_in_args") == 1;
// Positions a user's cache holds: S (contiguous) or max_blocks x block_size (paged).
constexpr uint32_t capacity = paged ? max_blocks * block_size : seq_tiles * TILE;
// A cache page is one tile, or (kv_pages "key_row") one key-tile row of d_tiles tiles.
constexpr bool key_row_pages = get_named_compile_time_arg_val("key_row_pages") == 1;
constexpr uint32_t cache_tile_bytes = get_named_compile_time_arg_val("cache_tile_bytes");

constexpr uint32_t q_tile_bytes = 2048;  // bf16
// Block floats: 64 exponent bytes (one per face row, in face-row order), then the codes.
constexpr uint32_t exponent_bytes = cache_tile_bytes == 2048 ? 0 : TILE * TILE / FACE;
// Bytes of one face row's values: bf16 2 per value, bfloat8_b 1, bfloat4_b 1/2.
constexpr uint32_t face_row_bytes = cache_tile_bytes == 2048 ? 2 * FACE : cache_tile_bytes == 1088 ? FACE : FACE / 2;
static_assert(cache_tile_bytes == 2048 || cache_tile_bytes == 1088 || cache_tile_bytes == 576,
              "cache tiles are bfloat16, bfloat8_b or bfloat4_b");

// Row dst_row of the cache tile at `dst` becomes row src_row of the packed tile at `src`.
void replace_row(uint32_t dst, uint32_t dst_row, uint32_t src, uint32_t src_row) {
    volatile tt_l1_ptr uint8_t* to = reinterpret_cast<volatile tt_l1_ptr uint8_t*>(dst);
    volatile tt_l1_ptr uint8_t* from = reinterpret_cast<volatile tt_l1_ptr uint8_t*>(src);
    for (uint32_t half = 0; half < 2; ++half) {
        const uint32_t to_row = face_row_offset(dst_row, half) / FACE;  // face rows in tile order
        const uint32_t from_row = face_row_offset(src_row, half) / FACE;
        if constexpr (exponent_bytes > 0) {
            to[to_row] = from[from_row];
        }
        for (uint32_t i = 0; i < face_row_bytes; ++i) {
            to[exponent_bytes + to_row * face_row_bytes + i] = from[exponent_bytes + from_row * face_row_bytes + i];
        }
    }
}

// Append one tile row of heads (d_tiles pages of out_cb, heads [r * 32, ...)) at the user's position.
void append_row(const InterleavedAddrGen<true>& cache_gen, uint32_t out_cb, uint32_t r, uint32_t user, int32_t pos,
                volatile tt_l1_ptr int32_t* page_table_row) {
    cb_wait_front(out_cb, d_tiles);
    if (pos >= 0 && (uint32_t)pos < capacity) {
        const uint32_t scratch = get_write_ptr(cb_cache);
        const uint32_t src = get_read_ptr(out_cb);
        const uint32_t p = (uint32_t)pos;
        const uint32_t end = num_kv_heads - r * TILE < TILE ? num_kv_heads - r * TILE : TILE;
        for (uint32_t h = 0; h < end; ++h) {
            const uint32_t head = r * TILE + h;
            uint32_t tile_row;  // tile row of this head's cache holding pos
            uint32_t row = p % TILE;  // pos's row in it
            if constexpr (paged) {
                const uint32_t block = (uint32_t)page_table_row[p / block_size];
                if (block >= num_blocks) {
                    continue;  // a block id outside the pool (a negative one too): nothing written
                }
                // a block is ceil(block_size / 32) tile rows: block 16 is one, its rows 16-31 padding
                tile_row = (block * num_kv_heads + head) * ((block_size + TILE - 1) / TILE) + (p % block_size) / TILE;
                row = p % block_size % TILE;
            } else {
                tile_row = (user * num_kv_heads + head) * seq_tiles + p / TILE;
            }
            for (uint32_t j = 0; j < d_tiles; ++j) {
                const uint64_t tile_addr = key_row_pages ? cache_gen.get_noc_addr(tile_row, j * cache_tile_bytes)
                                                         : cache_gen.get_noc_addr(tile_row * d_tiles + j);
                noc_async_read(tile_addr, scratch, cache_tile_bytes);
                noc_async_read_barrier();
                replace_row(scratch, row, src + j * cache_tile_bytes, h);
                noc_async_write(scratch, tile_addr, cache_tile_bytes);
                noc_async_write_barrier();  // the scratch is read again for the next tile
            }
        }
    }
    cb_pop_front(out_cb, d_tiles);
}

}  // namespace

void kernel_main() {
    // Common runtime args (the same on every core): q_rot (0 without q), k_cache, v_cache, cur_pos (0 with
    // positions_in_args), page_table (0 without paging), then (positions_in_args) the batch's positions as
    // int32 words. Per-core runtime args: num_users, then the users.
    const uint32_t q_rot_addr = get_common_arg_val<uint32_t>(0);
    const uint32_t k_cache_addr = get_common_arg_val<uint32_t>(1);
    const uint32_t v_cache_addr = get_common_arg_val<uint32_t>(2);
    const uint32_t pos_addr = get_common_arg_val<uint32_t>(3);
    const uint32_t page_table_addr = get_common_arg_val<uint32_t>(4);
    const uint32_t num_users = get_arg_val<uint32_t>(0);
    constexpr uint32_t users_base = 1;
    constexpr uint32_t positions_base = 5;  // common args before the positions (WRITER_COMMON_ARGS)
    constexpr uint32_t pos_bytes = batch * sizeof(int32_t);
    constexpr uint32_t page_table_row_bytes = max_blocks * sizeof(int32_t);

    const InterleavedAddrGen<true> q_gen = {.bank_base_address = q_rot_addr, .page_size = q_tile_bytes};
    constexpr uint32_t cache_page_bytes = key_row_pages ? d_tiles * cache_tile_bytes : cache_tile_bytes;
    const InterleavedAddrGen<true> k_gen = {.bank_base_address = k_cache_addr, .page_size = cache_page_bytes};
    const InterleavedAddrGen<true> v_gen = {.bank_base_address = v_cache_addr, .page_size = cache_page_bytes};
    const InterleavedAddrGen<true> pos_gen = {.bank_base_address = pos_addr, .page_size = pos_bytes};
    const InterleavedAddrGen<true> page_table_gen = {.bank_base_address = page_table_addr,
                                                     .page_size = page_table_row_bytes};

    // The writer's own scratch pages (never pushed): positions, and one user's page-table row.
    volatile tt_l1_ptr int32_t* positions = nullptr;
    if constexpr (!positions_in_args) {
        const uint32_t pos_l1 = get_write_ptr(cb_pos);
        noc_async_read(pos_gen.get_noc_addr(0), pos_l1, pos_bytes);
        noc_async_read_barrier();
        positions = reinterpret_cast<volatile tt_l1_ptr int32_t*>(pos_l1);
    }
    uint32_t page_table_l1 = 0;
    if constexpr (paged) {
        page_table_l1 = get_write_ptr(cb_page_table);
    }
    volatile tt_l1_ptr int32_t* page_table_row = reinterpret_cast<volatile tt_l1_ptr int32_t*>(page_table_l1);

    for (uint32_t u = 0; u < num_users; ++u) {
        const uint32_t user = get_arg_val<uint32_t>(users_base + u);
        int32_t pos;
        if constexpr (positions_in_args) {
            pos = (int32_t)get_common_arg_val<uint32_t>(positions_base + user);
        } else {
            pos = positions[user];
        }
        if constexpr (paged) {
            if (pos >= 0 && (uint32_t)pos < capacity) {
                noc_async_read(page_table_gen.get_noc_addr(user), page_table_l1, page_table_row_bytes);
                noc_async_read_barrier();
            }
        }
        for (uint32_t r = 0; r < q_row_tiles; ++r) {
            cb_wait_front(cb_q_out, d_tiles);
            const uint32_t src = get_read_ptr(cb_q_out);
            for (uint32_t j = 0; j < d_tiles; ++j) {
                noc_async_write(src + j * q_tile_bytes, q_gen.get_noc_addr((user * q_row_tiles + r) * d_tiles + j),
                                q_tile_bytes);
            }
            noc_async_write_barrier();
            cb_pop_front(cb_q_out, d_tiles);
        }
        for (uint32_t r = 0; r < row_tiles(num_kv_heads); ++r) {
            append_row(k_gen, cb_k_out, r, user, pos, page_table_row);
        }
        for (uint32_t r = 0; r < row_tiles(num_kv_heads); ++r) {
            append_row(v_gen, cb_v_out, r, user, pos, page_table_row);
        }
    }
}
