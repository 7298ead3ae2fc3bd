// SPDX-License-Identifier: Apache-2.0
//
// Shared by the three paged_update_cache kernels (reader, compute, writer): circular-buffer indices
// (ttdecode/ops/paged_update/program_factory.py, UPDATE_CBS, numbers them the same) and the tile geometry.

#pragma once

#include <stdint.h>

namespace paged_update {

constexpr uint32_t cb_rows = 0;        // bf16, one tile row (d_tiles pages) of a user's new rows (heads in rows)
constexpr uint32_t cb_packed = 1;      // cache format, the same tile row packed by the compute kernel
constexpr uint32_t cb_cache = 2;       // cache format, writer scratch: the cache tile being updated
constexpr uint32_t cb_pos = 3;         // writer scratch: int32 positions of every user
constexpr uint32_t cb_page_table = 4;  // writer scratch (paged only): one user's page-table row

constexpr uint32_t TILE = 32;
constexpr uint32_t FACE = 16;

// Offset (in values) of the 16 values of tile row `row`, columns [16 * half, 16 * half + 16), in a
// tile's face-major order: faces 0/1 hold rows 0-15, faces 2/3 rows 16-31.
inline uint32_t face_row_offset(uint32_t row, uint32_t half) {
    return ((row / FACE) * 2 + half) * FACE * FACE + (row % FACE) * FACE;
}

// Tile rows a group of `heads` heads fills (heads sit in tile rows, 32 per tile row).
constexpr uint32_t row_tiles(uint32_t heads) { return (heads + TILE - 1) / TILE; }

}  // namespace paged_update
