// Test kernel (writer of core A): increments semaphore 0 of core B, then semaphore 0 of core C, and
// waits for both increments with noc_async_atomic_barrier. Between the two it waits for the first
// (noc_async_atomic_barrier), so C may rely on B's increment having landed once it sees its own.
// Runtime args: B's NoC x, y, C's NoC x, y.
// Fault define: SKIP_FIRST_ATOMIC_BARRIER (no barrier between the two: C's increment may land first).
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    const uint32_t bx = get_arg_val<uint32_t>(0);
    const uint32_t by = get_arg_val<uint32_t>(1);
    const uint32_t cx = get_arg_val<uint32_t>(2);
    const uint32_t cy = get_arg_val<uint32_t>(3);
    noc_semaphore_inc(get_noc_addr(bx, by, get_semaphore(0)), 1);
#ifndef SKIP_FIRST_ATOMIC_BARRIER
    noc_async_atomic_barrier();
#endif
    noc_semaphore_inc(get_noc_addr(cx, cy, get_semaphore(0)), 1);
    noc_async_atomic_barrier();
}
