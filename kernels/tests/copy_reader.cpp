// Test kernel: reads tiles [start, start + n) of an interleaved DRAM tensor into CB `cb`, one page at a time.
// Compile-time args: cb. Runtime args: tensor address, first tile, tile count.
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t n = get_arg_val<uint32_t>(2);
    const InterleavedAddrGenFast<true> src = {
        .bank_base_address = src_addr, .page_size = (uint32_t)get_tile_size(cb), .data_format = get_dataformat(cb)};
    for (uint32_t i = 0; i < n; ++i) {
        cb_reserve_back(cb, 1);
        noc_async_read_tile(start + i, src, get_write_ptr(cb));
        noc_async_read_barrier();
        cb_push_back(cb, 1);
    }
}
