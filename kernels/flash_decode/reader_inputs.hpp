// SPDX-License-Identifier: Apache-2.0
//
// The FlashDecode reader's runtime args (reader.cpp; ttdecode/ops/flash_decode/program_factory.py sets
// them): the common ones (the same on every core, so a cached program patches them once per call) name the
// tensors, the per-core ones the core's pieces.

#pragma once

#include <stdint.h>

#include "api/dataflow/dataflow_api.h"
#include "../shared/sharded_tiles.hpp"

namespace flash_decode {

// Internal linkage, as in the one file these pieces serve (reader.cpp): the inliner sees every call.
namespace {

// Common runtime args: the tensors' addresses, then with positions_in_args the B positions themselves.
constexpr uint32_t positions_arg_base = 7;

// The tensors the reader reads, as address generators over the common runtime args' addresses.
template <class Args>
struct ReaderTensors {
#ifdef Q_SHARDS  // Q height-sharded in L1 (nlp_create_qkv_heads_decode's placement): read from its holders
    using QGen = ShardedTiles<Q_SHARD_PAGES, Args::q_tile_bytes>;
#else
    using QGen = InterleavedAddrGen<true>;
#endif
    QGen q;
    InterleavedAddrGen<true> k;
    InterleavedAddrGen<true> v;
    // The sink tiles [NH, 32] bf16: the same tile rows as one user's Q with a single column tile.
    InterleavedAddrGen<true> sink;
    // The mask [B or 1, 1, NH, S] bf16: one [NH, S] matrix per mask batch, tile rows are heads.
    InterleavedAddrGen<true> mask;
    InterleavedAddrGen<true> pos;
    // The page table is row-major int32 [B, max_blocks]: one page per user.
    InterleavedAddrGen<true> page_table;

    static ReaderTensors from_common_args() {
        const uint32_t q_addr = get_common_arg_val<uint32_t>(0);
        const uint32_t k_addr = get_common_arg_val<uint32_t>(1);
        const uint32_t v_addr = get_common_arg_val<uint32_t>(2);
        const uint32_t pos_addr = get_common_arg_val<uint32_t>(3);         // 0 with positions_in_args
        const uint32_t page_table_addr = get_common_arg_val<uint32_t>(4);  // 0 without a paged cache
        const uint32_t sink_addr = get_common_arg_val<uint32_t>(5);        // 0 without an attention sink
        const uint32_t mask_addr = get_common_arg_val<uint32_t>(6);        // 0 without an attn_mask
        constexpr uint32_t kv_tile_bytes = Args::kv_tile_bytes;
        return ReaderTensors{
#ifdef Q_SHARDS
            {q_addr, Q_SHARD_ARGS},
#else
            {.bank_base_address = q_addr, .page_size = Args::q_tile_bytes},
#endif
            {.bank_base_address = k_addr,
             .page_size = Args::key_row_pages ? Args::d_tiles * kv_tile_bytes : kv_tile_bytes},
            {.bank_base_address = v_addr,
             .page_size = Args::key_row_pages ? Args::dv_tiles * kv_tile_bytes : kv_tile_bytes},
            {.bank_base_address = sink_addr, .page_size = Args::q_tile_bytes},
            {.bank_base_address = mask_addr, .page_size = Args::q_tile_bytes},
            {.bank_base_address = pos_addr, .page_size = Args::pos_bytes},
            {.bank_base_address = page_table_addr, .page_size = Args::page_table_row_bytes},
        };
    }
};

// Per-core runtime args: the number of pieces, then (user, KV head, piece index) per piece.
struct Pieces {
    uint32_t count;

    static uint32_t arg(uint32_t p, uint32_t i) { return get_arg_val<uint32_t>(1 + p * 3 + i); }
    static uint32_t user(uint32_t p) { return arg(p, 0); }
    static uint32_t kv_head(uint32_t p) { return arg(p, 1); }
    static uint32_t index(uint32_t p) { return arg(p, 2); }
};

}  // namespace

}  // namespace flash_decode
