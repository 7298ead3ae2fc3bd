// SPDX-License-Identifier: Apache-2.0
//
// FlashDecode compute (TRISC0-2). For each piece on this core: online softmax over its chunks, one
// q tile row at a time, then the merge of its children's partials in tree order, then either the
// normalized bf16 output and LSE (root) or the float32 partial (O, m, l) for the parent. With an
// attention sink the root first folds the sink into (m, l, O) like one more merge (merge_sink);
// with a sliding window the piece that reads the window's first tile masks the keys before it.
//
// Numbers: scores, probabilities, statistics and the accumulator live in float32 CBs and are
// combined in float32 DST (fp32 accumulation). The FPU reads a float32 CB tile as TF32 (10
// mantissa bits), so only the matmuls and the row max read float32 tiles through the FPU:
// * Q . K^T is computed once per chunk into cb_scores (fp32, keys past cur_pos at -inf). The row
//   max reads its TF32 copy, so m is a max of TF32 values: exact wherever the FPU reads it again
//   (broadcast_column), and the same value everywhere. The exponent copies the scores exactly into
//   DST and subtracts m on the SFPU: exp((S - m) * scale) sees the scores in full fp32.
// * Rescaling (l, O by alpha), the merge of partials and the LSE run on the SFPU on tiles copied
//   exactly into DST (rescale factors hold a row's value in every column), so the statistics stay
//   fp32; only P enters its row sum and P . V as TF32 (the same P for both), and the root's final
//   O x 1/l reads both as TF32 before rounding to the bf16 output.
// m is kept unscaled; the scale is folded into every exponent. Only API patterns with plain device
// semantics are used: a reduce into a freshly acquired DST, SFPU ops on tiles in DST, an FPU op or
// an SFPU op in DST that a matmul then accumulates onto.
//
// The running (m, l, O) live in two CB sets used in turn: each chunk or merge reads the current
// set and writes the other one, so every CB is filled from its first page and emptied whole.

#include <stdint.h>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/cb_api.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"
#include "api/compute/matmul.h"
#include "api/compute/reduce.h"
#include "api/compute/bcast.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/binary_max_min.h"
#include "api/compute/eltwise_binary_sfpu.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/eltwise_unary/recip.h"
#include "api/compute/eltwise_unary/binop_with_scalar.h"
#include "common.hpp"

using namespace flash_decode;

namespace {

constexpr uint32_t q_tiles = get_compile_time_arg_val(0);
constexpr uint32_t d_tiles = get_compile_time_arg_val(1);
constexpr uint32_t dv_tiles = get_compile_time_arg_val(2);
constexpr uint32_t max_chunk_tiles = get_compile_time_arg_val(3);
constexpr uint32_t fixed_chunk_tiles = get_compile_time_arg_val(4);
constexpr uint32_t pieces_per_work = get_compile_time_arg_val(5);
constexpr uint32_t dst_tiles = get_compile_time_arg_val(6);  // usable DST tiles (4 with fp32, half-sync)
constexpr uint32_t scale_bits = get_compile_time_arg_val(7);  // float32 bits of the softmax scale
constexpr bool return_lse = get_compile_time_arg_val(8) == 1;
constexpr uint32_t window = get_compile_time_arg_val(9);  // sliding window in keys (0 = none)
constexpr bool has_sink = get_compile_time_arg_val(10) == 1;
constexpr bool exp_approx = get_compile_time_arg_val(11) == 1;  // exp_tile<approx> (exp_approx_mode)

constexpr uint32_t k_slot_tiles = max_chunk_tiles * d_tiles;
constexpr uint32_t v_slot_tiles = max_chunk_tiles * dv_tiles;
constexpr uint32_t acc_tiles = q_tiles * dv_tiles;
constexpr uint32_t partial_tiles = q_tiles * (dv_tiles + 2);
constexpr uint32_t partial_max_offset = acc_tiles;  // partial layout: O tiles, m tiles, l tiles
constexpr uint32_t partial_sum_offset = acc_tiles + q_tiles;
constexpr uint32_t NO_MASK = 0xFFFFFFFFu;

static_assert(dst_tiles >= 4, "the merge combines four DST tiles (own, e_own, child, e_child)");

// One set of running tiles: m and l (one tile per q tile row), O (dv_tiles per q tile row).
struct Running {
    uint32_t max;
    uint32_t sum;
    uint32_t acc;
};
constexpr Running running_sets[2] = {{cb_max_a, cb_sum_a, cb_acc_a}, {cb_max_b, cb_sum_b, cb_acc_b}};

// Operand formats for an eltwise / broadcast op: a -> srcA, b -> srcB.
inline void use_operands(uint32_t a, uint32_t b) { reconfig_data_format(a, b); }
// A matmul unpacks in0 into srcB and in1 into srcA.
inline void use_matmul_operands(uint32_t in0, uint32_t in1) { reconfig_data_format(in1, in0); }

inline void copy_to_dst(uint32_t cb, uint32_t tile, uint32_t dst) {
    reconfig_data_format_srca(cb);
    copy_init(cb);
    copy_tile(cb, tile, dst);
}

// dst *= scale, then dst = exp(dst), for DST tiles [0, n).
inline void scaled_exp(uint32_t n) {
    binop_with_scalar_tile_init();
    for (uint32_t i = 0; i < n; ++i) {
        mul_unary_tile(i, scale_bits);
    }
    exp_tile_init<exp_approx>();
    for (uint32_t i = 0; i < n; ++i) {
        exp_tile<exp_approx>(i);
    }
}

// Pack DST tiles [0, n) (every dst_stride-th) to tiles [first, first + n) of cb's reserved space.
inline void pack_block(uint32_t cb, uint32_t first, uint32_t n, uint32_t dst_stride = 1) {
    tile_regs_commit();
    tile_regs_wait();
    pack_reconfig_data_format(cb);
    for (uint32_t i = 0; i < n; ++i) {
        pack_tile<true>(i * dst_stride, cb, first + i);
    }
    tile_regs_release();
}

// DST tile dst = column 0 of tile `tile` of cb, in every column. The FPU reads the Float32 tile as
// TF32, so this is exact for the running max (a max of TF32 scores) and for anything TF32-exact.
inline void broadcast_column(uint32_t cb, uint32_t tile, uint32_t dst) {
    use_operands(cb_zeros, cb);
    add_bcast_cols_init(cb_zeros, cb);
    add_tiles_bcast_cols(cb_zeros, cb, 0, tile, dst);
}

// ---- one chunk ----------------------------------------------------------------------------------

// S = Q_qi . K^T over the chunk's `tiles` key tiles, for the row max only. A masked tile starts
// from its mask in DST and the matmul accumulates on top, so masked keys become -inf: chunk tile
// `first_mask_tile` takes mask page 0 (the piece's first tile), `last_mask_tile` page 1 (its last).
void chunk_scores(uint32_t qi, uint32_t tiles, uint32_t first_mask_tile, uint32_t last_mask_tile) {
    cb_reserve_back(cb_scores, max_chunk_tiles);
    for (uint32_t j0 = 0; j0 < tiles; j0 += dst_tiles) {
        const uint32_t n = tiles - j0 < dst_tiles ? tiles - j0 : dst_tiles;
        tile_regs_acquire();
        if (first_mask_tile != NO_MASK && first_mask_tile >= j0 && first_mask_tile < j0 + n) {
            copy_to_dst(cb_mask, 0, first_mask_tile - j0);
        }
        if (last_mask_tile != NO_MASK && last_mask_tile >= j0 && last_mask_tile < j0 + n) {
            copy_to_dst(cb_mask, 1, last_mask_tile - j0);
        }
        use_matmul_operands(cb_q, cb_k);
        matmul_init(cb_q, cb_k, 1 /* transpose K */);
        for (uint32_t j = 0; j < n; ++j) {
            for (uint32_t d = 0; d < d_tiles; ++d) {
                matmul_tiles(cb_q, cb_k, qi * d_tiles + d, (j0 + j) * d_tiles + d, j);
            }
        }
        pack_block(cb_scores, j0, n);
    }
    cb_push_back(cb_scores, max_chunk_tiles);
    cb_wait_front(cb_scores, max_chunk_tiles);
}

// Row qi of the new max: max(m_old, rowmax(S)).
void chunk_row_max(uint32_t qi, uint32_t tiles, const Running* old, const Running& next) {
    tile_regs_acquire();
    use_operands(cb_scores, cb_scaler);
    reduce_init<PoolType::MAX, ReduceDim::REDUCE_ROW>(cb_scores, cb_scaler, next.max);
    for (uint32_t j = 0; j < tiles; ++j) {
        reduce_tile<PoolType::MAX, ReduceDim::REDUCE_ROW>(cb_scores, cb_scaler, j, 0, 0);
    }
    reduce_uninit();
    if (old != nullptr) {
        copy_to_dst(old->max, qi, 1);
        binary_max_tile_init();
        binary_max_tile(0, 1, 0);
    }
    pack_block(next.max, 0, 1);  // pack indices count from the last push
    cb_push_back(next.max, 1);
    cb_wait_front(next.max, qi + 1);
}

// alpha = exp((m_old - m_new) * scale) in every column: the factor that rescales row qi's old l and O.
void chunk_alpha(uint32_t qi, const Running& old, const Running& next) {
    cb_reserve_back(cb_alpha, 2);
    tile_regs_acquire();
    broadcast_column(old.max, qi, 0);
    broadcast_column(next.max, qi, 1);
    sub_binary_tile_init();
    sub_binary_tile(0, 1, 0);
    scaled_exp(1);
    pack_block(cb_alpha, 0, 1);
    cb_push_back(cb_alpha, 2);
    cb_wait_front(cb_alpha, 2);
}

// P = exp((S - m_new) * scale). The fp32 scores are copied exactly into DST and m_new, broadcast
// along each row into the last DST tile, is subtracted on the SFPU, so the exponent sees the
// scores in full fp32 (keys past cur_pos hold -inf and give 0). Frees the scores.
void chunk_probs(uint32_t qi, uint32_t tiles, const Running& next) {
    constexpr uint32_t block = dst_tiles - 1;
    cb_reserve_back(cb_probs, max_chunk_tiles);
    for (uint32_t j0 = 0; j0 < tiles; j0 += block) {
        const uint32_t n = tiles - j0 < block ? tiles - j0 : block;
        tile_regs_acquire();
        for (uint32_t j = 0; j < n; ++j) {
            copy_to_dst(cb_scores, j0 + j, j);
        }
        broadcast_column(next.max, qi, n);
        sub_binary_tile_init();
        for (uint32_t j = 0; j < n; ++j) {
            sub_binary_tile(j, n, j);
        }
        scaled_exp(n);
        pack_block(cb_probs, j0, n);
    }
    cb_push_back(cb_probs, max_chunk_tiles);
    cb_wait_front(cb_probs, max_chunk_tiles);
    cb_pop_front(cb_scores, max_chunk_tiles);
}

// DST tiles [0, n) = tiles [first, first + n) of cb times alpha, in fp32 on the SFPU (alpha is
// copied into DST tile n, so n < dst_tiles).
inline void rescaled_to_dst(uint32_t cb, uint32_t first, uint32_t n) {
    copy_to_dst(cb_alpha, 0, n);
    for (uint32_t i = 0; i < n; ++i) {
        copy_to_dst(cb, first + i, i);
    }
    mul_binary_tile_init();
    for (uint32_t i = 0; i < n; ++i) {
        mul_binary_tile(i, n, i);
    }
}

// l_new = l_old * alpha + rowsum(P). The row sum is P x ones (every column holds it), accumulated
// by the matmul onto the rescaled old sum in the same DST tile.
void chunk_row_sum(uint32_t qi, uint32_t tiles, const Running* old, const Running& next) {
    tile_regs_acquire();
    if (old != nullptr) {
        rescaled_to_dst(old->sum, qi, 1);
    }
    use_matmul_operands(cb_probs, cb_ones);
    matmul_init(cb_probs, cb_ones);
    for (uint32_t j = 0; j < tiles; ++j) {
        matmul_tiles(cb_probs, cb_ones, j, 0, 0);
    }
    pack_block(next.sum, 0, 1);
    cb_push_back(next.sum, 1);
}

// O_new = O_old * alpha + P . V for row qi, a block of Dv tiles per DST acquire (one DST tile fewer
// when alpha shares DST with the block).
void chunk_output(uint32_t qi, uint32_t tiles, const Running* old, const Running& next) {
    const uint32_t block = old != nullptr ? dst_tiles - 1 : dst_tiles;
    for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
        const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
        tile_regs_acquire();
        if (old != nullptr) {
            rescaled_to_dst(old->acc, qi * dv_tiles + v0, n);
        }
        use_matmul_operands(cb_probs, cb_v);
        matmul_init(cb_probs, cb_v);
        for (uint32_t v = 0; v < n; ++v) {
            for (uint32_t j = 0; j < tiles; ++j) {
                matmul_tiles(cb_probs, cb_v, j, j * dv_tiles + v0 + v, v);
            }
        }
        pack_block(next.acc, v0, n);
    }
    cb_push_back(next.acc, dv_tiles);
}

inline void reserve_running(const Running& set) {
    cb_reserve_back(set.max, q_tiles);
    cb_reserve_back(set.sum, q_tiles);
    cb_reserve_back(set.acc, acc_tiles);
}

inline void wait_running(const Running& set) {
    cb_wait_front(set.max, q_tiles);
    cb_wait_front(set.sum, q_tiles);
    cb_wait_front(set.acc, acc_tiles);
}

inline void pop_running(const Running& set) {
    cb_pop_front(set.max, q_tiles);
    cb_pop_front(set.sum, q_tiles);
    cb_pop_front(set.acc, acc_tiles);
}

// One chunk of keys for every q tile row: reads the running set `old` (none for the first chunk)
// and writes `next`. The K/V slot stays until all rows are done. The piece's masks (if any) are
// already waited for.
void process_chunk(
    uint32_t tiles, const Running* old, const Running& next, uint32_t first_mask_tile, uint32_t last_mask_tile) {
    cb_wait_front(cb_k, k_slot_tiles);
    cb_wait_front(cb_v, v_slot_tiles);
    reserve_running(next);
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        chunk_scores(qi, tiles, first_mask_tile, last_mask_tile);
        chunk_row_max(qi, tiles, old, next);
        if (old != nullptr) {
            chunk_alpha(qi, *old, next);
        }
        chunk_probs(qi, tiles, next);
        chunk_row_sum(qi, tiles, old, next);
        chunk_output(qi, tiles, old, next);
        cb_pop_front(cb_probs, max_chunk_tiles);
        if (old != nullptr) {
            cb_pop_front(cb_alpha, 2);
        }
    }
    if (old != nullptr) {
        pop_running(*old);
    }
    cb_pop_front(cb_k, k_slot_tiles);
    cb_pop_front(cb_v, v_slot_tiles);
}

// ---- the tree -----------------------------------------------------------------------------------

// Tile out_index of out_cb = a * e_own + c * e_child, where a = tile ia of cb_a, c = tile ic of
// cb_partial_in and e_own / e_child are tiles 0 / 1 of cb_alpha (every column holds a row's factor).
// All four tiles are copied exactly into DST and combined on the SFPU in fp32. Every step is row by
// row, so rows past the group (which a child does not send) never reach the rows written out.
void rescaled_sum(uint32_t cb_a, uint32_t ia, uint32_t ic, uint32_t out_cb, uint32_t out_index) {
    tile_regs_acquire();
    copy_to_dst(cb_a, ia, 0);
    copy_to_dst(cb_alpha, 0, 1);
    copy_to_dst(cb_partial_in, ic, 2);
    copy_to_dst(cb_alpha, 1, 3);
    mul_binary_tile_init();
    mul_binary_tile(0, 1, 0);
    mul_binary_tile(2, 3, 2);
    add_binary_tile_init();
    add_binary_tile(0, 2, 0);
    pack_block(out_cb, out_index, 1);
}

// The factors of a merge of q tile row qi: m' = max(m_own, m_other) into `next.max`, then
// cb_alpha = [exp((m_own - m') * scale), exp((m_other - m') * scale)] in every column: the three
// maxima broadcast, the differences on the SFPU in fp32. A partial's max tile already holds its
// values in column 0 of an fp32 tile and is copied as is; a sink tile (bf16, values in column 0
// only) is broadcast first.
void merge_factors(const Running& own, const Running& next, uint32_t qi, uint32_t other_cb, uint32_t other_tile,
                   bool other_is_sink) {
    tile_regs_acquire();
    copy_to_dst(own.max, qi, 0);
    if (other_is_sink) {
        broadcast_column(other_cb, other_tile, 1);  // bf16: exact
    } else {
        copy_to_dst(other_cb, other_tile, 1);
    }
    binary_max_tile_init();
    binary_max_tile(0, 1, 0);
    pack_block(next.max, 0, 1);
    cb_push_back(next.max, 1);
    cb_wait_front(next.max, qi + 1);

    cb_reserve_back(cb_alpha, 2);
    tile_regs_acquire();
    broadcast_column(own.max, qi, 0);
    broadcast_column(other_cb, other_tile, 1);
    broadcast_column(next.max, qi, 2);
    sub_binary_tile_init();
    sub_binary_tile(0, 2, 0);
    sub_binary_tile(1, 2, 1);
    scaled_exp(2);
    pack_block(cb_alpha, 0, 2);
    cb_push_back(cb_alpha, 2);
    cb_wait_front(cb_alpha, 2);
}

// Merge the child partial in area `area` of cb_partial_in into the running set `own`, writing `next`:
// m = max(m_own, m_c); e_own = exp((m_own - m) * scale), e_c = exp((m_c - m) * scale);
// l = l_own * e_own + l_c * e_c; O = O_own * e_own + O_c * e_c.
void merge_child(uint32_t area, const Running& own, const Running& next) {
    const uint32_t base = area * partial_tiles;
    reserve_running(next);
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        const uint32_t m_c = base + partial_max_offset + qi;
        const uint32_t l_c = base + partial_sum_offset + qi;

        merge_factors(own, next, qi, cb_partial_in, m_c, false);

        rescaled_sum(own.sum, qi, l_c, next.sum, 0);
        cb_push_back(next.sum, 1);
        for (uint32_t v = 0; v < dv_tiles; ++v) {
            rescaled_sum(own.acc, qi * dv_tiles + v, base + qi * dv_tiles + v, next.acc, v);
        }
        cb_push_back(next.acc, dv_tiles);
        cb_pop_front(cb_alpha, 2);
    }
    pop_running(own);
}

// Root with an attention sink: fold the sink into the denominator, exactly as a merge with a
// partial of max `sink`, sum 1 and output 0. m is kept in score units (logits / scale), and the
// sink logit is sink * scale, so in those units the sink is its raw value:
// m' = max(m, sink); e_own = exp((m - m') * scale), e_sink = exp((sink - m') * scale);
// l' = l * e_own + e_sink; O' = O * e_own. Writes the running set `next`.
void merge_sink(const Running& own, const Running& next) {
    reserve_running(next);
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        merge_factors(own, next, qi, cb_sink, qi, true);

        // l' = l * e_own + e_sink
        tile_regs_acquire();
        copy_to_dst(own.sum, qi, 0);
        copy_to_dst(cb_alpha, 0, 1);
        copy_to_dst(cb_alpha, 1, 2);
        mul_binary_tile_init();
        mul_binary_tile(0, 1, 0);
        add_binary_tile_init();
        add_binary_tile(0, 2, 0);
        pack_block(next.sum, 0, 1);
        cb_push_back(next.sum, 1);

        // O' = O * e_own (rescaled_to_dst multiplies by cb_alpha tile 0)
        constexpr uint32_t block = dst_tiles - 1;
        for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
            const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
            tile_regs_acquire();
            rescaled_to_dst(own.acc, qi * dv_tiles + v0, n);
            pack_block(next.acc, v0, n);
        }
        cb_push_back(next.acc, dv_tiles);
        cb_pop_front(cb_alpha, 2);
    }
    pop_running(own);
}

// Root: out = O / l in bf16, and LSE = m * scale + log(l) when asked.
void finish_root(const Running& set) {
    wait_running(set);
    cb_reserve_back(cb_out, acc_tiles);
    if (return_lse) {
        cb_reserve_back(cb_lse, q_tiles);
    }
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        cb_reserve_back(cb_alpha, 2);
        tile_regs_acquire();
        copy_to_dst(set.sum, qi, 0);
        recip_tile_init();
        recip_tile(0);
        pack_block(cb_alpha, 0, 1);
        cb_push_back(cb_alpha, 2);
        cb_wait_front(cb_alpha, 2);

        for (uint32_t v0 = 0; v0 < dv_tiles; v0 += dst_tiles) {
            const uint32_t n = dv_tiles - v0 < dst_tiles ? dv_tiles - v0 : dst_tiles;
            tile_regs_acquire();
            use_operands(set.acc, cb_alpha);
            mul_bcast_cols_init(set.acc, cb_alpha);
            for (uint32_t v = 0; v < n; ++v) {
                mul_tiles_bcast_cols(set.acc, cb_alpha, qi * dv_tiles + v0 + v, 0, v);
            }
            pack_block(cb_out, qi * dv_tiles + v0, n);
        }
        cb_pop_front(cb_alpha, 2);

        if (return_lse) {
            // LSE = m * scale + log(l), all in fp32 on the SFPU (column 0 holds the value).
            tile_regs_acquire();
            copy_to_dst(set.sum, qi, 0);
            log_tile_init();
            log_tile(0);
            copy_to_dst(set.max, qi, 1);
            binop_with_scalar_tile_init();
            mul_unary_tile(1, scale_bits);
            add_binary_tile_init();
            add_binary_tile(0, 1, 0);
            pack_block(cb_lse, qi, 1);
        }
    }
    cb_push_back(cb_out, acc_tiles);
    if (return_lse) {
        cb_push_back(cb_lse, q_tiles);
    }
    pop_running(set);
}

// Non-root: copy (O, m, l) into cb_partial_out for the writer to send up the tree.
void send_partial(const Running& set) {
    wait_running(set);
    cb_reserve_back(cb_partial_out, partial_tiles);
    for (uint32_t t0 = 0; t0 < partial_tiles; t0 += dst_tiles) {
        const uint32_t n = partial_tiles - t0 < dst_tiles ? partial_tiles - t0 : dst_tiles;
        tile_regs_acquire();
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t t = t0 + i;
            if (t < partial_max_offset) {
                copy_to_dst(set.acc, t, i);
            } else if (t < partial_sum_offset) {
                copy_to_dst(set.max, t - partial_max_offset, i);
            } else {
                copy_to_dst(set.sum, t - partial_sum_offset, i);
            }
        }
        pack_block(cb_partial_out, t0, n);
    }
    cb_push_back(cb_partial_out, partial_tiles);
    pop_running(set);
}

}  // namespace

void kernel_main() {
    const uint32_t num_pieces = get_arg_val<uint32_t>(0);
    constexpr uint32_t piece_args_base = 1;
    constexpr uint32_t args_per_piece = 2;

    compute_kernel_hw_startup(cb_k, cb_q, cb_scores);

    // Constant tiles from the writer and the positions from the reader stay for the whole kernel.
    cb_wait_front(cb_scaler, 1);
    cb_wait_front(cb_ones, 1);
    cb_wait_front(cb_zeros, 1);
    cb_wait_front(cb_pos_compute, 1);

    for (uint32_t p = 0; p < num_pieces; ++p) {
        const uint32_t user = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 0);
        const uint32_t index = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 1);
        const int32_t cur_pos = (int32_t)read_tile_value(cb_pos_compute, 0, user);
        const PieceRange range = piece_range(cur_pos, fixed_chunk_tiles, pieces_per_work, index, window);
        const uint32_t height = tree_height(index, pieces_per_work);

        if (range.empty()) {
            // No keys: nothing to compute or send; the writer still hands over this piece's
            // (unused) partial areas to keep the partial_in queue aligned.
            if (height > 0) {
                cb_wait_front(cb_partial_in, height * partial_tiles);
                cb_pop_front(cb_partial_in, height * partial_tiles);
            }
            continue;
        }

        // The piece's masks (writer.cpp): page 0 on its first tile (window start, plus the causal
        // boundary when the piece reads one tile), page 1 on its last tile (the causal boundary).
        const PieceMasks masks = piece_masks(cur_pos, range, index, window);
        const bool first_tile_masked = masks.window_start || (masks.causal && range.num_tiles == 1);
        const bool last_tile_masked = masks.causal && range.num_tiles > 1;
        if (masks.any()) {
            cb_wait_front(cb_mask, 2);
        }
        cb_wait_front(cb_q, q_tiles * d_tiles);
        uint32_t cur = 0;  // the running set that holds the state
        for (uint32_t c = 0; c < range.num_chunks; ++c) {
            const uint32_t tiles = range.tiles_in_chunk(c);
            const bool first = c == 0;
            const bool last = c + 1 == range.num_chunks;
            const uint32_t next = c == 0 ? 0 : cur ^ 1;
            process_chunk(tiles, c == 0 ? nullptr : &running_sets[cur], running_sets[next],
                          first && first_tile_masked ? 0 : NO_MASK, last && last_tile_masked ? tiles - 1 : NO_MASK);
            cur = next;
            wait_running(running_sets[cur]);
        }
        if (masks.any()) {
            cb_pop_front(cb_mask, 2);
        }
        cb_pop_front(cb_q, q_tiles * d_tiles);

        // Children in merge order: area r holds the child of round r (index + 2^r).
        if (height > 0) {
            cb_wait_front(cb_partial_in, height * partial_tiles);
            for (uint32_t r = 0; r < height; ++r) {
                if (piece_has_work(cur_pos, fixed_chunk_tiles, pieces_per_work, index + (1u << r), window)) {
                    merge_child(r, running_sets[cur], running_sets[cur ^ 1]);
                    cur ^= 1;
                    wait_running(running_sets[cur]);
                }
            }
            cb_pop_front(cb_partial_in, height * partial_tiles);
        }

        if (index == 0) {
            if constexpr (has_sink) {
                cb_wait_front(cb_sink, q_tiles);
                merge_sink(running_sets[cur], running_sets[cur ^ 1]);
                cur ^= 1;
                cb_pop_front(cb_sink, q_tiles);
            }
            finish_root(running_sets[cur]);
        } else {
            send_partial(running_sets[cur]);
        }
    }
}
