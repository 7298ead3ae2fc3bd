// SPDX-License-Identifier: Apache-2.0
//
// The circular buffers of the combine program (indices of ttdecode/combine.py COMBINE_CBS), shared
// by its reader, compute and writer kernels. A tile row is 32 (group, head) rows of the partials.

#pragma once

#include <stdint.h>

namespace lse_combine {

constexpr uint32_t cb_lse_in = 0;   // fp32: one partial's LSE tile of the tile row (column 0 holds the value)
constexpr uint32_t cb_o_in = 1;     // one partial's O tiles of the tile row (bf16 or fp32), double-buffered
constexpr uint32_t cb_consts = 2;   // bf16: tile 0 all ones, tile 1 all -BIG (made by the writer, never popped)
// The running (m, l, O) live in two CB sets used in turn, as in the FlashDecode compute kernel.
constexpr uint32_t cb_max_a = 3;    // fp32 running max m (every column holds the row's value)
constexpr uint32_t cb_max_b = 4;
constexpr uint32_t cb_sum_a = 5;    // fp32 running sum l of the partials' weights
constexpr uint32_t cb_sum_b = 6;
constexpr uint32_t cb_acc_a = 7;    // fp32 running weighted sum O, dv_tiles tiles
constexpr uint32_t cb_acc_b = 8;
constexpr uint32_t cb_alpha = 9;    // fp32 factors (e_own, e_partial), then 1 / max(l, 1)
constexpr uint32_t cb_out = 10;     // the merged O tiles of the tile row (bf16 or fp32)
constexpr uint32_t cb_lse_out = 11; // fp32 merged LSE tile of the tile row (every column holds the value)

constexpr uint32_t const_ones = 0;     // page of cb_consts
constexpr uint32_t const_neg_big = 1;  // page of cb_consts: -BIG, the finite floor of the running max

constexpr uint32_t FP32_NEG_INF = 0xFF800000u;
constexpr uint16_t BF16_ONE = 0x3F80;
constexpr uint16_t BF16_NEG_BIG = 0xFF7F;  // the most negative finite bf16, -3.39e38

}  // namespace lse_combine
