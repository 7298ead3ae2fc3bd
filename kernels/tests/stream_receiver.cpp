// Test kernel (reader of core B): receives `n` tiles from core A into CB `cb`: for each, reserves a
// page, counts it on A's semaphore 0, waits until A has counted the tile on semaphore 1 here, and
// pushes the page to B's writer.
// Compile-time args: cb. Runtime args: A's NoC x, A's NoC y, n.
// Fault defines: SIGNAL_BEFORE_RESERVE (tells A a page is free before cb_reserve_back has made sure
// the writer popped it); PUSH_BEFORE_DATA (pushes the page first and tells A afterwards: A writes into
// a page the writer already holds).
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t ax = get_arg_val<uint32_t>(0);
    const uint32_t ay = get_arg_val<uint32_t>(1);
    const uint32_t n = get_arg_val<uint32_t>(2);
    volatile tt_l1_ptr uint32_t* arrived = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(1));
    const uint64_t reserved = get_noc_addr(ax, ay, get_semaphore(0));
    for (uint32_t i = 0; i < n; ++i) {
#if defined(SIGNAL_BEFORE_RESERVE)
        noc_semaphore_inc(reserved, 1);
        noc_async_atomic_barrier();
        cb_reserve_back(cb, 1);
        noc_semaphore_wait_min(arrived, i + 1);
        cb_push_back(cb, 1);
#elif defined(PUSH_BEFORE_DATA)
        cb_reserve_back(cb, 1);
        cb_push_back(cb, 1);
        noc_semaphore_inc(reserved, 1);
        noc_async_atomic_barrier();
        noc_semaphore_wait_min(arrived, i + 1);
#else
        cb_reserve_back(cb, 1);
        noc_semaphore_inc(reserved, 1);
        noc_async_atomic_barrier();
        noc_semaphore_wait_min(arrived, i + 1);
        cb_push_back(cb, 1);
#endif
    }
}
