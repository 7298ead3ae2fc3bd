// SPDX-License-Identifier: Apache-2.0
//
// Tile helpers shared by the compute kernels (FlashDecode's compute.cpp and combine/compute.cpp):
// moving CB tiles into DST for SFPU work and packing DST tiles out. Every value that goes through
// them keeps its bits: a Float32 CB in UnpackToDestFp32 mode is unpacked straight into the fp32
// DST, a bf16 CB goes through SrcA / SrcB, which hold bf16 exactly.

#pragma once

#include <stdint.h>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/cb_api.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"
#include "api/compute/bcast.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/eltwise_binary_sfpu.h"

namespace flash_decode {

// DST tile dst = tile `tile` of cb (exact for an UnpackToDestFp32 CB and for bf16 data).
inline void copy_to_dst(uint32_t cb, uint32_t tile, uint32_t dst) {
    reconfig_data_format_srca(cb);
    copy_init(cb);
    copy_tile(cb, tile, dst);
}

// DST tile dst = column 0 of tile `tile` of cb in every column: exact from an UnpackToDestFp32 CB
// (broadcast inside the fp32 DST); a bf16 CB goes through srcB, also exact.
inline void broadcast_column(uint32_t cb, uint32_t tile, uint32_t dst) {
    reconfig_data_format_srca(cb);
    reconfig_data_format_srcb(cb);
    unary_bcast_init<BroadcastType::COL>(cb);
    unary_bcast<BroadcastType::COL>(cb, tile, dst);
}

// dst = exp(dst) for DST tiles [first, first + n), in the accurate or the approximate algorithm, on
// the faces `mode` covers (RC all four; R faces 0-1 = rows 0-15).
template <bool approx>
inline void exp_block(uint32_t n, uint32_t first = 0, VectorMode mode = VectorMode::RC) {
    exp_tile_init<approx>();
    for (uint32_t i = first; i < first + n; ++i) {
        exp_tile<approx>(i, mode);
    }
}

// Hand the DST section to the packer (the math side is done with it).
inline void hand_to_packer() {
    tile_regs_commit();
    tile_regs_wait();
}

// Pack DST tiles [0, n) (every dst_stride-th) to tiles [first, first + n) of cb's reserved space,
// inside a hand_to_packer() ... tile_regs_release() bracket.
inline void pack_tiles_to(uint32_t cb, uint32_t first, uint32_t n, uint32_t dst_first = 0, uint32_t dst_stride = 1) {
    pack_reconfig_data_format(cb);
    for (uint32_t i = 0; i < n; ++i) {
        pack_tile<true>(dst_first + i * dst_stride, cb, first + i);
    }
}

// Pack DST tiles [0, n) (every dst_stride-th) to tiles [first, first + n) of cb's reserved space
// and release DST.
inline void pack_block(uint32_t cb, uint32_t first, uint32_t n, uint32_t dst_stride = 1) {
    hand_to_packer();
    pack_tiles_to(cb, first, n, 0, dst_stride);
    tile_regs_release();
}

// DST tile 0 = l * e + e_other, where l is tile `l_tile` of cb_l and e / e_other are tiles 0 / 1 of
// cb_factors (every column holds a row's factor): a running sum rescaled plus a partial whose own sum
// is 1 (a merged sink, a normalized partial), in fp32 on the SFPU. Uses DST tiles 0-2.
inline void rescaled_plus_factor(uint32_t cb_l, uint32_t l_tile, uint32_t cb_factors) {
    copy_to_dst(cb_l, l_tile, 0);
    copy_to_dst(cb_factors, 0, 1);
    copy_to_dst(cb_factors, 1, 2);
    mul_binary_tile_init();
    mul_binary_tile(0, 1, 0);
    add_binary_tile_init();
    add_binary_tile(0, 2, 0);
}

}  // namespace flash_decode
