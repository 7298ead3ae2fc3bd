// Error reports and run outputs of the ttdecode host runtime (files read by ttdecode/runtime/driver.py).
#pragma once

#include <string>

#include "engine.hpp"

namespace ttrt {

// Writes <out_dir>/error.json: kind, message, the failing kernel (if any) and the state of every
// kernel. Safe to call from a signal handler in practice (no allocation-free guarantee).
void write_error_report(const char* kind, const std::string& message, const Kernel* failing);

// Writes the DRAM tensors that changed, counters.txt and events.bin into <out_dir>.
void write_outputs();

}  // namespace ttrt
