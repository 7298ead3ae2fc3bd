// The LLK's SFPU call macros (tt-metal 0.81.1 llk_math_eltwise_{unary,binary,ternary}_sfpu_macros.h): a kernel
// names an LLK SFPU function with its template arguments and a VectorMode, which the *_tile API calls
// fix at VectorMode::RC. The LLK applies the function per face: RC faces 0-3, R faces 0-1 (rows 0-15),
// C faces 0 and 2 (columns 0-15), None face 0 (llk_math_eltwise_sfpu_common.h,
// _llk_math_eltwise_sfpu_apply_vector_mode_, for unary and binary calls alike).
//
// Here `::ckernel::sfpu::FN<...>` names a descriptor of the runtime's op for that function and those
// template arguments, and the params call runs it on the faces of the VectorMode, exactly as the
// corresponding *_tile API call does on all four. Only the functions below exist (every other one
// fails to compile). ITERATIONS (1..8, 8 as the *_tile calls pass) is the number of vector steps per
// face application: step i covers face rows 4 * (i / 2) .. + 3, the even (i even) or odd columns.
#pragma once

#include <cstdint>

#include "api/compute/common_globals.h"
#include "ttrt/sfpu_flags.h"

namespace ckernel {

// The subset of tt-llk's ckernel_defs.h BinaryOp (same values) that the runtime models here.
enum class BinaryOp : std::uint8_t { ADD = 0, SUB = 1, MUL = 2 };

namespace sfpu {

// The runtime's op code, flags and name for one LLK SFPU function instantiation.
struct TtrtSfpuFn {
    int op;
    int flags;
    const char* name;
};

template <BinaryOp op, int iterations>
constexpr int ttrt_add_sub_code() {
    static_assert(op == BinaryOp::ADD || op == BinaryOp::SUB,
                  "calculate_sfpu_binary: only BinaryOp::ADD and SUB are modelled by the host runtime");
    static_assert(iterations >= 1 && iterations <= 8, "SFPU call: ITERATIONS 1..8 (vector steps per face)");
    return op == BinaryOp::ADD ? 11 /*SF_ADD_B*/ : 12 /*SF_SUB_B*/;
}

template <bool is_max, int iterations>
constexpr int static_assert_max() {
    static_assert(is_max, "calculate_binary_max_min: only IS_MAX_OP = true is modelled by the host runtime");
    static_assert(iterations >= 1 && iterations <= 8, "SFPU call: ITERATIONS 1..8 (vector steps per face)");
    return 0;
}

template <DataFormat data_format, int iterations>
constexpr int static_assert_addcmul() {
    static_assert(data_format == DataFormat::Float32 || data_format == DataFormat::Float16_b ||
                      data_format == DataFormat::Bfp8_b,
                  "calculate_addcmul: only Float32, Float16_b and Bfp8_b are allowed");
    static_assert(iterations >= 1 && iterations <= 8, "SFPU call: ITERATIONS 1..8 (vector steps per face)");
    return 0;
}

template <BinaryOp op, int iterations>
constexpr int ttrt_mul_code() {
    static_assert(op == BinaryOp::MUL, "calculate_sfpu_binary_mul: BinaryOp::MUL only");
    static_assert(iterations >= 1 && iterations <= 8, "SFPU call: ITERATIONS 1..8 (vector steps per face)");
    return 13 /*SF_MUL_B*/;
}

// binop_with_scalar modes 0..4 (ADD_UNARY .. RSUB_UNARY) are the runtime's SF_ADD_S .. SF_RSUB_S.
template <int mode, int iterations>
constexpr int ttrt_scalar_code() {
    static_assert(mode >= 0 && mode <= 4, "calculate_binop_with_scalar: BINOP_MODE 0..4");
    static_assert(iterations >= 1 && iterations <= 8, "SFPU call: ITERATIONS 1..8 (vector steps per face)");
    return 5 /*SF_ADD_S*/ + mode;
}

// ckernel_sfpu_binary.h: odst = idst0 op idst1 (add, sub).
template <bool APPROXIMATION_MODE, BinaryOp BINOP, int ITERATIONS, bool is_fp32_dest_acc_en,
          DstRoundingMode dst_rounding_mode = DstRoundingMode::Default>
constexpr TtrtSfpuFn calculate_sfpu_binary = {
    ttrt_add_sub_code<BINOP, ITERATIONS>(),
    (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) |
        (dst_rounding_mode == DstRoundingMode::NearestEven ? TTRT_SFPU_NEAREST_EVEN : 0) |
        ttrt_sfpu_iterations_flag(ITERATIONS),
    "calculate_sfpu_binary"};

// ckernel_sfpu_binary.h: odst = idst0 * idst1.
template <bool APPROXIMATION_MODE, BinaryOp BINOP, int ITERATIONS, bool is_fp32_dest_acc_en>
constexpr TtrtSfpuFn calculate_sfpu_binary_mul = {
    ttrt_mul_code<BINOP, ITERATIONS>(),
    (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) | ttrt_sfpu_iterations_flag(ITERATIONS),
    "calculate_sfpu_binary_mul"};

// ckernel_sfpu_binop_with_unary.h: idst = idst op param (the scalar's float bits).
template <bool APPROXIMATION_MODE, int BINOP_MODE, int ITERATIONS, bool is_fp32_dest_acc_en>
constexpr TtrtSfpuFn calculate_binop_with_scalar = {
    ttrt_scalar_code<BINOP_MODE, ITERATIONS>(),
    (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) | ttrt_sfpu_iterations_flag(ITERATIONS),
    "calculate_binop_with_scalar"};

// ckernel_sfpu_binary_max_min.h: odst = max(idst0, idst1) (IS_MAX_OP = true only).
template <bool IS_MAX_OP, int ITERATIONS = 8>
constexpr TtrtSfpuFn calculate_binary_max_min = {
    (static_assert_max<IS_MAX_OP, ITERATIONS>(), 10 /*SF_MAX*/), ttrt_sfpu_iterations_flag(ITERATIONS),
    "calculate_binary_max_min"};

// ckernel_sfpu_addcmul.h: odst = idst0 + value * idst1 * idst2 (param = value's float bits).
template <bool APPROXIMATION_MODE, bool is_fp32_dest_acc_en, DataFormat data_format, int ITERATIONS>
constexpr TtrtSfpuFn calculate_addcmul = {
    (static_assert_addcmul<data_format, ITERATIONS>(), 15 /*SF_ADDCMUL*/),
    (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) | ttrt_sfpu_iterations_flag(ITERATIONS), "calculate_addcmul"};

// ckernel_sfpu_log.h: idst = ln(idst) (the natural log: HAS_BASE_SCALING and IS_BASE_TWO false; the
// runtime's SF_LOG, as log_tile runs it).
template <bool HAS_BASE_SCALING, bool IS_BASE_TWO, int iterations>
constexpr int ttrt_log_code() {
    static_assert(!HAS_BASE_SCALING && !IS_BASE_TWO, "calculate_log: only the natural log is modelled by the host runtime");
    static_assert(iterations >= 1 && iterations <= 8, "SFPU call: ITERATIONS 1..8 (vector steps per face)");
    return 3 /*SF_LOG*/;
}
template <bool APPROXIMATION_MODE, bool FAST_APPROX, bool HAS_BASE_SCALING, bool is_fp32_dest_acc_en,
          int ITERATIONS = 8, bool IS_BASE_TWO = false>
constexpr TtrtSfpuFn calculate_log = {
    ttrt_log_code<HAS_BASE_SCALING, IS_BASE_TWO, ITERATIONS>(),
    (FAST_APPROX ? TTRT_SFPU_FAST_APPROX : 0) | (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) |
        ttrt_sfpu_iterations_flag(ITERATIONS),
    "calculate_log"};

template <int iterations>
constexpr int ttrt_recip_code() {
    static_assert(iterations >= 1 && iterations <= 8, "SFPU call: ITERATIONS 1..8 (vector steps per face)");
    return 2 /*SF_RECIP*/;
}

// ckernel_sfpu_recip.h: idst = 1 / idst (the runtime's SF_RECIP, as recip_tile runs it: its
// is_fp32_dest_acc_en is recip_tile's dest_acc == FP32, its approximation APPROX by default).
template <bool APPROXIMATION_MODE, bool is_fp32_dest_acc_en, int ITERATIONS = 8>
constexpr TtrtSfpuFn calculate_reciprocal = {
    ttrt_recip_code<ITERATIONS>(),
    (APPROXIMATION_MODE ? TTRT_SFPU_APPROX : 0) | (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) |
        ttrt_sfpu_iterations_flag(ITERATIONS),
    "calculate_reciprocal"};

}  // namespace sfpu

// The macros' DST bound checks: the runtime checks every DST index in the op itself.
template <DstSync sync>
inline void _sfpu_check_(std::uint32_t, VectorMode) {}
template <DstSync sync>
inline void _sfpu_binary_check_(std::uint32_t, std::uint32_t, std::uint32_t, VectorMode) {}
template <DstSync sync>
inline void _sfpu_ternary_check_(std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, VectorMode) {}

}  // namespace ckernel

inline void _llk_math_eltwise_unary_sfpu_params_(const ckernel::sfpu::TtrtSfpuFn& fn, std::uint32_t idst,
                                                 VectorMode vector_mode, std::uint32_t param = 0) {
    ttrt_sfpu_unary(fn.op, idst, int(vector_mode), param, fn.flags, fn.name);
}

inline void _llk_math_eltwise_binary_sfpu_params_(const ckernel::sfpu::TtrtSfpuFn& fn, std::uint32_t idst0,
                                                  std::uint32_t idst1, std::uint32_t odst, VectorMode vector_mode) {
    ttrt_sfpu_binary(fn.op, idst0, idst1, odst, int(vector_mode), fn.flags, fn.name);
}

inline void _llk_math_eltwise_ternary_sfpu_params_(const ckernel::sfpu::TtrtSfpuFn& fn, std::uint32_t idst0,
                                                   std::uint32_t idst1, std::uint32_t idst2, std::uint32_t odst,
                                                   VectorMode vector_mode, std::uint32_t param) {
    ttrt_sfpu_ternary(fn.op, idst0, idst1, idst2, odst, int(vector_mode), param, fn.flags, fn.name);
}

#define _SFPU_EXPAND(...) __VA_ARGS__
#define _SFPU_TERN_EXPAND(...) __VA_ARGS__
#define _SFPU_BIN_EXPAND(...) __VA_ARGS__

#define SFPU_UNARY_CALL(DST_SYNC, DST_ACCUM, FN, TEMPLATES, DST_IDX, VECTOR_MODE, ...) \
    (::ckernel::_sfpu_check_<DST_SYNC>(DST_IDX, VECTOR_MODE),                           \
     _llk_math_eltwise_unary_sfpu_params_(::ckernel::sfpu::FN<_SFPU_EXPAND TEMPLATES>, DST_IDX, VECTOR_MODE, ##__VA_ARGS__))

#define SFPU_BINARY_CALL(DST_SYNC, DST_ACCUM, FN, TEMPLATES, DST_IN0, DST_IN1, DST_OUT, VECTOR_MODE) \
    (::ckernel::_sfpu_binary_check_<DST_SYNC>(DST_IN0, DST_IN1, DST_OUT, VECTOR_MODE),                \
     _llk_math_eltwise_binary_sfpu_params_(::ckernel::sfpu::FN<_SFPU_BIN_EXPAND TEMPLATES>, DST_IN0, DST_IN1,  \
                                           DST_OUT, VECTOR_MODE))

#define SFPU_TERNARY_CALL(DST_SYNC, DST_ACCUM, FN, TEMPLATES, DST_IN0, DST_IN1, DST_IN2, DST_OUT, VECTOR_MODE, ...) \
    (::ckernel::_sfpu_ternary_check_<DST_SYNC>(DST_IN0, DST_IN1, DST_IN2, DST_OUT, VECTOR_MODE),                 \
     _llk_math_eltwise_ternary_sfpu_params_(::ckernel::sfpu::FN<_SFPU_TERN_EXPAND TEMPLATES>, DST_IN0, DST_IN1,    \
                                            DST_IN2, DST_OUT, VECTOR_MODE, ##__VA_ARGS__))
