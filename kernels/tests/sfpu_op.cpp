// Test kernel for the SFPU: per input tile, copy CB 0 (and CB 1 when TWO_INPUTS) into DST tiles d (and
// d + 1), run one SFPU op on DST tile d, pack it to CB 16. With OP_NONE nothing runs and the DST tiles
// are packed as they are (d, then d + 1): the values the SFPU op would have read.
// Ops (defines): OP_EXP (EXP_APPROX, EXP_SCALE=<bf16 bits> for scale_en, VECTOR_MODE=<R|C|None|RC>),
//   OP_RECIP (RECIP_APPROXIMATE / RECIP_PRECISE), OP_LOG, OP_ADD_S / OP_SUB_S / OP_MUL_S / OP_DIV_S /
//   OP_RSUB_S (scalar bits SCALAR_BITS), OP_MAX / OP_ADD_B / OP_SUB_B / OP_MUL_B (TWO_INPUTS; NEAREST_EVEN),
//   OP_ADDCMUL (THREE_INPUTS: CB 2 into DST d + 2; d = d + SCALAR_BITS * (d + 1) * (d + 2)).
//   PRE_EXP_APPROX: exp_tile<true> on tile d before the op (its results, denormals included, feed it).
//   LLK_CALL (OP_MUL_S, OP_ADD_B, OP_SUB_B, OP_MUL_B): the op's LLK function through the LLK's
//   SFPU_UNARY_CALL / SFPU_BINARY_CALL macro on the faces of VECTOR_MODE, instead of the *_tile call.
//   SFPU_ITERATIONS=<1..8> (default 8): the vector steps per face of OP_EXP, OP_MAX (LLK_CALL) and the
//   LLK_CALL ops.
//   OTHER_INIT=<init call> (OP_EXP, OP_MAX, OP_ADDCMUL, OP_ADD_B, OP_SUB_B, OP_MUL_B): run the op after this SFPU
//   init instead of its own (which inits serve which ops); PRE_INIT=<init call> (OP_EXP): an init made before it.
// Compile-time args: tiles, DST index d.
#include <cstdint>

#include "api/compute/binary_max_min.h"
#include "api/compute/cb_api.h"
#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/eltwise_binary_sfpu.h"
#include "api/compute/eltwise_unary/addcmul.h"
#include "api/compute/eltwise_unary/binop_with_scalar.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/eltwise_unary/recip.h"
#include "api/compute/pack.h"
#include "api/compute/reg_api.h"
#include "api/compute/tile_move_copy.h"

constexpr uint32_t in0 = 0, in1 = 1, in2 = 2, out = 16;

#if defined(TWO_INPUTS) || defined(THREE_INPUTS)
constexpr bool two = true;
#else
constexpr bool two = false;
#endif
#ifdef THREE_INPUTS
constexpr bool three = true;
#else
constexpr bool three = false;
#endif
#ifdef EXP_APPROX
constexpr bool exp_approx = true;
#else
constexpr bool exp_approx = false;
#endif
#ifndef VECTOR_MODE
#define VECTOR_MODE RC
#endif
#ifndef SFPU_ITERATIONS
#define SFPU_ITERATIONS 8
#endif

#ifdef OTHER_INIT
#define OP_INIT(own) OTHER_INIT
#else
#define OP_INIT(own) own()
#endif

static void emit(uint32_t d) {
    cb_reserve_back(out, 1);
    pack_tile(d, out);
    cb_push_back(out, 1);
}

static void copy_in(uint32_t cb, uint32_t d) {
    reconfig_data_format_srca(cb);
    copy_init(cb);
    copy_tile(cb, 0, d);
}

void kernel_main() {
    constexpr uint32_t n = get_compile_time_arg_val(0);
    constexpr uint32_t d = get_compile_time_arg_val(1);
    compute_kernel_hw_startup(in0, out);
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(in0, 1);
        if (two) cb_wait_front(in1, 1);
        if (three) cb_wait_front(in2, 1);
        tile_regs_acquire();
        copy_in(in0, d);
        if (two) copy_in(in1, d + 1);
        if (three) copy_in(in2, d + 2);
#ifdef PRE_EXP_APPROX
        exp_tile_init<true>();
        exp_tile<true>(d);
#endif
#if defined(OP_EXP)
#ifdef PRE_INIT
        PRE_INIT;
#endif
        OP_INIT(exp_tile_init<exp_approx>);
#ifdef EXP_SCALE
        exp_tile<exp_approx, true>(d, VectorMode::VECTOR_MODE, EXP_SCALE);
#else
        exp_tile<exp_approx, false, InputClamping::ClampToNegative, SFPU_ITERATIONS>(d, VectorMode::VECTOR_MODE);
#endif
#elif defined(OP_RECIP)
#if defined(RECIP_APPROXIMATE)
        constexpr ReciprocalApproxMode mode = ReciprocalApproxMode::Approximate;
#elif defined(RECIP_PRECISE)
        constexpr ReciprocalApproxMode mode = ReciprocalApproxMode::Precise;
#else
        constexpr ReciprocalApproxMode mode = ReciprocalApproxMode::Default;
#endif
        constexpr ReciprocalDestAcc acc = DST_ACCUM_MODE ? ReciprocalDestAcc::FP32 : ReciprocalDestAcc::BF16;
        recip_tile_init<acc, mode>();
        recip_tile<acc, mode>(d);
#elif defined(OP_LOG)
        log_tile_init();
        log_tile(d);
#elif defined(OP_ADD_S) || defined(OP_SUB_S) || defined(OP_MUL_S) || defined(OP_DIV_S) || defined(OP_RSUB_S)
        binop_with_scalar_tile_init();
#if defined(OP_ADD_S)
        add_unary_tile(d, SCALAR_BITS);
#elif defined(OP_SUB_S)
        sub_unary_tile(d, SCALAR_BITS);
#elif defined(OP_MUL_S) && defined(LLK_CALL)
        MATH((SFPU_UNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_binop_with_scalar,
                              (APPROX, MUL_UNARY, SFPU_ITERATIONS, DST_ACCUM_MODE), d, VectorMode::VECTOR_MODE, SCALAR_BITS)));
#elif defined(OP_MUL_S)
        mul_unary_tile(d, SCALAR_BITS);
#elif defined(OP_DIV_S)
        div_unary_tile(d, SCALAR_BITS);
#else
        rsub_unary_tile(d, SCALAR_BITS);
#endif
#elif defined(OP_MAX) && defined(LLK_CALL)
        OP_INIT(binary_max_tile_init);
        MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_binary_max_min, (true, SFPU_ITERATIONS), d, d + 1, d,
                               VectorMode::VECTOR_MODE)));
#elif defined(OP_MAX)
        OP_INIT(binary_max_tile_init);
        binary_max_tile(d, d + 1, d);
#elif defined(OP_ADDCMUL)
        OP_INIT(addcmul_tile_init);
        addcmul_tile<DataFormat::Float32>(d, d + 1, d + 2, d, SCALAR_BITS);
#elif defined(OP_ADD_B) || defined(OP_SUB_B) || defined(OP_MUL_B)
#ifdef NEAREST_EVEN
        constexpr DstRoundingMode rounding = DstRoundingMode::NearestEven;
#else
        constexpr DstRoundingMode rounding = DstRoundingMode::Default;
#endif
#if defined(OP_ADD_B) && defined(LLK_CALL)
        OP_INIT(add_binary_tile_init);
        MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary,
                               (APPROX, ckernel::BinaryOp::ADD, SFPU_ITERATIONS, DST_ACCUM_MODE, rounding), d, d + 1, d,
                               VectorMode::VECTOR_MODE)));
#elif defined(OP_SUB_B) && defined(LLK_CALL)
        OP_INIT(sub_binary_tile_init);
        MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary,
                               (APPROX, ckernel::BinaryOp::SUB, SFPU_ITERATIONS, DST_ACCUM_MODE, rounding), d, d + 1, d,
                               VectorMode::VECTOR_MODE)));
#elif defined(OP_MUL_B) && defined(LLK_CALL)
        OP_INIT(mul_binary_tile_init);
        MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary_mul,
                               (APPROX, ckernel::BinaryOp::MUL, SFPU_ITERATIONS, DST_ACCUM_MODE), d, d + 1, d,
                               VectorMode::VECTOR_MODE)));
#elif defined(OP_ADD_B)
        OP_INIT(add_binary_tile_init);
        add_binary_tile<rounding>(d, d + 1, d);
#elif defined(OP_SUB_B)
        OP_INIT(sub_binary_tile_init);
        sub_binary_tile<rounding>(d, d + 1, d);
#else
        OP_INIT(mul_binary_tile_init);
        mul_binary_tile(d, d + 1, d);
#endif
#endif
        tile_regs_commit();
        tile_regs_wait();
        emit(d);
#ifdef OP_NONE
        if (two) emit(d + 1);
        if (three) emit(d + 2);
#endif
        tile_regs_release();
        cb_pop_front(in0, 1);
        if (two) cb_pop_front(in1, 1);
        if (three) cb_pop_front(in2, 1);
    }
}
