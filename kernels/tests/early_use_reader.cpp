// Test kernel (reader): reads tiles 0 and 1 of an interleaved DRAM tensor into pages 0 and 1 of CB `cb`
// and copies page 0 into page 2 with the CPU, then pushes the three pages.
// Compile-time args: cb. Runtime args: tensor address.
// Fault defines: COPY_BEFORE_BARRIER (copies page 0 after issuing both reads but before
// noc_async_read_barrier: the copy sees whatever page 0 holds while the read is in flight);
// REREAD_AFTER_PUSH (after the push, reads tile 1 into page 0 again, which the writer may be reading).
#include "api/dataflow/dataflow_api.h"

namespace {
void copy_page(uint32_t dst, uint32_t src, uint32_t bytes) {
    volatile tt_l1_ptr uint32_t* d = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(dst);
    volatile tt_l1_ptr uint32_t* s = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(src);
    for (uint32_t i = 0; i < bytes / 4; ++i) {
        d[i] = s[i];
    }
}
}  // namespace

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    const uint32_t page = get_tile_size(cb);
    const InterleavedAddrGen<true> src = {.bank_base_address = src_addr, .page_size = page};
    cb_reserve_back(cb, 3);
    const uint32_t base = get_write_ptr(cb);
    noc_async_read(get_noc_addr(0, src), base, page);
    noc_async_read(get_noc_addr(1, src), base + page, page);
#ifdef COPY_BEFORE_BARRIER
    copy_page(base + 2 * page, base, page);
    noc_async_read_barrier();
#else
    noc_async_read_barrier();
    copy_page(base + 2 * page, base, page);
#endif
    cb_push_back(cb, 3);
#ifdef REREAD_AFTER_PUSH
    noc_async_read(get_noc_addr(1, src), base, page);
    noc_async_read_barrier();
#endif
}
