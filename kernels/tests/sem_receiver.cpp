// Test kernel (reader of core B): reserves a page of CB `cb`, tells core A (its semaphore 0), waits until
// A has written the page and signalled semaphore 1 here, then pushes the page.
// Compile-time args: cb. Runtime args: A's NoC x, A's NoC y.
// Fault define: NEVER_SIGNAL (does not tell A, so both cores wait forever).
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t ax = get_arg_val<uint32_t>(0);
    const uint32_t ay = get_arg_val<uint32_t>(1);
    volatile tt_l1_ptr uint32_t* arrived = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(1));
    cb_reserve_back(cb, 1);
#ifndef NEVER_SIGNAL
    noc_semaphore_inc(get_noc_addr(ax, ay, get_semaphore(0)), 1);
    noc_async_atomic_barrier();
#else
    (void)ax;
    (void)ay;
#endif
    noc_semaphore_wait(arrived, 1);
    noc_semaphore_set(arrived, 0);
    cb_push_back(cb, 1);
}
