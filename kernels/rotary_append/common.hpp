// SPDX-License-Identifier: Apache-2.0
//
// Shared by the three rotary_kv_append kernels (reader, compute, writer): circular-buffer indices
// (ttdecode/rotary.py, ROTARY_CBS, numbers them the same) and the tile-row geometry.

#pragma once

#include <stdint.h>

#include "../shared/tile_layout.hpp"

namespace rotary_append {

constexpr uint32_t cb_cos = 0;         // fp32, one user's cos row replicated over 32 rows, rot_tiles pages
constexpr uint32_t cb_sin = 1;         // fp32, the same for sin
constexpr uint32_t cb_x = 2;           // bf16, one tile row (d_tiles pages) of a user's q / k / v heads
constexpr uint32_t cb_trans = 3;       // bf16, the rotate-half blocks (entries 0, +1, -1), one per pair
constexpr uint32_t cb_q_out = 4;       // bf16, one rotated q tile row
constexpr uint32_t cb_k_out = 5;       // cache format, one rotated k tile row (heads in rows)
constexpr uint32_t cb_v_out = 6;       // cache format, one v tile row
constexpr uint32_t cb_cache = 7;       // cache format, writer scratch: the cache tile being updated
constexpr uint32_t cb_pos = 8;         // writer scratch: int32 positions of every user
constexpr uint32_t cb_page_table = 9;  // writer scratch (paged only): one user's page-table row

using tile_layout::FACE;             // 16: a face's rows and columns
using tile_layout::TILE;             // 32: a tile's rows and columns
using tile_layout::face_row_offset;  // (row, column half) -> the 16 values' offset in a tile, face-major

// Tile rows a group of `heads` heads fills (heads sit in tile rows, 32 per tile row).
constexpr uint32_t row_tiles(uint32_t heads) { return (heads + TILE - 1) / TILE; }

}  // namespace rotary_append
