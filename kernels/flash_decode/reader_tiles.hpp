// SPDX-License-Identifier: Apache-2.0
//
// The FlashDecode reader's tile moves (reader.cpp): a KV group's q rows (of Q, the sink or the mask) into
// 32-, 16- or 8-row tiles; a chunk's K or V key tiles into their slot (tile pages, key_row pages, or the two
// 16-row halves of a block-16 pool), with the rows outside the attended keys zeroed after the barrier; and
// the slots' constant parts, written once.

#pragma once

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "api/debug/assert.h"
#include "common.hpp"

namespace flash_decode {

// Internal linkage, as in the one file these pieces serve (reader.cpp): the inliner sees every call.
namespace {

// Which tiles of each tile row a group copy moves: source tiles col0 .. col0 + cols - 1 of a row of
// src_cols tiles land in tiles 0 .. cols - 1 of a destination row of dst_cols tiles.
struct TileColumns {
    uint32_t src_cols;
    uint32_t col0;
    uint32_t cols;
    uint32_t dst_cols;
};

// Copy the g rows of one KV group out of matrix `matrix` (a user's Q, or a mask batch) of a bf16 tile
// tensor [.., NH, src_cols * 32] into tiles at q_l1. Group row r is row h*g + r of the matrix; it lands
// in row dst_first_row + r of the destination, i.e. row (dst_first_row + r) % 32 of tile row
// (dst_first_row + r) / 32. The destination tiles have dst_tile_rows rows: 32, 16 (16x32 tiles:
// faces 0-1, the first half of a 32x32 tile's layout, so a row's offsets inside them are the same) or
// 8 (8x32 tiles: two faces of 8 rows; tile_row_offset).
template <uint32_t dst_tile_rows, typename AddrGen>
void read_group_rows(
    const AddrGen& q_gen, uint32_t q_l1, uint32_t matrix, uint32_t kv_head, uint32_t group_size, uint32_t nh_tiles,
    const TileColumns& columns, uint32_t dst_first_row = 0) {
    constexpr uint32_t bytes_per_value = 2;  // bf16
    const uint32_t first_row = kv_head * group_size;
    for (uint32_t r = 0; r < group_size;) {
        const uint32_t src_row = (first_row + r) % TILE;
        const uint32_t dst_row = (dst_first_row + r) % TILE;
        const uint32_t rows = row_run(src_row, dst_row, group_size - r);
        const uint32_t src_tile_row = (first_row + r) / TILE;
        const uint32_t dst_tile_row = (dst_first_row + r) / TILE;
        for (uint32_t c = 0; c < columns.cols; ++c) {
            const uint32_t page = (matrix * nh_tiles + src_tile_row) * columns.src_cols + columns.col0 + c;
            const uint32_t dst_tile = q_l1 + (dst_tile_row * columns.dst_cols + c) * dst_tile_rows * TILE * bytes_per_value;
            // The rows of a run are contiguous inside each of the two faces they cross.
            for (uint32_t half = 0; half < 2; ++half) {
                const uint64_t src = q_gen.get_noc_addr(page) + face_row_offset(src_row, half) * bytes_per_value;
                noc_async_read(src, dst_tile + tile_row_offset<dst_tile_rows>(dst_row, half) * bytes_per_value,
                               rows * FACE * bytes_per_value);
            }
        }
        r += rows;
    }
}

// Zero rows [first_row, end_row) of one K or V tile in L1 (a tile row is one key position), so
// whatever the cache holds outside the attended keys (NaN, inf) cannot reach the scores or P . V: a
// zero key gives the score 0, which the mask turns into -inf, and a zero value row adds 0 x 0. A tile row spans two
// face rows (faces 0/1 for rows 0-15, 2/3 for rows 16-31); in the block-float formats each face row
// has its shared exponent byte and its codes (code 0 decodes to 0 whatever the exponent).
template <uint32_t tile_bytes>
void zero_rows(uint32_t tile_l1, uint32_t first_row, uint32_t end_row) {
    // K/V tiles are bfloat16 (2048 B), bfloat8_b (1088 B) or bfloat4_b (576 B).
    ASSERT(tile_bytes == 2048 || tile_bytes == 1088 || tile_bytes == 576);
    constexpr uint32_t exponent_bytes = tile_bytes == 2048 ? 0 : TILE * TILE / FACE;  // one per face row
    constexpr uint32_t row_bytes = tile_bytes == 2048 ? 2 * FACE : tile_bytes == 1088 ? FACE : FACE / 2;
    volatile tt_l1_ptr uint8_t* tile = reinterpret_cast<volatile tt_l1_ptr uint8_t*>(tile_l1);
    for (uint32_t row = first_row; row < end_row; ++row) {
        for (uint32_t half = 0; half < 2; ++half) {
            const uint32_t face_row = face_row_offset(row, half) / FACE;  // face rows in tile order
            if constexpr (exponent_bytes > 0) {
                tile[face_row] = 0;
            }
            volatile tt_l1_ptr uint32_t* words =
                reinterpret_cast<volatile tt_l1_ptr uint32_t*>(tile_l1 + exponent_bytes + face_row * row_bytes);
            for (uint32_t w = 0; w < row_bytes / sizeof(uint32_t); ++w) {
                words[w] = 0;
            }
        }
    }
}

// A tile of ones in the K/V format at l1: bfloat16 (0x3F80 each), bfloat8_b (the 64 shared exponents
// 127, then codes 0x40 = +1.0) or bfloat4_b (exponents 127, then two 4-bit codes 0x4 = +1.0 a byte).
// Exact in every format: the row sum's in1, at the end of each key tile row of a V slot.
template <uint32_t tile_bytes>
void fill_ones_tile(uint32_t l1) {
    volatile tt_l1_ptr uint32_t* words = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
    constexpr uint32_t exponent_words = tile_bytes == 2048 ? 0 : TILE * TILE / FACE / 4;
    constexpr uint32_t code_word = tile_bytes == 2048 ? 0x3F803F80u : tile_bytes == 1088 ? 0x40404040u : 0x44444444u;
    for (uint32_t i = 0; i < exponent_words; ++i) {
        words[i] = 0x7F7F7F7Fu;
    }
    for (uint32_t i = exponent_words; i < tile_bytes / 4; ++i) {
        words[i] = code_word;
    }
}

// Zero rows [first_row, end_row) of key tile `t` of a chunk's K or V slot: its row_tiles tiles, at
// slot tiles t * t_stride + d * d_stride (the slot's layout, see the chunk loop).
template <uint32_t kv_tile_bytes>
void zero_slot_rows(uint32_t slot, uint32_t row_tiles, uint32_t t, uint32_t t_stride, uint32_t d_stride,
                    uint32_t first_row, uint32_t end_row) {
    for (uint32_t d = 0; d < row_tiles; ++d) {
        zero_rows<kv_tile_bytes>(slot + (t * t_stride + d * d_stride) * kv_tile_bytes, first_row, end_row);
    }
}

// Rows 0-15 (faces 0-1, the first half of the tile layout) of the K/V tile at `src` into rows 16 * half ..
// 16 * half + 15 of the tile at l1: bfloat16 in one read; a block float's exponents (64 bytes, one per
// face row in face-row order) and codes (in face order) in one read each.
template <uint32_t tile_bytes>
void read_half_tile(uint64_t src, uint32_t l1, uint32_t half) {
    constexpr uint32_t exponent_bytes = tile_bytes == 2048 ? 0 : TILE * TILE / FACE;
    constexpr uint32_t half_codes = (tile_bytes - exponent_bytes) / 2;
    if constexpr (exponent_bytes > 0) {
        noc_async_read(src, l1 + half * exponent_bytes / 2, exponent_bytes / 2);
    }
    noc_async_read(src + exponent_bytes, l1 + exponent_bytes + half * half_codes, half_codes);
}

// Key tile `key` of a pool of 16-position blocks: rows 0-15 of the tile rows of entries 2 key and 2 key + 1 of
// the page-table row, as rows 0-15 and 16-31 of its row_tiles tiles at l1 + d * d_bytes. Tile pages (tile row
// r's tile d is page r * row_tiles + d) or key-row pages (page r holds the row's tiles). A half holding no
// attended key (past cur_pos, or before span_first_key) is not read (its page-table entry may be anything):
// zero_stale zeroes its rows.
template <class Args>
void read_halves(const InterleavedAddrGen<true>& gen, volatile tt_l1_ptr int32_t* page_table_row, uint32_t kv_head,
                 uint32_t key, int32_t cur_pos, uint32_t span_first_key, uint32_t row_tiles, uint32_t l1,
                 uint32_t d_bytes) {
    constexpr uint32_t kv_tile_bytes = Args::kv_tile_bytes;
    constexpr uint32_t block_positions = Args::block_positions;
    for (uint32_t half = 0; half < 2; ++half) {
        const int32_t half_first = (int32_t)(key * TILE + half * block_positions);
        if (half_first > cur_pos || half_first + (int32_t)block_positions <= (int32_t)span_first_key) {
            continue;
        }
        const uint32_t row = (uint32_t)page_table_row[2 * key + half] * Args::num_kv_heads + kv_head;
        for (uint32_t d = 0; d < row_tiles; ++d) {
            const uint64_t src = Args::key_row_pages ? gen.get_noc_addr(row, d * kv_tile_bytes)
                                                     : gen.get_noc_addr(row * row_tiles + d);
            read_half_tile<kv_tile_bytes>(src, l1 + d * d_bytes, half);
        }
    }
}

// Index of the K/V tile row (32 keys) holding logical key tile `tile` of one (user, KV head); its
// pages are row * Dt + d. Rows are numbered (batch * NKV + h) * rows + r over a [batches, NKV,
// rows * 32, D] tile tensor: a contiguous cache has batches = B and rows = S / 32; a paged one has
// batches = num_blocks and rows = block_size / 32, and the user's page-table row names the block.
template <bool paged, uint32_t num_kv_heads, uint32_t seq_tiles, uint32_t block_tiles>
uint32_t kv_tile_row(volatile tt_l1_ptr int32_t* page_table_row, uint32_t kv_batch, uint32_t kv_head, uint32_t tile) {
    if constexpr (paged) {
        constexpr uint32_t bt = block_tiles > 0 ? block_tiles : 1;  // 0: 16-position blocks, read by halves
        const uint32_t block = (uint32_t)page_table_row[tile / bt];
        return (block * num_kv_heads + kv_head) * bt + tile % bt;
    } else {
        return (kv_batch * num_kv_heads + kv_head) * seq_tiles + tile;
    }
}

// A piece's q rows: Q [T, B, NH, D], token j's group rows into q rows j*g .. j*g + g - 1 (token-major), in
// cb_q's next slot (reserved here, pushed by push_q once they land).
template <class Args, typename AddrGen>
void read_q(const AddrGen& q_gen, uint32_t user, uint32_t kv_head) {
    cb_reserve_back(cb_q, Args::q_tiles * Args::d_tiles);
    for (uint32_t j = 0; j < Args::tokens; ++j) {
        read_group_rows<Args::q_tile_rows>(q_gen, get_write_ptr(cb_q), j * Args::batch + user, kv_head,
                                           Args::group_size, Args::nh_tiles,
                                           TileColumns{Args::d_tiles, 0, Args::d_tiles, Args::d_tiles},
                                           j * Args::group_size);
    }
}

// A root's sink rows (it folds the sink into its denominator): the group's rows of the sink tiles, once per
// token, into cb_sink (reserved here, pushed by push_q).
template <class Args>
void read_sink(const InterleavedAddrGen<true>& sink_gen, uint32_t kv_head) {
    cb_reserve_back(cb_sink, Args::q_tiles);
    for (uint32_t j = 0; j < Args::tokens; ++j) {
        read_group_rows<Args::q_tile_rows>(sink_gen, get_write_ptr(cb_sink), 0, kv_head, Args::group_size,
                                           Args::nh_tiles, TileColumns{1, 0, 1, 1}, j * Args::group_size);
    }
}

// The piece's q rows (and a root's sink rows) to the compute kernel, after the barrier they landed under.
template <class Args>
void push_q(uint32_t index) {
    cb_push_back(cb_q, Args::q_tiles * Args::d_tiles);
    if constexpr (Args::has_sink) {
        if (index == 0) {
            cb_push_back(cb_sink, Args::q_tiles);
        }
    }
}

// One chunk of a piece's keys for one (user, KV head), and its reads into a K or V slot: the chunk's t-th key
// tile is first_tile + t * stride (the piece's tiles, contiguous or the cyclic split's), or with the bank-local
// split keys[t] (the walk's list, each chunk's key tiles listed once for K, V, the mask rows and the stale
// rows). A slot holds the chunk's tile (t, d) at t * t_stride + d * d_stride; every chunk takes a whole slot,
// even a short last one, so the slots keep their addresses (the compute kernel uses only the first `tiles`
// rows of tiles).
template <class Args>
struct ChunkRead {
    uint32_t first_tile;  // not bank-local: the chunk's first key tile and the piece's stride
    uint32_t stride;
    const uint32_t* keys;  // bank-local only
    uint32_t tiles;
    int32_t cur_pos;
    volatile tt_l1_ptr int32_t* page_table_row;
    uint32_t kv_batch;  // K/V batch of a contiguous cache (0 with share_cache)
    uint32_t kv_head;

    // the key tile that is the chunk's t-th
    uint32_t key_tile(uint32_t t) const {
        if constexpr (Args::bank_local) {
            return keys[t];
        } else {
            return first_tile + t * stride;
        }
    }

    // The chunk's key tile rows of K or V (row_tiles tiles each) into `slot`; zero_stale after the barrier.
    void read(const InterleavedAddrGen<true>& gen, uint32_t slot, uint32_t row_tiles, uint32_t t_stride,
              uint32_t d_stride) const {
        constexpr uint32_t kv_tile_bytes = Args::kv_tile_bytes;
        const uint32_t span_first_key = window_first_key(cur_pos, Args::window);
        for (uint32_t t = 0; t < tiles; ++t) {
            if constexpr (Args::half_blocks) {
                read_halves<Args>(gen, page_table_row, kv_head, key_tile(t), cur_pos, span_first_key, row_tiles,
                                  slot + t * t_stride * kv_tile_bytes, d_stride * kv_tile_bytes);
                continue;
            }
            const uint32_t row = kv_tile_row<Args::paged, Args::num_kv_heads, Args::seq_tiles, Args::block_tiles>(
                page_table_row, kv_batch, kv_head, key_tile(t));
            for (uint32_t d = 0; d < row_tiles; ++d) {
                const uint64_t src = Args::key_row_pages ? gen.get_noc_addr(row, d * kv_tile_bytes)
                                                         : gen.get_noc_addr(row * row_tiles + d);
                noc_async_read(src, slot + (t * t_stride + d * d_stride) * kv_tile_bytes, kv_tile_bytes);
            }
        }
    }

    // The rows of key tiles to zero: the tile holding cur_pos (the root's last, or with the cyclic split
    // whichever piece holds it), whose rows past cur_pos hold whatever the cache held there; and the tile
    // holding the span's first key (a sliding window's, widened for T tokens), whose rows before that key
    // likewise. With MLA the V rows are K rows.
    void zero_stale(uint32_t slot, uint32_t row_tiles, uint32_t t_stride, uint32_t d_stride) const {
        const uint32_t last_tile = (uint32_t)cur_pos / TILE;
        const uint32_t first_stale_row = (uint32_t)cur_pos % TILE + 1;
        const uint32_t span_first_key = window_first_key(cur_pos, Args::window);
        for (uint32_t t = 0; t < tiles; ++t) {
            const uint32_t tile = key_tile(t);
            if (tile == last_tile && first_stale_row < TILE) {
                zero_slot_rows<Args::kv_tile_bytes>(slot, row_tiles, t, t_stride, d_stride, first_stale_row, TILE);
            }
            if (tile == span_first_key / TILE && span_first_key % TILE != 0) {
                zero_slot_rows<Args::kv_tile_bytes>(slot, row_tiles, t, t_stride, d_stride, 0, span_first_key % TILE);
            }
        }
    }

    // The mask rows of the chunk's keys into cb_attn_mask's slot (reserved here), laid out [q tile row][key
    // tile] like the scores the compute kernel adds them to (a whole slot per chunk, like K and V). Rows past
    // the group hold whatever the slot held: they meet only the zero q rows and never reach the output.
    template <typename AddrGen>
    void read_mask(const AddrGen& mask_gen, uint32_t user) const {
        cb_reserve_back(cb_attn_mask, Args::mask_slot_tiles);
        // Contiguous chunks take their columns in one run; the cyclic split's tiles one at a time.
        const uint32_t run = !Args::bank_local && stride == 1 ? tiles : 1;
        for (uint32_t t = 0; t < tiles; t += run) {
            for (uint32_t j = 0; j < Args::tokens; ++j) {  // every token of a user takes the same mask rows
                read_group_rows<Args::q_tile_rows>(
                    mask_gen, get_write_ptr(cb_attn_mask) + t * Args::q_cb_tile_bytes, Args::mask_broadcast ? 0 : user,
                    kv_head, Args::group_size, Args::nh_tiles,
                    TileColumns{Args::seq_tiles, key_tile(t), run, Args::max_chunk_tiles}, j * Args::group_size);
            }
        }
    }
};

// The slots' constant parts, written once before the first piece (the reads never touch them).
template <class Args>
void prepare_slots() {
    // cb_q holds q_slots whole pieces' q tiles (2 when this program puts several pieces on a core: the
    // next piece's Q and first chunk are read while the compute kernel works on the current piece), so
    // every piece lands at one of q_slots fixed addresses: rows past the group are zeroed once here, in
    // every slot, and never written again.
    volatile tt_l1_ptr uint32_t* q_words = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_q));
    for (uint32_t i = 0; i < Args::q_slots * Args::q_tiles * Args::d_tiles * Args::q_cb_tile_bytes / sizeof(uint32_t);
         ++i) {
        q_words[i] = 0;
    }
    // The ones tiles of every V slot.
    if constexpr (!Args::mla) {
        const uint32_t v_base = get_write_ptr(cb_v);
        for (uint32_t t = 0; t < Args::v_slots * Args::max_chunk_tiles; ++t) {
            fill_ones_tile<Args::kv_tile_bytes>(v_base +
                                                (t * Args::v_row_tiles + Args::dv_tiles) * Args::kv_tile_bytes);
        }
    }
    // Likewise cb_sink (one root's sink tiles): rows past the group stay zero.
    if constexpr (Args::has_sink) {
        volatile tt_l1_ptr uint32_t* sink_words =
            reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_sink));
        for (uint32_t i = 0; i < Args::q_tiles * Args::q_cb_tile_bytes / sizeof(uint32_t); ++i) {
            sink_words[i] = 0;
        }
    }
}

// Softmax blocks: after a piece's `chunks` V slots, empty ones pushed up to a whole block (the compute kernel
// pops them unread), so that every block's slots lie side by side from the start of cb_v.
template <class Args>
void pad_v_to_whole_blocks(uint32_t chunks) {
    if constexpr (!Args::mla && Args::softmax_chunks > 1) {
        for (uint32_t c = chunks % Args::softmax_chunks; c != 0 && c < Args::softmax_chunks; ++c) {
            cb_reserve_back(cb_v, Args::v_slot_tiles);
            cb_push_back(cb_v, Args::v_slot_tiles);
        }
    }
}

}  // namespace

}  // namespace flash_decode
