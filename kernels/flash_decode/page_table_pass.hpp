// SPDX-License-Identifier: Apache-2.0
//
// The FlashDecode reader's page-table pass (reader.cpp, paged caches only), before the first piece: each user's
// page-table row is read once and checked inside the pool (reader_positions.hpp guard_row). With the
// bank-local split (key_row pages of a paged pool) the same pass builds each piece's view (common.hpp
// BankView: its banks, tiles, chunk and masks; bank_local.hpp counts the row) for the compute kernel and the
// writer, requests the core's first chunks early, and leaves the counts it defers to the chunk loop
// (begin_piece, advance): two page-table row buffers, one walked by the current piece, one counted for the
// next piece whose view waits for it.

#pragma once

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "bank_local.hpp"
#include "common.hpp"
#include "reader_inputs.hpp"
#include "reader_positions.hpp"
#include "reader_tiles.hpp"

namespace flash_decode {

// The pass (run, before the first piece) and the page-table state the piece loop keeps after it (begin_piece,
// list_keys, advance); Args: reader.cpp's compile-time constants.
template <class Args>
struct PageTablePass {
    // 16-position blocks: the split's blocks are the row's even entries, one key tile each
    using Banks = BankLocal<Args::num_kv_heads, (Args::bank_local && !Args::half_blocks ? Args::block_tiles : 1),
                            (Args::bank_local ? Args::dram_banks : 1), Args::spread_banks, (Args::half_blocks ? 2 : 1)>;
    static constexpr uint32_t batch = Args::batch;
    static constexpr uint32_t max_chunk_tiles = Args::max_chunk_tiles;
    // cb_page_table's pages, 32-byte aligned
    static constexpr uint32_t row_stride = (Args::page_table_row_bytes + 31) / 32 * 32;

    // the generators the pass reads through (copies: the tensors' whole set stays out of memory)
    InterleavedAddrGen<true> page_table_gen;
    InterleavedAddrGen<true> k_gen;
    InterleavedAddrGen<true> v_gen;
    Pieces pieces;
    volatile tt_l1_ptr int32_t* positions;
    uint32_t first_user;  // piece 0's user (batch: no piece)
    uint32_t row_ahead;   // the user whose row is already in cb_page_table's first page (batch: none)
    // Bank-local: the views of the core's pieces, a page for the compute kernel and one for the writer.
    volatile tt_l1_ptr uint32_t* views = nullptr;
    volatile tt_l1_ptr uint32_t* writer_views = nullptr;
    Banks banks;  // the pass's count of the row in cb_page_table's first page
    // Bank-local: the first one or two chunks of the core's first piece are requested as soon as its user's
    // counted blocks settle its split (BankLocal::settled) and their own entries are checked inside the pool;
    // they land while the pass guards the whole row and counts the rest of it. The pass takes the other users'
    // rows first, so no row read waits for them. Should the guard skip the user, they are pushed unread
    // (discard_early; the view's discard tells the compute kernel to pop them).
    uint32_t early_chunks = 0;  // chunks of piece 0 requested during the pass
    uint32_t early_cursor = 0;  // its walk's state after them
    uint32_t early_turn = 0;
    uint32_t early_keys[Args::bank_local ? 2 * max_chunk_tiles : 1];
    // Bank-local: two page-table row buffers (cb_page_table's two pages). The chunk loop walks the current
    // piece's user's row in one while, in the other, the reader counts the row of the next piece with keys
    // whose view waits for it (deferred), a slice per chunk beside the chunk's reads, and completes that view
    // before the current piece's last chunk goes: the compute kernel and the writer read a piece's view only
    // once the pieces before it are done, so the view is whole by then.
    uint32_t row_user[2] = {batch, batch};  // the user whose row each buffer holds (batch: none)
    Banks row_counts[2];
    // The next piece with keys whose view waits for its user's count (counted in buffer target_in during the
    // current piece's chunks), if any (pieces.count: none).
    uint32_t target = 0;
    uint32_t target_in = 0;
    // Tile pages: the user whose row cb_page_table holds (batch: none).
    uint32_t page_table_user = batch;

    PageTablePass(const ReaderTensors<Args>& io, Pieces pieces, volatile tt_l1_ptr int32_t* positions)
        : page_table_gen(io.page_table), k_gen(io.k), v_gen(io.v), pieces(pieces), positions(positions),
          first_user(pieces.count > 0 ? Pieces::user(0) : batch), row_ahead(batch) {}

    // The user whose row the pass reads first: piece 0's, or bank-local, the first other user's (that pass
    // counts piece 0's user last).
    uint32_t pass_first_user() const {
        if constexpr (Args::bank_local) {
            for (uint32_t p = 0; p < pieces.count; ++p) {
                const uint32_t user = Pieces::user(p);
                if (user != first_user) {
                    return user;
                }
            }
        }
        return first_user;
    }

    volatile tt_l1_ptr int32_t* row_at(uint32_t b) const {
        return reinterpret_cast<volatile tt_l1_ptr int32_t*>(get_write_ptr(cb_page_table) + b * row_stride);
    }

    // Count the row (not yet guarded) of piece 0's user until the piece's split settles, then walk to the
    // piece's first whole chunk, or two, and, when every entry their reads take is inside the pool, request
    // them into its K and V slots (reserved here, pushed by the chunk loop or discard_early); returns how many
    // (0: the split did not settle, the piece has no whole chunk, or one of their entries is outside the pool).
    uint32_t read_early(volatile tt_l1_ptr int32_t* row, uint32_t user, uint32_t kv_head, uint32_t index) {
        constexpr uint32_t kv_tile_bytes = Args::kv_tile_bytes;
        if (!banks.settle(row, kv_head, Args::pieces_per_work, Args::split_floor)) {
            return 0;
        }
        const int32_t pos = positions[user];
        const BankView v = banks.view(row, pos, kv_head, index, Args::pieces_per_work, Args::fixed_chunk_tiles,
                                      Args::window, Args::min_chunk_tiles, Args::chunk_cap, Args::token_window,
                                      Args::tokens);
        if (index >= v.used) {
            return 0;
        }
        const uint32_t chunks = banks.first_chunks(row, kv_head, v, window_first_tile(pos, Args::window), early_keys,
                                                   max_chunk_tiles, early_cursor, early_turn);
        if (chunks == 0) {
            return 0;
        }
        for (uint32_t c = 0; c < chunks; ++c) {
            for (uint32_t t = 0; t < v.chunk_tiles; ++t) {
                if (!tile_inside<Args>(row, pos, early_keys[c * max_chunk_tiles + t])) {
                    return 0;
                }
            }
        }
        cb_reserve_back(cb_k, chunks * Args::k_slot_tiles);
        if constexpr (!Args::mla) {
            cb_reserve_back(cb_v, chunks * Args::v_slot_tiles);
        }
        for (uint32_t c = 0; c < chunks; ++c) {
            for (uint32_t t = 0; t < v.chunk_tiles; ++t) {
                if constexpr (Args::half_blocks) {
                    const uint32_t key = early_keys[c * max_chunk_tiles + t];
                    const uint32_t span_first_key = window_first_key(pos, Args::window);
                    read_halves<Args>(k_gen, row, kv_head, key, pos, span_first_key, Args::d_tiles,
                                      get_write_ptr(cb_k) + (c * Args::k_slot_tiles + t * Args::k_t_stride) *
                                                                kv_tile_bytes,
                                      Args::k_d_stride * kv_tile_bytes);
                    if constexpr (!Args::mla) {
                        read_halves<Args>(v_gen, row, kv_head, key, pos, span_first_key, Args::dv_tiles,
                                          get_write_ptr(cb_v) + (c * Args::v_slot_tiles + t * Args::v_row_tiles) *
                                                                    kv_tile_bytes,
                                          kv_tile_bytes);
                    }
                    continue;
                }
                const uint32_t page = kv_tile_row<Args::paged, Args::num_kv_heads, Args::seq_tiles, Args::block_tiles>(
                    row, 0, kv_head, early_keys[c * max_chunk_tiles + t]);
                for (uint32_t d = 0; d < Args::d_tiles; ++d) {
                    const uint32_t slot_tile = c * Args::k_slot_tiles + t * Args::k_t_stride + d * Args::k_d_stride;
                    noc_async_read(k_gen.get_noc_addr(page, d * kv_tile_bytes),
                                   get_write_ptr(cb_k) + slot_tile * kv_tile_bytes, kv_tile_bytes);
                }
                if constexpr (!Args::mla) {
                    for (uint32_t d = 0; d < Args::dv_tiles; ++d) {
                        noc_async_read(v_gen.get_noc_addr(page, d * kv_tile_bytes),
                                       get_write_ptr(cb_v) +
                                           (c * Args::v_slot_tiles + t * Args::v_row_tiles + d) * kv_tile_bytes,
                                       kv_tile_bytes);
                    }
                }
            }
        }
        return chunks;
    }

    // Piece p's step of the pass: its user's row read (unless already in place) and checked when the user
    // changes; bank-local, the piece's view.
    void pass_piece(uint32_t p, volatile tt_l1_ptr int32_t* row, uint32_t& checked) {
        const uint32_t user = Pieces::user(p);
        const int32_t pos = positions[user];
        if (user != checked && pos >= 0) {
            checked = user;
            if (user != row_ahead) {
                noc_async_read(page_table_gen.get_noc_addr(user), get_write_ptr(cb_page_table),
                               Args::page_table_row_bytes);
                noc_async_read_barrier();
            }
            row_ahead = user;
            if constexpr (Args::bank_local) {
                banks.begin_user(window_first_tile(pos, Args::window), (uint32_t)pos / TILE);
                // the first piece's first chunks go before the guard of the whole row, which runs while they land
                if (p == 0 && !Args::has_attn_mask) {
                    early_chunks = read_early(row, user, Pieces::kv_head(p), Pieces::index(p));
                }
            }
            guard_row<Args>(row, positions, user, pos);
        }
        if constexpr (Args::bank_local) {
            const uint32_t kv_head = Pieces::kv_head(p);
            const uint32_t index = Pieces::index(p);
            BankView v{};
            if (positions[user] >= 0) {
                // the first piece's user is counted whole (its first chunks land meanwhile); another user's
                // pieces only until their split settles: their own tiles and masks are counted while the
                // piece before them reads (the chunk loop), their used, banks and chunk are final here
                if (user == first_user) {
                    banks.count_to(row, banks.end_block);
                } else {
                    banks.settle(row, kv_head, Args::pieces_per_work, Args::split_floor);
                }
                v = banks.view(row, positions[user], kv_head, index, Args::pieces_per_work, Args::fixed_chunk_tiles,
                               Args::window, Args::min_chunk_tiles, Args::chunk_cap, Args::token_window, Args::tokens);
                v.deferred = index < v.used && !banks.counted_all() ? 1 : 0;
            } else if (p == 0) {
                v.discard = early_chunks;
            }
            store_view(views, p, v);
            store_view(writer_views, p, v);
        }
    }

    // Piece 0's early chunks when the guard skipped its user: landed, then pushed unread, V padded to a whole
    // softmax block as the chunk loop pads a piece's (the compute kernel pops them: BankView::discard). Called
    // from the piece loop, after prepare_slots has written the V slots' ones tiles from cb_v's write pointer.
    void discard_early() {
        if (early_chunks == 0) {
            return;
        }
        noc_async_read_barrier();
        cb_push_back(cb_k, early_chunks * Args::k_slot_tiles);
        if constexpr (!Args::mla) {
            cb_push_back(cb_v, early_chunks * Args::v_slot_tiles);
            pad_v_to_whole_blocks<Args>(early_chunks);
        }
        early_chunks = 0;
    }

    // Piece q's view from buffer b's whole count.
    void complete(uint32_t q, uint32_t b) {
        const BankView v = row_counts[b].view(row_at(b), positions[Pieces::user(q)], Pieces::kv_head(q),
                                              Pieces::index(q), Args::pieces_per_work, Args::fixed_chunk_tiles,
                                              Args::window, Args::min_chunk_tiles, Args::chunk_cap,
                                              Args::token_window, Args::tokens);
        store_view(views, q, v);
        store_view(writer_views, q, v);
    }

    // Request the user's row into buffer b (landing at the next barrier), none of it counted yet.
    void fetch_row(uint32_t user, uint32_t b) {
        noc_async_read(page_table_gen.get_noc_addr(user), get_write_ptr(cb_page_table) + b * row_stride,
                       Args::page_table_row_bytes);
        row_user[b] = user;
        row_counts[b].begin_user(window_first_tile(positions[user], Args::window),
                                 (uint32_t)positions[user] / TILE);
    }

    // The pass over the core's pieces (bank-local: the other users' first, piece 0's user last), then, bank-local,
    // the first piece with keys made whole and the views pushed.
    void run() {
        if constexpr (Args::bank_local) {
            cb_reserve_back(cb_view_compute, 1);
            cb_reserve_back(cb_view_writer, 1);
            views = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_view_compute));
            writer_views = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_view_writer));
        }
        if constexpr (Args::paged) {
            volatile tt_l1_ptr int32_t* row = row_at(0);
            uint32_t checked = batch;  // the user whose row was checked last
            if constexpr (Args::bank_local) {
                for (uint32_t p = 0; p < pieces.count; ++p) {
                    if (Pieces::user(p) != first_user) {
                        pass_piece(p, row, checked);
                    }
                }
                for (uint32_t p = 0; p < pieces.count; ++p) {
                    if (Pieces::user(p) == first_user) {
                        pass_piece(p, row, checked);
                    }
                }
            } else {
                for (uint32_t p = 0; p < pieces.count; ++p) {
                    pass_piece(p, row, checked);
                }
            }
        }
        if constexpr (Args::bank_local) {
            if (pieces.count > 0 && positions[first_user] >= 0) {
                row_user[0] = first_user;  // the pass ended on it, counted whole
                row_counts[0] = banks;
            }
            // the first piece with keys has its whole view before the views go
            for (uint32_t q = 0; q < pieces.count; ++q) {
                const BankView v = load_view(views, q);
                if (Pieces::index(q) < v.used) {
                    if (v.deferred) {
                        fetch_row(Pieces::user(q), 1);
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
        page_table_user = Args::bank_local ? batch : row_ahead;  // the row the pass left in place, if any
    }

    // Before piece p's reads: its user's row in place (bank-local: in one of the two buffers, `row` pointed at
    // it) and, bank-local, the next deferred view's row requested into the other buffer. Whether a row was
    // requested for piece p (it must land before any K address uses it).
    bool begin_piece(uint32_t p, uint32_t user, volatile tt_l1_ptr int32_t*& row) {
        target = pieces.count;
        target_in = 0;
        bool fetched = false;
        if constexpr (Args::bank_local) {
            uint32_t row_in = row_user[1] == user ? 1 : 0;
            if (row_user[row_in] != user) {
                fetch_row(user, row_in);
                fetched = true;
            }
            row = row_at(row_in);
            uint32_t q = p + 1;
            while (q < pieces.count && Pieces::index(q) >= load_view(views, q).used) {
                ++q;
            }
            if (q < pieces.count && load_view(views, q).deferred) {
                const uint32_t next_user = Pieces::user(q);
                if (row_user[row_in] == next_user && row_counts[row_in].counted_all()) {
                    complete(q, row_in);
                } else {
                    target = q;
                    target_in = row_in ^ 1;
                    fetch_row(next_user, target_in);
                }
            }
        } else if constexpr (Args::paged) {
            if (user != page_table_user) {
                noc_async_read(page_table_gen.get_noc_addr(user), get_write_ptr(cb_page_table),
                               Args::page_table_row_bytes);
                page_table_user = user;
                fetched = true;
            }
        }
        return fetched;
    }

    // Bank-local: chunk c's key tiles (of `tiles`) into keys, walked from cursor / turn, or listed by read_early.
    void list_keys(uint32_t* keys, bool early, uint32_t c, uint32_t tiles, volatile tt_l1_ptr int32_t* row,
                   uint32_t kv_head, const BankView& view, uint32_t& cursor, uint32_t& turn) {
        for (uint32_t t = 0; t < tiles; ++t) {
            keys[t] = early ? early_keys[c * max_chunk_tiles + t]
                            : banks.next_tile(row, kv_head, view, cursor, turn);
        }
    }

    // A slice of the target's count beside chunk c's reads (its row landed with the first chunk); the whole
    // count and the target's view before the last chunk goes.
    void advance(uint32_t c, uint32_t chunks) {
        if (target == pieces.count) {
            return;
        }
        row_counts[target_in].count_slice(row_at(target_in), chunks - c);
        if (c + 1 == chunks) {
            complete(target, target_in);
            target = pieces.count;
        }
    }
};

}  // namespace flash_decode
