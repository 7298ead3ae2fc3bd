// Enumerations and basic macros the Metalium kernel API exposes (values as in tt-metal 0.81.1 for
// Wormhole B0), for the ttdecode host runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>  // uint, as the device toolchain provides

#ifndef FORCE_INLINE
#define FORCE_INLINE inline __attribute__((always_inline))
#endif
#ifndef tt_l1_ptr
#define tt_l1_ptr
#endif
#ifndef tt_reg_ptr
#define tt_reg_ptr
#endif

// Tile data formats (numeric values are the hardware encodings).
enum class DataFormat : std::uint8_t {
    Float32 = 0,
    Float16 = 1,
    Bfp8 = 2,
    Bfp4 = 3,
    Bfp2 = 11,
    Float16_b = 5,
    Bfp8_b = 6,
    Bfp4_b = 7,
    Bfp2_b = 15,
    Lf8 = 10,
    Int8 = 14,
    UInt8 = 30,
    UInt16 = 9,
    Int32 = 8,
    UInt32 = 24,
    Tf32 = 4,
    Invalid = 0xff
};

enum class ProgrammableCoreType { TENSIX = 0, ACTIVE_ETH = 1, IDLE_ETH = 2, COUNT = 3 };

namespace ckernel {
enum class VectorMode : std::uint8_t { None = 0, R = 1, C = 2, RC = 4, RC_custom = 6, Invalid = 0xFF };
enum class ReduceDim : std::uint8_t { REDUCE_ROW, REDUCE_COL, REDUCE_SCALAR };
enum class PoolType : std::uint8_t { SUM, AVG, MAX, MIN };
enum class EltwiseBinaryType : std::uint8_t { ELWMUL, ELWDIV, ELWADD, ELWSUB, ELWLESS };
enum class EltwiseBinaryReuseDestType { NONE = 0, DEST_TO_SRCA = 1, DEST_TO_SRCB = 2 };
enum class DstSync : std::uint8_t { SyncHalf = 0, SyncFull = 1 };
enum class BroadcastType : std::uint8_t { NONE = 0x0, COL = 0x1, ROW = 0x2, SCALAR = 0x3 };
enum class MathFidelity : std::uint8_t { LoFi = 0, HiFi2 = 2, HiFi3 = 3, HiFi4 = 4 };
enum class SrcOrder : uint8_t { Regular = 0, Reverse = 1 };
// bf16 narrowing of SFPU binary results: Default truncates (SFPSTORE), NearestEven rounds in software.
enum class DstRoundingMode : std::uint8_t { Default = 0, NearestEven = 1 };
namespace p_sfpu {
constexpr static std::uint32_t kCONST_1_FP16B = 0x3F80;
}
}  // namespace ckernel

// Wormhole NoC parameters used by kernels.
#define NUM_NOCS 2
#define NOC_ADDR_LOCAL_BITS 36
#define NOC_ADDR_NODE_ID_BITS 6
#define NOC_MAX_BURST_SIZE 8192
#define NOC_UNICAST_WRITE_VC 1
#define NOC_MULTICAST_WRITE_VC 4
#define L1_ALIGNMENT (static_cast<uint32_t>(16))
#define DRAM_ALIGNMENT (static_cast<uint32_t>(32))
#define NUM_DRAM_BANKS 12
#define NOC_XY_ADDR(x, y, addr)                                                                  \
    ((((uint64_t)(y)) << (NOC_ADDR_LOCAL_BITS + NOC_ADDR_NODE_ID_BITS)) |                        \
     (((uint64_t)(x)) << NOC_ADDR_LOCAL_BITS) | ((uint64_t)(addr)))
