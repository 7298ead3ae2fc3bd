// SPDX-License-Identifier: Apache-2.0
//
// rotary_kv_append reader (NCRISC). Once: the rotate-half blocks (cb_trans). Then per user of this
// core: the user's cos and sin rows (row b % 32 of tile row b / 32 of the [B, rot_tiles * 32] fp32
// tensors), each replicated over the 32 rows of its cb_cos / cb_sin tiles so that every head row
// of the user meets its own angles; then the user's q (if any), k and v heads, one tile row (32
// heads x D) at a time in that order, heads in tile rows. Separate inputs ([1, B, heads, D]) are
// already in that layout; a packed qkv [1, B, (NH + 2 NKV) D] holds users in rows and heads along
// the columns, so each head's row is gathered face row by face row into its head row.

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "common.hpp"

using namespace rotary_append;

namespace {

constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t rot_tiles = get_named_compile_time_arg_val("rot_tiles");        // tiles holding rotated columns
constexpr uint32_t num_q_heads = get_named_compile_time_arg_val("num_q_heads");    // 0: no q
constexpr uint32_t num_kv_heads = get_named_compile_time_arg_val("num_kv_heads");
constexpr bool packed = get_named_compile_time_arg_val("packed") == 1;             // one qkv input
constexpr uint32_t num_pairs = get_named_compile_time_arg_val("num_pairs");        // rotate-half blocks

constexpr uint32_t x_tile_bytes = 2048;   // bf16
constexpr uint32_t cs_tile_bytes = 4096;  // fp32
constexpr uint32_t packed_width_tiles = (num_q_heads + 2 * num_kv_heads) * d_tiles;

// cos or sin of `user` into cb: row user % 32 of each of its rot_tiles tiles, copied to all 32 rows.
void read_angles(const InterleavedAddrGen<true>& gen, uint32_t cb, uint32_t user) {
    cb_reserve_back(cb, rot_tiles);
    const uint32_t base = get_write_ptr(cb);
    const uint32_t src_row = user % TILE;
    for (uint32_t j = 0; j < rot_tiles; ++j) {
        const uint32_t page = (user / TILE) * rot_tiles + j;
        // The user's two face rows (16 fp32 each) land in row 0 of the tile.
        for (uint32_t half = 0; half < 2; ++half) {
            noc_async_read(gen.get_noc_addr(page, face_row_offset(src_row, half) * 4),
                           base + j * cs_tile_bytes + face_row_offset(0, half) * 4, FACE * 4);
        }
    }
    noc_async_read_barrier();
    for (uint32_t j = 0; j < rot_tiles; ++j) {
        volatile tt_l1_ptr uint32_t* tile = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(base + j * cs_tile_bytes);
        for (uint32_t row = 1; row < TILE; ++row) {
            for (uint32_t half = 0; half < 2; ++half) {
                const uint32_t from = face_row_offset(0, half);
                const uint32_t to = face_row_offset(row, half);
                for (uint32_t i = 0; i < FACE; ++i) {
                    tile[to + i] = tile[from + i];
                }
            }
        }
    }
    cb_push_back(cb, rot_tiles);
}

// Tile row r of `heads` heads of `user` from a separate input [1, B, heads, D].
void read_heads_row(const InterleavedAddrGen<true>& gen, uint32_t user, uint32_t heads, uint32_t r) {
    cb_reserve_back(cb_x, d_tiles);
    const uint32_t l1 = get_write_ptr(cb_x);
    const uint32_t first_page = (user * row_tiles(heads) + r) * d_tiles;
    for (uint32_t j = 0; j < d_tiles; ++j) {
        noc_async_read(gen.get_noc_addr(first_page + j), l1 + j * x_tile_bytes, x_tile_bytes);
    }
    noc_async_read_barrier();
    cb_push_back(cb_x, d_tiles);
}

// Tile row r of heads [first_head, first_head + heads) of `user` from the packed qkv: head h's row
// is row user % 32 of qkv tiles (user / 32, (first_head + h) * d_tiles + j); it becomes row h % 32.
// Rows past the group are zero.
void gather_heads_row(const InterleavedAddrGen<true>& gen, uint32_t user, uint32_t first_head, uint32_t heads,
                      uint32_t r) {
    cb_reserve_back(cb_x, d_tiles);
    const uint32_t l1 = get_write_ptr(cb_x);
    volatile tt_l1_ptr uint32_t* words = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
    for (uint32_t i = 0; i < d_tiles * x_tile_bytes / sizeof(uint32_t); ++i) {
        words[i] = 0;
    }
    const uint32_t src_row = user % TILE;
    const uint32_t end = heads - r * TILE < TILE ? heads - r * TILE : TILE;
    for (uint32_t h = 0; h < end; ++h) {
        for (uint32_t j = 0; j < d_tiles; ++j) {
            const uint32_t page = (user / TILE) * packed_width_tiles + (first_head + r * TILE + h) * d_tiles + j;
            for (uint32_t half = 0; half < 2; ++half) {
                noc_async_read(gen.get_noc_addr(page, face_row_offset(src_row, half) * 2),
                               l1 + j * x_tile_bytes + face_row_offset(h, half) * 2, FACE * 2);
            }
        }
    }
    noc_async_read_barrier();
    cb_push_back(cb_x, d_tiles);
}

}  // namespace

void kernel_main() {
    // Common runtime args (the same on every core): separate inputs q (0 without q), k_new, v_new;
    // packed qkv, 0, 0; then cos, sin, trans. Per-core runtime args: num_users, then the users.
    const uint32_t q_addr = get_common_arg_val<uint32_t>(0);
    const uint32_t k_addr = get_common_arg_val<uint32_t>(1);
    const uint32_t v_addr = get_common_arg_val<uint32_t>(2);
    const uint32_t cos_addr = get_common_arg_val<uint32_t>(3);
    const uint32_t sin_addr = get_common_arg_val<uint32_t>(4);
    const uint32_t trans_addr = get_common_arg_val<uint32_t>(5);
    const uint32_t num_users = get_arg_val<uint32_t>(0);
    constexpr uint32_t users_base = 1;

    const InterleavedAddrGen<true> q_gen = {.bank_base_address = q_addr, .page_size = x_tile_bytes};
    const InterleavedAddrGen<true> k_gen = {.bank_base_address = k_addr, .page_size = x_tile_bytes};
    const InterleavedAddrGen<true> v_gen = {.bank_base_address = v_addr, .page_size = x_tile_bytes};
    const InterleavedAddrGen<true> cos_gen = {.bank_base_address = cos_addr, .page_size = cs_tile_bytes};
    const InterleavedAddrGen<true> sin_gen = {.bank_base_address = sin_addr, .page_size = cs_tile_bytes};
    const InterleavedAddrGen<true> trans_gen = {.bank_base_address = trans_addr, .page_size = x_tile_bytes};

    // The rotate-half blocks stay in cb_trans for the whole kernel.
    cb_reserve_back(cb_trans, num_pairs);
    for (uint32_t p = 0; p < num_pairs; ++p) {
        noc_async_read(trans_gen.get_noc_addr(p), get_write_ptr(cb_trans) + p * x_tile_bytes, x_tile_bytes);
    }
    noc_async_read_barrier();
    cb_push_back(cb_trans, num_pairs);

    for (uint32_t u = 0; u < num_users; ++u) {
        const uint32_t user = get_arg_val<uint32_t>(users_base + u);
        read_angles(cos_gen, cb_cos, user);
        read_angles(sin_gen, cb_sin, user);
        if constexpr (packed) {
            for (uint32_t r = 0; r < row_tiles(num_q_heads); ++r) {
                gather_heads_row(q_gen, user, 0, num_q_heads, r);
            }
            for (uint32_t r = 0; r < row_tiles(num_kv_heads); ++r) {
                gather_heads_row(q_gen, user, num_q_heads, num_kv_heads, r);
            }
            for (uint32_t r = 0; r < row_tiles(num_kv_heads); ++r) {
                gather_heads_row(q_gen, user, num_q_heads + num_kv_heads, num_kv_heads, r);
            }
        } else {
            for (uint32_t r = 0; r < row_tiles(num_q_heads); ++r) {
                read_heads_row(q_gen, user, num_q_heads, r);
            }
            for (uint32_t r = 0; r < row_tiles(num_kv_heads); ++r) {
                read_heads_row(k_gen, user, num_kv_heads, r);
            }
            for (uint32_t r = 0; r < row_tiles(num_kv_heads); ++r) {
                read_heads_row(v_gen, user, num_kv_heads, r);
            }
        }
    }
}
