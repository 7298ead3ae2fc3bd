"""Sliding windows and attention sinks in the FlashDecode kernels, on the host runtime, against the
float64 reference on the same quantized inputs (thresholds in `ttdecode.accuracy`)."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import pytest
import torch

from ttdecode.accuracy import check_close, check_lse
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType, tile_size
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import from_torch, to_torch

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b


def tensors(b: int, nh: int, nkv: int, s: int, d: int, kv: DataType, seed: int, garbage_before: Optional[Sequence[int]] = None):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, b, nh, d, generator=gen)
    k = torch.randn(b, nkv, s, d, generator=gen)
    v = torch.randn(b, nkv, s, d, generator=gen)
    if garbage_before is not None:  # the cache before each user's window holds NaN
        for u, first in enumerate(garbage_before):
            k[u, :, :first] = float("nan")
            v[u, :, :first] = float("nan")
    return from_torch(q, BF16), from_torch(k, kv), from_torch(v, kv)


def run(*, b, nh, nkv, s, d, pos, kv=BFP8, max_cores=4, k_chunk=0, window=None, sink=None, seed=0, nan=False,
        grid=(8, 8), min_chunk_tiles=1):
    """min_chunk_tiles 1 spreads even short windows over every piece (the merge tree with windows)."""
    first = [max(0, p - window + 1) if window else 0 for p in pos]
    q, k, v = tensors(b, nh, nkv, s, d, kv, seed, first if nan else None)
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv, cur_pos=list(pos),
                     grid=grid, max_cores_per_head_batch=max_cores, k_chunk_size=k_chunk, return_lse=True,
                     sliding_window_size=window, attention_sink=sink is not None, min_chunk_tiles=min_chunk_tiles)
    scale = 1.0 / math.sqrt(d)
    out, lse, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=scale,
                                        compute=ComputeSettings(), attention_sink=sink)
    ref_sink = None if sink is None else sink.to(torch.bfloat16).double()
    ref, ref_lse = sdpa_decode_reference(to_torch(q).double(), to_torch(k).double(), to_torch(v).double(),
                                         cur_pos=list(pos), scale=scale, sliding_window_size=window,
                                         attention_sink=ref_sink, return_lse=True)
    return plan, out, lse, ref, ref_lse, result


def assert_users_close(out, lse, ref, ref_lse, users, what) -> float:
    worst = 0.0
    for u in users:
        e, _ = check_close(out[:, u], ref[:, u], f"{what}: user {u} output")
        check_lse(lse[:, u], ref_lse[:, u], f"{what}: user {u} LSE")
        worst = max(worst, e)
    return worst


@pytest.mark.parametrize("window", [1, 7, 32, 33, 100, 256])
@pytest.mark.parametrize("max_cores, kv, k_chunk", [(1, BF16, 0), (3, BFP8, 32), (5, BFP4, 0), (8, BFP8, 64)])
def test_sliding_window_every_position_of_a_256_key_cache_matches_the_reference(window, max_cores, kv, k_chunk) -> None:
    s = 256
    pos = list(range(-1, s))
    plan, out, lse, ref, ref_lse, _ = run(b=len(pos), nh=4, nkv=1, s=s, d=64, pos=pos, kv=kv, max_cores=max_cores,
                                          k_chunk=k_chunk, window=window, seed=window, nan=True)
    assert plan.sliding_window_size == window
    assert_users_close(out, lse, ref, ref_lse, range(1, len(pos)), f"window {window}, {kv.value}, k_chunk {k_chunk}")
    assert torch.all(out[:, 0] == 0) and torch.all(lse[:, 0] == float("-inf"))  # the skipped user


def test_sliding_window_reads_exactly_the_attended_kv_tiles() -> None:
    pos, window, nkv = [5, 40, 99, 200, 255, 31, 32, 130], 33, 2
    plan, out, lse, ref, ref_lse, result = run(b=len(pos), nh=8, nkv=nkv, s=256, d=64, pos=pos, max_cores=4,
                                               window=window)
    assert_users_close(out, lse, ref, ref_lse, range(len(pos)), "window bytes")
    attended = sum(len({p // 32 for p in range(max(0, c - window + 1), c + 1)}) for c in pos)
    kv_bytes = attended * nkv * (plan.d_tiles + plan.dv_tiles) * tile_size(BFP8)
    with_work = [pc for pc in plan.pieces
                 if not plan.range_at(pos[pc.user], pc.index).empty]
    q_bytes = len(with_work) * plan.group_size * plan.head_dim * 2
    pos_bytes = len(plan.active_cores) * 4 * len(pos)  # once per reader; the writer copy is made in L1
    read = sum(sum(result.counters.kernel(c, KernelKind.READER).dram_read_bytes) for c in plan.active_cores)
    assert read == kv_bytes + q_bytes + pos_bytes


def test_sliding_window_output_is_batch_invariant() -> None:
    s, window = 256, 40
    pos = [200, 17, 255, 90]
    q, k, v = tensors(4, 8, 2, s, 64, BFP8, 3)
    outs = {}
    for users in ([0, 1, 2, 3], [2], [2, 0]):
        idx = torch.tensor(users)
        qt = from_torch(to_torch(q)[:, idx], BF16)
        kt = from_torch(to_torch(k)[idx], BFP8)
        vt = from_torch(to_torch(v)[idx], BFP8)
        plan = make_plan(batch=len(users), num_q_heads=8, num_kv_heads=2, seq_len=s, head_dim=64, kv_dtype=BFP8,
                         cur_pos=[pos[u] for u in users], max_cores_per_head_batch=4, sliding_window_size=window,
                         min_chunk_tiles=1)
        out, _, _ = run_flash_decode(plan, q=qt, k=kt, v=vt, cur_pos_source=None, scale=0.125,
                                     compute=ComputeSettings())
        outs[tuple(users)] = {u: out[:, i] for i, u in enumerate(users)}
    assert torch.equal(outs[(0, 1, 2, 3)][2], outs[(2,)][2])
    assert torch.equal(outs[(0, 1, 2, 3)][2], outs[(2, 0)][2])
    assert torch.equal(outs[(0, 1, 2, 3)][0], outs[(2, 0)][0])


@pytest.mark.parametrize(
    "sink_kind",
    ["random [NH]", "random [NH, 32]", "dominant", "very negative"],
)
@pytest.mark.parametrize("max_cores, k_chunk", [(1, 0), (4, 32), (8, 0)])
def test_attention_sink_matches_the_reference_with_lse(sink_kind, max_cores, k_chunk) -> None:
    nh = 8
    gen = torch.Generator().manual_seed(11)
    sink = {
        "random [NH]": 4 * torch.randn(nh, generator=gen),
        "random [NH, 32]": 4 * torch.randn(nh, 32, generator=gen),
        "dominant": torch.full((nh,), 200.0),  # exp(sink) outweighs every key
        "very negative": torch.full((nh,), -1e4),
    }[sink_kind]
    pos = [-1, 0, 31, 32, 77, 160, 255]
    plan, out, lse, ref, ref_lse, _ = run(b=len(pos), nh=nh, nkv=2, s=256, d=64, pos=pos, max_cores=max_cores,
                                          k_chunk=k_chunk, sink=sink)
    assert plan.attention_sink
    what = f"sink {sink_kind}, {plan.pieces_per_work} pieces"
    assert_users_close(out, lse, ref, ref_lse, range(1, len(pos)), what)
    assert torch.all(out[:, 0] == 0) and torch.all(lse[:, 0] == float("-inf"))
    if sink_kind == "dominant":
        assert float(out[:, 1:].abs().max()) < 1e-3  # nearly all the weight is on the sink


@pytest.mark.parametrize("kv", [BF16, BFP8, BFP4])
def test_attention_sink_with_sliding_window_matches_the_reference(kv) -> None:
    gen = torch.Generator().manual_seed(5)
    sink = 3 * torch.randn(8, generator=gen)
    pos = list(range(0, 256, 9))
    _, out, lse, ref, ref_lse, _ = run(b=len(pos), nh=8, nkv=2, s=256, d=64, pos=pos, kv=kv, max_cores=4,
                                       window=45, sink=sink, nan=True)
    assert_users_close(out, lse, ref, ref_lse, range(len(pos)), f"sink + window, {kv.value}")
