// Test kernel (writer of core A): streams `n` tiles of its CB `cb` into the same CB of core B, one
// page per tile. B reserves a page and counts it on A's semaphore 0; A writes the tile into that
// page and counts it on B's semaphore 1. Both cores have the same CB layout, so B's page for tile i
// is at A's read pointer for tile i.
// Compile-time args: cb. Runtime args: B's NoC x, B's NoC y, n.
// Fault define: SIGNAL_BEFORE_WRITE (counts the tile on B's semaphore before writing it: B may hand
// the page to its consumer before the data is there).
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t bx = get_arg_val<uint32_t>(0);
    const uint32_t by = get_arg_val<uint32_t>(1);
    const uint32_t n = get_arg_val<uint32_t>(2);
    const uint32_t page = get_tile_size(cb);
    volatile tt_l1_ptr uint32_t* reserved = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(0));
    const uint64_t arrived = get_noc_addr(bx, by, get_semaphore(1));
    for (uint32_t i = 0; i < n; ++i) {
        cb_wait_front(cb, 1);
        noc_semaphore_wait_min(reserved, i + 1);
        const uint32_t src = get_read_ptr(cb);
#ifdef SIGNAL_BEFORE_WRITE
        noc_semaphore_inc(arrived, 1);
        noc_async_atomic_barrier();
        noc_async_write(src, get_noc_addr(bx, by, src), page);
        noc_async_write_barrier();
#else
        noc_async_write(src, get_noc_addr(bx, by, src), page);
        noc_async_write_barrier();
        noc_semaphore_inc(arrived, 1);
        noc_async_atomic_barrier();
#endif
        cb_pop_front(cb, 1);
    }
}
