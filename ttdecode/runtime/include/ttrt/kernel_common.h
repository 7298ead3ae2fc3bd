// Per-kernel state shared by the dataflow and compute API headers: runtime-argument and semaphore
// bases, this core's NoC coordinates. Each core loads a private copy of the kernel library, so these
// globals are per core; the runner sets them before the kernel starts.
#pragma once

#include <cstdint>

#include "api/compile_time_args.h"
#include "ttrt/abi.h"
#include "ttrt/types.h"
#include "ttrt_kernel_config.h"  // generated per kernel build (CB formats, bank map, settings)

// [[gnu::used]]: emitted even when the kernel does not touch them, so the runner can set them.
[[gnu::used]] inline uint32_t* rta_l1_base = nullptr;
[[gnu::used]] inline uint32_t* crta_l1_base = nullptr;
[[gnu::used]] inline uint32_t* sem_l1_base[static_cast<int>(ProgrammableCoreType::COUNT)] = {nullptr, nullptr, nullptr};
[[gnu::used]] inline uint8_t my_x[NUM_NOCS] = {0, 0};
[[gnu::used]] inline uint8_t my_y[NUM_NOCS] = {0, 0};
[[gnu::used]] inline uint8_t my_logical_x_ = 0;
[[gnu::used]] inline uint8_t my_logical_y_ = 0;
[[gnu::used]] inline uint32_t rta_count = 0;
[[gnu::used]] inline uint32_t crta_count = 0;

#ifndef NOC_INDEX
#define NOC_INDEX 0
#endif
constexpr uint8_t noc_index = NOC_INDEX;

// The runner reports an out-of-range argument index with the core and kernel.
extern "C" void ttrt_bad_arg_index(int common, int idx, uint32_t count);

// Compute kernels get a 32-bit address, dataflow kernels a uintptr_t (as the two tt-metal headers
// do; the host maps L1 at its device addresses, so both fit).
static FORCE_INLINE volatile uint32_t* ttrt_arg_slot(int common, int arg_idx) {
    const uint32_t count = common ? crta_count : rta_count;
    if (arg_idx < 0 || (uint32_t)arg_idx >= count) {
        ttrt_bad_arg_index(common, arg_idx, count);
    }
    return common ? &crta_l1_base[arg_idx] : &rta_l1_base[arg_idx];
}

#if TTRT_COMPUTE_KERNEL
static FORCE_INLINE uint32_t get_arg_addr(int arg_idx) { return (uint32_t)(uintptr_t)ttrt_arg_slot(0, arg_idx); }

static FORCE_INLINE uint32_t get_common_arg_addr(int arg_idx) { return (uint32_t)(uintptr_t)ttrt_arg_slot(1, arg_idx); }
#else
static FORCE_INLINE uintptr_t get_arg_addr(int arg_idx) { return (uintptr_t)ttrt_arg_slot(0, arg_idx); }

static FORCE_INLINE uintptr_t get_common_arg_addr(int arg_idx) { return (uintptr_t)ttrt_arg_slot(1, arg_idx); }
#endif

template <typename T>
FORCE_INLINE T get_arg_val(int arg_idx) {
    static_assert("Error: only 4B args are supported" && sizeof(T) == 4);
    return *((tt_l1_ptr T*)(get_arg_addr(arg_idx)));
}

template <typename T>
FORCE_INLINE T get_common_arg_val(int arg_idx) {
    static_assert("Error: only 4B args are supported" && sizeof(T) == 4);
    return *((tt_l1_ptr T*)(get_common_arg_addr(arg_idx)));
}

inline uint8_t get_absolute_logical_x() { return my_logical_x_; }
inline uint8_t get_absolute_logical_y() { return my_logical_y_; }
inline uint8_t get_relative_logical_x() { return my_logical_x_; }
inline uint8_t get_relative_logical_y() { return my_logical_y_; }

// CB formats baked in at build time, as the device build does.
constexpr inline std::int32_t get_tile_size(const std::int32_t operand) {
    return (std::int32_t)ttrt_cb_tile_size[operand];
}
// 32x32 tiles (four faces), 16x32 tiles (faces 0-1) or 8x32 tiles (two faces of 8 rows): the CB's
// tile shape (CircularBuffer.tile_rows)
constexpr inline uint32_t get_tile_hw(const std::int32_t operand) { return ttrt_cb_tile_rows[operand] * 32u; }
constexpr inline uint32_t get_tile_num_faces(const std::int32_t operand) {
    return ttrt_cb_tile_rows[operand] == 32u ? 4u : 2u;
}
constexpr inline DataFormat get_dataformat(const std::int32_t operand) {
    return static_cast<DataFormat>(ttrt_cb_data_format[operand]);
}
