// Test kernel: one tile operation per output tile, chosen by a define:
//   OP_ADD, OP_SUB, OP_MUL                 out = in0 op in1
//   OP_MATMUL                              out = sum_k in0[k] x in1[k] (in1 tiles transposed if TRANSPOSE)
//   OP_SUB_BCAST_COLS, OP_MUL_BCAST_COLS   out = in0 op (column 0 of in1)
//   OP_REDUCE_MAX, OP_REDUCE_SUM           out col 0 = row max / row sum over kt tiles of in0, with the scaler in CB 2
//   OP_EXP, OP_RECIP, OP_LOG               out = f(in0)
//   OP_ADD_BINARY, OP_SUB_BINARY, OP_MUL_BINARY
//                                          out = in0 op in1 on the SFPU: in0 copied to DST d, in1 to
//                                          d + 1, result in d (NEAREST_EVEN: add/sub ask for
//                                          DstRoundingMode::NearestEven)
// CBs: in0 = 0, in1 = 1, scaler = 2, out = 16. Compile-time args: output tiles, kt (input tiles per
// output for matmul/reduce), transpose (matmul), DST index used.
// Fault defines: MISSING_INIT (binary op after reduce_init), SKIP_REGS_WAIT (pack without tile_regs_wait),
// READ_UNWAITED_TILE (unpacks a tile beyond the ones waited for).
// PACK_UNWRITTEN (packs DST index d + 1, never written), SKIP_HW_STARTUP (binary ops without
// compute_kernel_hw_startup: the unpacker formats are never configured).
// MUL_ONTO_COPY (with OP_MUL): copies in0 into the DST tile first, then mul_tiles into the same tile.
// SFPU binary faults: WRONG_SFPU_INIT (the op runs under the approximate exp's init, which also programs
// SFPLOADMACRO templates and the replay buffer; the accurate exp's would serve it), SKIP_SECOND_COPY (in1 never
// reaches DST d + 1, so the op reads a tile with no data).
#include <cstdint>

#include "api/compute/bcast.h"
#include "api/compute/compute_kernel_api.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/eltwise_binary_sfpu.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/eltwise_unary/recip.h"
#include "api/compute/matmul.h"
#include "api/compute/reduce.h"
#include "api/compute/tile_move_copy.h"

constexpr uint32_t in0 = 0, in1 = 1, scaler = 2, out = 16;

// Hands DST tile `d` to the packer and writes it to one page of the output CB.
static void emit(uint32_t d) {
    tile_regs_commit();
#ifndef SKIP_REGS_WAIT
    tile_regs_wait();
#endif
    cb_reserve_back(out, 1);
#ifdef PACK_UNWRITTEN
    pack_tile(d + 1, out);
#else
    pack_tile(d, out);
#endif
    cb_push_back(out, 1);
    tile_regs_release();
}

void kernel_main() {
    constexpr uint32_t n = get_compile_time_arg_val(0);
    constexpr uint32_t kt = get_compile_time_arg_val(1);
    constexpr uint32_t transpose = get_compile_time_arg_val(2);
    constexpr uint32_t d = get_compile_time_arg_val(3);
#if defined(OP_EXP) || defined(OP_RECIP) || defined(OP_LOG)
    compute_kernel_hw_startup(in0, out);
    copy_init(in0);
#if defined(OP_EXP)
    exp_tile_init();
#elif defined(OP_RECIP)
    recip_tile_init();
#else
    log_tile_init();
#endif
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(in0, 1);
        tile_regs_acquire();
        copy_tile(in0, 0, d);
#if defined(OP_EXP)
        exp_tile(d);
#elif defined(OP_RECIP)
        recip_tile(d);
#else
        log_tile(d);
#endif
        emit(d);
        cb_pop_front(in0, 1);
    }
#elif defined(OP_ADD_BINARY) || defined(OP_SUB_BINARY) || defined(OP_MUL_BINARY)
#ifdef NEAREST_EVEN
    constexpr DstRoundingMode rounding = DstRoundingMode::NearestEven;
#else
    constexpr DstRoundingMode rounding = DstRoundingMode::Default;
#endif
    compute_kernel_hw_startup(in0, in1, out);
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(in0, 1);
        cb_wait_front(in1, 1);
        tile_regs_acquire();
        reconfig_data_format_srca(in0);
        copy_init(in0);
        copy_tile(in0, 0, d);
#ifndef SKIP_SECOND_COPY
        reconfig_data_format_srca(in1);
        copy_init(in1);
        copy_tile(in1, 0, d + 1);
#endif
#if defined(WRONG_SFPU_INIT)
        exp_tile_init<true>();
#elif defined(OP_ADD_BINARY)
        add_binary_tile_init();
#elif defined(OP_SUB_BINARY)
        sub_binary_tile_init();
#else
        mul_binary_tile_init();
#endif
#if defined(OP_ADD_BINARY)
        add_binary_tile<rounding>(d, d + 1, d);
#elif defined(OP_SUB_BINARY)
        sub_binary_tile<rounding>(d, d + 1, d);
#else
        mul_binary_tile(d, d + 1, d);
#endif
        emit(d);
        cb_pop_front(in0, 1);
        cb_pop_front(in1, 1);
    }
#elif defined(OP_REDUCE_MAX) || defined(OP_REDUCE_SUM)
#if defined(OP_REDUCE_MAX)
    constexpr PoolType pool = PoolType::MAX;
    compute_kernel_hw_startup(in0, scaler, out);
#else
    constexpr PoolType pool = PoolType::SUM;
    compute_kernel_hw_startup(scaler, in0, out);  // row sum feeds the scaler to srcA
#endif
    cb_wait_front(scaler, 1);
    reduce_init<pool, ReduceDim::REDUCE_ROW>(in0, scaler, out);
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(in0, kt);
        tile_regs_acquire();
        for (uint32_t k = 0; k < kt; ++k) {
            reduce_tile<pool, ReduceDim::REDUCE_ROW>(in0, scaler, k, 0, d);
        }
        emit(d);
        cb_pop_front(in0, kt);
    }
    reduce_uninit();
#elif defined(OP_MATMUL)
    compute_kernel_hw_startup(in1, in0, out);  // matmul unpacks in1 to srcA, in0 to srcB
    matmul_init(in0, in1, transpose);
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(in0, kt);
        cb_wait_front(in1, kt);
        tile_regs_acquire();
        for (uint32_t k = 0; k < kt; ++k) {
            matmul_tiles(in0, in1, k, k, d);
        }
        emit(d);
        cb_pop_front(in0, kt);
        cb_pop_front(in1, kt);
    }
#else
#ifndef SKIP_HW_STARTUP
    compute_kernel_hw_startup(in0, in1, out);
#endif
#if defined(MISSING_INIT)
    reduce_init<PoolType::SUM, ReduceDim::REDUCE_ROW>(in0, in1, out);
#elif defined(OP_ADD)
    add_init(in0, in1);
#elif defined(OP_SUB)
    sub_init(in0, in1);
#elif defined(OP_MUL)
    mul_init(in0, in1);
#elif defined(OP_SUB_BCAST_COLS)
    sub_bcast_cols_init(in0, in1);
#elif defined(OP_MUL_BCAST_COLS)
    mul_bcast_cols_init(in0, in1);
#endif
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(in0, 1);
        cb_wait_front(in1, 1);
        tile_regs_acquire();
#ifdef READ_UNWAITED_TILE
        constexpr uint32_t t0 = 1;
#else
        constexpr uint32_t t0 = 0;
#endif
#if defined(OP_ADD)
        add_tiles(in0, in1, t0, 0, d);
#elif defined(OP_SUB)
        sub_tiles(in0, in1, t0, 0, d);
#elif defined(OP_MUL)
#ifdef MUL_ONTO_COPY
        copy_init(in0);
        copy_tile(in0, 0, d);
        mul_init(in0, in1);
#endif
        mul_tiles(in0, in1, t0, 0, d);
#elif defined(OP_SUB_BCAST_COLS)
        sub_tiles_bcast_cols(in0, in1, t0, 0, d);
#elif defined(OP_MUL_BCAST_COLS)
        mul_tiles_bcast_cols(in0, in1, t0, 0, d);
#endif
        emit(d);
        cb_pop_front(in0, 1);
        cb_pop_front(in1, 1);
    }
#endif
}
