"""Llama decode over this package's FlashDecode op, tensor parallel over ``devices`` workers.

``LlamaDecoder.from_hf(model, batch=B, max_seq_len=S, ...)`` takes a Hugging Face
``LlamaForCausalLM`` and builds the decode model; ``step(tokens [B], positions [B]) -> logits
[B, vocab]`` runs one decode step for every user slot (position -1: an idle slot, untouched);
``generate(input_ids [B', P], max_new_tokens)`` is greedy decoding that feeds the prompts through
multi-token decode steps of up to 32 tokens per user (prompts of different lengths as a list);
``step(tokens [B, T], positions [B]) -> logits [B, T, vocab]`` runs T <= 32 new tokens per user
at positions ``positions[b] .. positions[b] + T - 1`` in one multi-token decode step (the
verification of T speculative draft tokens: token t's logits predict token t + 1; one read of the
cache serves all T, causal among them); a rejected draft is dropped by rewinding: the next step
starts at the first position to redo. Per layer: RMSNorm -> Q/K/V projections -> RoPE at each user's
position and the cache update (one row per user into its block) in one program,
``ttdecode.rotary_kv_append`` (see ``kv_cache.append_rows``; one call per token index with T > 1)
-> FlashDecode through
``ttdecode.paged_scaled_dot_product_attention_decode`` on the chosen backend -> O projection ->
residual -> RMSNorm -> SwiGLU MLP -> residual; then the final norm and the LM head.

Backends: ``"host"`` (the attention is the Metalium kernels on the host runtime), ``"reference"``
(the op's float64 reference), both with projections, norms and MLP in float32 torch;
``"device"``: every layer through ttnn's ops and ours on one Wormhole (``device=`` an open ttnn
device, else device 0 is opened) or tensor parallel over a ``1 x devices`` mesh (``device=`` the
open mesh; the split above, ``ttnn.all_reduce`` after O and down, ``ttnn.all_gather`` of the
vocabulary slices), the paged KV caches on the device(s) for the decoder's lifetime, one
host->device write (token ids, positions, page table) and one read (logits, or the on-device
argmax with `next_tokens`) per step (``ttdecode.models.llama_device.DeviceDecoder``); checked on
the mock Wormhole and, for numbers, on a torch twin of its ttnn calls; not on a chip. ``"auto"`` is ``"device"`` when a device is given or
available, else ``"host"``.

Tensor parallel (``devices=N``), Megatron style as tt-metal's Llama on a T3K: device d owns KV
heads ``[d*NKV/N, (d+1)*NKV/N)`` and their query heads (Q/K/V column-parallel by KV head group),
its slice of the MLP's intermediate dimension (gate/up column-parallel), the matching columns of
the O and down projections (row-parallel, each followed by an all-reduce) and a vocabulary slice of
the LM head (all-gathered); the embedding lookup runs once on the host and every device gets the
embedded tokens (tt-metal replicates the embedding table on every chip instead). Each device keeps only its heads' KV cache; the block allocator and
the page table are shared. With N > 1 every device is a worker of a ``ttdecode.distributed``
process group (gloo), started by the decoder and kept until ``close()``.

Context parallel (``devices=N, context_parallel=C``, C dividing N): tensor parallel ``N / C`` ways
over heads as above, times C ways over the sequence. Rank r is TP rank ``r mod (N/C)`` and CP rank
``r div (N/C)``; the KV cache's blocks are dealt round-robin over the C ranks of a CP group (block j
of a user on CP rank ``j mod C`` as that rank's local block ``j div C``, ``ttdecode.distributed.context``'s
interleaved layout), so the new token's K/V is written only on the device that owns its position.
Each CP rank has its own block pool and allocator (``kv_cache.ContextParallelAllocator``): a device's
pool holds ``num_blocks`` blocks, by default ``batch * ceil(ceil(max_seq_len / block_size) / C)``,
i.e. 1/C of the whole cache within one block per user. Each device runs the op on its local blocks
(its rank's page table, local positions) with ``return_lse=True``, the C partials are
merged exactly by their LSE over the CP group (``combine_over_group``), and the O projection, MLP
and LM head are tensor parallel over the TP group (replicated across the CP group). On the device
backend context parallelism spans the whole mesh (``context_parallel == devices``, tensor parallel 1:
``ttdecode.distributed.device_context.ContextParallelDecode``, the same layout and allocator, the
merge by ttnn's all_gather and the combine program); TP x CP on one mesh is refused by name there.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ttdecode.core.formats import DataType, as_data_type
from ttdecode.models import rope
from ttdecode.models.kv_cache import KV_DTYPES, BlockAllocator, ContextParallelAllocator, PagedKVCache, append_rows

__all__ = ["LlamaDecoder", "LlamaSpec", "BACKENDS"]

log = logging.getLogger("ttdecode")

#: Most new tokens per user in one step (the op's multi-token decode).
MAX_TOKENS = 32

#: ``generate(progress=None)`` shows a progress bar for prompts and generations longer than this (per user).
PROGRESS_MIN_TOKENS = 64

#: Decoder backends (the op's, see ``ttdecode.api``).
BACKENDS = ("auto", "host", "reference", "device")


def _fail(arg: str, expected: str, got: object, exc: type = ValueError) -> Exception:
    return exc(f"{arg}: expected {expected}, got {got}")


@dataclass(frozen=True)
class LlamaSpec:
    """The shape of a Llama model (from its Hugging Face config)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Optional[dict]
    attention_bias: bool
    mlp_bias: bool

    @classmethod
    def from_config(cls, config: Any) -> "LlamaSpec":
        if getattr(config, "model_type", None) != "llama":
            raise _fail("model", "a Hugging Face Llama (config.model_type 'llama')",
                        f"model_type {getattr(config, 'model_type', None)!r}", TypeError)
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise _fail("model", "config.hidden_act 'silu' (SwiGLU)", repr(act), NotImplementedError)
        heads = int(config.num_attention_heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        scaling = getattr(config, "rope_scaling", None)
        rope.inv_freq(int(head_dim), float(config.rope_theta), scaling)  # refuses unknown scalings
        return cls(
            vocab_size=int(config.vocab_size), hidden_size=int(config.hidden_size),
            num_layers=int(config.num_hidden_layers), num_heads=heads,
            num_kv_heads=int(getattr(config, "num_key_value_heads", None) or heads), head_dim=int(head_dim),
            intermediate_size=int(config.intermediate_size), rms_norm_eps=float(config.rms_norm_eps),
            rope_theta=float(config.rope_theta), rope_scaling=dict(scaling) if scaling else None,
            attention_bias=bool(getattr(config, "attention_bias", False)),
            mlp_bias=bool(getattr(config, "mlp_bias", False)),
        )


# ---- one device's shard -------------------------------------------------------------------------


def _shard_weights(state: dict[str, torch.Tensor], spec: LlamaSpec, rank: int, world: int) -> dict[str, torch.Tensor]:
    """Device ``rank``'s float32 weights (see the module doc for the split)."""
    d, nkv_l = spec.head_dim, spec.num_kv_heads // world
    group = spec.num_heads // spec.num_kv_heads
    q_rows = slice(rank * nkv_l * group * d, (rank + 1) * nkv_l * group * d)
    kv_rows = slice(rank * nkv_l * d, (rank + 1) * nkv_l * d)
    inter = spec.intermediate_size // world
    i_rows = slice(rank * inter, (rank + 1) * inter)
    vocab_l = math.ceil(spec.vocab_size / world)
    f = lambda name: state[name].detach().to(torch.float32)  # noqa: E731
    out = {"norm": f("model.norm.weight")}
    lm = state["lm_head.weight"] if "lm_head.weight" in state else state["model.embed_tokens.weight"]
    lm_l = lm[rank * vocab_l:(rank + 1) * vocab_l].detach().to(torch.float32)
    if lm_l.shape[0] < vocab_l:  # the last slice is padded with zero rows (trimmed after the gather)
        lm_l = torch.cat([lm_l, lm_l.new_zeros(vocab_l - lm_l.shape[0], lm_l.shape[1])])
    out["lm_head"] = lm_l.contiguous()
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        out[f"{i}.in_norm"] = f(p + "input_layernorm.weight")
        out[f"{i}.post_norm"] = f(p + "post_attention_layernorm.weight")
        for name, rows in (("q", q_rows), ("k", kv_rows), ("v", kv_rows)):
            out[f"{i}.w{name}"] = f(p + f"self_attn.{name}_proj.weight")[rows].contiguous()
            if spec.attention_bias:
                out[f"{i}.b{name}"] = f(p + f"self_attn.{name}_proj.bias")[rows].contiguous()
        out[f"{i}.wo"] = f(p + "self_attn.o_proj.weight")[:, q_rows].contiguous()
        if spec.attention_bias:
            out[f"{i}.bo"] = f(p + "self_attn.o_proj.bias")
        out[f"{i}.wg"] = f(p + "mlp.gate_proj.weight")[i_rows].contiguous()
        out[f"{i}.wu"] = f(p + "mlp.up_proj.weight")[i_rows].contiguous()
        out[f"{i}.wd"] = f(p + "mlp.down_proj.weight")[:, i_rows].contiguous()
        if spec.mlp_bias:
            out[f"{i}.bg"] = f(p + "mlp.gate_proj.bias")[i_rows].contiguous()
            out[f"{i}.bu"] = f(p + "mlp.up_proj.bias")[i_rows].contiguous()
            out[f"{i}.bd"] = f(p + "mlp.down_proj.bias")
    return out


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


class LlamaShard:
    """One device's part of the model: its weights, its heads' KV caches, the step in torch + op."""

    def __init__(self, spec: LlamaSpec, weights: dict[str, torch.Tensor], *, rank: int, world: int,
                 num_blocks: int, block_size: int, kv_dtype: DataType, backend: str, program_config: Any,
                 context_parallel: int = 1) -> None:
        self.spec, self.w, self.rank, self.world = spec, weights, rank, world
        self.backend, self.program_config = backend, program_config
        self.cp = context_parallel
        self.tp = world // context_parallel
        self.tp_rank, self.cp_rank = rank % self.tp, rank // self.tp
        self.block_size = block_size
        self.nkv = spec.num_kv_heads // self.tp
        self.nq = spec.num_heads // self.tp
        self.tp_group = self.cp_group = None  # None: the default group (every device)
        if self.cp > 1:
            import torch.distributed as dist

            for c in range(self.cp):  # every rank creates every group, in the same order
                g = dist.new_group([c * self.tp + t for t in range(self.tp)])
                if c == self.cp_rank:
                    self.tp_group = g
            for t in range(self.tp):
                g = dist.new_group([c * self.tp + t for c in range(self.cp)])
                if t == self.tp_rank:
                    self.cp_group = g
        self.freq = rope.inv_freq(spec.head_dim, spec.rope_theta, spec.rope_scaling)
        self.caches = [
            (PagedKVCache(num_blocks, self.nkv, block_size, spec.head_dim, kv_dtype),
             PagedKVCache(num_blocks, self.nkv, block_size, spec.head_dim, kv_dtype))
            for _ in range(spec.num_layers)
        ]
        self.cache_bytes = sum(c.nbytes for kv in self.caches for c in kv)  # this device's K and V pools

    # collectives: identity on one device, torch.distributed on a process group
    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum over the TP group."""
        if self.tp > 1:
            import torch.distributed as dist

            dist.all_reduce(x, group=self.tp_group)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate the TP group's slices along the last dim."""
        if self.tp == 1:
            return x
        import torch.distributed as dist

        parts = [torch.empty_like(x) for _ in range(self.tp)]
        dist.all_gather(parts, x.contiguous(), group=self.tp_group)
        return torch.cat(parts, dim=-1)

    def _attention(self, q: torch.Tensor, kc: PagedKVCache, vc: PagedKVCache, s: StepInputs) -> torch.Tensor:
        """The op over this device's cache (``q [T, B, nq, D]``, every user's T tokens); with context
        parallelism over its blocks, then the LSE merge over the CP group. Returns ``[T, B, nq, D]``."""
        from ttdecode import api

        table, local = s.page_tables[self.cp_rank], list(s.local_positions[self.cp_rank])
        if self.cp == 1:
            return api.paged_scaled_dot_product_attention_decode(
                q, kc.tile_tensor(), vc.tile_tensor(), table,
                cur_pos=local, program_config=self.program_config, backend=self.backend,
            )
        from ttdecode.distributed.context import combine_over_group

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
        return merged

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
        append_pos = [[local[b] - (t - 1 - j) if b * t + j in written else -1 for b in range(users)]
                      for j in range(t)]
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
                            cos=cos_t[:, j], sin=sin_t[:, j], q=q_t[:, j], backend=self.backend)[0]
                for j in range(t)
            ])  # the op's [T, B, nq, D]
            attn = self._attention(q_rot, kc, vc, s)
            attn = attn.transpose(0, 1).reshape(bsz, self.nq * d)
            o = attn.to(torch.float32) @ self.w[f"{i}.wo"].T
            o = self.all_reduce(o)
            if f"{i}.bo" in self.w:
                o = o + self.w[f"{i}.bo"]
            x = x + o
            h = self._norm(x, self.w[f"{i}.post_norm"])
            m = torch.nn.functional.silu(self._linear(h, "g", i)) * self._linear(h, "u", i)
            m = self.all_reduce(m @ self.w[f"{i}.wd"].T)
            if f"{i}.bd" in self.w:
                m = m + self.w[f"{i}.bd"]
            x = x + m
        logits = self.all_gather_last(self._norm(x, self.w["norm"]) @ self.w["lm_head"].T)
        logits = logits[:, : spec.vocab_size]
        return torch.where(active[:, None], logits, torch.zeros(()))


# ---- worker functions (module level: picklable) ---------------------------------------------


def _worker_build(ctx: Any, spec: LlamaSpec, weights: dict, options: dict) -> int:
    torch.set_num_threads(1)
    ctx.state["llama"] = LlamaShard(spec, weights, rank=ctx.rank, world=ctx.world_size, **options)
    return ctx.state["llama"].cache_bytes


def _worker_step(ctx: Any, s: StepInputs) -> Optional[torch.Tensor]:
    logits = ctx.state["llama"].step(s)
    return logits if ctx.rank == 0 else None


# ---- the decoder ----------------------------------------------------------------------------


def _resolve_backend(backend: object, device: Any = None) -> str:
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise _fail("backend", f"one of {list(BACKENDS)}", repr(backend))
    if device is not None and backend not in ("auto", "device"):
        raise _fail("device", f"None with backend={backend!r} (a ttnn device is for backend 'device')", "a device")
    from ttdecode import ttnn_backend as device_mod

    if backend == "auto":
        return "device" if device is not None or device_mod.available() else "host"
    if backend == "device" and device is None and not device_mod.available():
        raise RuntimeError(
            "backend: 'device' needs a Tenstorrent Wormhole (ttnn.open_device), and none is available here; "
            "pass device= an open ttnn device (ttdecode.testing.mock.open_mock_device() for a dry run on the "
            "mock Wormhole); backend='host' runs the kernels on the host runtime"
        )
    return backend


class LlamaDecoder:
    """Batched greedy Llama decoding with a paged KV cache; see the module doc.

    Build with `from_hf` or `from_pretrained`. ``close()`` stops the device workers (devices > 1).
    """

    def __init__(self, spec: LlamaSpec, state: dict[str, torch.Tensor], *, batch: int, max_seq_len: int,
                 kv_dtype: Any = DataType.bfloat8_b, devices: int = 1, backend: str = "auto",
                 block_size: int = 64, num_blocks: Optional[int] = None, program_config: Any = None,
                 timeout: float = 600.0, context_parallel: int = 1, device: Any = None) -> None:
        for name, value in (("batch", batch), ("max_seq_len", max_seq_len), ("devices", devices),
                            ("block_size", block_size), ("context_parallel", context_parallel)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise _fail(name, "an int >= 1", repr(value))
        if block_size % 32:
            raise _fail("block_size", "a multiple of 32 (the op's paged cache)", block_size)
        kv = as_data_type(kv_dtype, "kv_dtype")
        if kv not in KV_DTYPES:
            raise _fail("kv_dtype", f"one of {[d.value for d in KV_DTYPES]}", kv.value)
        if spec.head_dim % 32:
            raise _fail("model", "head_dim a multiple of 32 (tiles)", spec.head_dim, NotImplementedError)
        if devices % context_parallel:
            raise _fail("context_parallel", f"a divisor of devices={devices} (C-way context parallelism inside "
                        "N devices, tensor parallel N/C ways)", context_parallel)
        tp = devices // context_parallel
        what = "" if context_parallel == 1 else f"devices / context_parallel = {tp}, "
        if spec.num_kv_heads % tp:
            raise _fail("devices", f"{what}a divisor of the model's {spec.num_kv_heads} KV heads (each device owns "
                        "whole KV head groups)", devices)
        if spec.intermediate_size % tp:
            raise _fail("devices", f"{what}a divisor of the MLP intermediate size {spec.intermediate_size}", devices)
        if math.ceil(max_seq_len / block_size) < context_parallel:
            raise _fail("context_parallel", f"at most the {math.ceil(max_seq_len / block_size)} cache blocks per user "
                        f"(max_seq_len {max_seq_len} / block_size {block_size})", context_parallel)
        self.spec = spec
        self._embed = state["model.embed_tokens.weight"].detach()  # [vocab, hidden], its own dtype
        self.batch, self.max_seq_len, self.devices = batch, max_seq_len, devices
        self.context_parallel = context_parallel
        self.kv_dtype, self.block_size = kv, block_size
        self.backend = _resolve_backend(backend, device)
        max_blocks = math.ceil(max_seq_len / block_size)
        local_blocks = math.ceil(max_blocks / context_parallel)  # blocks per user on one CP rank (at most)
        if num_blocks is None:
            num_blocks = batch * local_blocks
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 1:
            raise _fail("num_blocks", "an int >= 1", repr(num_blocks))
        self.num_blocks = num_blocks  # blocks in each device's pool
        self.allocator: Any
        if context_parallel == 1:
            self.allocator = BlockAllocator(batch, max_seq_len, block_size, num_blocks)
        else:
            self.allocator = ContextParallelAllocator(batch, max_seq_len, block_size, num_blocks, context_parallel)
        options = dict(num_blocks=num_blocks, block_size=block_size, kv_dtype=kv, backend=self.backend,
                       program_config=program_config)
        self._pool = None
        self._shard: Optional[LlamaShard] = None
        self._device: Any = None  # llama_device.DeviceDecoder (backend 'device')
        self._own_device: Any = None  # a device the decoder opened (closed by close())
        if self.backend == "device":
            per_device = [self._build_device(spec, state, device, num_blocks, program_config)] * devices
        elif devices == 1:
            self._shard = LlamaShard(spec, _shard_weights(state, spec, 0, 1), rank=0, world=1, **options)
            per_device = [self._shard.cache_bytes]
        else:
            from ttdecode.distributed import WorkerPool

            self._pool = WorkerPool(devices, label="device", timeout=timeout)
            options["context_parallel"] = context_parallel
            shards = [(spec, _shard_weights(state, spec, r % tp, tp), options) for r in range(devices)]
            per_device = self._pool.run(_worker_build, shards)
        #: bytes of the K and V pools of one device (every device holds the same) and over all devices
        self.cache_bytes_per_device = max(per_device)
        self.cache_bytes = sum(per_device)
        cp_note = (f", pools of {local_blocks} per user on each of the {context_parallel} context-parallel ranks"
                   if context_parallel > 1 else "")
        log.info(
            "ttdecode llama: KV cache %.2f MiB per device = %d layers x K,V x %d blocks x %d KV heads x %d positions "
            "x head_dim %d in %s (%.2f MiB over %d device(s); batch %d, max_seq_len %d -> %d blocks per user%s); "
            "backend %s",
            self.cache_bytes_per_device / 2**20, spec.num_layers, num_blocks, spec.num_kv_heads // tp, block_size,
            spec.head_dim, kv.value, self.cache_bytes / 2**20, devices, batch, max_seq_len, max_blocks, cp_note,
            self.backend,
        )

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def from_hf(cls, model: Any, **options: Any) -> "LlamaDecoder":
        """From a ``transformers`` ``LlamaForCausalLM`` (weights as they are; see the class doc)."""
        try:
            from transformers import LlamaForCausalLM
        except ImportError as e:  # pragma: no cover - transformers is in the test extra
            raise ImportError("from_hf needs the 'transformers' package (pip install 'ttdecode[llama]')") from e
        if not isinstance(model, LlamaForCausalLM):
            raise _fail("model", "a transformers LlamaForCausalLM", type(model).__name__, TypeError)
        spec = LlamaSpec.from_config(model.config)
        return cls(spec, model.state_dict(), **options)

    @classmethod
    def from_pretrained(cls, path: Any, **options: Any) -> "LlamaDecoder":
        """From a local Hugging Face checkpoint directory (config.json + safetensors); no network."""
        import json
        from pathlib import Path

        root = Path(path)
        cfg_file = root / "config.json"
        if not cfg_file.is_file():
            raise _fail("path", "a checkpoint directory with config.json", str(root), FileNotFoundError)
        model_type = json.loads(cfg_file.read_text()).get("model_type")
        if model_type != "llama":
            raise _fail("path", "a Llama checkpoint (config.json model_type 'llama')", repr(model_type), TypeError)
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM.from_pretrained(str(root), local_files_only=True)
        return cls.from_hf(model, **options)

    def _build_device(self, spec: LlamaSpec, state: dict[str, torch.Tensor], device: Any, num_blocks: int,
                      program_config: Any) -> int:
        """The decoder on a Wormhole (`ttdecode.models.llama_device.DeviceDecoder`); returns its cache bytes."""
        from ttdecode.core import formats
        from ttdecode.models.llama_device import DeviceDecoder

        cp = self.context_parallel
        if cp not in (1, self.devices):
            raise _fail("context_parallel", f"1 or devices={self.devices} with backend 'device' (context parallel "
                        "over the whole mesh; tensor x context parallelism on one mesh is not built, use "
                        "backend='host')", cp, NotImplementedError)
        if device is None:
            if self.devices != 1:
                raise _fail("device", f"an open 1 x {self.devices} ttnn mesh (ttnn.open_mesh_device) for devices="
                            f"{self.devices} with backend 'device'", "None", TypeError)
            from ttdecode.ttnn_backend import require_ttnn

            device = self._own_device = require_ttnn().open_device(device_id=0)
        n = int(device.get_num_devices()) if hasattr(device, "get_num_devices") else 1
        if n != self.devices:
            how = "tensor" if cp == 1 else "context"
            raise _fail("devices", f"the device's {n} chip(s) ({how} parallel over the whole mesh)", self.devices)
        self._device = DeviceDecoder(spec, state, device=device, batch=self.batch, max_seq_len=self.max_seq_len,
                                     block_size=self.block_size, num_blocks=num_blocks, kv_dtype=self.kv_dtype,
                                     program_config=program_config, context_parallel=cp)
        tp = self.devices // cp
        tiles = num_blocks * (spec.num_kv_heads // tp) * (self.block_size // 32) * (spec.head_dim // 32)
        return 2 * spec.num_layers * tiles * formats.tile_size(self.kv_dtype)

    def close(self) -> None:
        """Stop the device workers (devices > 1); free the device tensors (backend 'device') and close a
        device the decoder opened itself. Idempotent."""
        if self._pool is not None:
            self._pool.close()
        if self._device is not None:
            self._device.close()
            self._device = None
        if self._own_device is not None:
            from ttdecode.ttnn_backend import require_ttnn

            require_ttnn().close_device(self._own_device)
            self._own_device = None

    def __enter__(self) -> "LlamaDecoder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- decoding --------------------------------------------------------------------------

    def _check_step(self, tokens: object, positions: object) -> tuple[torch.Tensor, tuple[int, ...]]:
        """tokens int ``[B]`` or ``[B, T]`` (returned as ``[B, T]``), positions int ``[B]``."""
        def ints(name: str, x: object, shape: str) -> torch.Tensor:
            if not isinstance(x, torch.Tensor) or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
                raise _fail(name, f"an int64 tensor {shape}",
                            f"{type(x).__name__}" + (f" {x.dtype}" if isinstance(x, torch.Tensor) else ""), TypeError)
            return x.detach().to("cpu", torch.int64)

        tok = ints("tokens", tokens, f"[{self.batch}] or [{self.batch}, T]")
        pos = ints("positions", positions, f"[{self.batch}]")
        if tok.dim() not in (1, 2) or tok.shape[0] != self.batch or (tok.dim() == 2 and not 1 <= tok.shape[1] <= MAX_TOKENS):
            raise _fail("tokens", f"shape [{self.batch}] or [{self.batch}, T] with 1 <= T <= {MAX_TOKENS} (one "
                        f"entry per user slot, batch={self.batch})", list(tok.shape))
        if pos.dim() != 1 or pos.shape[0] != self.batch:
            raise _fail("positions", f"shape [{self.batch}] (one entry per user slot, batch={self.batch})",
                        list(pos.shape))
        tok = tok.reshape(self.batch, -1)
        t = tok.shape[1]
        if t > 1 and self.context_parallel > 1:
            raise _fail("tokens", f"one token per user [{self.batch}] with context_parallel="
                        f"{self.context_parallel} (multi-token steps are tensor parallel only)",
                        list(tok.shape), NotImplementedError)
        for b in range(self.batch):
            p = int(pos[b])
            if p < -1:
                raise _fail(f"positions[{b}]", "-1 (idle) or a position >= 0", p)
            if p + t - 1 >= self.max_seq_len:
                what = "a position" if t == 1 else f"a first position (of {t} tokens) with position + {t - 1}"
                raise _fail(f"positions[{b}]", f"{what} < max_seq_len={self.max_seq_len}", p)
            if p >= 0:
                bad = (tok[b] < 0) | (tok[b] >= self.spec.vocab_size)
                if bool(bad.any()):
                    j = int(bad.nonzero()[0])
                    name = f"tokens[{b}]" if t == 1 and tokens.dim() == 1 else f"tokens[{b}, {j}]"
                    raise _fail(name, f"a token id in 0..{self.spec.vocab_size - 1}", int(tok[b, j]))
        return tok, tuple(int(p) for p in pos)

    def next_tokens(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One greedy decode step of one token per user (``tokens``, ``positions`` int64 ``[batch]`` as
        in `step`): the argmax of each user's logits, int64 ``[batch]`` (-1 for idle slots). On the
        device backend the argmax runs on the device and only the ids are read back."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1:
            raise _fail("tokens", f"an int64 tensor [{self.batch}] (one token per user)",
                        f"{type(tokens).__name__} {list(getattr(tokens, 'shape', []))}", TypeError)
        return self._step(tokens, positions, greedy=True)

    def _device_steps(self, tok: torch.Tensor, pos: tuple[int, ...], table: Any,
                      greedy: bool) -> torch.Tensor:
        """Tokens ``[B, T]`` at positions ``pos`` through the device decoder, one token index a step:
        logits ``[B, T, vocab]`` (idle rows zero) or, greedy (T = 1), the argmax ids ``[B]`` (-1 idle)."""
        active = torch.tensor(pos) >= 0
        outs = []
        for j in range(tok.shape[1]):
            ids = torch.where(active, tok[:, j], 0)
            at = [p + j if p >= 0 else -1 for p in pos]
            out = self._device.step(ids, at, table, greedy=greedy)
            outs.append(torch.where(active, out, -1) if greedy else torch.where(active[:, None], out, 0.0))
        return outs[0] if greedy else torch.stack(outs, dim=1)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One decode step. ``tokens`` int64 ``[batch]`` (one token per user) or ``[batch, T]`` (T <= 32
        new tokens per user, e.g. the last accepted token and T - 1 draft tokens to verify);
        ``positions`` int64 ``[batch]``: the position of each user's (first) token, its T tokens at
        ``positions[b] .. positions[b] + T - 1``; -1 = idle slot (untouched, zero logits); a user at
        position 0 (re)starts its sequence in the slot, one below its cache length rewinds it.

        Returns float32 logits ``[batch, vocab]``, or ``[batch, T, vocab]`` for 2-D tokens (row t
        predicts the token after token t). Every check runs before any cache is written.

        On the device backend T tokens per user run as T one-token device steps (one allocation)."""
        return self._step(tokens, positions)

    def _step(self, tokens: torch.Tensor, positions: torch.Tensor, greedy: bool = False) -> torch.Tensor:
        tok, pos = self._check_step(tokens, positions)
        t = tok.shape[1]
        cp, bs = self.context_parallel, self.block_size
        if t == 1:
            plan = self.allocator.plan(pos)  # raises (exhausted pool) before any cache is written
        else:
            from ttdecode.models.kv_cache import check_positions

            check_positions(pos, self.allocator.lengths)
            plan = self.allocator.plan_blocks(
                [None if p < 0 else (p == 0, (p + t - 1) // bs + 1) for p in pos],
                [self.allocator.lengths[b] if p < 0 else p + t for b, p in enumerate(pos)])
        shape = (self.batch, self.spec.vocab_size) if tokens.dim() == 1 else (self.batch, t, self.spec.vocab_size)
        if all(p < 0 for p in pos):
            return torch.full((self.batch,), -1, dtype=torch.int64) if greedy else torch.zeros(shape)
        if self._device is not None:
            # context parallel: one page table per device (its pool's local blocks)
            table = self.allocator.page_table(plan) if cp == 1 else self.allocator.page_tables(plan)
            out = self._device_steps(tok, pos, table, greedy)
            self.allocator.commit(plan)
            return out if greedy else out.reshape(shape)
        if cp == 1:
            tables: tuple[torch.Tensor, ...] = (self.allocator.page_table(plan),)
            local = (tuple(p + t - 1 if p >= 0 else -1 for p in pos),)  # each user's last token
        else:
            tables = self.allocator.page_tables(plan)
            local = tuple(tuple(self.allocator.local_position(c, p) for p in pos) for c in range(cp))
        # cache rows written: token row b * T + j at position p + j (with CP: on the rank owning its block)
        writes = tuple(
            tuple((b * t + j, int(tables[c][b, (p + j if cp == 1 else local[c][b]) // bs]),
                   (p + j if cp == 1 else local[c][b]) % bs)
                  for b, p in enumerate(pos) if p >= 0 for j in range(t) if ((p + j) // bs) % cp == c)
            for c in range(cp)
        )
        ids = torch.where(torch.tensor(pos)[:, None] >= 0, tok, 0).reshape(-1)
        hidden = self._embed[ids].to(torch.float32)
        s = StepInputs(hidden=hidden, positions=pos, local_positions=local, page_tables=tables, writes=writes,
                       num_tokens=t)
        if self._pool is None:
            logits = self._shard.step(s)
        else:
            logits = self._pool.run_all(_worker_step, s)[0]
        self.allocator.commit(plan)
        if greedy:
            return torch.where(torch.tensor(pos) >= 0, logits.argmax(-1), -1)
        return logits.reshape(shape)

    def _max_step_tokens(self) -> int:
        """Most tokens per user one `step` takes: `MAX_TOKENS`, or 1 with context parallelism (its
        steps are one token per user)."""
        return 1 if self.context_parallel > 1 else MAX_TOKENS

    def _check_prompts(self, input_ids: object) -> tuple[list[torch.Tensor], bool]:
        """``input_ids`` as one int64 tensor per user, and whether they came as a list (ragged)."""
        what = "an int64 tensor [B, P] or a list of B 1-D int sequences (prompts of different lengths)"
        if isinstance(input_ids, torch.Tensor):
            if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dim() != 2:
                raise _fail("input_ids", "an int64 tensor [B, P]",
                            f"{type(input_ids).__name__} {input_ids.dtype} {list(input_ids.shape)}", TypeError)
            ids = input_ids.detach().to("cpu", torch.int64)
            return list(ids), False
        if not isinstance(input_ids, (list, tuple)):
            raise _fail("input_ids", what, type(input_ids).__name__, TypeError)
        prompts = []
        for b, p in enumerate(input_ids):
            x = (p if isinstance(p, torch.Tensor) else None if not isinstance(p, (list, tuple))
                 else torch.as_tensor(p) if len(p) else torch.zeros(0, dtype=torch.int64))
            if x is None or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool or x.dim() != 1:
                got = (f"{type(p).__name__} {x.dtype} {list(x.shape)}" if x is not None else type(p).__name__)
                raise _fail(f"input_ids[{b}]", "a 1-D int tensor or list of token ids", got, TypeError)
            prompts.append(x.detach().to("cpu", torch.int64))
        return prompts, True

    def generate(self, input_ids: Any, max_new_tokens: int, eos_token_id: Optional[int] = None,
                 return_logits: bool = False, *, prompt_chunk: int = MAX_TOKENS,
                 progress: Optional[bool] = None) -> Any:
        """Greedy decoding of ``input_ids`` int ``[B', P]`` (B' <= batch) in slots 0..B'-1 (their
        caches restart; other slots are left as they are). Returns int64 ``[B', P + N]`` with
        N <= ``max_new_tokens``: a user that produced ``eos_token_id`` is padded with it, and
        decoding stops when every user did. ``return_logits``: also return the float32 logits
        ``[B', N, vocab]`` each new token was chosen from.

        Prompts of different lengths: ``input_ids`` a list of B' 1-D int sequences; then the result
        is a list of int64 ``[P_b + N]`` tensors (the logits stay ``[B', N, vocab]``).

        The prompts go in multi-token steps of up to ``prompt_chunk`` (<= 32) tokens per user (one
        per user with context parallelism), every user advancing by up to that many of its own
        tokens in each step: a 3000-token prompt takes 94 steps, not 3000. In a step whose chunk is
        longer than what a user has left, that user's chunk is padded with its last token (the
        padded rows stay within the cache blocks the user holds at the end anyway; its next step
        rewinds over them); a user whose prompt is done idles (position -1) until every prompt is
        in, then all decode one token per step at their own positions. ``self.generate_steps`` is
        then (prompt steps, decode steps) of the call.

        ``progress``: a progress bar on stderr (tqdm when installed) for the prompt and for the
        generation; None (default): only for those longer than 64 tokens (per user), True: always,
        False: never."""
        prompts, ragged = self._check_prompts(input_ids)
        nb = len(prompts)
        if not 1 <= nb <= self.batch:
            raise _fail("input_ids", f"1..{self.batch} sequences (batch={self.batch})", nb)
        lens = [len(p) for p in prompts]
        for b, n in enumerate(lens):
            if n < 1:
                raise _fail(f"input_ids[{b}]" if ragged else "input_ids", "a prompt of at least 1 token", n)
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
            raise _fail("max_new_tokens", "an int >= 0", repr(max_new_tokens))
        for b, n in enumerate(lens):
            if n + max_new_tokens > self.max_seq_len:
                which = f" of input_ids[{b}]" if ragged else ""
                raise _fail("max_new_tokens", f"P + N <= max_seq_len={self.max_seq_len} (P={n}{which})",
                            max_new_tokens)
        for b, p in enumerate(prompts):
            bad = (p < 0) | (p >= self.spec.vocab_size)
            if bad.any():
                t = int(bad.nonzero()[0])
                raise _fail(f"input_ids[{b}, {t}]", f"a token id in 0..{self.spec.vocab_size - 1}", int(p[t]))
        if not isinstance(prompt_chunk, int) or isinstance(prompt_chunk, bool) or not 1 <= prompt_chunk <= MAX_TOKENS:
            raise _fail("prompt_chunk", f"an int in 1..{MAX_TOKENS}", repr(prompt_chunk))
        if progress is not None and not isinstance(progress, bool):
            raise _fail("progress", "None (auto), True or False", repr(progress), TypeError)
        show = (lambda n: n > PROGRESS_MIN_TOKENS) if progress is None else (lambda n: progress)
        chunk = min(prompt_chunk, self._max_step_tokens())
        n_new = max_new_tokens
        # a padded chunk stays below the end of the last cache block the user will hold anyway
        bs = self.block_size
        ends = [min(self.max_seq_len, -(-max(n + n_new - 1, n) // bs) * bs) for n in lens]
        fed = [0] * nb  # prompt tokens in the cache
        last: list[Optional[torch.Tensor]] = [None] * nb  # logits of each user's last prompt token
        prompt_steps = decode_steps = 0
        bar = _Progress(sum(lens), "prompt", show(max(lens)))
        try:
            while True:
                left = [lens[b] - fed[b] for b in range(nb)]
                users = [b for b in range(nb) if left[b] > 0]
                if not users:
                    break
                t = min(chunk, max(left[b] for b in users))
                for b in users:
                    if left[b] < t:
                        t = min(t, ends[b] - fed[b])  # >= left[b]
                tokens = torch.zeros(self.batch, t, dtype=torch.int64)
                positions = torch.full((self.batch,), -1, dtype=torch.int64)
                for b in users:
                    n, p = min(t, left[b]), fed[b]
                    tokens[b, :n] = prompts[b][p:p + n]
                    tokens[b, n:] = prompts[b][p + n - 1]  # padding (rewound by the user's next step)
                    positions[b] = p
                logits = self.step(tokens, positions)  # [batch, t, vocab]
                prompt_steps += 1
                for b in users:
                    n = min(t, left[b])
                    fed[b] += n
                    if fed[b] == lens[b]:
                        last[b] = logits[b, n - 1]
                bar.update(sum(min(t, left[b]) for b in users))
        finally:
            bar.close()
        out: list[torch.Tensor] = []
        done = torch.zeros(nb, dtype=torch.bool)
        tokens1 = torch.zeros(self.batch, dtype=torch.int64)
        positions1 = torch.full((self.batch,), -1, dtype=torch.int64)
        start = torch.tensor(lens, dtype=torch.int64)
        logits1 = torch.stack(last)  # [nb, vocab]
        chosen_from = []
        bar = _Progress(n_new, "generate", show(n_new))
        try:
            for n in range(n_new):
                chosen_from.append(logits1)
                nxt = logits1.argmax(-1)
                if eos_token_id is not None:
                    nxt = torch.where(done, torch.tensor(eos_token_id), nxt)
                    done |= nxt == eos_token_id
                out.append(nxt[:, None])
                bar.update(1)
                if bool(done.all()) or n == n_new - 1:
                    break
                tokens1[:nb] = nxt
                positions1[:nb] = torch.where(done, -1, start + n)
                logits1 = self.step(tokens1, positions1)[:nb]
                decode_steps += 1
        finally:
            bar.close()
        self.generate_steps = (prompt_steps, decode_steps)
        new = torch.cat(out, dim=1) if out else torch.zeros(nb, 0, dtype=torch.int64)
        ids_out: Any = ([torch.cat([p, new[b]]) for b, p in enumerate(prompts)] if ragged
                        else torch.cat([torch.stack(prompts), new], dim=1))
        if return_logits:
            shape = (nb, 0, self.spec.vocab_size)
            return ids_out, torch.stack(chosen_from, dim=1) if chosen_from else torch.zeros(shape)
        return ids_out


class _Progress:
    """A progress bar of ``total`` tokens on stderr: tqdm when installed, else a one-line counter;
    nothing when not ``enabled``."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        import sys

        self.total, self.desc, self.n = total, desc, 0
        self._bar: Any = None
        self._plain = False
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            self._plain = True
            self._t0 = self._shown = time.perf_counter()
            self._draw()
            return
        self._bar = tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, dynamic_ncols=True)

    def _draw(self) -> None:
        import sys

        seconds = time.perf_counter() - self._t0
        rate = f", {self.n / seconds:.1f} tok/s" if seconds > 0 and self.n else ""
        sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} tok [{seconds:.1f} s{rate}]")
        sys.stderr.flush()

    def update(self, n: int) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._plain and time.perf_counter() - self._shown >= 0.2:
            self._shown = time.perf_counter()
            self._draw()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._plain:
            import sys

            self._draw()
            sys.stderr.write("\n")
        self._bar, self._plain = None, False
