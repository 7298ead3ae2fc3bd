// Test kernel: reads tiles [start, start + n) of an interleaved DRAM tensor into CB `cb`, one page at a time.
// Compile-time args: cb. Runtime args: tensor address, first tile, tile count.
// Fault defines (each breaks one device rule, for the runtime's strictness tests):
//   SKIP_READ_BARRIER, RESERVE_TOO_MANY, PUSH_WITHOUT_RESERVE, NULL_WRITE, MISALIGNED_READ, SPIN_WITHOUT_API,
//   ASSERT_TILE_COUNT (ASSERTs that n == 1000). PRINT_COUNT DPRINTs the tile count.
#include "api/dataflow/dataflow_api.h"
#include "api/debug/assert.h"
#include "api/debug/dprint.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t n = get_arg_val<uint32_t>(2);
    const uint32_t tile_bytes = get_tile_size(cb);
    const InterleavedAddrGenFast<true> src = {
        .bank_base_address = src_addr, .page_size = tile_bytes, .data_format = get_dataformat(cb)};
#ifdef PRINT_COUNT
    DPRINT << "tiles " << n << ENDL();
#endif
#ifdef ASSERT_TILE_COUNT
    ASSERT(n == 1000);
#endif
#ifdef NULL_WRITE
    *reinterpret_cast<volatile uint32_t*>(uintptr_t(n - n)) = 1;
#endif
#ifdef SPIN_WITHOUT_API
    volatile uint32_t* flag = reinterpret_cast<volatile uint32_t*>(uintptr_t(get_write_ptr(cb)));
    while (*flag != 0x12345678u) {
    }
#endif
    for (uint32_t i = 0; i < n; ++i) {
#if defined(RESERVE_TOO_MANY)
        cb_reserve_back(cb, 3);
#elif !defined(PUSH_WITHOUT_RESERVE)
        cb_reserve_back(cb, 1);
#endif
#ifdef MISALIGNED_READ
        noc_async_read(get_noc_addr(start + i, src) + 16, get_write_ptr(cb), 64);
#else
        noc_async_read_tile(start + i, src, get_write_ptr(cb));
#endif
#ifndef SKIP_READ_BARRIER
        noc_async_read_barrier();
#endif
        cb_push_back(cb, 1);
    }
}
