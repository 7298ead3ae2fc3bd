"""The context-parallel cost model (model estimates): bytes per chip and the combine's link terms,
against figures computed here from the published link constants and the tile sizes; the per-chip
estimate (closed forms, no run) against the cost model on the counters of real host-runtime runs."""

from __future__ import annotations

import functools
import math

import pytest

from ttdecode.distributed.cost import chip_attention, combine_seconds, estimate_layout

BFP8_TILE = 1088  # bytes of a bfloat8_b 32x32 tile (64 exponent bytes + 1024 mantissas)


def test_each_chip_reads_its_share_of_the_cache_once() -> None:
    s, d = 65536, 128
    chip = chip_attention(batch=2, q_heads=8, kv_heads=1, seq_len=s, head_dim=d)
    assert chip.chip_bytes == 2 * (s // 32) * 2 * (d // 32) * BFP8_TILE  # users x key tiles x (K + V) tiles
    tp_only = estimate_layout(tp=8, cp=1, batch=1, q_heads=64, kv_heads=1, seq_len=s)   # replicated KV head
    tp_cp = estimate_layout(tp=2, cp=4, batch=1, q_heads=64, kv_heads=1, seq_len=s)
    assert tp_cp.kv_bytes_per_chip * 4 == tp_only.kv_bytes_per_chip


@pytest.mark.parametrize("group", [2, 8])
def test_combine_link_time_follows_the_ring_formulas(group: int) -> None:
    b, nh, dv = 4, 8, 128
    partial = b * nh * (2 * dv + 4)
    bw, hop = 12.5e9 * 0.95, 650e-9
    ag, _ = combine_seconds("all_gather", group, b, nh, dv)
    a2a, _ = combine_seconds("all_to_all", group, b, nh, dv)
    assert ag == pytest.approx((group - 1) * (hop + partial / bw))
    assert a2a == pytest.approx(2 * (group - 1) * (hop + partial / group / bw))
    assert combine_seconds("all_gather", 1, b, nh, dv) == (0.0, 0.0)
    with pytest.raises(ValueError, match="combine"):
        combine_seconds("ring", group, b, nh, dv)


@pytest.mark.parametrize("partials, rows, cores", [(2, 64, 2), (5, 40, 2), (3, 96, 1)])
def test_the_combine_term_prices_the_combine_kernels_own_counters(partials: int, rows: int, cores: int) -> None:
    """combine_kernel_seconds (closed form from combine_op_counts) = the cost model on the counters of a
    host-runtime run of the combine program with the same tile rows per core (one, or three on one core:
    a core's later tile rows make as many configuration calls as its first)."""
    import torch

    from ttdecode.ops.combine import run_combine
    from ttdecode.perf_model.evaluator import Reduction, evaluate
    from ttdecode.distributed.cost import combine_kernel_seconds, combine_work_from_counters
    from ttdecode.core.formats import DataType

    outs = torch.randn(partials, 1, rows, 128).to(torch.bfloat16)
    lses = torch.randn(partials, 1, rows)
    _, _, res = run_combine(outs, lses, out_dtype=DataType.bfloat16, max_cores=cores, return_result=True)
    works = combine_work_from_counters(res.counters)
    counted = evaluate(works, Reduction((), {}), "HiFi2").total_us * 1e-6
    assert combine_kernel_seconds(partials, rows, 128, cores=cores) == pytest.approx(counted, rel=1e-9)
    assert combine_kernel_seconds(8, rows) > combine_kernel_seconds(2, rows)


@functools.lru_cache(maxsize=None)
def _counted_us(batch: int, q_heads: int, seq_len: int, max_cores: int, chunk_cap: int | None = None) -> float:
    """The cost model on the runtime counters of a real host-runtime run of the plan that chip_attention
    prices (one KV head, D 128, bfloat8_b, every user at S - 1, HiFi2, the 8x8 grid)."""
    import torch

    from ttdecode.perf_model.counters import work_from_counters
    from ttdecode.perf_model.evaluator import evaluate
    from ttdecode.ops.flash_decode.program_factory import run_flash_decode
    from ttdecode.core.formats import DataType
    from ttdecode.ops.flash_decode.plan import make_plan
    from ttdecode.core.program_description import ComputeSettings, MathFidelity
    from ttdecode.core.tensor import from_torch

    d = 128
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, batch, q_heads, d, generator=g))
    k = from_torch(torch.randn(batch, 1, seq_len, d, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(batch, 1, seq_len, d, generator=g), DataType.bfloat8_b)
    plan = make_plan(batch=batch, num_q_heads=q_heads, num_kv_heads=1, seq_len=seq_len, head_dim=d,
                     cur_pos=[seq_len - 1] * batch, return_lse=True, max_cores_per_head_batch=max_cores,
                     chunk_cap=chunk_cap)
    _, _, res = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1 / math.sqrt(d),
                                 compute=ComputeSettings(math_fidelity=MathFidelity.HiFi2))
    return evaluate(*work_from_counters(plan, res.counters)).total_us


@pytest.mark.parametrize("q_heads, seq_len, max_cores", [(8, 32768, 16), (64, 16384, 64)])
def test_the_per_chip_estimate_is_near_the_cost_model_on_a_real_runs_counters(q_heads: int, seq_len: int,
                                                                              max_cores: int) -> None:
    """chip_attention (closed forms, no run) within 5% of the same cost model on the counters of the
    kernels' run of the same plan: one q tile row (8 heads, 16 pieces of 4 chunks of 16 key tiles) and
    two (64 heads, 64 pieces of 8 tiles: the tree weighs most)."""
    chip = chip_attention(batch=1, q_heads=q_heads, kv_heads=1, seq_len=seq_len, max_cores_per_head_batch=max_cores)
    assert chip.seconds * 1e6 == pytest.approx(_counted_us(1, q_heads, seq_len, max_cores), rel=0.05)


def test_a_larger_chunk_caps_per_chunk_saving_shows_in_the_per_chip_estimate() -> None:
    """The plan takes chunks of 16 key tiles at 8q/1kv, 32K on 16 cores (plan.split_choices.chunk_cap: the fixed
    work of the chunks they merge outweighs their longer first read). chip_attention counts a chunk's
    fixed work: forcing chunks of 8 (the same pieces, twice the chunks) makes it slower, by what the
    cost model sees on the counters of the two real runs (within 10%)."""
    plan_cap = chip_attention(batch=1, q_heads=8, kv_heads=1, seq_len=32768)
    cap8 = chip_attention(batch=1, q_heads=8, kv_heads=1, seq_len=32768, chunk_cap=8)
    assert plan_cap.chunk_cap == 16 and cap8.chunk_cap == 8 and cap8.pieces == plan_cap.pieces == 16
    saving_us = (cap8.seconds - plan_cap.seconds) * 1e6
    assert saving_us > 0 and cap8.compute_s > plan_cap.compute_s
    counted = _counted_us(1, 8, 32768, 16, chunk_cap=8) - _counted_us(1, 8, 32768, 16)
    assert saving_us == pytest.approx(counted, rel=0.10)
