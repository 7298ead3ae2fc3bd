// SPDX-License-Identifier: Apache-2.0
//
// FlashDecode's online softmax over one chunk of a piece's keys, for each q tile row in turn: the logits
// S = Q . K^T x scale (plus the piece's masks), the new running max m = max(m_old, rowmax(S)), the factor
// alpha = exp(m_old - m), P = exp(S - m), l = l_old * alpha + rowsum(P) and O = O_old * alpha + P . V,
// reading the running set `old` (none for the first chunk) and writing `next` (lse_merge.hpp Running).
// The root's last chunk, when nothing is left to merge, normalizes and writes the output itself.
//
// OnlineSoftmax<Args> takes the kernel's compile-time constants as the static members of Args
// (kernels/flash_decode/compute.cpp: the named compile-time args, the q tile rows' VectorModes, the
// merge's constants); compute.cpp calls prescale_q per piece and process_chunk per chunk.
// Over 600 lines because it is one template: the chunk's steps share Args' constants and its CB handles.

#pragma once

#include <stdint.h>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/cb_api.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/tile_move_copy.h"
#include "api/compute/matmul.h"
#include "api/compute/reduce.h"
#include "api/compute/bcast.h"
#include "common.hpp"
#include "../shared/compute_tiles.hpp"
#include "../shared/sfpu_rows.hpp"
#include "../shared/lse_merge.hpp"

namespace flash_decode {

using compute_tiles::broadcast_column;
using compute_tiles::copy_to_dst;
using compute_tiles::exp_block;
using compute_tiles::hand_to_packer;
using compute_tiles::matmul_block_for;
using compute_tiles::matmul_tiles_for;
using compute_tiles::pack_block;
using compute_tiles::pack_tiles_to;
using compute_tiles::sfpu_init;
using compute_tiles::SfpuInit;
using compute_tiles::use_srca;
using compute_tiles::use_srcb;
using sfpu_rows::init_add;
using sfpu_rows::init_max;
using sfpu_rows::init_mul;
using sfpu_rows::init_recip;
using sfpu_rows::init_scale;
using sfpu_rows::init_sub;

// Floors of the empty-row guard (float32 bits): the lowest finite float for the running max, the
// smallest normal float for the row sum before its reciprocal. A row whose every key is masked has the
// row max -inf and the row sum 0; flooring the max keeps every exp(x - m) and exp(m_old - m) free of
// -inf - (-inf) (they give exp(-inf) = 0 or exp(0) = 1 on an all-zero row instead of NaN), and flooring
// l before 1/l keeps O x 1/l = 0 x 2^126 = 0 instead of 0 x inf.
constexpr uint32_t LOWEST_FLOAT_BITS = 0xFF7FFFFFu;
constexpr uint32_t MIN_NORMAL_FLOAT_BITS = 0x00800000u;

template <class Args>
struct OnlineSoftmax {
    using Merge = lse_merge::Merge<Args>;
    using Running = lse_merge::Running;
    using RowOps = typename Args::RowOps;    // on the q rows that hold heads
    using StatOps = typename Args::StatOps;  // on a statistic's column 0

    static constexpr uint32_t q_tiles = Args::q_tiles;
    static constexpr uint32_t d_tiles = Args::d_tiles;
    static constexpr uint32_t dv_tiles = Args::dv_tiles;
    static constexpr uint32_t max_chunk_tiles = Args::max_chunk_tiles;
    static constexpr uint32_t dst_tiles = Args::dst_tiles;
    static constexpr uint32_t scale_bits = Args::scale_bits;
    static constexpr uint32_t scale_m1_bits = Args::scale_m1_bits;
    static constexpr bool return_lse = Args::return_lse;
    static constexpr bool exp_approx = Args::exp_approx;
    static constexpr bool mla = Args::mla;
    static constexpr bool has_attn_mask = Args::has_attn_mask;
    static constexpr bool guard_empty_rows = Args::guard_empty_rows;
    static constexpr bool q_prescaled = Args::q_prescaled;
    static constexpr uint32_t cb_q_in0 = Args::cb_q_in0;
    static constexpr VectorMode row_mode = RowOps::vector_mode;
    static constexpr int row_iterations = RowOps::iterations;

    static constexpr uint32_t k_slot_tiles = max_chunk_tiles * d_tiles;
    // The K slot's layout (reader.cpp): column-major (tile (j, d) at d * max_chunk_tiles + j) without MLA,
    // so Q . K^T runs one matmul_block per d over a DST block of key tiles; row-major with MLA (tile
    // (j, d) at j * d_tiles + d), where P . V reads V tiles (j, v..) out of the same slot.
    static constexpr bool k_by_column = !mla;
    // Without MLA a V slot's key tile row j holds its dv_tiles V tiles, then a tile of ones (reader.cpp):
    // P . V's matmul_block over the last Dv tiles and the ones gives the row sum P x ones in the same call.
    static constexpr uint32_t v_slot_tiles = max_chunk_tiles * (dv_tiles + 1);
    // Where P . V finds V tile (j, v) of a chunk: tile j * v_row_stride + v of cb_v, or with MLA of the
    // K slot, whose key tile row j holds K tiles (j, 0..d_tiles) and V tile (j, v) is K tile (j, v).
    // The matmul reads it untransposed (Q . K^T reads the same tile transposed); the K slot stays until
    // P . V of every q tile row is done (process_chunk pops it last).
    static constexpr uint32_t cb_v_source = mla ? cb_k : cb_v;
    static constexpr uint32_t v_row_stride = mla ? d_tiles : dv_tiles + 1;
    // The row sum's in1 (a tile of ones): the ones tile of key tile row j of the V slot, or with MLA cb_ones.
    static constexpr uint32_t cb_ones_source = mla ? cb_ones : cb_v;
    // Where key tile j of a chunk, or of a softmax block of chunks of `stride` tiles, lies: its scores and
    // probabilities (a slot of max_chunk_tiles per chunk), its key tile row of the V slots (a slot per chunk,
    // side by side), its ones tile. One chunk's (j < max_chunk_tiles = stride): j, j * v_row_stride.
    static constexpr uint32_t probs_at(uint32_t j, uint32_t stride) {
        return j / stride * max_chunk_tiles + j % stride;
    }
    static constexpr uint32_t v_row_at(uint32_t j, uint32_t stride) {
        return j / stride * v_slot_tiles + j % stride * v_row_stride;
    }
    static constexpr uint32_t ones_at(uint32_t j, uint32_t stride = max_chunk_tiles) {
        return mla ? 0 : v_row_at(j, stride) + dv_tiles;
    }
    static_assert(!mla || dv_tiles <= d_tiles, "MLA reads V out of the first dv_tiles tiles of each K row");
    static constexpr uint32_t acc_tiles = q_tiles * dv_tiles;
    static constexpr uint32_t mask_slot_tiles = q_tiles * max_chunk_tiles;  // cb_attn_mask: [q tile row][key tile]
    // What DST holds, the format the SFPU row max loads it with.
    static constexpr DataFormat stat_format = DST_ACCUM_MODE ? DataFormat::Float32 : DataFormat::Float16_b;
    // With a 16-bit DST (no fp32 accumulation) every MVMUL rounds its DST tile to bf16 and an SFPU result
    // is truncated to bf16 by the store unless the LLK function rounds it first (tech_report/flashdecode.md
    // 9.1; tools/bf16_dst_arbiter.py models both algorithms). Then (fresh_chunk):
    // * a chunk's P . V and P x ones accumulate in fresh DST tiles (from 0, over the chunk's keys only) and
    //   the old state joins them once per chunk, new + old * alpha in one SFPU multiply-add rounded once
    //   (addcmul's bf16 template), as tt-metal's decode adds a chunk's partial to the rescaled state;
    //   accumulated onto the running O and l, each of the 8 MVMULs per key tile (HiFi4) would round onto the
    //   whole row's sum, and small terms would stop adding up;
    // * the scores are scaled as s + ((scale - 1) * s) * 1 (addcmul with a ones tile): rounded to bf16, not
    //   truncated; S - m is rounded to nearest even (sfpu_rows.hpp Rows::sub).
    // With an fp32 DST the products accumulate onto the rescaled old state and the scale is one multiply.
    static constexpr bool fresh_chunk = !DST_ACCUM_MODE;


    // A matmul unpacks in0 into srcB and in1 into srcA; its init follows (matmul_block_for / matmul_tiles_for).
    static void use_matmul_operands(uint32_t in0, uint32_t in1) {
        use_srca(in1);
        use_srcb(in0);
    }

    // Does one of the piece's masked tiles fall in tiles [j0, j0 + n) of the chunk starting at the piece's
    // tile first_at?
    static bool masked_in(const PieceMasks& masks, uint32_t first_at, uint32_t j0, uint32_t n) {
        for (uint32_t m = 0; m < masks.count; ++m) {
            const uint32_t t = masks.at[m] - first_at;  // wraps past the chunk for a tile before it
            if (t >= j0 && t < j0 + n) {
                return true;
            }
        }
        return false;
    }

    // Logits S = (Q_qi . K^T) * scale over the chunk's `tiles` key tiles into cb_scores, in fp32: the
    // matmul accumulates in DST, the SFPU scales, then a masked tile gets its mask (-inf at masked keys,
    // 0 elsewhere; bf16, copied exactly into the spare DST tile) added on the SFPU. The chunk starts at
    // piece's tile `first_at` (PieceRange::tile_at); masked tile i of the piece takes page i * q_tiles + qi of cb_mask.
    static void chunk_scores(uint32_t qi, uint32_t tiles, const PieceMasks& masks, uint32_t first_at) {
        cb_reserve_back(cb_scores, max_chunk_tiles);
        for (uint32_t j0 = 0; j0 < tiles;) {
            // A DST block of key tiles: the whole DST, or one tile fewer when a mask is added in it (the
            // spare DST tile takes the mask). Blocks of one size share one matmul init (only SFPU ops and
            // packs between them).
            uint32_t n = tiles - j0 < dst_tiles ? tiles - j0 : dst_tiles;
            if (n == dst_tiles &&
                (has_attn_mask || masked_in(masks, first_at, j0, n) || (fresh_chunk && !q_prescaled))) {
                n = dst_tiles - 1;  // the spare DST tile: the mask, or (fresh_chunk) the ones of the scale first
            }
            tile_regs_acquire();
            use_matmul_operands(cb_q_in0, cb_k);
            if constexpr (k_by_column) {
                // One matmul_block per d: Q tile (qi, d) times the n K tiles (j0.., d), transposed, onto
                // DST tiles 0..n (consecutive in the column-major slot).
                matmul_block_for(cb_q_in0, cb_k, 1 /* transpose K */, n /* ct */, d_tiles /* kt */);
                for (uint32_t d = 0; d < d_tiles; ++d) {
                    matmul_block(cb_q_in0, cb_k, qi * d_tiles + d, d * max_chunk_tiles + j0, 0, 1, n, 1, d_tiles);
                }
            } else {
                matmul_tiles_for(cb_q_in0, cb_k, 1 /* transpose K */);
                for (uint32_t j = 0; j < n; ++j) {
                    for (uint32_t d = 0; d < d_tiles; ++d) {
                        matmul_tiles(cb_q_in0, cb_k, qi * d_tiles + d, (j0 + j) * d_tiles + d, j);
                    }
                }
            }
            if constexpr (!q_prescaled && fresh_chunk) {
                copy_to_dst(cb_ones, 0, n);
                init_mul();  // serves the addcmul (one LLK init)
                for (uint32_t j = 0; j < n; ++j) {
                    RowOps::addcmul(j, j, n, j, scale_m1_bits);  // s + ((scale - 1) * s) * 1, rounded
                }
            } else if constexpr (!q_prescaled) {
                init_scale();
                for (uint32_t j = 0; j < n; ++j) {
                    RowOps::scale(j, scale_bits);
                }
            }
            for (uint32_t m = 0; m < masks.count; ++m) {
                const uint32_t t = masks.at[m] - first_at;  // wraps past `tiles` for a tile before the chunk
                if (t >= j0 && t < j0 + n) {
                    copy_to_dst(cb_mask, m * q_tiles + qi, n);
                    init_add();
                    RowOps::add(t - j0, n, t - j0);
                }
            }
            if constexpr (has_attn_mask) {
                // The caller's additive mask (bf16, exact in DST), tile by tile through the spare DST tile.
                for (uint32_t j = 0; j < n; ++j) {
                    copy_to_dst(cb_attn_mask, qi * max_chunk_tiles + j0 + j, n);
                    init_add();
                    RowOps::add(j, n, j);
                }
            }
            pack_block(cb_scores, j0, n);
            j0 += n;
        }
        cb_push_back(cb_scores, max_chunk_tiles);
        cb_wait_front(cb_scores, max_chunk_tiles);
    }

    // cb_q_scaled = the piece's Q tiles x scale (q_prescaled: the scale is +-2^k), a DST block at a time:
    // bf16 Q is copied exactly into the fp32 DST, multiplied on the SFPU (exact: only the exponent moves)
    // and packed to bf16 with nothing to round. Frees cb_q for the reader's next piece.
    static void prescale_q() {
        constexpr uint32_t n = q_tiles * d_tiles;
        cb_reserve_back(cb_q_scaled, n);
        for (uint32_t t0 = 0; t0 < n; t0 += dst_tiles) {
            const uint32_t m = n - t0 < dst_tiles ? n - t0 : dst_tiles;
            tile_regs_acquire();
            for (uint32_t i = 0; i < m; ++i) {
                copy_to_dst(cb_q, t0 + i, i);
            }
            init_scale();
            for (uint32_t i = 0; i < m; ++i) {
                RowOps::scale(i, scale_bits);  // the q rows that hold heads (the others are zero)
            }
            pack_block(cb_q_scaled, t0, m);
        }
        cb_push_back(cb_q_scaled, n);
        cb_pop_front(cb_q, n);
        cb_wait_front(cb_q_scaled, n);
    }

    // Row qi of the new max: max(m_old, rowmax(S)), exact: the logits are copied into DST one by one and
    // folded into DST tile 0 by an element-wise max (on the rows `row_mode` covers), then one SFPU row
    // reduction of that tile leaves each row's max in column 0 (its other columns are never used).
    // A softmax block's `tiles` are its chunks' of `stride` tiles each (the last may be short), every
    // chunk's scores in a slot of max_chunk_tiles tiles; one chunk's lie at 0..tiles.
    static void chunk_row_max(uint32_t qi, uint32_t tiles, const Running* old, const Running& next,
                              uint32_t stride = max_chunk_tiles) {
        tile_regs_acquire();
        copy_to_dst(cb_scores, 0, 0);
        if (tiles > 1) {
            init_max();
            for (uint32_t j = 1; j < tiles; ++j) {
                copy_to_dst(cb_scores, probs_at(j, stride), 1);
                RowOps::max(0, 1, 0);
            }
        }
        sfpu_init(SfpuInit::other, [] { sfpu_reduce_init<PoolType::MAX, stat_format>(); });
        sfpu_reduce<PoolType::MAX, stat_format, ReduceDim::REDUCE_ROW>(0, 1, 1);
        if (old != nullptr) {
            copy_to_dst(old->max, qi, 1);
            init_max();
            RowOps::max(0, 1, 0);
        }
        if constexpr (guard_empty_rows) {
            RowOps::floor(0, 1, cb_ones, 0, LOWEST_FLOAT_BITS);
        }
        pack_block(next.max, 0, 1);  // pack indices count from the last push
        cb_push_back(next.max, 1);
        cb_wait_front(next.max, qi + 1);
    }

    // Does chunk_probs copy m_new broadcast from cb_max_bcast (one copy init for the chunk) rather than
    // broadcast it from column 0 of next.max into each DST block (a broadcast and a copy init per block)?
    // The tile costs a pack, in chunk_alpha's pass when there is an old set, else in a pass of its own
    // (two more configuration calls and a broadcast): it pays from 2 DST blocks of logits with an old
    // set, from 3 without (the model's prices; the values are the same either way).
    static constexpr bool max_bcast_tile(uint32_t tiles, bool has_old) {
        return (tiles + dst_tiles - 2) / (dst_tiles - 1) >= (has_old ? 2u : 3u);
    }

    // With an old set: alpha = exp(m_old - m_new) in every column, the factor that rescales row qi's old l
    // and O, in tile 0 of cb_alpha (when the chunk finishes the root, only that page is pushed: 1/l follows
    // in tile 1, root_recip). With `bcast_tile`, in the same DST pass: m_new broadcast along each row
    // (exact: unary_bcast from column 0) into cb_max_bcast, for chunk_probs.
    static void chunk_alpha(uint32_t qi, const Running* old, const Running& next, bool finish, bool bcast_tile) {
        if (bcast_tile) {
            cb_reserve_back(cb_max_bcast, 1);
        }
        if (old != nullptr) {
            cb_reserve_back(cb_alpha, 2);
        }
        tile_regs_acquire();
        if (old != nullptr) {
            broadcast_column(old->max, qi, 0);
        }
        broadcast_column(next.max, qi, 1);
        if (old != nullptr) {
            init_sub();
            RowOps::sub(0, 1, 0);
            exp_block<exp_approx, row_iterations>(1, 0, row_mode);
        }
        hand_to_packer();
        if (old != nullptr) {
            pack_tiles_to(cb_alpha, 0, 1);
        }
        if (bcast_tile) {
            pack_tiles_to(cb_max_bcast, 0, 1, 1);  // cb_alpha and cb_max_bcast share one format
        }
        tile_regs_release();
        if (bcast_tile) {
            cb_push_back(cb_max_bcast, 1);
            cb_wait_front(cb_max_bcast, 1);
        }
        if (old != nullptr) {
            const uint32_t pages = finish ? 1 : 2;
            cb_push_back(cb_alpha, pages);
            cb_wait_front(cb_alpha, pages);
        }
    }

    // P = exp(S - m_new): the fp32 logits and m_new broadcast along each row (copied from cb_max_bcast
    // with `bcast_tile`, else broadcast from column 0 of next.max; into the last DST tile) reach DST
    // exactly and are subtracted on the SFPU (masked keys hold -inf and give 0). Frees the scores (and
    // cb_max_bcast, unless `keep_bcast`: a softmax block's later chunks read it too).
    static void chunk_probs(uint32_t qi, uint32_t tiles, const Running& next, bool bcast_tile,
                            bool keep_bcast = false) {
        constexpr uint32_t block = dst_tiles - 1;
        cb_reserve_back(cb_probs, max_chunk_tiles);
        for (uint32_t j0 = 0; j0 < tiles; j0 += block) {
            const uint32_t n = tiles - j0 < block ? tiles - j0 : block;
            tile_regs_acquire();
            for (uint32_t j = 0; j < n; ++j) {
                copy_to_dst(cb_scores, j0 + j, j);
            }
            if (bcast_tile) {
                copy_to_dst(cb_max_bcast, 0, n);  // the same unpack path as the logits: no init
            } else {
                broadcast_column(next.max, qi, n);
            }
            init_sub();
            for (uint32_t j = 0; j < n; ++j) {
                RowOps::sub(j, n, j);
            }
            exp_block<exp_approx, row_iterations>(n, 0, row_mode);
            pack_block(cb_probs, j0, n);
        }
        cb_push_back(cb_probs, max_chunk_tiles);
        cb_wait_front(cb_probs, max_chunk_tiles);
        cb_pop_front(cb_scores, max_chunk_tiles);
        if (bcast_tile && !keep_bcast) {
            cb_pop_front(cb_max_bcast, 1);
        }
    }

    // DST tiles [0, n) = tiles [first, first + n) of cb times alpha, in fp32 on the SFPU (alpha is
    // copied into DST tile n, so n < dst_tiles).
    static void rescaled_to_dst(uint32_t cb, uint32_t first, uint32_t n) {
        copy_to_dst(cb_alpha, 0, n);
        for (uint32_t i = 0; i < n; ++i) {
            copy_to_dst(cb, first + i, i);
        }
        init_mul();
        for (uint32_t i = 0; i < n; ++i) {
            RowOps::mul(i, n, i);
        }
    }

    // DST tiles [0, n) += tiles [first, first + n) of cb times alpha (column 0 of cb_alpha tile 0 in every
    // column), each in one SFPU multiply-add (addcmul: one rounding); with_last also DST tile n += tile `last` of
    // cb_last times alpha. Uses DST tiles [held, 2 held], held = n (+ 1 with_last).
    static void add_rescaled(uint32_t cb, uint32_t first, uint32_t n, uint32_t cb_last = 0, uint32_t last = 0,
                             bool with_last = false) {
        const uint32_t held = n + (with_last ? 1 : 0);
        copy_to_dst(cb_alpha, 0, 2 * held);
        for (uint32_t i = 0; i < n; ++i) {
            copy_to_dst(cb, first + i, held + i);
        }
        if (with_last) {
            copy_to_dst(cb_last, last, held + n);
        }
        init_mul();  // serves the addcmul (one LLK init)
        for (uint32_t i = 0; i < held; ++i) {
            RowOps::addcmul(i, held + i, 2 * held, i);  // new + old * alpha
        }
    }

    // l_new = l_old * alpha + rowsum(P). The row sum is P x ones (every column holds it), accumulated
    // by the matmul onto the rescaled old sum in the same DST tile (fresh_chunk: into a fresh tile, then
    // the rescaled old sum added). A softmax block's key tiles lie as probs_at / v_row_at say (`stride`).
    static void chunk_row_sum(uint32_t qi, uint32_t tiles, const Running* old, const Running& next,
                              uint32_t stride = max_chunk_tiles) {
        tile_regs_acquire();
        if (old != nullptr && !fresh_chunk) {
            rescaled_to_dst(old->sum, qi, 1);
        }
        use_matmul_operands(cb_probs, cb_ones_source);
        matmul_tiles_for(cb_probs, cb_ones_source, 0);
        for (uint32_t j = 0; j < tiles; ++j) {
            matmul_tiles(cb_probs, cb_ones_source, probs_at(j, stride), ones_at(j, stride), 0);
        }
        if (old != nullptr && fresh_chunk) {
            add_rescaled(old->sum, qi, 1);
        }
        pack_block(next.sum, 0, 1);
        cb_push_back(next.sum, 1);
    }

    // The DST block of Dv tiles chunk_output takes per acquire: one DST tile fewer when alpha (old) or 1/l
    // (finish) shares DST with the block.
    // With an old set and fresh_chunk: the block's new tiles (and l), the old ones and alpha, 2 (n + 1) + 1
    // DST tiles.
    static constexpr uint32_t output_block(bool rescaled, bool fresh_old = false) {
        return fresh_old ? (dst_tiles - 3) / 2 : rescaled ? dst_tiles - 1 : dst_tiles;
    }
    static_assert(!fresh_chunk || dst_tiles >= 5, "a fresh chunk block needs 2 (n + 1) + 1 DST tiles");
    // Does the last Dv block leave a DST tile free for the row sum (chunk_output's `with_sum`)?
    static constexpr bool sum_fits_output(bool rescaled) {
        return dv_tiles % output_block(rescaled, fresh_chunk && rescaled) != 0;
    }

    // O_new = O_old * alpha + P . V for row qi (V tiles from cb_v, or the K slot with MLA), a block of Dv
    // tiles per DST acquire (one DST tile fewer when alpha shares DST with the block). `finish` (the root's
    // last chunk, nothing left to merge): O_new x (1/l) in fp32 on the SFPU (1/l broadcast from column 0
    // of cb_alpha tile 1 into the spare DST tile), packed once to the bf16 output instead of the running O.
    // `with_sum` (not with finish; sum_fits_output): the last block also takes the row sum's tile, as
    // chunk_row_sum would compute it (l_old * alpha, then P x ones accumulated onto it, key tile by key
    // tile), and packs it to next.sum: the same values in one DST pass fewer.
    // A softmax block's key tiles lie as probs_at / v_row_at say (`stride`).
    static void chunk_output(uint32_t qi, uint32_t tiles, const Running* old, const Running& next, bool finish,
                             bool with_sum, uint32_t dv_end = dv_tiles, uint32_t stride = max_chunk_tiles) {
        const uint32_t block = output_block(old != nullptr || finish, fresh_chunk && old != nullptr);
        for (uint32_t v0 = 0; v0 < dv_end; v0 += block) {
            const uint32_t n = dv_end - v0 < block ? dv_end - v0 : block;
            const bool sum_here = with_sum && v0 + n == dv_tiles;  // DST tile n holds l
            tile_regs_acquire();
            if (old != nullptr && !fresh_chunk) {
                const uint32_t rescaled = n + (sum_here ? 1 : 0);
                copy_to_dst(cb_alpha, 0, rescaled);
                for (uint32_t i = 0; i < n; ++i) {
                    copy_to_dst(old->acc, qi * dv_tiles + v0 + i, i);
                }
                if (sum_here) {
                    copy_to_dst(old->sum, qi, n);
                }
                init_mul();
                for (uint32_t i = 0; i < rescaled; ++i) {
                    RowOps::mul(i, rescaled, i);
                }
            }
            if (sum_here && mla) {
                // The row sum before P . V, so that the chunk ends on V's unpacker format (the next
                // chunk's K has the same).
                use_matmul_operands(cb_probs, cb_ones);
                matmul_tiles_for(cb_probs, cb_ones, 0);
                for (uint32_t j = 0; j < tiles; ++j) {
                    matmul_tiles(cb_probs, cb_ones, j, 0, n);
                }
            }
            // One matmul_block per key tile j: P tile j times the n V tiles (j, v0..v0+n) of its row
            // (consecutive in the slot) onto DST tiles 0..n; without MLA, in the block that holds l, also
            // the row's ones tile (right after its last V tile) onto DST tile n: l += P x ones, accumulated
            // key tile by key tile onto the rescaled l as a separate row sum would.
            const uint32_t ct = n + (sum_here && !mla ? 1 : 0);
            use_matmul_operands(cb_probs, cb_v_source);
            matmul_block_for(cb_probs, cb_v_source, 0 /* no transpose */, ct, tiles /* kt */);
            for (uint32_t j = 0; j < tiles; ++j) {
                matmul_block(cb_probs, cb_v_source, probs_at(j, stride), v_row_at(j, stride) + v0, 0, 0, ct, 1, tiles);
            }
            if (old != nullptr && fresh_chunk) {
                add_rescaled(old->acc, qi * dv_tiles + v0, n, old->sum, qi, sum_here);
            }
            if (finish) {
                broadcast_column(cb_alpha, 1, n);
                init_mul();
                for (uint32_t v = 0; v < n; ++v) {
                    RowOps::mul(v, n, v);
                }
                pack_block(cb_out, qi * dv_tiles + v0, n);
            } else {
                hand_to_packer();
                pack_tiles_to(next.acc, v0, n);
                if (sum_here) {
                    pack_tiles_to(next.sum, 0, 1, n);  // the running sets share one format
                }
                tile_regs_release();
            }
        }
        if (!finish) {
            cb_push_back(next.acc, dv_tiles);
        }
        if (with_sum) {
            cb_push_back(next.sum, 1);
        }
    }

    // The root's only chunk (no old set, nothing to merge, no LSE, V in its own slot): l rides in P.V's
    // last DST block (the V slot's ones tile after the row's last V tile), done first: l is inverted in
    // place (every column holds it, so the multiply needs no broadcast) and multiplies the block's O tiles;
    // 1/l goes to tile 1 of cb_alpha for the other blocks (chunk_output's finish path, up to dv_end).
    // The same values as chunk_row_sum + root_recip + chunk_output, without the row-sum and 1/l passes.
    static constexpr uint32_t fused_scratch = guard_empty_rows ? 1 : 0;  // Rows::floor's scratch DST tile
    static constexpr uint32_t fused_block =
        dv_tiles < dst_tiles - 1 - fused_scratch ? dv_tiles : dst_tiles - 1 - fused_scratch;
    static constexpr uint32_t fused_rest = dv_tiles - fused_block;  // the O tiles left to chunk_output
    static void finish_single_chunk(uint32_t qi, uint32_t tiles) {
        constexpr uint32_t n = fused_block;
        if constexpr (fused_rest > 0) {
            cb_reserve_back(cb_alpha, 2);
        }
        tile_regs_acquire();
        use_matmul_operands(cb_probs, cb_v);
        matmul_block_for(cb_probs, cb_v, 0 /* no transpose */, n + 1, tiles /* kt */);
        for (uint32_t j = 0; j < tiles; ++j) {
            matmul_block(cb_probs, cb_v, j, j * v_row_stride + fused_rest, 0, 0, n + 1, 1, tiles);
        }
        if constexpr (guard_empty_rows) {
            RowOps::floor(n, n + 1, cb_ones, 0, MIN_NORMAL_FLOAT_BITS);  // l = 0 (no key) gives out = 0
        }
        init_recip();
        RowOps::recip(n);
        init_mul();
        for (uint32_t v = 0; v < n; ++v) {
            RowOps::mul(v, n, v);
        }
        hand_to_packer();
        pack_tiles_to(cb_out, qi * dv_tiles + fused_rest, n);
        if constexpr (fused_rest > 0) {
            pack_tiles_to(cb_alpha, 1, 1, n);
        }
        tile_regs_release();
        if constexpr (fused_rest > 0) {
            cb_push_back(cb_alpha, 2);
            cb_wait_front(cb_alpha, 2);
        }
    }

    // 1/l of row qi into tile 1 of cb_alpha (tile 0 holds alpha when there is an old set, else nothing),
    // in fp32 on the SFPU; l is read through column 0 (stat_mode). With the empty-row guard l is floored
    // first (l = 0: no key, no sink, gives out = 0).
    static void root_recip(uint32_t cb_sum, uint32_t qi, bool after_alpha) {
        cb_reserve_back(cb_alpha, after_alpha ? 1 : 2);
        tile_regs_acquire();
        copy_to_dst(cb_sum, qi, 0);
        if constexpr (guard_empty_rows) {
            StatOps::floor(0, 1, cb_ones, 0, MIN_NORMAL_FLOAT_BITS);
        }
        init_recip();
        StatOps::recip(0);
        hand_to_packer();
        pack_tiles_to(cb_alpha, after_alpha ? 0 : 1, 1);  // pack indices count from the last push
        tile_regs_release();
        cb_push_back(cb_alpha, after_alpha ? 1 : 2);
        cb_wait_front(cb_alpha, 2);
    }

    // One chunk of keys for every q tile row: reads the running set `old` (none for the first chunk)
    // and writes `next`. The K/V slot stays until all rows are done. The piece's masks (if any) are
    // already waited for. `finish`: the root's last chunk with nothing left to merge (no child with keys,
    // no sink): it writes the normalized output and the LSE itself (as compute.cpp finish_root would) and
    // no running O; next's m and l are consumed here.
    static void process_chunk(uint32_t tiles, const Running* old, const Running& next, const PieceMasks& masks,
                              uint32_t first_at, bool finish) {
        cb_wait_front(cb_k, k_slot_tiles);
        if constexpr (has_attn_mask) {
            cb_wait_front(cb_attn_mask, mask_slot_tiles);
        }
        // The root's only chunk with no LSE: finish_single_chunk (no running l)
        const bool fused = !mla && !return_lse && finish && old == nullptr;
        if (finish) {
            cb_reserve_back(next.max, q_tiles);
            if (!fused) {
                cb_reserve_back(next.sum, q_tiles);
            }
            cb_reserve_back(cb_out, acc_tiles);
            if (return_lse) {
                cb_reserve_back(cb_lse, q_tiles);
            }
        } else {
            Merge::reserve_running(next);
        }
        for (uint32_t qi = 0; qi < q_tiles; ++qi) {
            chunk_scores(qi, tiles, masks, first_at);
            chunk_row_max(qi, tiles, old, next);
            const bool bcast_tile = max_bcast_tile(tiles, old != nullptr);
            if (old != nullptr || bcast_tile) {
                chunk_alpha(qi, old, next, finish, bcast_tile);
            }
            chunk_probs(qi, tiles, next, bcast_tile);
            if (fused) {
                if (qi == 0) {
                    cb_wait_front(cb_v, v_slot_tiles);
                }
                finish_single_chunk(qi, tiles);
                if constexpr (fused_rest > 0) {
                    chunk_output(qi, tiles, nullptr, next, true, false, fused_rest);
                    cb_pop_front(cb_alpha, 2);
                }
                cb_pop_front(cb_probs, max_chunk_tiles);
                continue;
            }
            // The row sum rides in chunk_output's last DST block when it leaves a tile free.
            const bool sum_in_output = !finish && sum_fits_output(old != nullptr);
            if constexpr (!mla) {
                if (qi == 0 && !sum_in_output) {
                    cb_wait_front(cb_v, v_slot_tiles);  // the row sum reads the ones tiles of the V slot
                }
            }
            if (!sum_in_output) {
                chunk_row_sum(qi, tiles, old, next);
            }
            if (finish) {
                cb_wait_front(next.sum, qi + 1);
                root_recip(next.sum, qi, old != nullptr);
            }
            if constexpr (!mla) {
                if (qi == 0 && sum_in_output) {
                    cb_wait_front(cb_v, v_slot_tiles);  // V has its own push: the scores above overlap its read
                }
            }
            chunk_output(qi, tiles, old, next, finish, sum_in_output);
            if (finish && return_lse) {
                Merge::lse(next.sum, qi, next.max, qi, cb_lse, qi);
            }
            cb_pop_front(cb_probs, max_chunk_tiles);
            if (old != nullptr || finish) {
                cb_pop_front(cb_alpha, 2);
            }
        }
        if (old != nullptr) {
            Merge::pop_running(*old);
        }
        if (finish) {
            cb_push_back(cb_out, acc_tiles);
            if (return_lse) {
                cb_push_back(cb_lse, q_tiles);
            }
            cb_pop_front(next.max, q_tiles);
            if (!fused) {
                cb_pop_front(next.sum, q_tiles);
            }
        }
        cb_pop_front(cb_k, k_slot_tiles);
        if constexpr (!mla) {
            cb_pop_front(cb_v, v_slot_tiles);
        }
        if constexpr (has_attn_mask) {
            cb_pop_front(cb_attn_mask, mask_slot_tiles);
        }
    }
    // ---- softmax blocks (Args::softmax_chunks > 1) ----
    // A block of `chunks` chunks of the piece (from chunk `first` of `range`) is one online-softmax update:
    // the scores of each chunk in turn (its K slot freed once they are out, while the reader queues the
    // block's V slots: cb_v holds a block's, side by side), one max over the block, one alpha, the
    // probabilities chunk by chunk (a slot each), then P . V and the row sum over all the block's key
    // tiles in one pass onto the rescaled running set `old` (none: the piece's first block), writing `next`.
    // The values differ from one chunk at a time only in the max exp(S - m) takes (the block's).
    static constexpr uint32_t softmax_chunks = Args::softmax_chunks;
    static_assert(softmax_chunks == 1 || (q_tiles == 1 && !mla && !has_attn_mask && !fresh_chunk),
                  "a softmax block: one q tile row, V in its own slot, no attn_mask, an fp32 DST");

    static void process_block(const PieceRange& range, uint32_t first, uint32_t chunks, const PieceMasks& masks,
                              const Running* old, const Running& next) {
        for (uint32_t k = 0; k < chunks; ++k) {
            cb_wait_front(cb_k, k_slot_tiles);
            chunk_scores(0, range.tiles_in_chunk(first + k), masks, (first + k) * range.chunk_tiles);
            cb_pop_front(cb_k, k_slot_tiles);
        }
        cb_wait_front(cb_scores, chunks * max_chunk_tiles);
        const uint32_t stride = range.chunk_tiles;  // every chunk but the block's last is whole
        const uint32_t tiles = (chunks - 1) * stride + range.tiles_in_chunk(first + chunks - 1);
        Merge::reserve_running(next);
        chunk_row_max(0, tiles, old, next, stride);
        chunk_alpha(0, old, next, false, true);  // with m_new broadcast once for every chunk's probabilities
        for (uint32_t k = 0; k < chunks; ++k) {
            chunk_probs(0, range.tiles_in_chunk(first + k), next, true, k + 1 < chunks);
        }
        cb_wait_front(cb_probs, chunks * max_chunk_tiles);
        const bool sum_in_output = sum_fits_output(old != nullptr);
        cb_wait_front(cb_v, chunks * v_slot_tiles);
        if (!sum_in_output) {
            chunk_row_sum(0, tiles, old, next, stride);
        }
        chunk_output(0, tiles, old, next, false, sum_in_output, dv_tiles, stride);
        cb_pop_front(cb_probs, chunks * max_chunk_tiles);
        if (old != nullptr) {
            cb_pop_front(cb_alpha, 2);
            Merge::pop_running(*old);
        }
        cb_pop_front(cb_v, chunks * v_slot_tiles);
    }

    // After a piece's chunks, to whole blocks: the V slots the reader pushed unread (reader.cpp) are popped,
    // and as many slots of scores and probabilities (this kernel's own) pushed and popped unwritten, so that
    // every block's slots start at the start of cb_v, cb_scores and cb_probs (side by side, never wrapped).
    static void pad_to_whole_blocks(uint32_t num_chunks) {
        const uint32_t pad = (softmax_chunks - num_chunks % softmax_chunks) % softmax_chunks;
        if (pad == 0) {
            return;
        }
        cb_wait_front(cb_v, pad * v_slot_tiles);
        cb_pop_front(cb_v, pad * v_slot_tiles);
        for (const uint32_t cb : {cb_scores, cb_probs}) {
            cb_reserve_back(cb, pad * max_chunk_tiles);
            cb_push_back(cb, pad * max_chunk_tiles);
            cb_wait_front(cb, pad * max_chunk_tiles);
            cb_pop_front(cb, pad * max_chunk_tiles);
        }
    }

    // A skipped piece's `chunks` chunks the reader pushed unread (BankView::discard): their K slots and their V
    // slots (with softmax blocks, up to a whole block, as the reader pads them) popped.
    static void discard_chunks(uint32_t chunks) {
        if (chunks == 0) {
            return;
        }
        cb_wait_front(cb_k, chunks * k_slot_tiles);
        cb_pop_front(cb_k, chunks * k_slot_tiles);
        if constexpr (!mla) {
            const uint32_t slots = (chunks + softmax_chunks - 1) / softmax_chunks * softmax_chunks;
            cb_wait_front(cb_v, slots * v_slot_tiles);
            cb_pop_front(cb_v, slots * v_slot_tiles);
        }
    }
};

}  // namespace flash_decode
