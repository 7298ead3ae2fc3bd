// DST tile op a float scalar given as its IEEE bits (tt-metal 0.81.1 signatures), one SFPMAD per value
// (div multiplies by param1, which the caller passes as the divisor's reciprocal, as the LLK does; rsub
// rounds to bf16 with a bf16 is_fp32_dest_acc_en).
#pragma once

#include "api/compute/common_globals.h"
#include "ttrt/sfpu_call.h"  // SFPU_BINARY_CALL / SFPU_UNARY_CALL with a VectorMode
#include "ttrt/sfpu_flags.h"

namespace ckernel {
enum { ADD_UNARY = 0, SUB_UNARY = 1, MUL_UNARY = 2, DIV_UNARY = 3, RSUB_UNARY = 4 };
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_unary_tile(uint32_t idst, uint32_t param1) {
    ttrt_sfpu_unary(5 /*SF_ADD_S*/, idst, int(VectorMode::RC), param1,
                    is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0, "add_unary_tile");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_unary_tile(uint32_t idst, uint32_t param1) {
    ttrt_sfpu_unary(6 /*SF_SUB_S*/, idst, int(VectorMode::RC), param1,
                    is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0, "sub_unary_tile");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_unary_tile(uint32_t idst, uint32_t param1) {
    ttrt_sfpu_unary(7 /*SF_MUL_S*/, idst, int(VectorMode::RC), param1,
                    is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0, "mul_unary_tile");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void div_unary_tile(uint32_t idst, uint32_t param1) {
    ttrt_sfpu_unary(8 /*SF_DIV_S*/, idst, int(VectorMode::RC), param1,
                    is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0, "div_unary_tile");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void rsub_unary_tile(uint32_t idst, uint32_t param1) {
    ttrt_sfpu_unary(9 /*SF_RSUB_S*/, idst, int(VectorMode::RC), param1,
                    is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0, "rsub_unary_tile");
}
ALWI void binop_with_scalar_tile_init() { ttrt_sfpu_init(4 /*SF_SCALAR_INIT*/, 0, 0, "binop_with_scalar_tile_init"); }
}  // namespace ckernel
