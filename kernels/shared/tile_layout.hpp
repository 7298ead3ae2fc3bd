// SPDX-License-Identifier: Apache-2.0
//
// Tile geometry shared by every operator's kernels: a 32x32 tile is four 16x16 faces, each
// row-major (face 0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right).

#pragma once

#include <stdint.h>

namespace tile_layout {

constexpr uint32_t TILE = 32;
constexpr uint32_t FACE = 16;

// ---- tile geometry ------------------------------------------------------------------------------

// Element offset of (row, column half) inside a 32x32 tile: four 16x16 faces, each row-major.
// column_half 0 holds columns 0..15, 1 holds columns 16..31.
inline uint32_t face_row_offset(uint32_t row, uint32_t column_half) {
    return ((row / FACE) * 2 + column_half) * FACE * FACE + (row % FACE) * FACE;
}

// The same inside a tile of `tile_rows` rows: 32 and 16 (a 16x32 tile is faces 0-1 of a 32x32 one)
// as above; 8 (an 8x32 tile: two faces of 8 rows, face_r_dim 8): column half h at h x 8 x 16.
template <uint32_t tile_rows>
inline uint32_t tile_row_offset(uint32_t row, uint32_t column_half) {
    static_assert(tile_rows == 32 || tile_rows == 16 || tile_rows == 8, "tiles have 32, 16 or 8 rows");
    constexpr uint32_t face_rows = tile_rows < FACE ? tile_rows : FACE;
    return ((row / face_rows) * 2 + column_half) * face_rows * FACE + (row % face_rows) * FACE;
}

// Rows that can move as one block from source row `src_row` to destination row `dst_row`: the
// face rows stay contiguous in both tiles until either crosses a face (16-row) boundary.
inline uint32_t row_run(uint32_t src_row, uint32_t dst_row, uint32_t rows_left) {
    const uint32_t src_room = FACE - src_row % FACE;
    const uint32_t dst_room = FACE - dst_row % FACE;
    uint32_t n = src_room < dst_room ? src_room : dst_room;
    return n < rows_left ? n : rows_left;
}

}  // namespace tile_layout
