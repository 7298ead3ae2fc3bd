"""Tensor parallel (and context parallel) split of the host decoder's Llama: which weights each
device holds, its process groups and the collectives over them.

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
backend (``ttdecode.distributed.device_context.ContextParallelDecode``, the same layout and allocator,
the merge by ttnn's all_gather and the combine program) context parallelism spans the whole mesh
(``context_parallel == devices``, tensor parallel 1) or one axis of a 2-D mesh, tensor parallelism
the other (``sharding.mesh_axes``: a T3K 2 x 4 with C = 4, CP along the rows' 4 chips, TP over the 2
rows; a Galaxy 4 x 8 with C = 4, CP along axis 0, TP 8 along axis 1), the collectives of each along
its axis (``cluster_axis``); tensor parallelism alone on a 2-D mesh runs each collective along both
axes in turn (``llama_device.DeviceDecoder.tp_axes``).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.distributed as dist

from ttdecode.models.llama_spec import LlamaSpec

__all__ = ["shard_weights", "process_groups", "all_reduce", "all_gather_last"]


def shard_weights(state: dict[str, torch.Tensor], spec: LlamaSpec, rank: int, world: int) -> dict[str, torch.Tensor]:
    """Device ``rank``'s float32 weights of ``world`` (the split above), by name: ``norm``, ``lm_head``
    ``[ceil(vocab / world), hidden]`` (zero rows pad the last slice) and per layer ``i``: ``{i}.in_norm``,
    ``{i}.post_norm``, ``{i}.wq/wk/wv`` (rows of its KV head groups), ``{i}.wo`` (their columns),
    ``{i}.wg/wu`` (rows of its intermediate slice), ``{i}.wd`` (its columns), and the biases the spec has."""
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


def process_groups(tp: int, cp: int, tp_rank: int, cp_rank: int) -> tuple[Optional[Any], Optional[Any]]:
    """(TP group, CP group) of rank ``cp_rank * tp + tp_rank`` among ``tp * cp`` ranks: the ranks of its
    CP rank, and the ranks of its TP rank. ``(None, None)`` (the default group, every device) when
    ``cp == 1``. Every rank creates every group, in the same order (torch.distributed's rule)."""
    tp_group = cp_group = None
    if cp > 1:
        for c in range(cp):
            g = dist.new_group([c * tp + t for t in range(tp)])
            if c == cp_rank:
                tp_group = g
        for t in range(tp):
            g = dist.new_group([c * tp + t for c in range(cp)])
            if t == tp_rank:
                cp_group = g
    return tp_group, cp_group


def all_reduce(x: torch.Tensor, tp: int, group: Optional[Any]) -> torch.Tensor:
    """Sum of ``x`` over the TP group of ``tp`` ranks, in place (identity when ``tp == 1``)."""
    if tp > 1:
        dist.all_reduce(x, group=group)
    return x


def all_gather_last(x: torch.Tensor, tp: int, group: Optional[Any]) -> torch.Tensor:
    """The TP group's ``tp`` slices of ``x`` concatenated along the last dim (``x`` itself when ``tp == 1``)."""
    if tp == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(tp)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=-1)
