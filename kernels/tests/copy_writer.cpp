// Test kernel: writes n pages of CB `cb` to tiles [start, start + n) of an interleaved DRAM tensor.
// Compile-time args: cb. Runtime args: tensor address, first tile, tile count.
// Fault defines: POP_TOO_MANY, POP_BEFORE_WRITE_BARRIER, READ_PTR_WITHOUT_WAIT, END_WITH_RESERVED_PAGE.
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t dst_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t n = get_arg_val<uint32_t>(2);
    const uint32_t page = get_tile_size(cb);
    const InterleavedAddrGen<true> dst = {.bank_base_address = dst_addr, .page_size = page};
#ifdef READ_PTR_WITHOUT_WAIT
    (void)get_read_ptr(cb);
#endif
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(cb, 1);
        noc_async_write(get_read_ptr(cb), get_noc_addr(start + i, dst), page);
#ifdef POP_BEFORE_WRITE_BARRIER
        cb_pop_front(cb, 1);
        noc_async_write_barrier();
#else
        noc_async_write_barrier();
#ifdef POP_TOO_MANY
        cb_pop_front(cb, 2);
#else
        cb_pop_front(cb, 1);
#endif
#endif
    }
#ifdef END_WITH_RESERVED_PAGE
    cb_reserve_back(cb, 1);
#endif
}
