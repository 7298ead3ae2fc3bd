"""The FlashDecode kernels over a paged KV cache on the host runtime.

A paged cache holds K/V as blocks ``[num_blocks, NKV, block_size, D]`` and a page table
``[B, max_blocks]`` that names, for user b, the block holding logical positions
``j * block_size .. (j + 1) * block_size - 1``. The reader maps each logical key tile to its block,
so a paged run must give the bits of the contiguous run of the same data, read each referenced
byte once, and never look at blocks (or rows) beyond a user's cur_pos.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import pytest
import torch

from ttdecode.accuracy import check_close, check_lse
from ttdecode.api import paged_scaled_dot_product_attention_decode
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType, tile_size
from ttdecode.ops.flash_decode.plan import DecodePlan, make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import from_torch, to_torch

from tests.test_flash_decode import randn_with_outliers

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b
NAN = float("nan")


def shuffled_table(batch: int, max_blocks: int, num_blocks: int, seed: int) -> torch.Tensor:
    """Distinct random block ids [B, max_blocks] int32 out of num_blocks (the rest stay unreferenced)."""
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed))
    return perm[: batch * max_blocks].reshape(batch, max_blocks).to(torch.int32)


def paginate(x: torch.Tensor, table: torch.Tensor, num_blocks: int, block_size: int,
             fill: float = 0.0, valid: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Scatter a contiguous cache [B, NKV, S, D] into blocks; blocks no user references hold `fill`.

    With `valid` (cur_pos per user) only positions 0..cur_pos are copied: every other position of
    every block, referenced or not, holds `fill`.
    """
    b, nkv, s, d = x.shape
    out = torch.full((num_blocks, nkv, block_size, d), fill)
    for u in range(b):
        for j in range(s // block_size):
            rows = block_size if valid is None else max(0, min(block_size, valid[u] + 1 - j * block_size))
            out[table[u, j], :, :rows] = x[u, :, j * block_size: j * block_size + rows]
    return out


def run(plan_args: dict, q, k, v, pos: Sequence[int], *, table: Optional[torch.Tensor] = None,
        block_size: Optional[int] = None, pos_as_tensor: bool = False):
    """Plan and run one program; returns (plan, out, lse, RunResult)."""
    paging = {} if table is None else dict(block_size=block_size, num_blocks=k.shape[0])
    plan = make_plan(cur_pos=None if pos_as_tensor else list(pos), return_lse=True, **paging, **plan_args)
    source = torch.tensor(list(pos), dtype=torch.int32) if pos_as_tensor else None
    out, lse, result = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=source,
                                        scale=1.0 / math.sqrt(plan.head_dim), compute=ComputeSettings(),
                                        page_table=table)
    return plan, out, lse, result


def paged_reference(q, k, v, pos: Sequence[int], table: torch.Tensor):
    """The float64 reference on exactly the tile images' values, through the page table."""
    return sdpa_decode_reference(to_torch(q).double(), to_torch(k).double(), to_torch(v).double(),
                                 cur_pos=list(pos), page_table=table, return_lse=True,
                                 scale=1.0 / math.sqrt(q.shape[-1]))


def assert_matches(out, lse, ref, ref_lse, pos: Sequence[int], what: str) -> None:
    for u, p in enumerate(pos):
        if p < 0:
            assert torch.count_nonzero(out[:, u]) == 0, f"{what}: skipped user {u} must output zeros"
        else:
            check_close(out[:, u], ref[:, u], f"{what}: user {u} (cur_pos {p})")
    check_lse(lse, ref_lse, f"{what}: LSE")


# ---- the page table changes addresses, not results ------------------------------------------------


@pytest.mark.parametrize(
    "kv, block_size, k_chunk, max_cores, pos_as_tensor",
    [
        (BFP8, 64, 0, 8, False),
        (BF16, 32, 64, 4, True),  # positions read on the device (cur_pos_tensor)
        (BFP4, 128, 32, 3, False),  # chunks of one tile, blocks of four
    ],
)
def test_shuffled_page_table_gives_the_bits_of_the_contiguous_cache(kv, block_size, k_chunk, max_cores,
                                                                   pos_as_tensor) -> None:
    b, nh, nkv, s, d = 7, 8, 2, 512, 64
    pos = [-1, 0, block_size - 1, block_size, 2 * block_size - 1, 300, s - 1]
    gen = torch.Generator().manual_seed(block_size)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k = randn_with_outliers((b, nkv, s, d), gen)
    v = randn_with_outliers((b, nkv, s, d), gen)
    max_blocks = s // block_size
    num_blocks = b * max_blocks + 5
    table = shuffled_table(b, max_blocks, num_blocks, seed=3)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv,
                k_chunk_size=k_chunk, max_cores_per_head_batch=max_cores)

    _, out_c, _, contiguous = run(args, q, from_torch(k, kv), from_torch(v, kv), pos)
    kp = from_torch(paginate(k, table, num_blocks, block_size), kv)
    vp = from_torch(paginate(v, table, num_blocks, block_size), kv)
    plan, out_p, lse_p, paged = run(args, q, kp, vp, pos, table=table, block_size=block_size,
                                    pos_as_tensor=pos_as_tensor)
    assert plan.paged and (plan.cur_pos is None) == pos_as_tensor
    assert paged.tensors["out"] == contiguous.tensors["out"]
    assert paged.tensors["lse"] == contiguous.tensors["lse"]
    assert_matches(out_p, lse_p, *paged_reference(q, kp, vp, pos, table), pos,
                   f"paged {kv.value}, blocks of {block_size}")


# ---- against the reference --------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [32, 64, 128])
@pytest.mark.parametrize("kv", [BF16, BFP8, BFP4], ids=lambda t: t.value)
def test_paged_cache_matches_the_reference(kv: DataType, block_size: int) -> None:
    b, nh, nkv, s, d = 8, 16, 4, 512, 64
    pos = [-1, 0, block_size - 1, block_size, 2 * block_size - 1, 2 * block_size, 300, s - 1]
    gen = torch.Generator().manual_seed(17 + block_size)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    max_blocks = s // block_size
    num_blocks = b * max_blocks + 3
    # the blocks themselves are random data; users may share none of them
    kp = from_torch(randn_with_outliers((num_blocks, nkv, block_size, d), gen), kv)
    vp = from_torch(randn_with_outliers((num_blocks, nkv, block_size, d), gen), kv)
    table = shuffled_table(b, max_blocks, num_blocks, seed=block_size)
    _, out, lse, _ = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv,
                              max_cores_per_head_batch=4), q, kp, vp, pos, table=table, block_size=block_size)
    assert_matches(out, lse, *paged_reference(q, kp, vp, pos, table), pos,
                   f"paged {kv.value}, blocks of {block_size}")


def test_users_may_share_blocks_through_the_page_table() -> None:
    # Two users whose tables name the same blocks read the same keys (a shared prefix).
    b, nh, nkv, s, d, block = 3, 8, 2, 256, 64, 64
    gen = torch.Generator().manual_seed(8)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    kp = from_torch(randn_with_outliers((6, nkv, block, d), gen), BFP8)
    vp = from_torch(randn_with_outliers((6, nkv, block, d), gen), BFP8)
    table = torch.tensor([[5, 2, 0, 1], [5, 2, 3, 4], [1, 1, 1, 1]], dtype=torch.int32)
    pos = [255, 200, 130]
    _, out, lse, _ = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=BFP8,
                              max_cores_per_head_batch=4), q, kp, vp, pos, table=table, block_size=block)
    assert_matches(out, lse, *paged_reference(q, kp, vp, pos, table), pos, "shared blocks")


# ---- garbage outside a user's valid range ------------------------------------------------------------


@pytest.mark.parametrize("kv", [BF16, BFP8, BFP4], ids=lambda t: t.value)
def test_nan_in_unreferenced_blocks_and_past_cur_pos_does_not_reach_the_output(kv: DataType) -> None:
    # Every block position outside a user's 0..cur_pos holds NaN: blocks no user references,
    # blocks the table names past the user's boundary block, and the rows past cur_pos inside the
    # boundary block (whose boundary tile mixes valid and NaN rows).
    b, nh, nkv, s, d, block = 6, 8, 2, 256, 64, 64
    pos = [0, 17, 63, 64, 191, 255]
    gen = torch.Generator().manual_seed(31)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    k = randn_with_outliers((b, nkv, s, d), gen)
    v = randn_with_outliers((b, nkv, s, d), gen)
    num_blocks = b * (s // block) + 4
    table = shuffled_table(b, s // block, num_blocks, seed=9)
    kp = from_torch(paginate(k, table, num_blocks, block, fill=NAN, valid=pos), kv)
    vp = from_torch(paginate(v, table, num_blocks, block, fill=NAN, valid=pos), kv)
    stored = to_torch(kp)
    referenced = {int(x) for x in table.flatten()}
    assert all(torch.isnan(stored[n]).all() for n in range(num_blocks) if n not in referenced)
    for u, p in enumerate(pos):  # the images hold NaN exactly past cur_pos of every user
        logical = torch.cat([stored[table[u, j]] for j in range(s // block)], dim=1)
        assert torch.isfinite(logical[:, : p + 1]).all() and torch.isnan(logical[:, p + 1:]).all()
    _, out, lse, _ = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv,
                              max_cores_per_head_batch=4), q, kp, vp, pos, table=table, block_size=block)
    # the reference of the clean contiguous cache (the same quantized values up to cur_pos)
    ref, ref_lse = sdpa_decode_reference(to_torch(q).double(), to_torch(from_torch(k, kv)).double(),
                                         to_torch(from_torch(v, kv)).double(), cur_pos=pos, return_lse=True,
                                         scale=1.0 / math.sqrt(d))
    assert_matches(out, lse, ref, ref_lse, pos, f"NaN outside the valid range, {kv.value}")


# ---- bytes ------------------------------------------------------------------------------------------


def table_row_loads(plan: DecodePlan, pos: Sequence[int]) -> tuple[int, int]:
    """(rows the readers fetch in all, rows the chunk loops fetch) for positions read from a tensor, per
    core: its first piece's user's row beside the positions (one barrier for both); the guard's pass
    then fetches a row whenever its next piece of a user with a position (>= 0) changes user from the row
    in place; the chunk loop starts with the row the pass left and fetches whenever its next piece with
    work changes user."""
    total = chunk_loop = 0
    for pieces in plan.core_pieces.values():
        if not pieces:
            continue
        held = pieces[0].user
        total += 1
        for pc in pieces:
            if pos[pc.user] >= 0 and pc.user != held:
                total += 1
                held = pc.user
        for pc in pieces:
            if plan.range_at(pos[pc.user], pc.index).empty:
                continue
            if pc.user != held:
                total += 1
                chunk_loop += 1
                held = pc.user
    return total, chunk_loop


@pytest.mark.parametrize("grid, pieces", [((8, 8), 4), ((2, 2), 1)])
def test_reader_reads_each_referenced_kv_byte_once_and_one_table_row_per_user_change(grid, pieces: int) -> None:
    b, nh, nkv, s, d, block = 5, 32, 8, 2048, 128, 128
    pos = [2047, 1000, 127, 128, -1]
    gen = torch.Generator().manual_seed(4)
    max_blocks = s // block
    num_blocks = b * max_blocks + 7
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    kp = from_torch(randn_with_outliers((num_blocks, nkv, block, d), gen), BFP8)
    vp = from_torch(randn_with_outliers((num_blocks, nkv, block, d), gen), BFP8)
    table = shuffled_table(b, max_blocks, num_blocks, seed=2)
    plan, out, lse, result = run(dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d,
                                      kv_dtype=BFP8, max_cores_per_head_batch=8, grid=grid), q, kp, vp, pos,
                                 table=table, block_size=block)
    assert plan.pieces_per_work == pieces
    assert_matches(out, lse, *paged_reference(q, kp, vp, pos, table), pos, f"paged Llama-3.1-8B shape, {pieces} pieces")

    readers = [kc for kc in result.counters.kernels if kc.kind is KernelKind.READER]
    valid_tiles = sum((p + 32) // 32 for p in pos if p >= 0)
    kv_bytes = valid_tiles * nkv * (plan.d_tiles + plan.dv_tiles) * tile_size(BFP8)
    with_work = [pc for pc in plan.pieces if not plan.range_at(pos[pc.user], pc.index).empty]
    q_bytes = len(with_work) * plan.group_size * d * 2
    pos_bytes = 4 * b * len(readers)  # read once; the writer's copy is made in L1
    loads, chunk_loop = table_row_loads(plan, pos)
    if pieces == 1:  # a user's 8 KV heads on 4 cores, run user by user: one row serves two pieces
        assert chunk_loop < len(with_work)
    table_bytes = loads * 4 * max_blocks
    assert sum(sum(kc.dram_read_bytes) for kc in readers) == kv_bytes + q_bytes + pos_bytes + table_bytes


# ---- the public API ---------------------------------------------------------------------------------


def test_public_paged_api_on_the_host_equals_the_reference() -> None:
    b, nh, nkv, s, d, block = 4, 16, 4, 1024, 128, 64
    pos = [1023, 64, -1, 500]
    gen = torch.Generator().manual_seed(12)
    max_blocks = s // block
    num_blocks = b * max_blocks + 2
    q = randn_with_outliers((1, b, nh, d), gen)
    table = shuffled_table(b, max_blocks, num_blocks, seed=12)
    kp = from_torch(randn_with_outliers((num_blocks, nkv, block, d), gen), BFP8)
    vp = from_torch(randn_with_outliers((num_blocks, nkv, block, d), gen), BFP8)
    out, lse = paged_scaled_dot_product_attention_decode(q, kp, vp, table, cur_pos=pos, return_lse=True,
                                                         backend="host")
    ref, ref_lse = paged_reference(from_torch(q, BF16), kp, vp, pos, table)
    assert out.dtype == torch.bfloat16 and list(out.shape) == [1, b, nh, d]
    assert_matches(out, lse, ref, ref_lse, pos, "public paged API, host")
    # torch K/V (stored as bf16) and positions as a tensor take the same path
    kt, vt = to_torch(kp), to_torch(vp)
    out_t = paged_scaled_dot_product_attention_decode(q, kt, vt, table, cur_pos_tensor=torch.tensor(pos, dtype=torch.int32),
                                                      backend="host")
    ref_t = paged_scaled_dot_product_attention_decode(q, kt, vt, table, cur_pos=pos, backend="reference")
    for u in (0, 1, 3):
        check_close(out_t[:, u], ref_t[:, u], f"public paged API, torch K/V, user {u}")
