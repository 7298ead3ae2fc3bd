// Tile matrix multiply (tt-metal 0.81.1 signatures): DST[idst] += in0 tile x in1 tile, the in1 tile
// transposed when matmul_init was given transpose != 0.
#pragma once

#include <cstdint>

#include "api/compute/common.h"

namespace ckernel {
ALWI void matmul_init(
    std::uint32_t in0_cb_id,
    std::uint32_t in1_cb_id,
    const std::uint32_t transpose = 0,
    std::uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_fpu_init(1 /*FPU_MATMUL*/, transpose ? 1 : 0, 0, in0_cb_id, in1_cb_id, "matmul_init");
}
ALWI void matmul_tiles(
    std::uint32_t in0_cb_id,
    std::uint32_t in1_cb_id,
    std::uint32_t in0_tile_index,
    std::uint32_t in1_tile_index,
    std::uint32_t idst) {
    ttrt_matmul(in0_cb_id, in1_cb_id, in0_tile_index, in1_tile_index, idst, 1, 1, 1, "matmul_tiles");
}
ALWI void matmul_block_init(
    std::uint32_t in0_cb_id,
    std::uint32_t in1_cb_id,
    const std::uint32_t transpose = 0,
    std::uint32_t ct_dim = 1,
    std::uint32_t rt_dim = 1,
    std::uint32_t kt_dim = 1,
    std::uint32_t call_line = __builtin_LINE()) {
    (void)ct_dim;
    (void)rt_dim;
    (void)kt_dim;
    (void)call_line;
    ttrt_fpu_init(1 /*FPU_MATMUL*/, transpose ? 1 : 0, 0, in0_cb_id, in1_cb_id, "matmul_block_init");
}
// rt_dim x ct_dim output tiles at DST idst + r * ct_dim + c, from in0 tiles in0_tile_index + r * kt_dim
// and in1 tiles in1_tile_index + c (one step of the inner dimension).
ALWI void matmul_block(
    std::uint32_t in0_cb_id,
    std::uint32_t in1_cb_id,
    std::uint32_t in0_tile_index,
    std::uint32_t in1_tile_index,
    std::uint32_t idst,
    const std::uint32_t transpose,
    std::uint32_t ct_dim,
    std::uint32_t rt_dim,
    std::uint32_t kt_dim,
    std::uint32_t call_line = __builtin_LINE()) {
    (void)transpose;
    (void)call_line;
    ttrt_matmul(in0_cb_id, in1_cb_id, in0_tile_index, in1_tile_index, idst, ct_dim, rt_dim, kt_dim, "matmul_block");
}
}  // namespace ckernel
