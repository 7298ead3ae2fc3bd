// Kernel assertions for the ttdecode host runtime: a failed ASSERT stops the run with a KernelError
// naming the core, the kernel and the condition (on the device ASSERT is only active under the watcher).
#pragma once

#include "ttrt/abi.h"

#define TTRT_STR2(x) #x
#define TTRT_STR(x) TTRT_STR2(x)
#define ASSERT(condition, ...)                                                                  \
    do {                                                                                        \
        if (!(condition)) ttrt_fail("ASSERT failed: " #condition " (" __FILE__ ":" TTRT_STR(__LINE__) ")"); \
    } while (0)
