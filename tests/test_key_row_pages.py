"""kv_pages "key_row": K/V pages of one key-tile row, dealt round robin over the 12 DRAM banks, and
the cyclic split that keeps each piece in one bank.

Expected values come from the documented layout, not from the planner: a ttnn tensor ND-sharded in
DRAM with [1, 1, 32, D] shards, ROUND_ROBIN_1D, puts shard s (key-tile row s of the tile-order cache)
in bank s % 12 (ttnn 0.81.1 `tensor_accessor.h` round_robin_mapping), so key tile t of (user b, KV
head h) lives in bank ((b * NKV + h) * S / 32 + t) % 12. The outputs are checked against the float64
reference on the same quantized inputs (thresholds in ttdecode.accuracy).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import pytest
import torch

from ttdecode.accuracy import check_close, check_lse
from ttdecode.config import SDPAProgramConfig
from ttdecode.ops.flash_decode.plan.split_choices import key_row_pieces
from ttdecode.perf_model.constants import COST
from ttdecode.perf_model.counters import work_from_counters
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType
from ttdecode.core.split import piece_range
from ttdecode.ops.flash_decode.plan import PlanError, make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.runtime.results import EVENT_OPS
from ttdecode.core.tensor import from_torch, to_torch

BF16, BFP8 = DataType.bfloat16, DataType.bfloat8_b
READ_DRAM = {v: k for k, v in EVENT_OPS.items()}["read_dram"]


def _inputs(b: int, nh: int, nkv: int, s: int, d: int, dv: int | None, kv: DataType, tokens: int = 1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = from_torch(torch.randn(tokens, b, nh, d, generator=g), BF16)
    k = from_torch(torch.randn(b, nkv, s, d, generator=g), kv)
    v = None if dv is None else from_torch(torch.randn(b, nkv, s, dv, generator=g), kv)
    return q, k, v


def _run(*, b=2, nh=8, nkv=1, s=1024, d=64, pos=(1000, 500), kv=BFP8, window=None, tokens=1, mla=False,
         mask=False, max_cores=24, k_chunk=0, floor=1, seed=0):
    dv = 32 if mla else d
    q, k, v = _inputs(b, nh, nkv, s, d, None if mla else dv, kv, tokens, seed)
    am = None
    if mask:
        g = torch.Generator().manual_seed(seed + 1)
        am = torch.where(torch.rand(b, 1, nh, s, generator=g) < 0.3, float("-inf"), torch.randn(b, 1, nh, s, generator=g))
        pos = None
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, head_dim_v=dv, kv_dtype=kv,
                     cur_pos=None if pos is None else list(pos), max_cores_per_head_batch=max_cores, return_lse=True,
                     kv_pages="key_row", key_row_pieces=max_cores,
                     min_chunk_tiles=None if k_chunk else floor, sliding_window_size=window,
                     num_tokens=tokens, mla=mla, k_chunk_size=k_chunk, is_causal=not mask,
                     attn_mask_batch=b if mask else 0)
    scale = 1 / math.sqrt(d)
    out, lse, res = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=scale, compute=ComputeSettings(),
                                     attn_mask=am)
    ref, ref_lse = sdpa_decode_reference(
        to_torch(q).double(), to_torch(k).double(), None if mla else to_torch(v).double(),
        cur_pos=None if pos is None else list(pos), is_causal=not mask,
        attn_mask=None if am is None else am.to(torch.bfloat16).double(), scale=scale, return_lse=True,
        sliding_window_size=window, head_dim_v=dv if mla else None)
    return plan, out, lse, ref, ref_lse, res


CASES = {
    "plain": {},
    "skipped user and a short one": dict(pos=(-1, 40)),
    "sliding window": dict(window=300),
    "three tokens": dict(tokens=3, pos=(1000, 505)),
    "two tokens in a window": dict(tokens=2, window=200, pos=(1000, 333)),
    "mla": dict(mla=True),
    "fixed chunks": dict(k_chunk=64),
    "bf16 cache": dict(kv=BF16),
    "non-causal with attn_mask": dict(mask=True),
    "split floor 8": dict(floor=8, pos=(1000, 200)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_key_row_outputs_match_the_reference(name: str) -> None:
    plan, out, lse, ref, ref_lse, _ = _run(**CASES[name])
    assert plan.cyclic_split and plan.pieces_per_work == 24
    check_close(out, ref, f"key_row {name}")
    check_lse(lse, ref_lse, f"key_row {name} LSE")


def test_every_core_reads_its_kv_from_one_bank_the_documented_one() -> None:
    b, nkv, s, d = 2, 2, 2048, 64
    # 64 and 30 key tiles: 24 pieces for the first, 30 rounded down to 24 for the second (every piece one bank)
    plan, out, lse, ref, ref_lse, res = _run(b=b, nh=8, nkv=nkv, s=s, d=d, pos=(2047, 959), max_cores=24)
    check_close(out, ref, "key_row, two KV heads")
    st = s // 32
    expected: dict = defaultdict(set)  # core -> banks its pieces' key tiles live in (documented mapping)
    for p in plan.pieces:
        r = piece_range(plan.cur_pos[p.user], 0, plan.pieces_per_work, p.index, 0, plan.min_chunk_tiles, True)
        for t in r.tiles:
            expected[p.core].add(((p.user * nkv + p.kv_head) * st + t) % 12)
    kv_tile = 1088
    seen: dict = defaultdict(set)
    for k in res.counters.kernels:
        if k.kind is KernelKind.READER:
            for e in k.events:
                if int(e["op"]) == READ_DRAM and int(e["amount"]) == kv_tile:
                    seen[k.core].add(int(e["peer"]))
    assert seen == expected
    assert all(len(banks) == 1 for banks in seen.values())
    works, _, _ = work_from_counters(plan, res.counters)
    assert all(w.bank_local for w in works if w.kv_bytes)


def test_banks_get_cores_by_their_work_and_never_more_than_their_pieces() -> None:
    """bank_core_counts: even shares when every bank has the same work; the rest of the grid to the banks
    whose work per core is the largest; a bank never gets more cores than pieces, nor fewer than its
    pieces need under the runtime args' limit."""
    from ttdecode.ops.flash_decode.plan import bank_core_counts

    assert bank_core_counts([1.0] * 12, [5] * 12, 64) == [5] * 12  # one user, 60 pieces: 4 cores stay free
    # banks 0, 4 and 8 hold three times the others' work (the parents' merges): they take the spare cores
    w = [3.0 if r % 4 == 0 else 1.0 for r in range(12)]
    counts = bank_core_counts(w, [80] * 12, 64)
    assert sum(counts) == 64 and min(counts) >= 1
    assert all(counts[r] > counts[r + 1] for r in (0, 4, 8))
    assert max(w[r] / counts[r] for r in range(12)) <= min(w[r] / (counts[r] - 1) for r in range(12) if counts[r] > 1)
    # 200 light pieces in bank 1 need 4 cores at 55 pieces per core (a runtime-args limit) whatever the work says
    assert bank_core_counts([100.0] + [1.0] + [100.0] * 10, [20, 200] + [20] * 10, 64, per_core=55)[1] >= 4


@pytest.mark.parametrize(("b", "nkv", "g", "s", "d", "mc"), [(1, 1, 8, 32768, 128, 60), (3, 2, 4, 4096, 64, 24),
                                                          (8, 1, 8, 16384, 128, 60), (16, 1, 8, 8192, 128, 60),
                                                          (5, 8, 4, 8192, 128, 36), (32, 1, 8, 131072, 64, 60),
                                                          (24, 2, 1, 2048, 64, 48), (2, 4, 8, 65536, 128, 12)])
def test_every_piece_of_a_batch_runs_on_a_core_of_its_bank_within_the_runtime_args(b, nkv, g, s, d, mc) -> None:
    """plan.key_row_deal, whatever the batch: each core runs pieces of one bank only (the key tiles of piece i
    of work (b, h) sit in bank ((b * NKV + h) * S/32 + i) % 12, documented mapping), no core more pieces than its
    runtime args hold, every piece placed once."""
    from ttdecode.ops.flash_decode.plan import RUNTIME_ARGS_HEADER, RUNTIME_ARGS_PER_PIECE
    from ttdecode.core.program_description import MAX_RUNTIME_ARGS

    plan = make_plan(batch=b, num_q_heads=nkv * g, num_kv_heads=nkv, seq_len=s, head_dim=d, cur_pos=[s - 1] * b,
                     max_cores_per_head_batch=mc, kv_pages="key_row")
    st = s // 32
    banks: dict = defaultdict(set)
    count: dict = defaultdict(int)
    for p in plan.pieces:
        banks[p.core].add(((p.user * nkv + p.kv_head) * st + p.index) % 12)
        count[p.core] += 1
    assert all(len(v) == 1 for v in banks.values())
    assert RUNTIME_ARGS_HEADER + RUNTIME_ARGS_PER_PIECE * max(count.values()) <= MAX_RUNTIME_ARGS
    assert sorted((p.user, p.kv_head, p.index) for p in plan.pieces) == sorted(
        (u, h, i) for u in range(b) for h in range(nkv) for i in range(plan.pieces_per_work))


@pytest.mark.slow
def test_a_batch_spreads_its_merges_over_the_cores_of_the_banks_that_hold_the_parents() -> None:
    """B 16 at 8K with 60 pieces per head: every user's tree puts its merges on the pieces whose tiles
    sit in banks 0, 4 and 8 (S/32 = 256 is 4 mod 12), which an even share of cores per bank would leave
    on 15 cores (the busiest ran 4x the mean merge work, and the step was those cores' merges). The
    cost model on the run's counters: the busiest core's merges at most 2.5x the mean, and the merges
    hidden under the reads (the step's reduction is the tree's)."""
    from ttdecode.perf_model.evaluator import evaluate, reduction_cycles, sum_ops

    plan, out, lse, ref, ref_lse, res = _run(b=16, nh=8, nkv=1, s=8192, d=128, pos=(8191,) * 16, max_cores=60)
    check_close(out, ref, "key_row, B 16")
    assert plan.pieces_per_work == 60
    works, red, fid = work_from_counters(plan, res.counters)
    merges = [sum(sum_ops(w.merge, fid, COST).values()) for w in works]
    assert max(merges) <= 2.5 * sum(merges) / len(merges)
    b = evaluate(works, red, fid)
    tree, _ = reduction_cycles(red, fid)
    assert b.reduction_us == pytest.approx(tree * 1e6 / COST.clock_hz)


def test_pieces_per_head_do_not_depend_on_the_batch() -> None:
    plans = [make_plan(batch=bb, num_q_heads=8, num_kv_heads=1, seq_len=4096, head_dim=64, cur_pos=[4000] * bb,
                       max_cores_per_head_batch=64, kv_pages="key_row") for bb in (1, 3, 5, 8)]
    assert len({p.pieces_per_work for p in plans}) == 1 and plans[0].pieces_per_work % 12 == 0
    plans = [make_plan(batch=bb, num_q_heads=32, num_kv_heads=8, seq_len=32768, head_dim=128, cur_pos=[32767] * bb,
                       max_cores_per_head_batch=64, kv_pages="key_row") for bb in (1, 2)]
    assert {p.pieces_per_work for p in plans} == {12}


def test_the_model_takes_fewer_pieces_when_one_user_already_covers_the_cores() -> None:
    """Eight KV heads x 12 pieces already cover the 60 cores kept for the banks, but with 8 heads' key tiles
    on a core its compute passes the bank floor: the model takes 36 pieces (6 rounds), not the 60 that one
    KV head (or 2 or 4) needs to reach every core."""
    common = dict(cores=64, max_pieces=60, q_tiles=1, d_tiles=4, dv_tiles=4, kv_tile_bytes=1088,
                  kv_tiles_per_key_tile=8, head_rows=4)
    assert key_row_pieces(num_kv_heads=8, seq_tiles=1024, **common) == 36
    assert all(key_row_pieces(num_kv_heads=h, seq_tiles=1024, **common) == 60 for h in (1, 2, 4))
    # rounds dearer than any compute: the fewest pieces (the fewest rounds) even for one KV head
    dear_rounds = dataclasses.replace(COST, semaphore_handshake_cycles=1e9)
    assert key_row_pieces(num_kv_heads=1, seq_tiles=1024, c=dear_rounds, **common) == 12
    # the cap is the caller's most
    assert key_row_pieces(num_kv_heads=1, seq_tiles=1024, **dict(common, max_pieces=36)) == 36


def test_key_row_pieces_can_be_fixed_by_the_caller() -> None:
    base = dict(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=4096, head_dim=64, cur_pos=[4000],
                max_cores_per_head_batch=48, kv_pages="key_row")
    assert make_plan(**base, key_row_pieces=24).pieces_per_work == 24
    for bad in (0, 18, 60, 2.0):
        with pytest.raises(PlanError, match="key_row_pieces: expected None or a multiple of 12 from 12 to 48"):
            make_plan(**base, key_row_pieces=bad)
    with pytest.raises(PlanError, match="key_row_pieces: applies to kv_pages='key_row' only"):
        make_plan(**dict(base, kv_pages="tile"), key_row_pieces=24)


def test_a_users_output_is_bit_identical_whatever_the_rest_of_the_batch() -> None:
    s, d = 1024, 64
    q, k, v = _inputs(4, 8, 1, s, d, d, BFP8, seed=3)
    qt, kt, vt = to_torch(q), to_torch(k), to_torch(v)
    outs = []
    for others in ((1000, 1000, 1000), (10, -1, 700)):
        pos = [900, *others]
        qb = from_torch(qt.clone(), BF16)
        kk, vv = kt.clone(), vt.clone()
        kk[1:] = torch.randn_like(kk[1:])
        plan = make_plan(batch=4, num_q_heads=8, num_kv_heads=1, seq_len=s, head_dim=d, cur_pos=pos,
                         max_cores_per_head_batch=24, kv_pages="key_row", key_row_pieces=24, min_chunk_tiles=1)
        out, _, _ = run_flash_decode(plan, q=qb, k=from_torch(kk, BFP8), v=from_torch(vv, BFP8), cur_pos_source=None,
                                     scale=1 / math.sqrt(d), compute=ComputeSettings())
        outs.append(out[:, 0])
    assert torch.equal(outs[0], outs[1])


def test_key_row_refuses_what_it_cannot_run() -> None:
    base = dict(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=1024, head_dim=64, cur_pos=[100])
    with pytest.raises(PlanError, match="max_cores_per_head_batch: expected at least 12"):
        make_plan(**base, max_cores_per_head_batch=8, kv_pages="key_row")
    # a paged cache takes the bank-local split (tests/test_flash_decode_bank_paged.py), even on a small grid
    assert make_plan(**base, max_cores_per_head_batch=16, kv_pages="key_row", block_size=64, num_blocks=16).bank_local
    with pytest.raises(PlanError, match="one core per DRAM bank"):
        make_plan(**base, max_cores_per_head_batch=16, kv_pages="key_row", grid=(2, 4))
    with pytest.raises(PlanError, match="L1 overflow.*Lower max_cores_per_head_batch \\(now 60 pieces per head"):
        make_plan(batch=96, num_q_heads=8, num_kv_heads=1, seq_len=4096, head_dim=256, cur_pos=[4000] * 96,
                  max_cores_per_head_batch=64, kv_pages="key_row", key_row_pieces=60)
    with pytest.raises(PlanError, match="kv_pages: expected 'tile' or 'key_row'"):
        make_plan(**base, kv_pages="sharded")
    with pytest.raises(ValueError, match="kv_pages"):
        SDPAProgramConfig(kv_pages="banked")
    with pytest.raises(ValueError, match="kv_pages"):
        SDPAProgramConfig(kv_pages="key_row", max_cores_per_head_batch=16).to_ttnn()


def test_the_key_row_memory_config_is_ttnn_nd_sharding_over_the_dram_banks(ttnn) -> None:
    # ttnn through the session fixture (the mock cluster descriptor): a bare import before it would leave
    # ttnn without one, and later tests' ttnn.from_torch would find no chips
    from ttdecode.ttnn_backend import DeviceError, check_key_row_memory_config, key_row_memory_config

    mem = key_row_memory_config(ttnn, 128)
    assert mem.buffer_type == ttnn.BufferType.DRAM
    assert mem.memory_layout == ttnn.TensorMemoryLayout.ND_SHARDED
    spec = mem.nd_shard_spec
    assert list(spec.shard_shape) == [1, 1, 32, 128]
    assert spec.shard_distribution_strategy == ttnn.ShardDistributionStrategy.ROUND_ROBIN_1D
    check_key_row_memory_config(ttnn, mem, 128, "k")
    with pytest.raises(DeviceError, match="ND-sharded"):
        check_key_row_memory_config(ttnn, ttnn.DRAM_MEMORY_CONFIG, 128, "k")
    with pytest.raises(DeviceError, match="ND-sharded"):
        check_key_row_memory_config(ttnn, key_row_memory_config(ttnn, 64), 128, "k")


def test_the_api_runs_key_row_through_the_program_config() -> None:
    from ttdecode.api import scaled_dot_product_attention_decode

    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 8, 64, generator=g)
    k = torch.randn(2, 1, 512, 64, generator=g)
    v = torch.randn(2, 1, 512, 64, generator=g)
    cfg = SDPAProgramConfig(kv_pages="key_row", max_cores_per_head_batch=12)
    out, lse = scaled_dot_product_attention_decode(q, k, v, cur_pos=[511, 300], program_config=cfg, backend="host",
                                                   return_lse=True)
    ref, ref_lse = scaled_dot_product_attention_decode(q, k, v, cur_pos=[511, 300], backend="reference", return_lse=True)
    check_close(out, ref, "api key_row output")
    check_lse(lse, ref_lse, "api key_row LSE")


def test_the_device_program_describes_key_row_pages_as_ttnn_lays_them_out() -> None:
    from ttdecode import ttnn_backend as dev
    from ttdecode.ops.flash_decode.program_factory import build_program_for_device

    plan = make_plan(batch=2, num_q_heads=8, num_kv_heads=2, seq_len=2048, head_dim=128, cur_pos=None,
                     max_cores_per_head_batch=12, kv_pages="key_row")
    prog = build_program_for_device(plan, scale=0.1, compute=ComputeSettings())
    for name in ("k", "v"):
        t = prog.tensor(name)
        # one page per key-tile row: 4 bfloat8_b tiles of 1088 B; rows = B x NKV x S / 32
        assert (t.layout, t.page_size, t.num_pages) == ("key_row", 4 * 1088, 2 * 2 * 64)
        dev.check_page_geometry(t)
    reader = next(k for k in prog.kernels if k.kind is KernelKind.READER)
    assert reader.named_compile_time_args["key_row_pages"] == 1 and reader.named_compile_time_args["cyclic_split"] == 1


def test_the_bank_floor_of_a_key_row_run_is_priced_at_the_bank_local_efficiency() -> None:
    from ttdecode.perf_model.constants import COST
    from ttdecode.perf_model.evaluator import bank_floor_cycles

    plan, out, lse, ref, ref_lse, res = _run(b=1, nh=8, nkv=1, s=2048, d=64, pos=(2047,), max_cores=12)
    works, _, _ = work_from_counters(plan, res.counters)
    load = max(sum(w.bank_bytes[b] for w in works) for b in range(12))
    per_bank = COST.dram_peak_bytes_per_cycle / 12
    assert bank_floor_cycles(works) == pytest.approx(load / (per_bank * 267.0 / 288.0))
    # the same keys in tile pages: every core reads several banks, the floor runs at the interleaved rate
    tile_plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=2048, head_dim=64, cur_pos=[2047],
                          max_cores_per_head_batch=12, min_chunk_tiles=1)
    q, k, v = _inputs(1, 8, 1, 2048, 64, 64, BFP8)
    _, _, tres = run_flash_decode(tile_plan, q=q, k=k, v=v, cur_pos_source=None, scale=0.125, compute=ComputeSettings())
    tworks, _, _ = work_from_counters(tile_plan, tres.counters)
    tload = max(sum(w.bank_bytes[b] for w in tworks) for b in range(12))
    assert not any(w.bank_local for w in tworks if w.kv_bytes)
    assert bank_floor_cycles(tworks) == pytest.approx(tload / (per_bank * COST.dram_interleaved_efficiency))


def test_a_batch_with_bank_local_and_other_cores_prices_each_cores_bytes_at_its_own_efficiency() -> None:
    """A long user (64 key tiles, 12 pieces at a split floor of 4: one bank each) next to a short one (10 key
    tiles: 2 pieces of 5, each reading several banks): each bank's bytes from bank-local cores at 267/288,
    the rest at the fitted interleaved efficiency, summed per bank."""
    from ttdecode.perf_model.constants import COST
    from ttdecode.perf_model.evaluator import bank_floor_cycles

    plan, out, lse, ref, ref_lse, res = _run(b=2, nh=8, nkv=1, s=2048, d=64, pos=(2047, 319), max_cores=24, floor=4)
    check_close(out, ref, "key_row, a long and a short user")
    works, _, _ = work_from_counters(plan, res.counters)
    readers = [w for w in works if w.kv_bytes]
    assert any(w.bank_local for w in readers) and not all(w.bank_local for w in readers)
    per_bank = COST.dram_peak_bytes_per_cycle / 12
    want = max(sum(w.bank_bytes[b] / (per_bank * (267.0 / 288.0 if w.bank_local else COST.dram_interleaved_efficiency))
                   for w in works) for b in range(12))
    assert bank_floor_cycles(works) == pytest.approx(want)
    local_only = max(sum(w.bank_bytes[b] for w in works) for b in range(12)) / (per_bank * 267.0 / 288.0)
    assert local_only < bank_floor_cycles(works)
