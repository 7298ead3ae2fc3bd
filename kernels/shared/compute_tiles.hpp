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
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"
#include "api/compute/bcast.h"
#include "api/compute/matmul.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/eltwise_binary_sfpu.h"

// Helpers called from many places stay out of line (KERNEL_OUTLINE): every inlined copy of an LLK
// init, unpack or SFPU sequence costs TRISC code bytes (the kernel-config buffer), a call a few. GCC
// would still clone them per constant argument (noclone; clang makes no such clones).
#if defined(__clang__)
#define KERNEL_OUTLINE __attribute__((noinline))
#else
#define KERNEL_OUTLINE __attribute__((noinline, noclone))
#endif

namespace compute_tiles {

constexpr uint32_t one_bits = 0x3F800000u;  // float32 bits of 1.0 (addcmul's value)

// What the unpackers, the FPU and the packer were last configured for, so that the helpers below
// reprogram them only on a change (every init or reconfig is config writes behind a stall on the
// chip). A kernel starts it with start_engine and configures these units only through the helpers
// (or calls fpu_reconfigured() after an FPU init of its own); the runtime rejects an unpack, an
// op or a pack through a unit configured for something else, so a stale record cannot pass unseen.
enum class FpuInit : uint8_t { none, copy, bcast_col, matmul, other };
// The SFPU ops whose init the tracker may skip: plain binary and scalar ops, whose init only sets an
// address mode the FPU ops do not use (no constants, no replay buffer), and the accurate exp (`exp`).
// add, sub and mul share one state (the same three LLK steps), and the accurate exp's init runs those
// steps too before it programs LReg[12..14]; so its init serves the three, and an accurate exp runs
// under their state while `exp_consts` says LReg[12..14] still hold its constants (no other init since
// programmed any). Every other SFPU init (the approximate exp, recip, log, sfpu_reduce) is made each time
// and recorded as `other`.
enum class SfpuInit : uint8_t { none, scalar, add, sub, mul, max, exp, other };
struct EngineConfig {
    uint32_t srca;
    uint32_t srcb;
    uint32_t pack;
    FpuInit fpu;
    uint32_t fpu_cb;  // the CB the copy / broadcast init was made for (matmul: its parameters)
    SfpuInit sfpu;
    bool exp_consts;  // LReg[12..14] hold the accurate exp's constants
};
inline EngineConfig engine = {0, 0, 0, FpuInit::none, 0, SfpuInit::none, false};
// Bit i: CB i is unpacked straight to the fp32 DST (UnpackToDestFp32, Float32). Such CBs share one
// unpack configuration, so a copy or broadcast init made for one serves them all; any other change of
// CB re-inits.
inline uint32_t to_dest_mask = 0;

inline void start_engine(uint32_t srca_cb, uint32_t srcb_cb, uint32_t pack_cb, uint32_t to_dest_cbs = 0) {
    compute_kernel_hw_startup(srca_cb, srcb_cb, pack_cb);
    engine = {srca_cb, srcb_cb, pack_cb, FpuInit::none, 0, SfpuInit::none, false};
    to_dest_mask = to_dest_cbs;
}
inline bool same_unpack(uint32_t a, uint32_t b) {
    return a == b || (((to_dest_mask >> a) & 1u) && ((to_dest_mask >> b) & 1u));
}
// The (old, new) reconfigs reprogram nothing when the two CBs share a format (LLK behaviour).
KERNEL_OUTLINE inline void use_srca(uint32_t cb) {
    if (cb != engine.srca) {
        reconfig_data_format_srca(engine.srca, cb);
        engine.srca = cb;
    }
}
KERNEL_OUTLINE inline void use_srcb(uint32_t cb) {
    if (cb != engine.srcb) {
        reconfig_data_format_srcb(engine.srcb, cb);
        engine.srcb = cb;
    }
}
KERNEL_OUTLINE inline void use_pack(uint32_t cb) {
    if (cb != engine.pack) {
        pack_reconfig_data_format(engine.pack, cb);
        engine.pack = cb;
    }
}
// After an FPU init the helpers do not make (matmul, eltwise, reduce): the next copy re-inits.
inline void fpu_reconfigured() { engine.fpu = FpuInit::other; }

// A matmul_block init for in0 x in1 (in1 transposed or not) with a DST block of ct tiles and an inner
// dimension of kt tiles, unless the FPU is still configured for exactly that (only SFPU ops and packs
// since: they leave the FPU's configuration alone). The caller reconfigures the unpackers.
KERNEL_OUTLINE inline void matmul_block_for(uint32_t in0, uint32_t in1, uint32_t transpose, uint32_t ct, uint32_t kt) {
    const uint32_t key = (in0 << 24) | (in1 << 16) | (transpose << 15) | (ct << 8) | kt;
    if (engine.fpu != FpuInit::matmul || engine.fpu_cb != key) {
        matmul_block_init(in0, in1, transpose, ct, 1 /* rt */, kt);
        engine.fpu = FpuInit::matmul;
        engine.fpu_cb = key;
    }
}
// The same for matmul_tiles (matmul_init).
KERNEL_OUTLINE inline void matmul_tiles_for(uint32_t in0, uint32_t in1, uint32_t transpose) {
    const uint32_t key = (in0 << 24) | (in1 << 16) | (transpose << 15) | 0x80u;
    if (engine.fpu != FpuInit::matmul || engine.fpu_cb != key) {
        matmul_init(in0, in1, transpose);
        engine.fpu = FpuInit::matmul;
        engine.fpu_cb = key;
    }
}

// SFPU inits, tracked like the FPU's: `init` runs unless the last SFPU init was for `op` (a plain op,
// see SfpuInit). A kernel that also makes SFPU inits of its own calls sfpu_forget() before relying on
// the record again.
constexpr bool binary_family(SfpuInit op) { return op == SfpuInit::add || op == SfpuInit::sub || op == SfpuInit::mul; }
// Does the SFPU state `have` serve an op of init `want` (see SfpuInit)?
inline bool sfpu_serves(SfpuInit have, SfpuInit want) {
    if (want == SfpuInit::other || want == SfpuInit::none) return false;
    if (want == SfpuInit::exp) return (have == SfpuInit::exp || binary_family(have)) && engine.exp_consts;
    if (binary_family(want)) return binary_family(have) || have == SfpuInit::exp;
    return have == want;
}
template <typename Init>
inline void sfpu_init(SfpuInit op, Init init) {
    if (!sfpu_serves(engine.sfpu, op)) {
        init();
        engine.sfpu = op;
        if (op == SfpuInit::exp) engine.exp_consts = true;
        if (op == SfpuInit::other) engine.exp_consts = false;  // it may program LReg[12..14]
    }
}
inline void sfpu_forget() {
    engine.sfpu = SfpuInit::none;
    engine.exp_consts = false;
}

// Ready to copy tiles of cb into DST (exact for an UnpackToDestFp32 CB and for bf16 data).
KERNEL_OUTLINE inline void copy_from(uint32_t cb) {
    use_srca(cb);
    if (engine.fpu != FpuInit::copy || !same_unpack(engine.fpu_cb, cb)) {
        copy_init(cb);
        engine.fpu = FpuInit::copy;
        engine.fpu_cb = cb;
    }
}

// DST tile dst = tile `tile` of cb.
KERNEL_OUTLINE inline void copy_to_dst(uint32_t cb, uint32_t tile, uint32_t dst) {
    copy_from(cb);
    copy_tile(cb, tile, dst);
}

// DST tile dst = column 0 of tile `tile` of cb in every column: exact from an UnpackToDestFp32 CB
// (broadcast inside the fp32 DST); a bf16 CB goes through srcB, also exact.
KERNEL_OUTLINE inline void broadcast_column(uint32_t cb, uint32_t tile, uint32_t dst) {
    use_srca(cb);
    use_srcb(cb);
    if (engine.fpu != FpuInit::bcast_col || !same_unpack(engine.fpu_cb, cb)) {
        unary_bcast_init<BroadcastType::COL>(cb);
        engine.fpu = FpuInit::bcast_col;
        engine.fpu_cb = cb;
    }
    unary_bcast<BroadcastType::COL>(cb, tile, dst);
}

// dst = exp(dst) for DST tiles [first, first + n), in the accurate or the approximate algorithm, on
// the faces `mode` covers (RC all four; R faces 0-1 = rows 0-15), `iterations` vector steps per face
// (8: whole faces; fewer: the first 2 x 4 rows per pair of steps).
template <bool approx, int iterations = 8>
KERNEL_OUTLINE inline void exp_block(uint32_t n, uint32_t first = 0, VectorMode mode = VectorMode::RC) {
    // the approximate exp's init also programs SFPLOADMACRO templates and the replay buffer: made each time
    sfpu_init(approx ? SfpuInit::other : SfpuInit::exp, [] { exp_tile_init<approx>(); });
    for (uint32_t i = first; i < first + n; ++i) {
        exp_tile<approx, false, InputClamping::ClampToNegative, iterations>(i, mode);
    }
}

// Hand the DST section to the packer (the math side is done with it).
inline void hand_to_packer() {
    tile_regs_commit();
    tile_regs_wait();
}

// Pack DST tiles [0, n) (every dst_stride-th) to tiles [first, first + n) of cb's reserved space,
// inside a hand_to_packer() ... tile_regs_release() bracket.
KERNEL_OUTLINE inline void pack_tiles_to(uint32_t cb, uint32_t first, uint32_t n, uint32_t dst_first = 0, uint32_t dst_stride = 1) {
    use_pack(cb);
    for (uint32_t i = 0; i < n; ++i) {
        pack_tile<true>(dst_first + i * dst_stride, cb, first + i);
    }
}

// Pack DST tiles [0, n) (every dst_stride-th) to tiles [first, first + n) of cb's reserved space
// and release DST.
KERNEL_OUTLINE inline void pack_block(uint32_t cb, uint32_t first, uint32_t n, uint32_t dst_stride = 1) {
    hand_to_packer();
    pack_tiles_to(cb, first, n, 0, dst_stride);
    tile_regs_release();
}

}  // namespace compute_tiles
