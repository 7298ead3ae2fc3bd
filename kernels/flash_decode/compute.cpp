// SPDX-License-Identifier: Apache-2.0
//
// FlashDecode compute (TRISC0-2). For each piece placed on this core, in the order of its runtime args:
// an online softmax over the piece's K/V chunks, one q tile row at a time (Q . K^T, scale, masks, the
// running max m, row sum l and output O); then the merge of its children's partials in tree order; then,
// at the root, the attention sink (if any) and the normalized bf16 output and float32 LSE, else the float32
// partial (O, m, l) for the parent. Sliding windows, an attn_mask, several tokens per user, MLA (V read out
// of the K slot) and a pre-scaled Q are named compile-time args.
//
// Contract: the reader pushes each piece's Q and, chunk by chunk, K then V (ones tiles at the end of each
// V key-tile row, except with MLA); with softmax blocks (plan.softmax_chunks > 1) it pads each piece's V
// slots to whole blocks. The writer pushes the constant and mask tiles and the children's partials, all in
// the plan's order. The CBs, their tile shapes and the compile-time args are those of
// ttdecode/ops/flash_decode/program_factory.py; the fp32 CBs read only by copy / broadcast must be UnpackToDestFp32
// (UNPACK_TO_DEST_CBS). Chunk ranges are recomputed from cur_pos with kernels/flash_decode/common.hpp.
// Every statistic, rescale and merge is fp32 on the SFPU; the output is rounded once, to bf16. Why, and
// what each mode changes: tech_report/flashdecode.md, section 9.1 "The FlashDecode compute kernel".
// The chunk's online softmax is flash_decode/online_softmax.hpp, the merges shared/lse_merge.hpp; this
// file holds the compile-time constants, the tree's glue and kernel_main.

#include <stdint.h>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/cb_api.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/tile_move_copy.h"
#include "common.hpp"
#include "piece_args.hpp"
#include "online_softmax.hpp"
#include "../shared/compute_tiles.hpp"
#include "../shared/sfpu_rows.hpp"
#include "../shared/lse_merge.hpp"

using namespace flash_decode;
using namespace compute_tiles;
using lse_merge::Running;
using lse_merge::Target;

namespace {

// The named compile-time args (program_factory.py) and the constants that follow from them, read once;
// also the LSE merge's constants (lse_merge.hpp Config).
struct Args : PieceArgs {
    // usable DST tiles (4 with fp32, half-sync)
    static constexpr uint32_t dst_tiles = get_named_compile_time_arg_val("dst_tiles");
    // float32 bits of the softmax scale, and of fp32(scale) - 1 (16-bit DST)
    static constexpr uint32_t scale_bits = get_named_compile_time_arg_val("scale_bits");
    static constexpr uint32_t scale_m1_bits = get_named_compile_time_arg_val("scale_m1_bits");
    static constexpr bool return_lse = get_named_compile_time_arg_val("return_lse") == 1;
    // exp_tile<approx> (exp_approx_mode)
    static constexpr bool exp_approx = get_named_compile_time_arg_val("exp_approx") == 1;
    // A row may see no key at all in a piece (a fully masked head): keep its max finite and its 1/l safe.
    static constexpr bool guard_empty_rows = get_named_compile_time_arg_val("guard_empty_rows") == 1;
    // 1 when the q rows that hold heads (tokens x group_size) are at most 16: they all lie in faces 0 and 1
    // of a q tile (one q tile row then), so the softmax's row-wise SFPU ops run VectorMode::R (faces 0-1,
    // half the vector steps). Rows 16-31 are zero q rows: every op is row by row, so whatever they then
    // hold (un-exponentiated differences) stays in rows that are never output.
    static constexpr uint32_t head_rows = get_named_compile_time_arg_val("head_rows");  // T x g, at most 32
    // bit per UnpackToDestFp32 CB
    static constexpr uint32_t to_dest_cbs = get_named_compile_time_arg_val("to_dest_cbs");
    // The scale is +-2^k: each piece's Q is multiplied by it once into cb_q_scaled (exact in bf16: only the
    // exponents change), and Q . K^T then gives the scaled fp32 scores bit for bit (scaling by 2^k commutes
    // with the matmul's products and fp32 sums, subnormal results aside), without a scale op per score tile.
    static constexpr bool q_prescaled = get_named_compile_time_arg_val("q_prescaled") == 1;
    static constexpr uint32_t cb_q_in0 = q_prescaled ? cb_q_scaled : cb_q;  // Q . K^T's in0
    static constexpr bool half_tile = head_rows <= 16;
    // q_tile_rows 16 = 16x32 tiles (faces 0-1), 8 = 8x32 tiles (rows 0-7 of faces 0-1). The unpackers, the FPU
    // and the packer take each CB's tile shape from the CB (its inits program it); an op on those tiles may
    // touch only the DST rows they fill (VectorMode::R / None, and with 8x32 tiles at most row_iterations 4).
    static_assert(q_tile_rows == 32 || (q_tile_rows < 32 && head_rows <= q_tile_rows && q_tiles == 1),
                  "16x32 or 8x32 q tiles hold one q tile row of at most 16 or 8 q rows");
    static constexpr VectorMode row_mode = half_tile ? VectorMode::R : VectorMode::RC;
    // The vector steps per face those ops run (their ITERATIONS): a step covers four rows of a face, even
    // or odd columns, so 2 x ceil(rows / 4) steps cover rows 0 .. head_rows - 1 (8 = the whole face).
    static constexpr int row_iterations = half_tile ? 2 * int((head_rows + 3) / 4) : 8;
    // A statistic read only through column 0 (1/l): faces 0 and 2 (VectorMode::C, columns 0-15 of every
    // row), or face 0 alone (VectorMode::None, rows 0-15) with half_tile.
    static constexpr VectorMode stat_mode = half_tile ? VectorMode::None : VectorMode::C;

    // The merge's constants (lse_merge.hpp): a running set holds q_tiles tile rows; the statistics live
    // in column 0, on stat_mode's lanes.
    static constexpr uint32_t rows = q_tiles;
    static constexpr uint32_t cb_alpha = flash_decode::cb_alpha;
    using StatOps = sfpu_rows::Rows<stat_mode, row_iterations>;
    using RowOps = sfpu_rows::Rows<row_mode, row_iterations>;
    static constexpr bool factors_in_column0 = true;

    static constexpr uint32_t acc_tiles = q_tiles * dv_tiles;
    static constexpr uint32_t partial_tiles = q_tiles * (dv_tiles + 2);
    static constexpr uint32_t partial_max_offset = acc_tiles;  // partial layout: O tiles, m tiles, l tiles
    static constexpr uint32_t partial_sum_offset = acc_tiles + q_tiles;
    // The bounded merge (plan.merge_slot): partials cross one q tile row at a time, a message of O's
    // dv tiles, then m, then l (writer.cpp), in one slot of cb_partial_in and one of cb_partial_out.
    static constexpr bool merge_slot = get_named_compile_time_arg_val("merge_slot") == 1;
    static constexpr uint32_t message_tiles = dv_tiles + 2;
};
using Softmax = OnlineSoftmax<Args>;
using Merge = lse_merge::Merge<Args>;
using StatOps = Args::StatOps;
constexpr uint32_t q_tiles = Args::q_tiles;
constexpr uint32_t dv_tiles = Args::dv_tiles;
constexpr uint32_t dst_tiles = Args::dst_tiles;
constexpr uint32_t acc_tiles = Args::acc_tiles;
constexpr uint32_t partial_tiles = Args::partial_tiles;

constexpr Running running_sets[2] = {{cb_max_a, cb_sum_a, cb_acc_a}, {cb_max_b, cb_sum_b, cb_acc_b}};

// ---- the tree -----------------------------------------------------------------------------------

// Where the merge of q tile row qi writes: the running set `next` (pushed q tile row by q tile row), or
// with none, for the last merge of a piece that is not the root, straight into its partial for the
// parent in cb_partial_out (O tiles, then m, then l; pushed whole at the end), which send_partial would
// otherwise copy the running set into: the same packed values, one copy and one pack per tile fewer.
Target merge_target(const Running* next, uint32_t qi) {
    if (next != nullptr) {
        return Merge::to_running(*next);
    }
    return {cb_partial_out, Args::partial_max_offset + qi, cb_partial_out, Args::partial_sum_offset + qi,
            cb_partial_out, qi * dv_tiles, false};
}

// Merge the child partial in area `area` of cb_partial_in into the running set `own`, writing `next`
// (none: this piece's partial). A partial's m and l live in column 0 (fp32, unpacked to DST): the max,
// the differences, the exps and l run on stat_mode's lanes (faces 0 and 2, or with half_tile face 0's
// rows that hold heads), O on the rows that hold heads (row_mode), the factors broadcast along the rows;
// rows past the group (which a child does not send) never reach the rows written out.
void merge_child(uint32_t area, const Running& own, const Running* next) {
    const uint32_t base = area * partial_tiles;
    if (next == nullptr) {
        cb_reserve_back(cb_partial_out, partial_tiles);
    } else {
        Merge::reserve_running(*next);
    }
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        const Target out = merge_target(next, qi);
        const uint32_t m_c = base + Args::partial_max_offset + qi;
        Merge::factors(own.max, qi, [m_c](uint32_t dst) { copy_to_dst(cb_partial_in, m_c, dst); }, out, qi);
        Merge::sum_with(own.sum, qi, cb_partial_in, base + Args::partial_sum_offset + qi, out);
        Merge::output_with(own.acc, qi * dv_tiles, cb_partial_in, base + qi * dv_tiles, out);
        cb_pop_front(cb_alpha, 2);
    }
    Merge::pop_running(own);
    if (next == nullptr) {
        cb_push_back(cb_partial_out, partial_tiles);
    }
}

// merge_slot: merge the child whose messages arrive in cb_partial_in (one q tile row each, O then m then l)
// into the running set `own`, writing `next`: merge_child's steps on the message's tiles, popped row by row.
void merge_messages(const Running& own, const Running& next) {
    Merge::reserve_running(next);
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        cb_wait_front(cb_partial_in, Args::message_tiles);
        const Target out = Merge::to_running(next);
        Merge::factors(own.max, qi, [](uint32_t dst) { copy_to_dst(cb_partial_in, dv_tiles, dst); }, out, qi);
        Merge::sum_with(own.sum, qi, cb_partial_in, dv_tiles + 1, out);
        Merge::output_with(own.acc, qi * dv_tiles, cb_partial_in, 0, out);
        cb_pop_front(cb_alpha, 2);
        cb_pop_front(cb_partial_in, Args::message_tiles);
    }
    Merge::pop_running(own);
}

// Root with an attention sink: fold the sink into the denominator, exactly as a merge with a state of
// max `sink * scale` (the sink's logit), sum 1 and no output: O' = O * e_own. The sink tile (bf16, a
// head's raw sink in column 0) is copied exactly and scaled on the SFPU into logit units.
void merge_sink(const Running& own, const Running& next) {
    Merge::reserve_running(next);
    const Target out = Merge::to_running(next);
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        const auto sink = [qi](uint32_t dst) {
            copy_to_dst(cb_sink, qi, dst);
            sfpu_rows::init_scale();
            StatOps::scale(dst, Args::scale_bits);
        };
        Merge::factors(own.max, qi, sink, out, qi);
        Merge::sum_with_unit(own.sum, qi, out);
        Merge::output_scaled(own.acc, qi * dv_tiles, 0, out);
        cb_pop_front(cb_alpha, 2);
    }
    Merge::pop_running(own);
}

// Root: out = O x (1 / l) in fp32 on the SFPU, rounded once to the bf16 output; LSE = m + log(l)
// when asked. Column 0 of l and m holds each row's value (a child sends only that column half).
void finish_root(const Running& set) {
    Merge::wait_running(set);
    cb_reserve_back(cb_out, acc_tiles);
    if (Args::return_lse) {
        cb_reserve_back(cb_lse, q_tiles);
    }
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        Merge::inverse_sum(set.sum, qi, [](uint32_t at, uint32_t scratch) {
            if constexpr (Args::guard_empty_rows) {
                // l = 0 (no key, no sink) gives out = 0
                StatOps::floor(at, scratch, cb_ones, 0, MIN_NORMAL_FLOAT_BITS);
            }
        });
        Merge::scaled(set.acc, qi * dv_tiles, 0, cb_out, qi * dv_tiles);
        cb_pop_front(cb_alpha, 2);
        if (Args::return_lse) {
            Merge::lse(set.sum, qi, set.max, qi, cb_lse, qi);
        }
    }
    cb_push_back(cb_out, acc_tiles);
    if (Args::return_lse) {
        cb_push_back(cb_lse, q_tiles);
    }
    Merge::pop_running(set);
}

// Non-root: copy (O, m, l) into cb_partial_out for the writer to send up the tree. The three
// running CBs share one data format and unpack path (fp32 to DST): one reconfig and copy_init.
void send_partial(const Running& set) {
    Merge::wait_running(set);
    if constexpr (Args::merge_slot) {
        // one message per q tile row: O's dv tiles, m, l
        copy_from(set.acc);
        for (uint32_t qi = 0; qi < q_tiles; ++qi) {
            cb_reserve_back(cb_partial_out, Args::message_tiles);
            for (uint32_t t0 = 0; t0 < Args::message_tiles; t0 += dst_tiles) {
                const uint32_t n = Args::message_tiles - t0 < dst_tiles ? Args::message_tiles - t0 : dst_tiles;
                tile_regs_acquire();
                for (uint32_t i = 0; i < n; ++i) {
                    const uint32_t t = t0 + i;
                    if (t < dv_tiles) {
                        copy_tile(set.acc, qi * dv_tiles + t, i);
                    } else {
                        copy_tile(t == dv_tiles ? set.max : set.sum, qi, i);
                    }
                }
                pack_block(cb_partial_out, t0, n);
            }
            cb_push_back(cb_partial_out, Args::message_tiles);
        }
        Merge::pop_running(set);
        return;
    }
    cb_reserve_back(cb_partial_out, partial_tiles);
    copy_from(set.acc);
    for (uint32_t t0 = 0; t0 < partial_tiles; t0 += dst_tiles) {
        const uint32_t n = partial_tiles - t0 < dst_tiles ? partial_tiles - t0 : dst_tiles;
        tile_regs_acquire();
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t t = t0 + i;
            if (t < Args::partial_max_offset) {
                copy_tile(set.acc, t, i);
            } else if (t < Args::partial_sum_offset) {
                copy_tile(set.max, t - Args::partial_max_offset, i);
            } else {
                copy_tile(set.sum, t - Args::partial_sum_offset, i);
            }
        }
        pack_block(cb_partial_out, t0, n);
    }
    cb_push_back(cb_partial_out, partial_tiles);
    Merge::pop_running(set);
}

// The split of the piece `index` of a user at cur_pos (common.hpp), with this program's split constants.
PieceRange range_of(int32_t cur_pos, uint32_t index) {
    return piece_range(cur_pos, Args::fixed_chunk_tiles, Args::pieces_per_work, index, Args::window,
                       Args::min_chunk_tiles, Args::cyclic_split, Args::chunk_cap, Args::dram_banks);
}
bool has_work(int32_t cur_pos, uint32_t index) {
    return piece_has_work(cur_pos, Args::fixed_chunk_tiles, Args::pieces_per_work, index, Args::window,
                          Args::min_chunk_tiles, Args::cyclic_split, Args::chunk_cap, Args::dram_banks);
}

// Bank-local: the view of the core's piece `p` (the reader's page, VIEW_WORDS words a piece), word by word
// (read_tile_value hands each word to the three compute threads).
struct ViewWords {
    uint32_t operator[](uint32_t i) const { return read_tile_value(cb_view_compute, 0, i); }
};
BankView view_of(uint32_t p) { return load_view(ViewWords{}, p); }

}  // namespace

void kernel_main() {
    const uint32_t num_pieces = get_arg_val<uint32_t>(0);
    constexpr uint32_t piece_args_base = 1;
    constexpr uint32_t args_per_piece = 2;

    start_engine(cb_k, cb_q, cb_scores, Args::to_dest_cbs);

    // Constant tiles from the writer and the positions from the reader stay for the whole kernel.
    cb_wait_front(cb_ones, 1);
    cb_wait_front(cb_pos_compute, 1);
    if constexpr (Args::bank_local) {
        cb_wait_front(cb_view_compute, 1);
    }

    for (uint32_t p = 0; p < num_pieces; ++p) {
        const uint32_t user = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 0);
        const uint32_t index = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 1);
        const int32_t cur_pos = (int32_t)read_tile_value(cb_pos_compute, 0, user);
        BankView view{};
        if constexpr (Args::bank_local) {
            view = view_of(p);
        }
        const PieceRange range = Args::bank_local ? view_range(view) : range_of(cur_pos, index);
        const uint32_t height = tree_height(index, Args::pieces_per_work);

        if (range.empty()) {
            if constexpr (Args::bank_local) {
                Softmax::discard_chunks(view.discard);
            }
            // No keys: nothing to compute or send; the writer still hands over this piece's
            // (unused) partial areas to keep the partial_in queue aligned.
            if (height > 0 && !Args::merge_slot) {
                cb_wait_front(cb_partial_in, height * partial_tiles);
                cb_pop_front(cb_partial_in, height * partial_tiles);
            }
            continue;
        }

        // The piece's masks (writer.cpp): one page per (masked tile, q tile row).
        const PieceMasks masks =
            Args::bank_local ? view_masks(view) : piece_masks(cur_pos, range, Args::token_window, Args::tokens);
        constexpr uint32_t mask_pages = masked_tiles_bound(Args::token_window, Args::tokens) * q_tiles;
        if (masks.any()) {
            cb_wait_front(cb_mask, mask_pages);  // one piece's pages fill the CB
        }
        cb_wait_front(cb_q, q_tiles * Args::d_tiles);
        if constexpr (Args::q_prescaled) {
            Softmax::prescale_q();
        }
        // The root with no child holding keys and no sink finishes inside its last chunk.
        const uint32_t children =
            Args::bank_local ? view_children_with_work(view, index, Args::pieces_per_work)
                             : children_with_work(cur_pos, Args::fixed_chunk_tiles, Args::pieces_per_work, index,
                                                  Args::window, Args::min_chunk_tiles, Args::cyclic_split,
                                                  Args::chunk_cap, Args::dram_banks);
        // (With softmax blocks, only when the piece's last block is a lone chunk.)
        const bool fold = index == 0 && !Args::has_sink && children == 0 &&
                          (range.num_chunks - 1) % Args::softmax_chunks == 0;
        uint32_t cur = 0;  // the running set that holds the state
        for (uint32_t c = 0; c < range.num_chunks; ++c) {
            const uint32_t left = range.num_chunks - c;
            if (Args::softmax_chunks > 1 && left > 1) {
                // a softmax block of up to softmax_chunks chunks; a lone last chunk goes the chunk's way
                const uint32_t block = left < Args::softmax_chunks ? left : Args::softmax_chunks;
                const uint32_t next = c == 0 ? 0 : cur ^ 1;
                Softmax::process_block(range, c, block, masks, c == 0 ? nullptr : &running_sets[cur],
                                       running_sets[next]);
                cur = next;
                Merge::wait_running(running_sets[cur]);
                c += block - 1;
                continue;
            }
            const uint32_t tiles = range.tiles_in_chunk(c);
            const uint32_t next = c == 0 ? 0 : cur ^ 1;
            const bool finish = fold && c + 1 == range.num_chunks;
            Softmax::process_chunk(tiles, c == 0 ? nullptr : &running_sets[cur], running_sets[next], masks,
                                   c * range.chunk_tiles, finish);
            cur = next;
            if (!finish) {
                Merge::wait_running(running_sets[cur]);
            }
        }
        if constexpr (Args::softmax_chunks > 1) {
            Softmax::pad_to_whole_blocks(range.num_chunks);
        }
        if (masks.any()) {
            cb_pop_front(cb_mask, mask_pages);
        }
        cb_pop_front(Args::cb_q_in0, q_tiles * Args::d_tiles);

        // Children in merge order: area r holds the child of round r (index + 2^r). A piece that is not
        // the root merges its last child with keys straight into its partial for the parent.
        bool sent = false;
        if (height > 0) {
            uint32_t with_work = 0;  // bit r: the child of round r has keys
            for (uint32_t r = 0; r < height; ++r) {
                if (Args::bank_local ? index + (1u << r) < view.used : has_work(cur_pos, index + (1u << r))) {
                    with_work |= 1u << r;
                }
            }
            if constexpr (Args::merge_slot) {
                // children in merge order, each through the slot; the partial for the parent is sent after
                for (uint32_t r = 0; r < height; ++r) {
                    if ((with_work >> r) & 1u) {
                        merge_messages(running_sets[cur], running_sets[cur ^ 1]);
                        cur ^= 1;
                        Merge::wait_running(running_sets[cur]);
                    }
                }
                with_work = 0;  // merged: the dedicated areas' loop below has nothing left
            } else {
                cb_wait_front(cb_partial_in, height * partial_tiles);
            }
            for (uint32_t r = 0; r < height; ++r) {
                if (!((with_work >> r) & 1u)) {
                    continue;
                }
                if (index != 0 && (with_work >> (r + 1)) == 0) {
                    merge_child(r, running_sets[cur], nullptr);
                    sent = true;
                } else {
                    merge_child(r, running_sets[cur], &running_sets[cur ^ 1]);
                    cur ^= 1;
                    Merge::wait_running(running_sets[cur]);
                }
            }
            if constexpr (!Args::merge_slot) {
                cb_pop_front(cb_partial_in, height * partial_tiles);
            }
        }

        if (fold) {
            // the output and LSE were written by the last chunk
        } else if (index == 0) {
            if constexpr (Args::has_sink) {
                cb_wait_front(cb_sink, q_tiles);
                merge_sink(running_sets[cur], running_sets[cur ^ 1]);
                cur ^= 1;
                cb_pop_front(cb_sink, q_tiles);
            }
            finish_root(running_sets[cur]);
        } else if (!sent) {
            send_partial(running_sets[cur]);
        }
    }
}
