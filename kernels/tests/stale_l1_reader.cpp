// Test kernel (reader): hands one page of CB `cb` to the writer after writing only its first `n`
// bytes (bf16 1.0 in every value), so the rest of the page is whatever L1 held at program start.
// Compile-time args: cb. Runtime args: bytes to write (a multiple of 2).
// Fault define: READ_ABOVE_CBS (reads a word 64 KiB past the CB's page, L1 that no CB or semaphore owns).
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    constexpr uint32_t cb = get_compile_time_arg_val(0);
    const uint32_t n = get_arg_val<uint32_t>(0);
    cb_reserve_back(cb, 1);
    volatile tt_l1_ptr uint16_t* page = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(get_write_ptr(cb));
    for (uint32_t i = 0; i < n / 2; ++i) {
        page[i] = 0x3F80;
    }
#ifdef READ_ABOVE_CBS
    page[0] = *reinterpret_cast<volatile tt_l1_ptr uint16_t*>(get_write_ptr(cb) + 64 * 1024);
#endif
    cb_push_back(cb, 1);
}
