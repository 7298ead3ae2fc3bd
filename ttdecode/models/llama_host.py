"""The host decoder's layers: one device's shard of the Llama in float32 torch around the op
(`LlamaShard`), the step inputs every device sees (`StepInputs`) and the worker functions that build
and step a shard in a ``ttdecode.distributed`` worker (module level: picklable). The split over
devices is ``ttdecode.models.tensor_parallel``'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from ttdecode import api
from ttdecode.core.formats import DataType
from ttdecode.distributed.context import combine_over_group
from ttdecode.models import rope
from ttdecode.models.kv_cache import PagedKVCache, append_rows
from ttdecode.models.llama_spec import LlamaSpec
from ttdecode.models.tensor_parallel import all_gather_last, all_reduce, process_groups

__all__ = ["StepInputs", "LlamaShard", "worker_build", "worker_step"]


@dataclass(frozen=True)
class StepInputs:
    """One step as every device sees it: the embedded tokens ``[B, hidden]`` float32 (the embedding
    lookup runs once, on the host) and the global positions ``[B]``; then per CP rank c (one entry
    without context parallelism): ``local_positions[c]`` ``[B]`` (each user's last position on that
    rank, -1: none), ``page_tables[c]`` int32 ``[B, blocks per user on the rank]`` after the step's
    allocation (local logical -> local physical blocks), and ``writes[c]``, the cache rows that rank
    writes (user, local physical block, row in block)."""

    hidden: torch.Tensor
    positions: tuple[int, ...]
    local_positions: tuple[tuple[int, ...], ...]
    page_tables: tuple[torch.Tensor, ...]
    writes: tuple[tuple[tuple[int, int, int], ...], ...]
    # T new tokens per user (multi-token decode): hidden is [B * T, hidden] user-major, positions[b]
    # is user b's first token's, local_positions its last token's, and a write's first entry is
    # the token row b * T + t instead of the user
    num_tokens: int = 1
    # with context parallelism and T > 1: per CP rank, the local position of every token row, token-major
    # (row t * B + b: user b's token t; -1: the rank holds no key up to it), ``[T * B]``
    row_positions: tuple[tuple[int, ...], ...] = ()


class LlamaShard:
    """One device's part of the model: its weights, its heads' KV caches (host images; ``kv_pages`` the
    pools' DRAM pages the append and FlashDecode are told), the step in torch + op."""

    def __init__(self, spec: LlamaSpec, weights: dict[str, torch.Tensor], *, rank: int, world: int,
                 num_blocks: int, block_size: int, kv_dtype: DataType, backend: str, program_config: Any,
                 context_parallel: int = 1, kv_pages: str = "tile") -> None:
        self.spec, self.w, self.rank, self.world = spec, weights, rank, world
        # program_config: FlashDecode's, its kv_pages the pools' (kv_pool.pages_program_config)
        self.backend, self.program_config, self.kv_pages = backend, program_config, kv_pages
        self.cp = context_parallel
        self.tp = world // context_parallel
        self.tp_rank, self.cp_rank = rank % self.tp, rank // self.tp
        self.block_size = block_size
        self.nkv = spec.num_kv_heads // self.tp
        self.nq = spec.num_heads // self.tp
        # None: the default group (every device)
        self.tp_group, self.cp_group = process_groups(self.tp, self.cp, self.tp_rank, self.cp_rank)
        self.freq = rope.inv_freq(spec.head_dim, spec.rope_theta, spec.rope_scaling)
        self.caches = [
            (PagedKVCache(num_blocks, self.nkv, block_size, spec.head_dim, kv_dtype),
             PagedKVCache(num_blocks, self.nkv, block_size, spec.head_dim, kv_dtype))
            for _ in range(spec.num_layers)
        ]
        self.cache_bytes = sum(c.nbytes for kv in self.caches for c in kv)  # this device's K and V pools

    def _attention(self, q: torch.Tensor, kc: PagedKVCache, vc: PagedKVCache, s: StepInputs) -> torch.Tensor:
        """The op over this device's cache (``q [T, B, nq, D]``, every user's T tokens); with context
        parallelism over its blocks, then the LSE merge over the CP group. Returns ``[T, B, nq, D]``.

        With context parallelism and T > 1 the T B token rows run as T B one-token users (each its own
        local position, ``s.row_positions``; its user's page table): the T tokens of a user may sit in
        blocks of two ranks, so the kernels' multi-token convention (consecutive local keys) does not
        hold on a shard (``ttdecode.distributed.loop_options``)."""
        table, local = s.page_tables[self.cp_rank], list(s.local_positions[self.cp_rank])
        if self.cp == 1:
            return api.paged_scaled_dot_product_attention_decode(
                q, kc.tile_tensor(), vc.tile_tensor(), table,
                cur_pos=local, program_config=self.program_config, backend=self.backend,
            )
        t, users = q.shape[0], q.shape[1]
        if t > 1:  # [T, B, nq, D] token-major is the [1, T B, nq, D] of one-token rows
            q, table = q.reshape(1, t * users, *q.shape[2:]), table.repeat(t, 1)
            local = list(s.row_positions[self.cp_rank])
        out, lse = api.paged_scaled_dot_product_attention_decode(
            q, kc.tile_tensor(), vc.tile_tensor(), table,
            cur_pos=local, program_config=self.program_config, backend=self.backend, return_lse=True,
        )
        # On the host backend the merge is the combine program on this rank's host runtime (what the
        # chip computes); on the reference backend the float combine.
        merge = "kernel" if self.backend == "host" else "reference"
        partial = out if merge == "kernel" else out.to(torch.float32)
        merged, _ = combine_over_group(partial, lse.to(torch.float32), "all_gather", group=self.cp_group,
                                       merge=merge)
        return merged.reshape(t, users, *merged.shape[2:])

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(var + self.spec.rms_norm_eps))

    def _linear(self, x: torch.Tensor, name: str, layer: int) -> torch.Tensor:
        y = x @ self.w[f"{layer}.w{name}"].T
        bias = self.w.get(f"{layer}.b{name}")
        return y if bias is None else y + bias

    def step(self, s: StepInputs) -> torch.Tensor:
        """Logits ``[B * T, vocab]`` float32, user-major (every device returns them; rows of idle users
        are zero)."""
        spec, d, t = self.spec, self.spec.head_dim, s.num_tokens
        users = len(s.positions)
        bsz = users * t  # token rows, user-major
        first = torch.tensor(s.positions, dtype=torch.int64)
        pos = (first.clamp(min=0)[:, None] + torch.arange(t)[None, :]).reshape(bsz)  # each token's position
        active = (first >= 0).repeat_interleave(t)
        x = s.hidden
        cos, sin = rope.cos_sin(self.freq, pos)  # [B * T, D]
        # Each token index j appends its users' rows with one rotary_kv_append (which also rotates their
        # q). A token row b * T + j that this rank does not write (with context parallelism: its block
        # is on another rank) appends nothing (-1), but every rank rotates every user's q.
        written = {r for r, _, _ in s.writes[self.cp_rank]}  # token rows
        local = s.local_positions[self.cp_rank]  # each user's last token's position on this rank
        rows = s.row_positions[self.cp_rank] if s.row_positions else None  # CP, T > 1: each row's own
        append_pos = [[(local[b] - (t - 1 - j) if rows is None else rows[j * users + b])
                       if b * t + j in written else -1 for b in range(users)] for j in range(t)]
        table = s.page_tables[self.cp_rank]
        cos_t, sin_t = cos.view(users, t, d), sin.view(users, t, d)
        for i, (kc, vc) in enumerate(self.caches):
            h = self._norm(x, self.w[f"{i}.in_norm"])
            q = self._linear(h, "q", i).view(bsz, self.nq, d)
            k = self._linear(h, "k", i).view(bsz, self.nkv, d)
            v = self._linear(h, "v", i).view(bsz, self.nkv, d)
            # RoPE on q and k and the cache append in one program per token index (ttdecode.rotary_kv_append)
            q_t, k_t, v_t = (x_.view(users, t, -1, d) for x_ in (q, k, v))
            q_rot = torch.stack([
                append_rows(kc, vc, k_t[:, j], v_t[:, j], cur_pos=append_pos[j], page_table=table,
                            cos=cos_t[:, j], sin=sin_t[:, j], q=q_t[:, j], backend=self.backend,
                            kv_pages=self.kv_pages)[0]
                for j in range(t)
            ])  # the op's [T, B, nq, D]
            attn = self._attention(q_rot, kc, vc, s)
            attn = attn.transpose(0, 1).reshape(bsz, self.nq * d)
            o = attn.to(torch.float32) @ self.w[f"{i}.wo"].T
            o = all_reduce(o, self.tp, self.tp_group)
            if f"{i}.bo" in self.w:
                o = o + self.w[f"{i}.bo"]
            x = x + o
            h = self._norm(x, self.w[f"{i}.post_norm"])
            m = torch.nn.functional.silu(self._linear(h, "g", i)) * self._linear(h, "u", i)
            m = all_reduce(m @ self.w[f"{i}.wd"].T, self.tp, self.tp_group)
            if f"{i}.bd" in self.w:
                m = m + self.w[f"{i}.bd"]
            x = x + m
        logits = all_gather_last(self._norm(x, self.w["norm"]) @ self.w["lm_head"].T, self.tp, self.tp_group)
        logits = logits[:, : spec.vocab_size]
        return torch.where(active[:, None], logits, torch.zeros(()))


# ---- worker functions (module level: picklable) ---------------------------------------------


def worker_build(ctx: Any, spec: LlamaSpec, weights: dict, options: dict) -> int:
    """Worker ``ctx.rank``'s `LlamaShard` of ``weights`` (kept in ``ctx.state``); returns its cache bytes."""
    torch.set_num_threads(1)
    ctx.state["llama"] = LlamaShard(spec, weights, rank=ctx.rank, world=ctx.world_size, **options)
    return ctx.state["llama"].cache_bytes


def worker_step(ctx: Any, s: StepInputs) -> Optional[torch.Tensor]:
    """One step of the worker's shard: the logits ``[B * T, vocab]`` on rank 0, None elsewhere."""
    logits = ctx.state["llama"].step(s)
    return logits if ctx.rank == 0 else None
