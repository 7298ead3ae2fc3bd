// Compile-time kernel arguments: the runtime bakes the program's values into the kernel build as
// -DKERNEL_COMPILE_TIME_ARGS=v0,v1,... so get_compile_time_arg_val(i) is a constant expression.
#pragma once

#include <array>
#include <cstdint>

template <class T, class... Ts>
constexpr std::array<T, sizeof...(Ts)> ttrt_make_array(Ts... values) {
    return {T(values)...};
}

#ifndef KERNEL_COMPILE_TIME_ARGS
#define KERNEL_COMPILE_TIME_ARGS
#endif

constexpr auto kernel_compile_time_args = ttrt_make_array<std::uint32_t>(KERNEL_COMPILE_TIME_ARGS);

template <uint32_t Idx>
constexpr uint32_t get_ct_arg() {
    static_assert(Idx < kernel_compile_time_args.size(), "get_compile_time_arg_val: index out of range");
    return kernel_compile_time_args[Idx];
}

#define get_compile_time_arg_val(arg_idx) get_ct_arg<arg_idx>()
