"""The context-parallel cost model (model estimates): bytes per chip and the combine's link terms,
against figures computed here from the published link constants and the tile sizes."""

from __future__ import annotations

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


@pytest.mark.parametrize("partials, rows", [(2, 64), (5, 40)])
def test_the_combine_term_prices_the_combine_kernels_own_counters(partials: int, rows: int) -> None:
    """combine_kernel_seconds (closed form from combine_op_counts) = the cost model on the counters of a
    host-runtime run of the combine program with the same tile rows per core."""
    import torch

    from ttdecode.combine import run_combine
    from ttdecode.costmodel import Reduction, evaluate
    from ttdecode.distributed.cost import combine_kernel_seconds, combine_work_from_counters
    from ttdecode.formats import DataType

    outs = torch.randn(partials, 1, rows, 128).to(torch.bfloat16)
    lses = torch.randn(partials, 1, rows)
    _, _, res = run_combine(outs, lses, out_dtype=DataType.bfloat16, max_cores=2, return_result=True)
    works = combine_work_from_counters(res.counters)
    counted = evaluate(works, Reduction((), {}), "HiFi2").total_us * 1e-6
    assert combine_kernel_seconds(partials, rows, 128, cores=2) == pytest.approx(counted, rel=1e-9)
    assert combine_kernel_seconds(8, rows) > combine_kernel_seconds(2, rows)
