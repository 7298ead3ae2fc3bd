// Compute-kernel model of the ttdecode host runtime: the DST register file, the unpack/math/pack
// configuration state, and the tile operations (see compute.cpp for the exact semantics).
#pragma once

#include "engine.hpp"

namespace ttrt {

enum ComputeOp {
    OP_MATMUL, OP_ADD, OP_SUB, OP_MUL, OP_ADD_BCAST, OP_SUB_BCAST, OP_MUL_BCAST, OP_REDUCE_MAX, OP_REDUCE_SUM,
    OP_COPY, OP_EXP, OP_RECIP, OP_LOG, OP_SCALAR, OP_MAX, OP_PACK, OP_TERNARY, OP_INIT, kNumComputeOps
};
// OP_INIT counts configuration calls (an op's *_init, a data-format reconfig, reduce_uninit), one
// "tile" each: the timing model charges them apart from the tile calls.
void count_init(Kernel& k);
const char* compute_op_name(int op);

// FPU configurations set by the *_init calls.
enum FpuKind { FPU_NONE = 0, FPU_MATMUL = 1, FPU_ELTWISE = 2, FPU_REDUCE = 3, FPU_COPY = 4, FPU_UNARY_BCAST = 5 };
// SFPU operations; an op needs the matching init (the scalar family shares one init).
// Binary ops on two DST tiles (SF_MAX, SF_ADD_B, SF_SUB_B, SF_MUL_B) count as OP_MAX: "max" is the
// counter of SFPU binary tile ops (the timing model charges them alike).
enum SfpuOp {
    SF_NONE = 0, SF_EXP, SF_RECIP, SF_LOG, SF_SCALAR_INIT, SF_ADD_S, SF_SUB_S, SF_MUL_S, SF_DIV_S, SF_RSUB_S, SF_MAX,
    SF_ADD_B, SF_SUB_B, SF_MUL_B, SF_REDUCE_MAX, SF_ADDCMUL
};
// Ternary ops on three DST tiles (SF_ADDCMUL) count as OP_TERNARY.

ComputeState* new_compute_state(Kernel& k);
void check_compute_end(Kernel& k);

}  // namespace ttrt
