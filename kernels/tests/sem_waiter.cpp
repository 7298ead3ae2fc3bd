// Test kernel: waits until its semaphore 0 reaches 1.
#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    noc_semaphore_wait_min(reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(0)), 1);
}
