"""Multi-token decode in the FlashDecode kernels (speculative decoding): Q [T, B, NH, D], T <= 32
new tokens per user, cur_pos[b] the last one's position; token j attends keys up to
cur_pos[b] - (T - 1 - j) (with a sliding window, its own window). The T tokens' rows fill the q tiles
(token-major) and share every K/V read. Host runtime against the float64 reference on the same
quantized inputs (thresholds in `ttdecode.accuracy`)."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import pytest
import torch

import ttdecode
from ttdecode.accuracy import check_close, check_lse
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.split import span_window
from ttdecode.ops.flash_decode.plan import PlanError, make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import from_torch, to_torch

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b


def run(*, t, b, nh, nkv, s, d, pos: Sequence[int], kv=BFP8, max_cores=4, k_chunk=0, window=None, sink=None,
        seed=0, nan=False, block_size: Optional[int] = None, schedule_seed=None):
    gen = torch.Generator().manual_seed(seed)
    q = from_torch(torch.randn(t, b, nh, d, generator=gen), BF16)
    kc = torch.randn(b, nkv, s, d, generator=gen)
    vc = torch.randn(b, nkv, s, d, generator=gen)
    if nan:  # the cache outside each user's span (before the oldest token's window, past cur_pos) is NaN
        for u, p in enumerate(pos):
            first = max(0, p - t + 1 - window + 1) if window else 0
            kc[u, :, :first] = vc[u, :, :first] = float("nan")
            kc[u, :, p + 1:] = vc[u, :, p + 1:] = float("nan")
    paging, table = {}, None
    if block_size:
        per_user = s // block_size
        nb = b * per_user
        table = torch.randperm(nb, generator=gen).reshape(b, per_user).to(torch.int32)
        kp, vp = torch.empty(nb, nkv, block_size, d), torch.empty(nb, nkv, block_size, d)
        for u in range(b):
            for j in range(per_user):
                kp[table[u, j]] = kc[u, :, j * block_size:(j + 1) * block_size]
                vp[table[u, j]] = vc[u, :, j * block_size:(j + 1) * block_size]
        kc, vc, paging = kp, vp, dict(block_size=block_size, num_blocks=nb)
    k, v = from_torch(kc, kv), from_torch(vc, kv)
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv, cur_pos=list(pos),
                     num_tokens=t, max_cores_per_head_batch=max_cores, k_chunk_size=k_chunk, return_lse=True,
                     sliding_window_size=window, attention_sink=sink is not None, **paging)
    scale = 1.0 / math.sqrt(d)
    out, lse, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=scale,
                                        compute=ComputeSettings(), attention_sink=sink, page_table=table,
                                        schedule_seed=schedule_seed)
    ref, ref_lse = sdpa_decode_reference(
        to_torch(q).double(), to_torch(k).double(), to_torch(v).double(), cur_pos=list(pos), scale=scale,
        sliding_window_size=window, page_table=table, return_lse=True,
        attention_sink=None if sink is None else sink.to(torch.bfloat16).double())
    return plan, out, lse, ref, ref_lse, result


def check_users(out, lse, ref, ref_lse, users, what) -> None:
    for u in users:
        check_close(out[:, u], ref[:, u], f"{what}: user {u} output (all tokens)")
        check_lse(lse[:, u], ref_lse[:, u], f"{what}: user {u} LSE")


def test_reference_token_j_is_a_one_token_decode_at_its_own_position() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 32, generator=gen), torch.randn(2, 1, 64, 32, generator=gen), \
        torch.randn(2, 1, 64, 32, generator=gen)
    out, lse = sdpa_decode_reference(q, k, v, cur_pos=[40, -1], sliding_window_size=5, return_lse=True)
    for j in range(3):
        o, s = sdpa_decode_reference(q[j:j + 1], k, v, cur_pos=[38 + j, -1], sliding_window_size=5, return_lse=True)
        assert torch.equal(out[j:j + 1], o) and torch.equal(lse[j:j + 1], s)
    with pytest.raises(ValueError, match=r"'cur_pos\[0\]'.*-1 or a position >= T - 1 = 2.*got 1"):
        sdpa_decode_reference(q, k, v, cur_pos=[1, 5])


@pytest.mark.slow
@pytest.mark.parametrize("t, nh, nkv, max_cores, kv, k_chunk", [
    (2, 8, 2, 1, BF16, 0),     # g=4: 8 q rows
    (5, 12, 2, 3, BFP8, 32),   # g=6: 30 rows, groups not aligned to 16-row faces
    (8, 8, 1, 5, BFP4, 0),     # g=8: 64 rows = 2 q tile rows
    (32, 4, 1, 8, BFP8, 32),   # g=4: 128 rows = 4 q tile rows, the most tokens
])
def test_every_position_of_a_128_key_cache_matches_the_reference_for_every_token(t, nh, nkv, max_cores, kv,
                                                                                  k_chunk) -> None:
    s = 128
    pos = [-1] + list(range(t - 1, s))
    plan, out, lse, ref, ref_lse, _ = run(t=t, b=len(pos), nh=nh, nkv=nkv, s=s, d=64, pos=pos, kv=kv,
                                          max_cores=max_cores, k_chunk=k_chunk, seed=t, nan=True)
    assert plan.num_tokens == t and plan.q_tiles == -(-(t * nh // nkv) // 32) and plan.guard_empty_rows
    check_users(out, lse, ref, ref_lse, range(1, len(pos)), f"T={t}, {kv.value}, {plan.pieces_per_work} pieces")
    assert torch.all(out[:, 0] == 0) and torch.all(lse[:, 0] == float("-inf"))  # the skipped user


@pytest.mark.slow
@pytest.mark.parametrize("t, window", [(7, 1), (7, 33), (32, 5)])
def test_each_token_keeps_its_own_sliding_window(t, window) -> None:
    s = 256
    pos = list(range(t - 1, s, 5))
    plan, out, lse, ref, ref_lse, _ = run(t=t, b=len(pos), nh=8, nkv=2, s=s, d=64, pos=pos, max_cores=4,
                                          window=window, seed=window, nan=True)
    assert plan.key_window == window + t - 1
    check_users(out, lse, ref, ref_lse, range(len(pos)), f"T={t}, window {window}")


@pytest.mark.slow
def test_the_tokens_read_the_kv_bytes_of_one_token() -> None:
    # K/V read by the T-token step = exactly the tiles of the last token's keys, as a one-token step
    # at cur_pos reads them; only the q rows grow (T x g rows per piece).
    pos, nkv, nh, d = [5, 40, 99, 200, 255, 31, 32, 130], 2, 8, 64
    reads = {}
    for t in (1, 6):
        plan, out, lse, ref, ref_lse, result = run(t=t, b=len(pos), nh=nh, nkv=nkv, s=256, d=d, pos=pos, max_cores=4)
        check_users(out, lse, ref, ref_lse, range(len(pos)), f"bytes T={t}")
        with_work = [pc for pc in plan.pieces if not plan.range_at(pos[pc.user], pc.index).empty]
        q_bytes = len(with_work) * t * plan.group_size * d * 2
        pos_bytes = len(plan.active_cores) * 4 * len(pos)  # once per reader; the writer copy is made in L1
        total = sum(sum(result.counters.kernel(c, KernelKind.READER).dram_read_bytes) for c in plan.active_cores)
        reads[t] = total - q_bytes - pos_bytes
    attended = sum(p // 32 + 1 for p in pos)
    assert reads[6] == reads[1] == attended * nkv * 2 * (d // 32) * tile_size(BFP8)


def test_multi_token_with_a_sink_and_a_paged_cache() -> None:
    gen = torch.Generator().manual_seed(3)
    sink = 3 * torch.randn(8, generator=gen)
    pos = [3, 31, 32, 63, 100, 255]
    plan, out, lse, ref, ref_lse, _ = run(t=4, b=len(pos), nh=8, nkv=2, s=256, d=64, pos=pos, max_cores=4,
                                          k_chunk=32, sink=sink, block_size=64, seed=3)
    assert plan.paged and plan.attention_sink
    check_users(out, lse, ref, ref_lse, range(len(pos)), "T=4, sink, paged")


def test_multi_token_output_is_batch_invariant() -> None:
    s, t = 256, 4
    pos = [200, 17, 255, 90]
    gen = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(t, 4, 8, 64, generator=gen), torch.randn(4, 2, s, 64, generator=gen), \
        torch.randn(4, 2, s, 64, generator=gen)
    outs = {}
    for users in ([0, 1, 2, 3], [2], [2, 0]):
        idx = torch.tensor(users)
        plan = make_plan(batch=len(users), num_q_heads=8, num_kv_heads=2, seq_len=s, head_dim=64, kv_dtype=BFP8,
                         cur_pos=[pos[u] for u in users], num_tokens=t, max_cores_per_head_batch=4)
        out, _, _ = run_flash_decode(plan, q=from_torch(q[:, idx], BF16), k=from_torch(k[idx], BFP8),
                                     v=from_torch(v[idx], BFP8), cur_pos_source=None, scale=0.125,
                                     compute=ComputeSettings())
        outs[tuple(users)] = {u: out[:, i] for i, u in enumerate(users)}
    assert torch.equal(outs[(0, 1, 2, 3)][2], outs[(2,)][2])
    assert torch.equal(outs[(0, 1, 2, 3)][2], outs[(2, 0)][2])
    assert torch.equal(outs[(0, 1, 2, 3)][0], outs[(2, 0)][0])


@pytest.mark.parametrize("seed", [1, 2])
def test_multi_token_is_the_same_under_perturbed_schedules(seed) -> None:
    kwargs = dict(t=6, b=3, nh=8, nkv=2, s=256, d=64, pos=[5, 130, 255], max_cores=8, k_chunk=32, window=40)
    _, base, base_lse, *_ = run(**kwargs)
    _, out, lse, *_ = run(**kwargs, schedule_seed=seed)
    assert torch.equal(out, base) and torch.equal(lse, base_lse)


def test_span_window_and_plan_limits() -> None:
    assert span_window(0, 8) == 0 and span_window(10, 1) == 10 and span_window(10, 8) == 17
    base = dict(batch=2, num_q_heads=8, num_kv_heads=2, seq_len=128, head_dim=64)
    with pytest.raises(PlanError, match=r"num_tokens: expected 1..32 new tokens per user, got 33"):
        make_plan(cur_pos=[40, 50], num_tokens=33, **base)
    with pytest.raises(PlanError, match=r"cur_pos\[1\]: expected -1 or at least num_tokens - 1 = 3 .*got 2"):
        make_plan(cur_pos=[40, 2], num_tokens=4, **base)
    with pytest.raises(PlanError, match=r"num_tokens: expected 1 in non-causal mode"):
        make_plan(is_causal=False, num_tokens=2, **base)
    # 32 tokens x 32 heads of one KV group at D = 512: the per-group state does not fit in L1
    with pytest.raises(PlanError, match=r"L1 overflow.*num_tokens now 32: 32 q tile rows per KV group"):
        make_plan(batch=1, num_q_heads=32, num_kv_heads=1, seq_len=1024, head_dim=512, cur_pos=[500], num_tokens=32)


# ---- the public API ------------------------------------------------------------------------------


def test_api_runs_multi_token_decode_in_the_kernels() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 8, 64, generator=gen), torch.randn(2, 2, 128, 64, generator=gen), \
        torch.randn(2, 2, 128, 64, generator=gen)
    kwargs = dict(cur_pos_tensor=torch.tensor([2, 77], dtype=torch.int32), return_lse=True, sliding_window_size=20)
    out, lse = ttdecode.scaled_dot_product_attention_decode(q, k, v, backend="host", **kwargs)
    ref, ref_lse = ttdecode.scaled_dot_product_attention_decode(q, k, v, backend="reference", **kwargs)
    assert out.shape == (3, 2, 8, 64) and lse.shape == (3, 2, 8)
    check_close(out, ref, "api T=3")
    check_lse(lse, ref_lse, "api T=3")


@pytest.mark.parametrize("case, exc, match", [
    ("33 tokens", ValueError, r"'q'.*1 <= T <= 32 new tokens per user.*\[33, 2, 8, 64\]"),
    ("cur_pos below T - 1", ValueError, r"'cur_pos\[1\]'.*-1 or the position of the last of T=4 new tokens \(>= 3\), got 2"),
    ("cur_pos_tensor below T - 1", ValueError, r"'cur_pos_tensor\[0\]'.*T=4.*got 0"),
    ("non-causal", ValueError, r"'q'.*one token per user \[1, B, NH, D\] in non-causal mode"),
])
def test_bad_multi_token_arguments_are_refused_naming_the_argument(case, exc, match) -> None:
    t = 33 if case == "33 tokens" else 4
    q, k, v = torch.zeros(t, 2, 8, 64), torch.zeros(2, 2, 128, 64), torch.zeros(2, 2, 128, 64)
    kwargs = {
        "33 tokens": dict(cur_pos=[40, 50]),
        "cur_pos below T - 1": dict(cur_pos=[40, 2]),
        "cur_pos_tensor below T - 1": dict(cur_pos_tensor=torch.tensor([0, 9], dtype=torch.int32)),
        "non-causal": dict(is_causal=False),
    }[case]
    for backend in ("host", "reference"):
        with pytest.raises(exc, match=match):
            ttdecode.scaled_dot_product_attention_decode(q, k, v, backend=backend, **kwargs)
