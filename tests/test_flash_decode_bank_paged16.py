"""Bank-local paged KV with 16-position blocks: kv_pages "key_row" with block_size 16, on the host runtime.

The pool ``[num_blocks, NKV, 16, D]`` is ttnn's TILE image: one padded key-tile row per (block, KV head), rows
0-15 the block's positions, rows 16-31 padding (NaN here, never read). Page k = block * NKV + h (the row's Dt
tiles) lies in bank k % 12. Key tile t of a user is rows 0-15 of entries 2t and 2t + 1 of its page-table row;
the bank-local split owns it by the bank of its first half, (row[2t] * NKV + h) % 12, so the split is the one
of blocks of 32 over the row's even entries (``design_owned_tiles`` of tests/test_flash_decode_bank_paged.py
on ``row[::2]``); the second half is read from wherever it lies. Checked against the float64 reference with
the project's thresholds (``ttdecode.accuracy``), and per core and bank against the half tiles each reader
fetched.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import pytest
import torch

from ttdecode.accuracy import check_close, check_lse
from ttdecode.api import paged_scaled_dot_product_attention_decode
from ttdecode.config import SDPAProgramConfig
from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.core.split import bank_local_banks, valid_tiles
from ttdecode.core.tensor import TileTensor, from_torch
from ttdecode.ops.flash_decode.plan import DecodePlan, make_plan
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.perf_model.bank_paged import (PagedShape, PieceCompute, paged_work, piece_bank_bytes,
                                            piece_ownership, random_page_table, tile_banks)
from ttdecode.perf_model.counters import work_from_counters

from tests.test_flash_decode import randn_with_outliers
from tests.test_flash_decode_bank_paged import BANKS, assert_user0_ignores_the_rest, design_owned_tiles, reference, run
from tests.test_flash_decode_block16 import CASES, nan_padded
from tests.test_flash_decode_paged import assert_matches, paged_reference, shuffled_table

BF16, BFP8 = DataType.bfloat16, DataType.bfloat8_b
BLOCK = 16


def design_owned16(pos: int, row: Sequence[int], h: int, nkv: int, plan: DecodePlan) -> list[list[int]]:
    """Per piece, the key tiles it owns: the split of blocks of 32 over the row's even entries."""
    return design_owned_tiles(pos, list(row[::2]), h, nkv, 32, plan.pieces_per_work, plan.min_chunk_tiles,
                              plan.key_window, plan.spread_banks)


def half_bytes(kv: DataType) -> int:
    """The bytes of one read of a half tile's codes (rows 0-15; a block float's exponents are a read apart)."""
    exponents = 0 if kv is BF16 else 64
    return (tile_size(kv) - exponents) // 2


def assert_reads_own_halves(plan: DecodePlan, result, pos: Sequence[int], table: torch.Tensor, nkv: int,
                            kv: DataType, mirror: bool = False) -> None:
    """Per core and bank, the half tiles its reader fetched are those of the tiles its pieces own (design_owned16,
    or with `mirror` the plan's own rule, DecodePlan.bank_local_view): half j of owned tile t (entry 2t + j) in
    bank (row[2t + j] * NKV + h) % 12 when it holds an attended key (keys 32 t + 16 j .. 32 t + 16 j + 15 meet
    the window's first key .. cur_pos); D / 32 + Dv / 32 reads each."""
    for core, pieces in plan.core_pieces.items():
        if not pieces:
            continue
        want: Counter = Counter()
        for pc in pieces:
            row, p = table[pc.user].tolist(), pos[pc.user]
            first_key = max(0, p - plan.key_window + 1) if plan.key_window else 0
            owned = (plan.bank_local_view(p, row, pc.kv_head, pc.index).tiles if mirror
                     else design_owned16(p, row, pc.kv_head, nkv, plan)[pc.index])
            for t in owned:
                for j in (0, 1):
                    if 32 * t + 16 * j <= p and 32 * t + 16 * j + 15 >= first_key:
                        want[(row[2 * t + j] * nkv + pc.kv_head) % BANKS] += plan.d_tiles + plan.dv_tiles
        got: Counter = Counter()
        for e in result.counters.kernel(core, KernelKind.READER).events:
            if int(e["op"]) == 1 and int(e["amount"]) == half_bytes(kv):
                got[int(e["peer"])] += int(e["count"])
        assert got == want, f"core ({core.x},{core.y})"


def unreached_as_minus_one(table: torch.Tensor, pos: Sequence[int], window: int = 0) -> torch.Tensor:
    """`table` with every entry past a user's position (a skipped user's: all), and before a sliding `window`,
    set to -1 (vLLM's padding): a half holding no attended key must not be read, nor its entry trusted."""
    out = torch.full_like(table, -1)
    for u, p in enumerate(pos):
        if p >= 0:
            first = max(0, p - window + 1) // BLOCK if window else 0
            out[u, first: p // BLOCK + 1] = table[u, first: p // BLOCK + 1]
    return out


def make_pool(gen: torch.Generator, num_blocks: int, nkv: int, d: int, kv: DataType) -> TileTensor:
    return nan_padded(randn_with_outliers((num_blocks, nkv, BLOCK, d), gen), kv)


def check16(pos: Sequence[int], s: int, kv: DataType, seed: int, what: str, nkv: int = 2, nh: int = 8,
            window: int = 0, **plan_args) -> DecodePlan:
    """A bank-local block-16 run (D 64) of users at `pos` over a random page table (-1 past each user's
    position, and before a sliding `window`): the float64 reference's values, and every reader fetches exactly
    its half tiles (with a window: the plan's rule, whose banks of a -1 entry are the kernel's, in 32 bits)."""
    b, d = len(pos), 64
    gen = torch.Generator().manual_seed(seed)
    max_blocks = s // BLOCK
    num_blocks = b * max_blocks + 7
    table = unreached_as_minus_one(shuffled_table(b, max_blocks, num_blocks, seed=seed), pos, window)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = make_pool(gen, num_blocks, nkv, d, kv), make_pool(gen, num_blocks, nkv, d, kv)
    plan, out, lse, result = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d,
                                      kv_dtype=kv, sliding_window_size=window or None, **plan_args),
                                 q, k, v, pos, table, BLOCK)
    assert plan.block_size == BLOCK and plan.bank_local
    assert_matches(out, lse, *reference(plan, q, k, v, pos, table.clamp(min=0)), pos, what)
    assert_reads_own_halves(plan, result, pos, table, nkv, kv, mirror=bool(window))
    # the cost model reads the same K/V bytes out of the reader's events: half a tile per attended block
    works, _, _ = work_from_counters(plan, result.counters, table)
    halves = sum(p // BLOCK + 1 - (max(0, p - window + 1) // BLOCK if window else 0) for p in pos if p >= 0) * nkv
    assert sum(w.kv_bytes for w in works) == halves * (plan.d_tiles + plan.dv_tiles) * tile_size(kv) // 2
    return plan


BOUNDARIES = [-1, 0, 15, 16, 31, 32, 47, 48, 100, 1007, 1008, 1023]


@pytest.mark.parametrize("kv", [BF16, BFP8], ids=lambda t: t.value)
@pytest.mark.parametrize("spread", [False, True])
def test_block16_bank_local_equals_the_reference_and_reads_its_own_halves(kv: DataType, spread: bool) -> None:
    """Block-boundary positions, a skipped user, a random page table with -1 past each position, NaN padding:
    the reference's values, and per core and bank exactly the half tiles of the pieces' own tiles (own-bank
    pieces and spread pieces)."""
    plan = check16(BOUNDARIES, 1024, kv, 16, f"block 16 key_row {kv.value} spread={spread}", spread_banks=spread)
    assert plan.spread_banks == spread


@pytest.mark.parametrize("window", [40, 17, 100])
def test_block16_windows_read_only_the_attended_halves(window: int) -> None:
    """Sliding windows whose first key falls in either half of a tile, with -1 entries before the window: a
    window's first tile whose first half holds no attended key is owned by the bank of that -1 entry as the
    kernel computes it (core.split.bank_local_view, 32-bit) and only its second half is read; the reference."""
    check16([-1, 16, 31, 47, 48, 100, 700, 1008, 1023], 1024, BFP8, 50 + window, f"block 16 window {window}",
            window=window)


@pytest.mark.parametrize("nkv, pieces", [(2, 1), (2, 3), (2, 6), (2, 12), (8, 3), (8, 6), (1, 16)])
def test_block16_groups_and_sub_pieces_equal_the_reference(nkv: int, pieces: int) -> None:
    """P a divisor of |R_h| (pieces over groups of banks), |R_h| (one per bank) and more (sub-pieces taking
    turns on a bank): the reference's values and each reader's own half tiles."""
    plan = check16([1023, -1, 32, 700, 511], 1024, BFP8, 3 + pieces, f"block 16, NKV {nkv}, {pieces} pieces",
                   nkv=nkv, nh=4 * nkv, key_row_pieces=pieces, max_cores_per_head_batch=max(16, pieces))
    assert plan.pieces_per_work == pieces


def test_plan_views_follow_the_first_halves_banks() -> None:
    """DecodePlan.bank_local_view of a block-16 plan gives every piece the tiles design_owned16 derives from
    the row's even entries, and the pieces cover each attended tile once."""
    nkv, s = 8, 2048
    plan = make_plan(batch=1, num_q_heads=32, num_kv_heads=nkv, seq_len=s, head_dim=128, cur_pos=[0],
                     kv_pages="key_row", block_size=BLOCK, num_blocks=1024)
    gen = torch.Generator().manual_seed(2)
    for trial in range(10):
        row = torch.randperm(1024, generator=gen)[: s // BLOCK].tolist()
        pos = int(torch.randint(0, s, (1,), generator=gen))
        for h in range(nkv):
            got = [list(plan.bank_local_view(pos, row, h, i).tiles) for i in range(plan.pieces_per_work)]
            assert got == design_owned16(pos, row, h, nkv, plan), f"trial {trial}, pos {pos}, head {h}"
            assert sorted(t for tiles in got for t in tiles) == list(range(pos // 32 + 1))


@pytest.mark.parametrize("spread", [False, True])
def test_block16_users_output_ignores_the_rest_of_the_batch(spread: bool) -> None:
    """Batch invariance: user 0's output bits stay the same when the other users' positions and page-table
    rows change (the second run on a perturbed schedule)."""
    b, nh, nkv, s, d = 4, 8, 2, 512, 64
    gen = torch.Generator().manual_seed(31)
    max_blocks, num_blocks = s // BLOCK, b * (s // BLOCK) + 4
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = make_pool(gen, num_blocks, nkv, d, BFP8), make_pool(gen, num_blocks, nkv, d, BFP8)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=BFP8,
                spread_banks=spread)
    assert_user0_ignores_the_rest(args, q, k, v, BLOCK, shuffled_table(b, max_blocks, num_blocks, seed=1),
                                  shuffled_table(b, max_blocks, num_blocks, seed=2), [300, 5, 511, -1],
                                  [300, 496, -1, 47])


def decode(q: torch.Tensor, k: TileTensor, v: TileTensor, table: torch.Tensor, pos: Sequence[int], kv_pages: str,
           **config) -> tuple[torch.Tensor, torch.Tensor]:
    return paged_scaled_dot_product_attention_decode(
        q, k, v, table, cur_pos=list(pos), scale=0.125, return_lse=True, backend="host",
        program_config=SDPAProgramConfig(kv_pages=kv_pages, **config))


@pytest.mark.parametrize("kv", [BF16, BFP8], ids=lambda t: t.value)
def test_one_piece_gives_the_bits_of_the_tile_pool(kv: DataType) -> None:
    """The same pool read as kv_pages "key_row" and as "tile": with one piece of the same chunks per (user, KV
    head) in both plans the output bits are equal; with the planners' own choices (other pieces) both equal
    the reference."""
    pos = [0, 15, 16, 31, 32, 47, 255, 240, -1]
    b, nh, nkv, s, d = len(pos), 8, 2, 256, 64
    gen = torch.Generator().manual_seed(40)
    num_blocks = b * (s // BLOCK)
    table = unreached_as_minus_one(shuffled_table(b, s // BLOCK, num_blocks, seed=40), pos)
    q = randn_with_outliers((1, b, nh, d), gen)
    k, v = make_pool(gen, num_blocks, nkv, d, kv), make_pool(gen, num_blocks, nkv, d, kv)
    # one piece, chunks of 2 tiles, one chunk per softmax update (a 16-bit DST: no softmax blocks) in both plans
    outs = []
    for pages in ("tile", "key_row"):
        plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv, cur_pos=pos,
                         return_lse=True, block_size=BLOCK, num_blocks=num_blocks, kv_pages=pages,
                         max_cores_per_head_batch=1, k_chunk_size=64, fp32_dest_acc_en=False)
        assert (plan.pieces_per_work, plan.fixed_chunk_tiles, plan.softmax_chunks) == (1, 2, 1)
        outs.append(run_flash_decode(plan, q=from_torch(q, BF16), k=k, v=v, cur_pos_source=None, page_table=table,
                                     scale=0.125,
                                     compute=ComputeSettings(fp32_dest_acc_en=False))[:2])
    (out_t, lse_t), (out_k, lse_k) = outs
    assert torch.equal(out_t.view(torch.int16), out_k.view(torch.int16)) and torch.equal(lse_t, lse_k)
    ref, ref_lse = paged_reference(from_torch(q, BF16), k, v, pos, table.clamp(min=0))
    for out, lse in (decode(q, k, v, table, pos, "tile"), decode(q, k, v, table, pos, "key_row")):
        assert_matches(out, lse, ref, ref_lse, pos, f"block 16 {kv.value}")


# ---- the model's pricing ---------------------------------------------------------------------------------


def paired_table(batch: int, entries: int, nkv: int, seed: int) -> np.ndarray:
    """A block-16 table whose pairs (2t, 2t + 1) share a bank for every head: b' = b + 12 / gcd(NKV, 12)."""
    step = BANKS // np.gcd(nkv, BANKS)
    firsts = random_page_table(batch, entries // 2, seed, num_blocks=batch * entries)
    firsts = firsts // step * (2 * step) + firsts % step  # distinct, each with b + step free beside it
    out = np.empty((batch, entries), dtype=np.int64)
    out[:, 0::2], out[:, 1::2] = firsts, firsts + step
    return out


def test_the_model_puts_second_halves_on_their_banks_and_prices_remote_ones_not_bank_local() -> None:
    """perf_model.bank_paged with block 16 (MODEL ESTIMATES): ownership by the first halves' banks (the split
    of blocks of 32 over the even entries); each piece's bytes half in its own banks, the second halves' in
    their true banks; a table whose pairs share a bank keeps every core bank-local, a random one makes the
    cores reading remote second halves not bank-local (an ASSUMED price)."""
    nkv, s = 2, 1024
    shape = PagedShape(batch=2, num_q_heads=8, num_kv_heads=nkv, head_dim=64, block_size=BLOCK,
                       cur_pos=(1023, 520), kv_tile_bytes=1088)
    pc = PieceCompute()
    per_tile = 2 * shape.d_tiles * shape.kv_tile_bytes
    for table, local in ((paired_table(2, s // BLOCK, nkv, 3), True),
                         (random_page_table(2, s // BLOCK, 5, num_blocks=4 * s // BLOCK), False)):
        works, _, _ = paged_work(shape, pc, table)
        # the halves read: a whole tile each, less the second half of 520's last tile (keys 528-543 past it)
        assert sum(w.kv_bytes for w in works) == sum(valid_tiles(p) for p in shape.cur_pos) * nkv * per_tile \
            - nkv * per_tile // 2
        assert sum(float(w.bank_bytes.sum()) for w in works) == sum(w.kv_bytes for w in works)
        assert all(w.bank_local for w in works) == local
        for h in range(nkv):
            row = table[0]
            order = tile_banks(row[0::2], 0, 32, h, nkv, 1, BANKS)
            halves = tile_banks(row[1::2], 0, 32, h, nkv, 1, BANKS)
            reach = bank_local_banks(h, nkv, 1, BANKS)
            own = piece_ownership(np.bincount(order, minlength=BANKS), reach, len(reach), 1, order,
                                  halves=halves)
            total: Counter = Counter()
            for i in range(own.used):
                for b, n in piece_bank_bytes(own, i, per_tile).items():
                    total[b] += n
            want = Counter({int(b): int(n) * per_tile // 2 for b, n in enumerate(np.bincount(order))})
            want.update({int(b): int(n) * per_tile // 2 for b, n in enumerate(np.bincount(halves))})
            assert +total == +want



FEATURES = {name: case for name, case in CASES.items() if case}  # the tile pool's block-16 cases but "plain"


@pytest.mark.parametrize("case", list(FEATURES))
def test_block16_bank_local_features_equal_the_reference(case: str) -> None:
    """Sliding windows (the entries before a window -1: a window's first tile whose first half holds no
    attended key is still owned by that entry's bank, read as an unsigned int, and its half is not read),
    several tokens, a sink, MLA and an attn_mask on a block-16 key_row pool (NaN padding): the reference."""
    c = FEATURES[case]
    tokens, window = c.get("tokens", 1), c.get("sliding_window_size")
    pos = [p for p in [-1, 0, 15, 16, 31, 32, 47, 48, 100, 175, 176, 191] if p < 0 or p >= tokens - 1]
    if c.get("mask"):
        pos = [191] * 3
    b, nh, nkv, s, d = len(pos), 8, 2, 192, 64
    dv = 32 if c.get("mla") else d
    gen = torch.Generator().manual_seed(len(case) + 70)
    q = randn_with_outliers((tokens, b, nh, d), gen)
    num_blocks = b * (s // BLOCK) + 1
    table = shuffled_table(b, s // BLOCK, num_blocks, seed=6)
    span = 0 if not window else window + tokens - 1
    reach = table.clone() if c.get("mask") else torch.full_like(table, -1)
    for u, p in enumerate(pos):
        if p >= 0 and not c.get("mask"):
            first = max(0, p - span + 1) if span else 0
            reach[u, first // BLOCK: p // BLOCK + 1] = table[u, first // BLOCK: p // BLOCK + 1]
    k = make_pool(gen, num_blocks, nkv, d, BFP8)
    v = None if c.get("mla") else make_pool(gen, num_blocks, nkv, dv, BFP8)
    common = dict(scale=1.0 / d ** 0.5, sliding_window_size=window, return_lse=True,
                  head_dim_v=dv if c.get("mla") else None)
    if c.get("sink"):
        common["attention_sink"] = torch.randn(nh, generator=gen)
    if c.get("mask"):
        mask = torch.where(torch.rand(b, 1, nh, s, generator=gen) < 0.3, -float("inf"), 0.0)
        mask[..., -1] = 0.0
        common.update(is_causal=False, attn_mask=mask)
    else:
        common["cur_pos"] = pos
    out, lse = paged_scaled_dot_product_attention_decode(q, k, v, reach, backend="host",
                                                         program_config=SDPAProgramConfig(kv_pages="key_row"),
                                                         **common)
    ref, ref_lse = paged_scaled_dot_product_attention_decode(q, k, v, reach, backend="reference", **common)
    for u, p in enumerate(pos):
        if p >= 0:
            check_close(out[:, u], ref[:, u], f"block 16 key_row {case}: user {u} (cur_pos {p})")
    check_lse(lse, ref_lse, f"block 16 key_row {case}: LSE")
