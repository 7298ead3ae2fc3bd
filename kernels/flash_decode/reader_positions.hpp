// SPDX-License-Identifier: Apache-2.0
//
// The FlashDecode reader's positions (reader.cpp): the users' positions read once (the cur_pos tensor, or
// the common runtime args of a list), guarded, and handed to the compute kernel and the writer, which derive
// the same chunk ranges from them. Positions and page tables are not checked on the host when they live on
// the device: a position outside -1..S-1 (or before the first of T tokens), or a page id outside the pool
// in the blocks a user attends, skips the user (-1) for all three kernels, so no read or write ever leaves
// the tensors. Every core serving a user sees the same position and page-table row, so all its pieces
// agree. Valid inputs pass unchanged.

#pragma once

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "common.hpp"
#include "reader_inputs.hpp"

namespace flash_decode {

// The positions into cb_pos_compute's page at pos_l1 (reserved by the caller), guarded. `row_ahead`: the
// user whose page-table row the pass takes first (batch: none); it lands in cb_page_table's first page under
// the positions' barrier, one DRAM latency for both.
template <class Args, class Tensors>
void read_positions(const Tensors& io, uint32_t pos_l1, uint32_t row_ahead) {
    volatile tt_l1_ptr int32_t* positions = reinterpret_cast<volatile tt_l1_ptr int32_t*>(pos_l1);
    if constexpr (Args::positions_in_args) {
        // Positions given as a list travel as common runtime args (no tensor, nothing uploaded).
        for (uint32_t b = 0; b < Args::batch; ++b) {
            positions[b] = (int32_t)get_common_arg_val<uint32_t>(positions_arg_base + b);
        }
    } else {
        if constexpr (Args::paged) {
            if (row_ahead < Args::batch) {
                noc_async_read(io.page_table.get_noc_addr(row_ahead), get_write_ptr(cb_page_table),
                               Args::page_table_row_bytes);
            }
        }
        noc_async_read(io.pos.get_noc_addr(0), pos_l1, Args::pos_bytes);
        noc_async_read_barrier();
    }
    // The guard on the positions themselves.
    for (uint32_t b = 0; b < Args::batch; ++b) {
        const int32_t pos = positions[b];
        if (pos < -1 || pos >= (int32_t)(Args::seq_tiles * TILE) || (pos >= 0 && pos < (int32_t)Args::tokens - 1)) {
            positions[b] = -1;
        }
    }
}

// Whether page-table entries first_block..last_block of a row all name a block inside the pool.
template <class Args>
bool blocks_inside(volatile tt_l1_ptr int32_t* row, uint32_t first_block, uint32_t last_block) {
    for (uint32_t j = first_block; j <= last_block; ++j) {
        if (row[j] < 0 || row[j] >= (int32_t)Args::num_blocks) {
            return false;
        }
    }
    return true;
}

// The guard on a page-table row: the user at `pos` (>= 0) is skipped (-1) unless every block it attends is
// inside the pool.
template <class Args>
void guard_row(volatile tt_l1_ptr int32_t* row, volatile tt_l1_ptr int32_t* positions, uint32_t user,
               int32_t pos) {
    if (!blocks_inside<Args>(row, window_first_key(pos, Args::window) / Args::block_positions,
                             (uint32_t)pos / Args::block_positions)) {
        positions[user] = -1;
    }
}

// Whether the blocks of key tile `key` that the user at `pos` (>= 0) attends are inside the pool (the entries
// its reads take: with 16-position blocks, only the attended halves').
template <class Args>
bool tile_inside(volatile tt_l1_ptr int32_t* row, int32_t pos, uint32_t key) {
    const uint32_t first_block = window_first_key(pos, Args::window) / Args::block_positions;
    const uint32_t last_block = (uint32_t)pos / Args::block_positions;
    const uint32_t lo = key * TILE / Args::block_positions;
    const uint32_t hi = (key * TILE + TILE - 1) / Args::block_positions;
    return blocks_inside<Args>(row, lo > first_block ? lo : first_block, hi < last_block ? hi : last_block);
}

// The guarded positions to the writer's copy of the page, and both pages pushed.
template <class Args>
void push_positions(volatile tt_l1_ptr int32_t* positions) {
    volatile tt_l1_ptr int32_t* writer_positions =
        reinterpret_cast<volatile tt_l1_ptr int32_t*>(get_write_ptr(cb_pos_writer));
    for (uint32_t b = 0; b < Args::batch; ++b) {
        writer_positions[b] = positions[b];
    }
    cb_push_back(cb_pos_compute, 1);
    cb_push_back(cb_pos_writer, 1);
}

}  // namespace flash_decode
