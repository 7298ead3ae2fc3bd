// SPDX-License-Identifier: Apache-2.0
//
// FlashDecode writer (BRISC). Makes the constant tile (ones) and each piece's masks (per q row: the
// causal boundary of the row's token, its sliding window's start); moves partial results up the merge
// tree; writes the roots' output rows (every token's) and LSE rows to DRAM.
//
// Partials travel in float32: a partial is an unnormalized accumulator (O, running max m, row sum
// l) that is rescaled and summed again at every tree level, so bf16 rounding there would compound
// over up to six rounds, while fp32 costs only bandwidth. That bandwidth is kept small by sending
// only the face rows that hold real q heads (a KV group's g rows, not the 32 rows of a tile), and
// for m and l only the face column that holds column 0 (the only column the merge broadcasts).

#include <stdint.h>

// compile-check-named: q_tile_rows=32
#include "api/dataflow/dataflow_api.h"
#include "common.hpp"
#include "../shared/sharded_tiles.hpp"

using namespace flash_decode;

namespace {

constexpr uint16_t BF16_ONE = 0x3F80;
constexpr uint16_t BF16_NEG_INF = 0xFF80;
constexpr uint32_t FP32_NEG_INF = 0xFF800000u;
constexpr uint32_t BF16_TILE_BYTES = TILE * TILE * 2;
constexpr uint32_t BF16_FACE_ROW_BYTES = FACE * 2;

// Fill a bf16 tile of `rows` rows (32; 16: a 16x32 tile, faces 0-1; 8: an 8x32 tile) in L1:
// value(row, col) for every element, in face order.
template <uint32_t rows = TILE, typename Fn>
void fill_bf16_tile(uint32_t l1_addr, Fn value) {
    volatile tt_l1_ptr uint16_t* tile = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(l1_addr);
    for (uint32_t row = 0; row < rows; ++row) {
        for (uint32_t half = 0; half < 2; ++half) {
            const uint32_t base = tile_row_offset<rows>(row, half);
            for (uint32_t c = 0; c < FACE; ++c) {
                tile[base + c] = value(row, half * FACE + c);
            }
        }
    }
}

// Make one constant tile in `cb` and hand it to the compute kernel (which never pops it).
template <typename Fn>
void push_constant_tile(uint32_t cb, Fn value) {
    cb_reserve_back(cb, 1);
    fill_bf16_tile(get_write_ptr(cb), value);
    cb_push_back(cb, 1);
}

// Send the first `rows` rows of one partial tile of `datum_bytes`-byte data (only column half 0 when
// `column0_only`) to the same place in a tile at dst. Rows of one face are contiguous, so each face is
// one NoC write. The tiles have tile_rows rows: a 16x32 tile's rows (at most 16) are faces 0-1, laid
// out as in a 32x32 tile; an 8x32 tile's are two faces of 8 rows.
template <uint32_t datum_bytes, uint32_t tile_rows>
void send_tile_rows(uint32_t src_l1, uint64_t dst, uint32_t rows, bool column0_only) {
    constexpr uint32_t face_rows = tile_rows < FACE ? tile_rows : FACE;
    if (rows >= tile_rows && !column0_only) {
        noc_async_write(src_l1, dst, tile_rows * TILE * datum_bytes);
        return;
    }
    for (uint32_t face_row0 = 0; face_row0 < rows; face_row0 += face_rows) {
        const uint32_t n = rows - face_row0 < face_rows ? rows - face_row0 : face_rows;
        for (uint32_t half = 0; half < (column0_only ? 1u : 2u); ++half) {
            const uint32_t offset = tile_row_offset<tile_rows>(face_row0, half) * datum_bytes;
            noc_async_write(src_l1 + offset, dst + offset, n * FACE * datum_bytes);
        }
    }
}

}  // namespace

void kernel_main() {
    constexpr uint32_t num_kv_heads = get_named_compile_time_arg_val("num_kv_heads");
    constexpr uint32_t q_tiles = get_named_compile_time_arg_val("q_tiles");
    constexpr uint32_t dv_tiles = get_named_compile_time_arg_val("dv_tiles");
    constexpr uint32_t group_size = get_named_compile_time_arg_val("group_size");
    constexpr uint32_t nh_tiles = get_named_compile_time_arg_val("nh_tiles");
    constexpr uint32_t pieces_per_work = get_named_compile_time_arg_val("pieces_per_work");
    constexpr uint32_t fixed_chunk_tiles = get_named_compile_time_arg_val("fixed_chunk_tiles");
    constexpr bool return_lse = get_named_compile_time_arg_val("return_lse") == 1;
    constexpr uint32_t token_window = get_named_compile_time_arg_val("token_window");  // each token's sliding window in keys (0 = none)
    constexpr uint32_t tokens = get_named_compile_time_arg_val("tokens");        // new tokens per user (multi-token decode)
    constexpr uint32_t batch = get_named_compile_time_arg_val("batch");
    constexpr uint32_t min_chunk_tiles = get_named_compile_time_arg_val("min_chunk_tiles");  // split floor of dynamic chunks
    constexpr uint32_t chunk_cap = get_named_compile_time_arg_val("chunk_cap");  // largest dynamic chunk (plan.chunk_cap)
    constexpr bool cyclic_split = get_named_compile_time_arg_val("cyclic_split") == 1;  // a piece takes every p'-th key tile
    constexpr uint32_t dram_banks = get_named_compile_time_arg_val("dram_banks");  // the device's DRAM banks
    // key_row pages of a paged cache: the pieces' work, masks and children come in the reader's views
    constexpr bool bank_local = get_named_compile_time_arg_val("bank_local") == 1;
    // The chunk arithmetic runs on the span of keys the T tokens attend together (common.hpp).
    constexpr uint32_t window = span_window(token_window, tokens);
    constexpr uint32_t q_rows = tokens * group_size;  // q rows in use: token-major, g heads per token
    constexpr uint32_t partial_tiles = q_tiles * (dv_tiles + 2);  // O, then m, then l
    // The q-row CBs' tiles (masks, partials, output, LSE): 32x32, or 16x32 (faces 0-1) with <= 16 q
    // rows, or 8x32 (two faces of 8 rows) with <= 8.
    constexpr uint32_t q_tile_rows = get_named_compile_time_arg_val("q_tile_rows");
    static_assert(q_tile_rows == 32 || (q_tile_rows < 32 && q_tiles == 1 && q_rows <= q_tile_rows),
                  "16-row or 8-row q tiles hold one q tile row of at most that many q rows");
    constexpr uint32_t q_bf16_tile_bytes = q_tile_rows * TILE * 2;
    // the partials' tiles: fp32 with an fp32 DST, bf16 with a bf16 DST (plan: the softmax's intermediates)
    constexpr uint32_t partial_datum_bytes = get_named_compile_time_arg_val("partial_datum_bytes");
    constexpr uint32_t partial_tile_bytes = q_tile_rows * TILE * partial_datum_bytes;
    constexpr uint32_t partial_bytes = partial_tiles * partial_tile_bytes;
    // The bounded merge (plan.merge_slot): partials travel one q tile row (a message: O's dv tiles, m, l) at
    // a time through one slot at the partial_in base; semaphore 0 counts the messages that land, semaphore
    // 1 + p the grants piece p of this core receives for its messages.
    constexpr bool merge_slot = get_named_compile_time_arg_val("merge_slot") == 1;
    constexpr uint32_t message_tiles = dv_tiles + 2;
    constexpr uint32_t lse_row_bytes = q_tiles * TILE * 4;
    constexpr uint32_t zero_block_bytes = FACE * BF16_FACE_ROW_BYTES;  // one face's worth of zero rows

    // Common runtime args (the same on every core): the output addresses.
    const uint32_t out_addr = get_common_arg_val<uint32_t>(0);
    const uint32_t lse_addr = get_common_arg_val<uint32_t>(1);
    const uint32_t num_pieces = get_arg_val<uint32_t>(0);
    constexpr uint32_t piece_args_base = 1;
    constexpr uint32_t args_per_piece = 6;

#ifdef OUT_SHARDS  // the output height-sharded in L1 (the memory_config asked): written to its holders
    const ShardedTiles<OUT_SHARD_PAGES, BF16_TILE_BYTES> out_gen = {out_addr, OUT_SHARD_ARGS};
#else
    const InterleavedAddrGen<true> out_gen = {.bank_base_address = out_addr, .page_size = BF16_TILE_BYTES};
#endif
    const InterleavedAddrGen<true> lse_gen = {.bank_base_address = lse_addr, .page_size = lse_row_bytes};

    // Constant tiles for the compute kernel.
    push_constant_tile(cb_ones, [](uint32_t, uint32_t) { return BF16_ONE; });

    // Scratch: a block of zero rows (the output of a skipped user) followed by one LSE row.
    const uint32_t zeros_l1 = get_write_ptr(cb_staging);
    const uint32_t lse_row_l1 = zeros_l1 + zero_block_bytes;
    {
        volatile tt_l1_ptr uint32_t* words = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(zeros_l1);
        for (uint32_t i = 0; i < zero_block_bytes / 4; ++i) {
            words[i] = 0;
        }
    }

    cb_wait_front(cb_pos_writer, 1);
    volatile tt_l1_ptr int32_t* positions = reinterpret_cast<volatile tt_l1_ptr int32_t*>(get_read_ptr(cb_pos_writer));
    volatile tt_l1_ptr uint32_t* views = nullptr;
    if constexpr (bank_local) {
        cb_wait_front(cb_view_writer, 1);
        views = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_read_ptr(cb_view_writer));
    }

    // Children's partials land at fixed addresses: area a starts at the partial_in base (the same L1
    // address on every core) + a * partial_bytes. Taken before any push moves the write pointer.
    const uint32_t partial_in_base = get_write_ptr(cb_partial_in);

    // Partials expected per tree height level: all children with work of all of this core's pieces
    // at that height increment the same semaphore (id = height - 1).
    uint32_t expected_at_level[MAX_ROUNDS] = {0};
    for (uint32_t p = 0; p < num_pieces && !merge_slot; ++p) {
        const uint32_t user = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 0);
        const uint32_t index = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 2);
        const uint32_t height = tree_height(index, pieces_per_work);
        if (height > 0) {
            expected_at_level[height - 1] +=
                bank_local ? view_children_with_work(load_view(views, p), index, pieces_per_work)
                           : children_with_work(positions[user], fixed_chunk_tiles, pieces_per_work, index, window,
                                                min_chunk_tiles, cyclic_split, chunk_cap, dram_banks);
        }
    }
    bool level_arrived[MAX_ROUNDS] = {false};
    // merge_slot: the children's (NoC x, NoC y, slot) of every piece follow the pieces' args, 3 a child round
    uint32_t child_args = piece_args_base + num_pieces * args_per_piece;
    uint32_t landed = 0;  // messages landed in the slot so far (semaphore 0 counts them)

    for (uint32_t p = 0; p < num_pieces; ++p) {
        const uint32_t user = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 0);
        const uint32_t kv_head = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 1);
        const uint32_t index = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 2);
        const uint32_t parent_x = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 3);
        const uint32_t parent_y = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 4);
        const uint32_t parent_area = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 5);
        const int32_t cur_pos = positions[user];
        BankView view{};  // bank-local: the piece's view from the reader
        if constexpr (bank_local) {
            view = load_view(views, p);
        }
        const PieceRange range = bank_local ? view_range(view)
                                            : piece_range(cur_pos, fixed_chunk_tiles, pieces_per_work, index, window,
                                                          min_chunk_tiles, cyclic_split, chunk_cap, dram_banks);
        const bool has_work = !range.empty();
        const uint32_t height = tree_height(index, pieces_per_work);
        const bool is_root = index == 0;

        // The piece's masks (common.hpp piece_masks): one page per (masked tile, q tile row), -inf
        // where the row's token does not attend the key (past its position, before its window).
        // Pushed first, so the compute kernel can run all its chunks while the children still work.
        // The CB holds exactly one piece's pages (masked_tiles_bound x q_tiles, the unused ones left
        // as they are), so every piece's masks start at the CB's first page.
        const PieceMasks masks = bank_local ? view_masks(view) : piece_masks(cur_pos, range, token_window, tokens);
        if (masks.any()) {
            cb_reserve_back(cb_mask, masked_tiles_bound(token_window, tokens) * q_tiles);
            const uint32_t mask_l1 = get_write_ptr(cb_mask);
            for (uint32_t i = 0; i < masks.count; ++i) {
                const uint32_t first_key = masks.tiles[i] * TILE;
                for (uint32_t qi = 0; qi < q_tiles; ++qi) {
                    fill_bf16_tile<q_tile_rows>(mask_l1 + (i * q_tiles + qi) * q_bf16_tile_bytes,
                                   [cur_pos, first_key, qi](uint32_t row, uint32_t col) {
                                       return row_attends(cur_pos, token_window, tokens, group_size, qi * TILE + row,
                                                          first_key + col)
                                                  ? (uint16_t)0
                                                  : BF16_NEG_INF;
                                   });
                }
            }
            cb_push_back(cb_mask, masked_tiles_bound(token_window, tokens) * q_tiles);
        }

        // The children's partials: through the slot, or (the dedicated areas) handed to the compute kernel
        // once every partial of this height level has landed. All areas of the piece are pushed, including
        // those of children without work, so the FIFO position always equals the fixed area address.
        if (merge_slot && height > 0) {
            // One message at a time, children in merge order: wait for the slot to be free (the compute
            // kernel popped the last message), grant the child the row, wait for it to land, hand it over.
            for (uint32_t r = 0; r < height && has_work; ++r) {
                const uint32_t child = index + (1u << r);
                const bool child_works = bank_local ? child < view.used
                                                    : piece_has_work(cur_pos, fixed_chunk_tiles, pieces_per_work, child,
                                                                     window, min_chunk_tiles, cyclic_split, chunk_cap,
                                                                     dram_banks);
                if (!child_works) {
                    continue;
                }
                const uint32_t child_x = get_arg_val<uint32_t>(child_args + 3 * r);
                const uint32_t child_y = get_arg_val<uint32_t>(child_args + 3 * r + 1);
                const uint32_t child_slot = get_arg_val<uint32_t>(child_args + 3 * r + 2);
                for (uint32_t qi = 0; qi < q_tiles; ++qi) {
                    cb_reserve_back(cb_partial_in, message_tiles);
                    noc_semaphore_inc(get_noc_addr(child_x, child_y, get_semaphore(1 + child_slot)), 1);
                    noc_semaphore_wait_min(reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(0)), ++landed);
                    cb_push_back(cb_partial_in, message_tiles);
                }
            }
            child_args += 3 * height;
        } else if (height > 0) {
            const uint32_t level = height - 1;
            if (has_work && !level_arrived[level]) {
                if (expected_at_level[level] > 0) {
                    noc_semaphore_wait_min(
                        reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(level)), expected_at_level[level]);
                }
                level_arrived[level] = true;
            }
            cb_reserve_back(cb_partial_in, height * partial_tiles);
            cb_push_back(cb_partial_in, height * partial_tiles);
        }

        if (!is_root) {
            if (!has_work) {
                continue;
            }
            if constexpr (merge_slot) {
                // Each q tile row's message once the parent grants it, into the parent's slot, counted
                // on the parent's semaphore 0 (the write barrier orders data before signal).
                const uint64_t slot = get_noc_addr(parent_x, parent_y, partial_in_base);
                for (uint32_t qi = 0; qi < q_tiles; ++qi) {
                    cb_wait_front(cb_partial_out, message_tiles);
                    noc_semaphore_wait_min(reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(1 + p)), qi + 1);
                    const uint32_t src = get_read_ptr(cb_partial_out);
                    const uint32_t rows = q_rows - qi * TILE < TILE ? q_rows - qi * TILE : TILE;
                    for (uint32_t t = 0; t < message_tiles; ++t) {
                        send_tile_rows<partial_datum_bytes, q_tile_rows>(src + t * partial_tile_bytes,
                                                                         slot + t * partial_tile_bytes, rows,
                                                                         t >= dv_tiles);
                    }
                    noc_async_write_barrier();
                    noc_semaphore_inc(get_noc_addr(parent_x, parent_y, get_semaphore(0)), 1);
                    cb_pop_front(cb_partial_out, message_tiles);
                }
                continue;
            }
            // Send (O, m, l) into the parent's area, then count it on the parent's semaphore for the
            // parent's height level. The write barrier orders data before signal.
            cb_wait_front(cb_partial_out, partial_tiles);
            const uint32_t src = get_read_ptr(cb_partial_out);
            const uint64_t dst = get_noc_addr(parent_x, parent_y, partial_in_base + parent_area * partial_bytes);
            for (uint32_t t = 0; t < partial_tiles; ++t) {
                const bool is_stat = t >= q_tiles * dv_tiles;
                const uint32_t q_tile = is_stat ? (t - q_tiles * dv_tiles) % q_tiles : t / dv_tiles;
                const uint32_t rows = q_rows - q_tile * TILE < TILE ? q_rows - q_tile * TILE : TILE;
                send_tile_rows<partial_datum_bytes, q_tile_rows>(src + t * partial_tile_bytes, dst + t * partial_tile_bytes, rows,
                                                    is_stat);
            }
            noc_async_write_barrier();
            const uint32_t parent_level = tree_height(tree_parent(index), pieces_per_work) - 1;
            noc_semaphore_inc(get_noc_addr(parent_x, parent_y, get_semaphore(parent_level)), 1);
            cb_pop_front(cb_partial_out, partial_tiles);
            continue;
        }

        // Root: scatter the group's g rows of each token into the output tiles of (token j, user b).
        // Group row r of token j is row h*g + r of that [NH, Dv] matrix; it comes from q row
        // j*g + r, row (j*g + r) % 32 of q tile row (j*g + r) / 32.
        uint32_t out_l1 = 0;
        if (has_work) {
            cb_wait_front(cb_out, q_tiles * dv_tiles);
            out_l1 = get_read_ptr(cb_out);
        }
        const uint32_t first_row = kv_head * group_size;
        for (uint32_t j = 0; j < tokens; ++j) {
            const uint32_t matrix = j * batch + user;
            for (uint32_t r = 0; r < group_size;) {
                const uint32_t q_row = j * group_size + r;
                const uint32_t src_row = q_row % TILE;
                const uint32_t dst_row = (first_row + r) % TILE;
                const uint32_t rows = row_run(src_row, dst_row, group_size - r);
                for (uint32_t v = 0; v < dv_tiles; ++v) {
                    const uint32_t page = (matrix * nh_tiles + (first_row + r) / TILE) * dv_tiles + v;
                    const uint32_t src_tile = out_l1 + ((q_row / TILE) * dv_tiles + v) * q_bf16_tile_bytes;
                    for (uint32_t half = 0; half < 2; ++half) {
                        // A skipped user (cur_pos -1) gets zero rows.
                        const uint32_t src = has_work ? src_tile + tile_row_offset<q_tile_rows>(src_row, half) * 2 : zeros_l1;
                        const uint64_t dst = out_gen.get_noc_addr(page) + face_row_offset(dst_row, half) * 2;
                        noc_async_write(src, dst, rows * BF16_FACE_ROW_BYTES);
                    }
                }
                r += rows;
            }
        }

        // LSE row of (b, h): column 0 of every q row of the LSE tiles; -inf for a skipped user.
        if (return_lse) {
            volatile tt_l1_ptr uint32_t* row = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(lse_row_l1);
            if (has_work) {
                cb_wait_front(cb_lse, q_tiles);
                volatile tt_l1_ptr uint32_t* lse_tiles = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_read_ptr(cb_lse));
                // rows past a 16x32 or 8x32 tile hold no q head: -inf, as for a user with no keys
                for (uint32_t y = 0; y < q_tiles * TILE; ++y) {
                    row[y] = y < q_tiles * q_tile_rows
                                 ? lse_tiles[(y / TILE) * TILE * TILE + tile_row_offset<q_tile_rows>(y % TILE, 0)]
                                                       : FP32_NEG_INF;
                }
            } else {
                for (uint32_t y = 0; y < q_tiles * TILE; ++y) {
                    row[y] = FP32_NEG_INF;
                }
            }
            noc_async_write(lse_row_l1, lse_gen.get_noc_addr(user * num_kv_heads + kv_head), lse_row_bytes);
        }
        // The sources (cb_out, cb_lse, the LSE row) are reused after this.
        noc_async_write_barrier();
        if (has_work) {
            cb_pop_front(cb_out, q_tiles * dv_tiles);
            if (return_lse) {
                cb_pop_front(cb_lse, q_tiles);
            }
        }
    }

    noc_async_write_barrier();
    noc_async_atomic_barrier();
}
