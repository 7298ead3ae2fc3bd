// SPDX-License-Identifier: Apache-2.0
//
// Combine compute (TRISC0-2): the exact merge of n partial attention results by their LSE, one tile
// row (32 rows) at a time, with the online-softmax merge of the FlashDecode tree (kernels/flash_decode/compute.cpp
// merge_child) applied to normalized partials: partial i is a state with running max m_i = LSE_i,
// sum l_i = 1 and output O_i. Folding the partials in order into (m, l, O):
//   m' = max(m, m_i); e = exp(m - m'), e_i = exp(m_i - m'); l' = l * e + e_i; O' = O * e + O_i * e_i
// then out = O / l and LSE = m + log(l) — exp(LSE_i - LSE) weights, max-subtracted at every step.
//
// Contract: per tile row the reader pushes each partial's LSE tile then its dv_tiles O tiles, in partial
// order, a partial with no key (LSE -inf) having its O rows zeroed; the writer pushes the constant tiles
// (ones, -BIG) first. CBs: cbs.hpp, in the modes of ttdecode/ops/combine/program_factory.py. A row with no live
// partial gives zeros and LSE -inf; rows never mix. Numerics (fp32 on the SFPU, the -inf handling):
// tech_report/flashdecode.md, section 9.2 "The combine compute kernel".

#include <stdint.h>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/cb_api.h"
#include "api/compute/binary_max_min.h"
#include "api/compute/eltwise_binary_sfpu.h"
#include "api/compute/eltwise_unary/recip.h"
#include "api/compute/eltwise_unary/addcmul.h"
#include "../shared/compute_tiles.hpp"
#include "cbs.hpp"

using namespace compute_tiles;
using namespace lse_combine;

namespace {

constexpr uint32_t num_partials = get_named_compile_time_arg_val("num_partials");
constexpr uint32_t dv_tiles = get_named_compile_time_arg_val("dv_tiles");
constexpr uint32_t dst_tiles = get_named_compile_time_arg_val("dst_tiles");  // usable DST tiles (4: fp32, half-sync)
constexpr bool accurate_exp = false;  // exp_tile<approx = false>: the fp32 algorithm

static_assert(num_partials >= 1, "the combine merges at least one partial");
static_assert(dst_tiles >= 4, "a merge step holds four DST tiles (m, m_i twice; two O tiles, e, O_i)");

struct Running {
    uint32_t max;
    uint32_t sum;
    uint32_t acc;
};
constexpr Running running_sets[2] = {{cb_max_a, cb_sum_a, cb_acc_a}, {cb_max_b, cb_sum_b, cb_acc_b}};

// DST tile dst = the running max of `own`, or the floor -BIG before the first partial.
inline void own_max_to_dst(const Running* own, uint32_t dst) {
    if (own != nullptr) {
        copy_to_dst(own->max, 0, dst);
    } else {
        copy_to_dst(cb_consts, const_neg_big, dst);
    }
}

// m' = max(m, m_i) into next.max, and cb_alpha = [exp(m - m'), exp(m_i - m')], every column holding
// the row's value. m_i is column 0 of the partial's LSE tile broadcast along its row; m' is made
// in DST 2 from second copies so that DST 0 and 1 can take the differences in place.
void merge_factors(const Running* own, const Running& next) {
    cb_reserve_back(cb_alpha, 2);
    cb_reserve_back(next.max, 1);
    tile_regs_acquire();
    own_max_to_dst(own, 0);
    broadcast_column(cb_lse_in, 0, 1);
    own_max_to_dst(own, 2);
    broadcast_column(cb_lse_in, 0, 3);
    binary_max_tile_init();
    binary_max_tile(2, 3, 2);
    sub_binary_tile_init();
    sub_binary_tile(0, 2, 0);
    sub_binary_tile(1, 2, 1);
    sfpu_forget();  // this kernel's SFPU inits are its own (untracked): exp_block makes its init
    exp_block<accurate_exp>(2);
    hand_to_packer();
    pack_tiles_to(cb_alpha, 0, 2);
    pack_tiles_to(next.max, 0, 1, 2);
    tile_regs_release();
    cb_push_back(cb_alpha, 2);
    cb_push_back(next.max, 1);
    cb_wait_front(cb_alpha, 2);
}

// l' = l * e + e_i (the partial's own sum is 1); before the first partial l' = e_i.
void merge_sum(const Running* own, const Running& next) {
    cb_reserve_back(next.sum, 1);
    tile_regs_acquire();
    if (own != nullptr) {
        rescaled_plus_factor(own->sum, 0, cb_alpha);
    } else {
        copy_to_dst(cb_alpha, 1, 0);
    }
    pack_block(next.sum, 0, 1);
    cb_push_back(next.sum, 1);
}

// O' = O * e + O_i * e_i, dst_tiles - 2 output tiles per DST acquire: the O tiles (DST 0..n-1) times e
// (DST n, copied once), then e_i replaces e and each O_i, in turn in DST n + 1, is added as O_i * e_i by
// one addcmul (one rounding); the multiply's init serves the addcmul (the same LLK init on Wormhole).
// Before the first partial O' = O_i * e_i, a block of dst_tiles - 1 tiles per acquire beside e_i.
void merge_output(const Running* own, const Running& next) {
    cb_reserve_back(next.acc, dv_tiles);
    if (own != nullptr) {
        constexpr uint32_t block = dst_tiles - 2;
        for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
            const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
            tile_regs_acquire();
            for (uint32_t v = 0; v < n; ++v) {
                copy_to_dst(own->acc, v0 + v, v);
            }
            copy_to_dst(cb_alpha, 0, n);
            mul_binary_tile_init();
            for (uint32_t v = 0; v < n; ++v) {
                mul_binary_tile(v, n, v);
            }
            copy_to_dst(cb_alpha, 1, n);
            for (uint32_t v = 0; v < n; ++v) {
                copy_to_dst(cb_o_in, v0 + v, n + 1);
                addcmul_tile<DataFormat::Float32>(v, n + 1, n, v, one_bits);  // O * e + O_i * e_i
            }
            pack_block(next.acc, v0, n);
        }
    } else {
        constexpr uint32_t block = dst_tiles - 1;
        for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
            const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
            tile_regs_acquire();
            copy_to_dst(cb_alpha, 1, n);
            for (uint32_t v = 0; v < n; ++v) {
                copy_to_dst(cb_o_in, v0 + v, v);
            }
            mul_binary_tile_init();
            for (uint32_t v = 0; v < n; ++v) {
                mul_binary_tile(v, n, v);
            }
            pack_block(next.acc, v0, n);
        }
    }
    cb_push_back(next.acc, dv_tiles);
}

inline void wait_running(const Running& set) {
    cb_wait_front(set.max, 1);
    cb_wait_front(set.sum, 1);
    cb_wait_front(set.acc, dv_tiles);
}

inline void pop_running(const Running& set) {
    cb_pop_front(set.max, 1);
    cb_pop_front(set.sum, 1);
    cb_pop_front(set.acc, dv_tiles);
}

// Fold the partial waiting in cb_lse_in / cb_o_in into `own` (none before the first), writing `next`.
void merge_partial(const Running* own, const Running& next) {
    cb_wait_front(cb_lse_in, 1);
    cb_wait_front(cb_o_in, dv_tiles);
    merge_factors(own, next);
    merge_sum(own, next);
    merge_output(own, next);
    cb_pop_front(cb_alpha, 2);
    cb_pop_front(cb_lse_in, 1);
    cb_pop_front(cb_o_in, dv_tiles);
    if (own != nullptr) {
        pop_running(*own);
    }
    wait_running(next);
}

// out = O x 1 / max(l, 1), rounded once by the packer to cb_out's format; LSE = m + log(l).
void finish(const Running& set) {
    cb_reserve_back(cb_alpha, 2);
    tile_regs_acquire();
    copy_to_dst(set.sum, 0, 0);
    copy_to_dst(cb_consts, const_ones, 1);
    binary_max_tile_init();
    binary_max_tile(0, 1, 0);
    recip_tile_init();
    recip_tile(0);
    pack_block(cb_alpha, 0, 1);
    cb_push_back(cb_alpha, 2);
    cb_wait_front(cb_alpha, 2);

    cb_reserve_back(cb_out, dv_tiles);
    constexpr uint32_t block = dst_tiles - 1;
    for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
        const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
        tile_regs_acquire();
        copy_to_dst(cb_alpha, 0, n);
        for (uint32_t v = 0; v < n; ++v) {
            copy_to_dst(set.acc, v0 + v, v);
        }
        mul_binary_tile_init();
        for (uint32_t v = 0; v < n; ++v) {
            mul_binary_tile(v, n, v);
        }
        pack_block(cb_out, v0, n);
    }
    cb_push_back(cb_out, dv_tiles);
    cb_pop_front(cb_alpha, 2);

    cb_reserve_back(cb_lse_out, 1);
    tile_regs_acquire();
    copy_to_dst(set.sum, 0, 0);
    log_tile_init();
    log_tile(0);
    copy_to_dst(set.max, 0, 1);
    add_binary_tile_init();
    add_binary_tile(0, 1, 0);
    pack_block(cb_lse_out, 0, 1);
    cb_push_back(cb_lse_out, 1);
    pop_running(set);
}

}  // namespace

void kernel_main() {
    const uint32_t num_rows = get_arg_val<uint32_t>(0);  // tile rows of this core

    start_engine(cb_consts, cb_consts, cb_alpha);
    cb_wait_front(cb_consts, 2);

    for (uint32_t t = 0; t < num_rows; ++t) {
        merge_partial(nullptr, running_sets[0]);
        uint32_t cur = 0;
        for (uint32_t i = 1; i < num_partials; ++i) {
            merge_partial(&running_sets[cur], running_sets[cur ^ 1]);
            cur ^= 1;
        }
        finish(running_sets[cur]);
    }
}
