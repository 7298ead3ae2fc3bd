// Test kernel (reader of core C): waits until its semaphore 0 reaches 1, then reads semaphore 0 of
// core B (its 16-byte slot) over the NoC into the first bytes of a page of CB `cb` and pushes it.
// Compile-time args: cb. Runtime args: B's NoC x, y.
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t bx = get_arg_val<uint32_t>(0);
    const uint32_t by = get_arg_val<uint32_t>(1);
    noc_semaphore_wait_min(reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(0)), 1);
    cb_reserve_back(cb, 1);
    noc_async_read(get_noc_addr(bx, by, get_semaphore(0)), get_write_ptr(cb), 16);
    noc_async_read_barrier();
    cb_push_back(cb, 1);
}
