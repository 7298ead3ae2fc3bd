// SPDX-License-Identifier: Apache-2.0
//
// Writing row p of a KV cache in DRAM, shared by the writers that append a decode step's rows
// (paged_update, rotary_append). The cache is paged (a pool [num_blocks, NKV, block_size, D] reached
// through the user's page-table row) or contiguous ([B, NKV, S, D]); its DRAM pages are tiles, or
// key-tile rows of d_tiles tiles (kv_pages "key_row": the bank-local pool). Each cache tile the row
// lands in is read into a scratch page, only that row's bytes are replaced by the head's row of the
// packed result, and the tile is written back: in bfloat16 the row's 2 x 32 bytes, in bfloat8_b /
// bfloat4_b its two shared exponents and codes (a block-float group is one face row, so the row packed
// among other heads has the bytes it has in the cache).

#pragma once

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "tile_layout.hpp"

namespace cache_row {

// Page `page` of a row-major int32 tensor at `addr` in DRAM (pages of `page_bytes`: the positions [B] one
// page, a page table [B, max_blocks] one page per user) read into L1 at `l1`, waited for; returns its words.
inline volatile tt_l1_ptr int32_t* read_int_page(uint32_t addr, uint32_t page_bytes, uint32_t page, uint32_t l1) {
    const InterleavedAddrGen<true> gen = {.bank_base_address = addr, .page_size = page_bytes};
    noc_async_read(gen.get_noc_addr(page), l1, page_bytes);
    noc_async_read_barrier();
    return reinterpret_cast<volatile tt_l1_ptr int32_t*>(l1);
}

// The cache's geometry, from the writer's compile-time args: d_tiles tiles of cache_tile_bytes per key
// row (D / 32), num_kv_heads heads; paged: block_size positions a block and (num_blocks > 0) block ids
// checked against the pool's num_blocks (0: not checked); contiguous: seq_tiles key-tile rows (S / 32).
template <uint32_t d_tiles, uint32_t num_kv_heads, bool paged, uint32_t seq_tiles, uint32_t block_size,
          uint32_t num_blocks, bool key_row_pages, uint32_t cache_tile_bytes>
struct CacheRows {
    static_assert(cache_tile_bytes == 2048 || cache_tile_bytes == 1088 || cache_tile_bytes == 576,
                  "cache tiles are bfloat16, bfloat8_b or bfloat4_b");
    static constexpr uint32_t TILE = tile_layout::TILE;
    static constexpr uint32_t FACE = tile_layout::FACE;
    // Block floats: 64 exponent bytes (one per face row, in face-row order), then the codes.
    static constexpr uint32_t exponent_bytes = cache_tile_bytes == 2048 ? 0 : TILE * TILE / FACE;
    // Bytes of one face row's values: bf16 2 per value, bfloat8_b 1, bfloat4_b 1/2.
    static constexpr uint32_t face_row_bytes =
        cache_tile_bytes == 2048 ? 2 * FACE : cache_tile_bytes == 1088 ? FACE : FACE / 2;
    // A cache page: one tile, or (key_row_pages) one key-tile row of d_tiles tiles.
    static constexpr uint32_t page_bytes = key_row_pages ? d_tiles * cache_tile_bytes : cache_tile_bytes;

    // Row dst_row of the cache tile at `dst` becomes row src_row of the packed tile at `src`.
    static void replace_row(uint32_t dst, uint32_t dst_row, uint32_t src, uint32_t src_row) {
        volatile tt_l1_ptr uint8_t* to = reinterpret_cast<volatile tt_l1_ptr uint8_t*>(dst);
        volatile tt_l1_ptr uint8_t* from = reinterpret_cast<volatile tt_l1_ptr uint8_t*>(src);
        for (uint32_t half = 0; half < 2; ++half) {
            const uint32_t to_row = tile_layout::face_row_offset(dst_row, half) / FACE;  // face rows in tile order
            const uint32_t from_row = tile_layout::face_row_offset(src_row, half) / FACE;
            if constexpr (exponent_bytes > 0) {
                to[to_row] = from[from_row];
            }
            for (uint32_t i = 0; i < face_row_bytes; ++i) {
                to[exponent_bytes + to_row * face_row_bytes + i] =
                    from[exponent_bytes + from_row * face_row_bytes + i];
            }
        }
    }

    // Write tile row r of a user's packed rows (d_tiles tiles at `src`, heads [r * 32, ...) in its rows)
    // at position pos of each head's cache, through `scratch` (one cache tile of L1). A paged cache
    // follows the user's page-table row; with num_blocks > 0 a block id outside the pool (a negative
    // one too) writes nothing.
    static void write_heads(const InterleavedAddrGen<true>& cache_gen, uint32_t scratch, uint32_t src, uint32_t r,
                            uint32_t user, uint32_t pos, volatile tt_l1_ptr int32_t* page_table_row) {
        const uint32_t end = num_kv_heads - r * TILE < TILE ? num_kv_heads - r * TILE : TILE;
        for (uint32_t h = 0; h < end; ++h) {
            const uint32_t head = r * TILE + h;
            uint32_t tile_row;  // key-tile row (32 positions) of this head's cache holding pos
            uint32_t row = pos % TILE;  // pos's row in it
            if constexpr (paged) {
                const uint32_t block = (uint32_t)page_table_row[pos / block_size];
                if constexpr (num_blocks > 0) {
                    if (block >= num_blocks) {
                        continue;
                    }
                }
                // a block is ceil(block_size / 32) tile rows: block 16 is one, its rows 16-31 padding
                tile_row = (block * num_kv_heads + head) * ((block_size + TILE - 1) / TILE) + (pos % block_size) / TILE;
                row = pos % block_size % TILE;
            } else {
                tile_row = (user * num_kv_heads + head) * seq_tiles + pos / TILE;
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
};

}  // namespace cache_row
