// Test kernel (writer of core B): writes `n` pages of CB `cb` to tiles [0, n) of an interleaved DRAM
// tensor; before using page i it also waits until semaphore 1 here counts i + 1 arrivals (so it only
// reads data that has landed, whenever the page was pushed).
// Compile-time args: cb. Runtime args: tensor address, n.
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t dst_addr = get_arg_val<uint32_t>(0);
    const uint32_t n = get_arg_val<uint32_t>(1);
    const uint32_t page = get_tile_size(cb);
    const InterleavedAddrGen<true> dst = {.bank_base_address = dst_addr, .page_size = page};
    volatile tt_l1_ptr uint32_t* arrived = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(1));
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(cb, 1);
        noc_semaphore_wait_min(arrived, i + 1);
        noc_async_write(get_read_ptr(cb), get_noc_addr(i, dst), page);
        noc_async_write_barrier();
        cb_pop_front(cb, 1);
    }
}
