"""The analytic Wormhole timing model (ttdecode.perfmodel): its terms on synthetic counters, and its
reading of one tiny real run of the FlashDecode kernels on the host runtime."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ttdecode.factory import run_flash_decode
from ttdecode.formats import DataType, tile_size
from ttdecode.perfmodel import (
    WORMHOLE,
    CONSTANT_SOURCES,
    Message,
    StepEstimate,
    compute_cycles,
    dram_seconds_per_core,
    estimate_step,
    message_cycles,
    noc_hops,
    tree_critical_path,
)
from ttdecode.plan import DecodePlan, make_plan, tree_parent, valid_tiles
from ttdecode.program import ComputeSettings, CoreCoord, MathFidelity
from ttdecode.tensor import from_torch

BANKS = WORMHOLE.dram_banks


def _cores(n: int) -> list[CoreCoord]:
    return [CoreCoord(i % 8, i // 8) for i in range(n)]


# ---- DRAM -----------------------------------------------------------------------------------------


def test_dram_term_equals_bytes_over_peak_bandwidth_when_every_core_reads_every_bank_evenly() -> None:
    per_bank = 24_000
    loads = {c: [per_bank] * BANKS for c in _cores(64)}
    t = dram_seconds_per_core(loads)
    total = 64 * BANKS * per_bank
    for seconds in t.values():
        assert seconds == pytest.approx(total / WORMHOLE.dram_peak_bytes_per_s)


def test_dram_term_of_a_lone_core_is_its_bytes_over_the_single_core_read_rate() -> None:
    t = dram_seconds_per_core({CoreCoord(0, 0): [100_000] * BANKS})
    assert t[CoreCoord(0, 0)] == pytest.approx(BANKS * 100_000 / (WORMHOLE.core_dram_read_bytes_per_cycle * 1e9))


def test_busiest_bank_sets_the_dram_floor_of_every_core_reading_it() -> None:
    loads = {c: [10_000] * BANKS for c in _cores(64)}
    hot = [10_000] * BANKS
    hot[3] = 1_000_000
    loads[CoreCoord(0, 0)] = hot
    t = dram_seconds_per_core(loads)
    bank3 = 63 * 10_000 + 1_000_000
    assert t[CoreCoord(1, 0)] == pytest.approx(bank3 / WORMHOLE.bank_bytes_per_s)
    # a core that stays off the hot bank is not held by it
    cold = [10_000] * BANKS
    cold[3] = 0
    loads[CoreCoord(1, 0)] = cold
    t = dram_seconds_per_core(loads)
    assert t[CoreCoord(1, 0)] < t[CoreCoord(0, 0)]


def test_more_cores_per_head_reduce_the_per_core_dram_time_down_to_the_bank_floor() -> None:
    head_bytes = 64 * BANKS * 10_000  # one KV head's K/V, spread evenly over the banks
    times = []
    for n in (1, 2, 4, 8, 16, 32, 64):
        loads = {c: [head_bytes // (n * BANKS)] * BANKS for c in _cores(n)}
        times.append(max(dram_seconds_per_core(loads).values()))
    assert all(a >= b for a, b in zip(times, times[1:]))
    assert times[0] > 5 * times[-1]
    assert times[-1] == pytest.approx(head_bytes / WORMHOLE.dram_peak_bytes_per_s)


# ---- compute --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fidelity,cycles", [("LoFi", 16), ("HiFi2", 32), ("HiFi3", 48), ("HiFi4", 64)])
def test_a_whole_matmul_tile_costs_the_fidelity_cycles(fidelity: str, cycles: int) -> None:
    assert compute_cycles({"matmul": 10}, fidelity) == 10 * cycles


def test_matmul_in0_under_eight_rows_costs_as_much_as_eight_rows() -> None:
    eight = compute_cycles({"matmul": 1}, "LoFi", in0_rows=8)
    assert eight == 16 * 8 / 32
    for rows in (1, 4, 7):
        assert compute_cycles({"matmul": 1}, "LoFi", in0_rows=rows) == eight
    assert compute_cycles({"matmul": 1}, "LoFi", in0_rows=9) == 2 * eight


def test_sfpu_tile_costs_its_instructions_over_32_lanes_and_pack_is_free() -> None:
    per_element = WORMHOLE.sfpu_instructions_per_element["exp"]
    assert compute_cycles({"exp": 3}, "HiFi2") == 3 * per_element * 1024 / WORMHOLE.sfpu_lanes
    assert compute_cycles({"pack": 100}, "HiFi4") == 0


def test_every_constant_names_its_source() -> None:
    for name in ("dram_peak_bytes_per_s", "core_dram_read_bytes_per_cycle", "noc_bytes_per_cycle", "noc_hop_cycles",
                 "matmul_tile_cycles_lofi", "sfpu_instructions_per_element"):
        assert CONSTANT_SOURCES[name]


# ---- the reduction --------------------------------------------------------------------------------


def test_message_costs_bytes_over_32_per_cycle_plus_9_cycles_per_hop() -> None:
    assert message_cycles(3200, 0) == 100
    assert message_cycles(3200, 4) == 100 + 36


def test_noc0_hops_run_east_and_south_around_the_torus() -> None:
    a, b = CoreCoord(0, 0), CoreCoord(1, 0)
    assert noc_hops(a, b) == 1
    assert noc_hops(b, a) == WORMHOLE.noc_grid[0] - 1  # the long way round
    assert noc_hops(a, a) == 0
    assert noc_hops(CoreCoord(3, 0), CoreCoord(4, 0)) == 2  # worker columns 4 and 6: column 5 is DRAM


def _tree_messages(pieces: int, nbytes: int) -> list[Message]:
    core = CoreCoord(0, 0)  # every piece on one core: zero hops, so only bytes and merges count
    out = []
    for i in range(1, pieces):
        r, parent = tree_parent(i)  # type: ignore[misc]
        out.append(Message(core, core, nbytes, i, (0, 0), i, parent, r))
    return out


def test_reduction_critical_path_grows_with_log2_of_the_pieces() -> None:
    nbytes, merge = 2560, 1000.0
    msg = message_cycles(nbytes, 0)
    previous = 0.0
    for pieces in range(1, 65):
        path = tree_critical_path(_tree_messages(pieces, nbytes), merge)
        rounds = math.ceil(math.log2(pieces)) if pieces > 1 else 0
        if pieces & (pieces - 1) == 0:  # a full binomial tree: every round waits for its message
            assert path == pytest.approx(rounds * (msg + merge)), pieces
        else:  # a partial tree: some messages arrive while the parent still merges
            assert rounds * merge + msg <= path <= rounds * (msg + merge), pieces
        assert path >= previous, pieces
        previous = path


# ---- one tiny real run ----------------------------------------------------------------------------


def _run(max_cores: int) -> tuple[DecodePlan, StepEstimate, object]:
    b, nh, nkv, s, d = 1, 8, 2, 1024, 64
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, b, nh, d, generator=g))
    k = from_torch(torch.randn(b, nkv, s, d, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(b, nkv, s, d, generator=g), DataType.bfloat8_b)
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, cur_pos=[s - 1],
                     grid=(4, 2), max_cores_per_head_batch=max_cores)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1 / math.sqrt(d),
                                    compute=ComputeSettings(math_fidelity=MathFidelity.HiFi2))
    return plan, estimate_step(plan, result.counters), result


@pytest.fixture(scope="module")
def runs() -> dict[int, tuple[DecodePlan, StepEstimate, object]]:
    return {mc: _run(mc) for mc in (1, 4)}


def test_real_run_kv_bytes_are_every_valid_key_tile_of_k_and_v_once(runs) -> None:
    plan, est, _ = runs[4]
    tiles = valid_tiles(plan.cur_pos[0]) * plan.num_kv_heads * (plan.d_tiles + plan.dv_tiles)
    assert est.kv_bytes == tiles * tile_size(DataType.bfloat8_b)
    assert est.dram_bytes > est.kv_bytes  # Q rows and positions too


def test_real_run_messages_follow_the_binomial_tree_round_by_round(runs) -> None:
    plan, est, _ = runs[4]
    assert plan.pieces_per_work == 4 and plan.rounds == 2
    assert est.messages == plan.num_kv_heads * (plan.pieces_per_work - 1)
    assert est.noc_bytes_per_round[0] == 2 * est.noc_bytes_per_round[1] > 0


def test_real_run_time_is_slowest_core_plus_reduction_and_bandwidth_is_kv_bytes_over_time(runs) -> None:
    _, est, _ = runs[4]
    assert est.time_us == pytest.approx(est.local_us + est.reduction_us)
    assert est.local_us == pytest.approx(max(c.overlapped_us for c in est.cores))
    assert est.achieved_gbps == pytest.approx(est.kv_bytes / (est.time_us * 1e-6) / 1e9)
    assert 0 < est.reduction_share < 1
    assert est.time_us >= est.roofline_us
    assert est.fidelity == "HiFi2"


def test_real_run_with_more_cores_per_head_reads_less_per_core_and_has_a_reduction(runs) -> None:
    _, one, _ = runs[1]
    _, four, _ = runs[4]
    assert one.reduction_us == 0 and one.messages == 0
    assert four.reduction_us > 0
    assert four.max_core_bytes < one.max_core_bytes
    assert max(c.dram_us for c in four.cores) < max(c.dram_us for c in one.cores)
    assert sum(c.bytes_read for c in four.cores) >= sum(c.bytes_read for c in one.cores)  # Q rows per piece
    assert np.isclose(four.kv_bytes, one.kv_bytes)


# ---- the calibrated cost model (ttdecode.costmodel) and tt-metal's structure as data -------------

from ttdecode.costmodel import COST, COST_SOURCES, OpTally, op_cycles, reader_cycles, sfpu_tile_cycles  # noqa: E402
from ttdecode.ttmetal_structure import TTMetalShape, ttmetal_work  # noqa: E402


def test_every_cost_constant_names_its_source() -> None:
    import dataclasses
    names = {f.name for f in dataclasses.fields(COST)} - {"fidelity_phases"}
    assert names <= set(COST_SOURCES), sorted(names - set(COST_SOURCES))


def test_half_row_matmul_costs_the_slower_of_unpack_and_hifi2_math_per_tile_plus_init_per_call() -> None:
    # documented: unpack 2 cycles + 2048 B at 64 B/cycle; matmul 16 cycles x 2 phases x 16/32 rows
    unpack = 2 + 2048 / 64
    math_ = 16 * 2 * 16 / 32
    expected = 10 * max(unpack, math_) + 2 * 60
    assert op_cycles("matmul", OpTally(10, 2, rows=16), "HiFi2") == pytest.approx(expected)
    # HiFi4 on full rows: math (64) now exceeds unpack (34)
    assert op_cycles("matmul", OpTally(10, 2), "HiFi4") == pytest.approx(10 * 64 + 2 * 60)


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
                      "cores_per_head": 4}
    assert len(works) == 4 and len(red.rounds) == 2
    w = works[0]
    assert sum(t.tiles for t in w.compute["matmul"]) == 8 * 2 + 8 * 2  # QK^T (8x2) + PV (8x2)
    assert [n for _, n in w.read_groups] == [2, 16, 16]  # Q tiles, K tiles, V tiles: one request each
    assert sum(b for b, _ in w.read_groups[1:]) == 32 * 1088
    assert w.kv_bytes == 32 * 1088
    # message: l, m and 2 O tiles of bf16
    assert all(nbytes == 4 * 2048 for nbytes, _ in red.rounds)


def test_ttmetal_time_grows_with_the_cache_and_more_cores_cut_the_local_time() -> None:
    from ttdecode.costmodel import evaluate
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


def test_ttmetal_structure_runs_several_kv_heads_on_one_core_when_the_batch_fills_the_grid() -> None:
    # B=32, 32q/8kv on 8x8: cores per batch = min(64, 16*32*8) // 32 = 2, so one core per head is not
    # available: cores per head 1, heads per core ceil(8 / 2) = 4 -> 32 users x 2 cores, each 4 heads
    s = TTMetalShape(32, 32, 8, 128, 255, 256)
    works, red, counts = ttmetal_work(s)
    assert counts["cores_per_head"] == 1 and len(works) == 64 and red.rounds == ()
    # cur_pos 255: chunk pow2ceil(255//32 + 1) = 8 tiles, one chunk per head; 4 heads: 4 x (Q, K, V) groups
    assert [n for _, n in works[0].read_groups] == [4, 32, 32] * 4
    assert sum(t.tiles for t in works[0].compute["matmul"]) == 4 * (8 * 4 + 8 * 4)
