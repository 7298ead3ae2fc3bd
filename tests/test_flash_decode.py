"""The FlashDecode kernels on the host runtime against the float64 reference.

Every case feeds the kernels tile images (bf16 Q; bf16 / bfloat8_b / bfloat4_b K and V) and compares
with `sdpa_decode_reference` run on exactly those values (the images dequantized), so the figures
measure the kernels' arithmetic. Inputs are N(0, 1) with 10x outliers at probability 0.001.
Thresholds live in `ttdecode.accuracy.THRESHOLDS`. Position sweeps put one user per position in a
single program to keep the number of runs low.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import pytest
import torch

from ttdecode.accuracy import THRESHOLDS, check_close, check_lse
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import DecodePlan, make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import TileTensor, from_torch, to_torch

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b


def randn_with_outliers(shape: Sequence[int], gen: torch.Generator) -> torch.Tensor:
    """N(0, 1) with 10x outliers at probability 0.001 (the input model of tt-metal's tests)."""
    x = torch.randn(*shape, generator=gen)
    return torch.where(torch.rand(*shape, generator=gen) < 1e-3, 10 * x, x)


@dataclass
class Case:
    plan: DecodePlan
    out: torch.Tensor  # [1, B, NH, Dv] bf16
    lse: Optional[torch.Tensor]  # [1, B, NH] float32
    ref: torch.Tensor  # float64
    ref_lse: torch.Tensor  # float64
    result: object  # the runtime's RunResult


def make_tensors(b: int, nh: int, nkv: int, s: int, d: int, kv: DataType, seed: int, share: bool = False):
    gen = torch.Generator().manual_seed(seed)
    kb = 1 if share else b
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k = from_torch(randn_with_outliers((kb, nkv, s, d), gen), kv)
    v = from_torch(randn_with_outliers((kb, nkv, s, d), gen), kv)
    return q, k, v


def run_case(
    *, b: int, nh: int, nkv: int, s: int, d: int, pos: Sequence[int], kv: DataType = BFP8,
    grid: tuple[int, int] = (8, 8), max_cores: int = 16, k_chunk: int = 0, lse: bool = True,
    share: bool = False, seed: int = 0, tensors: Optional[tuple[TileTensor, TileTensor, TileTensor]] = None,
    pos_as_tensor: bool = False, sub_grids=None, min_chunk_tiles: Optional[int] = 1, chunk_cap: Optional[int] = None,
) -> Case:
    """One run against the float64 reference. min_chunk_tiles 1 (the default here) spreads short
    contexts over every piece, so these cases exercise the merge tree; None = the cost model's
    split floor (the planner's default)."""
    q, k, v = tensors if tensors is not None else make_tensors(b, nh, nkv, s, d, kv, seed, share)
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv,
                     cur_pos=None if pos_as_tensor else list(pos), grid=grid, max_cores_per_head_batch=max_cores,
                     k_chunk_size=k_chunk, return_lse=lse, share_cache=share, sub_core_grids=sub_grids,
                     min_chunk_tiles=min_chunk_tiles, chunk_cap=chunk_cap)
    source = torch.tensor(list(pos), dtype=torch.int32) if pos_as_tensor else None
    scale = 1.0 / math.sqrt(d)
    out, out_lse, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=source, scale=scale,
                                            compute=ComputeSettings())
    ref, ref_lse = sdpa_decode_reference(
        to_torch(q).double(), to_torch(k).double(), to_torch(v).double(), cur_pos=list(pos), scale=scale,
        share_cache=share, return_lse=True,
    )
    return Case(plan, out, out_lse, ref, ref_lse, result)


def assert_users_close(case: Case, users: Sequence[int], what: str) -> tuple[float, float]:
    """Every listed user passes on its own (output and LSE); returns the worst (rel_l2, pcc)."""
    worst_e, worst_c = 0.0, 1.0
    for u in users:
        e, c = check_close(case.out[:, u], case.ref[:, u], f"{what}: user {u} output")
        worst_e, worst_c = max(worst_e, e), min(worst_c, c)
        if case.lse is not None:
            check_lse(case.lse[:, u], case.ref_lse[:, u], f"{what}: user {u} LSE")
    return worst_e, worst_c


def kv_bytes_of_valid_tiles(plan: DecodePlan, pos: Sequence[int], tile_bytes: int) -> int:
    """K+V bytes of every tile up to the one holding cur_pos, over all users and KV heads."""
    tiles = sum((p + 32) // 32 for p in pos if p >= 0)
    return tiles * plan.num_kv_heads * (plan.d_tiles + plan.dv_tiles) * tile_bytes


# ---- position sweeps ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "max_cores, kv, k_chunk, pieces",
    [
        (1, BF16, 0, 1),
        (2, BFP8, 32, 2),
        (3, BFP8, 64, 3),
        (5, BFP4, 0, 5),
        (8, BF16, 128, 2),  # 256 keys hold two 128-key chunks
        (8, BFP4, 32, 8),
        (16, BFP8, 0, 8),  # 256 keys hold 8 tiles: the planner caps the pieces at 8
    ],
)
def test_every_position_of_a_256_key_cache_matches_the_reference(max_cores, kv, k_chunk, pieces) -> None:
    s = 256
    case = run_case(b=s, nh=8, nkv=1, s=s, d=64, pos=range(s), kv=kv, max_cores=max_cores, k_chunk=k_chunk,
                    seed=max_cores)
    assert case.plan.pieces_per_work == pieces
    assert_users_close(case, range(s), f"S=256 sweep, {pieces} pieces, {kv.value}, k_chunk {k_chunk}")


@pytest.mark.parametrize("first", [0, 128, 256, 384])
def test_every_position_of_a_512_key_cache_with_16_pieces_per_head(first: int) -> None:
    pos = list(range(first, first + 128))
    case = run_case(b=128, nh=4, nkv=1, s=512, d=64, pos=pos, kv=BFP8, max_cores=16, seed=first)
    assert case.plan.pieces_per_work == 16
    assert_users_close(case, range(128), "S=512 sweep, 16 pieces")


def test_position_zero_returns_the_first_value_row_exactly() -> None:
    # One key: softmax weight 1, so every q head of the group outputs V[0] (bfp8 values are exact
    # in bf16), whatever the number of pieces, and the LSE is the scaled score itself.
    case = run_case(b=2, nh=8, nkv=2, s=1024, d=64, pos=[0, 0], kv=BFP8, max_cores=8)
    v0 = to_torch(make_tensors(2, 8, 2, 1024, 64, BFP8, 0)[2])[:, :, 0, :]  # [B, NKV, D]
    expected = v0.repeat_interleave(4, dim=1).unsqueeze(0).to(torch.bfloat16)
    assert torch.equal(case.out, expected)
    check_lse(case.lse, case.ref_lse, "cur_pos 0 LSE")


def test_users_at_different_positions_and_skipped_users_share_one_program() -> None:
    pos = [-1, 0, 31, 32, 777, -1, 1023, 500]
    case = run_case(b=len(pos), nh=16, nkv=4, s=1024, d=128, pos=pos, kv=BFP8, max_cores=8)
    live = [u for u, p in enumerate(pos) if p >= 0]
    assert_users_close(case, live, "mixed batch")
    for u in (0, 5):
        assert torch.count_nonzero(case.out[:, u]) == 0, f"skipped user {u} must output zeros"
    check_lse(case.lse, case.ref_lse, "mixed batch, skipped users included")


@pytest.mark.parametrize("garbage", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("kv", [BF16, BFP8, BFP4], ids=lambda t: t.value)
def test_nan_and_inf_in_the_cache_past_cur_pos_do_not_reach_the_output(kv: DataType, garbage: float) -> None:
    # A device cache holds whatever was there before beyond cur_pos. Every position past cur_pos
    # holds `garbage` in K and V; the boundary tile then mixes valid rows with garbage rows (cur_pos
    # inside a tile, at its last row, at its first row), and the output must be the reference's,
    # which never reads those positions.
    pos = [0, 17, 30, 31, 32, 63, 100, 254]
    b, nh, nkv, s, d = len(pos), 8, 2, 256, 64
    gen = torch.Generator().manual_seed(21)
    q = randn_with_outliers((1, b, nh, d), gen)
    k = randn_with_outliers((b, nkv, s, d), gen)
    v = randn_with_outliers((b, nkv, s, d), gen)
    for u, p in enumerate(pos):
        k[u, :, p + 1:] = garbage
        v[u, :, p + 1:] = garbage
    tensors = (from_torch(q, BF16), from_torch(k, kv), from_torch(v, kv))
    stored_k, stored_v = to_torch(tensors[1]), to_torch(tensors[2])
    for u, p in enumerate(pos):  # the tile images really hold the garbage, and only past cur_pos
        assert not torch.isfinite(stored_k[u, :, p + 1:]).any() and not torch.isfinite(stored_v[u, :, p + 1:]).any()
        assert torch.isfinite(stored_k[u, :, : p + 1]).all() and torch.isfinite(stored_v[u, :, : p + 1]).all()
    case = run_case(b=b, nh=nh, nkv=nkv, s=s, d=d, pos=pos, kv=kv, tensors=tensors, max_cores=4)
    assert_users_close(case, range(b), f"{garbage} past cur_pos, {kv.value}")


# ---- model shapes -------------------------------------------------------------------------------


def test_model_split_floor_runs_a_short_context_on_its_root_alone_and_stays_batch_invariant() -> None:
    """Galaxy Llama-70B per chip (8q/1kv, 8x4 grid, 4 pieces per head), D 64 to stay small: at
    cur_pos 127 the cost model's split floor gives the root all 4 key tiles (no partial is sent);
    user 1 at 1000 still spreads over every piece. Each user's output is bit-identical alone."""
    pos = [127, 1000]
    shape = dict(nh=8, nkv=1, s=1024, d=64, grid=(8, 4), max_cores=4, min_chunk_tiles=None)
    case = run_case(b=2, pos=pos, **shape)
    assert case.plan.min_chunk_tiles == 4
    assert_users_close(case, range(2), "model split floor")
    writers = [kc for kc in case.result.counters.kernels if kc.kind is KernelKind.WRITER]
    assert sum(sum(kc.sem_incs.values()) for kc in writers) == 3  # user 1's three children only
    q, k, v = make_tensors(2, 8, 1, 1024, 64, BFP8, 0)
    for u in range(2):
        alone = run_case(b=1, pos=[pos[u]], tensors=(from_torch(to_torch(q)[:, u:u + 1], BF16),
                                                     from_torch(to_torch(k)[u:u + 1], BFP8),
                                                     from_torch(to_torch(v)[u:u + 1], BFP8)), **shape)
        assert torch.equal(alone.out[:, 0], case.out[:, u])


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 32])
def test_llama31_8b_on_n150_reads_each_kv_byte_once(batch: int) -> None:
    pos = [8191] if batch == 1 else [8191 - 253 * u for u in range(batch)]
    case = run_case(b=batch, nh=32, nkv=8, s=8192, d=128, pos=pos, kv=BFP8, max_cores=16, lse=False)
    assert case.plan.pieces_per_work == 8
    assert_users_close(case, range(batch), f"Llama-3.1-8B N150 B={batch}")
    readers = [kc for kc in case.result.counters.kernels if kc.kind is KernelKind.READER]
    kv_bytes = kv_bytes_of_valid_tiles(case.plan, pos, 1088)
    q_bytes = sum(1 for pc in case.plan.pieces if not case.plan.range_at(pos[pc.user], pc.index).empty) * 4 * 4 * 64
    pos_bytes = 4 * batch * len(readers)  # read once per reader; the writer copy is made in L1
    assert sum(sum(kc.dram_read_bytes) for kc in readers) == kv_bytes + q_bytes + pos_bytes


#: Bandwidth model for the reduction check: one NoC link moves 32 B per cycle; 288 GB/s of DRAM
#: at 1 GHz shared by the 64 cores of an 8x8 grid is 4.5 B per cycle per core.
NOC_BYTES_PER_CYCLE = 32.0
DRAM_BYTES_PER_CYCLE_PER_CORE = 288.0 / 64


@pytest.mark.parametrize("nh", [4, 8])
@pytest.mark.parametrize("max_cores", [16, 64])
def test_t3k_per_chip_shapes_send_small_partials_up_a_log_depth_tree(nh: int, max_cores: int) -> None:
    pos = [8191, 4000, 100, 6000]
    case = run_case(b=4, nh=nh, nkv=1, s=8192, d=128, pos=pos, kv=BFP8, max_cores=max_cores, lse=False)
    assert case.plan.pieces_per_work == max_cores
    assert_users_close(case, range(4), f"T3K {nh}q/1kv, {max_cores} pieces")
    counters = case.result.counters.kernels
    # Each piece with work sends one partial holding only the group's rows: O (dv tiles x 2 faces)
    # and m, l (the face of column 0), in fp32.
    partial_bytes = nh * 64 * (4 * 2 + 2)
    senders = sum(
        1 for pc in case.plan.pieces
        if pc.index and not case.plan.range_at(pos[pc.user], pc.index).empty
    )
    writers = [kc for kc in counters if kc.kind is KernelKind.WRITER]
    assert sum(sum(kc.noc_write_bytes.values()) for kc in writers) == senders * partial_bytes
    assert sum(sum(kc.sem_incs.values()) for kc in writers) == senders  # one signal per partial
    # The time to move the partials into the busiest core stays a small fraction of the time the
    # busiest reader spends on DRAM.
    incoming: dict = {}
    for kc in writers:
        for core, n in kc.noc_write_bytes.items():
            incoming[core] = incoming.get(core, 0) + n
    dram = max(sum(kc.dram_read_bytes) for kc in counters if kc.kind is KernelKind.READER)
    ratio = (max(incoming.values()) / NOC_BYTES_PER_CYCLE) / (dram / DRAM_BYTES_PER_CYCLE_PER_CORE)
    assert ratio < 0.1, f"reduction transfer time {ratio:.1%} of the DRAM time"


@pytest.mark.parametrize("nh, nkv, q_tiles", [(64, 1, 2), (96, 2, 2), (80, 1, 3)])
def test_gqa_groups_larger_than_one_tile_of_q_heads(nh: int, nkv: int, q_tiles: int) -> None:
    pos = [1023, 33, 600]
    case = run_case(b=3, nh=nh, nkv=nkv, s=1024, d=64, pos=pos, kv=BFP8, max_cores=8)
    assert case.plan.q_tiles == q_tiles
    assert_users_close(case, range(3), f"GQA {nh}q/{nkv}kv")


def test_each_key_tile_meets_each_q_tile_row_in_one_score_matmul() -> None:
    # Per q tile row and key tile: d_tiles matmul tiles for the scores (computed once, kept in fp32
    # for both the row max and the exponent), one for the row sum (P x ones), dv_tiles for P . V.
    pos = [1023, 33, 600]
    case = run_case(b=3, nh=64, nkv=1, s=1024, d=64, pos=pos, kv=BFP8, max_cores=8)
    plan = case.plan
    key_tiles = sum((p + 32) // 32 for p in pos) * plan.num_kv_heads
    assert plan.q_tiles == 2
    assert case.result.counters.tiles("matmul") == key_tiles * plan.q_tiles * (plan.d_tiles + 1 + plan.dv_tiles)
    assert_users_close(case, range(3), "one score pass")


@pytest.mark.parametrize("d, kv", [(32, BFP8), (64, BFP4), (96, BF16), (256, BFP8)])
def test_head_dims_other_than_128(d: int, kv: DataType) -> None:
    pos = [2047, 1000, 64]
    case = run_case(b=3, nh=8, nkv=2, s=2048, d=d, pos=pos, kv=kv, max_cores=8)
    assert_users_close(case, range(3), f"D={d}")


def test_fixed_512_key_chunks_span_sixteen_tiles() -> None:
    case = run_case(b=2, nh=8, nkv=2, s=4096, d=128, pos=[4095, 2000], kv=BFP8, k_chunk=512, max_cores=4)
    assert case.plan.max_chunk_tiles == 16
    assert_users_close(case, range(2), "k_chunk_size 512")


def test_mha_and_mqa_layouts() -> None:
    for nh, nkv in ((8, 8), (8, 1)):
        case = run_case(b=2, nh=nh, nkv=nkv, s=512, d=64, pos=[511, 200], kv=BFP8, max_cores=4)
        assert_users_close(case, range(2), f"{nh}q/{nkv}kv")


def test_share_cache_reads_kv_batch_zero_for_every_user() -> None:
    pos = [1000, 17, 511]
    case = run_case(b=3, nh=8, nkv=2, s=1024, d=64, pos=pos, kv=BFP8, max_cores=8, share=True)
    assert_users_close(case, range(3), "share_cache")


# ---- positions on the device, batch invariance ---------------------------------------------------


def test_cur_pos_tensor_gives_the_bits_of_the_cur_pos_list() -> None:
    pos = [700, -1, 3, 1023]
    tensors = make_tensors(4, 8, 2, 1024, 64, BFP8, 7)
    listed = run_case(b=4, nh=8, nkv=2, s=1024, d=64, pos=pos, tensors=tensors, max_cores=8)
    on_device = run_case(b=4, nh=8, nkv=2, s=1024, d=64, pos=pos, tensors=tensors, max_cores=8, pos_as_tensor=True)
    assert on_device.plan.cur_pos is None
    assert listed.result.tensors["out"] == on_device.result.tensors["out"]
    assert listed.result.tensors["lse"] == on_device.result.tensors["lse"]
    assert_users_close(on_device, [0, 2, 3], "cur_pos_tensor")


def test_a_users_output_does_not_depend_on_the_rest_of_the_batch() -> None:
    nh, nkv, s, d = 8, 2, 2048, 64
    gen = torch.Generator().manual_seed(11)
    q = randn_with_outliers((1, 6, nh, d), gen)
    k = randn_with_outliers((6, nkv, s, d), gen)
    v = randn_with_outliers((6, nkv, s, d), gen)
    pos = [1500, 2047, 5, -1, 900, 1200]

    def tiles(users: list[int]):
        return from_torch(q[:, users], BF16), from_torch(k[users], BFP8), from_torch(v[users], BFP8)

    alone = run_case(b=1, nh=nh, nkv=nkv, s=s, d=d, pos=[pos[0]], tensors=tiles([0]), max_cores=8)
    full = run_case(b=6, nh=nh, nkv=nkv, s=s, d=d, pos=pos, tensors=tiles(list(range(6))), max_cores=8)
    other = run_case(b=3, nh=nh, nkv=nkv, s=s, d=d, pos=[pos[4], pos[0], pos[1]], tensors=tiles([4, 0, 1]),
                     max_cores=8, grid=(6, 5))
    assert torch.equal(full.out[:, 0].view(torch.int16), alone.out[:, 0].view(torch.int16))
    assert torch.equal(other.out[:, 1].view(torch.int16), alone.out[:, 0].view(torch.int16))
    assert torch.equal(full.lse[:, 0].view(torch.int32), alone.lse[:, 0].view(torch.int32))
    assert torch.equal(other.lse[:, 1].view(torch.int32), alone.lse[:, 0].view(torch.int32))
    check_close(alone.out, alone.ref, "batch invariance: the lone user")


def test_dynamic_chunks_of_16_and_32_tiles_match_the_reference_and_stay_batch_invariant() -> None:
    """D 64, bfloat8_b: K and V slots, scores and probabilities of 32-tile chunks take 2 x 32 x 2 x 1088 x 2
    + 2 x 32 x 4096 = 528 KiB, within the plan's 576 KiB budget, so dynamic chunks may go up to 32 tiles. One
    piece per user: 7 key tiles are one chunk of 8; 32 are four of 8 (a chunk above 8 tiles only where the
    piece takes at least three); 64 are four of 16; 128 four of 32. The outputs match the reference, and
    the longest user gives the same bits alone and in the batch."""
    nh, nkv, s, d = 8, 1, 4096, 64
    pos = [200, 1023, 2047, 4095]
    gen = torch.Generator().manual_seed(21)
    q = randn_with_outliers((1, 4, nh, d), gen)
    k = randn_with_outliers((4, nkv, s, d), gen)
    v = randn_with_outliers((4, nkv, s, d), gen)

    def tiles(users: list[int]):
        return from_torch(q[:, users], BF16), from_torch(k[users], BFP8), from_torch(v[users], BFP8)

    case = run_case(b=4, nh=nh, nkv=nkv, s=s, d=d, pos=pos, tensors=tiles([0, 1, 2, 3]), max_cores=1, chunk_cap=32)
    assert case.plan.chunk_cap == 32 and case.plan.max_chunk_tiles == 32
    assert [(r.chunk_tiles, r.num_chunks) for r in (case.plan.range_at(p, 0) for p in pos)] == \
        [(8, 1), (8, 4), (16, 4), (32, 4)]
    assert_users_close(case, range(4), "dynamic chunks of 8 / 16 / 32 tiles")
    alone = run_case(b=1, nh=nh, nkv=nkv, s=s, d=d, pos=[pos[3]], tensors=tiles([3]), max_cores=1, chunk_cap=32)
    assert torch.equal(case.out[:, 3].view(torch.int16), alone.out[:, 0].view(torch.int16))
    assert torch.equal(case.lse[:, 3].view(torch.int32), alone.lse[:, 0].view(torch.int32))


def test_the_api_passes_the_program_configs_chunk_cap_to_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """SDPAProgramConfig(chunk_cap=16): one piece of 64 key tiles runs 4 chunks of 16 (the plan the API
    makes), and the output matches the reference."""
    import ttdecode.api as api
    from ttdecode.config import SDPAProgramConfig

    plans: list[DecodePlan] = []
    real = api.make_decode_plan
    monkeypatch.setattr(api, "make_decode_plan", lambda inputs: plans.append(real(inputs)) or plans[-1])
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(*shape, generator=g) for shape in ((1, 1, 8, 64), (1, 1, 2048, 64), (1, 1, 2048, 64)))
    cfg = SDPAProgramConfig(chunk_cap=16, max_cores_per_head_batch=1)
    out = api.scaled_dot_product_attention_decode(q, k, v, cur_pos=[2047], program_config=cfg, backend="host")
    ref = api.scaled_dot_product_attention_decode(q, k, v, cur_pos=[2047], backend="reference")
    check_close(out, ref, "api chunk_cap 16")
    r = plans[0].range_at(2047, 0)
    assert plans[0].chunk_cap == 16 and (r.chunk_tiles, r.num_chunks) == (16, 4)


def test_chunks_of_16_tiles_in_a_two_round_tree_at_d128() -> None:
    """D 128, bfloat8_b: the cap may be 16 tiles (32 would take 800 KiB). 4 pieces of 64 key tiles, each four
    chunks of 16, merged in two rounds, match the reference; with chunk_cap=8 each piece takes 8 chunks."""
    case = run_case(b=1, nh=8, nkv=1, s=8192, d=128, pos=[8191], max_cores=4, chunk_cap=16)
    assert case.plan.rounds == 2
    assert {(r.chunk_tiles, r.num_chunks) for r in case.plan.ranges(0)} == {(16, 4)}
    assert_users_close(case, [0], "chunks of 16 tiles, 4 pieces")
    small = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=8192, head_dim=128, cur_pos=[8191],
                      max_cores_per_head_batch=4, min_chunk_tiles=1, chunk_cap=8)
    assert {(r.chunk_tiles, r.num_chunks) for r in small.ranges(0)} == {(8, 8)}


def test_a_sub_grid_gives_the_bits_of_the_full_grid() -> None:
    pos = [1500, 2047, 64]
    tensors = make_tensors(3, 8, 2, 2048, 64, BFP4, 5)
    full = run_case(b=3, nh=8, nkv=2, s=2048, d=64, pos=pos, kv=BFP4, tensors=tensors, max_cores=4)
    sub = run_case(b=3, nh=8, nkv=2, s=2048, d=64, pos=pos, kv=BFP4, tensors=tensors, max_cores=4,
                   sub_grids=[((1, 1), (3, 2)), ((6, 0), (6, 3))])
    assert full.plan.pieces_per_work == sub.plan.pieces_per_work == 4
    assert len(sub.plan.cores) == 10
    assert full.result.tensors["out"] == sub.result.tensors["out"]
    assert full.result.tensors["lse"] == sub.result.tensors["lse"]
    assert_users_close(sub, range(3), "sub-grid")


# ---- long context -------------------------------------------------------------------------------


@pytest.mark.slow
def test_128k_context_with_64_pieces_per_head() -> None:
    s = 131072
    pos = [s - 1, 70000]
    case = run_case(b=2, nh=8, nkv=1, s=s, d=128, pos=pos, kv=BFP8, max_cores=64)
    assert case.plan.pieces_per_work == 64
    e, c = assert_users_close(case, range(2), "128K context")
    assert e <= THRESHOLDS.max_rel_l2 and c >= THRESHOLDS.min_pcc
