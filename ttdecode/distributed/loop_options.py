"""The options of the context-parallel decode loop (`device_context.ContextParallelDecode`): sliding
window, attention sink, several tokens per user in one step, MLA; each exact over the loop's
interleaved block shards (a user's block j on device ``j mod n``), with one SPMD program per op.

Why each is exact (``n`` devices, ``bs`` = block_size, a user's new token at global position p):

* **Sliding window W** (each token attends its keys ``max(0, p-W+1) .. p``). The layout repeats every
  ``n * bs`` positions and each device holds ``bs`` of every period, so when ``W`` is a multiple of
  ``n * bs`` every device holds exactly ``W / n`` keys of any full window, and they are the last
  ``W / n`` of its local keys up to p (local order is global order). A window not yet full
  (``p < W``) covers every key up to p; a device then holds at most ``W / n`` of them. So FlashDecode
  on every shard with the one local window ``W / n`` attends exactly the device's keys of the global
  window (the window's first key is global: it is the device's ``W/n``-th last key). A device holding
  no key up to p (early positions) is the kernels' skipped user: zeros and LSE -inf, weight 0 in the
  merge. Any other W is refused by name: the local window would differ per user and device (between
  0 and ``bs`` keys apart), and the window is a compile-time argument of the one program.
* **Attention sink** (per-head logit s, scaled as the keys' logits: ``exp(scale * s)`` in the softmax
  denominator once). The shards run without it; the combine merges one more partial: output 0 and
  LSE ``s' = scale * s``. The merge computes
  ``lse = log(sum_d exp(lse_d) + exp(s'))`` and ``out = sum_d exp(lse_d - lse) out_d`` (+ ``exp(s' -
  lse) * 0``): with ``exp(lse_d) = Z_d`` (device d's sum of exp(logits)) and ``out_d = N_d / Z_d``,
  that is ``sum_d N_d / (sum_d Z_d + exp(s'))``, the one-device sink softmax, and its LSE -- exactly,
  whatever shards hold the user's keys (a skipped row: zeros, its LSE s' where one device gives -inf).
* **T tokens per user** (Q ``[T, B, NH, D]``; token t at ``p - (T-1) + t``, attending its keys up to
  its own position). The T positions may sit in two blocks on two devices, and a device holding
  neither sees all T tokens attend the same local prefix, so the kernels' multi-token convention
  (token t's last key ``cur_pos - (T-1-t)``, consecutive local keys) does not hold on a shard. The
  loop runs the ``R = T * B`` query rows as R one-token users (row ``t * B + b``: token t of user b,
  user b's page table), each with its own local position per device (`token_positions`,
  ``sharding.device_step_positions``): every row is a one-token decode, exact as the loop's one-token
  step is, and the causal structure across the T tokens is each row's own global position. The
  append runs once per token (T launches of the one-token program: the T rows of a user may share a
  cache tile, which one launch must not write twice).
* **MLA** (``head_dim_v`` Dv: V = K[..., :Dv], no V cache): the shards run the kernels' MLA read, the
  combine merges ``[.., Dv]`` partials. The fused RoPE + append writes K and V rows of whole heads
  and is refused with MLA by name (`MLA_APPEND`): a latent cache's rows come from the caller's own
  write into ``caches[layer][0]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

__all__ = ["LoopOptions", "loop_options", "token_positions", "sink_partial", "MLA_APPEND", "MAX_TOKENS"]

_NAME = "ContextParallelDecode"

#: Most new tokens per user in one step (the FlashDecode kernels' multi-token bound).
MAX_TOKENS = 32

#: Why the loop's append refuses MLA (see the module doc).
MLA_APPEND = ("the fused RoPE + append (ttdecode.ops.rotary_append) writes K and V rows of whole heads; an MLA "
              "cache holds latent rows only (V = K[..., :Dv], RoPE on its last dims), which this loop does not "
              "write: write them into caches[layer][0] with your own append")


@dataclass(frozen=True)
class LoopOptions:
    """The loop's checked options. ``tokens``: new tokens per user per step; ``window``: the global
    sliding window W (None: none) and ``local_window`` = W / n, the one every shard runs;
    ``sink``: float32 ``[NH]`` per-head logits as the kernels read them (bfloat16 values), or None;
    ``head_dim_v``: Dv with MLA, else None."""

    tokens: int = 1
    window: Optional[int] = None
    local_window: Optional[int] = None
    sink: Optional[torch.Tensor] = None
    head_dim_v: Optional[int] = None


def _int_at_least(name: str, value: Any, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{_NAME}: argument '{name}': expected an int >= {low}, got {value!r}")
    return value


def _sink_logits(sink: Any, num_heads: int) -> torch.Tensor:
    """The sink as float32 ``[NH]`` bfloat16 values (``[NH]`` or ``[NH, 32]`` with the logit in column 0)."""
    if not isinstance(sink, torch.Tensor) or not sink.is_floating_point():
        got = f"{sink.dtype} tensor" if isinstance(sink, torch.Tensor) else type(sink).__name__
        raise TypeError(f"{_NAME}: argument 'attention_sink': expected a float torch tensor [NH={num_heads}] or "
                        f"[NH, 32], got {got}")
    if tuple(sink.shape) not in ((num_heads,), (num_heads, 32)):
        raise ValueError(f"{_NAME}: argument 'attention_sink': expected shape [{num_heads}] or [{num_heads}, 32], "
                         f"got {list(sink.shape)}")
    column = sink if sink.dim() == 1 else sink[:, 0]
    return column.to(torch.bfloat16).to(torch.float32).contiguous()


def loop_options(*, devices: int, block_size: int, num_heads: int, head_dim: int, tokens: int = 1,
                 sliding_window_size: Optional[int] = None, attention_sink: Any = None,
                 head_dim_v: Optional[int] = None) -> LoopOptions:
    """Check the loop's options against its mesh and shapes (module doc); refuse by name what is not exact."""
    tokens = _int_at_least("tokens", tokens, 1)
    if tokens > MAX_TOKENS:
        raise ValueError(f"{_NAME}: argument 'tokens': expected at most {MAX_TOKENS} new tokens per user, got {tokens}")
    window = local = None
    if sliding_window_size is not None:
        window = _int_at_least("sliding_window_size", sliding_window_size, 1)
        period = devices * block_size
        if window % period:
            raise NotImplementedError(
                f"{_NAME}: argument 'sliding_window_size': expected a multiple of devices x block_size = "
                f"{devices} x {block_size} = {period} (then every device holds exactly W / {devices} keys of any "
                f"full window, and the one local window W / {devices} is exact on every shard), got {window}: "
                f"another window's local length differs per user and device, and the window is a compile-time "
                f"argument of the one SPMD program; use a block_size or window that divides, or the host backend")
        local = window // devices
    sink = None if attention_sink is None else _sink_logits(attention_sink, num_heads)
    if head_dim_v is not None:
        _int_at_least("head_dim_v", head_dim_v, 32)
        if head_dim_v % 32 or head_dim_v >= head_dim:
            raise ValueError(f"{_NAME}: argument 'head_dim_v': expected a multiple of 32 below head_dim={head_dim} "
                             f"(MLA: V = K[..., :Dv]), got {head_dim_v}")
    return LoopOptions(tokens=tokens, window=window, local_window=local, sink=sink, head_dim_v=head_dim_v)


def token_positions(positions: Sequence[int], tokens: int) -> list[int]:
    """The global positions of a step's ``R = T * B`` query rows, row ``t * B + b`` at ``p_b - (T-1) + t``
    (``positions [B]``: each user's newest token, -1: the user is skipped, all its rows -1).
    Refuses a user whose first token would fall before position 0."""
    pos = [int(p) for p in positions]
    for b, p in enumerate(pos):
        if 0 <= p < tokens - 1:
            raise ValueError(f"{_NAME}: argument 'positions': positions[{b}]: expected -1 or a position >= "
                             f"tokens - 1 = {tokens - 1} (the newest of {tokens} tokens), got {p}")
    return [p - (tokens - 1) + t if p >= 0 else -1 for t in range(tokens) for p in pos]


def sink_partial(sink: torch.Tensor, scale: float, rows: int, head_dim_v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sink as the combine's extra partial for ``rows`` query rows: output zeros
    ``[1, rows, NH, Dv]`` and LSE ``[1, rows, NH, 1]`` = ``scale`` x each head's logit (float32)."""
    nh = sink.shape[0]
    out = torch.zeros(1, rows, nh, head_dim_v)
    logit = (sink.to(torch.float64) * scale).to(torch.float32)
    lse = logit.reshape(1, 1, nh, 1).expand(1, rows, nh, 1).contiguous()
    return out, lse
