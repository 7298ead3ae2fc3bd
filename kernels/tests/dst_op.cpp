// Test kernel for the unpack-to-DST paths: one output tile per input tile (kt inputs reduced into one
// for OP_ROW_MAX), chosen by a define:
//   OP_COPY           out = copy_tile(in0)                    (exact only when in0 is UnpackToDestFp32)
//   OP_BCAST_COL      out = unary_bcast<COL>(in0)             (column 0 of in0 in every column)
//   OP_ROW_MAX        out col 0 = sfpu_reduce<MAX, ROW> over kt tiles of in0 copied into DST [0, kt)
// Deliberately wrong variants: WRONG_COPY_INIT (copy_init for in1, then copy_tile of in0),
// WRONG_REDUCE_FORMAT (sfpu_reduce with Float16_b on an fp32 DST).
// CBs: in0 = 0, in1 = 1, out = 16. Compile-time args: output tiles, kt, (unused), (unused).
#include <cstdint>

#include "api/compute/bcast.h"
#include "api/compute/compute_kernel_api.h"
#include "api/compute/binary_max_min.h"
#include "api/compute/tile_move_copy.h"

constexpr uint32_t in0 = 0, in1 = 1, out = 16;

void kernel_main() {
    constexpr uint32_t n = get_compile_time_arg_val(0);
    constexpr uint32_t kt = get_compile_time_arg_val(1);
    compute_kernel_hw_startup(in0, out);
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(in0, kt);
        tile_regs_acquire();
#if defined(OP_COPY)
#ifdef WRONG_COPY_INIT
        cb_wait_front(in1, 1);
        copy_init(in1);
#else
        copy_init(in0);
#endif
        copy_tile(in0, 0, 0);
#elif defined(OP_BCAST_COL)
        unary_bcast_init<BroadcastType::COL>(in0);
        unary_bcast<BroadcastType::COL>(in0, 0, 0);
#elif defined(OP_ROW_MAX)
        copy_init(in0);
        for (uint32_t j = 0; j < kt; ++j) {
            copy_tile(in0, j, j);
        }
#ifdef WRONG_REDUCE_FORMAT
        constexpr DataFormat format = DataFormat::Float16_b;
#else
        constexpr DataFormat format = DST_ACCUM_MODE ? DataFormat::Float32 : DataFormat::Float16_b;
#endif
        sfpu_reduce_init<PoolType::MAX, format>();
        sfpu_reduce<PoolType::MAX, format, ReduceDim::REDUCE_ROW>(0, kt, 1);
#endif
        tile_regs_commit();
        tile_regs_wait();
        cb_reserve_back(out, 1);
        pack_tile(0, out);
        cb_push_back(out, 1);
        tile_regs_release();
        cb_pop_front(in0, kt);
#ifdef WRONG_COPY_INIT
        cb_pop_front(in1, 1);
#endif
    }
}
