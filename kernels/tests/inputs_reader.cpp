// Test kernel: feeds several input tensors to their CBs tile by tile, interleaved (tile t of every
// input before tile t + 1), so a compute kernel can consume them together.
// Runtime args: input count, then per input: tensor address, CB index, tile count.
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    const uint32_t num_inputs = get_arg_val<uint32_t>(0);
    uint32_t most = 0;
    for (uint32_t j = 0; j < num_inputs; ++j) {
        const uint32_t count = get_arg_val<uint32_t>(1 + 3 * j + 2);
        most = count > most ? count : most;
    }
    for (uint32_t t = 0; t < most; ++t) {
        for (uint32_t j = 0; j < num_inputs; ++j) {
            const uint32_t addr = get_arg_val<uint32_t>(1 + 3 * j);
            const uint32_t cb = get_arg_val<uint32_t>(1 + 3 * j + 1);
            const uint32_t count = get_arg_val<uint32_t>(1 + 3 * j + 2);
            if (t >= count) continue;
            const InterleavedAddrGenFast<true> src = {
                .bank_base_address = addr, .page_size = (uint32_t)get_tile_size(cb), .data_format = get_dataformat(cb)};
            cb_reserve_back(cb, 1);
            noc_async_read_tile(t, src, get_write_ptr(cb));
            noc_async_read_barrier();
            cb_push_back(cb, 1);
        }
    }
}
