// SPDX-License-Identifier: Apache-2.0
//
// The named compile-time args the FlashDecode reader and compute kernel both take (ttdecode/ops/flash_decode/
// kernel_args.py: `shape` and `pieces`): the q rows' tiles, the split into pieces and chunks, and what each
// chunk holds. Each kernel's Args derives from PieceArgs and adds its own.

#pragma once

#include <stdint.h>

#include "common.hpp"

namespace flash_decode {

struct PieceArgs {
    // q tile rows per KV group (T x g rows, token-major), and the rows of their tiles: 32, or 16 / 8 (16x32
    // and 8x32 tiles, one q tile row of at most that many q rows)
    static constexpr uint32_t q_tiles = get_named_compile_time_arg_val("q_tiles");
    static constexpr uint32_t q_tile_rows = get_named_compile_time_arg_val("q_tile_rows");
    static constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
    static constexpr uint32_t dv_tiles = get_named_compile_time_arg_val("dv_tiles");
    // pieces per (user, KV head); the fixed chunk (0 = dynamic chunks), the split floor of dynamic chunks and
    // the largest dynamic chunk (plan.chunk_cap); the K/V slots' chunk
    static constexpr uint32_t pieces_per_work = get_named_compile_time_arg_val("pieces_per_work");
    static constexpr uint32_t fixed_chunk_tiles = get_named_compile_time_arg_val("fixed_chunk_tiles");
    static constexpr uint32_t min_chunk_tiles = get_named_compile_time_arg_val("min_chunk_tiles");
    static constexpr uint32_t chunk_cap = get_named_compile_time_arg_val("chunk_cap");
    static constexpr uint32_t max_chunk_tiles = get_named_compile_time_arg_val("max_chunk_tiles");
    // chunks per online-softmax update (plan.softmax_chunks: a softmax block)
    static constexpr uint32_t softmax_chunks = get_named_compile_time_arg_val("softmax_chunks");
    // each token's sliding window in keys (0 = none) and the new tokens per user (multi-token decode); the
    // chunk arithmetic runs on the span of keys the T tokens attend together (common.hpp)
    static constexpr uint32_t token_window = get_named_compile_time_arg_val("token_window");
    static constexpr uint32_t tokens = get_named_compile_time_arg_val("tokens");
    static constexpr uint32_t window = span_window(token_window, tokens);
    // a piece takes every p'-th key tile (kv_pages "key_row"); the device's DRAM banks (the cyclic split's
    // multiple, the banks pages are dealt over)
    static constexpr bool cyclic_split = get_named_compile_time_arg_val("cyclic_split") == 1;
    static constexpr uint32_t dram_banks = get_named_compile_time_arg_val("dram_banks");
    // key_row pages of a paged cache: each piece reads the tiles of its own banks, its chunks, masks and
    // children in the reader's views (common.hpp BankView)
    static constexpr bool bank_local = get_named_compile_time_arg_val("bank_local") == 1;
    // attention sink logits; V = K[..., :Dv] (no V reads, P . V reads the K slot); an additive mask streamed
    // with K and added to the scores
    static constexpr bool has_sink = get_named_compile_time_arg_val("has_sink") == 1;
    static constexpr bool mla = get_named_compile_time_arg_val("mla") == 1;
    static constexpr bool has_attn_mask = get_named_compile_time_arg_val("has_attn_mask") == 1;
};

}  // namespace flash_decode
