// SPDX-License-Identifier: Apache-2.0
//
// Shared by the three paged_update_cache kernels (reader, compute, writer): circular-buffer indices
// (ttdecode/ops/paged_update/program_factory.py, UPDATE_CBS, numbers them the same) and the tile geometry.

#pragma once

#include <stdint.h>

#include "../shared/tile_layout.hpp"

namespace paged_update {

constexpr uint32_t cb_rows = 0;        // bf16, one tile row (d_tiles pages) of a user's new rows (heads in rows)
constexpr uint32_t cb_packed = 1;      // cache format, the same tile row packed by the compute kernel
constexpr uint32_t cb_cache = 2;       // cache format, writer scratch: the cache tile being updated
constexpr uint32_t cb_pos = 3;         // writer scratch: int32 positions of every user
constexpr uint32_t cb_page_table = 4;  // writer scratch (paged only): one user's page-table row

using tile_layout::TILE;  // 32: a tile's rows and columns

// Tile rows a group of `heads` heads fills (heads sit in tile rows, 32 per tile row).
constexpr uint32_t row_tiles(uint32_t heads) { return (heads + TILE - 1) / TILE; }

}  // namespace paged_update
