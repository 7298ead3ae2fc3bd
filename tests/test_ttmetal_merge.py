"""tt-metal's merge round (one child's partial into its parent's) as the model prices it, against a hand count
of tt-metal's kernels in the ttnn 0.81.1 wheel: sdpa_decode's compute kernel
(ttnn/operations/transformer/sdpa_decode/device/kernels/compute/sdpa_flash_decode.cpp, the tree's loop over
its children), the helpers of sdpa's compute_common.hpp and the LLK's fused SFPU function
(hw/ckernels/wormhole_b0/metal/llk_api/experimental/llk_sfpu/ckernel_sfpu_sdpa.h)."""

from __future__ import annotations

import dataclasses

import pytest

from ttdecode.perf_model.evaluator import op_class
from ttdecode.perf_model.ttmetal_structure import TTMetalShape, ttmetal_work

# B 1, 8q/1kv (half Q tiles, VectorMode::R) and 32q/8kv (whole tiles, VectorMode::RC), D 128 (dv 4), 32K:
# several cores per head, so a tree of merges
HALF = TTMetalShape(1, 8, 1, 128, 32767, 32768, max_cores_per_head_batch=16)
WHOLE = TTMetalShape(1, 32, 8, 128, 32767, 32768)


def _tiles(merge, op: str) -> float:
    return sum(t.tiles for t in merge.get(op, []))


def _calls(merge, op: str) -> int:
    return sum(t.calls for t in merge.get(op, []))


@pytest.mark.parametrize("shape,steps", [(HALF, 16), (WHOLE, 32)])
def test_a_merge_round_is_its_kernels_fused_correction_and_its_moves(shape: TTMetalShape, steps: int) -> None:
    """Counts per round, one q tile row, dv = 4 (sdpa_flash_decode.cpp lines 609-646):
    move_block_ool(l) 1 copy (609); correction_block (618; compute_common.hpp 784-853): per head tile
    copy_init and exp_tile_init (830-831), 4 copy_tile (832-835), ONE fused SFPU call (836) and 4 pack_tile
    (839-842); move_block_ool(O) dv copies (630); two mul_block_bcast_cols_inplace, 2 dv (634-635); one
    add_block_inplace, dv (638); move_block_ool of the new max and sum, 2 copies (645-646). Every
    move_block / mul / add packs each tile (compute_common.hpp 876, 582, 653): packs 1 + 4 + dv + 2 dv
    + dv + 2 = 7 + 4 dv. Inits (one per op block, reconfigs included): 1 + 2 + 1 + 2 + 1 + 2 = 9. No
    max, sub, exp or mul of its own: the fused op holds them."""
    _, red, counts = ttmetal_work(shape)
    assert counts["rounds"] >= 2 and counts["q_tile_rows"] == 1
    merge, dv = red.merge_per_round, 4
    assert _tiles(merge, "copy") == _calls(merge, "copy") == 1 + 4 + dv + 2
    assert _tiles(merge, "mul_bcast") == 2 * dv and _tiles(merge, "add") == dv
    assert _tiles(merge, "pack") == _calls(merge, "pack") == 7 + 4 * dv
    assert _calls(merge, "init") == 9
    assert not {"max", "sub", "mul"} & set(merge)
    # the fused op: 4 steps on each face its vector mode runs (ckernel_sfpu_sdpa.h ITERATIONS_HALF_FACE 4;
    # VectorMode::R faces 0-1, RC all four): 8 / 16 steps; its exps the accurate one of a bf16 DST
    assert {op for op in merge if op_class(op) == "sfpu"} == {"correction_bf16"}
    assert [(t.tiles, t.calls, t.steps) for t in merge["correction_bf16"]] == [(1, 1, steps // 2)]


def test_a_merge_with_several_q_tile_rows_runs_correction_blocks_inits_per_tile() -> None:
    """With qt q tile rows (MLA: 128 q heads, qt 4) every tile count is times qt; correction_block's copy and
    exp inits sit inside its loop over the head tiles (compute_common.hpp 829-831): 2 qt of them, the other
    blocks' one each."""
    mla = TTMetalShape(4, 128, 1, 576, (0, 170, 341, 512), 1024, grid=(8, 8), k_chunk_size=128,
                       kv_dtype="bfloat16", head_dim_v=512, index_memory="dram", q_memory="l1")
    _, red, counts = ttmetal_work(mla)
    qt, dv = counts["q_tile_rows"], 16
    assert qt == 4
    merge = red.merge_per_round
    assert _tiles(merge, "copy") == qt * (7 + dv) and _tiles(merge, "pack") == qt * (7 + 4 * dv)
    assert _calls(merge, "init") == 7 + 2 * qt
    assert [(t.tiles, t.calls) for t in merge["correction_bf16"]] == [(qt, qt)]


def test_before_pr_32501_the_merge_keeps_the_separate_correction_ops() -> None:
    """fused_correction False (the tech report's and PR #26227's versions): max, sub, exp and mul blocks of
    their own, no fused op; each block packs its tiles (compute_common.hpp's max_block_inplace and the other
    block functions end every tile with pack_tile; sub and exp in one pass): l 1, max 1, sub-exp 2, the sums'
    mul 2 and add 1, O dv, its products 2 dv and sums dv, m and l 2 = 9 + 4 dv."""
    _, red, _ = ttmetal_work(dataclasses.replace(HALF, fused_correction=False))
    merge = red.merge_per_round
    assert {"max", "sub", "exp_bf16", "mul"} <= set(merge) and "correction_bf16" not in merge
    assert _tiles(merge, "pack") == _calls(merge, "pack") == 9 + 4 * 4
