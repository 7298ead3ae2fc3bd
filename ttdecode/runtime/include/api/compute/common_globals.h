// Compute-kernel basics for the ttdecode host runtime. One host function runs the whole compute
// kernel, so the unpack, math and pack parts of every call happen in program order in one thread.
#pragma once

#include "ttrt/kernel_common.h"

#define ALWI inline __attribute__((always_inline))
#define MATH(...) __VA_ARGS__
#define PACK(...) __VA_ARGS__
#define UNPACK(...) __VA_ARGS__

namespace ckernel {
// Kernel settings from the program (ComputeSettings), baked in at build time.
constexpr bool DST_ACCUM_MODE = TTRT_FP32_DEST_ACC_EN;
constexpr bool APPROX = TTRT_MATH_APPROX_MODE;
constexpr MathFidelity MATH_FIDELITY = static_cast<MathFidelity>(TTRT_MATH_FIDELITY);
constexpr DstSync DST_SYNC_MODE = TTRT_DST_FULL_SYNC_EN ? DstSync::SyncFull : DstSync::SyncHalf;
}  // namespace ckernel

using namespace ckernel;
