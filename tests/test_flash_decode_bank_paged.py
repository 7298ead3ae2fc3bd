"""Bank-local paged KV: kv_pages "key_row" with a paged pool, on the host runtime.

The pool ``[num_blocks, NKV, block_size, D]`` holds one DRAM page per key-tile row, page k in bank k % 12.
Each (user, KV head) has up to one piece per bank its tiles can reach; piece i owns every used-th bank of
those holding the user's attended tiles and reads their tiles. The ownership rule is re-derived here from
the page table alone (``design_owned_tiles``), independently of the planner's and the kernels' code, and
checked against the tiles each core's reader actually fetched. Accuracy: the float64 reference with the
project's thresholds (``ttdecode.accuracy``).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Optional, Sequence

import pytest
import torch

from ttdecode.accuracy import check_close, check_lse
from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.core.tensor import TileTensor, from_torch, to_torch
from ttdecode.ops.flash_decode.plan import DecodePlan, PlanError, make_plan
from ttdecode.ops.flash_decode.program_factory import build_program, run_flash_decode
from ttdecode.reference import sdpa_decode_reference
from ttdecode.runtime import run_program

from tests.test_flash_decode import randn_with_outliers

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b
BANKS = 12  # Wormhole's DRAM banks, the plan's default


# ---- the design's rule, re-derived from the page table ----------------------------------------------


def design_owned_tiles(pos: int, row: Sequence[int], h: int, nkv: int, block: int, pieces: int, floor: int,
                       window: int = 0, spread: bool = False) -> list[list[int]]:
    """Per piece, the logical key tiles it owns: tile t of head h is pool page (row[t // bt] * nkv + h) * bt
    + t % bt, in bank page % 12; of the banks holding attended tiles (ascending, nb of them), used =
    min(pieces, max(1, T // floor), nb x the fewest tiles a held bank has). used <= nb: piece i owns the banks
    at places i, i + used, ...; used > nb: with G = gcd(used, nb), the banks at places r, r + G, ... form group
    r, whose readers are the pieces r, r + G, ... below used, dealt the group's tiles (ascending) in turn.
    `spread` (DecodePlan.spread_banks): every attended tile, ascending, dealt to the pieces below used in turn.
    A piece's tiles ascend."""
    if pos < 0:
        return [[] for _ in range(pieces)]
    bt = block // 32
    first = max(0, pos - window + 1) // 32 if window else 0
    tiles = range(first, pos // 32 + 1)
    bank_of = {t: ((int(row[t // bt]) * nkv + h) * bt + t % bt) % BANKS for t in tiles}
    held = sorted(set(bank_of.values()))
    per_bank = {b: [t for t in tiles if bank_of[t] == b] for b in held}
    used = min(pieces, max(1, len(tiles) // floor), len(held) * min(len(v) for v in per_bank.values()))
    if spread:
        return [list(tiles)[i::used] if i < used else [] for i in range(pieces)]
    if used <= len(held):
        return [[t for t in tiles if i < used and bank_of[t] in held[i::used]] for i in range(pieces)]
    owned: list[list[int]] = [[] for _ in range(pieces)]
    groups = math.gcd(used, len(held))
    for r in range(groups):
        readers = list(range(r, used, groups))
        group = [t for t in tiles if bank_of[t] in held[r::groups]]
        for o, t in enumerate(group):
            owned[readers[o % len(readers)]].append(t)
    return owned


def shuffled_table(batch: int, max_blocks: int, num_blocks: int, seed: int) -> torch.Tensor:
    """Distinct random block ids [B, max_blocks] out of num_blocks."""
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed))
    return perm[: batch * max_blocks].reshape(batch, max_blocks).to(torch.int32)


def sequential_table(batch: int, max_blocks: int) -> torch.Tensor:
    """User b's blocks are b * max_blocks .. (b + 1) * max_blocks - 1, in order."""
    return torch.arange(batch * max_blocks, dtype=torch.int32).reshape(batch, max_blocks)


def pool(gen: torch.Generator, num_blocks: int, nkv: int, block: int, d: int, kv: DataType) -> TileTensor:
    return from_torch(randn_with_outliers((num_blocks, nkv, block, d), gen), kv)


def run(plan_args: dict, q: TileTensor, k: TileTensor, v: Optional[TileTensor], pos: Sequence[int],
        table: torch.Tensor, block: int, *, sink: Optional[torch.Tensor] = None, mask: Optional[torch.Tensor] = None,
        pos_as_tensor: bool = False, schedule_seed: Optional[int] = None, exp_approx: bool = False):
    """Plan (bank-local) and run one program (`schedule_seed`: the host runtime's perturbed schedule; `exp_approx`:
    the softmax's approximate exp, planned and run); returns (plan, out, lse, RunResult)."""
    plan = make_plan(cur_pos=None if pos_as_tensor else list(pos), return_lse=True, kv_pages="key_row",
                     block_size=block, num_blocks=k.shape[0], exp_approx=exp_approx, **plan_args)
    assert plan.bank_local
    source = torch.tensor(list(pos), dtype=torch.int32) if pos_as_tensor else None
    out, lse, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=source, page_table=table,
                                        scale=1.0 / math.sqrt(plan.head_dim), compute=ComputeSettings(),
                                        attention_sink=sink, attn_mask=mask, schedule_seed=schedule_seed,
                                        exp_approx=exp_approx)
    return plan, out, lse, result


def reference(plan: DecodePlan, q, k, v, pos, table, *, sink=None, mask=None):
    return sdpa_decode_reference(
        to_torch(q).double(), to_torch(k).double(), None if v is None else to_torch(v).double(),
        cur_pos=list(pos) if plan.is_causal else None, page_table=table, return_lse=True,
        scale=1.0 / math.sqrt(plan.head_dim), sliding_window_size=plan.sliding_window_size or None,
        head_dim_v=plan.head_dim_v, is_causal=plan.is_causal, attn_mask=None if mask is None else mask.double(),
        attention_sink=None if sink is None else sink.to(torch.bfloat16).double())


def assert_matches(out, lse, ref, ref_lse, pos: Sequence[int], what: str) -> None:
    for u, p in enumerate(pos):
        if p < 0:
            assert torch.count_nonzero(out[:, u]) == 0, f"{what}: skipped user {u} must output zeros"
        else:
            check_close(out[:, u], ref[:, u], f"{what}: user {u} (cur_pos {p})")
            check_lse(lse[:, u], ref_lse[:, u], f"{what}: user {u} LSE")


# ---- which banks a piece reads ----------------------------------------------------------------------


def bank_local_choices(reach: int, cap: int) -> set[int]:
    """The piece counts the design allows a (user, KV head) of |R_h| = `reach` banks: s = 1 to 4 readers
    on each bank (at most `cap`), or a divisor of `reach` (each piece over reach / P banks)."""
    return {min(cap, s * reach) for s in (1, 2, 3, 4)} | {p for p in range(1, min(reach, cap + 1)) if reach % p == 0}


@pytest.mark.parametrize("nkv, block, reach", [(8, 32, 3), (8, 64, 6), (8, 128, 12), (1, 32, 12), (2, 32, 6)])
def test_a_kv_head_gets_readers_per_bank_or_pieces_over_groups_of_its_banks(nkv: int, block: int, reach: int) -> None:
    """|R_h| from the design (Llama-8B's 8 KV heads: 3 banks with blocks of 32, 6 of 64, 12 of 128; one KV
    head: 12); the plan gives each (user, KV head) 1 to 4 pieces per bank (at most max_cores_per_head_batch),
    or a divisor of |R_h| (pieces over groups of banks), its pieces placed near bank R_h[i % |R_h|];
    key_row_pieces fixes them."""
    plan = make_plan(batch=2, num_q_heads=4 * nkv, num_kv_heads=nkv, seq_len=2048, head_dim=64, cur_pos=[100, 2000],
                     kv_pages="key_row", block_size=block, num_blocks=64, max_cores_per_head_batch=16)
    assert plan.pieces_per_work in bank_local_choices(reach, 16)
    one = make_plan(batch=2, num_q_heads=4 * nkv, num_kv_heads=nkv, seq_len=2048, head_dim=64, cur_pos=[100, 2000],
                    kv_pages="key_row", block_size=block, num_blocks=64, key_row_pieces=reach)
    assert one.pieces_per_work == reach
    fewer = make_plan(batch=1, num_q_heads=4 * nkv, num_kv_heads=nkv, seq_len=2048, head_dim=64, cur_pos=[100],
                      kv_pages="key_row", block_size=block, num_blocks=64, key_row_pieces=2)
    assert fewer.pieces_per_work == 2


def check_bank_local_reads(pos: Sequence[int], s: int, block: int, kv: DataType, seed: int, spare_blocks: int,
                           what: str, **plan_args) -> DecodePlan:
    """A bank-local run (8 q heads, 2 KV heads, D 64) of users at `pos` over a random page table: the float64
    reference's values, and every reader fetches exactly the tiles of the banks its pieces own."""
    b, nh, nkv, d = len(pos), 8, 2, 64
    gen = torch.Generator().manual_seed(seed)
    max_blocks, num_blocks = s // block, b * (s // block) + spare_blocks
    table = shuffled_table(b, max_blocks, num_blocks, seed=seed)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = pool(gen, num_blocks, nkv, block, d, kv), pool(gen, num_blocks, nkv, block, d, kv)
    plan, out, lse, result = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d,
                                      kv_dtype=kv, **plan_args), q, k, v, pos, table, block)
    assert_matches(out, lse, *reference(plan, q, k, v, pos, table), pos, what)
    assert_reads_own_tiles(plan, result, pos, table, nkv, block, kv)
    return plan


@pytest.mark.parametrize("pieces", [1, 2, 3])
def test_fewer_pieces_than_banks_each_read_a_group_of_banks_exactly(pieces: int) -> None:
    """P a divisor of |R_h| (2 KV heads, blocks of 32: 6 banks a head; P 1, 2, 3: pieces over 6, 3, 2 banks)
    on a long context with a random page table, -1 users and block-boundary positions: the float64
    reference's values, and every reader fetches exactly the tiles of the banks its pieces own."""
    plan = check_bank_local_reads([2047, -1, 32, 1535], 2048, 32, BFP8, 9, 5,
                                  f"bank-local, {pieces} pieces over 6 banks", key_row_pieces=pieces)
    assert plan.pieces_per_work == pieces


def test_each_reader_fetches_exactly_the_tiles_its_pieces_own() -> None:
    """Per core and bank, the K/V tiles the reader fetched equal the tiles of the banks its pieces own
    (design_owned_tiles), with a random page table, -1 users and block-boundary positions."""
    check_bank_local_reads([-1, 63, 64, 0, 1023, 700], 1024, 64, BF16, 5, 9, "bank-local bf16")


def test_plan_views_follow_the_design_rule() -> None:
    """DecodePlan.bank_local_view gives every piece the tiles design_owned_tiles derives, and the pieces with
    tiles are a prefix that covers each attended tile once."""
    nkv, block, s = 8, 32, 4096
    plan = make_plan(batch=1, num_q_heads=32, num_kv_heads=nkv, seq_len=s, head_dim=128, cur_pos=[0],
                     kv_pages="key_row", block_size=block, num_blocks=512, sliding_window_size=1000)
    gen = torch.Generator().manual_seed(1)
    for trial in range(20):
        row = torch.randperm(512, generator=gen)[: s // block].tolist()
        pos = int(torch.randint(0, s, (1,), generator=gen))
        for h in range(nkv):
            want = design_owned_tiles(pos, row, h, nkv, block, plan.pieces_per_work, plan.min_chunk_tiles, 1000)
            got = [list(plan.bank_local_view(pos, row, h, i).tiles) for i in range(plan.pieces_per_work)]
            assert got == want, f"trial {trial}, pos {pos}, head {h}"
            with_tiles = [i for i, tiles in enumerate(got) if tiles]
            assert with_tiles == list(range(len(with_tiles)))
            assert sorted(t for tiles in got for t in tiles) == list(range(max(0, pos - 999) // 32, pos // 32 + 1))


# ---- against the reference --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kv, block, nh, nkv, table_kind, pos_as_tensor",
    [
        (BFP8, 32, 8, 2, "shuffled", False),   # GQA, blocks of one tile
        (BF16, 64, 4, 4, "sequential", True),  # MHA, positions read on the device
        (BFP4, 128, 8, 1, "shuffled", False),  # MQA: 12 pieces
        (BFP8, 512, 16, 2, "shuffled", False),  # a large block
    ],
)
def test_bank_local_pool_equals_the_reference(kv, block, nh, nkv, table_kind, pos_as_tensor) -> None:
    b, s, d = 7, 1024, 64
    pos = [-1, 0, 31, 32, block - 1, block, s - 1]
    gen = torch.Generator().manual_seed(block + nkv)
    max_blocks = s // block
    num_blocks = b * max_blocks + 3
    table = (shuffled_table(b, max_blocks, num_blocks, seed=block) if table_kind == "shuffled"
             else sequential_table(b, max_blocks))
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = pool(gen, num_blocks, nkv, block, d, kv), pool(gen, num_blocks, nkv, block, d, kv)
    plan, out, lse, _ = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv),
                            q, k, v, pos, table, block, pos_as_tensor=pos_as_tensor)
    assert_matches(out, lse, *reference(plan, q, k, v, pos, table), pos, f"bank-local {kv.value}, blocks of {block}")


@pytest.mark.parametrize("feature", ["multi_token", "window_sink", "multi_token_window", "mla", "attn_mask",
                                     "fixed_chunk"])
def test_bank_local_features_equal_the_reference(feature: str) -> None:
    """Multi-token decode (3 tokens), a sliding window with an attention sink, both (split floor 1: every piece
    with keys, masked tiles at both ends of several pieces), MLA (V = K[..., :Dv]), a non-causal attn_mask
    and fixed chunks, each over a shuffled bank-local pool."""
    b, nh, nkv, s, d, block, kv = 4, 8, 2, 512, 64, 64, BFP8
    gen = torch.Generator().manual_seed(7)
    tokens = 3 if feature.startswith("multi_token") else 1
    pos = [-1, 2, 64, 511] if tokens > 1 else [-1, 0, 64, 511]
    max_blocks, num_blocks = s // block, b * (s // block) + 2
    table = shuffled_table(b, max_blocks, num_blocks, seed=7)
    dv = 32 if feature == "mla" else d
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, head_dim_v=dv, kv_dtype=kv,
                num_tokens=tokens, mla=feature == "mla")
    sink = mask = None
    if feature == "window_sink":
        args.update(sliding_window_size=100, attention_sink=True)
        sink = 3 * torch.randn(nh, generator=gen)
    if feature == "multi_token_window":
        args.update(sliding_window_size=130, min_chunk_tiles=1)
    if feature == "attn_mask":
        args.update(is_causal=False, attn_mask_batch=b)
        keep = torch.rand(b, 1, nh, s, generator=gen) >= 0.3
        mask = torch.where(keep, 2 * torch.randn(b, 1, nh, s, generator=gen), float("-inf")).to(torch.bfloat16).float()
        pos = [s - 1] * b
    if feature == "fixed_chunk":
        args.update(k_chunk_size=64)
    q = from_torch(randn_with_outliers((tokens, b, nh, d), gen), BF16)
    k = pool(gen, num_blocks, nkv, block, d, kv)
    v = None if feature == "mla" else pool(gen, num_blocks, nkv, block, dv, kv)
    plan, out, lse, _ = run(args, q, k, v, pos if args.get("is_causal", True) else pos, table, block, sink=sink,
                            mask=mask)
    ref, ref_lse = reference(plan, q, k, v, pos, table, sink=sink, mask=mask)
    assert_matches(out, lse, ref, ref_lse, pos, f"bank-local {feature}")


@pytest.mark.parametrize("spread", [False, True])
def test_a_users_output_ignores_the_other_users_positions_and_page_tables(spread: bool) -> None:
    """Batch invariance: user 0's output bits stay the same when the other users' positions and page-table
    rows change (the second run on a perturbed schedule of the cores' threads), with pieces keeping to their
    banks and with spread pieces (DecodePlan.spread_banks)."""
    b, nh, nkv, s, d, block = 4, 8, 2, 1024, 64, 64
    gen = torch.Generator().manual_seed(3)
    max_blocks, num_blocks = s // block, b * (s // block) + 4
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = pool(gen, num_blocks, nkv, block, d, BFP8), pool(gen, num_blocks, nkv, block, d, BFP8)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=BFP8,
                spread_banks=spread)
    assert_user0_ignores_the_rest(args, q, k, v, block, shuffled_table(b, max_blocks, num_blocks, seed=1),
                                  shuffled_table(b, max_blocks, num_blocks, seed=2), [700, 5, 1023, -1],
                                  [700, 1000, -1, 64])


def assert_user0_ignores_the_rest(args: dict, q, k, v, block: int, first: torch.Tensor, second: torch.Tensor,
                                  pos_a: Sequence[int], pos_b: Sequence[int], **run_args) -> None:
    """Batch invariance: user 0 (the same position, its row of `first` in both tables) gets the same output and
    LSE bits when the other users' positions (`pos_a`, then `pos_b`) and page-table rows (`first`, then `second`)
    change, the second run on a perturbed schedule of the cores' threads."""
    second[0] = first[0]
    _, out_a, lse_a, _ = run(args, q, k, v, pos_a, first, block, **run_args)
    _, out_b, lse_b, _ = run(args, q, k, v, pos_b, second, block, schedule_seed=11, **run_args)
    assert torch.equal(out_a[:, 0], out_b[:, 0]) and torch.equal(lse_a[:, 0], lse_b[:, 0])


def test_a_page_id_outside_the_pool_skips_only_its_user() -> None:
    """The reader's guard (positions read on the device, so the host cannot check the table): a user whose
    attended blocks name a block outside the pool outputs zeros (LSE -inf); the other users are unaffected."""
    b, nh, nkv, s, d, block = 3, 8, 2, 512, 64, 64
    gen = torch.Generator().manual_seed(4)
    max_blocks, num_blocks = s // block, b * (s // block)
    table = shuffled_table(b, max_blocks, num_blocks, seed=4)
    table[1, 2] = num_blocks + 5  # attended by user 1 (cur_pos 300)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = pool(gen, num_blocks, nkv, block, d, BFP8), pool(gen, num_blocks, nkv, block, d, BFP8)
    pos = [511, 300, 100]
    plan, out, lse, _ = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=BFP8),
                            q, k, v, pos, table, block, pos_as_tensor=True)  # positions unknown to the host
    assert torch.count_nonzero(out[:, 1]) == 0 and torch.isneginf(lse[:, 1]).all()
    ok = [0, 2]
    ref, ref_lse = reference(plan, q, k, v, [511, -1, 100], table.clamp(max=num_blocks - 1))
    for u in ok:
        check_close(out[:, u], ref[:, u], f"user {u}")
        check_lse(lse[:, u], ref_lse[:, u], f"user {u} LSE")


# ---- several readers per bank (sub-pieces) --------------------------------------------------------------


def fetched_per_bank(result, core, tile_bytes: int) -> Counter:
    """K/V tiles the core's reader fetched, per DRAM bank (read_dram events, `count` repeats)."""
    got: Counter = Counter()
    for e in result.counters.kernel(core, KernelKind.READER).events:
        if int(e["op"]) == 1 and int(e["amount"]) == tile_bytes:
            got[int(e["peer"])] += int(e["count"])
    return got


def assert_reads_own_tiles(plan: DecodePlan, result, pos: Sequence[int], table: torch.Tensor, nkv: int,
                           block: int, kv: DataType) -> None:
    """Per core and bank, the K/V tiles its reader fetched are those its pieces own by design_owned_tiles,
    D / 32 + Dv / 32 tiles fetched per owned key tile (key tile t of a user: page (block * NKV + head) x
    block / 32 + t % (block / 32) of its pool, block = table[t // (block / 32)])."""
    span, bt = plan.key_window, block // 32
    for core, pieces in plan.core_pieces.items():
        if not pieces:  # a core of the grid with no piece runs no reader
            continue
        want: Counter = Counter()
        for pc in pieces:
            owned = design_owned_tiles(pos[pc.user], table[pc.user].tolist(), pc.kv_head, nkv, block,
                                       plan.pieces_per_work, plan.min_chunk_tiles, span,
                                       plan.spread_banks)[pc.index]
            for t in owned:
                page = (int(table[pc.user, t // bt]) * nkv + pc.kv_head) * bt + t % bt
                want[page % BANKS] += plan.d_tiles + plan.dv_tiles
        assert fetched_per_bank(result, core, tile_size(kv)) == want, f"core ({core.x},{core.y})"


@pytest.mark.parametrize("nkv, pieces", [(8, 6), (8, 12), (8, 5), (8, 7), (1, 16), (1, 18)])
def test_sub_piece_views_follow_the_design_rule(nkv: int, pieces: int) -> None:
    """P = 2 |R_h| and 4 |R_h| (Llama-8B's 8 KV heads, blocks of 32: 6 and 12 pieces over 3 banks), and P not a
    multiple of |R_h| (5 and 7 over 3 banks; 16 and 18 over a one-KV-head shard's 12: groups of banks): every
    piece's tiles are design_owned_tiles', the pieces with tiles a prefix covering each attended tile once,
    under random page tables, with and without a sliding window, at any split floor."""
    block, s = 32, 4096
    gen = torch.Generator().manual_seed(pieces)
    for window, floor in ((0, 1), (1000, 1), (0, 8)):
        plan = make_plan(batch=1, num_q_heads=32 // (8 // nkv), num_kv_heads=nkv, seq_len=s, head_dim=128,
                         cur_pos=[0], kv_pages="key_row", block_size=block, num_blocks=512,
                         sliding_window_size=window, key_row_pieces=pieces, min_chunk_tiles=floor,
                         max_cores_per_head_batch=None, spread_banks=False)
        assert plan.pieces_per_work == pieces
        for trial in range(12):
            row = torch.randperm(512, generator=gen)[: s // block].tolist()
            pos = int(torch.randint(0, s, (1,), generator=gen))
            for h in range(nkv):
                want = design_owned_tiles(pos, row, h, nkv, block, plan.pieces_per_work, plan.min_chunk_tiles, window)
                got = [list(plan.bank_local_view(pos, row, h, i).tiles) for i in range(plan.pieces_per_work)]
                assert got == want, f"window {window}, trial {trial}, pos {pos}, head {h}"
                with_tiles = [i for i, tiles in enumerate(got) if tiles]
                assert with_tiles == list(range(len(with_tiles)))
                first = max(0, pos - window + 1) // 32 if window else 0
                assert sorted(t for tiles in got for t in tiles) == list(range(first, pos // 32 + 1))


def test_a_bank_with_fewer_tiles_than_its_readers_caps_the_pieces_with_keys() -> None:
    """12 pieces over 3 banks, 5 attended tiles, one bank holding a single tile: used = 3 banks x 1 tile = 3,
    one piece per bank (no reader of a bank without a tile of its own)."""
    nkv, block = 8, 32
    plan = make_plan(batch=1, num_q_heads=32, num_kv_heads=nkv, seq_len=1024, head_dim=64, cur_pos=[0],
                     kv_pages="key_row", block_size=block, num_blocks=64, key_row_pieces=12, min_chunk_tiles=1)
    # head 0's tile t sits in bank (row[t] * 8) % 12: blocks 0, 3, 6 -> bank 0; 1 -> 8; 2 -> 4
    row = [0, 3, 0 + 6, 1, 2] + list(range(9, 9 + 27))
    views = [plan.bank_local_view(4 * 32 + 5, row, 0, i) for i in range(12)]
    assert {v.used for v in views} == {3}
    assert [v.tiles for v in views[:3]] == [(0, 1, 2), (4,), (3,)]
    assert all(v.empty for v in views[3:])


SUB_CASES = [
    (2, "causal"),              # P = 6: two readers per bank
    (4, "causal"),              # P = 12: four readers per bank
    (4, "multi_token_window"),  # 3 tokens, a window: masked tiles at both ends land in sub-pieces
    (2, "window_sink"),
]


@pytest.mark.parametrize("per_bank, feature", SUB_CASES)
def test_sub_pieces_fetch_their_own_tiles_and_equal_the_reference(per_bank: int, feature: str) -> None:
    """Host runtime, Llama-8B-like heads (8 KV heads, blocks of 32: |R_h| = 3) with key_row_pieces = per_bank x 3
    and a split floor of 1: the output equals the float64 reference, and per core and bank the K/V tiles its
    reader fetched are those of the tiles its pieces own by design_owned_tiles (re-derived from the page table
    here, counted per core per bank)."""
    b, nh, nkv, s, d, block, kv = 4, 8, 8, 512, 64, 32, BFP8
    gen = torch.Generator().manual_seed(10 * per_bank + len(feature))
    tokens = 3 if feature.startswith("multi_token") else 1
    pos = [-1, 2, 333, 511] if tokens > 1 else [-1, 0, 333, 511]
    max_blocks, num_blocks = s // block, b * (s // block) + 5
    table = shuffled_table(b, max_blocks, num_blocks, seed=per_bank)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv, num_tokens=tokens,
                key_row_pieces=3 * per_bank, min_chunk_tiles=1)
    sink = None
    if feature == "multi_token_window":
        args.update(sliding_window_size=130)
    if feature == "window_sink":
        args.update(sliding_window_size=200, attention_sink=True)
        sink = 3 * torch.randn(nh, generator=gen)
    q = from_torch(randn_with_outliers((tokens, b, nh, d), gen), BF16)
    k, v = pool(gen, num_blocks, nkv, block, d, kv), pool(gen, num_blocks, nkv, block, d, kv)
    plan, out, lse, result = run(args, q, k, v, pos, table, block, sink=sink)
    assert plan.pieces_per_work == 3 * per_bank
    assert_matches(out, lse, *reference(plan, q, k, v, pos, table, sink=sink), pos, f"sub-pieces {feature}")
    used = max(plan.bank_local_view(pos[u], table[u].tolist(), h, 0).used for u in range(b) for h in range(nkv))
    assert used > 3, "the case must put several readers on a bank"
    assert_reads_own_tiles(plan, result, pos, table, nkv, block, kv)


def run_five_users(nkv: int, pieces: int, feature: str, what: str, sequential: bool = False,
                   **plan_args) -> tuple[DecodePlan, list[int], torch.Tensor]:
    """Host runtime, 5 users (a skipped one, positions at a block's last and first key, a short context) of 2K
    keys, blocks of 32, bfloat8_b, `pieces` per (user, KV head), a random page table (`sequential`: in order),
    feature "window" a sliding window of 1700: the float64 reference's values, and per core and bank the K/V
    tiles its reader fetched are design_owned_tiles'. Returns (plan, positions, table)."""
    b, nh, s, d, block, kv = 5, 8, 2048, 64, 32, BFP8
    gen = torch.Generator().manual_seed(pieces + nkv)
    pos = [-1, 2047, 1023, 1024, 63]
    max_blocks, num_blocks = s // block, b * (s // block) + 7
    table = sequential_table(b, max_blocks) if sequential else shuffled_table(b, max_blocks, num_blocks, seed=pieces)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv,
                key_row_pieces=pieces, min_chunk_tiles=1, max_cores_per_head_batch=None, **plan_args)
    if feature == "window":
        args.update(sliding_window_size=1700)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = pool(gen, num_blocks, nkv, block, d, kv), pool(gen, num_blocks, nkv, block, d, kv)
    plan, out, lse, result = run(args, q, k, v, pos, table, block)
    assert plan.pieces_per_work == pieces
    assert_matches(out, lse, *reference(plan, q, k, v, pos, table), pos, what)
    assert_reads_own_tiles(plan, result, pos, table, nkv, block, kv)
    return plan, pos, table


GROUP_CASES = [
    (1, 16, "causal"),  # a one-KV-head shard: 16 pieces over 12 banks, 4 groups of 3 banks, 4 readers each
    (1, 16, "window"),  # masked tiles at both ends land in multi-bank sub-pieces
    (8, 5, "causal"),   # 5 pieces over 3 banks: one group, 5 readers
]


@pytest.mark.parametrize("nkv, pieces, feature", GROUP_CASES)
def test_groups_of_banks_fetch_their_own_tiles_and_equal_the_reference(nkv: int, pieces: int, feature: str) -> None:
    """Host runtime, P not a multiple of |R_h| (G = gcd(used, |L|) groups of banks, every piece a sub-piece of
    its group): the output equals the float64 reference for a skipped user, positions at a block's last and
    first key and a short context, under a random page table; per core and bank the K/V tiles its reader
    fetched are those of design_owned_tiles."""
    # with a window, a sequential table: a window's 50-odd tiles give every bank 2 or more
    plan, pos, table = run_five_users(nkv, pieces, feature, f"groups of banks {feature}",
                                      sequential=feature == "window", spread_banks=False)
    reach = 12 if nkv == 1 else 3
    used = [plan.bank_local_view(pos[u], table[u].tolist(), 0, 0).used for u in range(len(pos))]
    assert any(n > reach and n % reach for n in used), f"the case must put pieces over groups of banks: {used}"


SPREAD_CASES = [
    (1, 16, "causal"),  # a one-KV-head shard: 16 pieces taking turns over 12 banks
    (1, 16, "window"),  # masked tiles at both ends, dealt like any other
    (8, 5, "causal"),   # 5 pieces over 3 banks
    (2, 3, "causal"),   # fewer pieces than banks (6 a head): each still takes every 3rd tile
]


@pytest.mark.parametrize("nkv, pieces, feature", SPREAD_CASES)
def test_spread_pieces_take_every_used_th_tile_and_equal_the_reference(nkv: int, pieces: int, feature: str) -> None:
    """Host runtime, spread_banks (the pieces take turns over every bank held): the output equals the float64
    reference for a skipped user, positions at a block's last and first key and a short context, under a random
    page table; every piece holds the same tile count to one; per core and bank the K/V tiles its reader
    fetched are those of design_owned_tiles(spread)."""
    plan, pos, table = run_five_users(nkv, pieces, feature, f"spread banks {feature}", spread_banks=True)
    assert plan.spread_banks
    for u in range(len(pos)):
        for h in range(nkv):
            counts = [plan.bank_local_view(pos[u], table[u].tolist(), h, i).num_tiles for i in range(pieces)]
            used = [n for n in counts if n]
            assert not used or max(used) - min(used) <= 1, f"user {u} head {h}: {counts}"


def test_spread_banks_needs_a_bank_local_plan() -> None:
    with pytest.raises(PlanError, match="spread_banks: True needs a bank-local plan"):
        make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=2048, head_dim=64, block_size=32, num_blocks=64,
                  spread_banks=True)


def test_the_planner_spreads_only_where_the_compute_binds() -> None:
    """The Llama-70B T3K shard at B 1 and 16K (one KV head, 16 pieces of 32 key tiles: bound by its compute and
    tree) takes spread pieces in blocks of 4 chunks (2 price within a fraction of a percent); at 32K (64 key tiles a piece) one block a piece pays more
    and its pieces keep to their banks (the spread is weighed with the block); the Llama-8B N150 shape at B 1 and
    32K (bound by the DRAM) keeps each piece to its banks."""
    def plan(nh: int, nkv: int, seq: int = 32768) -> DecodePlan:
        return make_plan(batch=1, num_q_heads=nh, num_kv_heads=nkv, seq_len=seq, head_dim=128, cur_pos=[seq - 1],
                         kv_pages="key_row", block_size=32, num_blocks=2048 * nkv, math_fidelity="HiFi2")
    assert (plan(8, 1, 16384).spread_banks, plan(8, 1, 16384).softmax_chunks) == (True, 4)
    assert (plan(8, 1).spread_banks, plan(8, 1).softmax_chunks) == (False, 8)
    assert not plan(32, 8).spread_banks


@pytest.mark.parametrize("pieces", [16, 6])
def test_the_first_piece_reads_its_first_chunks_before_the_pass_ends(pieces: int) -> None:
    """Long contexts on a sequential table (every bank of R_h settles within the first counted blocks): the
    reader of every core whose first piece holds a whole chunk requests that piece's first chunk, or two,
    before it pushes the views (the rest of the row is counted while they land); the output equals the
    reference."""
    b, nh, nkv, s, d, block, kv = 3, 8, 1, 4096, 64, 32, BFP8
    gen = torch.Generator().manual_seed(21)
    pos = [4095, 2500, 3333]
    max_blocks = s // block
    table = sequential_table(b, max_blocks)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv,
                key_row_pieces=pieces, max_cores_per_head_batch=None)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = pool(gen, b * max_blocks, nkv, block, d, kv), pool(gen, b * max_blocks, nkv, block, d, kv)
    plan, out, lse, result = run(args, q, k, v, pos, table, block)
    assert_matches(out, lse, *reference(plan, q, k, v, pos, table), pos, "early chunks")
    tile = tile_size(kv)
    early = whole = twice = 0
    for core, placed in plan.core_pieces.items():
        if not placed:
            continue
        first = placed[0]
        view = plan.bank_local_view(pos[first.user], table[first.user].tolist(), first.kv_head, first.index)
        before = 0
        for e in result.counters.kernel(core, KernelKind.READER).events:
            if int(e["op"]) == 12 and int(e["peer"]) == 26:  # cb_push of the views page (cb_view_compute)
                break
            if int(e["op"]) == 1 and int(e["amount"]) == tile:
                before += int(e["count"])
        chunks = min(2, view.num_tiles // view.chunk_tiles)
        assert before == chunks * view.chunk_tiles * (plan.d_tiles + plan.dv_tiles), f"core ({core.x},{core.y})"
        early += before > 0
        whole += chunks > 0
        twice += chunks == 2
    assert early == whole > 0
    assert pieces == 16 or twice > 0, "6 pieces of 20-odd tiles: two chunks ahead"


@pytest.mark.parametrize("schedule_seed", [None, 7])
def test_later_users_views_are_counted_while_the_pieces_before_them_read(schedule_seed) -> None:
    """Llama-8B-like heads (8 KV heads, blocks of 32: 3 pieces each) for 6 users on a random page table: each
    core holds pieces of several users; the pass counts their rows only until each split settles, and the
    rest while the piece before reads (the row requested after the views go). The output equals the
    reference (a skipped user, positions at a block's last and first key), on a perturbed schedule too."""
    b, nh, nkv, s, d, block, kv = 6, 16, 8, 2048, 64, 32, BFP8
    gen = torch.Generator().manual_seed(3)
    pos = [2047, -1, 1535, 1536, 2000, 1900]
    max_blocks, num_blocks = s // block, b * (s // block) + 9
    table = shuffled_table(b, max_blocks, num_blocks, seed=4)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv, key_row_pieces=3,
                min_chunk_tiles=1)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = pool(gen, num_blocks, nkv, block, d, kv), pool(gen, num_blocks, nkv, block, d, kv)
    plan, out, lse, result = run(args, q, k, v, pos, table, block, schedule_seed=schedule_seed)
    assert_matches(out, lse, *reference(plan, q, k, v, pos, table), pos, "counted while reading")
    row_bytes = 4 * max_blocks
    later = 0
    for core in plan.core_pieces:
        pushed = False
        for e in result.counters.kernel(core, KernelKind.READER).events:
            if int(e["op"]) == 12 and int(e["peer"]) == 26:
                pushed = True
            elif pushed and int(e["op"]) == 1 and int(e["amount"]) == row_bytes:
                later += 1
                break
    assert later >= 16, f"cores counting a later user's row after the views go: {later}"


def test_sub_pieces_keep_a_users_output_whatever_the_other_users() -> None:
    """Batch invariance with 4 readers per bank: user 0's output bits stay the same when the other users'
    positions and page-table rows change (the second run on a perturbed schedule)."""
    b, nh, nkv, s, d, block = 3, 8, 8, 512, 64, 32
    gen = torch.Generator().manual_seed(13)
    max_blocks, num_blocks = s // block, b * (s // block) + 4
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k, v = pool(gen, num_blocks, nkv, block, d, BFP8), pool(gen, num_blocks, nkv, block, d, BFP8)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=BFP8, key_row_pieces=12,
                min_chunk_tiles=1)
    first = shuffled_table(b, max_blocks, num_blocks, seed=1)
    second = shuffled_table(b, max_blocks, num_blocks, seed=2)
    second[0] = first[0]
    _, out_a, lse_a, _ = run(args, q, k, v, [400, 5, -1], first, block)
    _, out_b, lse_b, _ = run(args, q, k, v, [400, 511, 64], second, block, schedule_seed=11)
    assert torch.equal(out_a[:, 0], out_b[:, 0]) and torch.equal(lse_a[:, 0], lse_b[:, 0])


def test_the_plan_prices_readers_per_bank_from_the_config_shape_and_batch_size() -> None:
    """Without key_row_pieces the planner takes s = 1 to 4 readers per bank (P = s |R_h|) or a divisor of
    |R_h|, the P the model prices shortest (pricing.bank_local_step_cycles, a sequential page table at the
    cache's length): Llama-8B's 3 banks per KV head leave one user compute-bound at 32K (more readers), a
    batch of 32 at 4K bank-bound (its 256 (user, KV head)s fill the grid: at most one reader a bank). The
    choice never depends on the positions (batch invariance)."""
    llama = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, kv_dtype=BFP8, kv_pages="key_row", block_size=32)
    one = make_plan(batch=1, seq_len=32768, cur_pos=[32767], num_blocks=2048, **llama)
    assert one.pieces_per_work > 3 and one.pieces_per_work % 3 == 0
    many = make_plan(batch=32, seq_len=4096, cur_pos=[4095] * 32, num_blocks=8192, **llama)
    assert many.pieces_per_work <= 3 and 3 % many.pieces_per_work == 0
    gen = torch.Generator().manual_seed(0)
    for batch, seq in ((1, 32768), (8, 4096)):
        base = make_plan(batch=batch, seq_len=seq, cur_pos=None, num_blocks=2 * batch * seq // 32, **llama)
        for _ in range(2):
            pos = torch.randint(-1, seq, (batch,), generator=gen).tolist()
            other = make_plan(batch=batch, seq_len=seq, cur_pos=pos, num_blocks=2 * batch * seq // 32, **llama)
            assert other.pieces_per_work == base.pieces_per_work
            assert [(q.user, q.kv_head, q.index, q.core) for q in other.pieces] == \
                [(q.user, q.kv_head, q.index, q.core) for q in base.pieces]


def test_an_unset_core_cap_lets_one_kv_head_take_four_readers_on_every_bank() -> None:
    """max_cores_per_head_batch not set (None): a bank-local plan may take READERS_PER_BANK readers on each of
    the dram_banks banks (48 on Wormhole), the pricing still choosing: a T3K shard of Llama-70B (one KV head,
    12 banks reached) takes more than 16 pieces for one user at 32K, several readers on every bank (the model
    prices 36, 3 a bank, shortest at its softmax blocks), and at most one reader per bank at a batch of 32;
    ttnn's default cap of 16 holds when it is given."""
    shard = dict(num_q_heads=8, num_kv_heads=1, head_dim=128, kv_dtype=BFP8, kv_pages="key_row", block_size=32,
                 seq_len=32768)
    alone = make_plan(batch=1, cur_pos=[32767], num_blocks=2048, max_cores_per_head_batch=None,
                      **shard).pieces_per_work
    assert alone > 16 and alone % 12 == 0, alone
    assert make_plan(batch=1, cur_pos=[32767], num_blocks=2048, **shard).pieces_per_work <= 16
    many = make_plan(batch=32, cur_pos=[32767] * 32, num_blocks=2 * 32 * 1024, max_cores_per_head_batch=None,
                     **shard).pieces_per_work
    assert many <= 12 and 12 % many == 0


def test_a_short_cache_spreads_the_pieces_with_keys_one_per_core() -> None:
    """Galaxy's Llama-70B chip (one KV head, B 8, a 128-key cache, an 8x4 grid): one piece per (user, head)
    can ever hold keys (4 tiles under the split floor); every user's piece 0 sits on its own core, not near
    bank R_h[0] two to a core."""
    for block in (32, 64):
        plan = make_plan(batch=8, num_q_heads=8, num_kv_heads=1, seq_len=128, head_dim=128, kv_dtype=BFP8,
                         cur_pos=[127] * 8, grid=(8, 4), kv_pages="key_row", block_size=block, num_blocks=64)
        assert plan.seq_len // 32 // plan.min_chunk_tiles <= 1
        roots = [q.core for q in plan.pieces if q.index == 0]
        assert len(roots) == 8 and len(set(roots)) == 8


# ---- another bank count ------------------------------------------------------------------------------


def test_the_plan_takes_the_devices_bank_count_and_the_host_runtime_models_twelve() -> None:
    """make_plan(dram_banks=8) (a Blackhole P150's banks): R_h is recounted over 8 banks (NKV 8 with blocks of
    32 keys reach one bank each, of 64 two, of 256 all 8) and piece i sits near bank R_h[i]; the host runtime,
    which models Wormhole's 12 banks, refuses such a program by name."""
    base = dict(batch=1, num_q_heads=32, num_kv_heads=8, seq_len=2048, head_dim=64, cur_pos=[2000],
                kv_pages="key_row", num_blocks=64, dram_banks=8, max_cores_per_head_batch=16, spread_banks=False)
    for block, reach in ((32, 1), (64, 2), (256, 8)):
        assert make_plan(**base, block_size=block).pieces_per_work in bank_local_choices(reach, 16)
        plan = make_plan(**base, block_size=block, key_row_pieces=reach)
        assert (plan.pieces_per_work, plan.dram_banks) == (reach, 8)
        row = list(range(2048 // block))
        for h in range(8):
            banks = {((row[t // (block // 32)] * 8 + h) * (block // 32) + t % (block // 32)) % 8 for t in range(2000 // 32 + 1)}
            held = sorted(banks)
            for i in range(reach):
                assert plan.bank_local_view(2000, row, h, i).banks == tuple(held[i::reach])
    plan = make_plan(**dict(base, num_blocks=16), block_size=128)
    gen = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, 1, 32, 64, generator=gen), BF16)
    k = from_torch(torch.randn(16, 8, 128, 64, generator=gen), BFP8)
    program = build_program(plan, q=q, k=k, v=k, cur_pos_source=None, scale=0.125, compute=ComputeSettings(),
                            page_table=torch.arange(16, dtype=torch.int32).reshape(1, 16))
    assert program.dram_banks == 8
    with pytest.raises(ValueError, match="dram_banks=8, but the host runtime models a Wormhole's 12 DRAM banks"):
        run_program(program)


# ---- refusals ---------------------------------------------------------------------------------------


def test_bank_local_refuses_more_than_four_readers_per_bank() -> None:
    base = dict(batch=1, num_q_heads=32, num_kv_heads=8, seq_len=1024, head_dim=64, cur_pos=[100],
                kv_pages="key_row", num_blocks=64)
    with pytest.raises(PlanError, match="key_row_pieces: expected None or 1 to 12 with a paged cache"):
        make_plan(**base, block_size=32, key_row_pieces=13, max_cores_per_head_batch=16)
    with pytest.raises(PlanError, match="key_row_pieces: expected None or 1 to 8 with a paged cache"):
        make_plan(**base, block_size=32, key_row_pieces=9, max_cores_per_head_batch=8)
    with pytest.raises(PlanError, match="bank-local plan"):
        make_plan(**base, block_size=32).range_at(100, 0)
