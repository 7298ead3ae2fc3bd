// SPDX-License-Identifier: Apache-2.0
//
// FlashDecode compute (TRISC0-2). For each piece placed on this core, in the order of its runtime args:
// an online softmax over the piece's K/V chunks, one q tile row at a time (Q . K^T, scale, masks, the
// running max m, row sum l and output O); then the merge of its children's partials in tree order; then,
// at the root, the attention sink (if any) and the normalized bf16 output and float32 LSE, else the float32
// partial (O, m, l) for the parent. Sliding windows, an attn_mask, several tokens per user, MLA (V read out
// of the K slot) and a pre-scaled Q are named compile-time args.
//
// Contract: the reader pushes each piece's Q and, chunk by chunk, K then V (ones tiles at the end of each
// V key-tile row, except with MLA); the writer pushes the constant and mask tiles and the children's
// partials, all in the plan's order. The CBs, their tile shapes and the compile-time args are those of
// ttdecode/ops/flash_decode/program_factory.py; the fp32 CBs read only by copy / broadcast must be UnpackToDestFp32
// (UNPACK_TO_DEST_CBS). Chunk ranges are recomputed from cur_pos with kernels/flash_decode/common.hpp.
// Every statistic, rescale and merge is fp32 on the SFPU; the output is rounded once, to bf16. Why, and
// what each mode changes: tech_report/flashdecode.md, section 9.1 "The FlashDecode compute kernel".

#include <stdint.h>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/cb_api.h"
#include "api/compute/reg_api.h"
#include "api/compute/pack.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"
#include "api/compute/matmul.h"
#include "api/compute/reduce.h"
#include "api/compute/bcast.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/binary_max_min.h"
#include "api/compute/eltwise_binary_sfpu.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/eltwise_unary/recip.h"
#include "api/compute/eltwise_unary/binop_with_scalar.h"
#include "api/compute/eltwise_unary/addcmul.h"
#include "common.hpp"
#include "../shared/compute_tiles.hpp"

using namespace flash_decode;
using namespace compute_tiles;

namespace {

constexpr uint32_t q_tiles = get_named_compile_time_arg_val("q_tiles");
constexpr uint32_t d_tiles = get_named_compile_time_arg_val("d_tiles");
constexpr uint32_t dv_tiles = get_named_compile_time_arg_val("dv_tiles");
constexpr uint32_t max_chunk_tiles = get_named_compile_time_arg_val("max_chunk_tiles");
constexpr uint32_t fixed_chunk_tiles = get_named_compile_time_arg_val("fixed_chunk_tiles");
constexpr uint32_t pieces_per_work = get_named_compile_time_arg_val("pieces_per_work");
constexpr uint32_t dst_tiles = get_named_compile_time_arg_val("dst_tiles");  // usable DST tiles (4 with fp32, half-sync)
constexpr uint32_t scale_bits = get_named_compile_time_arg_val("scale_bits");  // float32 bits of the softmax scale
constexpr uint32_t scale_m1_bits = get_named_compile_time_arg_val("scale_m1_bits");  // fp32(scale) - 1 (16-bit DST)
constexpr bool return_lse = get_named_compile_time_arg_val("return_lse") == 1;
constexpr uint32_t token_window = get_named_compile_time_arg_val("token_window");  // each token's sliding window in keys (0 = none)
constexpr bool has_sink = get_named_compile_time_arg_val("has_sink") == 1;
constexpr bool exp_approx = get_named_compile_time_arg_val("exp_approx") == 1;  // exp_tile<approx> (exp_approx_mode)
constexpr bool mla = get_named_compile_time_arg_val("mla") == 1;  // V = K[..., :Dv]: P . V reads the K slot
constexpr bool has_attn_mask = get_named_compile_time_arg_val("has_attn_mask") == 1;  // add the streamed attn_mask tiles
// A row may see no key at all in a piece (a fully masked head): keep its max finite and its 1/l safe.
constexpr bool guard_empty_rows = get_named_compile_time_arg_val("guard_empty_rows") == 1;
constexpr uint32_t tokens = get_named_compile_time_arg_val("tokens");  // new tokens per user (multi-token decode)
// The chunk arithmetic runs on the span of keys the T tokens attend together (common.hpp).
constexpr uint32_t window = span_window(token_window, tokens);
constexpr uint32_t min_chunk_tiles = get_named_compile_time_arg_val("min_chunk_tiles");  // split floor of dynamic chunks
constexpr uint32_t chunk_cap = get_named_compile_time_arg_val("chunk_cap");  // largest dynamic chunk (plan.chunk_cap)
constexpr bool cyclic_split = get_named_compile_time_arg_val("cyclic_split") == 1;  // a piece takes every p'-th key tile
// 1 when the q rows that hold heads (tokens x group_size) are at most 16: they all lie in faces 0 and 1
// of a q tile (one q tile row then), so the softmax's row-wise SFPU ops run VectorMode::R (faces 0-1,
// half the vector steps). Rows 16-31 are zero q rows: every op is row by row, so whatever they then
// hold (un-exponentiated differences) stays in rows that are never output.
constexpr uint32_t head_rows = get_named_compile_time_arg_val("head_rows");  // T x g, at most 32
constexpr uint32_t to_dest_cbs = get_named_compile_time_arg_val("to_dest_cbs");  // bit per UnpackToDestFp32 CB
// The scale is +-2^k: each piece's Q is multiplied by it once into cb_q_scaled (exact in bf16: only the
// exponents change), and Q . K^T then gives the scaled fp32 scores bit for bit (scaling by 2^k commutes
// with the matmul's products and fp32 sums, subnormal results aside), without a scale op per score tile.
constexpr bool q_prescaled = get_named_compile_time_arg_val("q_prescaled") == 1;
constexpr uint32_t cb_q_in0 = q_prescaled ? cb_q_scaled : cb_q;  // Q . K^T's in0
constexpr bool half_tile = head_rows <= 16;
// Rows of the q-row CBs' tiles (plan.q_tile_rows): 16 = 16x32 tiles (faces 0-1), 8 = 8x32 tiles (rows
// 0-7 of faces 0-1). The unpackers, the FPU and the packer take each CB's tile shape from the CB (its
// inits program it); an op on those tiles may touch only the DST rows they fill (VectorMode::R / None,
// and with 8x32 tiles at most row_iterations 4: rows 0-7).
constexpr uint32_t q_tile_rows = get_named_compile_time_arg_val("q_tile_rows");
static_assert(q_tile_rows == 32 || (q_tile_rows < 32 && head_rows <= q_tile_rows && q_tiles == 1),
              "16x32 or 8x32 q tiles hold one q tile row of at most 16 or 8 q rows");
constexpr VectorMode row_mode = half_tile ? VectorMode::R : VectorMode::RC;
// The vector steps per face those ops run (their ITERATIONS): a step covers four rows of a face, even
// or odd columns, so 2 x ceil(rows / 4) steps cover rows 0 .. head_rows - 1 (8 = the whole face).
constexpr int row_iterations = half_tile ? 2 * int((head_rows + 3) / 4) : 8;
// A statistic read only through column 0 (1/l): faces 0 and 2 (VectorMode::C, columns 0-15 of every
// row), or face 0 alone (VectorMode::None, rows 0-15) with half_tile.
constexpr VectorMode stat_mode = half_tile ? VectorMode::None : VectorMode::C;

constexpr uint32_t k_slot_tiles = max_chunk_tiles * d_tiles;
// The K slot's layout (reader.cpp): column-major (tile (j, d) at d * max_chunk_tiles + j) without MLA,
// so Q . K^T runs one matmul_block per d over a DST block of key tiles; row-major with MLA (tile
// (j, d) at j * d_tiles + d), where P . V reads V tiles (j, v..) out of the same slot.
constexpr bool k_by_column = !mla;
// Without MLA a V slot's key tile row j holds its dv_tiles V tiles, then a tile of ones (reader.cpp):
// P . V's matmul_block over the last Dv tiles and the ones gives the row sum P x ones in the same call.
constexpr uint32_t v_slot_tiles = max_chunk_tiles * (dv_tiles + 1);
// Where P . V finds V tile (j, v) of a chunk: tile j * v_row_stride + v of cb_v, or with MLA of the
// K slot, whose key tile row j holds K tiles (j, 0..d_tiles) and V tile (j, v) is K tile (j, v).
// The matmul reads it untransposed (Q . K^T reads the same tile transposed); the K slot stays until
// P . V of every q tile row is done (process_chunk pops it last).
constexpr uint32_t cb_v_source = mla ? cb_k : cb_v;
constexpr uint32_t v_row_stride = mla ? d_tiles : dv_tiles + 1;
// The row sum's in1 (a tile of ones): the ones tile of key tile row j of the V slot, or with MLA cb_ones.
constexpr uint32_t cb_ones_source = mla ? cb_ones : cb_v;
constexpr uint32_t ones_at(uint32_t j) { return mla ? 0 : j * v_row_stride + dv_tiles; }
static_assert(!mla || dv_tiles <= d_tiles, "MLA reads V out of the first dv_tiles tiles of each K row");
constexpr uint32_t acc_tiles = q_tiles * dv_tiles;
constexpr uint32_t partial_tiles = q_tiles * (dv_tiles + 2);
constexpr uint32_t partial_max_offset = acc_tiles;  // partial layout: O tiles, m tiles, l tiles
constexpr uint32_t partial_sum_offset = acc_tiles + q_tiles;
constexpr uint32_t mask_slot_tiles = q_tiles * max_chunk_tiles;  // cb_attn_mask: [q tile row][key tile]
// Floors of the empty-row guard (float32 bits): the lowest finite float for the running max, the
// smallest normal float for the row sum before its reciprocal.
constexpr uint32_t LOWEST_FLOAT_BITS = 0xFF7FFFFFu;
constexpr uint32_t MIN_NORMAL_FLOAT_BITS = 0x00800000u;
// What DST holds, the format the SFPU row max loads it with.
constexpr DataFormat stat_format = DST_ACCUM_MODE ? DataFormat::Float32 : DataFormat::Float16_b;
// With a 16-bit DST (no fp32 accumulation) every MVMUL rounds its DST tile to bf16 and an SFPU result
// is truncated to bf16 by the store unless the LLK function rounds it first (tech_report/flashdecode.md
// 9.1; tools/bf16_dst_arbiter.py models both algorithms). Then (fresh_chunk):
// * a chunk's P . V and P x ones accumulate in fresh DST tiles (from 0, over the chunk's keys only) and
//   the old state joins them once per chunk, new + old * alpha in one SFPU multiply-add rounded once
//   (addcmul's bf16 template), as tt-metal's decode adds a chunk's partial to the rescaled state;
//   accumulated onto the running O and l, each of the 8 MVMULs per key tile (HiFi4) would round onto the
//   whole row's sum, and small terms would stop adding up;
// * the scores are scaled as s + ((scale - 1) * s) * 1 (addcmul with a ones tile): rounded to bf16, not
//   truncated; S - m is rounded to nearest even (sub_rows).
// With an fp32 DST the products accumulate onto the rescaled old state and the scale is one multiply.
constexpr bool fresh_chunk = !DST_ACCUM_MODE;

static_assert(dst_tiles >= 4, "the merge combines four DST tiles (own, e_own, child, e_child)");

// Row-wise SFPU arithmetic on the faces `mode` covers, row_iterations vector steps per face: the LLK
// functions that sub_binary_tile, add_binary_tile, mul_binary_tile, binary_max_tile and mul_unary_tile
// run, called through the LLK's SFPU call macros (those *_tile calls fix VectorMode::RC and 8
// iterations). Each needs the init of its *_tile call.
// With a 16-bit DST the difference is rounded to nearest even before the store (the SFPSTORE alone
// truncates: SFPSTORE.md); an fp32 DST stores it exactly (the rounding mode applies to 16 bits only).
inline void sub_rows(uint32_t a, uint32_t b, uint32_t out, VectorMode mode) {
    MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary,
                           (APPROX, ckernel::BinaryOp::SUB, row_iterations, DST_ACCUM_MODE,
                            ckernel::DstRoundingMode::NearestEven),
                           a, b, out, mode)));
}
inline void add_rows(uint32_t a, uint32_t b, uint32_t out, VectorMode mode) {
    MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary,
                           (APPROX, ckernel::BinaryOp::ADD, row_iterations, DST_ACCUM_MODE), a, b, out, mode)));
}
inline void mul_rows(uint32_t a, uint32_t b, uint32_t out, VectorMode mode) {
    MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_sfpu_binary_mul,
                           (APPROX, ckernel::BinaryOp::MUL, row_iterations, DST_ACCUM_MODE), a, b, out, mode)));
}
inline void max_rows(uint32_t a, uint32_t b, uint32_t out, VectorMode mode) {
    MATH((SFPU_BINARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_binary_max_min, (true, row_iterations), a, b, out,
                           mode)));
}
// out = a + (value * b) * c (addcmul_tile's LLK function: one SFPMUL, one SFPMAD, fp32; with a 16-bit
// DST rounded to bf16 before the store); value 1.0 unless given (float32 bits).
inline void addcmul_rows(uint32_t a, uint32_t b, uint32_t c, uint32_t out, VectorMode mode,
                         uint32_t value_bits = one_bits) {
    MATH((SFPU_TERNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_addcmul,
                            (APPROX, DST_ACCUM_MODE, DataFormat::Float32, row_iterations), a, b, c, out, mode,
                            value_bits)));
}
inline void log_rows(uint32_t idst, VectorMode mode) {
    MATH((SFPU_UNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_log,
                          (APPROX, false, false, DST_ACCUM_MODE, row_iterations), idst, mode, 0)));
}
// 1/x (recip_tile's LLK function, its init recip_tile_init).
inline void recip_rows(uint32_t idst, VectorMode mode) {
    MATH((SFPU_UNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_reciprocal, (APPROX, DST_ACCUM_MODE, row_iterations),
                          idst, mode)));
}
inline void scale_rows(uint32_t idst, uint32_t bits, VectorMode mode) {
    MATH((SFPU_UNARY_CALL(DST_SYNC_MODE, DST_ACCUM_MODE, calculate_binop_with_scalar,
                          (APPROX, MUL_UNARY, row_iterations, DST_ACCUM_MODE), idst, mode, bits)));
}

// One set of running tiles: m and l (one tile per q tile row), O (dv_tiles per q tile row).
struct Running {
    uint32_t max;
    uint32_t sum;
    uint32_t acc;
};
constexpr Running running_sets[2] = {{cb_max_a, cb_sum_a, cb_acc_a}, {cb_max_b, cb_sum_b, cb_acc_b}};

// A matmul unpacks in0 into srcB and in1 into srcA; its init follows (matmul_block_for / matmul_tiles_for).
inline void use_matmul_operands(uint32_t in0, uint32_t in1) {
    use_srca(in1);
    use_srcb(in0);
}

// The chunk's SFPU inits, tracked (compute_tiles.hpp sfpu_init): process_chunk forgets the record
// first, since the merges make theirs directly.
inline void init_scale() { sfpu_init(SfpuInit::scalar, [] { binop_with_scalar_tile_init(); }); }
inline void init_add() { sfpu_init(SfpuInit::add, [] { add_binary_tile_init(); }); }
inline void init_sub() { sfpu_init(SfpuInit::sub, [] { sub_binary_tile_init(); }); }
inline void init_mul() { sfpu_init(SfpuInit::mul, [] { mul_binary_tile_init(); }); }
inline void init_max() { sfpu_init(SfpuInit::max, [] { binary_max_tile_init(); }); }

// Does one of the piece's masked tiles fall in tiles [j0, j0 + n) of the chunk starting at the piece's
// tile first_at?
inline bool masked_in(const PieceMasks& masks, uint32_t first_at, uint32_t j0, uint32_t n) {
    for (uint32_t m = 0; m < masks.count; ++m) {
        const uint32_t t = masks.at[m] - first_at;  // wraps past the chunk for a tile before it
        if (t >= j0 && t < j0 + n) {
            return true;
        }
    }
    return false;
}

// ---- one chunk ----------------------------------------------------------------------------------

// Logits S = (Q_qi . K^T) * scale over the chunk's `tiles` key tiles into cb_scores, in fp32: the
// matmul accumulates in DST, the SFPU scales, then a masked tile gets its mask (-inf at masked keys,
// 0 elsewhere; bf16, copied exactly into the spare DST tile) added on the SFPU. The chunk starts at
// piece's tile `first_at` (PieceRange::tile_at); masked tile i of the piece takes page i * q_tiles + qi of cb_mask.
void chunk_scores(uint32_t qi, uint32_t tiles, const PieceMasks& masks, uint32_t first_at) {
    cb_reserve_back(cb_scores, max_chunk_tiles);
    for (uint32_t j0 = 0; j0 < tiles;) {
        // A DST block of key tiles: the whole DST, or one tile fewer when a mask is added in it (the
        // spare DST tile takes the mask). Blocks of one size share one matmul init (only SFPU ops and
        // packs between them).
        uint32_t n = tiles - j0 < dst_tiles ? tiles - j0 : dst_tiles;
        if (n == dst_tiles && (has_attn_mask || masked_in(masks, first_at, j0, n) || (fresh_chunk && !q_prescaled))) {
            n = dst_tiles - 1;  // the spare DST tile: the mask, or (fresh_chunk) the ones of the scale first
        }
        tile_regs_acquire();
        use_matmul_operands(cb_q_in0, cb_k);
        if constexpr (k_by_column) {
            // One matmul_block per d: Q tile (qi, d) times the n K tiles (j0.., d), transposed, onto
            // DST tiles 0..n (consecutive in the column-major slot).
            matmul_block_for(cb_q_in0, cb_k, 1 /* transpose K */, n /* ct */, d_tiles /* kt */);
            for (uint32_t d = 0; d < d_tiles; ++d) {
                matmul_block(cb_q_in0, cb_k, qi * d_tiles + d, d * max_chunk_tiles + j0, 0, 1, n, 1, d_tiles);
            }
        } else {
            matmul_tiles_for(cb_q_in0, cb_k, 1 /* transpose K */);
            for (uint32_t j = 0; j < n; ++j) {
                for (uint32_t d = 0; d < d_tiles; ++d) {
                    matmul_tiles(cb_q_in0, cb_k, qi * d_tiles + d, (j0 + j) * d_tiles + d, j);
                }
            }
        }
        if constexpr (!q_prescaled && fresh_chunk) {
            copy_to_dst(cb_ones, 0, n);
            init_mul();  // serves the addcmul (one LLK init)
            for (uint32_t j = 0; j < n; ++j) {
                addcmul_rows(j, j, n, j, row_mode, scale_m1_bits);  // s + ((scale - 1) * s) * 1, rounded
            }
        } else if constexpr (!q_prescaled) {
            init_scale();
            for (uint32_t j = 0; j < n; ++j) {
                scale_rows(j, scale_bits, row_mode);
            }
        }
        for (uint32_t m = 0; m < masks.count; ++m) {
            const uint32_t t = masks.at[m] - first_at;  // wraps past `tiles` for a tile before the chunk
            if (t >= j0 && t < j0 + n) {
                copy_to_dst(cb_mask, m * q_tiles + qi, n);
                init_add();
                add_rows(t - j0, n, t - j0, row_mode);
            }
        }
        if constexpr (has_attn_mask) {
            // The caller's additive mask (bf16, exact in DST), tile by tile through the spare DST tile.
            for (uint32_t j = 0; j < n; ++j) {
                copy_to_dst(cb_attn_mask, qi * max_chunk_tiles + j0 + j, n);
                init_add();
                add_rows(j, n, j, row_mode);
            }
        }
        pack_block(cb_scores, j0, n);
        j0 += n;
    }
    cb_push_back(cb_scores, max_chunk_tiles);
    cb_wait_front(cb_scores, max_chunk_tiles);
}

// cb_q_scaled = the piece's Q tiles x scale (q_prescaled: the scale is +-2^k), a DST block at a time:
// bf16 Q is copied exactly into the fp32 DST, multiplied on the SFPU (exact: only the exponent moves)
// and packed to bf16 with nothing to round. Frees cb_q for the reader's next piece.
void prescale_q() {
    constexpr uint32_t n = q_tiles * d_tiles;
    cb_reserve_back(cb_q_scaled, n);
    for (uint32_t t0 = 0; t0 < n; t0 += dst_tiles) {
        const uint32_t m = n - t0 < dst_tiles ? n - t0 : dst_tiles;
        tile_regs_acquire();
        for (uint32_t i = 0; i < m; ++i) {
            copy_to_dst(cb_q, t0 + i, i);
        }
        init_scale();
        for (uint32_t i = 0; i < m; ++i) {
            scale_rows(i, scale_bits, row_mode);  // the q rows that hold heads (the others are zero)
        }
        pack_block(cb_q_scaled, t0, m);
    }
    cb_push_back(cb_q_scaled, n);
    cb_pop_front(cb_q, n);
    cb_wait_front(cb_q_scaled, n);
}

// DST tile `at` = max(DST tile `at`, floor) in fp32 on the SFPU, with the floor made in DST tile
// `scratch` as ones x floor (exact). The empty-row guard: a row whose every key is masked has the
// row max -inf and the row sum 0; flooring the max at the lowest finite float keeps every exp(x - m)
// and exp(m_old - m) free of -inf - (-inf) (they give exp(-inf) = 0 or exp(0) = 1 on an all-zero
// row instead of NaN), and flooring l before 1/l keeps O x 1/l = 0 x 2^126 = 0 instead of 0 x inf.
// On the faces `mode` covers (the rows that hold heads): a 16x32 tile has no faces 2-3.
inline void floor_tile(uint32_t at, uint32_t scratch, uint32_t floor_bits, VectorMode mode) {
    copy_to_dst(cb_ones, 0, scratch);
    init_scale();
    scale_rows(scratch, floor_bits, mode);
    init_max();
    max_rows(at, scratch, at, mode);
}

// Row qi of the new max: max(m_old, rowmax(S)), exact: the logits are copied into DST one by one and
// folded into DST tile 0 by an element-wise max (on the rows `row_mode` covers), then one SFPU row
// reduction of that tile leaves each row's max in column 0 (its other columns are never used).
void chunk_row_max(uint32_t qi, uint32_t tiles, const Running* old, const Running& next) {
    tile_regs_acquire();
    copy_to_dst(cb_scores, 0, 0);
    if (tiles > 1) {
        init_max();
        for (uint32_t j = 1; j < tiles; ++j) {
            copy_to_dst(cb_scores, j, 1);
            max_rows(0, 1, 0, row_mode);
        }
    }
    sfpu_init(SfpuInit::other, [] { sfpu_reduce_init<PoolType::MAX, stat_format>(); });
    sfpu_reduce<PoolType::MAX, stat_format, ReduceDim::REDUCE_ROW>(0, 1, 1);
    if (old != nullptr) {
        copy_to_dst(old->max, qi, 1);
        init_max();
        max_rows(0, 1, 0, row_mode);
    }
    if constexpr (guard_empty_rows) {
        floor_tile(0, 1, LOWEST_FLOAT_BITS, row_mode);
    }
    pack_block(next.max, 0, 1);  // pack indices count from the last push
    cb_push_back(next.max, 1);
    cb_wait_front(next.max, qi + 1);
}

// Does chunk_probs copy m_new broadcast from cb_max_bcast (one copy init for the chunk) rather than
// broadcast it from column 0 of next.max into each DST block (a broadcast and a copy init per block)?
// The tile costs a pack, in chunk_alpha's pass when there is an old set, else in a pass of its own
// (two more configuration calls and a broadcast): it pays from 2 DST blocks of logits with an old
// set, from 3 without (the model's prices; the values are the same either way).
constexpr bool max_bcast_tile(uint32_t tiles, bool has_old) {
    return (tiles + dst_tiles - 2) / (dst_tiles - 1) >= (has_old ? 2u : 3u);
}

// With an old set: alpha = exp(m_old - m_new) in every column, the factor that rescales row qi's old l
// and O, in tile 0 of cb_alpha (when the chunk finishes the root, only that page is pushed: 1/l follows
// in tile 1, root_recip). With `bcast_tile`, in the same DST pass: m_new broadcast along each row
// (exact: unary_bcast from column 0) into cb_max_bcast, for chunk_probs.
void chunk_alpha(uint32_t qi, const Running* old, const Running& next, bool finish, bool bcast_tile) {
    if (bcast_tile) {
        cb_reserve_back(cb_max_bcast, 1);
    }
    if (old != nullptr) {
        cb_reserve_back(cb_alpha, 2);
    }
    tile_regs_acquire();
    if (old != nullptr) {
        broadcast_column(old->max, qi, 0);
    }
    broadcast_column(next.max, qi, 1);
    if (old != nullptr) {
        init_sub();
        sub_rows(0, 1, 0, row_mode);
        exp_block<exp_approx, row_iterations>(1, 0, row_mode);
    }
    hand_to_packer();
    if (old != nullptr) {
        pack_tiles_to(cb_alpha, 0, 1);
    }
    if (bcast_tile) {
        pack_tiles_to(cb_max_bcast, 0, 1, 1);  // cb_alpha and cb_max_bcast share one format
    }
    tile_regs_release();
    if (bcast_tile) {
        cb_push_back(cb_max_bcast, 1);
        cb_wait_front(cb_max_bcast, 1);
    }
    if (old != nullptr) {
        const uint32_t pages = finish ? 1 : 2;
        cb_push_back(cb_alpha, pages);
        cb_wait_front(cb_alpha, pages);
    }
}

// P = exp(S - m_new): the fp32 logits and m_new broadcast along each row (copied from cb_max_bcast
// with `bcast_tile`, else broadcast from column 0 of next.max; into the last DST tile) reach DST
// exactly and are subtracted on the SFPU (masked keys hold -inf and give 0). Frees the scores (and
// cb_max_bcast).
void chunk_probs(uint32_t qi, uint32_t tiles, const Running& next, bool bcast_tile) {
    constexpr uint32_t block = dst_tiles - 1;
    cb_reserve_back(cb_probs, max_chunk_tiles);
    for (uint32_t j0 = 0; j0 < tiles; j0 += block) {
        const uint32_t n = tiles - j0 < block ? tiles - j0 : block;
        tile_regs_acquire();
        for (uint32_t j = 0; j < n; ++j) {
            copy_to_dst(cb_scores, j0 + j, j);
        }
        if (bcast_tile) {
            copy_to_dst(cb_max_bcast, 0, n);  // the same unpack path as the logits: no init
        } else {
            broadcast_column(next.max, qi, n);
        }
        init_sub();
        for (uint32_t j = 0; j < n; ++j) {
            sub_rows(j, n, j, row_mode);
        }
        exp_block<exp_approx, row_iterations>(n, 0, row_mode);
        pack_block(cb_probs, j0, n);
    }
    cb_push_back(cb_probs, max_chunk_tiles);
    cb_wait_front(cb_probs, max_chunk_tiles);
    cb_pop_front(cb_scores, max_chunk_tiles);
    if (bcast_tile) {
        cb_pop_front(cb_max_bcast, 1);
    }
}

// DST tiles [0, n) = tiles [first, first + n) of cb times alpha, in fp32 on the SFPU (alpha is
// copied into DST tile n, so n < dst_tiles).
inline void rescaled_to_dst(uint32_t cb, uint32_t first, uint32_t n) {
    copy_to_dst(cb_alpha, 0, n);
    for (uint32_t i = 0; i < n; ++i) {
        copy_to_dst(cb, first + i, i);
    }
    init_mul();
    for (uint32_t i = 0; i < n; ++i) {
        mul_rows(i, n, i, row_mode);
    }
}

// DST tiles [0, n) += tiles [first, first + n) of cb times alpha (column 0 of cb_alpha tile 0 in every
// column), each in one SFPU multiply-add (addcmul: one rounding); with_last also DST tile n += tile `last` of
// cb_last times alpha. Uses DST tiles [held, 2 held], held = n (+ 1 with_last).
inline void add_rescaled(uint32_t cb, uint32_t first, uint32_t n, uint32_t cb_last = 0, uint32_t last = 0,
                         bool with_last = false) {
    const uint32_t held = n + (with_last ? 1 : 0);
    copy_to_dst(cb_alpha, 0, 2 * held);
    for (uint32_t i = 0; i < n; ++i) {
        copy_to_dst(cb, first + i, held + i);
    }
    if (with_last) {
        copy_to_dst(cb_last, last, held + n);
    }
    init_mul();  // serves the addcmul (one LLK init)
    for (uint32_t i = 0; i < held; ++i) {
        addcmul_rows(i, held + i, 2 * held, i, row_mode);  // new + old * alpha
    }
}

// l_new = l_old * alpha + rowsum(P). The row sum is P x ones (every column holds it), accumulated
// by the matmul onto the rescaled old sum in the same DST tile (fresh_chunk: into a fresh tile, then
// the rescaled old sum added).
void chunk_row_sum(uint32_t qi, uint32_t tiles, const Running* old, const Running& next) {
    tile_regs_acquire();
    if (old != nullptr && !fresh_chunk) {
        rescaled_to_dst(old->sum, qi, 1);
    }
    use_matmul_operands(cb_probs, cb_ones_source);
    matmul_tiles_for(cb_probs, cb_ones_source, 0);
    for (uint32_t j = 0; j < tiles; ++j) {
        matmul_tiles(cb_probs, cb_ones_source, j, ones_at(j), 0);
    }
    if (old != nullptr && fresh_chunk) {
        add_rescaled(old->sum, qi, 1);
    }
    pack_block(next.sum, 0, 1);
    cb_push_back(next.sum, 1);
}

// The DST block of Dv tiles chunk_output takes per acquire: one DST tile fewer when alpha (old) or 1/l
// (finish) shares DST with the block.
// With an old set and fresh_chunk: the block's new tiles (and l), the old ones and alpha, 2 (n + 1) + 1
// DST tiles.
constexpr uint32_t output_block(bool rescaled, bool fresh_old = false) {
    return fresh_old ? (dst_tiles - 3) / 2 : rescaled ? dst_tiles - 1 : dst_tiles;
}
static_assert(!fresh_chunk || dst_tiles >= 5, "a fresh chunk block needs 2 (n + 1) + 1 DST tiles");
// Does the last Dv block leave a DST tile free for the row sum (chunk_output's `with_sum`)?
constexpr bool sum_fits_output(bool rescaled) {
    return dv_tiles % output_block(rescaled, fresh_chunk && rescaled) != 0;
}

// O_new = O_old * alpha + P . V for row qi (V tiles from cb_v, or the K slot with MLA), a block of Dv
// tiles per DST acquire (one DST tile fewer when alpha shares DST with the block). `finish` (the root's
// last chunk, nothing left to merge): O_new x (1/l) in fp32 on the SFPU (1/l broadcast from column 0
// of cb_alpha tile 1 into the spare DST tile), packed once to the bf16 output instead of the running O.
// `with_sum` (not with finish; sum_fits_output): the last block also takes the row sum's tile, as
// chunk_row_sum would compute it (l_old * alpha, then P x ones accumulated onto it, key tile by key
// tile), and packs it to next.sum: the same values in one DST pass fewer.
void chunk_output(uint32_t qi, uint32_t tiles, const Running* old, const Running& next, bool finish,
                  bool with_sum, uint32_t dv_end = dv_tiles) {
    const uint32_t block = output_block(old != nullptr || finish, fresh_chunk && old != nullptr);
    for (uint32_t v0 = 0; v0 < dv_end; v0 += block) {
        const uint32_t n = dv_end - v0 < block ? dv_end - v0 : block;
        const bool sum_here = with_sum && v0 + n == dv_tiles;  // DST tile n holds l
        tile_regs_acquire();
        if (old != nullptr && !fresh_chunk) {
            const uint32_t rescaled = n + (sum_here ? 1 : 0);
            copy_to_dst(cb_alpha, 0, rescaled);
            for (uint32_t i = 0; i < n; ++i) {
                copy_to_dst(old->acc, qi * dv_tiles + v0 + i, i);
            }
            if (sum_here) {
                copy_to_dst(old->sum, qi, n);
            }
            init_mul();
            for (uint32_t i = 0; i < rescaled; ++i) {
                mul_rows(i, rescaled, i, row_mode);
            }
        }
        if (sum_here && mla) {
            // The row sum before P . V, so that the chunk ends on V's unpacker format (the next
            // chunk's K has the same).
            use_matmul_operands(cb_probs, cb_ones);
            matmul_tiles_for(cb_probs, cb_ones, 0);
            for (uint32_t j = 0; j < tiles; ++j) {
                matmul_tiles(cb_probs, cb_ones, j, 0, n);
            }
        }
        // One matmul_block per key tile j: P tile j times the n V tiles (j, v0..v0+n) of its row
        // (consecutive in the slot) onto DST tiles 0..n; without MLA, in the block that holds l, also
        // the row's ones tile (right after its last V tile) onto DST tile n: l += P x ones, accumulated
        // key tile by key tile onto the rescaled l as a separate row sum would.
        const uint32_t ct = n + (sum_here && !mla ? 1 : 0);
        use_matmul_operands(cb_probs, cb_v_source);
        matmul_block_for(cb_probs, cb_v_source, 0 /* no transpose */, ct, tiles /* kt */);
        for (uint32_t j = 0; j < tiles; ++j) {
            matmul_block(cb_probs, cb_v_source, j, j * v_row_stride + v0, 0, 0, ct, 1, tiles);
        }
        if (old != nullptr && fresh_chunk) {
            add_rescaled(old->acc, qi * dv_tiles + v0, n, old->sum, qi, sum_here);
        }
        if (finish) {
            broadcast_column(cb_alpha, 1, n);
            init_mul();
            for (uint32_t v = 0; v < n; ++v) {
                mul_rows(v, n, v, row_mode);
            }
            pack_block(cb_out, qi * dv_tiles + v0, n);
        } else {
            hand_to_packer();
            pack_tiles_to(next.acc, v0, n);
            if (sum_here) {
                pack_tiles_to(next.sum, 0, 1, n);  // the running sets share one format
            }
            tile_regs_release();
        }
    }
    if (!finish) {
        cb_push_back(next.acc, dv_tiles);
    }
    if (with_sum) {
        cb_push_back(next.sum, 1);
    }
}

// The root's only chunk (no old set, nothing to merge, no LSE, V in its own slot): l rides in P.V's
// last DST block (the V slot's ones tile after the row's last V tile), done first: l is inverted in
// place (every column holds it, so the multiply needs no broadcast) and multiplies the block's O tiles;
// 1/l goes to tile 1 of cb_alpha for the other blocks (chunk_output's finish path, up to dv_end).
// The same values as chunk_row_sum + root_recip + chunk_output, without the row-sum and 1/l passes.
constexpr uint32_t fused_scratch = guard_empty_rows ? 1 : 0;  // floor_tile's scratch DST tile
constexpr uint32_t fused_block = dv_tiles < dst_tiles - 1 - fused_scratch ? dv_tiles : dst_tiles - 1 - fused_scratch;
constexpr uint32_t fused_rest = dv_tiles - fused_block;  // the O tiles left to chunk_output
void finish_single_chunk(uint32_t qi, uint32_t tiles) {
    constexpr uint32_t n = fused_block;
    if constexpr (fused_rest > 0) {
        cb_reserve_back(cb_alpha, 2);
    }
    tile_regs_acquire();
    use_matmul_operands(cb_probs, cb_v);
    matmul_block_for(cb_probs, cb_v, 0 /* no transpose */, n + 1, tiles /* kt */);
    for (uint32_t j = 0; j < tiles; ++j) {
        matmul_block(cb_probs, cb_v, j, j * v_row_stride + fused_rest, 0, 0, n + 1, 1, tiles);
    }
    if constexpr (guard_empty_rows) {
        floor_tile(n, n + 1, MIN_NORMAL_FLOAT_BITS, row_mode);  // l = 0 (no key) gives out = 0
    }
    sfpu_init(SfpuInit::other, [] { recip_tile_init(); });
    recip_rows(n, row_mode);
    init_mul();
    for (uint32_t v = 0; v < n; ++v) {
        mul_rows(v, n, v, row_mode);
    }
    hand_to_packer();
    pack_tiles_to(cb_out, qi * dv_tiles + fused_rest, n);
    if constexpr (fused_rest > 0) {
        pack_tiles_to(cb_alpha, 1, 1, n);
    }
    tile_regs_release();
    if constexpr (fused_rest > 0) {
        cb_push_back(cb_alpha, 2);
        cb_wait_front(cb_alpha, 2);
    }
}

// 1/l of row qi into tile 1 of cb_alpha (tile 0 holds alpha when there is an old set, else nothing),
// in fp32 on the SFPU; l is read through column 0 (stat_mode). With the empty-row guard l is floored
// first (l = 0: no key, no sink, gives out = 0).
void root_recip(uint32_t cb_sum, uint32_t qi, bool after_alpha) {
    cb_reserve_back(cb_alpha, after_alpha ? 1 : 2);
    tile_regs_acquire();
    copy_to_dst(cb_sum, qi, 0);
    if constexpr (guard_empty_rows) {
        floor_tile(0, 1, MIN_NORMAL_FLOAT_BITS, stat_mode);
    }
    sfpu_init(SfpuInit::other, [] { recip_tile_init(); });
    recip_rows(0, stat_mode);
    hand_to_packer();
    pack_tiles_to(cb_alpha, after_alpha ? 0 : 1, 1);  // pack indices count from the last push
    tile_regs_release();
    cb_push_back(cb_alpha, after_alpha ? 1 : 2);
    cb_wait_front(cb_alpha, 2);
}

// LSE of row qi = m + log(l), all in fp32 on the SFPU (column 0 holds the value), into cb_lse.
void root_lse(const Running& set, uint32_t qi) {
    tile_regs_acquire();
    copy_to_dst(set.sum, qi, 0);
    sfpu_init(SfpuInit::other, [] { log_tile_init(); });
    log_rows(0, stat_mode);  // column 0 of the head rows is the LSE
    copy_to_dst(set.max, qi, 1);
    init_add();
    add_rows(0, 1, 0, stat_mode);
    pack_block(cb_lse, qi, 1);
}

inline void reserve_running(const Running& set) {
    cb_reserve_back(set.max, q_tiles);
    cb_reserve_back(set.sum, q_tiles);
    cb_reserve_back(set.acc, acc_tiles);
}

inline void wait_running(const Running& set) {
    cb_wait_front(set.max, q_tiles);
    cb_wait_front(set.sum, q_tiles);
    cb_wait_front(set.acc, acc_tiles);
}

inline void pop_running(const Running& set) {
    cb_pop_front(set.max, q_tiles);
    cb_pop_front(set.sum, q_tiles);
    cb_pop_front(set.acc, acc_tiles);
}

// One chunk of keys for every q tile row: reads the running set `old` (none for the first chunk)
// and writes `next`. The K/V slot stays until all rows are done. The piece's masks (if any) are
// already waited for. `finish`: the root's last chunk with nothing left to merge (no child with keys,
// no sink): it writes the normalized output and the LSE itself (as finish_root would) and no running O;
// next's m and l are consumed here.
void process_chunk(uint32_t tiles, const Running* old, const Running& next, const PieceMasks& masks,
                   uint32_t first_at, bool finish) {
    cb_wait_front(cb_k, k_slot_tiles);
    if constexpr (has_attn_mask) {
        cb_wait_front(cb_attn_mask, mask_slot_tiles);
    }
    // The root's only chunk with no LSE: finish_single_chunk (no running l)
    const bool fused = !mla && !return_lse && finish && old == nullptr;
    if (finish) {
        cb_reserve_back(next.max, q_tiles);
        if (!fused) {
            cb_reserve_back(next.sum, q_tiles);
        }
        cb_reserve_back(cb_out, acc_tiles);
        if (return_lse) {
            cb_reserve_back(cb_lse, q_tiles);
        }
    } else {
        reserve_running(next);
    }
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        chunk_scores(qi, tiles, masks, first_at);
        chunk_row_max(qi, tiles, old, next);
        const bool bcast_tile = max_bcast_tile(tiles, old != nullptr);
        if (old != nullptr || bcast_tile) {
            chunk_alpha(qi, old, next, finish, bcast_tile);
        }
        chunk_probs(qi, tiles, next, bcast_tile);
        if (fused) {
            if (qi == 0) {
                cb_wait_front(cb_v, v_slot_tiles);
            }
            finish_single_chunk(qi, tiles);
            if constexpr (fused_rest > 0) {
                chunk_output(qi, tiles, nullptr, next, true, false, fused_rest);
                cb_pop_front(cb_alpha, 2);
            }
            cb_pop_front(cb_probs, max_chunk_tiles);
            continue;
        }
        // The row sum rides in chunk_output's last DST block when it leaves a tile free.
        const bool sum_in_output = !finish && sum_fits_output(old != nullptr);
        if constexpr (!mla) {
            if (qi == 0 && !sum_in_output) {
                cb_wait_front(cb_v, v_slot_tiles);  // the row sum reads the ones tiles of the V slot
            }
        }
        if (!sum_in_output) {
            chunk_row_sum(qi, tiles, old, next);
        }
        if (finish) {
            cb_wait_front(next.sum, qi + 1);
            root_recip(next.sum, qi, old != nullptr);
        }
        if constexpr (!mla) {
            if (qi == 0 && sum_in_output) {
                cb_wait_front(cb_v, v_slot_tiles);  // V has its own push: the scores above overlap its read
            }
        }
        chunk_output(qi, tiles, old, next, finish, sum_in_output);
        if (finish && return_lse) {
            root_lse(next, qi);
        }
        cb_pop_front(cb_probs, max_chunk_tiles);
        if (old != nullptr || finish) {
            cb_pop_front(cb_alpha, 2);
        }
    }
    if (old != nullptr) {
        pop_running(*old);
    }
    if (finish) {
        cb_push_back(cb_out, acc_tiles);
        if (return_lse) {
            cb_push_back(cb_lse, q_tiles);
        }
        cb_pop_front(next.max, q_tiles);
        if (!fused) {
            cb_pop_front(next.sum, q_tiles);
        }
    }
    cb_pop_front(cb_k, k_slot_tiles);
    if constexpr (!mla) {
        cb_pop_front(cb_v, v_slot_tiles);
    }
    if constexpr (has_attn_mask) {
        cb_pop_front(cb_attn_mask, mask_slot_tiles);
    }
}

// ---- the tree -----------------------------------------------------------------------------------

// Tiles [out_first, out_first + n) of out_cb = a * e_own + c * e_child, where a = tiles [ia, ia + n) of cb_a,
// c = tiles [ic, ic + n) of cb_partial_in and e_own / e_child are column 0 of tiles 0 / 1 of cb_alpha,
// broadcast along each row: n <= dst_tiles - 2 tiles per DST acquire. The a tiles go to DST 0..n-1 and
// e_own to DST n, which every a is multiplied by; then e_child replaces e_own and each c, in turn in DST
// n + 1, is added as c * e_child (one addcmul: one rounding). All four reach DST exactly
// (UnpackToDestFp32) and are combined on the SFPU in fp32 on the rows that hold heads (row_mode,
// row_iterations); every step is row by row, so rows past the group (which a child does not send) never
// reach the rows written out. The loads run copies, a broadcast, a broadcast, copies: cb_a, cb_partial_in
// and cb_alpha share one unpack path, so the copy init of the previous block serves the first copies. The
// caller has made the multiply's init current (it serves the addcmul too: same LLK init).
void rescaled_sum(uint32_t cb_a, uint32_t ia, uint32_t ic, uint32_t n, uint32_t out_cb, uint32_t out_first) {
    const uint32_t factor = n;
    const uint32_t child = n + 1;
    tile_regs_acquire();
    for (uint32_t i = 0; i < n; ++i) {
        copy_to_dst(cb_a, ia + i, i);
    }
    broadcast_column(cb_alpha, 0, factor);
    for (uint32_t i = 0; i < n; ++i) {
        mul_rows(i, factor, i, row_mode);
    }
    broadcast_column(cb_alpha, 1, factor);
    for (uint32_t i = 0; i < n; ++i) {
        copy_to_dst(cb_partial_in, ic + i, child);
        addcmul_rows(i, child, factor, i, row_mode);  // a * e_own + c * e_child (one rounding)
    }
    pack_block(out_cb, out_first, n);
}

// Where a merge writes (m, l, O): the running set `next` (pushed q tile row by q tile row), or, for the
// last merge of a piece that is not the root, straight into its partial for the parent in cb_partial_out
// (O tiles, then m, then l; pushed whole at the end), which send_partial would otherwise copy the running
// set into: the same packed values, one copy and one pack per tile fewer between this piece's last merge
// and its message.
struct MergeOut {
    uint32_t max, sum, acc;  // CBs
    bool partial;
    // pack indices (from the CB's last push) of q tile row qi's m, l and first O tile
    uint32_t max_at(uint32_t qi) const { return partial ? partial_max_offset + qi : 0; }
    uint32_t sum_at(uint32_t qi) const { return partial ? partial_sum_offset + qi : 0; }
    uint32_t acc_at(uint32_t qi) const { return partial ? qi * dv_tiles : 0; }
};
constexpr MergeOut to_running(const Running& set) { return {set.max, set.sum, set.acc, false}; }
constexpr MergeOut to_partial = {cb_partial_out, cb_partial_out, cb_partial_out, true};

// The factors of a merge of q tile row qi, in one DST pass: m' = max(m_own, m_other) into
// `out`'s m, and cb_alpha = [exp(m_own - m'), exp(m_other - m')], in fp32 on the SFPU. A
// partial's statistics live in column 0 (fp32, unpacked to DST), so the max, the subtractions and
// the exps run on faces 0 and 2 only (stat_mode VectorMode::C: every row, columns 0-15), or with
// half_tile on face 0's rows that hold heads (VectorMode::None, row_iterations steps); every reader
// of these tiles uses column 0 (copy into a column-0 op, or unary_bcast<COL>). A sink tile (bf16, a head's raw sink in
// column 0) is copied exactly and scaled on the SFPU into logit units.
void merge_factors(const Running& own, const MergeOut& out, uint32_t qi, uint32_t other_cb, uint32_t other_tile,
                   bool other_is_sink) {
    cb_reserve_back(cb_alpha, 2);
    tile_regs_acquire();
    copy_to_dst(own.max, qi, 0);
    copy_to_dst(other_cb, other_tile, 1);
    if (other_is_sink) {
        init_scale();
        scale_rows(1, scale_bits, stat_mode);
    }
    init_max();
    max_rows(0, 1, 2, stat_mode);
    init_sub();
    sub_rows(0, 2, 0, stat_mode);
    sub_rows(1, 2, 1, stat_mode);
    exp_block<exp_approx, row_iterations>(2, 0, stat_mode);
    tile_regs_commit();
    tile_regs_wait();
    use_pack(out.max);  // the running max, the partial and cb_alpha share one format
    pack_tile<true>(2, out.max, out.max_at(qi));  // pack indices count from the last push
    pack_tile<true>(0, cb_alpha, 0);
    pack_tile<true>(1, cb_alpha, 1);
    tile_regs_release();
    if (!out.partial) {
        cb_push_back(out.max, 1);
        cb_wait_front(out.max, qi + 1);
    }
    cb_push_back(cb_alpha, 2);
    cb_wait_front(cb_alpha, 2);
}

// Merge the child partial in area `area` of cb_partial_in into the running set `own`, writing `out`:
// m = max(m_own, m_c); e_own = exp(m_own - m), e_c = exp(m_c - m);
// l = l_own * e_own + l_c * e_c; O = O_own * e_own + O_c * e_c.
// l is read through column 0 only (like m): it is combined with the factors as they lie in cb_alpha (column
// 0, copied, no broadcast) on the statistics' lanes (stat_mode); its other columns keep l_own's values,
// which nothing reads. O runs dst_tiles - 2 tiles per DST acquire (rescaled_sum).
void merge_child(uint32_t area, const Running& own, const MergeOut& out) {
    const uint32_t base = area * partial_tiles;
    constexpr uint32_t block = dst_tiles - 2;
    if (out.partial) {
        cb_reserve_back(cb_partial_out, partial_tiles);
    } else {
        cb_reserve_back(out.max, q_tiles);
        cb_reserve_back(out.sum, q_tiles);
        cb_reserve_back(out.acc, acc_tiles);
    }
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        const uint32_t m_c = base + partial_max_offset + qi;
        const uint32_t l_c = base + partial_sum_offset + qi;

        merge_factors(own, out, qi, cb_partial_in, m_c, false);

        tile_regs_acquire();
        copy_to_dst(own.sum, qi, 0);
        copy_to_dst(cb_alpha, 0, 1);
        copy_to_dst(cb_partial_in, l_c, 2);
        copy_to_dst(cb_alpha, 1, 3);
        init_mul();  // serves every multiply and addcmul of this q tile row (one LLK init)
        mul_rows(0, 1, 0, stat_mode);
        addcmul_rows(0, 2, 3, 0, stat_mode);
        pack_block(out.sum, out.sum_at(qi), 1);
        if (!out.partial) {
            cb_push_back(out.sum, 1);
        }
        for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
            const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
            rescaled_sum(own.acc, qi * dv_tiles + v0, base + qi * dv_tiles + v0, n, out.acc, out.acc_at(qi) + v0);
        }
        if (!out.partial) {
            cb_push_back(out.acc, dv_tiles);
        }
        cb_pop_front(cb_alpha, 2);
    }
    pop_running(own);
    if (out.partial) {
        cb_push_back(cb_partial_out, partial_tiles);
    }
}

// Head row qi's accumulator O (dv_tiles tiles of `acc`) times column 0 of cb_alpha tile 0, broadcast
// along each row, packed to `out` from tile `out_first`: blocks of dst_tiles - 1 O tiles share DST with
// the broadcast tile.
void scale_acc_rows(uint32_t acc, uint32_t qi, uint32_t out, uint32_t out_first) {
    constexpr uint32_t block = dst_tiles - 1;
    for (uint32_t v0 = 0; v0 < dv_tiles; v0 += block) {
        const uint32_t n = dv_tiles - v0 < block ? dv_tiles - v0 : block;
        tile_regs_acquire();
        broadcast_column(cb_alpha, 0, n);
        copy_to_dst(acc, qi * dv_tiles + v0, 0);
        for (uint32_t v = 1; v < n; ++v) {
            copy_tile(acc, qi * dv_tiles + v0 + v, v);  // same CB: one copy_init
        }
        init_mul();
        for (uint32_t v = 0; v < n; ++v) {
            mul_rows(v, n, v, row_mode);
        }
        pack_block(out, out_first + v0, n);
    }
}

// Root with an attention sink: fold the sink into the denominator, exactly as a merge with a
// partial of max `sink * scale` (the sink's logit), sum 1 and output 0:
// m' = max(m, s); e_own = exp(m - m'), e_sink = exp(s - m'); l' = l * e_own + e_sink; O' = O * e_own.
// Writes the running set `next`.
void merge_sink(const Running& own, const Running& next) {
    reserve_running(next);
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        merge_factors(own, to_running(next), qi, cb_sink, qi, true);

        // l' = l * e_own + e_sink (column 0 of the head rows, stat_mode)
        tile_regs_acquire();
        copy_to_dst(own.sum, qi, 0);
        copy_to_dst(cb_alpha, 0, 1);
        copy_to_dst(cb_alpha, 1, 2);
        init_mul();
        mul_rows(0, 1, 0, stat_mode);
        init_add();
        add_rows(0, 2, 0, stat_mode);
        pack_block(next.sum, 0, 1);
        cb_push_back(next.sum, 1);

        // O' = O * e_own
        scale_acc_rows(own.acc, qi, next.acc, 0);
        cb_push_back(next.acc, dv_tiles);
        cb_pop_front(cb_alpha, 2);
    }
    pop_running(own);
}

// Root: out = O x (1 / l) in fp32 on the SFPU, rounded once to the bf16 output; LSE = m + log(l)
// when asked. Column 0 of l and m holds each row's value (a child sends only that column half).
void finish_root(const Running& set) {
    wait_running(set);
    cb_reserve_back(cb_out, acc_tiles);
    if (return_lse) {
        cb_reserve_back(cb_lse, q_tiles);
    }
    for (uint32_t qi = 0; qi < q_tiles; ++qi) {
        cb_reserve_back(cb_alpha, 2);
        tile_regs_acquire();
        copy_to_dst(set.sum, qi, 0);
        if constexpr (guard_empty_rows) {
            floor_tile(0, 1, MIN_NORMAL_FLOAT_BITS, stat_mode);  // l = 0 (no key, no sink) gives out = 0
        }
        sfpu_init(SfpuInit::other, [] { recip_tile_init(); });
        recip_rows(0, stat_mode);  // l lives in column 0
        pack_block(cb_alpha, 0, 1);
        cb_push_back(cb_alpha, 2);
        cb_wait_front(cb_alpha, 2);

        scale_acc_rows(set.acc, qi, cb_out, qi * dv_tiles);
        cb_pop_front(cb_alpha, 2);

        if (return_lse) {
            root_lse(set, qi);
        }
    }
    cb_push_back(cb_out, acc_tiles);
    if (return_lse) {
        cb_push_back(cb_lse, q_tiles);
    }
    pop_running(set);
}

// Non-root: copy (O, m, l) into cb_partial_out for the writer to send up the tree. The three
// running CBs share one data format and unpack path (fp32 to DST): one reconfig and copy_init.
void send_partial(const Running& set) {
    wait_running(set);
    cb_reserve_back(cb_partial_out, partial_tiles);
    copy_from(set.acc);
    for (uint32_t t0 = 0; t0 < partial_tiles; t0 += dst_tiles) {
        const uint32_t n = partial_tiles - t0 < dst_tiles ? partial_tiles - t0 : dst_tiles;
        tile_regs_acquire();
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t t = t0 + i;
            if (t < partial_max_offset) {
                copy_tile(set.acc, t, i);
            } else if (t < partial_sum_offset) {
                copy_tile(set.max, t - partial_max_offset, i);
            } else {
                copy_tile(set.sum, t - partial_sum_offset, i);
            }
        }
        pack_block(cb_partial_out, t0, n);
    }
    cb_push_back(cb_partial_out, partial_tiles);
    pop_running(set);
}

}  // namespace

void kernel_main() {
    const uint32_t num_pieces = get_arg_val<uint32_t>(0);
    constexpr uint32_t piece_args_base = 1;
    constexpr uint32_t args_per_piece = 2;

    start_engine(cb_k, cb_q, cb_scores, to_dest_cbs);

    // Constant tiles from the writer and the positions from the reader stay for the whole kernel.
    cb_wait_front(cb_ones, 1);
    cb_wait_front(cb_pos_compute, 1);

    for (uint32_t p = 0; p < num_pieces; ++p) {
        const uint32_t user = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 0);
        const uint32_t index = get_arg_val<uint32_t>(piece_args_base + p * args_per_piece + 1);
        const int32_t cur_pos = (int32_t)read_tile_value(cb_pos_compute, 0, user);
        const PieceRange range =
            piece_range(cur_pos, fixed_chunk_tiles, pieces_per_work, index, window, min_chunk_tiles, cyclic_split, chunk_cap);
        const uint32_t height = tree_height(index, pieces_per_work);

        if (range.empty()) {
            // No keys: nothing to compute or send; the writer still hands over this piece's
            // (unused) partial areas to keep the partial_in queue aligned.
            if (height > 0) {
                cb_wait_front(cb_partial_in, height * partial_tiles);
                cb_pop_front(cb_partial_in, height * partial_tiles);
            }
            continue;
        }

        // The piece's masks (writer.cpp): one page per (masked tile, q tile row).
        const PieceMasks masks = piece_masks(cur_pos, range, token_window, tokens);
        if (masks.any()) {
            cb_wait_front(cb_mask, masked_tiles_bound(token_window, tokens) * q_tiles);  // one piece's pages fill the CB
        }
        cb_wait_front(cb_q, q_tiles * d_tiles);
        if constexpr (q_prescaled) {
            prescale_q();
        }
        // The root with no child holding keys and no sink finishes inside its last chunk.
        const bool fold = index == 0 && !has_sink &&
                          children_with_work(cur_pos, fixed_chunk_tiles, pieces_per_work, index, window,
                                             min_chunk_tiles, cyclic_split, chunk_cap) == 0;
        uint32_t cur = 0;  // the running set that holds the state
        for (uint32_t c = 0; c < range.num_chunks; ++c) {
            const uint32_t tiles = range.tiles_in_chunk(c);
            const uint32_t next = c == 0 ? 0 : cur ^ 1;
            const bool finish = fold && c + 1 == range.num_chunks;
            process_chunk(tiles, c == 0 ? nullptr : &running_sets[cur], running_sets[next], masks,
                          c * range.chunk_tiles, finish);
            cur = next;
            if (!finish) {
                wait_running(running_sets[cur]);
            }
        }
        if (masks.any()) {
            cb_pop_front(cb_mask, masked_tiles_bound(token_window, tokens) * q_tiles);
        }
        cb_pop_front(cb_q_in0, q_tiles * d_tiles);

        // Children in merge order: area r holds the child of round r (index + 2^r). A piece that is not
        // the root merges its last child with keys straight into its partial for the parent.
        bool sent = false;
        if (height > 0) {
            uint32_t with_work = 0;  // bit r: the child of round r has keys
            for (uint32_t r = 0; r < height; ++r) {
                if (piece_has_work(cur_pos, fixed_chunk_tiles, pieces_per_work, index + (1u << r), window,
                                   min_chunk_tiles, cyclic_split, chunk_cap)) {
                    with_work |= 1u << r;
                }
            }
            cb_wait_front(cb_partial_in, height * partial_tiles);
            for (uint32_t r = 0; r < height; ++r) {
                if (!((with_work >> r) & 1u)) {
                    continue;
                }
                if (index != 0 && (with_work >> (r + 1)) == 0) {
                    merge_child(r, running_sets[cur], to_partial);
                    sent = true;
                } else {
                    merge_child(r, running_sets[cur], to_running(running_sets[cur ^ 1]));
                    cur ^= 1;
                    wait_running(running_sets[cur]);
                }
            }
            cb_pop_front(cb_partial_in, height * partial_tiles);
        }

        if (fold) {
            // the output and LSE were written by the last chunk
        } else if (index == 0) {
            if constexpr (has_sink) {
                cb_wait_front(cb_sink, q_tiles);
                merge_sink(running_sets[cur], running_sets[cur ^ 1]);
                cur ^= 1;
                cb_pop_front(cb_sink, q_tiles);
            }
            finish_root(running_sets[cur]);
        } else if (!sent) {
            send_partial(running_sets[cur]);
        }
    }
}
