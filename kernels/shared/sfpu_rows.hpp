// SPDX-License-Identifier: Apache-2.0
//
// SFPU arithmetic on DST tiles restricted to the rows (or columns) that hold data: the LLK functions that
// sub_binary_tile, add_binary_tile, mul_binary_tile, binary_max_tile, addcmul_tile, log_tile, recip_tile and
// mul_unary_tile run, called through the LLK's SFPU call macros on the faces of a VectorMode with a number
// of vector steps per face (those *_tile calls fix VectorMode::RC and 8 steps; Rows<RC, 8> runs what they
// run). A step covers four rows of a face, even or odd columns. Each op needs the init of its *_tile
// call: the tracked init_* below (compute_tiles.hpp sfpu_init).

#pragma once

#include <stdint.h>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/binary_max_min.h"
#include "api/compute/eltwise_binary_sfpu.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/eltwise_unary/recip.h"
#include "api/compute/eltwise_unary/binop_with_scalar.h"
#include "api/compute/eltwise_unary/addcmul.h"
#include "compute_tiles.hpp"

namespace sfpu_rows {

// The SFPU inits, tracked: each runs only when the last one does not leave the state it needs.
using compute_tiles::SfpuInit;
inline void init_scale() { compute_tiles::sfpu_init(SfpuInit::scalar, [] { binop_with_scalar_tile_init(); }); }
inline void init_add() { compute_tiles::sfpu_init(SfpuInit::add, [] { add_binary_tile_init(); }); }
inline void init_sub() { compute_tiles::sfpu_init(SfpuInit::sub, [] { sub_binary_tile_init(); }); }
inline void init_mul() { compute_tiles::sfpu_init(SfpuInit::mul, [] { mul_binary_tile_init(); }); }
inline void init_max() { compute_tiles::sfpu_init(SfpuInit::max, [] { binary_max_tile_init(); }); }
// recip and log program constants of their own: made each time.
inline void init_recip() { compute_tiles::sfpu_init(SfpuInit::other, [] { recip_tile_init(); }); }
inline void init_log() { compute_tiles::sfpu_init(SfpuInit::other, [] { log_tile_init(); }); }

// The ops on the faces `mode` covers (RC all four, R faces 0-1 = rows 0-15, C faces 0 and 2 = columns
// 0-15, None face 0), `steps` vector steps per face (8: whole faces).
template <VectorMode mode, int steps>
struct Rows {
    static_assert(steps >= 1 && steps <= 8, "1 to 8 vector steps per face");
    static constexpr VectorMode vector_mode = mode;
    static constexpr int iterations = steps;

    // With a 16-bit DST the difference is rounded to nearest even before the store (the SFPSTORE alone
    // truncates); an fp32 DST stores it exactly (the rounding mode applies to 16 bits only).
    KERNEL_OUTLINE static void sub(uint32_t a, uint32_t b, uint32_t out) {
        MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary,
                               (APPROX, ckernel::BinaryOp::SUB, steps, DST_ACCUM_MODE,
                                ckernel::DstRoundingMode::NearestEven),
                               a, b, out, mode)));
    }
    KERNEL_OUTLINE static void add(uint32_t a, uint32_t b, uint32_t out) {
        MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary,
                               (APPROX, ckernel::BinaryOp::ADD, steps, DST_ACCUM_MODE), a, b, out, mode)));
    }
    KERNEL_OUTLINE static void mul(uint32_t a, uint32_t b, uint32_t out) {
        MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary_mul,
                               (APPROX, ckernel::BinaryOp::MUL, steps, DST_ACCUM_MODE), a, b, out, mode)));
    }
    KERNEL_OUTLINE static void max(uint32_t a, uint32_t b, uint32_t out) {
        MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_binary_max_min, (true, steps), a, b, out,
                               mode)));
    }
    // out = a + (value * b) * c (addcmul_tile's LLK function: one SFPMUL, one SFPMAD, fp32; with a 16-bit
    // DST rounded to bf16 before the store); value 1.0 unless given (float32 bits).
    KERNEL_OUTLINE static void addcmul(uint32_t a, uint32_t b, uint32_t c, uint32_t out,
                        uint32_t value_bits = compute_tiles::one_bits) {
        MATH((SFPU_TERNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_addcmul,
                                (APPROX, DST_ACCUM_MODE, DataFormat::Float32, steps), a, b, c, out, mode,
                                value_bits)));
    }
    KERNEL_OUTLINE static void log(uint32_t idst) {
        MATH((SFPU_UNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_log,
                              (APPROX, false, false, DST_ACCUM_MODE, steps), idst, mode, 0)));
    }
    // 1/x (recip_tile's LLK function, its init recip_tile_init).
    KERNEL_OUTLINE static void recip(uint32_t idst) {
        MATH((SFPU_UNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_reciprocal, (APPROX, DST_ACCUM_MODE, steps),
                              idst, mode)));
    }
    // x * the float32 with bits `bits`.
    KERNEL_OUTLINE static void scale(uint32_t idst, uint32_t bits) {
        MATH((SFPU_UNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_binop_with_scalar,
                              (APPROX, MUL_UNARY, steps, DST_ACCUM_MODE), idst, mode, bits)));
    }
    // DST tile `at` = max(DST tile `at`, floor), the floor made exactly in DST tile `scratch` as tile
    // `ones_tile` of ones_cb (all ones) times the float32 with bits floor_bits.
    KERNEL_OUTLINE static void floor(uint32_t at, uint32_t scratch, uint32_t ones_cb, uint32_t ones_tile, uint32_t floor_bits) {
        compute_tiles::copy_to_dst(ones_cb, ones_tile, scratch);
        init_scale();
        scale(scratch, floor_bits);
        init_max();
        max(at, scratch, at);
    }
};

}  // namespace sfpu_rows
