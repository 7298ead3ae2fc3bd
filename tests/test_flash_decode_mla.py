"""MLA decode (DeepSeek-style multi-latent attention) in the FlashDecode kernels on the host runtime.

MLA: one latent KV head per group, D = 576 (512 latent + 64 RoPE columns), no V tensor: V = the first
Dv = 512 columns of K. Each K tile is read once and serves both Q . K^T (transposed) and P . V (V tile
(j, v) is K tile (j, v) of the chunk, untransposed). Expected values: the float64 reference
(`ttdecode.reference`, V = k[..., :Dv]) on the same quantized inputs, with the one accuracy bar of
`ttdecode.accuracy`; and, independently of any tolerance, the bits of the same kernels given a separate
V tensor holding k[..., :Dv] (the same tiles: a block-float face row is 16 columns, so the first 512
columns of K encode exactly as a [.., 512] tensor).

Shapes are small in S and B (the host runtime computes every tile); `perf/mla_point.py` plans and runs
a DeepSeek-shaped point.
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional, Sequence

import pytest
import torch

from ttdecode.accuracy import check_close, check_lse
from ttdecode.api import paged_scaled_dot_product_attention_decode, scaled_dot_product_attention_decode
from ttdecode.ops.flash_decode.program_factory import build_program, build_program_for_device, run_flash_decode
from ttdecode.ops.flash_decode.program_inputs import FactoryError
from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.program_description import L1_BYTES_PER_CORE
from ttdecode.core.split import piece_range
from ttdecode.ops.flash_decode.plan import PlanError, make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import TileTensor, from_torch, to_torch

from tests.test_flash_decode import randn_with_outliers
from tests.test_flash_decode_paged import paginate, shuffled_table

BF16, BFP8 = DataType.bfloat16, DataType.bfloat8_b
D, DV = 576, 512
NAN = float("nan")


def mla_inputs(b: int, nh: int, nkv: int, s: int, kv: DataType, seed: int,
               pos: Optional[Sequence[int]] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [1, B, NH, D] and the latent cache k [B, NKV, S, D] (float32); with `pos`, every row past a
    user's cur_pos holds NaN (the kernels must never let it reach the output)."""
    gen = torch.Generator().manual_seed(seed)
    q = randn_with_outliers((1, b, nh, D), gen)
    k = randn_with_outliers((b, nkv, s, D), gen)
    if pos is not None:
        for u, p in enumerate(pos):
            k[u, :, p + 1:] = NAN
    return q, k


def run_mla(plan_args: dict, q: TileTensor, k: TileTensor, pos: Sequence[int], *,
            table: Optional[torch.Tensor] = None, block_size: Optional[int] = None,
            schedule_seed: Optional[int] = None):
    """Plan (mla=True) and run one program; returns (plan, out, lse, RunResult)."""
    paging = {} if table is None else dict(block_size=block_size, num_blocks=k.shape[0])
    plan = make_plan(head_dim=D, head_dim_v=DV, mla=True, cur_pos=list(pos), return_lse=True, **paging, **plan_args)
    out, lse, result = run_flash_decode(plan, q=q, k=k, v=None, cur_pos_source=None, scale=1.0 / math.sqrt(D),
                                        compute=ComputeSettings(), page_table=table, schedule_seed=schedule_seed)
    return plan, out, lse, result


def mla_reference(q: TileTensor, k: TileTensor, pos: Sequence[int], table: Optional[torch.Tensor] = None):
    """Float64 reference on exactly the tile images' values, V = k[..., :Dv]."""
    return sdpa_decode_reference(to_torch(q).double(), to_torch(k).double(), None, head_dim_v=DV, cur_pos=list(pos),
                                 page_table=table, scale=1.0 / math.sqrt(D), return_lse=True)


def assert_users_match(out: torch.Tensor, lse: torch.Tensor, ref: torch.Tensor, ref_lse: torch.Tensor,
                       pos: Sequence[int], what: str) -> None:
    assert out.shape == ref.shape == (1, len(pos), out.shape[2], DV)
    for u, p in enumerate(pos):
        check_close(out[:, u], ref[:, u], f"{what}: user {u} (cur_pos {p})")
    check_lse(lse, ref_lse, f"{what}: LSE")


# ---- accuracy: positions (0, tile edges, last), q heads 16/64/128, bf16/bfp8, contiguous/paged --------


@pytest.mark.parametrize(
    "nh, kv, paged, plan_args",
    [
        # 16 q heads (one tile row): a 4-piece tree, dynamic chunks
        (16, BF16, False, dict(max_cores_per_head_batch=4)),
        (16, BFP8, True, dict(max_cores_per_head_batch=4, k_chunk_size=64)),
        # 64 q heads (two tile rows)
        (64, BFP8, False, dict(max_cores_per_head_batch=2, k_chunk_size=64)),
        # 128 q heads (four tile rows): one piece per work (the plan's only fit at D=576), several chunks
        (128, BF16, True, dict(max_cores_per_head_batch=1, k_chunk_size=64)),
    ],
)
def test_mla_matches_the_reference_at_position_zero_tile_edges_and_the_end(nh: int, kv: DataType, paged: bool,
                                                                          plan_args: dict) -> None:
    pos = [0, 31, 32, 63, 190, 255] if nh == 16 else [0, 32, 255]
    b, s = len(pos), 256
    q_raw, k_raw = mla_inputs(b, nh, 1, s, kv, seed=nh + paged, pos=pos)
    q = from_torch(q_raw, BF16)
    table = block_size = None
    if paged:
        block_size = 64
        table = shuffled_table(b, s // block_size, b * s // block_size + 3, seed=5)
        k_raw = paginate(k_raw.nan_to_num(0.0), table, b * s // block_size + 3, block_size, fill=NAN, valid=pos)
    k = from_torch(k_raw, kv)
    plan, out, lse, _ = run_mla(dict(batch=b, num_q_heads=nh, num_kv_heads=1, seq_len=s, kv_dtype=kv, **plan_args),
                                q, k, pos, table=table, block_size=block_size)
    assert plan.q_tiles == -(-nh // 32) and plan.mla and "v" not in {cb.name for cb in plan.circular_buffers}
    ref, ref_lse = mla_reference(q, k, pos, table)
    assert_users_match(out, lse, ref, ref_lse, pos, f"MLA {nh}q {kv.value}{' paged' if paged else ''}")


def test_mla_gives_the_bits_of_a_separate_v_holding_the_latent_columns_and_reads_k_once_and_no_v() -> None:
    # The same chunks, the same matmuls: P . V from the K slot (stride d_tiles) must equal P . V from a
    # V slot holding k[..., :512], bit for bit. The MLA reader reads each attended K tile once and no V;
    # the separate-V program reads exactly the V bytes more.
    pos = [255, 40, 0, 127]
    b, nh, s = len(pos), 16, 256
    q_raw, k_raw = mla_inputs(b, nh, 1, s, BFP8, seed=3)
    q, k = from_torch(q_raw, BF16), from_torch(k_raw, BFP8)
    v = from_torch(k_raw[..., :DV], BFP8)
    assert torch.equal(to_torch(v), to_torch(k)[..., :DV])  # the same encoded values
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=1, seq_len=s, kv_dtype=BFP8, max_cores_per_head_batch=4,
                k_chunk_size=64)
    plan, out, lse, result = run_mla(args, q, k, pos)
    plan_v = make_plan(head_dim=D, head_dim_v=DV, cur_pos=pos, return_lse=True, **args)
    out_v, lse_v, result_v = run_flash_decode(plan_v, q=q, k=k, v=v, cur_pos_source=None, scale=1.0 / math.sqrt(D),
                                              compute=ComputeSettings())
    assert torch.equal(out.view(torch.int16), out_v.view(torch.int16))
    assert torch.equal(lse.view(torch.int32), lse_v.view(torch.int32))

    tile = tile_size(BFP8)
    attended_tiles = sum((p + 32) // 32 for p in pos)
    k_bytes = attended_tiles * plan.d_tiles * tile
    v_bytes = attended_tiles * plan.dv_tiles * tile
    pieces_with_work = sum(1 for pc in plan.pieces
                           if not piece_range(pos[pc.user], plan.fixed_chunk_tiles, plan.pieces_per_work, pc.index).empty)
    q_bytes = pieces_with_work * nh * D * 2
    readers = lambda r, p: [r.counters.kernel(c, KernelKind.READER) for c in p.active_cores]  # noqa: E731
    pos_bytes = lambda p: 4 * b * len(p.active_cores)  # noqa: E731  (positions: once per reader)
    assert sum(sum(kc.dram_read_bytes) for kc in readers(result, plan)) == k_bytes + q_bytes + pos_bytes(plan)
    assert sum(sum(kc.dram_read_bytes) for kc in readers(result_v, plan_v)) == \
        k_bytes + v_bytes + q_bytes + pos_bytes(plan_v)


def test_a_user_s_mla_output_is_bit_identical_whatever_the_rest_of_the_batch_and_the_schedule() -> None:
    nh, s = 16, 256
    q0, k0 = mla_inputs(1, nh, 1, s, BFP8, seed=11)
    runs = []
    for others, seed in (([], None), ([5, 255], None), ([-1, 37, 200], 3)):
        pos = [100] + others
        q_raw, k_raw = mla_inputs(len(pos), nh, 1, s, BFP8, seed=12 + len(pos))
        q_raw[:, 0], k_raw[0] = q0[:, 0], k0[0]
        _, out, lse, result = run_mla(dict(batch=len(pos), num_q_heads=nh, num_kv_heads=1, seq_len=s, kv_dtype=BFP8,
                                           max_cores_per_head_batch=4),
                                      from_torch(q_raw, BF16), from_torch(k_raw, BFP8), pos, schedule_seed=seed)
        assert result.schedule_seed == seed
        runs.append((out[:, 0].clone(), lse[:, 0].clone()))
    for out, lse in runs[1:]:
        assert torch.equal(out.view(torch.int16), runs[0][0].view(torch.int16))
        assert torch.equal(lse.view(torch.int32), runs[0][1].view(torch.int32))


# ---- the public entry points ------------------------------------------------------------------------


@pytest.mark.parametrize("paged", [False, True])
def test_public_mla_entry_points_run_the_kernels_on_the_host(paged: bool) -> None:
    # Two latent KV heads (ttnn's MLA golden and the reference allow NKV > 1: each group reads its own K).
    b, nh, nkv, s = 2, 32, 2, 64
    pos = [63, 17]
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, b, nh, D, generator=gen)
    k = torch.randn(b, nkv, s, D, generator=gen)
    kwargs: dict[str, Any] = dict(cur_pos=pos, head_dim_v=DV, return_lse=True)
    if paged:
        table = shuffled_table(b, 2, 6, seed=1)
        kp = from_torch(paginate(k, table, 6, 32), BFP8)
        call = lambda backend: paged_scaled_dot_product_attention_decode(q, kp, None, table, backend=backend, **kwargs)  # noqa: E731
    else:
        kt = from_torch(k, BFP8)
        call = lambda backend: scaled_dot_product_attention_decode(q, kt, None, backend=backend, **kwargs)  # noqa: E731
    out, lse = call("host")
    ref, ref_lse = call("reference")
    assert out.shape == (1, b, nh, DV)
    check_close(out.float(), ref.float(), "host vs reference (bf16 output)")
    check_lse(lse, ref_lse, "LSE")


@pytest.mark.parametrize("d, dv", [(64, 128), (128, 64)])
def test_a_separate_v_with_another_head_dim_runs_in_the_kernels(d: int, dv: int) -> None:
    b, nh, nkv, s = 2, 8, 2, 128
    gen = torch.Generator().manual_seed(d + dv)
    q, k, v = torch.randn(1, b, nh, d, generator=gen), torch.randn(b, nkv, s, d, generator=gen), \
        torch.randn(b, nkv, s, dv, generator=gen)
    out, lse = scaled_dot_product_attention_decode(q, k, v, cur_pos=[127, 40], return_lse=True, backend="host")
    ref, ref_lse = scaled_dot_product_attention_decode(q, k, v, cur_pos=[127, 40], return_lse=True, backend="reference")
    assert out.shape == (1, b, nh, dv)
    check_close(out.float(), ref.float(), f"D={d} Dv={dv}")
    check_lse(lse, ref_lse, f"D={d} Dv={dv} LSE")


# ---- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "v_dim, head_dim_v, message",
    [
        (None, 608, r"argument 'head_dim_v': expected a positive multiple of 32 up to D=576 when v is None \(MLA\), got 608"),
        (None, 500, r"argument 'head_dim_v': expected a positive multiple of 32 up to D=576 when v is None \(MLA\), got 500"),
        (None, None, r"argument 'head_dim_v': expected an integer when v is None"),
        (512, 256, r"argument 'head_dim_v': expected None or v's last dim 512, got 256"),
    ],
)
def test_bad_mla_arguments_are_refused_naming_the_argument(v_dim: Optional[int], head_dim_v: Optional[int],
                                                           message: str) -> None:
    q, k = torch.zeros(1, 1, 16, D), torch.zeros(1, 1, 64, D)
    v = None if v_dim is None else torch.zeros(1, 1, 64, v_dim)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention_decode(q, k, v, cur_pos=[3], head_dim_v=head_dim_v, backend="host")


def test_plan_and_factory_refuse_inconsistent_mla_arguments() -> None:
    args = dict(batch=1, num_q_heads=16, num_kv_heads=1, seq_len=64, head_dim=D, cur_pos=[3])
    with pytest.raises(PlanError, match=r"head_dim_v: expected <= head_dim=576 with mla .*got 608"):
        make_plan(**args, head_dim_v=608, mla=True)
    with pytest.raises(PlanError, match=r"mla: expected a bool, got 'yes'"):
        make_plan(**args, head_dim_v=DV, mla="yes")
    plan = make_plan(**args, head_dim_v=DV, mla=True, kv_dtype=BF16)
    q, k = from_torch(torch.zeros(1, 1, 16, D), BF16), from_torch(torch.zeros(1, 1, 64, D), BF16)
    v = from_torch(torch.zeros(1, 1, 64, DV), BF16)
    with pytest.raises(FactoryError, match=r"v: expected None for an MLA plan"):
        build_program(plan, q=q, k=k, v=v, cur_pos_source=None, scale=0.1, compute=ComputeSettings())
    separate = make_plan(**args, head_dim_v=DV, kv_dtype=BF16)
    with pytest.raises(FactoryError, match=r"v: expected a ttdecode TileTensor, got NoneType"):
        build_program(separate, q=q, k=k, v=None, cur_pos_source=None, scale=0.1, compute=ComputeSettings())


# ---- the L1 plan at D = 576 -----------------------------------------------------------------------------


def test_the_deepseek_plan_at_d576_fits_l1_or_names_the_knob_that_makes_it_fit() -> None:
    base = dict(batch=1, num_kv_heads=1, seq_len=32768, head_dim=D, head_dim_v=DV, mla=True, cur_pos=[32767])
    # 16 q heads (one tile row): the default config (16 pieces, dynamic 256-key chunks) fits in both formats.
    for kv, k_kib in ((BF16, 576), (BFP8, 306)):
        plan = make_plan(num_q_heads=16, kv_dtype=kv, **base)
        cbs = {cb.name: cb for cb in plan.circular_buffers}
        assert "v" not in cbs and plan.pieces_per_work == 16 and plan.max_chunk_tiles == 8
        assert cbs["k"].num_pages == 2 * 8 * 18 and cbs["k"].total_size == k_kib * 1024
        assert plan.l1_bytes_per_core <= L1_BYTES_PER_CORE
    # 128 q heads (four tile rows): the tree's partials come through the merge slot (one q tile row of a
    # partial at a time), and 16 pieces fit with 128-key chunks: the planner takes dynamic chunks of up to 4
    # tiles itself (short chunks); a caller's cap of 8 tiles is refused naming the fixed 128-key chunk, which
    # fits too. One piece per work (no partials) fits as it is (bfp8), and bf16 then needs 128-key chunks.
    for over in (dict(), dict(k_chunk_size=128)):
        plan = make_plan(num_q_heads=128, kv_dtype=BFP8, **over, **base)
        cbs = {cb.name: cb for cb in plan.circular_buffers}
        assert plan.merge_slot and plan.pieces_per_work == 16 and plan.l1_bytes_per_core <= L1_BYTES_PER_CORE
        # a fixed chunk's plan keeps chunk_cap at 8 tiles, unused
        assert plan.max_chunk_tiles == 4 and (plan.fixed_chunk_tiles, plan.chunk_cap) == ((4, 8) if over else (0, 4))
        assert cbs["partial_in"].num_pages == cbs["partial_out"].num_pages == DV // 32 + 2
    with pytest.raises(PlanError, match=r"L1 overflow.*Set k_chunk_size=128 or lower \(now dynamic, up to 256 keys\)"):
        make_plan(num_q_heads=128, kv_dtype=BFP8, chunk_cap=8, **base)
    plan = make_plan(num_q_heads=128, kv_dtype=BFP8, max_cores_per_head_batch=1, **base)
    assert plan.l1_bytes_per_core <= L1_BYTES_PER_CORE
    assert "partial_out" not in {cb.name for cb in plan.circular_buffers}
    # bf16, one piece: short chunks of up to 4 tiles, or (a caller's cap of 8) the 128-key chunk the refusal names
    plan = make_plan(num_q_heads=128, kv_dtype=BF16, max_cores_per_head_batch=1, **base)
    assert (plan.chunk_cap, plan.max_chunk_tiles) == (4, 4) and plan.l1_bytes_per_core <= L1_BYTES_PER_CORE
    with pytest.raises(PlanError, match=r"L1 overflow.*Set k_chunk_size=(\d+) or lower") as e:
        make_plan(num_q_heads=128, kv_dtype=BF16, max_cores_per_head_batch=1, chunk_cap=8, **base)
    chunk = int(re.search(r"k_chunk_size=(\d+)", str(e.value)).group(1))
    assert chunk == 128
    make_plan(num_q_heads=128, kv_dtype=BF16, max_cores_per_head_batch=1, k_chunk_size=chunk, **base)


@pytest.mark.parametrize("kv_pages", ["tile", "key_row"])
def test_deepseek_mla_at_ttnn_s_default_config_plans_with_short_chunks_in_both_layouts(kv_pages: str) -> None:
    # DeepSeek-V3's MLA decode (B 4, 128 q heads, D 576, Dv 512, 64-key blocks) at ttnn's default config (16 cores
    # per head, dynamic chunks): at chunks of 8 tiles it needs 1504.7 KiB a core (bank-local 1505.0) even with the merge slot, so the
    # planner takes chunks of up to 4 tiles (the split floor with them). The L1 sum, buffer by buffer (bytes):
    bank_local = kv_pages == "key_row"
    plan = make_plan(batch=4, num_q_heads=128, num_kv_heads=1, seq_len=4096, head_dim=D, head_dim_v=DV, mla=True,
                     kv_dtype=BFP8, cur_pos=None, block_size=64, num_blocks=256, kv_pages=kv_pages)
    assert plan.bank_local == bank_local and plan.pieces_per_work == (12 if bank_local else 16) and plan.merge_slot
    assert (plan.chunk_cap, plan.max_chunk_tiles, plan.fixed_chunk_tiles, plan.min_chunk_tiles) == (4, 4, 0, 4)
    q_tiles, d_tiles, dv_tiles, f32, bf16, bfp8 = 4, 18, 16, 4096, 2048, 1088

    def l1(chunk: int) -> int:
        return (0x19D60  # the firmware and kernel-config area below the CBs
                + q_tiles * d_tiles * bf16  # q (one piece a core: one slot)
                + 2 * chunk * d_tiles * bfp8  # k: two whole-chunk slots (V is read out of K)
                + 2 * 32  # the positions, for the compute kernel and the writer
                + q_tiles * bf16 + f32 + bf16  # mask (one causal tile per q tile row), max_bcast, ones
                + 2 * chunk * f32  # scores, probs
                + 4 * q_tiles * f32 + 2 * q_tiles * dv_tiles * f32  # max, sum, acc in two sets
                + 2 * f32  # alpha
                + 2 * (dv_tiles + 2) * f32  # partial_in, partial_out: one q tile row through the merge slot
                + q_tiles * dv_tiles * bf16 + q_tiles * f32  # out, lse
                + 16 * 32 + q_tiles * 32 * 4  # the writer's staging
                + (2 if bank_local else 1) * 4096 // 64 * 4  # the page-table row (bank-local: two)
                # the views of the core's one piece (17 int32 words, 32-byte aligned), for compute and writer
                + (2 * 96 if bank_local else 0))
    assert plan.l1_bytes_per_core == l1(4) <= L1_BYTES_PER_CORE < l1(8)
    assert round(l1(8) / 1024, 1) == (1505.1 if bank_local else 1504.7)
    # a caller's cap is used as given: 8 tiles are refused naming the knob
    knob = "Lower key_row_pieces" if bank_local else "Set k_chunk_size=128 or lower"
    with pytest.raises(PlanError, match=rf"L1 overflow: .*{knob}"):
        make_plan(batch=4, num_q_heads=128, num_kv_heads=1, seq_len=4096, head_dim=D, head_dim_v=DV, mla=True,
                  kv_dtype=BFP8, cur_pos=None, block_size=64, num_blocks=256, kv_pages=kv_pages, chunk_cap=8)


@pytest.mark.parametrize("kv_pages", ["tile", "key_row"])
def test_short_chunks_match_the_reference_in_both_layouts(kv_pages: str) -> None:
    # The same rule on a shape the host runtime runs quickly: 16 q heads, 2 pieces per user, a core's L1 one byte
    # short of the plan at chunks of 8 tiles, so the planner takes chunks of up to 4 (a 16-tile user's pieces
    # take two chunks each); users at the end, mid-tile, a tile's last key and position 0, a paged cache.
    pos, s, block = [511, 300, 31, 0], 512, 64
    b, num_blocks = len(pos), len(pos) * 512 // 64 + 3
    args = dict(batch=b, num_q_heads=16, num_kv_heads=1, seq_len=s, kv_dtype=BFP8, max_cores_per_head_batch=2,
                kv_pages=kv_pages)
    full = make_plan(head_dim=D, head_dim_v=DV, mla=True, cur_pos=pos, block_size=block, num_blocks=num_blocks, **args)
    assert (full.chunk_cap, full.max_chunk_tiles) == (8, 8)
    q_raw, k_raw = mla_inputs(b, 16, 1, s, BFP8, seed=41, pos=pos)
    table = shuffled_table(b, s // block, num_blocks, seed=9)
    k = from_torch(paginate(k_raw.nan_to_num(0.0), table, num_blocks, block, fill=NAN, valid=pos), BFP8)
    q = from_torch(q_raw, BF16)
    plan, out, lse, _ = run_mla(dict(l1_bytes_per_core=full.l1_bytes_per_core - 1, **args), q, k, pos, table=table,
                                block_size=block)
    assert (plan.chunk_cap, plan.max_chunk_tiles, plan.min_chunk_tiles, plan.pieces_per_work) == (4, 4, 4, 2)
    assert plan.bank_local == (kv_pages == "key_row")
    if kv_pages == "tile":
        assert [piece_range(511, 0, 2, i, min_chunk_tiles=4, chunk_cap=4).num_chunks for i in (0, 1)] == [2, 2]
    ref, ref_lse = mla_reference(q, k, pos, table)
    assert_users_match(out, lse, ref, ref_lse, pos, f"MLA short chunks ({kv_pages} pages)")


# ---- the device path -----------------------------------------------------------------------------------


def test_mla_program_has_no_v_tensor_and_reads_v_out_of_k(ttnn: Any) -> None:
    # its kernels compile against the real headers on the mock (tests/mock: mla_d192, mla_paged_bf16)
    from ttdecode import ttnn_backend as dev
    from tests.test_device_flash_decode import GridView

    for kv, block in ((BFP8, None), (BF16, 64)):
        paging = dict(block_size=block, num_blocks=4 * 4096 // block) if block else {}
        plan = make_plan(batch=4, num_q_heads=16, num_kv_heads=1, seq_len=4096, head_dim=D, head_dim_v=DV, mla=True,
                         kv_dtype=kv, cur_pos=None, **paging)
        prog = build_program_for_device(plan, scale=D ** -0.5, compute=ComputeSettings())
        assert "v" not in {t.name for t in prog.tensors}
        desc = dev.build_program_descriptor(prog, GridView())
        reader = next(k for k in prog.kernels if k.kind is KernelKind.READER)
        resolved = list(desc.kernels[0].common_runtime_args)  # the addresses are common runtime args
        assert resolved[:4] == [GridView().addresses["q"], GridView().addresses["k"], 0, GridView().addresses["cur_pos"]]
        assert reader.named_compile_time_args["mla"] == 1
        assert next(k for k in prog.kernels if k.kind is KernelKind.COMPUTE).named_compile_time_args["mla"] == 1


def test_cli_plans_the_deepseek_presets_or_names_the_knob(capsys: pytest.CaptureFixture[str]) -> None:
    from ttdecode.__main__ import main

    assert main(["plan", "--preset", "deepseek-v3-mla-16q", "--seq", "32768"]) == 0
    out = capsys.readouterr().out
    # 16 q heads: 16x32 q-row tiles (the K slots 306 KiB, the q-row CBs half of what 32x32 tiles take)
    assert "D=576 Dv=512" in out and "MLA: V = K[..., :Dv]" in out and "L1 per core: 739.0 KiB" in out
    assert re.search(r"cb0 +q +bfloat16 +16x32 +18 x +1024 B", out) and re.search(r"cb1 +k +bfloat8_b +32x32 ", out)
    assert not re.search(r"cb2 +v ", out)
    # 128 q heads: the planner takes dynamic chunks of up to 128 keys; a cap of 8 tiles is refused naming the fixed
    # chunk that fits
    assert main(["plan", "--preset", "deepseek-v3-mla-128q", "--seq", "32768"]) == 0
    assert "chunk: dynamic, max 128 keys" in capsys.readouterr().out
    assert main(["plan", "--preset", "deepseek-v3-mla-128q", "--seq", "32768", "--chunk-cap", "8"]) == 2
    assert "Set --k-chunk-size=128 or lower" in capsys.readouterr().err
    assert main(["plan", "--preset", "deepseek-v3-mla-128q", "--seq", "32768", "--k-chunk-size", "128"]) == 0
    assert "merge slot: children's partials received one q tile row at a time" in capsys.readouterr().out
    assert main(["plan", "--preset", "deepseek-v3-mla-128q", "--seq", "32768", "--max-cores-per-head-batch", "1"]) == 0
    assert main(["reference", "--preset", "deepseek-v3-mla-16q", "--seq", "64", "--cur-pos", "40"]) == 0
    assert "output [1, 1, 16, 512]" in capsys.readouterr().out


def test_mla_with_a_sliding_window_and_an_attention_sink_matches_the_reference() -> None:
    # The window's first tile is zeroed before its first key in the K slot, which is also the V slot.
    b, nh, s = 2, 16, 128
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(1, b, nh, D, generator=gen)
    k = torch.randn(b, 1, s, D, generator=gen)
    k[0, :, :127 - 40 + 1] = NAN  # keys before user 0's window: never attended, must not reach the output
    sink = torch.randn(nh, generator=gen)
    kwargs: dict[str, Any] = dict(cur_pos=[127, 50], head_dim_v=DV, sliding_window_size=40, attention_sink=sink,
                                  return_lse=True)
    out, lse = scaled_dot_product_attention_decode(q, k, None, backend="host", **kwargs)
    ref, ref_lse = scaled_dot_product_attention_decode(q, k.nan_to_num(0.0), None, backend="reference", **kwargs)
    check_close(out.float(), ref.float(), "MLA, window 40, sink")
    check_lse(lse, ref_lse, "MLA, window 40, sink: LSE")
