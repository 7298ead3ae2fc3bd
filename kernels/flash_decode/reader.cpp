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
// The pieces: reader_inputs.hpp (runtime args), reader_positions.hpp (positions and their guards),
// page_table_pass.hpp (the page-table pass, bank-local views and counts), reader_tiles.hpp (the tile moves).
// This file holds the compile-time constants and the piece loop.

#include <stdint.h>

// compile-check-named: q_tile_rows=32
#include "api/dataflow/dataflow_api.h"
#include "common.hpp"
#include "page_table_pass.hpp"
#include "piece_args.hpp"
#include "reader_inputs.hpp"
#include "reader_positions.hpp"
#include "reader_tiles.hpp"

using namespace flash_decode;

namespace {

// The named compile-time args (program_factory.py) and the constants that follow from them.
struct Args : PieceArgs {
    static constexpr uint32_t batch = get_named_compile_time_arg_val("batch");
    static constexpr uint32_t num_kv_heads = get_named_compile_time_arg_val("num_kv_heads");
    static constexpr uint32_t seq_tiles = get_named_compile_time_arg_val("seq_tiles");
    static constexpr uint32_t group_size = get_named_compile_time_arg_val("group_size");
    static constexpr uint32_t nh_tiles = get_named_compile_time_arg_val("nh_tiles");
    static constexpr bool share_cache = get_named_compile_time_arg_val("share_cache") == 1;
    static constexpr uint32_t kv_tile_bytes = get_named_compile_time_arg_val("kv_tile_bytes");
    static constexpr bool paged = get_named_compile_time_arg_val("paged") == 1;
    // block_size / 32 (paged only)
    static constexpr uint32_t block_tiles = get_named_compile_time_arg_val("block_tiles");
    // page-table entries per user (paged only)
    static constexpr uint32_t max_blocks = get_named_compile_time_arg_val("max_blocks");
    // A paged pool of 16-position blocks (block_size 16, block_tiles 0): a (block, KV head) is one tile row
    // whose rows 0-15 hold the block's keys and rows 16-31 padding (ttnn's TILE layout of
    // [num_blocks, NKV, 16, D]); key tile t is rows 0-15 of blocks 2t and 2t + 1, and the padding is never read.
    // In tile pages or key-row pages (a page the row's Dt tiles); the bank-local split counts the row's even
    // entries as blocks of one key tile (bank_local.hpp block_entries 2).
#ifdef HALF_TILE_BLOCKS
    static constexpr bool half_blocks = true;
#else
    static constexpr bool half_blocks = false;
#endif
    // positions per block; never 0, so the unpaged build's (unused) paged code divides by a nonzero constant
    static constexpr uint32_t block_positions = half_blocks ? TILE / 2 : (block_tiles > 0 ? block_tiles : 1) * TILE;
    // mask batch 1: every user reads it
    static constexpr bool mask_broadcast = get_named_compile_time_arg_val("mask_broadcast") == 1;
    // K/V pages: one tile each (interleaved tile pages), or one key-tile row each (kv_pages "key_row":
    // the row's Dt tiles in one page, pages round robin over the DRAM banks, so a row is in one bank).
    static constexpr bool key_row_pages = get_named_compile_time_arg_val("key_row_pages") == 1;
    static_assert(!bank_local || (paged && key_row_pages), "the bank-local split reads a paged key-row pool");
    // the bank-local pieces take turns over every bank held rather than over their own group (plan.spread_banks)
    static constexpr bool spread_banks = get_named_compile_time_arg_val("spread_banks") == 1;
    static_assert(!paged || ((block_tiles > 0 || half_blocks) && max_blocks > 0),
                  "a paged cache needs its block geometry");
    static_assert(!half_blocks || (paged && block_tiles == 0), "16-position blocks: a paged pool");
    // blocks in the K/V pool (paged only)
    static constexpr uint32_t num_blocks = get_named_compile_time_arg_val("num_blocks");
    // the B positions come as common runtime args (cur_pos given as a list) instead of the cur_pos tensor
    static constexpr bool positions_in_args = get_named_compile_time_arg_val("positions_in_args") == 1;
    static constexpr uint32_t q_slots = get_named_compile_time_arg_val("q_slots");  // pieces' Q held at once (1 or 2)
    static constexpr uint32_t q_tile_bytes = 2048;  // a bf16 32x32 tile: the pages of Q, the sink and the mask in DRAM
    // the q-row CBs' tiles (cb_q, cb_sink, cb_attn_mask): q_tile_rows x 32 bf16
    static constexpr uint32_t q_cb_tile_bytes = q_tile_rows * TILE * 2;
    static_assert(q_tile_rows == 32 || (q_tile_rows < 32 && q_tiles == 1 && tokens * group_size <= q_tile_rows),
                  "16-row q tiles hold one q tile row of at most 16 q rows");
    static constexpr uint32_t pos_bytes = batch * sizeof(int32_t);
    static constexpr uint32_t k_slot_tiles = max_chunk_tiles * d_tiles;
    // K: without MLA the slot holds column-major key tiles, tile (t, d) at d * max_chunk_tiles + t, so Q . K^T
    // takes a block of key tiles per matmul_block call (consecutive in1 tiles for one d); with MLA tile (t, d)
    // sits at t * d_tiles + d, so that P . V finds V tiles (t, v..) in a row.
    static constexpr uint32_t k_t_stride = mla ? d_tiles : 1;
    static constexpr uint32_t k_d_stride = mla ? 1 : max_chunk_tiles;
    // A V slot's key tile row: its dv_tiles V tiles, then a tile of ones (P . V's matmul_block gives the
    // row sum P x ones in the same call, compute.cpp).
    static constexpr uint32_t v_row_tiles = dv_tiles + 1;
    static constexpr uint32_t v_slot_tiles = max_chunk_tiles * v_row_tiles;
    // cb_v's slots: two, or a softmax block's chunks (the compute kernel scores all the block's K chunks before
    // its first P . V, so the block's V slots queue meanwhile)
    static constexpr uint32_t v_slots = softmax_chunks > 2 ? softmax_chunks : 2;
    static constexpr uint32_t page_table_row_bytes = max_blocks * sizeof(int32_t);
    static constexpr uint32_t mask_slot_tiles = q_tiles * max_chunk_tiles;
    // the bank-local split's floor of a piece's tiles (BankLocal::settle)
    static constexpr uint32_t split_floor = fixed_chunk_tiles > 0 ? fixed_chunk_tiles : min_chunk_tiles;
};

}  // namespace

void kernel_main() {
    using Tensors = ReaderTensors<Args>;
    const Tensors io = Tensors::from_common_args();
    const Pieces pieces{get_arg_val<uint32_t>(0)};
    // K's and V's generators apart: the chunk reads take their addresses, not the whole set's.
    const InterleavedAddrGen<true> k_gen = io.k;
    const InterleavedAddrGen<true> v_gen = io.v;

    // The positions page goes to both the compute kernel and the writer, which derive the same chunk ranges
    // from it.
    cb_reserve_back(cb_pos_compute, 1);
    cb_reserve_back(cb_pos_writer, 1);
    const uint32_t pos_l1 = get_write_ptr(cb_pos_compute);
    volatile tt_l1_ptr int32_t* positions = reinterpret_cast<volatile tt_l1_ptr int32_t*>(pos_l1);
    PageTablePass<Args> pass(io, pieces, positions);
    if constexpr (Args::paged && !Args::positions_in_args) {
        pass.row_ahead = pass.pass_first_user();  // lands with the positions
    }
    read_positions<Args>(io, pos_l1, pass.row_ahead);
    pass.run();
    push_positions<Args>(positions);
    prepare_slots<Args>();

    // The reader's own scratch (never pushed): the page-table row of the user whose pieces it is reading.
    // Pieces of one user are often adjacent, so the row is fetched only when the user changes.
    volatile tt_l1_ptr int32_t* page_table_row = nullptr;
    if constexpr (Args::paged) {
        page_table_row = pass.row_at(0);
    }

    for (uint32_t p = 0; p < pieces.count; ++p) {
        const uint32_t user = Pieces::user(p);
        const uint32_t kv_head = Pieces::kv_head(p);
        const uint32_t index = Pieces::index(p);
        const int32_t cur_pos = positions[user];
        BankView view{};  // bank-local: the piece's view (built by the pass)
        if constexpr (Args::bank_local) {
            view = load_view(pass.views, p);
        }
        const PieceRange range = Args::bank_local ? view_range(view)
                                                  : piece_range(cur_pos, Args::fixed_chunk_tiles, Args::pieces_per_work,
                                                                index, Args::window, Args::min_chunk_tiles,
                                                                Args::cyclic_split, Args::chunk_cap, Args::dram_banks);
        if (range.empty()) {
            if constexpr (Args::bank_local) {
                if (p == 0) {
                    pass.discard_early();  // a user skipped by the guard after its first chunks were requested
                }
            }
            continue;  // a skipped user or a piece beyond the user's chunks: nothing to read
        }

        read_q<Args>(io.q, user, kv_head);
        // Q waits for the first chunk's K: one barrier (one DRAM latency) for both, since the compute
        // kernel needs both to start. A new page-table row must land before any K address uses it.
        bool q_pending = !pass.begin_piece(p, user, page_table_row);
        if constexpr (Args::has_sink) {
            if (index == 0) {
                read_sink<Args>(io.sink, kv_head);
            }
        }
        if (!q_pending) {
            noc_async_read_barrier();
            push_q<Args>(index);
        }

        // K/V tile (row, d) is page row * Dt + d (kv_tile_row); with share_cache every user reads
        // KV batch 0.
        const uint32_t kv_batch = Args::share_cache ? 0 : user;
        // Bank-local: a cursor over the user's attended tiles, stopping at the piece's own (the view's banks'
        // tiles whose ordinal o has o % subs == sub; `turn` is o % subs, kept without a division).
        // The first early_chunks chunks of piece 0 were requested during the pass (their keys in early_keys).
        const bool from_early = p == 0 && pass.early_chunks > 0;
        uint32_t cursor = from_early ? pass.early_cursor : window_first_tile(cur_pos, Args::window);
        uint32_t turn = from_early ? pass.early_turn : 0;
        // A softmax block's K slots go first, then its V slots (one chunk per update: K then V per chunk): the
        // compute kernel scores every K of a block before its first exp, so the block's V reads follow the
        // scores. The block's keys are listed once, with its K reads, and kept for its V reads (bank-local:
        // on the stack for one chunk, in cb_keys for a block of several).
        constexpr uint32_t block = Args::softmax_chunks;
        uint32_t stack_keys[Args::bank_local && block == 1 ? Args::max_chunk_tiles : 1];
        uint32_t* const block_keys = block == 1 ? stack_keys : reinterpret_cast<uint32_t*>(get_write_ptr(cb_keys));
        for (uint32_t c0 = 0; c0 < range.num_chunks; c0 += block) {
            const uint32_t c1 = c0 + block < range.num_chunks ? c0 + block : range.num_chunks;
            for (uint32_t c = c0; c < c1; ++c) {
                const uint32_t tiles = range.tiles_in_chunk(c);
                const bool early = Args::bank_local && p == 0 && c < pass.early_chunks;
                uint32_t* const keys = block_keys + (c - c0) * Args::max_chunk_tiles;
                if constexpr (Args::bank_local) {
                    pass.list_keys(keys, early, c, tiles, page_table_row, kv_head, view, cursor, turn);
                }
                const ChunkRead<Args> chunk{range.tile_at(c * range.chunk_tiles), range.stride, keys, tiles, cur_pos,
                                            page_table_row, kv_batch, kv_head};

                // K (the slot layout: Args::k_t_stride, k_d_stride), and with an attn_mask the chunk's mask rows
                cb_reserve_back(cb_k, Args::k_slot_tiles);
                const uint32_t k_slot = get_write_ptr(cb_k);
                if (!early) {
                    chunk.read(k_gen, k_slot, Args::d_tiles, Args::k_t_stride, Args::k_d_stride);
                }
                if constexpr (Args::has_attn_mask) {
                    chunk.read_mask(io.mask, user);
                }
                // One barrier per slot keeps all of its requests in flight together (the first slot's
                // with Q's).
                noc_async_read_barrier();
                if (q_pending) {
                    push_q<Args>(index);
                    q_pending = false;
                }
                if constexpr (Args::bank_local && Args::mla) {
                    pass.advance(c, range.num_chunks);
                }
                chunk.zero_stale(k_slot, Args::d_tiles, Args::k_t_stride, Args::k_d_stride);
                if constexpr (Args::has_attn_mask) {
                    cb_push_back(cb_attn_mask, Args::mask_slot_tiles);
                }
                cb_push_back(cb_k, Args::k_slot_tiles);
            }
            // V (row-major: tile (t, v) at t * v_row_tiles + v, the row's ones tile after it), read while
            // the compute kernel works on K.
            if constexpr (!Args::mla) {
                for (uint32_t c = c0; c < c1; ++c) {
                    const bool early = Args::bank_local && p == 0 && c < pass.early_chunks;
                    const ChunkRead<Args> chunk{range.tile_at(c * range.chunk_tiles), range.stride,
                                                block_keys + (c - c0) * Args::max_chunk_tiles,
                                                range.tiles_in_chunk(c), cur_pos, page_table_row, kv_batch, kv_head};
                    cb_reserve_back(cb_v, Args::v_slot_tiles);
                    const uint32_t v_slot = get_write_ptr(cb_v);
                    if (!early) {
                        chunk.read(v_gen, v_slot, Args::dv_tiles, Args::v_row_tiles, 1);
                    }
                    if constexpr (Args::bank_local) {
                        pass.advance(c, range.num_chunks);
                    }
                    noc_async_read_barrier();
                    chunk.zero_stale(v_slot, Args::dv_tiles, Args::v_row_tiles, 1);
                    cb_push_back(cb_v, Args::v_slot_tiles);
                }
            }
        }
        pad_v_to_whole_blocks<Args>(range.num_chunks);
        if (q_pending) {  // a range with no chunk (none today): Q still reaches the compute kernel
            noc_async_read_barrier();
            push_q<Args>(index);
        }
    }
}
