// Test kernel for 16x32 tiles (two faces, rows 0-15) and 8x32 tiles (two faces of 8 rows): one output
// tile of CB 16 per step, by a define:
//   OP_MATMUL     out = sum_k in0[k] x in1[k]^T       (in0: 16x32 tiles, in1: 32x32, transposed)
//   OP_COPY       out = copy_tile(in0)                 (DST faces 0-1)
//   OP_BCAST_COL  out = unary_bcast<COL>(in0)          (column 0 of rows 0-15 in every column)
//   OP_EXP_ROWS   out = exp(copy_tile(in0)) on faces 0-1 (VectorMode::R)
//   OP_MM_COPY    out = copy(in2) after in0 x in1^T    (the copy after the matmul re-programs srcA
//                                                       for 16x32 tiles with copy_init)
// Deliberately wrong variants:
//   WRONG_SHAPE_COPY   (OP_MM_COPY) srcA's format reconfigured for in2 but no copy_init: the copy runs
//                      under copy_init(in3), a 32x32 CB of in2's format (tt-metal #49266's hazard)
//   EXP_ALL_FACES      (OP_EXP_ROWS) exp on VectorMode::RC: faces 2-3 of the DST tile hold nothing
//   PLAIN_RECONFIG     (OP_MM_COPY) srcA reconfigured for in2 by the plain reconfig_data_format_srca(in2),
//                      which keeps the face stride of in1's tiles (an 8x32 in2 needs the (old, new) form)
// EXP_ITERATIONS=n: (OP_EXP_ROWS) the exp's vector steps per face (8 = rows 0-15, 4 = rows 0-7)
// COPY_INIT_ONCE: (OP_COPY) copy_init before the first tile only (later copies run under the X-end the
//                 previous unpack to DST left)
//   FULL_PACKER        the packer's tile shape comes from compute_kernel_hw_startup with CB 17 (32x32),
//                      then only pack_reconfig_data_format(17 -> 16)
// and a right one: FULL_PACKER_TILE_RECONFIG, the same with pack_reconfig_data_format<true> (tile shape too)
// CBs: in0 = 0, in1 = 1, in2 = 2 (16x32, float32), in3 = 3 (32x32, float32), out = 16 (16x32),
// full_out = 17 (32x32). Compile-time args: output tiles, kt.
#include <cstdint>

#include "api/compute/bcast.h"
#include "api/compute/compute_kernel_api.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/matmul.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"

constexpr uint32_t in0 = 0, in1 = 1, in2 = 2, in3 = 3, out = 16, full_out = 17;

void kernel_main() {
    constexpr uint32_t n = get_compile_time_arg_val(0);
    constexpr uint32_t kt = get_compile_time_arg_val(1);
#if defined(OP_MATMUL) || defined(OP_MM_COPY)
    constexpr uint32_t srca = in1;  // matmul unpacks in1 to srcA, in0 to srcB
#else
    constexpr uint32_t srca = in0;
#endif
#if defined(FULL_PACKER)
    compute_kernel_hw_startup(srca, in0, full_out);
    pack_reconfig_data_format(full_out, out);
#elif defined(FULL_PACKER_TILE_RECONFIG)
    compute_kernel_hw_startup(srca, in0, full_out);
    pack_reconfig_data_format<true>(full_out, out);  // the LLK then runs llk_pack_init(out): its tile shape
#else
    compute_kernel_hw_startup(srca, in0, out);
#endif
    for (uint32_t i = 0; i < n; ++i) {
        tile_regs_acquire();
#if defined(OP_MATMUL) || defined(OP_MM_COPY)
        cb_wait_front(in0, kt);
        cb_wait_front(in1, kt);
        reconfig_data_format(in1, in0);
        matmul_init(in0, in1, 1);
        for (uint32_t k = 0; k < kt; ++k) matmul_tiles(in0, in1, k, k, 0);
#if defined(OP_MM_COPY)
        cb_wait_front(in2, 1);
#ifdef WRONG_SHAPE_COPY
        cb_wait_front(in3, 1);
        reconfig_data_format_srca(in3);
        copy_init(in3);
        reconfig_data_format_srca(in2);
#elif defined(PLAIN_RECONFIG)
        reconfig_data_format_srca(in2);
        copy_init(in2);
#else
        reconfig_data_format_srca(in1, in2);
        copy_init(in2);
#endif
        copy_tile(in2, 0, 1);
#endif
#elif defined(OP_COPY) || defined(OP_EXP_ROWS)
        cb_wait_front(in0, 1);
        reconfig_data_format_srca(in0);
#ifdef COPY_INIT_ONCE
        if (i == 0) copy_init(in0);
#else
        copy_init(in0);
#endif
        copy_tile(in0, 0, 0);
#if defined(OP_EXP_ROWS)
        exp_tile_init();
#ifdef EXP_ALL_FACES
        exp_tile(0, VectorMode::RC);
#elif defined(EXP_ITERATIONS)
        exp_tile<false, false, InputClamping::ClampToNegative, EXP_ITERATIONS>(0, VectorMode::R);
#else
        exp_tile(0, VectorMode::R);
#endif
#endif
#elif defined(OP_BCAST_COL)
        cb_wait_front(in0, 1);
        reconfig_data_format(in0, in0);
        unary_bcast_init<BroadcastType::COL>(in0);
        unary_bcast<BroadcastType::COL>(in0, 0, 0);
#endif
        tile_regs_commit();
        tile_regs_wait();
        cb_reserve_back(out, 1);
#if defined(OP_MM_COPY)
        pack_tile(1, out);
#else
        pack_tile(0, out);
#endif
        cb_push_back(out, 1);
        tile_regs_release();
#if defined(OP_MATMUL) || defined(OP_MM_COPY)
        cb_pop_front(in0, kt);
        cb_pop_front(in1, kt);
#if defined(OP_MM_COPY)
        cb_pop_front(in2, 1);
#ifdef WRONG_SHAPE_COPY
        cb_pop_front(in3, 1);
#endif
#endif
#else
        cb_pop_front(in0, 1);
#endif
    }
}
