"""Our kernels' compute ops in closed form (kernels/flash_decode/compute.cpp): what one more key tile, one
more running chunk and one merge of a child's partial cost in ops and tiles (`OpTally`s), counted, not
measured; tests/test_costmodel.py pins them against real runs of the host runtime."""

from __future__ import annotations

from dataclasses import replace

from ttdecode.perf_model.evaluator import OpTally

__all__ = ["row_steps", "q_row_tiles", "copy_l1_rows", "exp_steps", "chunk_tile_ops", "chunk_ops", "merge_ops",
           "intermediate_bytes", "softmax_exp"]

def row_steps(head_rows: int) -> int:
    """Vector steps of a row-wise SFPU call of our chunk for `head_rows` q rows holding heads
    (kernels/flash_decode/compute.cpp): VectorMode::R on faces 0-1 with 2 x ceil(rows / 4) steps per face when
    they fit 16 rows (a step covers four rows, even or odd columns), else the whole tile (32)."""
    if head_rows > 16:
        return 32
    return 2 * 2 * -(-head_rows // 4)


def q_row_tiles(ops: dict[str, list[OpTally]], q_tile_rows: int) -> dict[str, list[OpTally]]:
    """`ops` of our kernel with its q-row CBs in tiles of `q_tile_rows` rows (DecodePlan.q_tile_rows): at
    16 (16x32 tiles) every matmul feeds 16 rows of in0 and every copy and pack moves half a tile (16
    vector steps' worth, as the runtime records them); at 8 (8x32 tiles) a matmul feeds 8 rows and a pack
    moves a quarter of a tile, but a copy's datacopy still moves 16 rows per face (its bytes are the
    caller's: copy_l1_rows). The closed forms below count calls and tiles, the same for every shape."""
    if q_tile_rows == 32:
        return ops
    out: dict[str, list[OpTally]] = {}
    for op, tallies in ops.items():
        if op == "matmul":
            out[op] = [replace(t, rows=min(t.rows, q_tile_rows)) for t in tallies]
        elif op == "copy":
            out[op] = [replace(t, steps=min(t.steps, 16)) for t in tallies]
        elif op == "pack":
            out[op] = [replace(t, steps=min(t.steps, q_tile_rows)) for t in tallies]
        else:
            out[op] = list(tallies)
    return out


def copy_l1_rows(q_tile_rows: int, im_bytes: int) -> int:
    """Rows of a q-row tile a copy into DST reads from L1: the tile's, except 8x32 fp32 tiles unpacked to
    an fp32 DST, which the unpacker reads 16 rows per face once one unpack to DST has left its X-end at a
    whole face (the LLK's TEN-3868 workaround, cunpack_common.h; only an init resets it, and the kernel
    inits a copy once per run of copies)."""
    return 16 if q_tile_rows == 8 and im_bytes == 4 else q_tile_rows


def exp_steps(exp: str, steps: int) -> int:
    """Vector steps an exp over `steps` asked steps runs: the approximate exp (ClampToNegative, the
    SFPLOADMACRO path) is unrolled for 8 steps per face and ignores ITERATIONS (ckernel_sfpu_exp.h,
    tt-llk#1486), so it runs whole faces: 8 per face of the ones asked."""
    if exp != "exp_approx":
        return steps
    return 8 * -(-steps // 8)


def chunk_tile_ops(q_tiles: int, d_tiles: int, dv_tiles: int, dst_tiles: int = 4,
                   exp: str = "exp", head_rows: int = 32, running: bool = False,
                   prescale_q: bool = False, q_tile_rows: int = 32, mla: bool = False,
                   kv_tile_bytes: int = 1088, finish: bool = False, im_bytes: int = 4) -> dict[str, list[OpTally]]:
    """The compute ops one more key tile adds to a chunk of our kernel (kernels/flash_decode/compute.cpp), per q tile
    row: Q.K^T and P.V and the row sum (d + dv + 1 matmul tiles; Q.K^T in one matmul_block call per d
    and DST block of dst_tiles key tiles (no mask added in the block), P.V one per DST block of
    dst_tiles - 1 Dv tiles, the row sum one call per key tile), the scale, the exp, the two copies of
    the logits (row max, probabilities), the row max's element-wise fold (one SFPU row reduction per
    chunk, not per tile) and the subtraction, two packs (scores, probabilities). Each DST block of
    dst_tiles - 1 probabilities adds one more copy, m_new broadcast along its rows, and its
    configuration calls (the subtraction and the exp make none per block: the accurate exp's state
    serves the subtraction and LReg[12..14] keep its constants, compute_tiles.hpp SfpuInit):
    - `running` False, the first chunk of a piece (no running set; the split floor's pieces of at most
      8 tiles): m_new broadcast from column 0 into each block (below 3 blocks, the kernel's
      max_bcast_tile): a copy init and a broadcast init (2);
    - `running` True, a chunk that rescales a running set: m_new copied from cb_max_bcast (made in
      the alpha pass) under the logits' copy init: none (the copy, matmul and scale inits are made
      once per chunk).
    `head_rows` (the q rows holding heads, tokens x group): the scale, the exp, the fold and the
    subtraction run `row_steps(head_rows)` vector steps. `prescale_q` (a power-of-two scale, Q scaled once
    per piece): no scale op. `q_tile_rows` 16 / 8: 16x32 / 8x32 q tiles (q_row_tiles, copy_l1_rows). The row sum P x ones rides in
    P.V's last matmul_block (the V slot's ones tile after each key tile row) when that block leaves a DST
    tile free (Dv tiles not a multiple of the block), else one matmul_tiles call per key tile; with `mla`
    (V in the K slot, no ones tile there) or `finish` (the root's last chunk when it rescales a running set
    or writes the LSE: 1/l is needed before P.V's blocks) always the latter; the root's only chunk with
    no LSE (kernels/flash_decode/compute.cpp finish_single_chunk) is priced as a first chunk (the sum rides in P.V). L1 bytes (`kv_tile_bytes` a K/V tile):
    Q.K^T's in1 K tiles and per call its in0 Q (bf16), P.V's in1 V and ones tiles (V's format; with MLA
    the ones tile is bf16) and per call its in0 probabilities; copies and packs of q-row tiles of the
    intermediates' `im_bytes`-byte data (fp32 4 with an fp32 DST, bf16 2 with a bf16 DST). Pinned against real runs in tests/test_costmodel.py."""
    block = 1 / max(1, dst_tiles - 1)
    rows = row_steps(head_rows)
    pv_calls = -(-dv_tiles // max(1, dst_tiles - 1))  # P.V: one matmul_block per key tile and Dv block
    # the row sum in P.V's last block (chunk_output's with_sum) or on its own (chunk_row_sum)
    sum_block = max(1, dst_tiles - 1) if running else max(1, dst_tiles)
    sum_calls = 1 if mla or finish or dv_tiles % sum_block == 0 else 0
    # Q.K^T: one matmul_block per d and DST block of key tiles; the row sum one call per key tile
    qk_calls = d_tiles / max(1, dst_tiles)
    inits = q_tiles * (0 if running else 2) * block
    f32, bf16 = _q_row_bytes(im_bytes, q_tile_rows), _q_row_bytes(2, q_tile_rows)
    copied = _q_row_bytes(im_bytes, copy_l1_rows(q_tile_rows, im_bytes))
    qk_n, pv_n = q_tiles * qk_calls, q_tiles * (pv_calls + sum_calls)
    ones = 2048 if mla else kv_tile_bytes
    copies = q_tiles * (2 + block)
    return q_row_tiles({"matmul": [
                OpTally(q_tiles * d_tiles, qk_n, l1_bytes=q_tiles * d_tiles * kv_tile_bytes + qk_n * bf16,
                        unpacks=q_tiles * d_tiles + qk_n),
                OpTally(q_tiles * (dv_tiles + 1), pv_n,
                        l1_bytes=q_tiles * (dv_tiles * kv_tile_bytes + ones) + pv_n * f32,
                        unpacks=q_tiles * (dv_tiles + 1) + pv_n)],
            "init": [OpTally(inits, inits)] if inits else [],
            "scalar": [] if prescale_q else [OpTally(q_tiles, q_tiles, steps=rows)],
            exp: [OpTally(q_tiles, q_tiles, steps=exp_steps(exp, rows))],
            "copy": [OpTally(copies, round(copies), l1_bytes=copies * copied, unpacks=copies)],
            # the row max's element-wise fold and the subtraction of the max
            "max": [OpTally(2 * q_tiles, 2 * q_tiles, steps=rows)],
            "pack": [OpTally(2 * q_tiles, 2 * q_tiles, l1_bytes=2 * q_tiles * f32)]}, q_tile_rows)


def _q_row_bytes(datum_bytes: int, q_tile_rows: int) -> int:
    """L1 bytes of one q-row tile (q_tile_rows x 32) of `datum_bytes`-byte data (fp32 4, bf16 2)."""
    return datum_bytes * 32 * q_tile_rows


def chunk_ops(q_tiles: int, dv_tiles: int, exp: str = "exp", head_rows: int = 32,
              q_tile_rows: int = 32, mla: bool = False, im_bytes: int = 4) -> dict[str, list[OpTally]]:
    """The fixed compute ops of a chunk that rescales a running set (kernels/flash_decode/compute.cpp), beyond its
    key tiles' chunk_tile_ops, per q tile row: the row max's SFPU row reduction (a full tile), m_new
    against the running max, alpha's subtraction and exp, the rescale of l and of O (a multiply per Dv
    tile), the copies in and packs out of the running set, and the configuration calls that the
    chunk's change of ops makes (about 18 + Dv tiles). Read off real runs of 8-tile chunks (a piece of
    3 chunks minus one of 2, less 8 x chunk_tile_ops): copies 5 + Dv + Dv // 3, packs 4 + Dv, row-wise
    binary ops 2 + Dv, exactly at Dv 1-8 tiles; configuration calls within 2; pinned in
    tests/test_costmodel.py. For the plan's choice of key_row pieces (key_row_pieces)."""
    row = row_steps(head_rows)
    copies = q_tiles * (5 + dv_tiles + dv_tiles // 3)
    packs = q_tiles * (4 + dv_tiles)
    f32 = _q_row_bytes(im_bytes, q_tile_rows)  # the running set, the scores and the factors (fp32 or bf16)
    copied = _q_row_bytes(im_bytes, copy_l1_rows(q_tile_rows, im_bytes))
    # without MLA the row sum's in1 is the V slot's ones tile: no matmul init and no srcA reconfig
    # (to cb_ones and back) of its own
    inits = (18 if mla else 16) + dv_tiles
    return q_row_tiles({"init": [OpTally(inits, inits)],
                        "copy": [OpTally(copies, copies, l1_bytes=copies * copied, unpacks=copies)],
                        "max": [OpTally(q_tiles * (2 + dv_tiles), q_tiles * (2 + dv_tiles), steps=row),
                                OpTally(q_tiles, q_tiles)],
                        exp: [OpTally(q_tiles, q_tiles, steps=exp_steps(exp, row))],
                        "pack": [OpTally(packs, packs, l1_bytes=packs * f32)]}, q_tile_rows)


def merge_ops(q_tiles: int, dv_tiles: int, exp: str = "exp", head_rows: int = 32,
              dst_tiles: int = 4, q_tile_rows: int = 32, im_bytes: int = 4) -> dict[str, list[OpTally]]:
    """The compute ops of one merge of a child's partial (kernels/flash_decode/compute.cpp merge_child), per q
    tile row: the factors (two copies, a max, two subtractions and two exps on the statistics'
    column: faces 0 and 2, or with <= 16 head rows face 0's head rows; three packs), l on the same
    lanes (four copies: l, the child's l and the two factors as they lie; a multiply, an addcmul, a
    pack), then O in blocks of dst_tiles - 2 tiles per DST acquire (per block the O tiles and the
    child's, and two broadcasts: e_own, then e_child; per tile a multiply and an addcmul on the head
    rows and a pack). Pinned against real runs in tests/test_costmodel.py."""
    row = row_steps(head_rows)
    stat = row // 2 if head_rows <= 16 else 16  # VectorMode::None with the head rows' steps, else C
    blocks = -(-dv_tiles // max(1, dst_tiles - 2))
    # inits per q tile row: the max and the subtraction of the factors (their exp and the multiply of
    # l and O ride on them: the accurate exp's state serves the binary family and LReg[12..14] keep its
    # constants since the chunks' exp; compute_tiles.hpp SfpuInit), and per O block a broadcast and a
    # copy init (the factors, l and the block's first tiles share the copy init: one unpack path). Plus
    # about one per merge: the first merge after the chunks re-inits the copy and reconfigures srcB, the
    # next ones neither.
    inits = q_tiles * (2 + 2 * blocks) + 1
    copies = q_tiles * (6 + 2 * dv_tiles + 2 * blocks)
    packs = q_tiles * (4 + dv_tiles)
    f32 = _q_row_bytes(im_bytes, q_tile_rows)  # partials, statistics and factors (fp32 or bf16 tiles)
    # with 8x32 fp32 tiles the first copy or broadcast after each of their inits (two per O block, and
    # about one per merge) reads the tile's 8 rows, the later ones 16 (copy_l1_rows)
    first = q_tiles * 2 * blocks + 1 if copy_l1_rows(q_tile_rows, im_bytes) != q_tile_rows else 0
    copy_bytes = copies * _q_row_bytes(im_bytes, copy_l1_rows(q_tile_rows, im_bytes)) - first * f32
    return q_row_tiles({"init": [OpTally(inits, inits)],
                        "copy": [OpTally(copies, copies, l1_bytes=copy_bytes, unpacks=copies)],
                        "max": [OpTally(q_tiles * dv_tiles, q_tiles * dv_tiles, steps=row),
                                OpTally(4 * q_tiles, 4 * q_tiles, steps=stat)],
                        exp: [OpTally(2 * q_tiles, 2 * q_tiles, steps=exp_steps(exp, stat))],
                        "ternary": [OpTally(q_tiles * dv_tiles, q_tiles * dv_tiles, steps=row),
                                    OpTally(q_tiles, q_tiles, steps=stat)],
                        "pack": [OpTally(packs, packs, l1_bytes=packs * f32)]}, q_tile_rows)


def intermediate_bytes(fp32_dest_acc_en: bool) -> int:
    """Datum bytes of our kernels' softmax intermediates (plan.flash_decode_cbs): fp32 with an fp32 DST,
    bf16 with a bf16 DST."""
    return 4 if fp32_dest_acc_en else 2


def softmax_exp(fp32_dest_acc_en: bool, exp_approx: bool = False) -> str:
    """The softmax exp our kernels run: the approximate one with `exp_approx` (the kernels' exp_approx arg,
    SDPAProgramConfig.exp_approx_mode resolved), else the fp32-accurate one with an fp32 DST, else exp_21f (bf16)."""
    if exp_approx:
        return "exp_approx"
    return "exp" if fp32_dest_acc_en else "exp_bf16"
