// SPDX-License-Identifier: Apache-2.0
//
// Shared by the two paged_fill_cache kernels (reader, writer): circular-buffer indices
// (ttdecode/ops/paged_fill/program_factory.py, FILL_CBS, numbers them the same) and the work split.

#pragma once

#include <stdint.h>

namespace paged_fill {

constexpr uint32_t cb_rows = 0;        // the pool's format: key-tile rows of the prompt, d_tiles pages each
constexpr uint32_t cb_page_table = 1;  // writer scratch: the user's page-table row (int32)

constexpr uint32_t TILE = 32;

}  // namespace paged_fill
