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

// Named compile-time args (tt-metal 0.81.1's KernelDescriptor.named_compile_time_args): the runtime
// passes -DKERNEL_COMPILE_TIME_ARG_MAP={"name",value},... and get_named_compile_time_arg_val("name")
// looks the name up at compile time. A name the program did not give is a compile error, as on the
// device (there the lookup reaches __builtin_unreachable in a constant expression).
#ifdef KERNEL_COMPILE_TIME_ARG_MAP
#include <string_view>
#include <utility>

namespace ttrt_named_args {
constexpr std::pair<std::string_view, std::uint32_t> map[] = {KERNEL_COMPILE_TIME_ARG_MAP};
// Not constexpr: reaching it in a constant expression fails the build, naming this function.
std::uint32_t named_compile_time_arg_not_given_by_the_program();
}  // namespace ttrt_named_args

constexpr std::uint32_t get_named_ct_arg(std::string_view name) {
    for (const auto& [arg_name, arg_value] : ttrt_named_args::map) {
        if (name == arg_name) {
            return arg_value;
        }
    }
    return ttrt_named_args::named_compile_time_arg_not_given_by_the_program();
}

constexpr std::uint32_t get_named_compile_time_arg_val(std::string_view name) { return get_named_ct_arg(name); }
#endif
