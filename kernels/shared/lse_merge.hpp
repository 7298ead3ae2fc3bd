// SPDX-License-Identifier: Apache-2.0
//
// The exact merge of softmax states by their maxima (the LSE merge), shared by the FlashDecode tree (a
// piece folds its children's partials and the attention sink into its running state) and the combine
// (normalized partials, one per device). The state of a tile row is (m, l, O): the running max m, the sum
// l of exp(s - m) and the weighted sum O of the V rows. Merging (m_o, l_o, O_o) into (m, l, O):
//   m' = max(m, m_o); e = exp(m - m'), e_o = exp(m_o - m'); l' = l * e + l_o * e_o; O' = O * e + O_o * e_o
// then out = O / l and LSE = m + log(l). Every value reaches DST exactly and is combined in fp32 on the
// SFPU, row by row, so rows never mix.
//
// Merge<Config> takes the kernel's compile-time constants as the static members of Config:
//   rows                tile rows a running set holds
//   dv_tiles            O tiles per tile row
//   dst_tiles           usable DST tiles (at least 4)
//   cb_alpha            the factors' CB (UnpackToDestFp32, 2 pages): (e, e_o), then 1/l in page 0
//   StatOps, RowOps     sfpu_rows::Rows on the statistics' lanes (m, l, the factors) and on O's rows
//   exp_approx          the factors' exp_tile<approx>
//   factors_in_column0  the statistics hold each row's value in column 0 only, so O's rescale broadcasts
//                       the factor along the row (otherwise every column holds it and a copy serves)

#pragma once

#include <stdint.h>

#include "api/compute/cb_api.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "compute_tiles.hpp"
#include "sfpu_rows.hpp"

namespace lse_merge {

using compute_tiles::broadcast_column;
using compute_tiles::copy_to_dst;
using compute_tiles::exp_block;
using compute_tiles::hand_to_packer;
using compute_tiles::pack_block;
using compute_tiles::use_pack;
using sfpu_rows::init_add;
using sfpu_rows::init_log;
using sfpu_rows::init_max;
using sfpu_rows::init_mul;
using sfpu_rows::init_recip;
using sfpu_rows::init_sub;

// One set of running tiles: m and l (a tile per tile row), O (dv_tiles per tile row). A kernel keeps
// two and writes each merge's result into the one it does not read.
struct Running {
    uint32_t max;
    uint32_t sum;
    uint32_t acc;
};

// Where a merge of one tile row writes m', l' and O': CB and pack index (from the CB's last push) of
// each; `push`: each is pushed once packed (a running set), else the caller pushes the pages.
struct Target {
    uint32_t max_cb, max_at;
    uint32_t sum_cb, sum_at;
    uint32_t acc_cb, acc_at;
    bool push;
};

template <class Config>
struct Merge {
    using S = typename Config::StatOps;
    using R = typename Config::RowOps;
    static constexpr uint32_t rows = Config::rows;
    static constexpr uint32_t dv_tiles = Config::dv_tiles;
    static constexpr uint32_t dst_tiles = Config::dst_tiles;
    static constexpr uint32_t cb_alpha = Config::cb_alpha;
    static_assert(dst_tiles >= 4, "a merge holds four DST tiles (l, e, l_o, e_o)");

    static void reserve_running(const Running& set) {
        cb_reserve_back(set.max, rows);
        cb_reserve_back(set.sum, rows);
        cb_reserve_back(set.acc, rows * dv_tiles);
    }
    static void wait_running(const Running& set) {
        cb_wait_front(set.max, rows);
        cb_wait_front(set.sum, rows);
        cb_wait_front(set.acc, rows * dv_tiles);
    }
    static void pop_running(const Running& set) {
        cb_pop_front(set.max, rows);
        cb_pop_front(set.sum, rows);
        cb_pop_front(set.acc, rows * dv_tiles);
    }
    // A running set written tile row by tile row (each row's tiles pushed as they are made).
    static constexpr Target to_running(const Running& set) { return {set.max, 0, set.sum, 0, set.acc, 0, true}; }

    // The factors of a merge of tile row `row`, in one DST pass: m' = max(m, m_o) into out's m, and
    // cb_alpha = [e, e_o], on the statistics' lanes. m is tile own_tile of own_cb (copied into DST 0);
    // load_other(1) puts m_o into DST 1.
    template <class LoadOther>
    static void factors(uint32_t own_cb, uint32_t own_tile, LoadOther load_other, const Target& out, uint32_t row) {
        cb_reserve_back(cb_alpha, 2);
        tile_regs_acquire();
        copy_to_dst(own_cb, own_tile, 0);
        load_other(1);
        init_max();
        S::max(0, 1, 2);
        init_sub();
        S::sub(0, 2, 0);
        S::sub(1, 2, 1);
        exp_block<Config::exp_approx, S::iterations>(2, 0, S::vector_mode);
        hand_to_packer();
        use_pack(out.max_cb);  // the running max, the partials and cb_alpha share one format
        pack_tile<true>(2, out.max_cb, out.max_at);
        pack_tile<true>(0, cb_alpha, 0);
        pack_tile<true>(1, cb_alpha, 1);
        tile_regs_release();
        if (out.push) {
            cb_push_back(out.max_cb, 1);
            cb_wait_front(out.max_cb, row + 1);
        }
        cb_push_back(cb_alpha, 2);
        cb_wait_front(cb_alpha, 2);
    }

    // l' = l * e + l_o * e_o (l: tile own_tile of own_cb, l_o: tile other_tile of other_cb). The sums
    // live on the lanes of the factors, which are read as they lie in cb_alpha.
    static void sum_with(uint32_t own_cb, uint32_t own_tile, uint32_t other_cb, uint32_t other_tile,
                         const Target& out) {
        tile_regs_acquire();
        copy_to_dst(own_cb, own_tile, 0);
        copy_to_dst(cb_alpha, 0, 1);
        copy_to_dst(other_cb, other_tile, 2);
        copy_to_dst(cb_alpha, 1, 3);
        init_mul();  // serves the addcmul too (one LLK init)
        S::mul(0, 1, 0);
        S::addcmul(0, 2, 3, 0);
        finish_sum(out);
    }
    // l' = l * e + e_o: the other state's own sum is 1 (a normalized partial, the attention sink).
    static void sum_with_unit(uint32_t own_cb, uint32_t own_tile, const Target& out) {
        tile_regs_acquire();
        copy_to_dst(own_cb, own_tile, 0);
        copy_to_dst(cb_alpha, 0, 1);
        copy_to_dst(cb_alpha, 1, 2);
        init_mul();
        S::mul(0, 1, 0);
        init_add();
        S::add(0, 2, 0);
        finish_sum(out);
    }
    // l' = e_o: no state of its own yet, the other's sum 1.
    static void sum_of_unit(const Target& out) {
        tile_regs_acquire();
        copy_to_dst(cb_alpha, 1, 0);
        finish_sum(out);
    }

    // O' = O * e + O_o * e_o (O: tiles own_first.. of own_cb, O_o: tiles other_first.. of other_cb),
    // dst_tiles - 2 tiles per DST acquire.
    static void output_with(uint32_t own_cb, uint32_t own_first, uint32_t other_cb, uint32_t other_first,
                            const Target& out) {
        constexpr uint32_t block = dst_tiles - 2;
        for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
            const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
            rescaled_sum(own_cb, own_first + v0, other_cb, other_first + v0, n, out.acc_cb, out.acc_at + v0);
        }
        if (out.push) {
            cb_push_back(out.acc_cb, dv_tiles);
        }
    }
    // O' = O_src x factor `factor` of cb_alpha (0: e, 1: e_o): the merge of a state with a side that
    // holds no output (the sink; no state of its own yet).
    static void output_scaled(uint32_t src_cb, uint32_t src_first, uint32_t factor, const Target& out) {
        scaled(src_cb, src_first, factor, out.acc_cb, out.acc_at);
        if (out.push) {
            cb_push_back(out.acc_cb, dv_tiles);
        }
    }

    // Tiles [out_first, out_first + dv_tiles) of out_cb = the tiles from src_first of src_cb times factor
    // `factor` of cb_alpha along each row: blocks of dst_tiles - 1 tiles share DST with the factor.
    static void scaled(uint32_t src_cb, uint32_t src_first, uint32_t factor, uint32_t out_cb, uint32_t out_first) {
        constexpr uint32_t block = dst_tiles - 1;
        for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
            const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
            tile_regs_acquire();
            factor_to_dst(factor, n);
            copy_to_dst(src_cb, src_first + v0, 0);
            for (uint32_t v = 1; v < n; ++v) {
                copy_tile(src_cb, src_first + v0 + v, v);  // same CB: one copy init
            }
            init_mul();
            for (uint32_t v = 0; v < n; ++v) {
                R::mul(v, n, v);
            }
            pack_block(out_cb, out_first + v0, n);
        }
    }

    // 1/l into page 0 of cb_alpha (pushed as two pages): l is tile sum_tile of sum_cb, copied into DST 0,
    // where floor(0, 1) bounds it from below first (DST 1 free for scratch).
    template <class Floor>
    static void inverse_sum(uint32_t sum_cb, uint32_t sum_tile, Floor floor) {
        cb_reserve_back(cb_alpha, 2);
        tile_regs_acquire();
        copy_to_dst(sum_cb, sum_tile, 0);
        floor(0, 1);
        init_recip();
        S::recip(0);
        pack_block(cb_alpha, 0, 1);
        cb_push_back(cb_alpha, 2);
        cb_wait_front(cb_alpha, 2);
    }

    // LSE = m + log(l) into tile out_at of out_cb (reserved by the caller), on the statistics' lanes.
    static void lse(uint32_t sum_cb, uint32_t sum_tile, uint32_t max_cb, uint32_t max_tile, uint32_t out_cb,
                    uint32_t out_at) {
        tile_regs_acquire();
        copy_to_dst(sum_cb, sum_tile, 0);
        init_log();
        S::log(0);
        copy_to_dst(max_cb, max_tile, 1);
        init_add();
        S::add(0, 1, 0);
        pack_block(out_cb, out_at, 1);
    }

private:
    static void finish_sum(const Target& out) {
        pack_block(out.sum_cb, out.sum_at, 1);
        if (out.push) {
            cb_push_back(out.sum_cb, 1);
        }
    }

    static void factor_to_dst(uint32_t factor, uint32_t dst) {
        if constexpr (Config::factors_in_column0) {
            broadcast_column(cb_alpha, factor, dst);
        } else {
            copy_to_dst(cb_alpha, factor, dst);
        }
    }

    // n <= dst_tiles - 2 tiles of O' = a * e + c * e_o: the a tiles go to DST 0..n-1 and e to DST n,
    // which every a is multiplied by; then e_o replaces e and each c, in turn in DST n + 1, is added as
    // c * e_o by one addcmul (one rounding). Every step is row by row, so rows the other state does not
    // hold never reach the rows written out.
    static void rescaled_sum(uint32_t a_cb, uint32_t ia, uint32_t c_cb, uint32_t ic, uint32_t n, uint32_t out_cb,
                             uint32_t out_first) {
        const uint32_t factor = n;
        const uint32_t other = n + 1;
        tile_regs_acquire();
        for (uint32_t i = 0; i < n; ++i) {
            copy_to_dst(a_cb, ia + i, i);
        }
        factor_to_dst(0, factor);
        init_mul();  // serves the addcmul too
        for (uint32_t i = 0; i < n; ++i) {
            R::mul(i, factor, i);
        }
        factor_to_dst(1, factor);
        for (uint32_t i = 0; i < n; ++i) {
            copy_to_dst(c_cb, ic + i, other);
            R::addcmul(i, other, factor, i);
        }
        pack_block(out_cb, out_first, n);
    }
};

}  // namespace lse_merge
