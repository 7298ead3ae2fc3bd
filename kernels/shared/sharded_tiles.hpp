// SPDX-License-Identifier: Apache-2.0
//
// Tiles of a height-sharded L1 tensor (ttnn's HEIGHT_SHARDED L1 memory config, ROW_MAJOR shard
// orientation), addressed like an InterleavedAddrGen: page p lies in shard p / shard_pages, at
// (p % shard_pages) * page_bytes from the shards' L1 address (the same on every holder), in the L1 of
// that shard's holder. The holders' NoC coordinates are common runtime args from `coord_arg` on: x then
// y per holder, in shard order. A dataflow kernel reads or writes a page where it lies.

#pragma once

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"

template <uint32_t shard_pages, uint32_t page_bytes>
struct ShardedTiles {
    uint32_t base;       // the shards' L1 address
    uint32_t coord_arg;  // common runtime arg index of holder 0's NoC x

    uint64_t get_noc_addr(uint32_t page, uint32_t offset = 0) const {
        const uint32_t shard = page / shard_pages;
        const uint32_t x = get_common_arg_val<uint32_t>(coord_arg + 2 * shard);
        const uint32_t y = get_common_arg_val<uint32_t>(coord_arg + 2 * shard + 1);
        return ::get_noc_addr(x, y, base + (page % shard_pages) * page_bytes + offset);
    }
};
