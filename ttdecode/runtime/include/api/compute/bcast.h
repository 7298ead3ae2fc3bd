// Element-wise ops with the second operand broadcast (tt-metal 0.81.1 signatures): COL uses column 0
// of the icb1 tile for every column, ROW its row 0 for every row, SCALAR its element (0, 0).
#pragma once

#include "api/compute/common.h"

namespace ckernel {
namespace ttrt_detail {
ALWI void init_bcast(EltwiseBinaryType op, BroadcastType dim, uint32_t icb0, uint32_t icb1, const char* name) {
    ttrt_fpu_init(2 /*FPU_ELTWISE*/, int(op) | (int(dim) << 8), 0, icb0, icb1, name);
}
ALWI void bcast_op(EltwiseBinaryType op, BroadcastType dim, uint32_t icb0, uint32_t icb1, uint32_t itile0,
                   uint32_t itile1, uint32_t idst, const char* name) {
    ttrt_binary(int(op), int(dim), icb0, icb1, itile0, itile1, idst, name);
}
}  // namespace ttrt_detail

template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_tiles_bcast_cols(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst) {
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWSUB, BroadcastType::COL, icb0, icb1, itile0, itile1, idst,
                          "sub_tiles_bcast_cols");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_tiles_bcast_scalar(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst) {
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWSUB, BroadcastType::SCALAR, icb0, icb1, itile0, itile1, idst,
                          "sub_tiles_bcast_scalar");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_tiles_bcast_cols(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst) {
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWMUL, BroadcastType::COL, icb0, icb1, itile0, itile1, idst,
                          "mul_tiles_bcast_cols");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_tiles_bcast_rows(
    uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, uint32_t bcast_row_idx = 0) {
    if (bcast_row_idx != 0) ttrt_fail("mul_tiles_bcast_rows: bcast_row_idx != 0 is not modelled");
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWMUL, BroadcastType::ROW, icb0, icb1, itile0, itile1, idst,
                          "mul_tiles_bcast_rows");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_tiles_bcast_rows(
    uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, uint32_t bcast_row_idx = 0) {
    if (bcast_row_idx != 0) ttrt_fail("add_tiles_bcast_rows: bcast_row_idx != 0 is not modelled");
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWADD, BroadcastType::ROW, icb0, icb1, itile0, itile1, idst,
                          "add_tiles_bcast_rows");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_tiles_bcast_rows(
    uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, uint32_t bcast_row_idx = 0) {
    if (bcast_row_idx != 0) ttrt_fail("sub_tiles_bcast_rows: bcast_row_idx != 0 is not modelled");
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWSUB, BroadcastType::ROW, icb0, icb1, itile0, itile1, idst,
                          "sub_tiles_bcast_rows");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_tiles_bcast_cols(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst) {
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWADD, BroadcastType::COL, icb0, icb1, itile0, itile1, idst,
                          "add_tiles_bcast_cols");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_tiles_bcast_scalar(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst) {
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWADD, BroadcastType::SCALAR, icb0, icb1, itile0, itile1, idst,
                          "add_tiles_bcast_scalar");
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_tiles_bcast_scalar(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst) {
    ttrt_detail::bcast_op(EltwiseBinaryType::ELWMUL, BroadcastType::SCALAR, icb0, icb1, itile0, itile1, idst,
                          "mul_tiles_bcast_scalar");
}
template <EltwiseBinaryType tBcastOp, BroadcastType tBcastDim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void any_tiles_bcast(
    uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, uint32_t bcast_row_idx = 0) {
    if (bcast_row_idx != 0) ttrt_fail("any_tiles_bcast: bcast_row_idx != 0 is not modelled");
    ttrt_detail::bcast_op(tBcastOp, tBcastDim, icb0, icb1, itile0, itile1, idst, "any_tiles_bcast");
}
template <BroadcastType tBcastDim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_tiles_bcast(
    uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, uint32_t bcast_row_idx = 0) {
    any_tiles_bcast<EltwiseBinaryType::ELWADD, tBcastDim, is_fp32_dest_acc_en>(icb0, icb1, itile0, itile1, idst,
                                                                               bcast_row_idx);
}
template <BroadcastType tBcastDim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_tiles_bcast(
    uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, uint32_t bcast_row_idx = 0) {
    any_tiles_bcast<EltwiseBinaryType::ELWSUB, tBcastDim, is_fp32_dest_acc_en>(icb0, icb1, itile0, itile1, idst,
                                                                               bcast_row_idx);
}
template <BroadcastType tBcastDim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_tiles_bcast(
    uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, uint32_t bcast_row_idx = 0) {
    any_tiles_bcast<EltwiseBinaryType::ELWMUL, tBcastDim, is_fp32_dest_acc_en>(icb0, icb1, itile0, itile1, idst,
                                                                               bcast_row_idx);
}
ALWI void add_bcast_rows_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWADD, BroadcastType::ROW, icb0, icb1, "add_bcast_rows_init");
}
ALWI void sub_bcast_rows_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWSUB, BroadcastType::ROW, icb0, icb1, "sub_bcast_rows_init");
}
ALWI void add_bcast_cols_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWADD, BroadcastType::COL, icb0, icb1, "add_bcast_cols_init");
}
ALWI void add_bcast_scalar_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWADD, BroadcastType::SCALAR, icb0, icb1, "add_bcast_scalar_init");
}
ALWI void mul_bcast_scalar_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWMUL, BroadcastType::SCALAR, icb0, icb1, "mul_bcast_scalar_init");
}
ALWI void mul_bcast_cols_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWMUL, BroadcastType::COL, icb0, icb1, "mul_bcast_cols_init");
}
ALWI void mul_bcast_rows_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWMUL, BroadcastType::ROW, icb0, icb1, "mul_bcast_rows_init");
}
ALWI void sub_bcast_cols_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWSUB, BroadcastType::COL, icb0, icb1, "sub_bcast_cols_init");
}
ALWI void sub_bcast_scalar_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(EltwiseBinaryType::ELWSUB, BroadcastType::SCALAR, icb0, icb1, "sub_bcast_scalar_init");
}
template <EltwiseBinaryType tBcastOp, BroadcastType tBcastDim>
ALWI void bcast_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE()) {
    (void)call_line;
    ttrt_detail::init_bcast(tBcastOp, tBcastDim, icb0, icb1, "bcast_init");
}
// unary_bcast: DST tile = the CB tile broadcast (COL: column 0 to every column, ROW: row 0 to every
// row, SCALAR: element (0, 0)). A Float32 CB in UnpackToDestFp32 mode is broadcast exactly in DST;
// any other CB goes through srcB.
template <BroadcastType bcast_type, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void unary_bcast_init(uint32_t icb) {
    if (bcast_type == BroadcastType::NONE) ttrt_fail("unary_bcast_init: BroadcastType::NONE is not modelled (use copy_init)");
    ttrt_fpu_init(5 /*FPU_UNARY_BCAST*/, int(bcast_type), 0, icb, icb, "unary_bcast_init");
}
template <BroadcastType bcast_type, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void unary_bcast(uint32_t icb, uint32_t in_tile_index, uint32_t dst_tile_index) {
    ttrt_unary_bcast(int(bcast_type), icb, in_tile_index, dst_tile_index);
}
template <BroadcastType bcast_type>
ALWI void unary_bcast_uninit(uint32_t icb) {
    ttrt_fpu_init(0 /*FPU_NONE*/, 0, 0, icb, icb, "unary_bcast_uninit");
}
}  // namespace ckernel
