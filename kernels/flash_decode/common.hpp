// SPDX-License-Identifier: Apache-2.0
//
// Shared by the three FlashDecode kernels (reader, compute, writer): the circular-buffer indices,
// the chunk arithmetic and the merge tree. Every formula here mirrors ttdecode/core/split.py (used by the
// planner, ttdecode/ops/flash_decode/plan/), so the kernels derive the same chunk ranges from cur_pos at
// run time as the planner does on the host;
// tests/test_factory.py pins the two together.

#pragma once

#include <stdint.h>

#include "../shared/tile_layout.hpp"

namespace flash_decode {
using namespace tile_layout;  // TILE, FACE and the face arithmetic

// ---- circular buffers (indices of plan.flash_decode_cbs) ----------------------------------------
constexpr uint32_t cb_q = 0;             // the q rows of one KV group, bf16, zero rows past the group
constexpr uint32_t cb_k = 1;             // K chunks, double-buffered, one slot = max_chunk_tiles x d_tiles
constexpr uint32_t cb_v = 2;             // V chunks, same slots with dv_tiles
constexpr uint32_t cb_pos_compute = 3;   // int32 positions of every user, for the compute kernel
constexpr uint32_t cb_pos_writer = 4;    // the same page, for the writer
constexpr uint32_t cb_mask = 5;          // a piece's two masks: its first tile (window start), its last (cur_pos)
constexpr uint32_t cb_max_bcast = 6;     // the new row max of one q tile row broadcast along its rows (probabilities)
constexpr uint32_t cb_ones = 7;          // all ones: P x ones puts the row sums in every column
constexpr uint32_t cb_scores = 8;        // fp32 logits (scores x scale, masked) of one q tile row over one chunk
constexpr uint32_t cb_probs = 9;         // fp32 exp(S - m) of the same (read by the matmuls as TF32)
// The running statistics and output live in two sets of CBs used in turn: a chunk or a merge reads
// the current set and writes the other, so every CB is filled and emptied whole.
constexpr uint32_t cb_max_a = 10;        // running row max m (logit units, column 0), one tile per q tile row
constexpr uint32_t cb_max_b = 11;
constexpr uint32_t cb_sum_a = 12;        // running row sum l
constexpr uint32_t cb_sum_b = 13;
constexpr uint32_t cb_acc_a = 14;        // running unnormalized output O
constexpr uint32_t cb_acc_b = 15;
constexpr uint32_t cb_alpha = 16;        // rescale factors (e_own, e_child), then 1/l
constexpr uint32_t cb_partial_out = 17;  // this piece's (O, m, l), sent to the parent
constexpr uint32_t cb_partial_in = 18;   // children's partials, written by their writers over the NoC
constexpr uint32_t cb_out = 19;          // bf16 output tiles of the root
constexpr uint32_t cb_lse = 20;          // fp32 LSE tiles of the root (column 0 holds the value)
constexpr uint32_t cb_staging = 21;      // writer scratch: a block of zero rows and one LSE row
constexpr uint32_t cb_q_scaled = 22;     // power-of-two scales only: the q rows x scale (bf16, exact), Q . K^T's in0
constexpr uint32_t cb_page_table = 23;   // paged cache only: the reader's copy of one user's page-table row
constexpr uint32_t cb_sink = 24;         // attention sink only: the group's sink logits (bf16, column 0)
constexpr uint32_t cb_attn_mask = 25;    // attn_mask only: the group's mask rows of a chunk, [q tile row][key tile]
constexpr uint32_t cb_view_compute = 26; // bank-local only: the views of the core's pieces (BankView), for compute
constexpr uint32_t cb_view_writer = 27;  // the same page, for the writer
constexpr uint32_t cb_keys = 28;         // bank-local softmax blocks only: the reader's key tiles of a block's chunks

// Deepest merge tree (64 pieces per work); one semaphore per tree height level.
constexpr uint32_t MAX_ROUNDS = 6;
// Dynamic chunks (k_chunk_size 0) of up to this many tiles may hold a whole piece; larger ones (up to
// the plan's chunk_cap) only where a piece takes at least three (plan.SMALL_CHUNK_TILES).
constexpr uint32_t SMALL_CHUNK_TILES = 8;

// ---- chunk arithmetic (plan.valid_tiles / chunk_tiles_for / piece_range) ------------------------

// Oldest key a user attends: 0, or max(0, cur_pos - window + 1) with a sliding window of `window`
// keys (0 = no window).
inline uint32_t window_first_key(int32_t cur_pos, uint32_t window) {
    if (window == 0 || cur_pos < 0) {
        return 0;
    }
    const int32_t first = cur_pos - (int32_t)window + 1;
    return first > 0 ? (uint32_t)first : 0;
}

// The tile holding that key: the first tile the user's pieces read.
inline uint32_t window_first_tile(int32_t cur_pos, uint32_t window) { return window_first_key(cur_pos, window) / TILE; }

// Key tiles a user attends: window_first_tile .. cur_pos / 32 (ceil((cur_pos + 1) / 32) without a
// window); 0 for a skipped user (cur_pos -1).
inline uint32_t valid_tiles(int32_t cur_pos, uint32_t window = 0) {
    return cur_pos < 0 ? 0 : (uint32_t)(cur_pos + (int32_t)TILE) / TILE - window_first_tile(cur_pos, window);
}

inline uint32_t pow2ceil(uint32_t x) {
    uint32_t p = 1;
    while (p < x) {
        p <<= 1;
    }
    return p;
}

// A dynamic chunk for pieces of `per_piece` key tiles: c = the power of two >= max(per_piece,
// min_chunk_tiles); up to SMALL_CHUNK_TILES c holds the piece (at most a chunk_cap below SMALL_CHUNK_TILES,
// the plan's short caps), above it c / 4 (a chunk above 8 tiles only where the piece takes at least three),
// at least SMALL_CHUNK_TILES and at most chunk_cap.
inline uint32_t dynamic_chunk_tiles(uint32_t per_piece, uint32_t min_chunk_tiles, uint32_t chunk_cap) {
    const uint32_t c = pow2ceil(per_piece > min_chunk_tiles ? per_piece : min_chunk_tiles);
    if (c <= SMALL_CHUNK_TILES) {
        return c < chunk_cap ? c : chunk_cap;
    }
    const uint32_t quarter = c / 4 > SMALL_CHUNK_TILES ? c / 4 : SMALL_CHUNK_TILES;
    return quarter < chunk_cap ? quarter : chunk_cap;
}

// Chunk size in tiles: the fixed one, or (dynamic) dynamic_chunk_tiles of ceil(T / pieces), with the
// plan's split floor min_chunk_tiles (fewer pieces get keys when one more merge round would cost more
// than it saves) and cap chunk_cap (plan.chunk_cap).
inline uint32_t chunk_tiles_for(int32_t cur_pos, uint32_t fixed_chunk_tiles, uint32_t pieces, uint32_t window,
                                uint32_t min_chunk_tiles, uint32_t chunk_cap) {
    if (fixed_chunk_tiles > 0) {
        return fixed_chunk_tiles;
    }
    const uint32_t t = valid_tiles(cur_pos, window);
    const uint32_t per_piece = t ? (t + pieces - 1) / pieces : 1;
    return dynamic_chunk_tiles(per_piece, min_chunk_tiles, chunk_cap);
}

// Chunks of a user: ceil(T / chunk).
inline uint32_t num_chunks(int32_t cur_pos, uint32_t fixed_chunk_tiles, uint32_t pieces, uint32_t window,
                           uint32_t min_chunk_tiles, uint32_t chunk_cap) {
    const uint32_t c = chunk_tiles_for(cur_pos, fixed_chunk_tiles, pieces, window, min_chunk_tiles, chunk_cap);
    return (valid_tiles(cur_pos, window) + c - 1) / c;
}

struct PieceRange {
    uint32_t first_chunk;
    uint32_t num_chunks;
    uint32_t chunk_tiles;
    uint32_t first_tile;
    uint32_t num_tiles;  // the root's last chunk may be short: it ends at the tile holding cur_pos
    uint32_t stride;     // key tiles between two consecutive tiles of the piece: 1, or the cyclic split's pieces
    bool empty() const { return num_chunks == 0; }
    // Tiles of chunk k of this piece (only the last chunk may hold fewer than chunk_tiles).
    uint32_t tiles_in_chunk(uint32_t k) const {
        const uint32_t start = k * chunk_tiles;
        const uint32_t left = num_tiles - start;
        return left < chunk_tiles ? left : chunk_tiles;
    }
    // The key tile (of the user's sequence) that is the piece's k-th.
    uint32_t tile_at(uint32_t k) const { return first_tile + k * stride; }
};

// The cyclic split (plan.kv_pages "key_row", a contiguous cache): of a user's T attended key tiles, piece i
// of the p' pieces that get keys takes every p'-th tile, the tiles t with t % p' == i (t counted from the
// start of the sequence, not of the window). p' = min(pieces, max(1, T / floor)), floor = the fixed chunk,
// else the split floor (min_chunk_tiles), rounded down to a multiple of the DRAM banks (the compile-time arg
// dram_banks) from that many on: with key-row pages dealt round robin over the banks all of a piece's tiles
// then sit in one bank. Chunks are runs of consecutive tiles of the piece, of the dynamic size
// dynamic_chunk_tiles(T / p', floor, chunk_cap).
inline uint32_t cyclic_pieces(uint32_t t, uint32_t fixed_chunk_tiles, uint32_t pieces, uint32_t min_chunk_tiles,
                              uint32_t dram_banks) {
    const uint32_t floor = fixed_chunk_tiles > 0 ? fixed_chunk_tiles : min_chunk_tiles;
    const uint32_t by_floor = t / floor > 1 ? t / floor : 1;
    const uint32_t used = by_floor < pieces ? by_floor : pieces;
    // a piece per bank or more: a multiple of the banks, so that every piece still reads one bank
    return used >= dram_banks ? used - used % dram_banks : used;
}

inline PieceRange cyclic_piece_range(int32_t cur_pos, uint32_t fixed_chunk_tiles, uint32_t pieces, uint32_t index,
                                     uint32_t window, uint32_t min_chunk_tiles, uint32_t chunk_cap,
                                     uint32_t dram_banks) {
    const uint32_t t = valid_tiles(cur_pos, window);
    const uint32_t used = cyclic_pieces(t, fixed_chunk_tiles, pieces, min_chunk_tiles, dram_banks);
    const uint32_t c = chunk_tiles_for(cur_pos, fixed_chunk_tiles, used, window, min_chunk_tiles, chunk_cap);
    PieceRange r{0, 0, c, 0, 0, used};
    if (t == 0 || index >= used) {
        return r;
    }
    const uint32_t start = window_first_tile(cur_pos, window);
    r.first_tile = start + (index + used - start % used) % used;  // the first tile >= start with t % used == index
    r.num_tiles = (start + t - r.first_tile + used - 1) / used;
    r.num_chunks = (r.num_tiles + c - 1) / c;
    return r;
}

// The chunks of piece `index` (0 = root, owning the last chunk): pieces deal the n chunks from the
// end, the first n % pieces of them one chunk more than the others (`cyclic`: cyclic_piece_range). Chunks count from the first
// attended tile, so with a sliding window the pieces cover exactly the window's tiles.
inline PieceRange piece_range(int32_t cur_pos, uint32_t fixed_chunk_tiles, uint32_t pieces, uint32_t index,
                              uint32_t window, uint32_t min_chunk_tiles, bool cyclic, uint32_t chunk_cap,
                              uint32_t dram_banks) {
    if (cyclic) {
        return cyclic_piece_range(cur_pos, fixed_chunk_tiles, pieces, index, window, min_chunk_tiles, chunk_cap,
                                  dram_banks);
    }
    const uint32_t t = valid_tiles(cur_pos, window);
    const uint32_t c = chunk_tiles_for(cur_pos, fixed_chunk_tiles, pieces, window, min_chunk_tiles, chunk_cap);
    const uint32_t n = (t + c - 1) / c;
    const uint32_t base = n / pieces;
    const uint32_t extra = n % pieces;
    const uint32_t above = index * base + (index < extra ? index : extra);
    const uint32_t count = base + (index < extra ? 1 : 0);
    PieceRange r{0, 0, c, 0, 0, 1};
    if (count == 0) {
        return r;
    }
    const uint32_t end_chunk = n - above;
    r.first_chunk = end_chunk - count;
    r.num_chunks = count;
    const uint32_t last_tile = end_chunk * c < t ? end_chunk * c : t;
    r.num_tiles = last_tile - r.first_chunk * c;
    r.first_tile = window_first_tile(cur_pos, window) + r.first_chunk * c;
    return r;
}

// ---- multi-token decode and the masks ---------------------------------------------------------

// Token j (0 = oldest) of a user whose last new token is at cur_pos sits at key position
// cur_pos - (T - 1 - j) and attends keys window_first_key(that position, window) .. that position.
inline int32_t token_last_key(int32_t cur_pos, uint32_t tokens, uint32_t j) {
    return cur_pos - (int32_t)(tokens - 1 - j);
}

// Together a user's T tokens attend one span of keys: cur_pos's sliding window widened by T - 1 keys
// (0 = no window). The chunk arithmetic above runs on this span, so K and V are read once for all T.
constexpr uint32_t span_window(uint32_t window, uint32_t tokens) { return window == 0 ? 0 : window + tokens - 1; }

// The key tiles of one piece that some q row sees only in part: tiles with keys past the oldest
// token's position (causal: at most 2, as the T <= 32 positions span at most 2 tiles) and, with a
// sliding window, tiles with keys before the newest token's window start (at most 2). The writer
// makes one mask per (masked tile, q tile row), page i * q_tiles + qi for masked tile i: -inf where
// the row's token does not attend the key, 0 elsewhere. `window` is the per-token window.
constexpr uint32_t MAX_MASKED_TILES = 4;
// The most masked tiles a piece can have for this shape: the causal tiles (1, or 2 for T > 1) plus,
// with a window, as many window tiles. The mask CB holds this many pages per q tile row.
constexpr uint32_t masked_tiles_bound(uint32_t window, uint32_t tokens) {
    return (tokens > 1 ? 2u : 1u) * (window != 0 ? 2u : 1u);
}
struct PieceMasks {
    uint32_t count;                    // masked tiles of the piece, in increasing order
    uint32_t tiles[MAX_MASKED_TILES];  // their key tile indices
    uint32_t at[MAX_MASKED_TILES];     // their places in the piece (tile tiles[i] is the piece's tile at[i])
    bool any() const { return count > 0; }
    void add(const PieceRange& range, uint32_t t) {
        tiles[count] = t;
        at[count] = (t - range.first_tile) / range.stride;
        ++count;
    }
};

// Is key tile t one of the piece's tiles?
inline bool piece_holds(const PieceRange& range, uint32_t t) {
    return !range.empty() && t >= range.first_tile && t <= range.tile_at(range.num_tiles - 1) &&
           (t - range.first_tile) % range.stride == 0;
}

inline PieceMasks piece_masks(int32_t cur_pos, const PieceRange& range, uint32_t window, uint32_t tokens) {
    PieceMasks m{0, {0, 0, 0, 0}, {0, 0, 0, 0}};
    if (range.empty()) {
        return m;
    }
    const int32_t oldest = token_last_key(cur_pos, tokens, 0);  // >= 0 for a user with work
    // window: tiles from the oldest token's window start up to (not including) the first tile that
    // starts at or after the newest token's window start
    uint32_t window_end = 0;
    if (window != 0) {
        const uint32_t newest_start = window_first_key(cur_pos, window);
        window_end = (newest_start + TILE - 1) / TILE;
        for (uint32_t t = window_first_key(oldest, window) / TILE; t < window_end; ++t) {
            if (piece_holds(range, t)) {
                m.add(range, t);
            }
        }
    }
    // causal: from the first tile with a key past the oldest token's position to cur_pos's tile
    for (uint32_t t = (uint32_t)(oldest + 1) / TILE; t <= (uint32_t)cur_pos / TILE; ++t) {
        if (t >= window_end && piece_holds(range, t)) {
            m.add(range, t);
        }
    }
    return m;
}

// Does q row `row` (token row / group size, token-major) attend key `key`? Rows past the T x g
// tokens' rows (zero q rows) attend every key.
inline bool row_attends(int32_t cur_pos, uint32_t window, uint32_t tokens, uint32_t group_size, uint32_t row,
                        uint32_t key) {
    if (row >= tokens * group_size) {
        return true;
    }
    const int32_t last = token_last_key(cur_pos, tokens, row / group_size);
    return (int32_t)key <= last && key >= window_first_key(last, window);
}

// A piece holds chunks exactly when its index is below the number of chunks (pieces are filled in
// index order; cyclic: below the pieces that get keys), so empty pieces only ever have empty children.
inline bool piece_has_work(int32_t cur_pos, uint32_t fixed_chunk_tiles, uint32_t pieces, uint32_t index,
                           uint32_t window, uint32_t min_chunk_tiles, bool cyclic, uint32_t chunk_cap,
                           uint32_t dram_banks) {
    if (cyclic) {
        const uint32_t t = valid_tiles(cur_pos, window);
        return t > 0 && index < cyclic_pieces(t, fixed_chunk_tiles, pieces, min_chunk_tiles, dram_banks);
    }
    return index < num_chunks(cur_pos, fixed_chunk_tiles, pieces, window, min_chunk_tiles, chunk_cap) && index < pieces;
}

// ---- the binomial merge tree (plan.tree_children / tree_parent) ---------------------------------

// Does piece `index` receive from index + 2^round in that round?
inline bool tree_has_child(uint32_t index, uint32_t round, uint32_t pieces) {
    const uint32_t step = 1u << round;
    return (index % (2 * step)) == 0 && index + step < pieces;
}

// Height = number of children = number of merge rounds the piece receives in.
inline uint32_t tree_height(uint32_t index, uint32_t pieces) {
    uint32_t h = 0;
    for (uint32_t r = 0; r < MAX_ROUNDS; ++r) {
        if (tree_has_child(index, r, pieces)) {
            ++h;
        }
    }
    return h;
}

// Parent of a non-root piece: clear its lowest set bit.
inline uint32_t tree_parent(uint32_t index) { return index & (index - 1); }

// Children of `index` that hold chunks for this user (each sends exactly one partial).
inline uint32_t children_with_work(int32_t cur_pos, uint32_t fixed_chunk_tiles, uint32_t pieces, uint32_t index,
                                   uint32_t window, uint32_t min_chunk_tiles, bool cyclic, uint32_t chunk_cap,
                                   uint32_t dram_banks) {
    uint32_t count = 0;
    for (uint32_t r = 0; r < MAX_ROUNDS; ++r) {
        if (tree_has_child(index, r, pieces) &&
            piece_has_work(cur_pos, fixed_chunk_tiles, pieces, index + (1u << r), window, min_chunk_tiles, cyclic,
                           chunk_cap, dram_banks)) {
            ++count;
        }
    }
    return count;
}

// ---- the bank-local split (plan.bank_local: key_row pages of a paged cache; core/split.py bank_local_view) ---
// Key tile t of (user, KV head h) is page (pt[t / bt] * NKV + h) * bt + t % bt of the pool, in DRAM bank
// page % dram_banks. Of the banks holding the user's attended tiles, L (ascending bank id), used =
// min(pieces, max(1, T / floor), |L| * min_b c_b) pieces get keys (floor: the fixed chunk, else the split
// floor; c_b: attended tiles in bank b). With used <= |L| piece i < used owns the banks L[j] with
// j % used == i and reads their tiles in ascending order; with used > |L| (several readers per bank), in
// G = gcd(used, |L|) groups, piece i owns the banks L[j] with j % G == i % G as sub-piece i / G of
// subs = used / G: the o-th of the group's tiles (ascending) when o % subs == i / G. Chunks of the fixed
// size or dynamic_chunk_tiles(ceil(T / used), floor, chunk_cap). The pieces with keys are a prefix,
// so empty pieces only have empty children. The reader derives every piece's view from the page table and
// pushes the core's views once (one page, VIEW_WORDS words a piece in the core's piece order) to the
// compute kernel and the writer, which take their chunk ranges, masks and children from it.
constexpr uint32_t VIEW_WORDS = 17;
struct BankView {
    uint32_t used;         // pieces of the (user, KV head) with keys; 0 for a skipped user
    uint32_t own_banks;    // bit b: the piece reads the tiles in bank b
    uint32_t subs;         // readers sharing its banks (1: the piece reads every tile of its banks)
    uint32_t sub;          // which of them: the piece takes its banks' o-th tile when o % subs == sub
    uint32_t num_tiles;    // the piece's own tiles
    uint32_t chunk_tiles;  // its chunk
    uint32_t mask_count;   // the piece's masked tiles (PieceMasks), increasing
    uint32_t mask_tiles[MAX_MASKED_TILES];
    uint32_t mask_at[MAX_MASKED_TILES];
    uint32_t deferred;     // reader only: the piece's own tiles and masks still to count (page_table_pass.hpp)
    uint32_t discard;      // a skipped piece's chunks the reader pushed unread (its first piece's early chunks)
};
static_assert(sizeof(BankView) == VIEW_WORDS * sizeof(uint32_t), "a view is VIEW_WORDS words");

// Views cross kernels in L1: word by word through `words` (a volatile L1 pointer), slot p of the view page.
template <typename Words>
inline void store_view(Words words, uint32_t p, const BankView& v) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(&v);
    for (uint32_t w = 0; w < VIEW_WORDS; ++w) {
        words[p * VIEW_WORDS + w] = src[w];
    }
}
template <typename Words>
inline BankView load_view(Words words, uint32_t p) {
    BankView v{};
    uint32_t* dst = reinterpret_cast<uint32_t*>(&v);
    for (uint32_t w = 0; w < VIEW_WORDS; ++w) {
        dst[w] = words[p * VIEW_WORDS + w];
    }
    return v;
}

// A view's chunks as a PieceRange (num_chunks, chunk_tiles, num_tiles; its tiles are not a stride: the reader
// walks them).
inline PieceRange view_range(const BankView& v) {
    PieceRange r{0, 0, v.chunk_tiles, 0, 0, 0};
    if (v.num_tiles > 0) {
        r.num_tiles = v.num_tiles;
        r.num_chunks = (v.num_tiles + v.chunk_tiles - 1) / v.chunk_tiles;
    }
    return r;
}

inline PieceMasks view_masks(const BankView& v) {
    PieceMasks m{v.mask_count, {0, 0, 0, 0}, {0, 0, 0, 0}};
    for (uint32_t i = 0; i < v.mask_count; ++i) {
        m.tiles[i] = v.mask_tiles[i];
        m.at[i] = v.mask_at[i];
    }
    return m;
}

// Children of `index` holding keys: the tree's children below the view's used.
inline uint32_t view_children_with_work(const BankView& v, uint32_t index, uint32_t pieces) {
    uint32_t count = 0;
    for (uint32_t r = 0; r < MAX_ROUNDS; ++r) {
        if (tree_has_child(index, r, pieces) && index + (1u << r) < v.used) {
            ++count;
        }
    }
    return count;
}

}  // namespace flash_decode
