// Test kernel (writer of core A): waits until core B has reserved its CB page (semaphore 0 here), writes
// the page of CB `cb` into B's CB, then signals B through B's semaphore 1.
// Compile-time args: cb. Runtime args: B's NoC x, B's NoC y.
// Fault defines: SKIP_WRITE_BARRIER (signal before the write lands), WRITE_OUTSIDE_L1 (target an address
// past B's CBs).
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t bx = get_arg_val<uint32_t>(0);
    const uint32_t by = get_arg_val<uint32_t>(1);
    const uint32_t page = get_tile_size(cb);
    volatile tt_l1_ptr uint32_t* ready = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(0));
    cb_wait_front(cb, 1);
    noc_semaphore_wait(ready, 1);
    // Both cores have the same CB layout, so B's first page sits at our CB's base address.
    uint32_t dst = get_read_ptr(cb);
#ifdef WRITE_OUTSIDE_L1
    dst += 64 * 1024;
#endif
    noc_async_write(get_read_ptr(cb), get_noc_addr(bx, by, dst), page);
#ifndef SKIP_WRITE_BARRIER
    noc_async_write_barrier();
#endif
    noc_semaphore_inc(get_noc_addr(bx, by, get_semaphore(1)), 1);
    noc_async_atomic_barrier();
#ifdef SKIP_WRITE_BARRIER
    noc_async_write_barrier();
#endif
    cb_pop_front(cb, 1);
}
