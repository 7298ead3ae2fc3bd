// SPDX-License-Identifier: Apache-2.0
//
// Combine compute (TRISC0-2): the exact merge of n partial attention results by their LSE, one tile
// row (32 rows) at a time, with the merge of the FlashDecode tree (kernels/shared/lse_merge.hpp)
// applied to normalized partials: partial i is a state with running max m_i = LSE_i, sum l_i = 1 and
// output O_i. Folding the partials in order into (m, l, O):
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
#include "../shared/compute_tiles.hpp"
#include "../shared/sfpu_rows.hpp"
#include "../shared/lse_merge.hpp"
#include "cbs.hpp"

using namespace compute_tiles;
using namespace lse_combine;
using lse_merge::Running;
using lse_merge::Target;

namespace {

constexpr uint32_t num_partials = get_named_compile_time_arg_val("num_partials");
static_assert(num_partials >= 1, "the combine merges at least one partial");

// The merge's constants (lse_merge.hpp): one tile row per running set; every statistic holds its row's
// value in every column (m_i is broadcast from column 0 of the LSE tile), so whole tiles, RC, 8 steps.
struct MergeConfig {
    static constexpr uint32_t rows = 1;
    static constexpr uint32_t dv_tiles = get_named_compile_time_arg_val("dv_tiles");
    static constexpr uint32_t dst_tiles = get_named_compile_time_arg_val("dst_tiles");  // 4: fp32, half-sync
    static constexpr uint32_t cb_alpha = lse_combine::cb_alpha;
    using StatOps = sfpu_rows::Rows<VectorMode::RC, 8>;
    using RowOps = StatOps;
    static constexpr bool exp_approx = false;  // the fp32 algorithm
    static constexpr bool factors_in_column0 = false;
};
using Merge = lse_merge::Merge<MergeConfig>;
constexpr uint32_t dv_tiles = MergeConfig::dv_tiles;

constexpr Running running_sets[2] = {{cb_max_a, cb_sum_a, cb_acc_a}, {cb_max_b, cb_sum_b, cb_acc_b}};

// Fold the partial waiting in cb_lse_in / cb_o_in into `own`, writing `next`. Before the first partial
// there is no state: its max is the floor -BIG (so m' stays finite), l' = e_i and O' = O_i * e_i.
void merge_partial(const Running* own, const Running& next) {
    cb_wait_front(cb_lse_in, 1);
    cb_wait_front(cb_o_in, dv_tiles);
    Merge::reserve_running(next);
    const Target out = Merge::to_running(next);
    const auto lse_in = [](uint32_t dst) { broadcast_column(cb_lse_in, 0, dst); };
    if (own != nullptr) {
        Merge::factors(own->max, 0, lse_in, out, 0);
        Merge::sum_with_unit(own->sum, 0, out);
        Merge::output_with(own->acc, 0, cb_o_in, 0, out);
    } else {
        Merge::factors(cb_consts, const_neg_big, lse_in, out, 0);
        Merge::sum_of_unit(out);
        Merge::output_scaled(cb_o_in, 0, 1, out);
    }
    cb_pop_front(cb_alpha, 2);
    cb_pop_front(cb_lse_in, 1);
    cb_pop_front(cb_o_in, dv_tiles);
    if (own != nullptr) {
        Merge::pop_running(*own);
    }
    Merge::wait_running(next);
}

// out = O x 1 / max(l, 1), rounded once by the packer to cb_out's format; LSE = m + log(l).
void finish(const Running& set) {
    Merge::inverse_sum(set.sum, 0, [](uint32_t at, uint32_t scratch) {
        copy_to_dst(cb_consts, const_ones, scratch);
        sfpu_rows::init_max();
        MergeConfig::StatOps::max(at, scratch, at);
    });
    cb_reserve_back(cb_out, dv_tiles);
    Merge::scaled(set.acc, 0, 0, cb_out, 0);
    cb_push_back(cb_out, dv_tiles);
    cb_pop_front(cb_alpha, 2);

    cb_reserve_back(cb_lse_out, 1);
    Merge::lse(set.sum, 0, set.max, 0, cb_lse_out, 0);
    cb_push_back(cb_lse_out, 1);
    Merge::pop_running(set);
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
