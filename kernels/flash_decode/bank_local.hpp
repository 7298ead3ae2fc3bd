// SPDX-License-Identifier: Apache-2.0
//
// The FlashDecode reader's side of the bank-local split (kv_pages "key_row" with a paged pool, common.hpp
// BankView): each piece's view, from the user's page-table row in L1. Mirrors ttdecode/core/split.py
// bank_local_view (tests/test_flash_decode_bank_paged.py checks the tiles each reader fetches).

#pragma once

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "common.hpp"

namespace flash_decode {

// The bank-local split's view of each piece (common.hpp BankView), from the user's page-table row. The DRAM
// bank of a key tile is a product and a modulus by compile-time constants (no division at run time).
// `spread_banks`: every piece takes its turn over all the banks held (one group), so the pieces' tile counts
// differ by one at most whatever the page table (DecodePlan.spread_banks).
// `block_entries`: page-table entries per counted block: 1, or 2 with 16-position blocks, whose split counts the
// row's even entries as blocks of one key tile (block_tiles 1): key tile t is owned by the bank of its first
// half, entry 2t (core.split.split_blocks); its second half is read from wherever it lies.
template <uint32_t num_kv_heads, uint32_t block_tiles, uint32_t dram_banks, bool spread_banks = false,
          uint32_t block_entries = 1>
struct BankLocal {
    static_assert(dram_banks <= 32, "a piece's banks are a 32-bit mask");
    // The user's attended tiles first..last: the whole blocks full_first..end_block - 1 counted by their first
    // row's bank (hist; blocks full_first..counted - 1 so far), the loose tiles of the partial first and last
    // blocks one by one.
    uint32_t first, last, full_first, end_block, counted;
    uint32_t hist[dram_banks];

    // The banks one KV head's tiles can reach (R_h): with g = gcd(NKV * bt, NB), bt * NB / g of them (all NB
    // when bt >= g).
    static constexpr uint32_t gcd(uint32_t a, uint32_t b) { return b == 0 ? a : gcd(b, a % b); }
    static constexpr uint32_t reach_step = gcd(num_kv_heads * block_tiles, dram_banks);
    static constexpr uint32_t reach = block_tiles >= reach_step ? dram_banks : block_tiles * dram_banks / reach_step;

    static uint32_t bank(volatile tt_l1_ptr int32_t* row, uint32_t kv_head, uint32_t t) {
        return ((uint32_t)row[t / block_tiles * block_entries] * (num_kv_heads * block_tiles) + kv_head * block_tiles +
                t % block_tiles) % dram_banks;
    }

    // A user's attended tiles first_tile..last_tile, none of its whole blocks counted yet.
    void begin_user(uint32_t first_tile, uint32_t last_tile) {
        first = first_tile;
        last = last_tile;
        full_first = (first + block_tiles - 1) / block_tiles;
        end_block = (last + 1) / block_tiles;
        counted = full_first;
        for (uint32_t b = 0; b < dram_banks; ++b) {
            hist[b] = 0;
        }
    }

    // Count the whole blocks up to `end` (at most end_block) of the user's page-table entries (already checked
    // inside the pool).
    void count_to(volatile tt_l1_ptr int32_t* row, uint32_t end) {
        for (; counted < end && counted < end_block; ++counted) {
            ++hist[((uint32_t)row[counted * block_entries] * (num_kv_heads * block_tiles)) % dram_banks];
        }
    }

    bool counted_all() const { return counted >= end_block; }

    // One pass over the user's attended page-table entries.
    void count_user(volatile tt_l1_ptr int32_t* row, uint32_t first_tile, uint32_t last_tile) {
        begin_user(first_tile, last_tile);
        count_to(row, end_block);
    }

    // Whether the blocks counted so far fix the split of (user, kv_head) over `pieces` whatever the rest of the
    // row holds: every bank of R_h already holds a tile and nb x the fewest >= u = min(pieces, max(1, T /
    // floor)), so used = u over the banks R_h, and each piece's banks and turn (sub, subs) are final; its own
    // tiles and masks are not (counts only grow).
    bool settled(volatile tt_l1_ptr int32_t* row, uint32_t kv_head, uint32_t pieces, uint32_t floor) const {
        uint32_t counts[dram_banks];
        head_counts(row, kv_head, counts);
        uint32_t held = 0;
        uint32_t fewest = 0xffffffffu;
        for (uint32_t b = 0; b < dram_banks; ++b) {
            if (counts[b] != 0) {
                ++held;
                fewest = counts[b] < fewest ? counts[b] : fewest;
            }
        }
        const uint32_t t = last + 1 - first;
        uint32_t u = t / floor > 1 ? t / floor : 1;
        u = u < pieces ? u : pieces;
        return held == reach && held * fewest >= u;
    }

    // Count 32 blocks at a time until the split of (user, kv_head) settles or the row is counted; whether it
    // settled.
    bool settle(volatile tt_l1_ptr int32_t* row, uint32_t kv_head, uint32_t pieces, uint32_t floor) {
        constexpr uint32_t step = 32;
        while (!settled(row, kv_head, pieces, floor)) {
            if (counted_all()) {
                return false;
            }
            count_to(row, counted + step);
        }
        return true;
    }

    // Count ceil(rest / slices) of the blocks not counted yet (one of `slices` slices of the rest).
    void count_slice(volatile tt_l1_ptr int32_t* row, uint32_t slices) {
        const uint32_t rest = counted < end_block ? end_block - counted : 0;
        count_to(row, counted + (rest + slices - 1) / slices);
    }

    // The first whole chunks (up to two) of the piece with view `v` from tile `start` on: their key tiles at
    // keys[c * stride + t]; cursor and turn (next_tile's) after the last whole one. Returns how many.
    uint32_t first_chunks(volatile tt_l1_ptr int32_t* row, uint32_t kv_head, const BankView& v, uint32_t start,
                          uint32_t* keys, uint32_t stride, uint32_t& cursor, uint32_t& turn) const {
        uint32_t chunks = 0;
        uint32_t found = 0;
        uint32_t walk_turn = 0;
        for (uint32_t k = start; k <= last && chunks < 2; ++k) {
            if ((v.own_banks >> bank(row, kv_head, k)) & 1u) {
                const bool mine = walk_turn == v.sub;
                walk_turn = walk_turn + 1 == v.subs ? 0 : walk_turn + 1;
                if (mine) {
                    keys[chunks * stride + found] = k;
                    if (++found == v.chunk_tiles) {
                        found = 0;
                        ++chunks;
                        cursor = k + 1;
                        turn = walk_turn;
                    }
                }
            }
        }
        return chunks;
    }

    // The piece's next own tile from `cursor` on: a tile of its banks whose ordinal o among their tiles has
    // o % subs == sub (`turn` keeps o % subs without a division).
    static uint32_t next_tile(volatile tt_l1_ptr int32_t* row, uint32_t kv_head, const BankView& v, uint32_t& cursor,
                              uint32_t& turn) {
        for (;; ++cursor) {
            if ((v.own_banks >> bank(row, kv_head, cursor)) & 1u) {
                const bool mine = turn == v.sub;
                turn = turn + 1 == v.subs ? 0 : turn + 1;
                if (mine) {
                    return cursor++;
                }
            }
        }
    }

    // Tiles of KV head `kv_head` in each bank.
    void head_counts(volatile tt_l1_ptr int32_t* row, uint32_t kv_head, uint32_t* counts) const {
        for (uint32_t b = 0; b < dram_banks; ++b) {
            counts[b] = 0;
        }
        if (full_first < end_block) {
            for (uint32_t base = 0; base < dram_banks; ++base) {
                if (hist[base] != 0) {
                    for (uint32_t r = 0; r < block_tiles; ++r) {
                        counts[(base + kv_head * block_tiles + r) % dram_banks] += hist[base];
                    }
                }
            }
            for (uint32_t t = first; t < full_first * block_tiles; ++t) {
                ++counts[bank(row, kv_head, t)];
            }
            for (uint32_t t = end_block * block_tiles; t <= last; ++t) {
                ++counts[bank(row, kv_head, t)];
            }
        } else {
            for (uint32_t t = first; t <= last; ++t) {
                ++counts[bank(row, kv_head, t)];
            }
        }
    }

    // Own tiles of a piece (banks `own`) in [from, to).
    static uint32_t own_between(volatile tt_l1_ptr int32_t* row, uint32_t kv_head, uint32_t own, uint32_t from,
                                uint32_t to) {
        uint32_t n = 0;
        for (uint32_t t = from; t < to; ++t) {
            n += (own >> bank(row, kv_head, t)) & 1u;
        }
        return n;
    }

    // The view of piece `index` of (user at cur_pos, kv_head); `window` is the span's, `token_window` each
    // token's (the masks, as piece_masks). With more pieces than banks held, the readers of a group of
    // banks (sub-pieces) take the group's tiles in turn (common.hpp BankView).
    BankView view(volatile tt_l1_ptr int32_t* row, int32_t cur_pos, uint32_t kv_head, uint32_t index, uint32_t pieces,
                  uint32_t fixed_chunk_tiles, uint32_t window, uint32_t min_chunk_tiles, uint32_t chunk_cap,
                  uint32_t token_window, uint32_t tokens) const {
        BankView v{};
        uint32_t counts[dram_banks];
        head_counts(row, kv_head, counts);
        uint32_t held[dram_banks];
        uint32_t num_held = 0;
        uint32_t fewest = 0xffffffffu;  // the fewest tiles of a bank held
        for (uint32_t b = 0; b < dram_banks; ++b) {
            if (counts[b] != 0) {
                held[num_held++] = b;
                fewest = counts[b] < fewest ? counts[b] : fewest;
            }
        }
        const uint32_t t = last + 1 - first;
        const uint32_t floor = fixed_chunk_tiles > 0 ? fixed_chunk_tiles : min_chunk_tiles;
        uint32_t used = t / floor > 1 ? t / floor : 1;
        used = used < pieces ? used : pieces;
        used = used < num_held * fewest ? used : num_held * fewest;
        v.used = used;
        v.chunk_tiles = chunk_tiles_for(cur_pos, fixed_chunk_tiles, used, window, min_chunk_tiles, chunk_cap);
        if (index >= used) {
            return v;
        }
        v.subs = 1;
        uint32_t own_total = 0;  // the tiles of the piece's banks (all its bank's readers' with subs > 1)
        if (!spread_banks && used <= num_held) {
            for (uint32_t j = index; j < num_held; j += used) {
                v.own_banks |= 1u << held[j];
                own_total += counts[held[j]];
            }
        } else {
            // G = gcd(used, num_held) groups of banks (one when spread); the group's pieces deal its tiles in turn
            uint32_t groups = spread_banks ? 1 : used;
            for (uint32_t rest = spread_banks ? 0 : num_held; rest != 0;) {
                const uint32_t next = groups % rest;
                groups = rest;
                rest = next;
            }
            v.sub = index / groups;
            v.subs = used / groups;
            for (uint32_t j = index % groups; j < num_held; j += groups) {
                v.own_banks |= 1u << held[j];
                own_total += counts[held[j]];
            }
        }
        v.num_tiles = (own_total - v.sub + v.subs - 1) / v.subs;
        // the masked tiles the piece owns (piece_masks' tiles), with their places in its own list: the tile's
        // ordinal o among its banks' tiles, taken when o % subs == sub, at o / subs
        const int32_t oldest = token_last_key(cur_pos, tokens, 0);
        uint32_t window_end = 0;
        if (token_window != 0) {
            window_end = (window_first_key(cur_pos, token_window) + TILE - 1) / TILE;
            for (uint32_t k = window_first_key(oldest, token_window) / TILE; k < window_end; ++k) {
                if ((v.own_banks >> bank(row, kv_head, k)) & 1u) {
                    add_mask(v, k, own_between(row, kv_head, v.own_banks, first, k));
                }
            }
        }
        for (uint32_t k = (uint32_t)(oldest + 1) / TILE; k <= last; ++k) {
            if (k >= window_end && ((v.own_banks >> bank(row, kv_head, k)) & 1u)) {
                add_mask(v, k, own_total - 1 - own_between(row, kv_head, v.own_banks, k + 1, last + 1));
            }
        }
        return v;
    }

    // Masked tile k, the `ordinal`-th of the view's banks' tiles: the view's when its sub-piece takes it.
    static void add_mask(BankView& v, uint32_t k, uint32_t ordinal) {
        if (ordinal % v.subs == v.sub) {
            v.mask_tiles[v.mask_count] = k;
            v.mask_at[v.mask_count++] = ordinal / v.subs;
        }
    }
};

}  // namespace flash_decode
