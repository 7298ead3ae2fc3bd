"""The calibrated Wormhole cost model (ttdecode.perf_model): its terms on hand-computed cases, the NoC
geometry, its reading of one tiny real run of the FlashDecode kernels on the host runtime, and
tt-metal's structure (ttdecode.perf_model.ttmetal_structure) against a hand count."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from ttdecode.core.noc_geometry import noc_hops
from ttdecode.ops.flash_decode.plan.split_choices import split_floor_tiles
from ttdecode.perf_model.constants import COST, COST_SOURCES
from ttdecode.perf_model.counters import Message, match_tree, work_from_counters, writer_messages
from ttdecode.perf_model.evaluator import (CoreWork, OpTally, evaluate, op_class, op_cycles, reader_cycles,
                                           reduction_cycles, sfpu_tile_cycles)
from ttdecode.perf_model.op_counts import chunk_ops, chunk_tile_ops, merge_ops
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.split import valid_tiles
from ttdecode.ops.flash_decode.plan import DecodePlan, make_plan
from ttdecode.core.program_description import ComputeSettings, CoreCoord, MathFidelity
from ttdecode.core.tensor import from_torch
from ttdecode.perf_model.ttmetal_structure import TTMetalShape, exp_ops, half_q_tiles, ttmetal_work


# ---- the NoC --------------------------------------------------------------------------------------


def test_noc0_hops_run_east_and_south_around_the_torus() -> None:
    a, b = CoreCoord(0, 0), CoreCoord(1, 0)
    assert noc_hops(a, b) == 1
    assert noc_hops(b, a) == 10 - 1  # the long way round the 10-column torus
    assert noc_hops(a, a) == 0
    assert noc_hops(CoreCoord(3, 0), CoreCoord(4, 0)) == 2  # worker columns 4 and 6: column 5 is DRAM
    assert noc_hops(CoreCoord(0, 4), CoreCoord(0, 5)) == 2  # worker rows 5 and 7: row 6 holds no Tensix


# ---- one tiny real run ----------------------------------------------------------------------------


def _run(max_cores: int) -> tuple[DecodePlan, object]:
    b, nh, nkv, s, d = 1, 8, 2, 1024, 64
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, b, nh, d, generator=g))
    k = from_torch(torch.randn(b, nkv, s, d, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(b, nkv, s, d, generator=g), DataType.bfloat8_b)
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, cur_pos=[s - 1],
                     grid=(4, 2), max_cores_per_head_batch=max_cores)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1 / math.sqrt(d),
                                    compute=ComputeSettings(math_fidelity=MathFidelity.HiFi2))
    return plan, result.counters


@pytest.fixture(scope="module")
def runs() -> dict[int, tuple[DecodePlan, object]]:
    return {mc: _run(mc) for mc in (1, 4)}


def test_real_run_kv_bytes_are_every_valid_key_tile_of_k_and_v_once(runs) -> None:
    plan, counters = runs[4]
    works, _, fidelity = work_from_counters(plan, counters)
    tiles = valid_tiles(plan.cur_pos[0]) * plan.num_kv_heads * (plan.d_tiles + plan.dv_tiles)
    assert sum(w.kv_bytes for w in works) == tiles * tile_size(DataType.bfloat8_b)
    assert fidelity == "HiFi2"


def test_real_run_messages_follow_the_binomial_tree_round_by_round(runs) -> None:
    plan, counters = runs[4]
    assert plan.pieces_per_work == 4 and plan.rounds == 2
    msgs = match_tree(plan, writer_messages(counters))
    assert len(msgs) == plan.num_kv_heads * (plan.pieces_per_work - 1)
    per_round = [sum(m.bytes for m in msgs if m.round == r) for r in range(plan.rounds)]
    assert per_round[0] == 2 * per_round[1] > 0  # round 0: two messages per work, round 1: one


def test_real_run_with_more_cores_per_head_has_less_local_time_and_a_reduction(runs) -> None:
    one, four = (evaluate(*work_from_counters(*runs[mc])) for mc in (1, 4))
    assert one.reduction_us == 0 and four.reduction_us > 0
    assert four.local_us < one.local_us
    assert four.kv_bytes == one.kv_bytes
    assert four.total_us == pytest.approx(four.start_spread_us + four.local_us + four.reduction_us)


def test_real_run_merge_charges_only_the_vector_steps_of_the_rows_that_hold_heads(runs) -> None:
    """4 q heads per KV head: the merge's statistics ops (max, subtractions, exps on column 0, and l's
    multiply and addcmul) run on face 0 only (VectorMode::None) for its first four rows: 2 vector steps
    (one step = four rows, even or odd columns); its row ops on O (multiply, addcmul) on faces 0-1's
    first four rows: 2 x 2 steps. The runtime records the steps in the event's flag and the model
    charges them."""
    plan, counters = runs[4]
    assert plan.num_tokens * plan.group_size == 4
    _, red, fidelity = work_from_counters(plan, counters)
    merge = red.merge_per_round
    assert {t.steps for t in merge["exp"]} == {2}
    assert {t.steps for t in merge["max"]} == {2, 4}
    assert {t.steps for t in merge["ternary"]} == {2, 4}
    exp2 = OpTally(1, 1, steps=2)
    assert op_cycles("exp", exp2, fidelity) == pytest.approx(40 * 2 + COST.tile_call_cycles)


def _totals(ops) -> dict[tuple, float]:
    """Tiles per (op, vector steps), a matmul's keyed by its in0 rows too: (op, steps, rows); and the L1
    bytes of the ops that unpack or pack: ("l1_bytes", op)."""
    out: dict[tuple, float] = {}
    for op, ts in ops.items():
        for t in ts:
            key = (op, t.steps, t.rows) if op == "matmul" else (op, t.steps)
            out[key] = out.get(key, 0.0) + t.tiles
            if t.l1_bytes:
                out[("l1_bytes", op)] = out.get(("l1_bytes", op), 0.0) + t.l1_bytes
    return out


def test_merge_ops_are_the_kernels_merge_as_counted_by_the_runtime(runs) -> None:
    """split_floor_tiles' closed form of one merge equals the root's merge in a real run (D 64)."""
    plan, counters = runs[4]
    _, red, _ = work_from_counters(plan, counters)
    got = _totals(red.merge_per_round)
    want = _totals(merge_ops(plan.q_tiles, plan.dv_tiles, head_rows=plan.num_tokens * plan.group_size,
                              q_tile_rows=plan.q_tile_rows))
    # configuration calls: within one per merge (only the first merge after the chunks reconfigures srcB);
    # with 8x32 fp32 tiles the copies' L1 bytes within one tile (the first copy after that init reads 8 rows)
    assert abs(got.pop(("init", 32)) - want.pop(("init", 32))) <= 1
    tile_bytes = 4 * 32 * plan.q_tile_rows
    assert abs(got.pop(("l1_bytes", "copy")) - want.pop(("l1_bytes", "copy"))) <= (tile_bytes if plan.q_tile_rows == 8 else 0)
    assert got == want


def _one_piece_compute(pos: int, s: int = 256, d: int = 64, prescale_q: bool = False, q_tile_rows: int = 16):
    b, nh, nkv = 1, 8, 1
    g = torch.Generator().manual_seed(1)
    q = from_torch(torch.randn(1, b, nh, d, generator=g))
    k = from_torch(torch.randn(b, nkv, s, d, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(b, nkv, s, d, generator=g), DataType.bfloat8_b)
    # chunks of at most 8 tiles, the size the per-chunk closed forms are read off
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, cur_pos=[pos], grid=(1, 1),
                     chunk_cap=8, prescale_q=prescale_q, q_tile_rows=q_tile_rows)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=0.125,
                                    compute=ComputeSettings(math_fidelity=MathFidelity.HiFi2))
    works, _, _ = work_from_counters(plan, result.counters)
    return plan, works[0].compute


def _per_tile(short, long, tiles: int) -> dict[tuple[str, int], float]:
    a, b = _totals(short), _totals(long)
    return {key: (b.get(key, 0) - a.get(key, 0)) / tiles for key in set(a) | set(b)}


_cycles = lambda ops: sum(op_cycles(op, t, "HiFi2") for op, ts in ops.items() for t in ts)  # noqa: E731


@pytest.mark.parametrize("q_rows", [16, 32])
def test_chunk_tile_ops_are_what_one_more_key_tile_costs_in_a_running_chunk(q_rows: int) -> None:
    """A piece of 8 + 8 key tiles minus one of 8 + 4 (the second chunk rescales a running set and is the
    root's last: its row sum is a matmul_tiles call per key tile; the same fixed work) / 4 = one key tile
    of a finishing chunk with a running set: exact for matmuls (tiles and L1 bytes), exps, scales, binary
    ops and packs (tiles and bytes); copies (one more per DST block of probabilities) and the modelled
    cycles within 5%."""
    plan, short = _one_piece_compute(383, 512, q_tile_rows=q_rows)
    _, long = _one_piece_compute(511, 512, q_tile_rows=q_rows)
    r = plan.range_at(383, 0)
    assert (r.num_chunks, r.chunk_tiles, r.num_tiles) == (2, 8, 12)
    per_tile = _per_tile(short, long, 4)
    rows = plan.num_tokens * plan.group_size  # 8 q heads: rows 0-7 of faces 0-1, 4 steps each
    ops = chunk_tile_ops(plan.q_tiles, plan.d_tiles, plan.dv_tiles, plan.dst_tiles, q_tile_rows=plan.q_tile_rows,
                         head_rows=rows, running=True, finish=True)
    want = _totals(ops)
    assert rows == 8
    for key in (("matmul", 32, q_rows), ("exp", 8), ("scalar", 8), ("max", 8), ("pack", q_rows),
                ("l1_bytes", "matmul"), ("l1_bytes", "pack")):
        assert per_tile[key] == want[key], key
    assert per_tile[("copy", q_rows)] == pytest.approx(want[("copy", q_rows)], rel=0.05)
    assert _cycles(ops) == pytest.approx((_cycles(long) - _cycles(short)) / 4, rel=0.05)


def test_the_row_sum_rides_in_p_v_s_matmul_block_with_no_call_of_its_own() -> None:
    """D 64 (2 Dv tiles, a DST block of 3 with alpha): P x ones is the third tile of P.V's matmul_block (the
    V slot's ones tile after each key tile row), so one more key tile of a running chunk adds Q.K^T's share
    of a call (2 d tiles per block of 4 key tiles: 1/2) and one P.V call: 1.5 matmul calls, 5 matmul tiles.
    A piece of 3 chunks of 8 minus one of 2: the middle chunk, a running one that does not finish the root
    (the root's last chunk computes l on its own before P.V: 1/l scales the output in P.V's pass)."""
    plan, short = _one_piece_compute(511, 1024)
    _, long = _one_piece_compute(767, 1024)
    calls = lambda ops: sum(t.calls for t in ops["matmul"])  # noqa: E731
    tiles = lambda ops: sum(t.tiles for t in ops["matmul"])  # noqa: E731
    assert (calls(long) - calls(short)) / 8 == 1.5
    assert (tiles(long) - tiles(short)) / 8 == 5
    ops = chunk_tile_ops(plan.q_tiles, plan.d_tiles, plan.dv_tiles, plan.dst_tiles, running=True)
    assert calls(ops) == 1.5 and tiles(ops) == 5


def test_a_key_tile_with_q_prescaled_costs_the_same_but_the_scale_op() -> None:
    """The scale is 0.125 = 2^-3: with prescale_q the compute kernel scales Q once per piece, and one more
    key tile of a running chunk adds exactly chunk_tile_ops(prescale_q=True): no scale op, the rest alike."""
    plan, short = _one_piece_compute(383, 512, prescale_q=True)
    _, long = _one_piece_compute(511, 512, prescale_q=True)
    per_tile = _per_tile(short, long, 4)
    ops = chunk_tile_ops(plan.q_tiles, plan.d_tiles, plan.dv_tiles, plan.dst_tiles, q_tile_rows=plan.q_tile_rows, head_rows=8, running=True,
                         prescale_q=True, finish=True)
    want = _totals(ops)
    assert ("scalar", 8) not in want and per_tile.get(("scalar", 8), 0) == 0
    for key in (("matmul", 32, 16), ("exp", 8), ("max", 8), ("pack", 16)):
        assert per_tile[key] == want[key], key
    assert _cycles(ops) == pytest.approx((_cycles(long) - _cycles(short)) / 4, rel=0.05)


def test_chunk_tile_ops_are_what_one_more_key_tile_costs_in_a_pieces_first_chunk() -> None:
    """The first chunk of a piece (no running set; the split floor's case): one of 4 key tiles minus
    one of 1 / 3 (both broadcast m_new into each DST block of probabilities): every op's tiles exact;
    configuration calls exact but for the row max fold's init, which a 1-tile chunk does not make;
    the modelled cycles within 5% (matmul calls: 4 key tiles are one Q.K^T block, as 1 is)."""
    plan, short = _one_piece_compute(31)
    _, long = _one_piece_compute(127)
    per_tile = _per_tile(short, long, 3)
    ops = chunk_tile_ops(plan.q_tiles, plan.d_tiles, plan.dv_tiles, plan.dst_tiles, q_tile_rows=plan.q_tile_rows,
                         head_rows=plan.num_tokens * plan.group_size)
    want = _totals(ops)
    assert 3 * per_tile.pop(("init", 32)) == pytest.approx(3 * want.pop(("init", 32)) + 1)
    # 4 key tiles are one Q.K^T block as 1 is: the in0 (Q, bf16) unpacks the closed form spreads over
    # the key tiles (d / dst_tiles per tile) do not show in the difference
    q_tile = 2 * 32 * plan.q_tile_rows
    assert per_tile.pop(("l1_bytes", "matmul")) == pytest.approx(
        want.pop(("l1_bytes", "matmul")) - plan.d_tiles / plan.dst_tiles * q_tile)
    for key in set(want) | set(per_tile):
        assert per_tile.get(key, 0) == pytest.approx(want.get(key, 0)), key
    assert _cycles(ops) == pytest.approx((_cycles(long) - _cycles(short)) / 3, rel=0.05)


@pytest.mark.parametrize(("d", "q_rows"), [(64, 16), (128, 16), (64, 32)])
def test_chunk_ops_are_what_one_more_running_chunk_costs_beyond_its_key_tiles(d: int, q_rows: int) -> None:
    """A piece of 3 chunks of 8 key tiles minus one of 2, less 8 x chunk_tile_ops, is one running
    chunk's fixed work: copies, packs, the row-wise binary ops, alpha's exp and the row reduction exact;
    configuration calls within 2; the modelled cycles within 5%."""
    plan, short = _one_piece_compute(511, 1024, d, q_tile_rows=q_rows)
    _, long = _one_piece_compute(767, 1024, d, q_tile_rows=q_rows)
    assert (plan.range_at(767, 0).num_chunks, plan.range_at(767, 0).chunk_tiles) == (3, 8)
    rows = plan.num_tokens * plan.group_size
    tile = chunk_tile_ops(plan.q_tiles, plan.d_tiles, plan.dv_tiles, plan.dst_tiles, q_tile_rows=plan.q_tile_rows, head_rows=rows, running=True)
    fixed = _per_tile(short, long, 1)
    for key, n in _totals(tile).items():
        fixed[key] = fixed.get(key, 0) - 8 * n
    want = _totals(chunk_ops(plan.q_tiles, plan.dv_tiles, head_rows=rows, q_tile_rows=plan.q_tile_rows))
    assert abs(fixed.pop(("init", 32)) - want.pop(("init", 32))) <= 2
    block_rounding = 3 - 8 / 3  # 8 key tiles are 3 DST blocks of probabilities, 8 / 3 in chunk_tile_ops
    assert fixed.pop(("copy", q_rows)) == pytest.approx(want.pop(("copy", q_rows)) + block_rounding)
    f32_tile = 4 * 32 * q_rows  # the copies unpack fp32 q-row tiles
    assert fixed.pop(("l1_bytes", "copy")) == pytest.approx(want.pop(("l1_bytes", "copy")) + block_rounding * f32_tile)
    assert {k: v for k, v in fixed.items() if abs(v) > 1e-9} == pytest.approx(want)
    assert _cycles(chunk_ops(plan.q_tiles, plan.dv_tiles, head_rows=rows, q_tile_rows=plan.q_tile_rows)) == pytest.approx(
        _cycles(long) - _cycles(short) - 8 * _cycles(tile), rel=0.05)


def test_split_floor_is_the_smallest_power_of_two_whose_tiles_outweigh_a_round() -> None:
    assert split_floor_tiles(1, 4, 4) == 4  # D 128, 32 head rows: 4 key tiles outweigh one round
    assert split_floor_tiles(1, 2, 2) == 4
    dear_rounds = dataclasses.replace(COST, semaphore_handshake_cycles=1e6)
    assert split_floor_tiles(1, 4, 4, c=dear_rounds) == 8  # capped at the largest dynamic chunk
    cheap_rounds = dataclasses.replace(COST, semaphore_handshake_cycles=-20_000.0)
    assert split_floor_tiles(1, 4, 4, c=cheap_rounds) == 1


# ---- the cost model's arithmetic and tt-metal's structure as data -----------------------------------


def test_every_cost_constant_names_its_source() -> None:
    import dataclasses
    names = {f.name for f in dataclasses.fields(COST)} - {"fidelity_phases"}
    assert names <= set(COST_SOURCES), sorted(names - set(COST_SOURCES))


def test_half_row_matmul_costs_the_slower_of_unpack_and_hifi2_math_per_tile_plus_the_overhead_per_call() -> None:
    # documented: unpack 2 cycles + 2048 B at 64 B/cycle; matmul 16 cycles x 2 phases x 16/32 rows
    unpack = 2 + 2048 / 64
    math_ = 16 * 2 * 16 / 32
    expected = 10 * max(unpack, math_) + 2 * 20
    assert op_cycles("matmul", OpTally(10, 2, rows=16), "HiFi2") == pytest.approx(expected)
    # a half-tile in0 (16 rows, tt-metal's Q and probabilities) still meets a whole 32 x 32 in1 tile (K or
    # V): the in1 unpack does not halve
    assert op_cycles("matmul", OpTally(10, 2, rows=16, steps=16), "HiFi2") == pytest.approx(expected)
    # HiFi4 on full rows: math (64) now exceeds unpack (34)
    assert op_cycles("matmul", OpTally(10, 2), "HiFi4") == pytest.approx(10 * 64 + 2 * 20)


def test_configuration_calls_cost_init_cycles_each_and_nothing_per_tile() -> None:
    assert op_cycles("init", OpTally(7, 7), "HiFi2") == pytest.approx(7 * 60)
    assert op_cycles("init", OpTally(0, 3), "HiFi4") == pytest.approx(3 * 60)


def test_bf16_exp_runs_22_instructions_per_vector_step_and_vector_mode_r_halves_the_steps() -> None:
    assert sfpu_tile_cycles("exp_bf16", 32) == pytest.approx(22 * 32)
    assert sfpu_tile_cycles("exp_bf16", 16) == pytest.approx(22 * 16)
    assert sfpu_tile_cycles("exp_approx", 32) == pytest.approx(70.7)


def test_reader_pays_the_dram_latency_per_barrier_then_the_slower_of_plateau_and_request_rate() -> None:
    assert reader_cycles([(22_300, 10)]) == pytest.approx(384 + 22_300 / 22.3)
    assert reader_cycles([(1_000, 100)]) == pytest.approx(384 + 100 * 6.8)  # many small requests
    assert reader_cycles([(1_000, 1), (1_000, 1)]) == pytest.approx(2 * (384 + 1_000 / 22.3))


def test_ttmetal_structure_counts_match_a_hand_count_of_its_kernels() -> None:
    # B=1, 8q/1kv, D=64 (2 tiles), cur_pos=1023: dynamic chunk pow2ceil(1023//32 + 1) = 32 -> capped at 8 tiles;
    # 1024 keys = 4 chunks over min(4, cores per head 4) cores: one chunk each, 2 tree rounds
    works, red, counts = ttmetal_work(TTMetalShape(1, 8, 1, 64, 1023, 1024, grid=(2, 2), max_cores_per_head_batch=4))
    assert counts == {"chunks_per_head": 4, "active_cores_per_head": 4, "rounds": 2, "chunk_tiles": 8,
                      "cores_per_head": 4, "q_tile_rows": 1, "grid_cores": 4}
    assert len(works) == 4 and len(red.rounds) == 2
    w = works[0]
    assert sum(t.tiles for t in w.compute["matmul"]) == 8 * 2 + 8 * 2  # QK^T (8x2) + PV (8x2)
    assert [n for _, n in w.read_groups] == [2, 16, 16]  # Q tiles, K tiles, V tiles: one request each
    assert sum(b for b, _ in w.read_groups[1:]) == 32 * 1088
    assert w.kv_bytes == 32 * 1088
    # message: l, m and 2 O tiles of bf16
    assert all(nbytes == 4 * 2048 for nbytes, _ in red.rounds)


def test_ttmetal_time_grows_with_the_cache_and_more_cores_cut_the_local_time() -> None:
    t = [evaluate(*ttmetal_work(TTMetalShape(1, 8, 1, 128, s - 1, s))[:2], "HiFi2") for s in (1024, 8192, 65536)]
    assert t[0].total_us < t[1].total_us < t[2].total_us
    few, many = (evaluate(*ttmetal_work(TTMetalShape(1, 4, 1, 128, 32767, 32768, max_cores_per_head_batch=m))[:2],
                          "HiFi2") for m in (2, 16))
    assert many.local_us < few.local_us and many.reduction_us > few.reduction_us


def test_quick_sweep_writes_both_kernels_at_the_tg_llama70b_point(tmp_path) -> None:
    import csv
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("sweep_fd", Path(__file__).resolve().parents[1] / "perf" / "sweep_flash_decode.py")
    mod = importlib.util.module_from_spec(spec)
    import sys
    sys.modules["sweep_fd"] = mod  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        sys.modules.pop("sweep_fd", None)
    assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
    with (tmp_path / "sweep_flash_decode_quick.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {"sweep", "kernel", "est_us", "achieved_gbps"} <= set(rows[0])
    tg = {r["kernel"]: r for r in rows if r["sweep"] == "tg-llama70b"}
    assert set(tg) == {"ttdecode", "tt-metal"}
    for r in tg.values():
        assert float(r["est_us"]) > 0 and float(r["achieved_gbps"]) > 0
    # our kernels at the same point with tt-metal's numerics (bf16 DST, approximate exp): ours only
    assert [r["kernel"] for r in rows if r["sweep"] == "tg-numerics"] == ["ttdecode"]
    # both kernels at HiFi4 (ours: the package default): our matmuls are unpack-bound with 8 q rows (HiFi4's
    # 16 cycles of math per in1 tile under a bfloat8_b tile's 19 of unpack), tt-metal's 16-row ones are not
    hifi4 = {r["kernel"]: float(r["est_us"]) for r in rows if r["sweep"] == "tg-hifi4"}
    assert hifi4["ttdecode"] == float(tg["ttdecode"]["est_us"])
    assert hifi4["tt-metal"] > float(tg["tt-metal"]["est_us"])


def test_ttmetal_structure_runs_several_kv_heads_on_one_core_when_the_batch_fills_the_grid() -> None:
    # B=32, 32q/8kv on 8x8: cores per batch = min(64, 16*32*8) // 32 = 2, so one core per head is not
    # available: cores per head 1, heads per core ceil(8 / 2) = 4 -> 32 users x 2 cores, each 4 heads
    s = TTMetalShape(32, 32, 8, 128, 255, 256)
    works, red, counts = ttmetal_work(s)
    assert counts["cores_per_head"] == 1 and len(works) == 64 and red.rounds == ()
    # cur_pos 255: chunk pow2ceil(255//32 + 1) = 8 tiles, one chunk per head; 4 heads: 4 x (Q, K, V) groups
    assert [n for _, n in works[0].read_groups] == [4, 32, 32] * 4
    assert sum(t.tiles for t in works[0].compute["matmul"]) == 4 * (8 * 4 + 8 * 4)
    # 32 q heads in all: more than the 16 its program factory's half (16 x 32) Q tiles take (it counts Q's
    # logical dim 2, not the 4 q heads per KV head), so whole 32 x 32 tiles, VectorMode::RC: every op's tally
    # runs 32 rows and 32 SFPU steps, and the softmax exp is the accurate bf16 one after the scale (the
    # default exp_approx_mode False, bf16 DST)
    assert {(t.rows, t.steps) for ts in works[0].compute.values() for t in ts} == {(32, 32)}
    assert {"scalar", "exp_bf16"} <= set(works[0].compute) and "exp_approx" not in works[0].compute


@pytest.mark.parametrize("nq,nkv,causal,half", [(8, 1, True, True), (16, 16, True, True), (16, 1, True, True),
                                                (32, 8, True, False), (17, 1, True, False), (8, 1, False, False)])
def test_ttmetal_takes_half_q_tiles_by_the_users_q_heads_in_a_causal_call(nq: int, nkv: int, causal: bool,
                                                                         half: bool) -> None:
    """Its program factory: use_half_tile = causal, bf16 Q and Q's logical dim 2 (the user's q heads, not per
    KV head) <= 16; an attention-mask call takes whole tiles."""
    s = TTMetalShape(1, nq, nkv, 128, 1023, 1024, is_causal=causal)
    assert half_q_tiles(s) == half
    works, _, _ = ttmetal_work(s)
    assert {t.steps for ts in works[0].compute.values() for t in ts} == {16 if half else 32}


@pytest.mark.parametrize("nq,fp32,approx,want", [
    # half tiles: the approximate softmax exp whatever exp_approx_mode
    (8, False, False, ("exp_approx", "exp_poly2", "exp_bf16")), (8, True, False, ("exp_approx", "exp_poly4", "exp")),
    (8, False, True, ("exp_approx", "exp_bf16", "exp_bf16")), (8, True, True, ("exp_approx", "exp", "exp")),
    # whole tiles: the accurate exp of the DST's width unless exp_approx_mode
    (32, False, False, ("exp_bf16", "exp_poly2", "exp_bf16")), (32, True, False, ("exp", "exp_poly4", "exp")),
    (32, False, True, ("exp_approx", "exp_bf16", "exp_bf16")), (32, True, True, ("exp_approx", "exp", "exp"))])
def test_ttmetal_exps_follow_its_kernels(nq: int, fp32: bool, approx: bool, want: tuple[str, str, str]) -> None:
    """(softmax, max correction, merge): sub_exp_block_bcast_cols_inplace approximates with half tiles or
    EXP_APPROX_MODE, else the scale then _sfpu_exp_accurate_ (exp_21f on a bf16 DST, the fp32 accurate exp on
    an fp32 one); sub_exp_block's first-column exp is that accurate exp with EXP_APPROX_MODE and a polynomial
    (degree 2 / 4 by the DST) without; correction_block's fused op (calculate_fused_max_sub_exp_add_tile,
    ckernel_sfpu_sdpa.h) runs _ckernel_sfpu_exp_accurate_ of the DST's width either way: the merge has no exp
    op of its own, its one SFPU op is the fused one of that exp (correction_bf16 / correction)."""
    s = TTMetalShape(1, nq, 8 if nq == 32 else 1, 128, 4095, 4096, max_cores_per_head_batch=4, fp32_dest_acc=fp32,
                     exp_approx_mode=approx)
    assert exp_ops(s) == want
    works, red, counts = ttmetal_work(s)
    # 4 cores per head, 4 or 8 chunks each (8 or 4 key tiles a chunk): a max correction per later chunk, 2 rounds
    assert counts["active_cores_per_head"] == 4 and counts["chunks_per_head"] >= 16 and counts["rounds"] == 2
    ops = set().union(*(w.compute for w in works))
    assert {op for op in ops if op.startswith("exp")} == set(want[:2])  # cores past their first chunk correct
    assert ("scalar" in ops) == (want[0] != "exp_approx")
    fused = {"exp_bf16": "correction_bf16", "exp": "correction"}[want[2]]
    assert {op for op in red.merge_per_round if op_class(op) == "sfpu"} == {fused}
    # the first-column correction exp: VectorMode::C, faces 0 and 2 at 4 steps each; the merge's fused op: 4
    # steps on each face of its vector mode (2 faces with half tiles, 4 with whole ones)
    steps = 16 if nq == 8 else 32
    assert {t.steps for w in works for t in w.compute[want[1]] if t.tiles == 1} == {8}
    assert {t.steps for t in red.merge_per_round[fused]} == {steps // 2}


@pytest.mark.parametrize("tokens,heads,steps", [(1, 4, 4), (1, 8, 8), (1, 12, 12), (2, 8, 16), (3, 8, 32), (1, 32, 32)])
def test_softmax_exps_run_only_the_vector_steps_of_the_rows_that_hold_heads(tokens, heads, steps) -> None:
    """The rows that hold heads are tokens x group_size. A vector step covers four rows of a face (even
    or odd columns, SFPLOAD.md), so up to 16 rows take faces 0-1 (VectorMode::R) with 2 steps per four
    rows each: 4 rows 2 x 2 steps, 8 rows 2 x 4, 12 rows 2 x 6, 16 rows 2 x 8; 24 or 32 rows all four
    faces (32 steps)."""
    b, d, s = 1, 32, 64
    g = torch.Generator().manual_seed(3)
    q = from_torch(torch.randn(tokens, b, heads, d, generator=g))
    k = from_torch(torch.randn(b, 1, s, d, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(b, 1, s, d, generator=g), DataType.bfloat8_b)
    plan = make_plan(batch=b, num_q_heads=heads, num_kv_heads=1, seq_len=s, head_dim=d, cur_pos=[s - 1],
                     num_tokens=tokens, grid=(1, 1))
    _, _, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=0.125, compute=ComputeSettings())
    works, _, _ = work_from_counters(plan, result.counters)
    assert {t.steps for t in works[0].compute["exp"]} == {steps}


@pytest.mark.parametrize("rows", [16, 8])
def test_compute_events_carry_the_l1_bytes_each_calls_unpackers_fetch_and_the_packer_writes(rows: int) -> None:
    """One user, 8 q heads on 1 KV head, D 128, 4 key tiles (one chunk), q tiles of `rows` rows: Q.K^T is a
    matmul_block of 4 key tiles per D tile, whose unpackers fetch the rows x 32 bf16 Q tile once (1024 B for
    16 rows, 512 B for 8) and 4 bfloat8_b K tiles (1088 B each: 1024 mantissa bytes + 64 exponent bytes);
    P.V's blocks fetch the fp32 probabilities (2048 / 1024 B) once per key tile; every copy into DST of an
    fp32 q-row tile fetches 2048 / 1024 B; the output's packs write bf16 tiles (1024 / 512 B); the cost
    model charges exactly those bytes."""
    from ttdecode.core.program_description import KernelKind
    from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS

    g = torch.Generator().manual_seed(3)
    q = from_torch(torch.randn(1, 1, 8, 128, generator=g))
    k = from_torch(torch.randn(1, 1, 128, 128, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(1, 1, 128, 128, generator=g), DataType.bfloat8_b)
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=128, head_dim=128, cur_pos=[127], grid=(1, 1),
                     q_tile_rows=rows)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1 / math.sqrt(128),
                                    compute=ComputeSettings(math_fidelity=MathFidelity.HiFi2))
    comp = [kk for kk in result.counters.kernels if kk.kind is KernelKind.COMPUTE][0]
    seen: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for e in comp.events:
        if EVENT_OPS[int(e["op"])] == "compute":
            key = (COMPUTE_OPS[int(e["peer"])], int(e["amount"]))
            seen.setdefault(key, set()).add((int(e["l1_bytes"]), int(e["unpacks"])))
    bf16, fp32 = rows * 32 * 2, rows * 32 * 4
    # Q.K^T: Q once and 4 K tiles; P.V's block of 3 O tiles and l: a probability tile, 3 V tiles and the ones tile
    assert seen[("matmul", 4)] == {(bf16 + 4 * 1088, 5), (fp32 + 4 * 1088, 5)}
    assert seen[("matmul", 1)] == {(fp32 + 1088, 2)}  # P.V's last O tile: one probability tile, one V tile
    # a copy of an 8x32 fp32 tile to DST reads 16 rows per face unless an init came since the last one
    assert seen[("copy", 1)] == ({(fp32, 1)} if rows == 16 else {(fp32, 1), (2 * fp32, 1)})
    assert (bf16, 0) in seen[("pack", 1)] and (fp32, 0) in seen[("pack", 1)]
    works, _, fid = work_from_counters(plan, result.counters)
    mm = works[0].compute["matmul"]
    assert sum(t.l1_bytes for t in mm) == 4 * (bf16 + 4 * 1088) + 4 * (fp32 + 4 * 1088) + 4 * (fp32 + 1088)


@pytest.mark.parametrize("fp32,approx,want", [(True, False, "exp"), (False, False, "exp_bf16"),
                                              (True, True, "exp_approx"), (False, True, "exp_approx")])
def test_the_softmax_exps_are_priced_as_the_algorithm_the_kernel_ran(fp32: bool, approx: bool, want: str) -> None:
    """The accurate exp is _sfpu_exp_fp32_accurate_ on an fp32 DST (~40 instructions per step) and exp_21f on a
    16-bit one (22); exp_approx_mode builds the kernel with the approximate exp (~70.7 cycles per tile)."""
    g = torch.Generator().manual_seed(4)
    q = from_torch(torch.randn(1, 1, 8, 64, generator=g))
    k = from_torch(torch.randn(1, 1, 256, 64, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(1, 1, 256, 64, generator=g), DataType.bfloat8_b)
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=256, head_dim=64, cur_pos=[255], grid=(1, 1),
                     fp32_dest_acc_en=fp32)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=0.125, exp_approx=approx,
                                    compute=ComputeSettings(math_fidelity=MathFidelity.HiFi2, fp32_dest_acc_en=fp32))
    works, _, _ = work_from_counters(plan, result.counters)
    exps = {op for op in works[0].compute if op.startswith("exp")}
    assert exps == {want}


def test_the_critical_chain_is_the_deepest_and_among_those_the_one_with_the_most_noc_hops() -> None:
    """The model's reduction follows the slowest chain of messages into a root: the most rounds, and of
    equally deep chains the one whose messages travel the most NoC 0 hops (+x / +y around the torus:
    logical x 3 -> x 2 is 9 hops the long way round, x 0 -> x 1 one hop)."""
    from ttdecode.perf_model.counters import _critical_chain

    c = [CoreCoord(x, 0) for x in range(4)]
    by_core = {core: CoreWork([], np.zeros(12), {}, {}, 1, 0, 0) for core in c}
    w = (0, 0)
    # one work of 4 pieces on cores 0..3: round 0 sends 1 -> 0 and 3 -> 2, round 1 sends 2 -> 0
    msgs = [Message(c[1], c[0], 100, 0, w, 1, 0, 0), Message(c[3], c[2], 100, 0, w, 3, 2, 0),
            Message(c[2], c[0], 100, 1, w, 2, 0, 1)]
    red = _critical_chain(msgs, list(by_core.values()), by_core)
    assert red.rounds == ((100, 9), (100, 8))  # 3 -> 2 -> 0: columns 4 -> 3 (9 hops), 3 -> 1 (8 hops)
    # two works of one round each: the chain of more hops
    msgs = [Message(c[0], c[1], 100, 0, (0, 0), 1, 0, 0), Message(c[3], c[2], 100, 0, (0, 1), 1, 0, 0)]
    red = _critical_chain(msgs, list(by_core.values()), by_core)
    assert red.rounds == ((100, 9),)


def test_a_root_merges_its_children_one_at_a_time_whatever_the_longest_chain_of_messages() -> None:
    """Three pieces: the root receives piece 1 in round 0 and piece 2 in round 1 (plan.tree_children), so
    it runs two merges one after the other although no chain holds more than one message. The reduction
    is the first message, then two merges (the second child's message arrived during the first merge);
    a chain priced message by message would give one merge."""
    from ttdecode.perf_model.constants import COST
    from ttdecode.perf_model.counters import _critical_chain
    from ttdecode.perf_model.evaluator import OpTally, Reduction, reduction_cycles

    c = [CoreCoord(x, 0) for x in range(3)]
    merge = {"copy": [OpTally(10, 10)]}
    by_core = {core: CoreWork([], np.zeros(12), {}, dict(merge) if core == c[0] else {}, 1, 0, 0) for core in c}
    w = (0, 0)
    msgs = [Message(c[1], c[0], 2048, 0, w, 1, 0, 0), Message(c[2], c[0], 2048, 0, w, 2, 0, 1)]
    red = _critical_chain(msgs, list(by_core.values()), by_core, "HiFi2")
    per_merge = sum(op_cycles(op, t, "HiFi2") for op, ts in red.merge_per_round.items() for t in ts)
    assert per_merge == pytest.approx(op_cycles("copy", OpTally(5, 5), "HiFi2"))  # 10 copies over 2 merges
    hops = [noc_hops(c[1], c[0]), noc_hops(c[2], c[0])]
    arrive = [COST.noc_write_setup_cycles + 2048 / COST.noc_bytes_per_cycle + h * COST.noc_hop_cycles
              + COST.semaphore_handshake_cycles for h in hops]
    first = arrive[0] + per_merge
    assert arrive[1] < first  # the second message waits for the root, not the other way round
    cycles, _ = reduction_cycles(red, "HiFi2")
    assert cycles == pytest.approx(first + per_merge)
    # the same path priced round by round (no trees: tt-metal's structure) counts one merge per message
    path_only, _ = reduction_cycles(Reduction(red.rounds, red.merge_per_round), "HiFi2")
    assert path_only == pytest.approx(arrive[0] + per_merge)


def test_a_core_that_runs_many_merges_bounds_the_step_beside_its_own_chunks() -> None:
    """Merges run on the TRISCs of the core that holds the parent: core A (100 copies of local work and
    200 of merges) outlasts core B (250 copies, no merges) although B's local work is the longest, so the
    step is the launch skew, B's local work and A's excess (no tree messages here); each core's compute
    starts with the compute kernel's init."""
    from ttdecode.perf_model.constants import COST
    from ttdecode.perf_model.evaluator import OpTally, Reduction

    def work(local: int, merges: int) -> CoreWork:
        return CoreWork([], np.zeros(12), {"copy": [OpTally(local, local)]},
                        {"copy": [OpTally(merges, merges)]} if merges else {}, 1, 0, 0)

    cyc = lambda n: op_cycles("copy", OpTally(n, n), "HiFi2")  # noqa: E731
    init = COST.compute_startup_cycles
    b = evaluate([work(100, 200), work(250, 0)], Reduction((), {}), "HiFi2")
    us = 1e6 / COST.clock_hz
    assert b.local_us == pytest.approx((cyc(250) + init) * us)
    assert b.reduction_us == pytest.approx((cyc(100) + cyc(200) - cyc(250)) * us)
    assert b.total_us == pytest.approx((COST.start_spread_cycles + cyc(100) + cyc(200) + init) * us)
    # with A's merges under B's local work the step is B's
    b = evaluate([work(100, 100), work(250, 0)], Reduction((), {}), "HiFi2")
    assert b.reduction_us == 0 and b.total_us == pytest.approx((COST.start_spread_cycles + cyc(250) + init) * us)


def test_a_60_piece_reduction_takes_at_least_six_merges() -> None:
    """A root gathers at most 2^k partials with k merges one after another, so 60 pieces take 6 merges
    on the path that ends the step (the longest chain of messages in the binomial tree of 60 has 5)."""
    plan = make_plan(batch=1, num_q_heads=4, num_kv_heads=1, seq_len=32768, head_dim=128,
                     kv_dtype=DataType.bfloat8_b, cur_pos=[32767], max_cores_per_head_batch=60, kv_pages="key_row")
    assert plan.pieces_per_work == 60
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, 1, 4, 128, generator=g))
    k = from_torch(torch.randn(1, 1, 32768, 128, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(1, 1, 32768, 128, generator=g), DataType.bfloat8_b)
    _, _, res = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1 / math.sqrt(128),
                                 compute=ComputeSettings(math_fidelity=MathFidelity.HiFi2))
    works, red, fid = work_from_counters(plan, res.counters)
    per_merge = sum(op_cycles(op, t, fid) for op, ts in red.merge_per_round.items() for t in ts)
    assert len(red.rounds) == 5
    cycles, _ = reduction_cycles(red, fid)
    assert cycles >= 6 * per_merge


def test_goal_sensitivity_finds_where_a_goal_flips_nearest_the_nominal_constant() -> None:
    """perf/goal_sensitivity.py's flip search: a metric linear in one constant flips exactly where the
    threshold says (within the 1% bisection), on either side of nominal; a goal that holds everywhere in
    the span has no flip."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "perf" / "goal_sensitivity.py"
    spec = importlib.util.spec_from_file_location("goal_sensitivity", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["goal_sensitivity"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    f = mod.flip_factor(lambda c: c.init_cycles, lambda v: v <= 90.0, "init_cycles")  # 60 nominal: flips above 90
    assert f is not None and 1.5 <= f <= 1.5 * 1.011
    f = mod.flip_factor(lambda c: c.tile_call_cycles, lambda v: v >= 7.0, "tile_call_cycles")  # 20: flips below 7
    assert f is not None and 0.35 / 1.011 <= f <= 0.35
    assert mod.flip_factor(lambda c: c.init_cycles, lambda v: v > 0, "init_cycles") is None
    assert mod.flip_factor(lambda c: c.init_cycles, lambda v: v <= 300.0, "init_cycles") is None  # 5x: past the span
