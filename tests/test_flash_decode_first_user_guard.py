"""The bank-local reader's first user (kernels/flash_decode/page_table_pass.hpp): a core's first piece requests its
first chunks once their own page-table entries are checked inside the pool, and guards the rest of its user's row
while they land. A page id outside the pool anywhere in the attended row still skips the user exactly as a
position of -1 does (zeros, LSE -inf, on every core serving it); chunks already requested are pushed unread and
popped by the compute kernel (BankView::discard). Host runtime; expected values from the float64 reference and
from the same call with the user's position -1."""

from __future__ import annotations

from typing import Sequence

import pytest
import torch

from ttdecode.core.formats import tile_size
from ttdecode.core.program_description import KernelKind
from ttdecode.core.tensor import from_torch

from tests.test_flash_decode import randn_with_outliers
from tests.test_flash_decode_bank_paged import BF16, assert_matches, pool, reference, run, shuffled_table
from tests.test_flash_decode_bank_paged16 import half_bytes, make_pool

VIEWS_PAGE_CB = 26  # cb_view_compute: the reader's push of the views ends its pass
POS = [2047, 1500, 1535, 1536, 2000, 1900]
BAD_USER = 1


def early_reads(plan, result, core, amount: int) -> int:
    """K/V reads of `amount` bytes the core's reader issued before it pushed the views."""
    reads = 0
    for e in result.counters.kernel(core, KernelKind.READER).events:
        if int(e["op"]) == 12 and int(e["peer"]) == VIEWS_PAGE_CB:
            return reads
        if int(e["op"]) == 1 and int(e["amount"]) == amount:
            reads += int(e["count"])
    raise AssertionError("the reader never pushed its views")


def early_tiles(plan, pos: Sequence[int], table: torch.Tensor, core) -> list[int]:
    """The key tiles the core's first piece takes in its first whole chunks (one or two): those the reader
    requests during its pass."""
    first = plan.core_pieces[core][0]
    view = plan.bank_local_view(pos[first.user], table[first.user].tolist(), first.kv_head, first.index)
    chunks = min(2, view.num_tiles // view.chunk_tiles) if view.chunk_tiles else 0
    return list(view.tiles[: chunks * view.chunk_tiles])


@pytest.mark.parametrize("block, softmax_chunks, mla", [(32, 1, False), (32, 3, False), (16, 1, False),
                                                        (16, 3, False), (32, 1, True)])
@pytest.mark.parametrize("where", ["beyond", "inside"])
def test_a_page_id_outside_the_pool_skips_the_first_user_whatever_its_early_chunks(block: int, softmax_chunks: int,
                                                                                   mla: bool, where: str) -> None:
    """Six users of 2K keys on a random page table, Llama-8B-like heads (8 KV heads, 3 pieces each), each core
    holding pieces of two or three users; user 1's row names a block outside the pool in its last attended block
    ('beyond' the first chunks of the cores' first pieces, which are requested and then dropped) or its first
    ('inside' the first chunks of the pieces owning it: nothing requested early there). The outputs (on a
    perturbed schedule) are bit-identical to the same call with user 1's position -1 and a valid row (zeros, LSE
    -inf for it), the other users equal the reference; with one chunk per update, softmax blocks of 3 and MLA
    (K only)."""
    b, nh, nkv, s, d, kv = 6, 16, 8, 2048, 64, BF16  # a half tile of bf16 is not a page-table row's size
    gen = torch.Generator().manual_seed(31)
    entries = s // block
    num_blocks = b * entries + 9
    table = shuffled_table(b, entries, num_blocks, seed=4)
    q = from_torch(randn_with_outliers((1, b, nh, d), gen), BF16)
    make = pool if block == 32 else (lambda g, n, h, size, dd, t: make_pool(g, n, h, dd, t))
    k = make(gen, num_blocks, nkv, block, d, kv)
    v = None if mla else make(gen, num_blocks, nkv, block, d, kv)
    args = dict(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=kv, key_row_pieces=3,
                min_chunk_tiles=1, softmax_chunks=softmax_chunks, mla=mla, head_dim_v=32 if mla else d)
    bad = table.clone()
    bad_entry = POS[BAD_USER] // block if where == "beyond" else 0
    bad[BAD_USER, bad_entry] = num_blocks + 5
    plan, out, lse, result = run(args, q, k, v, POS, bad, block, pos_as_tensor=True, schedule_seed=5)
    assert plan.softmax_chunks == softmax_chunks
    skipped = list(POS)
    skipped[BAD_USER] = -1
    _, out_skip, lse_skip, _ = run(args, q, k, v, skipped, table, block, pos_as_tensor=True)
    assert torch.equal(out, out_skip) and torch.equal(lse, lse_skip)
    assert torch.isneginf(lse[:, BAD_USER]).all()
    assert_matches(out, lse, *reference(plan, q, k, v, skipped, table), skipped, f"{where} block {block}")

    amount = tile_size(kv) if block == 32 else half_bytes(kv)
    bad_tile = bad_entry * block // 32
    dropped = withheld = 0
    for core, placed in plan.core_pieces.items():
        if not placed or placed[0].user != BAD_USER:
            continue
        assert len(placed) > 1, "the pieces after a dropped one take its slots' places"
        tiles = early_tiles(plan, POS, bad, core)
        reads = early_reads(plan, result, core, amount)
        if bad_tile in tiles:
            assert reads == 0, f"core ({core.x},{core.y}) read early beside a page id outside the pool"
            withheld += 1
        elif tiles:
            assert reads > 0, f"core ({core.x},{core.y})"
            dropped += 1
    assert dropped > 0
    assert where == "beyond" or withheld > 0
