"""The merge slot (plan/merge_slot.py): when the children's partials side by side would overflow L1, a parent
receives them one q tile row at a time through one slot, each row sent when the parent grants it.

Pinned here: the plan takes it only then, its partial buffers hold one row whatever the pieces (12 and more
partials per (user, KV head) in both layouts, DeepSeek-V3's MLA shape with 128 q heads among them); the
kernels give the bits of the dedicated areas (same merge order), under the host runtime's perturbed schedules
too, in the tile and the bank-local layouts, with users whose children hold no keys; and the meeting-order
check finds the cycle two cores' run orders can make.
"""

from __future__ import annotations

import math
from typing import Optional

import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import L1_BYTES_PER_CORE, ComputeSettings, CoreCoord
from ttdecode.core.tensor import from_torch
from ttdecode.ops.flash_decode.plan import DecodePlan, Piece, make_plan
from ttdecode.ops.flash_decode.plan.merge_slot import merge_slot_order_ok
from ttdecode.ops.flash_decode.program_factory import run_flash_decode

from tests.test_flash_decode_bank_paged import shuffled_table

BFP8 = DataType.bfloat8_b


def _slot_plan(args: dict) -> tuple[DecodePlan, DecodePlan]:
    """(the plan with dedicated areas, the same call with a core's L1 lowered 4 KiB at a time until the plan
    takes the merge slot)."""
    areas = make_plan(**args)
    assert not areas.merge_slot
    limit = areas.l1_bytes_per_core
    while True:
        limit -= 4096
        slot = make_plan(l1_bytes_per_core=limit, **args)
        if slot.merge_slot:
            return areas, slot


def _run(plan: DecodePlan, q, k, v, table: Optional[torch.Tensor], seed: Optional[int] = None):
    out, lse, _ = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=1.0 / math.sqrt(plan.head_dim),
                                   compute=ComputeSettings(), page_table=table, schedule_seed=seed)
    return out, lse


@pytest.mark.parametrize("layout", ["tile", "bank_local"])
def test_the_merge_slot_gives_the_bits_of_the_dedicated_areas(layout: str) -> None:
    # one KV head of 64 q heads (two q tile rows: two messages a partial), 8 pieces per user on a 4x4 grid (two
    # pieces a core); a long user, a short one (children without keys) and a skipped one
    b, nh, s, d, block = 3, 64, 2048, 128, 64
    gen = torch.Generator().manual_seed(7)
    pos = [2047, 700, -1]
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=1, seq_len=s, head_dim=d, kv_dtype=BFP8, cur_pos=pos,
                max_cores_per_head_batch=8, return_lse=True, grid=(4, 4))
    table = None
    if layout == "bank_local":
        num_blocks = b * s // block + 5
        table = shuffled_table(b, s // block, num_blocks, seed=3)
        args.update(kv_pages="key_row", block_size=block, num_blocks=num_blocks)
        kv_shape = (num_blocks, 1, block, d)
    else:
        kv_shape = (b, 1, s, d)
    q = from_torch(torch.randn(1, b, nh, d, generator=gen), DataType.bfloat16)
    k = from_torch(torch.randn(*kv_shape, generator=gen), BFP8)
    v = from_torch(torch.randn(*kv_shape, generator=gen), BFP8)
    areas, slot = _slot_plan(args)
    assert slot.bank_local == (layout == "bank_local") and slot.pieces_per_work == areas.pieces_per_work > 1
    cbs = {cb.name: cb.num_pages for cb in slot.circular_buffers}
    assert cbs["partial_in"] == cbs["partial_out"] == slot.dv_tiles + 2
    want_out, want_lse = _run(areas, q, k, v, table)
    for seed in (None, 11):
        out, lse = _run(slot, q, k, v, table, seed)
        assert torch.equal(out.view(torch.int16), want_out.view(torch.int16)), f"seed {seed}: output bits differ"
        assert torch.equal(lse.view(torch.int32), want_lse.view(torch.int32)), f"seed {seed}: LSE bits differ"


@pytest.mark.parametrize("kv_pages, pieces", [("tile", 16), ("key_row", 12)])
def test_twelve_and_more_partials_of_deepseek_mla_fit_l1_through_the_slot(kv_pages: str, pieces: int) -> None:
    # DeepSeek-V3's MLA decode (B 4, 128 q heads, D 576, Dv 512, a paged pool of 64-key blocks) with 16 cores
    # per head: the dedicated areas would need four whole partials (1152 KiB) beside one to send (288 KiB)
    plan = make_plan(batch=4, num_q_heads=128, num_kv_heads=1, seq_len=4096, head_dim=576, head_dim_v=512,
                     mla=True, kv_dtype=BFP8, cur_pos=None, block_size=64, num_blocks=256,
                     max_cores_per_head_batch=16, k_chunk_size=128, kv_pages=kv_pages)
    cbs = {cb.name: cb for cb in plan.circular_buffers}
    assert plan.merge_slot and plan.pieces_per_work == pieces and plan.rounds == 4
    assert cbs["partial_in"].num_pages == cbs["partial_out"].num_pages == 16 + 2
    assert cbs["partial_in"].total_size == 72 * 1024
    assert plan.l1_bytes_per_core <= L1_BYTES_PER_CORE


def test_a_plan_whose_areas_fit_keeps_them() -> None:
    plan = make_plan(batch=1, num_q_heads=16, num_kv_heads=1, seq_len=32768, head_dim=576, head_dim_v=512, mla=True,
                     kv_dtype=BFP8, cur_pos=[32767])
    assert not plan.merge_slot and plan.pieces_per_work == 16


def _piece(core: CoreCoord, slot: int, user: int, index: int) -> Piece:
    return Piece(user, 0, index, core, slot, 1 if index == 0 else 0, 0 if index == 0 else -1, None, -1, 0)


def test_the_meeting_order_check_finds_two_cores_waiting_on_each_other() -> None:
    # two users of 2 pieces on cores a and b: a runs user 1's leaf, then user 0's root; b runs user 0's leaf,
    # then user 1's root. Each leaf waits for a root its core's partner reaches only after its own leaf: a cycle.
    a, b = CoreCoord(0, 0), CoreCoord(1, 0)
    crossed = {a: (_piece(a, 0, 1, 1), _piece(a, 1, 0, 0)), b: (_piece(b, 0, 0, 1), _piece(b, 1, 1, 0))}
    assert not merge_slot_order_ok(crossed, 2)
    # b runs user 1's root first: user 1's edge, then user 0's, on both cores
    ordered = {a: crossed[a], b: (_piece(b, 0, 1, 0), _piece(b, 1, 0, 1))}
    assert merge_slot_order_ok(ordered, 2)
