"""Context parallelism: the KV cache split along the sequence over worker devices, partials merged by LSE.

Expected values come from the float64 reference over the *whole* cache (``sdpa_decode_reference``, on
the same quantized K/V), never from the sharding code. ``backend="host"`` runs the Metalium kernels on
every shard (the host runtime); the whole matrix of device counts, layouts and combines runs there, on
small caches (S = 256: one key tile per device at 8 devices). Pools are shared per device count
(``get_pool``) and closed at the end of the module.
"""

from __future__ import annotations

import math
import os
import signal

import numpy as np
import pytest
import torch

import ttdecode
from ttdecode.accuracy import check_close, check_lse
from ttdecode.distributed import WorkerError, WorkerPool
from ttdecode.distributed.context import close_pools, shard_plan
from ttdecode.reference import sdpa_decode_reference

BFP8, BFP4 = ttdecode.bfloat8_b, ttdecode.bfloat4_b


@pytest.fixture(scope="module", autouse=True)
def _pools():
    yield
    close_pools()


def cache(b: int, nh: int, nkv: int, s: int, d: int, dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, b, nh, d, generator=g)
    k = ttdecode.from_torch(torch.randn(b, nkv, s, d, generator=g), dtype=dtype)
    v = ttdecode.from_torch(torch.randn(b, nkv, s, d, generator=g), dtype=dtype)
    return q, k, v


def reference(q, k, v, pos, **kw):
    return sdpa_decode_reference(q.to(torch.bfloat16).double(), ttdecode.to_torch(k).double(),
                                 ttdecode.to_torch(v).double(), cur_pos=pos, return_lse=True, **kw)


def check_users(out, lse, ref, ref_lse, what: str) -> None:
    for u in range(out.shape[1]):
        check_close(out[:, u], ref[:, u], f"{what}: user {u} output")
        check_lse(lse[:, u], ref_lse[:, u], f"{what}: user {u} LSE")


# ---- combine_partials ---------------------------------------------------------------------------


def _merge_longdouble(outs: np.ndarray, lses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The merge in 80-bit long double, written from the formula: lse = log sum exp(lse_i)."""
    o, l = outs.astype(np.longdouble), lses.astype(np.longdouble)
    top = np.max(l, axis=0)
    safe_top = np.where(np.isfinite(top), top, 0)
    w = np.exp(l - safe_top)
    total = w.sum(axis=0)
    out = np.where(total[..., None] > 0, np.nansum(np.where(w[..., None] > 0, w[..., None] * o, 0), axis=0)
                   / np.where(total > 0, total, 1)[..., None], 0)
    return out, np.where(total > 0, safe_top + np.log(np.where(total > 0, total, 1)), -np.inf)


def test_combine_partials_is_exact_to_float64_rounding_for_lses_far_apart_and_empty_partials() -> None:
    g = torch.Generator().manual_seed(1)
    n, b, nh, dv = 5, 3, 4, 32
    outs = torch.randn(n, 1, b, nh, dv, generator=g, dtype=torch.float64)
    lses = torch.randn(n, 1, b, nh, generator=g, dtype=torch.float64) * 3
    lses[0, 0, 0] = 800.0                      # exp would overflow without the max shift
    lses[1, 0, 0] = -800.0
    lses[2, 0, 1] = float("-inf")              # an empty partial whose output holds garbage
    outs[2, 0, 1] = float("nan")
    lses[:, 0, 2, 0] = float("-inf")           # nothing anywhere: zeros and -inf
    out, lse = ttdecode.combine_partials(outs, lses)
    ref_out, ref_lse = _merge_longdouble(outs.numpy(), lses.numpy())
    assert out.dtype == torch.float64 and out.shape == (1, b, nh, dv) and lse.shape == (1, b, nh)
    assert torch.equal(out[0, 2, 0], torch.zeros(dv, dtype=torch.float64)) and math.isinf(lse[0, 2, 0]) and lse[0, 2, 0] < 0
    live = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse.numpy()[live], ref_lse[live].astype(np.float64), rtol=4e-16, atol=4e-15)
    np.testing.assert_allclose(out.numpy(), ref_out.astype(np.float64), rtol=1e-14, atol=1e-15)
    assert torch.equal(out[0, 0, 0], outs[0, 0, 0, 0])  # the partial 800 above the rest is the result


@pytest.mark.parametrize("outs_shape, lses_shape, arg", [
    ((2, 1, 3, 4, 32), (2, 1, 3, 5), "lses"),
    ((2, 3, 4, 32), (2, 3, 4), "outs"),
    ((2, 2, 3, 4, 32), (2, 2, 3, 4), "outs"),
])
def test_combine_partials_names_the_mismatched_argument(outs_shape, lses_shape, arg) -> None:
    with pytest.raises(ValueError, match=f"argument '{arg}'"):
        ttdecode.combine_partials(torch.zeros(outs_shape), torch.zeros(lses_shape))


# ---- sharding -----------------------------------------------------------------------------------


def test_both_layouts_give_each_device_a_monotone_share_of_every_unit_exactly_once() -> None:
    for layout in ("contiguous", "interleaved"):
        p = shard_plan(13, 32, 5, layout)
        every = sorted(u for us in p.units for u in us)
        assert every == list(range(13)), layout
        assert all(list(us) == sorted(us) and len(us) in (2, 3) for us in p.units), layout
    assert shard_plan(13, 32, 5, "interleaved").units[1] == (1, 6, 11)
    assert shard_plan(13, 32, 5, "contiguous").units[0] == (0, 1, 2)


# ---- accuracy on the kernels --------------------------------------------------------------------

S = 256
# full cache, a user at cur_pos 0, a skipped user, a user whose keys sit in the first tile only
# (one device in both layouts), a user mid-cache.
POSITIONS = [S - 1, 0, -1, 20, 150]


@pytest.mark.parametrize("devices", [2, 3, 5, 8])
def test_host_kernels_sharded_over_devices_match_the_whole_cache_reference(devices: int) -> None:
    q, k, v = cache(len(POSITIONS), 4, 2, S, 64, BFP8, seed=devices)
    ref, ref_lse = reference(q, k, v, POSITIONS)
    for layout in ("contiguous", "interleaved"):
        for combine in ("all_gather", "all_to_all"):
            out, lse = ttdecode.context_parallel_decode(q, k, v, cur_pos=POSITIONS, devices=devices, kv_layout=layout,
                                                        combine=combine, return_lse=True, backend="host")
            assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
            check_users(out, lse, ref, ref_lse, f"{devices} devices, {layout}, {combine}")
            assert torch.equal(out[0, 2], torch.zeros_like(out[0, 2]))  # the skipped user


def test_a_128k_token_cache_over_8_devices_matches_the_reference() -> None:
    """128K positions, one KV head, two q heads, D = 32 (kept small for the host runtime)."""
    s = 128 * 1024
    q, k, v = cache(1, 2, 1, s, 32, BFP8, seed=7)
    pos = [s - 1]
    out, lse = ttdecode.context_parallel_decode(q, k, v, cur_pos=pos, devices=8, kv_layout="interleaved",
                                                combine="all_to_all", return_lse=True, backend="host")
    check_users(out, lse, *reference(q, k, v, pos), "128K over 8 devices")


@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
def test_key_row_pages_on_every_device_match_the_whole_cache_reference(layout: str) -> None:
    """kv_pages="key_row" reaches every device's plan through the program config: each shard is its own
    key-row-paged cache (page k of the shard in bank k % 12), read by 12 or 24 cyclic pieces per head."""
    from ttdecode.config import SDPAProgramConfig

    pos = [4095, 3000, -1, 700]
    q, k, v = cache(len(pos), 8, 1, 4096, 64, BFP8, seed=5)
    out, lse = ttdecode.context_parallel_decode(
        q, k, v, cur_pos=pos, devices=2, kv_layout=layout, return_lse=True, backend="host",
        program_config=SDPAProgramConfig(kv_pages="key_row", max_cores_per_head_batch=24))
    check_users(out, lse, *reference(q, k, v, pos), f"key_row pages, {layout}")
    assert torch.equal(out[0, 2], torch.zeros_like(out[0, 2]))  # the skipped user


@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
def test_sliding_window_across_shard_boundaries_and_sink_joining_once(layout: str) -> None:
    """Windows that start inside a shard, span several, or sit in one; the sink counted once per user."""
    pos = [S - 1, 70, 100, 5, -1, 0]
    q, k, v = cache(len(pos), 4, 1, S, 32, BFP4, seed=3)
    sink = torch.tensor([0.5, 3.0, -1.0, 8.0])
    for window in (40, 100):
        pos_t = torch.tensor(pos, dtype=torch.int32)
        out, lse = ttdecode.context_parallel_decode(q, k, v, cur_pos_tensor=pos_t, devices=3, kv_layout=layout,
                                                    combine="all_to_all", return_lse=True, backend="host",
                                                    sliding_window_size=window, attention_sink=sink, scale=0.2)
        ref, ref_lse = reference(q, k, v, pos, sliding_window_size=window, scale=0.2,
                                 attention_sink=sink.to(torch.bfloat16).double())
        check_users(out, lse, ref, ref_lse, f"{layout}, window {window}, sink")


@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
def test_paged_cache_sharded_by_blocks_matches_the_reference(layout: str) -> None:
    g = torch.Generator().manual_seed(5)
    b, nkv, nh, d, bs, blocks_per_user = 3, 1, 2, 32, 64, 4
    pool_blocks = b * blocks_per_user + 2
    k_pool = torch.randn(pool_blocks, nkv, bs, d, generator=g)
    v_pool = torch.randn(pool_blocks, nkv, bs, d, generator=g)
    table = torch.randperm(pool_blocks, generator=g)[: b * blocks_per_user].reshape(b, blocks_per_user).to(torch.int32)
    q = torch.randn(1, b, nh, d, generator=g)
    pos = [255, 64, 130]
    kt, vt = ttdecode.from_torch(k_pool, dtype=BFP8), ttdecode.from_torch(v_pool, dtype=BFP8)
    out, lse = ttdecode.context_parallel_decode(q, kt, vt, page_table=table, cur_pos=pos, devices=3, kv_layout=layout,
                                                combine="all_gather", return_lse=True, backend="host")
    ref, ref_lse = sdpa_decode_reference(q.to(torch.bfloat16).double(), ttdecode.to_torch(kt).double(),
                                         ttdecode.to_torch(vt).double(), page_table=table, cur_pos=pos, return_lse=True)
    check_users(out, lse, ref, ref_lse, f"paged, {layout}")


def test_ttnn_and_torch_caches_shard_like_tile_tensors(ttnn) -> None:
    q, k, v = cache(2, 2, 1, S, 32, BFP8, seed=11)
    pos = [200, 33]
    k_tt = ttnn.from_torch(ttdecode.to_torch(k), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
    v_tt = ttnn.from_torch(ttdecode.to_torch(v), dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
    a = ttdecode.context_parallel_decode(q, k_tt, v_tt, cur_pos=pos, devices=2, backend="host")
    b = ttdecode.context_parallel_decode(q, k, v, cur_pos=pos, devices=2, backend="host")
    assert torch.equal(a, b)
    kb, vb = ttdecode.to_torch(k).float(), ttdecode.to_torch(v).float()  # torch inputs are taken as bfloat16
    out = ttdecode.context_parallel_decode(q, kb, vb, cur_pos=pos, devices=2, kv_layout="interleaved", backend="host")
    ref, _ = sdpa_decode_reference(q.to(torch.bfloat16).double(), kb.to(torch.bfloat16).double(),
                                   vb.to(torch.bfloat16).double(), cur_pos=pos, return_lse=True)
    check_close(out, ref, "torch cache")


@pytest.mark.parametrize("combine", ["all_gather", "all_to_all"])
def test_a_users_output_is_bit_identical_whatever_the_other_users(combine: str) -> None:
    """User 0 (window 50 over shard boundaries) alone, then among users with other positions and caches."""
    q, k, v = cache(4, 4, 1, S, 32, BFP8, seed=2)
    q2, k2, v2 = cache(4, 4, 1, S, 32, BFP8, seed=9)
    kw = dict(devices=3, kv_layout="interleaved", combine=combine, return_lse=True, backend="host",
              sliding_window_size=50)
    alone, alone_lse = ttdecode.context_parallel_decode(q, k, v, cur_pos=[180, -1, -1, -1], **kw)
    q2[:, 0] = q[:, 0]
    k2 = ttdecode.from_torch(torch.cat([ttdecode.to_torch(k)[:1], ttdecode.to_torch(k2)[1:]]), dtype=BFP8)
    v2 = ttdecode.from_torch(torch.cat([ttdecode.to_torch(v)[:1], ttdecode.to_torch(v2)[1:]]), dtype=BFP8)
    crowd, crowd_lse = ttdecode.context_parallel_decode(q2, k2, v2, cur_pos=[180, 255, 10, 97], **kw)
    assert torch.equal(alone[:, 0], crowd[:, 0]) and torch.equal(alone_lse[:, 0], crowd_lse[:, 0])


@pytest.mark.parametrize("layout, combine", [("contiguous", "all_gather"), ("interleaved", "all_to_all")])
def test_non_causal_with_a_mask_over_devices_matches_the_reference(layout: str, combine: str) -> None:
    """Non-causal decode: every shard attends all its keys, the mask's columns travel with their keys.
    A fully masked head gives zeros and LSE -inf; a head whose keys all sit on the last shard merges
    -inf partials from the others."""
    q, k, v = cache(2, 8, 2, S, 64, BFP8, seed=21)
    g = torch.Generator().manual_seed(22)
    mask = torch.where(torch.rand(2, 1, 8, S, generator=g) < 0.3, float("-inf"), torch.randn(2, 1, 8, S, generator=g))
    mask[0, 0, 3] = float("-inf")
    mask[1, 0, 5, :200] = float("-inf")
    out, lse = ttdecode.context_parallel_decode(q, k, v, is_causal=False, attn_mask=mask, devices=3, kv_layout=layout,
                                                combine=combine, return_lse=True, backend="host")
    ref, ref_lse = sdpa_decode_reference(q.to(torch.bfloat16).double(), ttdecode.to_torch(k).double(),
                                         ttdecode.to_torch(v).double(), is_causal=False,
                                         attn_mask=mask.to(torch.bfloat16).double(), return_lse=True)
    assert torch.all(out[0, 0, 3] == 0) and lse[0, 0, 3] == float("-inf")
    live = [(u, h) for u in range(2) for h in range(8) if (u, h) != (0, 3)]
    for u, h in live:
        check_close(out[:, u, h], ref[:, u, h], f"{layout}/{combine}: user {u} head {h}")
        check_lse(lse[:, u, h], ref_lse[:, u, h], f"{layout}/{combine}: user {u} head {h} LSE")
    plain = ttdecode.context_parallel_decode(q, k, v, is_causal=False, devices=4, backend="host")
    ref_plain, _ = sdpa_decode_reference(q.to(torch.bfloat16).double(), ttdecode.to_torch(k).double(),
                                         ttdecode.to_torch(v).double(), is_causal=False, return_lse=True)
    check_close(plain, ref_plain, "non-causal without a mask")


def test_an_mla_latent_cache_over_devices_matches_the_reference() -> None:
    """MLA (one latent KV head, D = 576, V = its first 512 columns): each device reads its latent keys
    once; the merged output matches the whole-cache reference."""
    g = torch.Generator().manual_seed(31)
    b, nh, s, d, dv = 2, 16, 128, 576, 512
    q = torch.randn(1, b, nh, d, generator=g)
    k = ttdecode.from_torch(torch.randn(b, 1, s, d, generator=g), dtype=BFP8)
    pos = [127, 40]
    out, lse = ttdecode.context_parallel_decode(q, k, None, head_dim_v=dv, cur_pos=pos, devices=2,
                                                kv_layout="interleaved", return_lse=True, backend="host")
    kd = ttdecode.to_torch(k).double()
    ref, ref_lse = sdpa_decode_reference(q.to(torch.bfloat16).double(), kd, None, head_dim_v=dv, cur_pos=pos,
                                         return_lse=True)
    check_users(out, lse, ref, ref_lse, "MLA over 2 devices")


# ---- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, arg", [
    (dict(devices=0), "devices"),
    (dict(devices=9), "devices"),          # 8 key tiles
    (dict(devices=2.0), "devices"),
    (dict(devices=2, kv_layout="striped"), "kv_layout"),
    (dict(devices=2, combine="reduce_scatter"), "combine"),
    (dict(devices=2, attn_mask=torch.zeros(1)), "attn_mask"),
])
def test_bad_arguments_are_named_before_any_worker_runs(kw, arg) -> None:
    q, k, v = cache(1, 2, 1, S, 32, BFP8, seed=0)
    with pytest.raises((ValueError, TypeError), match=f"argument '{arg}'"):
        ttdecode.context_parallel_decode(q, k, v, cur_pos=[10], backend="reference", **kw)


def test_a_dead_device_is_named_and_does_not_hang() -> None:
    q, k, v = cache(1, 2, 1, S, 32, BFP8, seed=0)
    pool = WorkerPool(2, label="device", timeout=60.0)
    try:
        ttdecode.context_parallel_decode(q, k, v, cur_pos=[10], devices=pool, backend="reference")
        os.kill(pool._procs[1].pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match="device 1"):
            ttdecode.context_parallel_decode(q, k, v, cur_pos=[10], devices=pool, backend="reference")
    finally:
        pool.close()


def _combine_in_subgroups(ctx, combine: str, seed: int, merge: str = "reference"):
    import torch.distributed as dist

    from ttdecode.distributed.context import combine_over_group

    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates both, in order
    g = torch.Generator().manual_seed(seed + ctx.rank)
    out = torch.randn(1, 3, 5, 32, generator=g)
    lse = torch.randn(1, 3, 5, generator=g) * 4
    lse[0, 1, 2] = float("-inf")
    merged = combine_over_group(out, lse, combine, group=groups[ctx.rank // 2], merge=merge)
    return out, lse, merged


@pytest.mark.parametrize("merge", ["reference", "kernel"])
@pytest.mark.parametrize("combine", ["all_gather", "all_to_all"])
def test_combine_over_a_subgroup_merges_only_that_groups_partials(combine: str, merge: str) -> None:
    """Two CP groups of two inside four workers (the TP x CP shape): each gets its own pair's merge,
    by combine_partials or by the combine kernels (float32 partials: fp32 tiles, fp32 output)."""
    from ttdecode.distributed.context import get_pool

    results = get_pool(4).run_all(_combine_in_subgroups, combine, 3, merge)
    for pair in ((0, 1), (2, 3)):
        outs = torch.stack([results[r][0] for r in pair])
        lses = torch.stack([results[r][1] for r in pair])
        ref_o, ref_l = _merge_longdouble(outs.double().numpy(), lses.double().numpy())
        for r in pair:
            o, l = results[r][2]
            np.testing.assert_allclose(o.numpy(), ref_o.astype(np.float64), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(l.numpy(), ref_l.astype(np.float64), rtol=1e-6, atol=1e-5)



def test_the_host_backend_merges_with_the_combine_kernels() -> None:
    """Two devices whose partials tie: q = 0 makes every score 0, so each device's output is its own
    constant V (1 on device 0's keys, 1 + 2^-7 on device 1's) with the same LSE log(128), and the merge
    is their mean 1 + 2^-8, halfway between two bf16 values. The combine kernel's packer rounds the tie
    away from zero (1 + 2^-7); a float32 merge rounded by torch would give 1 (to even)."""
    b, nh, d = 2, 4, 32
    q = torch.zeros(1, b, nh, d)
    k = ttdecode.from_torch(torch.randn(b, 1, S, d, generator=torch.Generator().manual_seed(4)), dtype=ttdecode.bfloat16)
    v = torch.ones(b, 1, S, d)
    v[:, :, S // 2:] = 1 + 2 ** -7
    v = ttdecode.from_torch(v, dtype=ttdecode.bfloat16)
    for combine in ("all_gather", "all_to_all"):
        out, lse = ttdecode.context_parallel_decode(q, k, v, cur_pos=[S - 1] * b, devices=2, combine=combine,
                                                    return_lse=True, backend="host")
        assert torch.equal(out.float(), torch.full((1, b, nh, d), 1 + 2 ** -7)), combine
        assert torch.allclose(lse.double(), torch.full((1, b, nh), math.log(S), dtype=torch.float64), atol=1e-5)
