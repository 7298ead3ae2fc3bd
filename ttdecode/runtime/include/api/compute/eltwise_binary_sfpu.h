// SFPU arithmetic on two DST tiles into a third (tt-metal 0.81.1 signatures): odst = idst0 op idst1
// over all 1024 values, one SFPMAD each (fp32, denormals flushed). With a 16-bit DST the result is
// stored as bf16: add/sub truncate (SFPSTORE) unless DstRoundingMode::NearestEven asks for the LLK's
// round-to-nearest-even; mul with a bf16 is_fp32_dest_acc_en rounds to nearest even and gives +0 when an
// input's bits are 0 (the LLK's `in == 0`). Each op needs its own *_binary_tile_init.
#pragma once

#include "api/compute/common_globals.h"
#include "ttrt/sfpu_call.h"  // SFPU_BINARY_CALL / SFPU_UNARY_CALL with a VectorMode
#include "ttrt/sfpu_flags.h"

namespace ckernel {

template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_binary_tile(uint32_t idst0, uint32_t idst1, uint32_t odst) {
    ttrt_sfpu_binary(13 /*SF_MUL_B*/, idst0, idst1, odst, int(VectorMode::RC),
                     is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0, "mul_binary_tile");
}

template <ckernel::DstRoundingMode dst_rounding_mode = ckernel::DstRoundingMode::Default,
          bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_binary_tile(uint32_t idst0, uint32_t idst1, uint32_t odst) {
    ttrt_sfpu_binary(11 /*SF_ADD_B*/, idst0, idst1, odst, int(VectorMode::RC),
                     (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) |
                         (dst_rounding_mode == DstRoundingMode::NearestEven ? TTRT_SFPU_NEAREST_EVEN : 0),
                     "add_binary_tile");
}

template <ckernel::DstRoundingMode dst_rounding_mode = ckernel::DstRoundingMode::Default,
          bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_binary_tile(uint32_t idst0, uint32_t idst1, uint32_t odst) {
    ttrt_sfpu_binary(12 /*SF_SUB_B*/, idst0, idst1, odst, int(VectorMode::RC),
                     (is_fp32_dest_acc_en ? TTRT_SFPU_FP32_TEMPLATE : 0) |
                         (dst_rounding_mode == DstRoundingMode::NearestEven ? TTRT_SFPU_NEAREST_EVEN : 0),
                     "sub_binary_tile");
}

ALWI void mul_binary_tile_init() { ttrt_sfpu_init(13 /*SF_MUL_B*/, 0, 0, "mul_binary_tile_init"); }
ALWI void add_binary_tile_init() { ttrt_sfpu_init(11 /*SF_ADD_B*/, 0, 0, "add_binary_tile_init"); }
ALWI void sub_binary_tile_init() { ttrt_sfpu_init(12 /*SF_SUB_B*/, 0, 0, "sub_binary_tile_init"); }
}  // namespace ckernel
