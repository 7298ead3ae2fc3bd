// SPDX-License-Identifier: Apache-2.0
//
// FlashDecode reader (NCRISC). Reads the users' positions once, then for each piece placed on this
// core: the q rows of the piece's KV group and, chunk by chunk, the piece's K and V tiles. Every
// K/V byte a piece needs is read exactly once, and only the tiles a user attends: up to the one
// holding cur_pos, and with a sliding window from the one holding the window's first key. The cache
// rows outside the attended keys in those two tiles hold whatever the device memory held (NaN,
// inf): the reader zeroes them in L1 before handing the chunk to the compute kernel. With a paged
// cache the user's page-table row maps each logical key tile to its block. With an attention sink,
// a root piece also reads its KV group's sink logits (column 0 of a [NH, 32] bf16 tile tensor). With
// an attn_mask (non-causal decode), each chunk also gets the group's mask rows of its key tiles. With
// T new tokens per user (multi-token decode) the q rows are the T tokens' group rows, token-major,
// and the tiles read are the span the T tokens attend together: each K/V tile is read once for all.
// With MLA there is no V tensor: V is the first dv_tiles tiles of each K tile row, which the compute
// kernel takes out of the K slot, so the reader reads K only (once) and fills no V slot.
// K and V of a chunk have their own barriers and pushes: the compute kernel starts on the chunk's
// scores while its V is still in flight. A piece's Q shares its first chunk's K barrier (the compute
// kernel needs both to start: one DRAM latency, not two).

#include <stdint.h>

// compile-check-named: q_tile_rows=32
#include "api/dataflow/dataflow_api.h"
#include "api/debug/assert.h"
#include "bank_local.hpp"
#include "common.hpp"
#include "../shared/sharded_tiles.hpp"

using namespace flash_decode;

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

}  // namespace

void kernel_main() {
    constexpr uint32_t batch = get_named_compile_time_arg_val("batch");
    constexpr uint32_t num_kv_heads = get_named_compile_time_arg_val("num_kv_heads");
    constexpr uint32_t seq_tiles = get_named_compile_time_arg_val("seq_tiles");
    constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
    constexpr uint32_t dv_tiles = get_named_compile_time_arg_val("dv_tiles");
    constexpr uint32_t q_tiles = get_named_compile_time_arg_val("q_tiles");
    constexpr uint32_t group_size = get_named_compile_time_arg_val("group_size");
    constexpr uint32_t nh_tiles = get_named_compile_time_arg_val("nh_tiles");
    constexpr uint32_t pieces_per_work = get_named_compile_time_arg_val("pieces_per_work");
    constexpr uint32_t fixed_chunk_tiles = get_named_compile_time_arg_val("fixed_chunk_tiles");
    constexpr uint32_t max_chunk_tiles = get_named_compile_time_arg_val("max_chunk_tiles");
    constexpr bool share_cache = get_named_compile_time_arg_val("share_cache") == 1;
    constexpr uint32_t kv_tile_bytes = get_named_compile_time_arg_val("kv_tile_bytes");
    constexpr bool paged = get_named_compile_time_arg_val("paged") == 1;
    constexpr uint32_t block_tiles = get_named_compile_time_arg_val("block_tiles");  // block_size / 32 (paged only)
    constexpr uint32_t max_blocks = get_named_compile_time_arg_val("max_blocks");   // page-table entries per user (paged only)
    // A paged pool of 16-position blocks (block_size 16, block_tiles 0): a (block, KV head) is one tile row
    // whose rows 0-15 hold the block's keys and rows 16-31 padding (ttnn's TILE layout of
    // [num_blocks, NKV, 16, D]); key tile t is rows 0-15 of blocks 2t and 2t + 1, and the padding is never read.
#ifdef HALF_TILE_BLOCKS
    constexpr bool half_blocks = true;
#else
    constexpr bool half_blocks = false;
#endif
    // positions per block; never 0, so the unpaged build's (unused) paged code divides by a nonzero constant
    constexpr uint32_t block_positions = half_blocks ? TILE / 2 : (block_tiles > 0 ? block_tiles : 1) * TILE;
    constexpr uint32_t token_window = get_named_compile_time_arg_val("token_window");  // each token's sliding window (0 = none)
    constexpr bool has_sink = get_named_compile_time_arg_val("has_sink") == 1;    // attention sink logits to read
    constexpr bool mla = get_named_compile_time_arg_val("mla") == 1;         // V = K[..., :Dv]: no V reads, no V slot
    constexpr bool has_attn_mask = get_named_compile_time_arg_val("has_attn_mask") == 1;  // an additive mask to stream
    constexpr bool mask_broadcast = get_named_compile_time_arg_val("mask_broadcast") == 1;  // mask batch 1: every user reads it
    constexpr uint32_t tokens = get_named_compile_time_arg_val("tokens");  // new tokens per user (multi-token decode)
    // The chunk arithmetic runs on the span of keys the T tokens attend together (common.hpp).
    constexpr uint32_t window = span_window(token_window, tokens);
    constexpr uint32_t min_chunk_tiles = get_named_compile_time_arg_val("min_chunk_tiles");  // split floor of dynamic chunks
    constexpr uint32_t chunk_cap = get_named_compile_time_arg_val("chunk_cap");  // largest dynamic chunk (plan.chunk_cap)
    constexpr bool cyclic_split = get_named_compile_time_arg_val("cyclic_split") == 1;  // a piece takes every p'-th key tile
    // K/V pages: one tile each (interleaved tile pages), or one key-tile row each (kv_pages "key_row":
    // the row's Dt tiles in one page, pages round robin over the DRAM banks, so a row is in one bank).
    constexpr bool key_row_pages = get_named_compile_time_arg_val("key_row_pages") == 1;
    constexpr uint32_t dram_banks = get_named_compile_time_arg_val("dram_banks");  // the device's DRAM banks
    // key_row pages of a paged cache: each piece reads the tiles of its own banks (common.hpp BankView)
    constexpr bool bank_local = get_named_compile_time_arg_val("bank_local") == 1;
    static_assert(!bank_local || (paged && key_row_pages), "the bank-local split reads a paged key-row pool");
    // the bank-local pieces take turns over every bank held rather than over their own group (plan.spread_banks)
    constexpr bool spread_banks = get_named_compile_time_arg_val("spread_banks") == 1;
    static_assert(!paged || ((block_tiles > 0 || half_blocks) && max_blocks > 0), "a paged cache needs its block geometry");
    static_assert(!half_blocks || (paged && block_tiles == 0 && !key_row_pages), "16-position blocks: a paged tile-page pool");
    constexpr uint32_t num_blocks = get_named_compile_time_arg_val("num_blocks");  // blocks in the K/V pool (paged only)
    // the B positions come as common runtime args (cur_pos given as a list) instead of the cur_pos tensor
    constexpr bool positions_in_args = get_named_compile_time_arg_val("positions_in_args") == 1;
    constexpr uint32_t q_slots = get_named_compile_time_arg_val("q_slots");  // pieces' Q held at once (1 or 2)
    constexpr uint32_t q_tile_bytes = 2048;  // a bf16 32x32 tile: the pages of Q, the sink and the mask in DRAM
    // The q-row CBs' tiles (cb_q, cb_sink, cb_attn_mask): 32x32, or 16x32 (faces 0-1) with <= 16 q rows.
    constexpr uint32_t q_tile_rows = get_named_compile_time_arg_val("q_tile_rows");
    constexpr uint32_t q_cb_tile_bytes = q_tile_rows * TILE * 2;  // bf16
    static_assert(q_tile_rows == 32 || (q_tile_rows < 32 && q_tiles == 1 && tokens * group_size <= q_tile_rows),
                  "16-row q tiles hold one q tile row of at most 16 q rows");
    constexpr uint32_t pos_bytes = batch * sizeof(int32_t);
    constexpr uint32_t k_slot_tiles = max_chunk_tiles * d_tiles;
    // A V slot's key tile row: its dv_tiles V tiles, then a tile of ones (P . V's matmul_block gives the
    // row sum P x ones in the same call, compute.cpp).
    constexpr uint32_t v_row_tiles = dv_tiles + 1;
    constexpr uint32_t v_slot_tiles = max_chunk_tiles * v_row_tiles;
    // cb_v's slots: two, or a softmax block's chunks (plan.softmax_chunks: the compute kernel scores all the
    // block's K chunks before its first P . V, so the block's V slots queue meanwhile)
    constexpr uint32_t softmax_chunks = get_named_compile_time_arg_val("softmax_chunks");
    constexpr uint32_t v_slots = softmax_chunks > 2 ? softmax_chunks : 2;
    constexpr uint32_t page_table_row_bytes = max_blocks * sizeof(int32_t);
    constexpr uint32_t mask_slot_tiles = q_tiles * max_chunk_tiles;

    // Common runtime args (the same on every core, so a cached program patches them once per call):
    // the tensors' addresses, then with positions_in_args the B positions themselves.
    const uint32_t q_addr = get_common_arg_val<uint32_t>(0);
    const uint32_t k_addr = get_common_arg_val<uint32_t>(1);
    const uint32_t v_addr = get_common_arg_val<uint32_t>(2);
    const uint32_t pos_addr = get_common_arg_val<uint32_t>(3);  // 0 with positions_in_args
    const uint32_t page_table_addr = get_common_arg_val<uint32_t>(4);  // 0 without a paged cache
    const uint32_t sink_addr = get_common_arg_val<uint32_t>(5);  // 0 without an attention sink
    const uint32_t mask_addr = get_common_arg_val<uint32_t>(6);  // 0 without an attn_mask
    constexpr uint32_t positions_arg_base = 7;
    // Per-core runtime args: the number of pieces, then (user, kv head, piece index) per piece.
    const uint32_t num_pieces = get_arg_val<uint32_t>(0);
    constexpr uint32_t piece_args_base = 1;
    constexpr uint32_t args_per_piece = 3;

#ifdef Q_SHARDS  // Q height-sharded in L1 (nlp_create_qkv_heads_decode's placement): read from its holders
    const ShardedTiles<Q_SHARD_PAGES, q_tile_bytes> q_gen = {q_addr, Q_SHARD_ARGS};
#else
    const InterleavedAddrGen<true> q_gen = {.bank_base_address = q_addr, .page_size = q_tile_bytes};
#endif
    const InterleavedAddrGen<true> k_gen = {.bank_base_address = k_addr,
                                            .page_size = key_row_pages ? d_tiles * kv_tile_bytes : kv_tile_bytes};
    const InterleavedAddrGen<true> v_gen = {.bank_base_address = v_addr,
                                            .page_size = key_row_pages ? dv_tiles * kv_tile_bytes : kv_tile_bytes};
    // The sink tiles [NH, 32] bf16: the same tile rows as one user's Q with a single column tile.
    const InterleavedAddrGen<true> sink_gen = {.bank_base_address = sink_addr, .page_size = q_tile_bytes};
    // The mask [B or 1, 1, NH, S] bf16: one [NH, S] matrix per mask batch, tile rows are heads.
    const InterleavedAddrGen<true> mask_gen = {.bank_base_address = mask_addr, .page_size = q_tile_bytes};
    const InterleavedAddrGen<true> pos_gen = {.bank_base_address = pos_addr, .page_size = pos_bytes};
    // The page table is row-major int32 [B, max_blocks]: one page per user.
    const InterleavedAddrGen<true> page_table_gen = {
        .bank_base_address = page_table_addr, .page_size = page_table_row_bytes};

    // The positions page goes to both the compute kernel and the writer, which derive the same
    // chunk ranges from it.
    cb_reserve_back(cb_pos_compute, 1);
    cb_reserve_back(cb_pos_writer, 1);
    const uint32_t pos_l1 = get_write_ptr(cb_pos_compute);
    volatile tt_l1_ptr int32_t* positions = reinterpret_cast<volatile tt_l1_ptr int32_t*>(pos_l1);
    volatile tt_l1_ptr int32_t* writer_positions =
        reinterpret_cast<volatile tt_l1_ptr int32_t*>(get_write_ptr(cb_pos_writer));
    const uint32_t first_user = num_pieces > 0 ? get_arg_val<uint32_t>(piece_args_base) : batch;
    // The user whose row the page-table pass reads first: piece 0's, or bank-local, the first other user's
    // (that pass counts piece 0's user last).
    const auto pass_first_user = [&]() -> uint32_t {
        if constexpr (bank_local) {
            for (uint32_t p = 0; p < num_pieces; ++p) {
                const uint32_t user = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece);
                if (user != first_user) {
                    return user;
                }
            }
        }
        return first_user;
    };
    uint32_t row_ahead = batch;  // the user whose row is already in cb_page_table's first page (batch: none)
    if constexpr (positions_in_args) {
        // Positions given as a list travel as common runtime args (no tensor, nothing uploaded).
        for (uint32_t b = 0; b < batch; ++b) {
            positions[b] = (int32_t)get_common_arg_val<uint32_t>(positions_arg_base + b);
        }
    } else {
        // The page-table row the pass takes first lands under the positions' barrier: one DRAM latency for both.
        if constexpr (paged) {
            row_ahead = pass_first_user();
            if (row_ahead < batch) {
                noc_async_read(page_table_gen.get_noc_addr(row_ahead), get_write_ptr(cb_page_table),
                               page_table_row_bytes);
            }
        }
        noc_async_read(pos_gen.get_noc_addr(0), pos_l1, pos_bytes);
        noc_async_read_barrier();
    }
    // Guard (positions and page tables are not checked on the host when they live on the device): a
    // position outside -1..S-1 (or before the first of T tokens), or a page id outside the pool in the
    // blocks a user attends, skips the user (-1) for all three kernels, so no read or write ever leaves
    // the tensors. Every core serving a user sees the same position and page-table row, so all its
    // pieces agree. Valid inputs pass unchanged.
    for (uint32_t b = 0; b < batch; ++b) {
        const int32_t pos = positions[b];
        if (pos < -1 || pos >= (int32_t)(seq_tiles * TILE) || (pos >= 0 && pos < (int32_t)tokens - 1)) {
            positions[b] = -1;
        }
    }
    // Bank-local: the same pass builds each piece's view (its banks, tiles, chunk and masks) from the row.
    volatile tt_l1_ptr uint32_t* views = nullptr;
    volatile tt_l1_ptr uint32_t* writer_views = nullptr;
    if constexpr (bank_local) {
        cb_reserve_back(cb_view_compute, 1);
        cb_reserve_back(cb_view_writer, 1);
        views = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_view_compute));
        writer_views = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_view_writer));
    }
    BankLocal<num_kv_heads, (bank_local ? block_tiles : 1), (bank_local ? dram_banks : 1), spread_banks> banks;
    // K: without MLA the slot holds column-major key tiles, tile (t, d) at d * max_chunk_tiles + t, so Q . K^T
    // takes a block of key tiles per matmul_block call (consecutive in1 tiles for one d); with MLA tile (t, d)
    // sits at t * d_tiles + d, so that P . V finds V tiles (t, v..) in a row.
    constexpr uint32_t k_t_stride = mla ? d_tiles : 1;
    constexpr uint32_t k_d_stride = mla ? 1 : max_chunk_tiles;
    // Bank-local: the first one or two chunks of the core's first piece are requested as soon as its user's
    // counted blocks settle its split (BankLocal::settled), and land while the pass counts the rest of the row;
    // the pass takes the other users' rows first, so no row read waits for them.
    uint32_t early_chunks = 0;  // chunks of piece 0 requested during the pass
    uint32_t early_cursor = 0;  // its walk's state after them
    uint32_t early_turn = 0;
    uint32_t early_keys[bank_local ? 2 * max_chunk_tiles : 1];
    const uint32_t split_floor = fixed_chunk_tiles > 0 ? fixed_chunk_tiles : min_chunk_tiles;
    // Count the row (checked inside the pool) of piece 0's user until the piece's split settles, then walk to
    // the piece's first whole chunk, or two, and request them into its K and V slots (reserved here, pushed by
    // the chunk loop); returns how many (0: the split did not settle, or the piece has no whole chunk).
    const auto read_early = [&](volatile tt_l1_ptr int32_t* row, uint32_t user, uint32_t kv_head,
                                uint32_t index) -> uint32_t {
        if (!banks.settle(row, kv_head, pieces_per_work, split_floor)) {
            return 0;
        }
        const int32_t pos = positions[user];
        const BankView v = banks.view(row, pos, kv_head, index, pieces_per_work, fixed_chunk_tiles, window,
                                      min_chunk_tiles, chunk_cap, token_window, tokens);
        if (index >= v.used) {
            return 0;
        }
        const uint32_t chunks = banks.first_chunks(row, kv_head, v, window_first_tile(pos, window), early_keys,
                                                   max_chunk_tiles, early_cursor, early_turn);
        if (chunks == 0) {
            return 0;
        }
        cb_reserve_back(cb_k, chunks * k_slot_tiles);
        if constexpr (!mla) {
            cb_reserve_back(cb_v, chunks * v_slot_tiles);
        }
        for (uint32_t c = 0; c < chunks; ++c) {
            for (uint32_t t = 0; t < v.chunk_tiles; ++t) {
                const uint32_t page = kv_tile_row<paged, num_kv_heads, seq_tiles, block_tiles>(
                    row, 0, kv_head, early_keys[c * max_chunk_tiles + t]);
                for (uint32_t d = 0; d < d_tiles; ++d) {
                    const uint32_t slot_tile = c * k_slot_tiles + t * k_t_stride + d * k_d_stride;
                    noc_async_read(k_gen.get_noc_addr(page, d * kv_tile_bytes),
                                   get_write_ptr(cb_k) + slot_tile * kv_tile_bytes, kv_tile_bytes);
                }
                if constexpr (!mla) {
                    for (uint32_t d = 0; d < dv_tiles; ++d) {
                        noc_async_read(v_gen.get_noc_addr(page, d * kv_tile_bytes),
                                       get_write_ptr(cb_v) + (c * v_slot_tiles + t * v_row_tiles + d) * kv_tile_bytes,
                                       kv_tile_bytes);
                    }
                }
            }
        }
        return chunks;
    };
    if constexpr (paged) {
        volatile tt_l1_ptr int32_t* row = reinterpret_cast<volatile tt_l1_ptr int32_t*>(get_write_ptr(cb_page_table));
        uint32_t checked = batch;  // the user whose row was checked last
        const auto pass_piece = [&](uint32_t p) {
            const uint32_t user = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 0);
            const int32_t pos = positions[user];
            if (user != checked && pos >= 0) {
                checked = user;
                if (user != row_ahead) {
                    noc_async_read(page_table_gen.get_noc_addr(user), get_write_ptr(cb_page_table),
                                   page_table_row_bytes);
                    noc_async_read_barrier();
                }
                row_ahead = user;
                const uint32_t first_block = window_first_key(pos, window) / block_positions;
                const uint32_t last_block = (uint32_t)pos / block_positions;
                for (uint32_t j = first_block; j <= last_block; ++j) {
                    if (row[j] < 0 || row[j] >= (int32_t)num_blocks) {
                        positions[user] = -1;
                        break;
                    }
                }
                if constexpr (bank_local) {
                    if (positions[user] >= 0) {
                        banks.begin_user(window_first_tile(pos, window), (uint32_t)pos / TILE);
                    }
                }
            }
            if constexpr (bank_local) {
                const uint32_t kv_head = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 1);
                const uint32_t index = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 2);
                BankView v{};
                if (positions[user] >= 0) {
                    // the first piece's user is counted whole (its first chunks land meanwhile); another user's
                    // pieces only until their split settles: their own tiles and masks are counted while the
                    // piece before them reads (the chunk loop), their used, banks and chunk are final here
                    if (user == first_user) {
                        if (p == 0 && !has_attn_mask) {
                            early_chunks = read_early(row, user, kv_head, index);
                        }
                        banks.count_to(row, banks.end_block);
                    } else {
                        banks.settle(row, kv_head, pieces_per_work, split_floor);
                    }
                    v = banks.view(row, positions[user], kv_head, index, pieces_per_work, fixed_chunk_tiles, window,
                                   min_chunk_tiles, chunk_cap, token_window, tokens);
                    v.deferred = index < v.used && !banks.counted_all() ? 1 : 0;
                }
                store_view(views, p, v);
                store_view(writer_views, p, v);
            }
        };
        if constexpr (bank_local) {
            for (uint32_t p = 0; p < num_pieces; ++p) {
                if (get_arg_val<uint32_t>(piece_args_base + p * args_per_piece) != first_user) {
                    pass_piece(p);
                }
            }
            for (uint32_t p = 0; p < num_pieces; ++p) {
                if (get_arg_val<uint32_t>(piece_args_base + p * args_per_piece) == first_user) {
                    pass_piece(p);
                }
            }
        } else {
            for (uint32_t p = 0; p < num_pieces; ++p) {
                pass_piece(p);
            }
        }
    }
    // Bank-local: two page-table row buffers (cb_page_table's two pages). The chunk loop walks the current
    // piece's user's row in one while, in the other, the reader counts the row of the next piece with keys
    // whose view waits for it (deferred), a slice per chunk beside the chunk's reads, and completes that view
    // before the current piece's last chunk goes: the compute kernel and the writer read a piece's view only
    // once the pieces before it are done, so the view is whole by then.
    constexpr uint32_t row_stride = (page_table_row_bytes + 31) / 32 * 32;
    uint32_t row_user[2] = {batch, batch};  // the user whose row each buffer holds (batch: none)
    BankLocal<num_kv_heads, (bank_local ? block_tiles : 1), (bank_local ? dram_banks : 1), spread_banks> row_counts[2];
    const auto row_at = [&](uint32_t b) -> volatile tt_l1_ptr int32_t* {
        return reinterpret_cast<volatile tt_l1_ptr int32_t*>(get_write_ptr(cb_page_table) + b * row_stride);
    };
    const auto piece_arg = [&](uint32_t q, uint32_t i) {
        return get_arg_val<uint32_t>(piece_args_base + q * args_per_piece + i);
    };
    // Piece q's view from buffer b's whole count.
    const auto complete = [&](uint32_t q, uint32_t b) {
        const BankView v = row_counts[b].view(row_at(b), positions[piece_arg(q, 0)], piece_arg(q, 1), piece_arg(q, 2),
                                              pieces_per_work, fixed_chunk_tiles, window, min_chunk_tiles, chunk_cap,
                                              token_window, tokens);
        store_view(views, q, v);
        store_view(writer_views, q, v);
    };
    // Request the user's row into buffer b (landing at the next barrier), none of it counted yet.
    const auto fetch_row = [&](uint32_t user, uint32_t b) {
        noc_async_read(page_table_gen.get_noc_addr(user), get_write_ptr(cb_page_table) + b * row_stride,
                       page_table_row_bytes);
        row_user[b] = user;
        row_counts[b].begin_user(window_first_tile(positions[user], window), (uint32_t)positions[user] / TILE);
    };
    if constexpr (bank_local) {
        if (num_pieces > 0 && positions[first_user] >= 0) {
            row_user[0] = first_user;  // the pass ended on it, counted whole
            row_counts[0] = banks;
        }
        // the first piece with keys has its whole view before the views go
        for (uint32_t q = 0; q < num_pieces; ++q) {
            const BankView v = load_view(views, q);
            if (piece_arg(q, 2) < v.used) {
                if (v.deferred) {
                    fetch_row(piece_arg(q, 0), 1);
                    noc_async_read_barrier();
                    row_counts[1].count_to(row_at(1), row_counts[1].end_block);
                    complete(q, 1);
                }
                break;
            }
        }
        cb_push_back(cb_view_compute, 1);
        cb_push_back(cb_view_writer, 1);
    }
    for (uint32_t b = 0; b < batch; ++b) {
        writer_positions[b] = positions[b];
    }
    cb_push_back(cb_pos_compute, 1);
    cb_push_back(cb_pos_writer, 1);

    // cb_q holds q_slots whole pieces' q tiles (2 when this program puts several pieces on a core: the
    // next piece's Q and first chunk are read while the compute kernel works on the current piece), so
    // every piece lands at one of q_slots fixed addresses: rows past the group are zeroed once here, in
    // every slot, and never written again.
    {
        volatile tt_l1_ptr uint32_t* q_words = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_q));
        for (uint32_t i = 0; i < q_slots * q_tiles * d_tiles * q_cb_tile_bytes / sizeof(uint32_t); ++i) {
            q_words[i] = 0;
        }
    }
    // The ones tiles of every V slot, written once: the V reads never touch them.
    if constexpr (!mla) {
        const uint32_t v_base = get_write_ptr(cb_v);
        for (uint32_t t = 0; t < v_slots * max_chunk_tiles; ++t) {
            fill_ones_tile<kv_tile_bytes>(v_base + (t * v_row_tiles + dv_tiles) * kv_tile_bytes);
        }
    }
    // Likewise cb_sink (one root's sink tiles): rows past the group stay zero.
    if constexpr (has_sink) {
        volatile tt_l1_ptr uint32_t* sink_words = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_sink));
        for (uint32_t i = 0; i < q_tiles * q_cb_tile_bytes / sizeof(uint32_t); ++i) {
            sink_words[i] = 0;
        }
    }

    // The reader's own scratch (never pushed): the page-table row of the user whose pieces it is
    // reading. Pieces of one user are often adjacent, so the row is fetched only when the user changes.
    uint32_t page_table_l1 = 0;
    if constexpr (paged) {
        page_table_l1 = get_write_ptr(cb_page_table);
    }
    volatile tt_l1_ptr int32_t* page_table_row = reinterpret_cast<volatile tt_l1_ptr int32_t*>(page_table_l1);
    uint32_t page_table_user = bank_local ? batch : row_ahead;  // the row the pass left in place, if any

    for (uint32_t p = 0; p < num_pieces; ++p) {
        const uint32_t user = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 0);
        const uint32_t kv_head = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 1);
        const uint32_t index = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 2);
        const int32_t cur_pos = positions[user];
        BankView view{};  // bank-local: the piece's view (built above)
        if constexpr (bank_local) {
            view = load_view(views, p);
        }
        const PieceRange range = bank_local ? view_range(view)
                                            : piece_range(cur_pos, fixed_chunk_tiles, pieces_per_work, index, window,
                                                          min_chunk_tiles, cyclic_split, chunk_cap, dram_banks);
        if (range.empty()) {
            continue;  // a skipped user or a piece beyond the user's chunks: nothing to read
        }

        // Q [T, B, NH, D]: token j's group rows land in q rows j*g .. j*g + g - 1 (token-major).
        cb_reserve_back(cb_q, q_tiles * d_tiles);
        for (uint32_t j = 0; j < tokens; ++j) {
            read_group_rows<q_tile_rows>(q_gen, get_write_ptr(cb_q), j * batch + user, kv_head, group_size, nh_tiles,
                            TileColumns{d_tiles, 0, d_tiles, d_tiles}, j * group_size);
        }
        // Q waits for the first chunk's K: one barrier (one DRAM latency) for both, since the compute
        // kernel needs both to start. A new page-table row must land before any K address uses it.
        bool q_pending = true;
        // Bank-local: the next piece with keys whose view waits for its user's count (counted in buffer
        // target_in during this piece's chunks), if any.
        uint32_t target = num_pieces;
        uint32_t target_in = 0;
        if constexpr (bank_local) {
            uint32_t row_in = row_user[1] == user ? 1 : 0;
            if (row_user[row_in] != user) {
                fetch_row(user, row_in);
                q_pending = false;
            }
            page_table_row = row_at(row_in);
            uint32_t q = p + 1;
            while (q < num_pieces && piece_arg(q, 2) >= load_view(views, q).used) {
                ++q;
            }
            if (q < num_pieces && load_view(views, q).deferred) {
                const uint32_t next_user = piece_arg(q, 0);
                if (row_user[row_in] == next_user && row_counts[row_in].counted_all()) {
                    complete(q, row_in);
                } else {
                    target = q;
                    target_in = row_in ^ 1;
                    fetch_row(next_user, target_in);
                }
            }
        } else if constexpr (paged) {
            if (user != page_table_user) {
                noc_async_read(page_table_gen.get_noc_addr(user), page_table_l1, page_table_row_bytes);
                page_table_user = user;
                q_pending = false;
            }
        }
        // A slice of the target's count beside chunk c's reads (its row landed with the first chunk); the
        // whole count and the target's view before the last chunk goes.
        const auto advance = [&](uint32_t c, uint32_t chunks) {
            if (target == num_pieces) {
                return;
            }
            row_counts[target_in].count_slice(row_at(target_in), chunks - c);
            if (c + 1 == chunks) {
                complete(target, target_in);
                target = num_pieces;
            }
        };
        if constexpr (has_sink) {
            // The root folds the sink into its denominator: the group's rows of the sink tiles.
            if (index == 0) {
                cb_reserve_back(cb_sink, q_tiles);
                for (uint32_t j = 0; j < tokens; ++j) {
                    read_group_rows<q_tile_rows>(sink_gen, get_write_ptr(cb_sink), 0, kv_head, group_size, nh_tiles,
                                    TileColumns{1, 0, 1, 1}, j * group_size);
                }
            }
        }
        const auto push_q = [&]() {
            cb_push_back(cb_q, q_tiles * d_tiles);
            if constexpr (has_sink) {
                if (index == 0) {
                    cb_push_back(cb_sink, q_tiles);
                }
            }
        };
        if (!q_pending) {
            noc_async_read_barrier();
            push_q();
        }

        // K/V tile (row, d) is page row * Dt + d (kv_tile_row); with share_cache every user reads
        // KV batch 0.
        const uint32_t kv_batch = share_cache ? 0 : user;
        // Bank-local: a cursor over the user's attended tiles, stopping at the piece's own (the view's banks'
        // tiles whose ordinal o has o % subs == sub; `turn` is o % subs, kept without a division); each
        // chunk's key tiles are listed once, for K, V, the mask rows and the stale rows.
        // The first early_chunks chunks of piece 0 were requested during the pass (their keys in early_keys).
        uint32_t cursor = p == 0 && early_chunks > 0 ? early_cursor : window_first_tile(cur_pos, window);
        uint32_t turn = p == 0 && early_chunks > 0 ? early_turn : 0;
        uint32_t chunk_keys[bank_local ? max_chunk_tiles : 1];
        for (uint32_t c = 0; c < range.num_chunks; ++c) {
            const uint32_t chunk_first = c * range.chunk_tiles;  // the chunk's first tile is the piece's tile_at(chunk_first)
            const uint32_t tiles = range.tiles_in_chunk(c);
            const bool early = bank_local && p == 0 && c < early_chunks;
            if constexpr (bank_local) {
                for (uint32_t t = 0; t < tiles; ++t) {
                    chunk_keys[t] = early ? early_keys[c * max_chunk_tiles + t]
                                          : banks.next_tile(page_table_row, kv_head, view, cursor, turn);
                }
            }
            // the key tile that is the chunk's t-th
            const auto key_tile = [&](uint32_t t) -> uint32_t {
                if constexpr (bank_local) {
                    return chunk_keys[t];
                } else {
                    return range.tile_at(chunk_first + t);
                }
            };
            // Every chunk takes a whole slot, even a short last one, so the slots keep their
            // addresses; the compute kernel uses only the first `tiles` rows of tiles.
            // The rows of key tiles to zero: the tile holding cur_pos (the root's last, or with the
            // cyclic split whichever piece holds it), whose rows past cur_pos hold whatever the cache
            // held there; and the tile holding the span's first key (a sliding window's, widened for T
            // tokens), whose rows before that key likewise. With MLA the V rows are K rows.
            const uint32_t last_tile = (uint32_t)cur_pos / TILE;
            const uint32_t first_stale_row = (uint32_t)cur_pos % TILE + 1;
            const uint32_t span_first_key = window_first_key(cur_pos, window);

            // The chunk's key tile rows of K or V (row_tiles tiles each) into `slot`, tile (t, d) at
            // t * t_stride + d * d_stride; after the barrier, the stale rows are zeroed.
            const auto read_rows = [&](const InterleavedAddrGen<true>& gen, uint32_t slot, uint32_t row_tiles,
                                       uint32_t t_stride, uint32_t d_stride) {
                for (uint32_t t = 0; t < tiles; ++t) {
                    if constexpr (half_blocks) {
                        // a half holding no attended key is not read (its page-table entry may be anything):
                        // zero_stale zeroes its rows
                        const uint32_t key = key_tile(t);
                        for (uint32_t half = 0; half < 2; ++half) {
                            const int32_t first = (int32_t)(key * TILE + half * block_positions);
                            if (first > cur_pos || first + (int32_t)block_positions <= (int32_t)span_first_key) {
                                continue;
                            }
                            const uint32_t row = (uint32_t)page_table_row[2 * key + half] * num_kv_heads + kv_head;
                            for (uint32_t d = 0; d < row_tiles; ++d) {
                                read_half_tile<kv_tile_bytes>(gen.get_noc_addr(row * row_tiles + d),
                                                              slot + (t * t_stride + d * d_stride) * kv_tile_bytes, half);
                            }
                        }
                        continue;
                    }
                    const uint32_t row = kv_tile_row<paged, num_kv_heads, seq_tiles, block_tiles>(
                        page_table_row, kv_batch, kv_head, key_tile(t));
                    for (uint32_t d = 0; d < row_tiles; ++d) {
                        const uint64_t src = key_row_pages ? gen.get_noc_addr(row, d * kv_tile_bytes)
                                                           : gen.get_noc_addr(row * row_tiles + d);
                        noc_async_read(src, slot + (t * t_stride + d * d_stride) * kv_tile_bytes, kv_tile_bytes);
                    }
                }
            };
            const auto zero_stale = [&](uint32_t slot, uint32_t row_tiles, uint32_t t_stride, uint32_t d_stride) {
                for (uint32_t t = 0; t < tiles; ++t) {
                    const uint32_t tile = key_tile(t);
                    if (tile == last_tile && first_stale_row < TILE) {
                        zero_slot_rows<kv_tile_bytes>(slot, row_tiles, t, t_stride, d_stride, first_stale_row, TILE);
                    }
                    if (tile == span_first_key / TILE && span_first_key % TILE != 0) {
                        zero_slot_rows<kv_tile_bytes>(slot, row_tiles, t, t_stride, d_stride, 0, span_first_key % TILE);
                    }
                }
            };

            // K (the slot layout: k_t_stride, k_d_stride above)
            cb_reserve_back(cb_k, k_slot_tiles);
            const uint32_t k_slot = get_write_ptr(cb_k);
            if (!early) {
                read_rows(k_gen, k_slot, d_tiles, k_t_stride, k_d_stride);
            }
            // The mask rows of the chunk's keys, laid out [q tile row][key tile] like the scores the
            // compute kernel adds them to (a whole slot per chunk, like K and V). Rows past the group
            // hold whatever the slot held: they meet only the zero q rows and never reach the output.
            if constexpr (has_attn_mask) {
                cb_reserve_back(cb_attn_mask, mask_slot_tiles);
                // Contiguous chunks take their columns in one run; the cyclic split's tiles one at a time.
                const uint32_t run = !bank_local && range.stride == 1 ? tiles : 1;
                for (uint32_t t = 0; t < tiles; t += run) {
                    for (uint32_t j = 0; j < tokens; ++j) {  // every token of a user takes the same mask rows
                        read_group_rows<q_tile_rows>(mask_gen, get_write_ptr(cb_attn_mask) + t * q_cb_tile_bytes,
                                        mask_broadcast ? 0 : user, kv_head, group_size, nh_tiles,
                                        TileColumns{seq_tiles, key_tile(t), run, max_chunk_tiles},
                                        j * group_size);
                    }
                }
            }
            // One barrier per slot keeps all of its requests in flight together (the first slot's
            // with Q's).
            noc_async_read_barrier();
            if (q_pending) {
                push_q();
                q_pending = false;
            }
            if constexpr (bank_local && mla) {
                advance(c, range.num_chunks);
            }
            zero_stale(k_slot, d_tiles, k_t_stride, k_d_stride);
            if constexpr (has_attn_mask) {
                cb_push_back(cb_attn_mask, mask_slot_tiles);
            }
            cb_push_back(cb_k, k_slot_tiles);

            // V (row-major: tile (t, v) at t * v_row_tiles + v, the row's ones tile after it), read while
            // the compute kernel works on K.
            if constexpr (!mla) {
                cb_reserve_back(cb_v, v_slot_tiles);
                const uint32_t v_slot = get_write_ptr(cb_v);
                if (!early) {
                    read_rows(v_gen, v_slot, dv_tiles, v_row_tiles, 1);
                }
                if constexpr (bank_local) {
                    advance(c, range.num_chunks);
                }
                noc_async_read_barrier();
                zero_stale(v_slot, dv_tiles, v_row_tiles, 1);
                cb_push_back(cb_v, v_slot_tiles);
            }
        }
        // Softmax blocks: the piece's V slots padded to whole blocks (pushed unread; the compute kernel pops
        // them), so that every block's slots lie side by side from the start of cb_v.
        if constexpr (!mla && softmax_chunks > 1) {
            for (uint32_t c = range.num_chunks % softmax_chunks; c != 0 && c < softmax_chunks; ++c) {
                cb_reserve_back(cb_v, v_slot_tiles);
                cb_push_back(cb_v, v_slot_tiles);
            }
        }
        if (q_pending) {  // a range with no chunk (none today): Q still reaches the compute kernel
            noc_async_read_barrier();
            push_q();
        }
    }
}
