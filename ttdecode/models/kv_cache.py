"""Paged KV cache in tile images, and the per-user block allocator.

Layout (the paged op's, ``ttdecode.paged_scaled_dot_product_attention_decode``): per layer a K and
a V tensor ``[num_blocks, NKV, block_size, D]`` stored as a TILE-layout image (``TileTensor``) in
``kv_dtype`` (bfloat16 or bfloat8_b); user b's position p lives in row ``p % block_size`` of
block ``page_table[b, p // block_size]``. The pool's DRAM pages (``kv_pages``, ``ttdecode.kv_pool``)
are the image's either way: "key_row" (bank-local: a key-tile row a page, dealt over the DRAM banks)
or "tile"; the decoders pass their ``kv_pages`` to the append and to FlashDecode.

The decode step's cache update is `append_rows`: RoPE on the new K (and Q) rows and the append of
K and V at each user's position in one program, ``ttdecode.rotary_kv_append`` (the Metalium
kernels on the host backend): each new row is packed on its own into the cache's format and
written into the tile that holds it; in bfloat8_b a row's 16-value face rows are its own
shared-exponent groups, so every other byte of the cache stays as it was.

`BlockAllocator` hands out blocks per user: a user gets block ``p // block_size`` when its position
first enters it, gives them all back when it starts again at position 0, and gives back the blocks
past a position it rewinds to. `BlockAllocator.plan` checks a whole step (and raises) before
anything changes, so a refused step leaves allocator and caches exactly as they were. Its policy
"first_free" hands out the lowest free block; "balanced" (`policy_for` a bank-local "key_row" pool)
keeps each user's rows even over the DRAM banks: a key-tile row page k = (block * NKV + h) * bt + r lives
in bank k % NB, so a block's banks follow its residue class block mod (NB / gcd(NKV * bt, NB))
(`residue_classes`), and user b's logical block j takes a block of class (b + j) mod that count when one
is free (else the next class with a free block). With block_size 16 (`kv_pool.HALF_TILE_BLOCK`: two blocks
make a key tile, entries 2t and 2t + 1 of the page-table row) "balanced" hands out blocks in pairs: a user
holds an even count, and key tile t takes two blocks of one class, (b + t) mod the count when it has two
free (else the next class that has), so both halves of every key tile lie in one bank for every head
((b' - b) * NKV % NB == 0) and FlashDecode reads them bank-locally.

`ContextParallelAllocator` does the same over C context-parallel ranks, each with its own pool of
local blocks: a user's block j lives on rank ``j mod C`` as local block ``j div C``, so each rank's
pool needs only ``ceil(blocks per user / C)`` blocks per user.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import TileTensor
from ttdecode.kv_pool import HALF_TILE_BLOCK, page_table_blocks, tile_rows_per_block
from ttdecode.ops.rotary_append import op as rotary_op

__all__ = ["append_rows", "BlockAllocator", "POLICIES", "policy_for", "residue_classes",
           "ContextParallelAllocator", "ContextParallelPlan", "StepPlan", "PagedKVCache",
           "KV_DTYPES", "check_positions"]

#: KV formats the Llama decoder stores (the op also reads bfloat4_b; the decoder keeps to these two).
KV_DTYPES = (DataType.bfloat16, DataType.bfloat8_b)
#: Block allocation policies of `BlockAllocator`.
POLICIES = ("first_free", "balanced")


def policy_for(kv_pages: str) -> str:
    """The allocation policy of a pool whose pages are `kv_pages`: "balanced" for a bank-local "key_row"
    pool (its rows' banks follow the blocks), "first_free" otherwise."""
    return "balanced" if kv_pages == "key_row" else "first_free"


def residue_classes(num_kv_heads: int, block_size: int, dram_banks: int) -> int:
    """NB / gcd(NKV * bt, NB): the classes block mod that count whose blocks put a head's rows in the same
    banks (bt = block_size / 32 key-tile rows per block, `kv_pool.tile_rows_per_block`)."""
    return dram_banks // math.gcd(num_kv_heads * tile_rows_per_block(block_size), dram_banks)


@dataclass(frozen=True)
class StepPlan:
    """What one decode step does to the allocator: the blocks each user gets and gives back.

    ``free[b]``: blocks user b releases (restart at 0 or rewind); ``alloc[b]``: (logical block index,
    physical block) pairs user b takes; ``lengths[b]``: its cache length after the step.
    """

    free: tuple[tuple[int, ...], ...]
    alloc: tuple[tuple[tuple[int, int], ...], ...]
    lengths: tuple[int, ...]


class BlockAllocator:
    """Per-user block lists over a pool of ``num_blocks`` blocks of ``block_size`` positions. ``policy``
    (POLICIES): "first_free", or "balanced", which needs the pool's ``num_kv_heads`` and the device's
    ``dram_banks`` (module docstring). ``max_blocks``: the page table's entries per user,
    ceil(max_seq_len / block_size), even with block_size 16 (`kv_pool.page_table_blocks`; "balanced"
    then hands out blocks in pairs, one key tile each)."""

    def __init__(self, batch: int, max_seq_len: int, block_size: int, num_blocks: int,
                 name: str = "block pool", policy: str = "first_free", num_kv_heads: Optional[int] = None,
                 dram_banks: Optional[int] = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy: expected one of {POLICIES}, got {policy!r}")
        if policy == "balanced" and (num_kv_heads is None or dram_banks is None):
            raise ValueError("policy 'balanced': expected num_kv_heads and dram_banks, got None")
        self.policy = policy
        self.classes = (1 if num_kv_heads is None or dram_banks is None
                        else residue_classes(num_kv_heads, block_size, dram_banks))
        #: blocks handed out in pairs (key tiles of 16-position blocks, balanced): every count held is even
        self.pairs = policy == "balanced" and block_size == HALF_TILE_BLOCK
        self.name = name  # how errors name this pool
        self.batch = batch
        self.max_seq_len = max_seq_len
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_blocks = page_table_blocks(math.ceil(max_seq_len / block_size), block_size)
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self.blocks: list[list[int]] = [[] for _ in range(batch)]
        self.lengths: list[int] = [0] * batch  # positions 0..length-1 of user b are in its cache

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def plan(self, positions: Sequence[int]) -> StepPlan:
        """Blocks to free and take so every active user can write its position; raises
        ValueError ("positions" / "block pool") without changing anything."""
        check_positions(positions, self.lengths)
        targets = [None if p < 0 else (p == 0, p // self.block_size + 1) for p in positions]
        lengths = [self.lengths[b] if p < 0 else p + 1 for b, p in enumerate(positions)]
        return self.plan_blocks(targets, lengths)

    def plan_blocks(self, targets: Sequence[Optional[tuple[bool, int]]], lengths: Sequence[int]) -> StepPlan:
        """The plan that leaves user b holding exactly ``targets[b] = (restart, count)`` logical blocks
        (``restart``: give every block back first; None: the user is idle and keeps its blocks), with
        cache lengths ``lengths`` after the step. Raises ValueError (the pool's name) when the pool
        cannot serve it; nothing changes either way (`commit` applies the plan)."""
        free: list[tuple[int, ...]] = []
        need: list[list[int]] = []
        for b, t in enumerate(targets):
            have = self.blocks[b]
            if t is None:
                free.append(())
                need.append([])
                continue
            restart, count = t
            if self.pairs:
                count = page_table_blocks(count, self.block_size)
            if not 0 <= count <= self.max_blocks:
                raise ValueError(f"{self.name}: expected at most {self.max_blocks} blocks per user, got {count} "
                                 f"for user {b}")
            keep = 0 if restart else min(count, len(have))
            free.append(tuple(have[keep:]))
            need.append(list(range(keep, count)))
        released = sum(len(f) for f in free)
        wanted = sum(len(n) for n in need)
        if wanted > len(self._free) + released:
            raise ValueError(
                f"{self.name}: expected at most {len(self._free) + released} free blocks of {self.block_size} "
                f"positions for this step, got a need for {wanted} (pool of {self.num_blocks} blocks exhausted; "
                f"build the decoder with more num_blocks or fewer users)"
            )
        pool = self._free + [blk for f in reversed(free) for blk in reversed(f)]
        if self.policy == "balanced":
            return StepPlan(tuple(free), self._balanced(pool, need), tuple(lengths))
        alloc = []
        for n in need:
            alloc.append(tuple((i, pool.pop()) for i in n))
        return StepPlan(tuple(free), tuple(alloc), tuple(lengths))

    def _balanced(self, pool: list[int], need: Sequence[Sequence[int]]) -> tuple[tuple[tuple[int, int], ...], ...]:
        """The balanced policy's picks from `pool` (handed out from its end, as "first_free"): user b's
        logical block i a block of class (b + i) mod classes, else the next class with a free block. With
        `pairs` (`need` then holds whole pairs 2t, 2t + 1): both blocks of key tile t from class (b + t) mod
        classes, else the next class with two free blocks (if none has two, one block each from the next
        classes with a free one: the key tile's halves in two banks)."""
        k = self.classes
        by_class: list[list[int]] = [[] for _ in range(k)]
        for blk in pool:
            by_class[blk % k].append(blk)
        group = 2 if self.pairs else 1
        alloc = []
        for b, n in enumerate(need):
            picks = []
            for first in range(0, len(n), group):
                ids = n[first:first + group]
                want = (b + ids[0] // group) % k
                order = [(want + j) % k for j in range(k)]
                cls = next((c for c in order if len(by_class[c]) >= len(ids)), None)
                for i in ids:
                    take = cls if cls is not None else next(c for c in order if by_class[c])
                    picks.append((i, by_class[take].pop()))
            alloc.append(tuple(picks))
        return tuple(alloc)

    def commit(self, plan: StepPlan) -> None:
        """Apply a plan made by `plan` for the current state."""
        for b, fr in enumerate(plan.free):  # every release first: another user may take the block
            if fr:
                self.blocks[b] = self.blocks[b][: len(self.blocks[b]) - len(fr)]
                self._free.extend(reversed(fr))
        taken: set[int] = set()
        for b, (al, n) in enumerate(zip(plan.alloc, plan.lengths)):
            for i, blk in al:
                assert i == len(self.blocks[b]), (b, i, self.blocks[b])
                self.blocks[b].append(blk)
                taken.add(blk)
            self.lengths[b] = n
        if taken:  # the free list without the blocks taken, in its order (one pass)
            self._free = [blk for blk in self._free if blk not in taken]

    def page_table(self, plan: Optional[StepPlan] = None) -> torch.Tensor:
        """int32 ``[batch, max_blocks]``; entries past a user's blocks are 0 (the op never reads them).
        With ``plan``: the table after that plan's allocation (the allocator itself is not changed)."""
        table = torch.zeros(self.batch, self.max_blocks, dtype=torch.int32)
        for b, blocks in enumerate(self.blocks):
            if blocks:
                table[b, : len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
        if plan is not None:
            for b, al in enumerate(plan.alloc):
                for i, blk in al:
                    table[b, i] = blk
        return table


def check_positions(positions: Sequence[int], lengths: Sequence[int]) -> None:
    """Every active user writes its next position, rewinds, or restarts at 0 (ValueError "positions[b]")."""
    for b, p in enumerate(positions):
        if p > lengths[b]:
            raise ValueError(
                f"positions[{b}]: expected 0..{lengths[b]} (user {b} has {lengths[b]} positions "
                f"cached; a step writes the next one, rewinds, or restarts at 0), got {p}"
            )


@dataclass(frozen=True)
class ContextParallelPlan:
    """One step over the C context-parallel pools: ``ranks[c]`` is CP rank c's `StepPlan` (local
    logical blocks -> local physical blocks); ``lengths[b]``: user b's global cache length after it."""

    ranks: tuple[StepPlan, ...]
    lengths: tuple[int, ...]


class ContextParallelAllocator:
    """Block lists of every user over C context-parallel ranks, each with its own pool.

    A user's global logical block j (positions ``[j*block_size, (j+1)*block_size)``) lives on CP rank
    ``j mod C`` as that rank's local logical block ``j div C`` (the interleaved layout of
    ``ttdecode.distributed.context``). Each rank's `BlockAllocator` has ``num_blocks`` blocks and a
    page table ``[batch, ceil(ceil(max_seq_len / block_size) / C)]`` of local physical blocks (even with
    block_size 16, `kv_pool.page_table_blocks`); a
    user's local positions on rank c are its positions held there, in order. A step is planned on
    every rank before anything changes: an exhausted pool refuses the whole step. ``policy``,
    ``num_kv_heads``, ``dram_banks``: every rank's (`BlockAllocator`)."""

    def __init__(self, batch: int, max_seq_len: int, block_size: int, num_blocks: int, context_parallel: int,
                 policy: str = "first_free", num_kv_heads: Optional[int] = None,
                 dram_banks: Optional[int] = None) -> None:
        self.batch, self.block_size, self.cp = batch, block_size, context_parallel
        self.max_blocks = math.ceil(max_seq_len / block_size)  # global blocks per user
        self.local_max_blocks = page_table_blocks(math.ceil(self.max_blocks / context_parallel), block_size)
        self.num_blocks = num_blocks
        self.ranks = [
            BlockAllocator(batch, self.local_max_blocks * block_size, block_size, num_blocks,
                           name=f"num_blocks (the block pool of context-parallel rank {c} of {context_parallel})",
                           policy=policy, num_kv_heads=num_kv_heads, dram_banks=dram_banks)
            for c in range(context_parallel)
        ]
        self.lengths: list[int] = [0] * batch

    def owned_blocks(self, rank: int, blocks: int) -> int:
        """How many of global blocks ``0..blocks-1`` CP rank ``rank`` holds."""
        return max(0, (blocks - 1 - rank) // self.cp + 1) if blocks > rank else 0

    def local_position(self, rank: int, pos: int) -> int:
        """The last local position on CP rank ``rank`` at or before global position ``pos``: ``pos``'s
        own local position if the rank holds it, -1 if the rank holds no position <= ``pos``."""
        if pos < 0:
            return -1
        j, row = divmod(pos, self.block_size)
        if j % self.cp == rank:
            return (j // self.cp) * self.block_size + row
        return self.owned_blocks(rank, j + 1) * self.block_size - 1

    def plan(self, positions: Sequence[int], tokens: int = 1) -> ContextParallelPlan:
        """As `BlockAllocator.plan`, on every rank, for ``tokens`` new positions per active user
        (``positions[b] .. positions[b] + tokens - 1``); raises ValueError ("positions[b]", or
        "num_blocks" naming the exhausted rank's pool) without changing anything."""
        check_positions(positions, self.lengths)
        plans = []
        for c, alloc in enumerate(self.ranks):
            targets = [None if p < 0 else (p == 0, self.owned_blocks(c, (p + tokens - 1) // self.block_size + 1))
                       for p in positions]
            lengths = [alloc.lengths[b] if p < 0 else self.local_position(c, p + tokens - 1) + 1
                       for b, p in enumerate(positions)]
            plans.append(alloc.plan_blocks(targets, lengths))
        lengths = tuple(self.lengths[b] if p < 0 else p + tokens for b, p in enumerate(positions))
        return ContextParallelPlan(tuple(plans), lengths)

    def commit(self, plan: ContextParallelPlan) -> None:
        """Apply a plan made by `plan` for the current state."""
        for alloc, p in zip(self.ranks, plan.ranks):
            alloc.commit(p)
        self.lengths = list(plan.lengths)

    def page_tables(self, plan: Optional[ContextParallelPlan] = None) -> tuple[torch.Tensor, ...]:
        """Per CP rank: int32 ``[batch, local_max_blocks]`` (after ``plan``'s allocation if given)."""
        return tuple(a.page_table(None if plan is None else p)
                     for a, p in zip(self.ranks, plan.ranks if plan is not None else [None] * self.cp))


class PagedKVCache:
    """One paged cache tensor ``[num_blocks, NKV, block_size, D]`` held as its tile image (block_size 16:
    one padded tile row per (block, KV head), ttnn's TILE layout of such a pool)."""

    def __init__(self, num_blocks: int, num_kv_heads: int, block_size: int, head_dim: int, dtype: DataType) -> None:
        if dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype: expected one of {[d.value for d in KV_DTYPES]}, got {dtype}")
        if (block_size % 32 and block_size != HALF_TILE_BLOCK) or head_dim % 32:
            raise ValueError(f"block_size, head_dim: expected multiples of 32 (block_size 16 too), got "
                             f"{block_size}, {head_dim}")
        self.shape = (num_blocks, num_kv_heads, block_size, head_dim)
        self.dtype = dtype
        self._tiles_per_row = head_dim // 32
        self._page = formats.tile_size(dtype)
        self._strip = self._tiles_per_row * self._page  # bytes of one tile row [32, D]
        self.image = bytearray(num_blocks * num_kv_heads * tile_rows_per_block(block_size) * self._strip)  # zeros

    @property
    def nbytes(self) -> int:
        return len(self.image)

    def assign(self, t: TileTensor) -> None:
        """Take the image of `t` (the cache after an append), which must have this cache's shape and format."""
        if t.shape != self.shape or t.dtype is not self.dtype:
            raise ValueError(f"t: expected a {self.dtype.value} tile tensor {list(self.shape)}, got "
                             f"{t.dtype.value} {list(t.shape)}")
        self.image = bytearray(t.data)

    def tile_tensor(self) -> TileTensor:
        """The cache as the op's input (a copy of the image)."""
        return TileTensor(self.shape, self.dtype, bytes(self.image))

    def values(self) -> torch.Tensor:
        """The stored values, float32 ``[num_blocks, NKV, block_size, D]``."""
        return formats.unpack_tiles(bytes(self.image), self.dtype, self.shape).to(torch.float32)


def append_rows(k_cache: PagedKVCache, v_cache: PagedKVCache, k_new: torch.Tensor, v_new: torch.Tensor, *,
                cur_pos: Sequence[int], page_table: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                q: Optional[torch.Tensor] = None, backend: str = "host",
                kv_pages: str = "tile") -> Optional[torch.Tensor]:
    """Rotate ``k_new`` (and ``q``) and append K and V rows with ``ttdecode.rotary_kv_append``.

    k_new, v_new: ``[B, NKV, D]`` float (taken as bfloat16, as the op's inputs); q: ``[B, NH, D]``
    or None; cur_pos: ``[B]`` positions to write (-1: no write for that user); page_table: int32
    ``[B, max_blocks]``; cos/sin: ``[B, D]`` in Hugging Face's layout; kv_pages: the pools' DRAM pages
    ("tile" or "key_row", the op's option). The caches take the op's result. Returns the rotated q
    ``[1, B, NH, D]`` (bfloat16) or None."""
    out = rotary_op.rotary_kv_append(
        k_new.unsqueeze(0), v_new.unsqueeze(0), k_cache.tile_tensor(), v_cache.tile_tensor(),
        cur_pos=list(cur_pos), cos=cos, sin=sin, page_table=page_table,
        q=None if q is None else q.unsqueeze(0), backend=backend, kv_pages=kv_pages,
    )
    q_rot = None
    if q is not None:
        q_rot, out = out[0], out[1:]
    k_cache.assign(out[0])
    v_cache.assign(out[1])
    return q_rot
