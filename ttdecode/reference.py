"""Float64 (or float32) reference for decode-phase attention (FlashDecode semantics).

This module is the numerical ground truth of the project: every backend is compared
against :func:`sdpa_decode_reference`. It works on plain, already-dequantized torch
tensors and computes in ``dtype`` (float64 by default).

Shapes (``B`` users, ``NH`` query heads, ``NKV`` KV heads, ``S`` cache positions,
``D`` head dim of Q/K, ``Dv`` head dim of V):

* ``q``: ``[T, B, NH, D]`` (``T`` new tokens per user; 1 for plain decode)
* ``k``: ``[B, NKV, S, D]``; with ``share_cache``: ``[1, NKV, S, D]`` (every user
  reads KV batch 0); paged: ``[num_blocks, NKV, block_size, D]`` with
  ``page_table`` ``[B, max_blocks]`` (integer), ``S = max_blocks * block_size``.
* ``v``: like ``k`` with last dim ``Dv``, or ``None`` for MLA (then
  ``V = k[..., :head_dim_v]``).
* output: ``[T, B, NH, Dv]``; LSE: ``[T, B, NH]``.

Semantics:

* GQA/MQA/MHA: ``NH % NKV == 0``; query head ``n`` uses KV head ``n // (NH // NKV)``.
* Causal (default): user ``b`` attends positions ``0..cur_pos[b]``; with a sliding
  window ``W`` only positions ``p > cur_pos[b] - W`` (the last ``W`` positions,
  ``cur_pos[b]`` included). ``cur_pos[b] == -1`` skips the user: its output is all
  zeros and its LSE is ``-inf``. Cache contents outside the attended window are never
  used (they may hold anything, NaN included).
* Multi-token (``T > 1``, speculative decoding): ``cur_pos[b]`` is the position of user b's last
  new token (at least ``T - 1``, or ``-1``); token ``j`` sits at ``cur_pos[b] - (T - 1 - j)`` and
  attends exactly as a one-token decode at that position (causal among the new tokens; with a
  sliding window, its own window). Non-causal: every token attends all positions.
* Non-causal: every position ``0..S-1`` is attended, with an optional additive mask
  ``attn_mask`` ``[B or 1, 1, NH, S]`` (``-inf`` entries exclude a position).
* Logits are ``scale * q.k`` (``scale`` defaults to ``1/sqrt(D)``) plus the mask.
* Attention sink: one logit per query head (``[NH]`` or ``[NH, 32]`` with the value in
  column 0), multiplied by ``scale``; it joins the softmax denominator only.
* LSE is the natural log of the softmax denominator in the logit domain,
  ``log(sum_j exp(logit_j) [+ exp(scale * sink)])``. Partial results over disjoint key
  ranges merge exactly with :func:`merge_partials`.
* A row with no attended key and no sink (a skipped user, or a fully ``-inf`` mask)
  yields output zeros and LSE ``-inf``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Tuple, Union

import torch

__all__ = ["sdpa_decode_reference", "merge_partials"]

_NAME = "sdpa_decode_reference"

Positions = Union[Iterable[int], torch.Tensor]


def _fail(arg: str, expected: str, got: object, exc: type = ValueError) -> Exception:
    """Build the uniform error: which argument, what was expected, what came."""
    return exc(f"{_NAME}: argument '{arg}': expected {expected}, got {got}")


def _shape(t: torch.Tensor) -> list:
    return list(t.shape)


def _check_float_tensor(arg: str, t: object, ndim: int) -> torch.Tensor:
    """Check that ``t`` is a floating-point torch tensor with ``ndim`` dimensions."""
    if not isinstance(t, torch.Tensor):
        raise _fail(arg, "a torch.Tensor", type(t).__name__, TypeError)
    if not t.is_floating_point():
        raise _fail(arg, "a floating-point tensor", f"dtype {t.dtype}", TypeError)
    if t.dim() != ndim:
        raise _fail(arg, f"a {ndim}-D tensor", f"shape {_shape(t)}")
    return t


def _check_int(arg: str, value: object, minimum: int) -> int:
    """Check that ``value`` is an integer (not a bool) that is at least ``minimum``."""
    if isinstance(value, bool):
        raise _fail(arg, "an integer", repr(value), TypeError)
    try:
        ivalue = operator.index(value)
    except TypeError:
        raise _fail(arg, "an integer", repr(value), TypeError) from None
    if ivalue < minimum:
        raise _fail(arg, f"an integer >= {minimum}", ivalue)
    return ivalue


def _positions(cur_pos: Positions, batch: int, seq_len: int) -> torch.Tensor:
    """Validate ``cur_pos`` and return it as an int64 tensor ``[B]``."""
    if isinstance(cur_pos, torch.Tensor):
        if cur_pos.is_floating_point() or cur_pos.is_complex() or cur_pos.dtype == torch.bool:
            raise _fail("cur_pos", "an integer tensor", f"dtype {cur_pos.dtype}", TypeError)
        if cur_pos.dim() != 1:
            raise _fail("cur_pos", f"a 1-D tensor of length B={batch}", f"shape {_shape(cur_pos)}")
        pos = cur_pos.detach().to("cpu", torch.int64)
    elif isinstance(cur_pos, (str, bytes)) or not isinstance(cur_pos, Iterable):
        raise _fail("cur_pos", "a sequence of ints or a 1-D integer tensor",
                    type(cur_pos).__name__, TypeError)
    else:
        values = []
        for i, p in enumerate(list(cur_pos)):
            if isinstance(p, bool):
                raise _fail(f"cur_pos[{i}]", "an integer", repr(p), TypeError)
            try:
                values.append(operator.index(p))
            except TypeError:
                raise _fail(f"cur_pos[{i}]", "an integer", repr(p), TypeError) from None
        pos = torch.tensor(values, dtype=torch.int64)
    if pos.numel() != batch:
        raise _fail("cur_pos", f"length B={batch}", f"length {pos.numel()}")
    bad = (pos < -1) | (pos > seq_len - 1)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise _fail(f"cur_pos[{i}]", f"a position in -1..{seq_len - 1} (S={seq_len}; -1 skips the user)",
                    int(pos[i]))
    return pos


def _gather_paged(cache: torch.Tensor, page_table: torch.Tensor, length: int) -> torch.Tensor:
    """Read positions ``0..length-1`` of a paged cache ``[num_blocks, NKV, bs, X]`` as ``[B, NKV, length, X]``."""
    _, nkv, block_size, width = cache.shape
    used = page_table[:, : -(-length // block_size)].to(cache.device)
    batch, n_blocks = used.shape
    blocks = cache[used]  # [B, n_blocks, NKV, bs, X]
    flat = blocks.permute(0, 2, 1, 3, 4).reshape(batch, nkv, n_blocks * block_size, width)
    return flat[:, :, :length].contiguous()


@dataclass(frozen=True)
class _Cache:
    """Validated K/V of every user; :meth:`read` materializes a prefix of positions."""

    k: torch.Tensor
    v: Optional[torch.Tensor]  # None: MLA, V = K[..., :dv]
    dv: int
    batch: int
    seq_len: int
    page_table: Optional[torch.Tensor]  # int64 [B, max_blocks] on the CPU, or None

    def read(self, length: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Return ``K [B, NKV, length, D]`` and ``V [B, NKV, length, Dv]`` (positions ``0..length-1``)."""
        if self.page_table is not None:
            kk = _gather_paged(self.k, self.page_table, length)
            vv = kk[..., : self.dv] if self.v is None else _gather_paged(self.v, self.page_table, length)
            return kk, vv
        kk = self.k[:, :, :length]
        vv = kk[..., : self.dv] if self.v is None else self.v[:, :, :length]
        # contiguous copies: both layouts then reach the same matmul kernels, so paged and
        # contiguous caches give bit-identical results
        return kk.expand(self.batch, -1, -1, -1).contiguous(), vv.expand(self.batch, -1, -1, -1).contiguous()


def _check_page_table(page_table: object, batch: int, num_blocks: int) -> torch.Tensor:
    """Validate a page table ``[B, max_blocks]`` of block ids in ``0..num_blocks-1``."""
    if not isinstance(page_table, torch.Tensor):
        raise _fail("page_table", "a torch.Tensor", type(page_table).__name__, TypeError)
    if page_table.is_floating_point() or page_table.is_complex() or page_table.dtype == torch.bool:
        raise _fail("page_table", "an integer tensor (int32)", f"dtype {page_table.dtype}", TypeError)
    if page_table.dim() != 2 or page_table.shape[0] != batch or page_table.shape[1] < 1:
        raise _fail("page_table", f"shape [B={batch}, max_blocks>=1]", f"shape {_shape(page_table)}")
    table = page_table.detach().to("cpu", torch.int64)
    bad = (table < 0) | (table >= num_blocks)
    if bool(bad.any()):
        b, j = (int(x) for x in bad.nonzero()[0])
        raise _fail(f"page_table[{b}, {j}]", f"a block id in 0..{num_blocks - 1}", int(table[b, j]))
    return table


def _resolve_kv(
    q_shape: Tuple[int, int, int],
    k: torch.Tensor,
    v: Optional[torch.Tensor],
    share_cache: bool,
    page_table: Optional[torch.Tensor],
    head_dim_v: Optional[int],
) -> _Cache:
    """Validate K/V (contiguous, shared or paged) against ``q_shape = (B, NH, D)``."""
    batch, num_heads, head_dim = q_shape
    _check_float_tensor("k", k, 4)
    if k.shape[-1] != head_dim:
        raise _fail("k", f"head dim (last dim) D={head_dim} like q", f"shape {_shape(k)}")
    nkv = k.shape[1]
    if nkv < 1 or num_heads % nkv != 0:
        raise _fail("k", f"a number of KV heads (dim 1) dividing NH={num_heads}", f"shape {_shape(k)}")
    if k.shape[2] < 1:
        raise _fail("k", "at least one position (dim 2)", f"shape {_shape(k)}")

    if v is None:
        if head_dim_v is None:
            raise _fail("head_dim_v", "an integer when v is None (MLA: V = k[..., :head_dim_v])", None)
        dv = _check_int("head_dim_v", head_dim_v, 1)
        if dv >= head_dim:
            raise _fail("head_dim_v", f"a value < D={head_dim} when v is None (MLA)", dv)
    else:
        _check_float_tensor("v", v, 4)
        if list(v.shape[:3]) != list(k.shape[:3]):
            raise _fail("v", f"the first three dims of k {_shape(k)[:3]}", f"shape {_shape(v)}")
        dv = v.shape[-1]
        if head_dim_v is not None and _check_int("head_dim_v", head_dim_v, 1) != dv:
            raise _fail("head_dim_v", f"v's last dim {dv} (or None)", head_dim_v)
        if dv < 1:
            raise _fail("v", "a head dim (last dim) >= 1", f"shape {_shape(v)}")

    if page_table is not None:
        if share_cache:
            raise _fail("share_cache", "False when page_table is given (paged caches are per user)",
                        share_cache)
        table = _check_page_table(page_table, batch, k.shape[0])
        return _Cache(k, v, dv, batch, table.shape[1] * k.shape[2], table)

    expected_batch = 1 if share_cache else batch
    if k.shape[0] != expected_batch:
        what = "1 (share_cache: all users read KV batch 0)" if share_cache else f"B={batch} like q"
        raise _fail("k", f"batch (dim 0) {what}", f"shape {_shape(k)}")
    return _Cache(k, v, dv, batch, k.shape[2], None)


def _check_sink(attention_sink: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Validate the sink (``[NH]`` or ``[NH, 32]``) and return it as ``[NH]``."""
    if not isinstance(attention_sink, torch.Tensor):
        raise _fail("attention_sink", "a torch.Tensor", type(attention_sink).__name__, TypeError)
    if not attention_sink.is_floating_point():
        raise _fail("attention_sink", "a floating-point tensor", f"dtype {attention_sink.dtype}", TypeError)
    shape = _shape(attention_sink)
    if shape == [num_heads]:
        return attention_sink
    if shape == [num_heads, 32]:
        return attention_sink[:, 0]
    raise _fail("attention_sink", f"shape [NH={num_heads}] or [NH={num_heads}, 32]", f"shape {shape}")


def _check_mask(attn_mask: torch.Tensor, batch: int, num_heads: int, seq_len: int) -> torch.Tensor:
    """Validate an additive mask ``[B or 1, 1, NH, S]`` and return it as ``[B or 1, NH, S]``."""
    if not isinstance(attn_mask, torch.Tensor):
        raise _fail("attn_mask", "a torch.Tensor", type(attn_mask).__name__, TypeError)
    if not attn_mask.is_floating_point():
        raise _fail("attn_mask", "a floating-point (additive) tensor", f"dtype {attn_mask.dtype}", TypeError)
    shape = _shape(attn_mask)
    if len(shape) != 4 or shape[0] not in (1, batch) or shape[1:] != [1, num_heads, seq_len]:
        raise _fail("attn_mask", f"shape [B={batch} or 1, 1, NH={num_heads}, S={seq_len}]", f"shape {shape}")
    if bool(torch.isnan(attn_mask).any()) or bool(torch.isposinf(attn_mask).any()):
        raise _fail("attn_mask", "finite values or -inf", "NaN or +inf entries")
    return attn_mask[:, 0]


def sdpa_decode_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: Optional[torch.Tensor] = None,
    *,
    is_causal: bool = True,
    attn_mask: Optional[torch.Tensor] = None,
    cur_pos: Optional[Positions] = None,
    attention_sink: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    sliding_window_size: Optional[int] = None,
    share_cache: bool = False,
    page_table: Optional[torch.Tensor] = None,
    head_dim_v: Optional[int] = None,
    return_lse: bool = False,
    dtype: torch.dtype = torch.float64,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Decode attention of T query tokens per user over a KV cache (see the module doc).

    Args:
        q: ``[T, B, NH, D]`` queries (T = 1: one token per user).
        k: ``[B, NKV, S, D]`` keys (``[1, NKV, S, D]`` with ``share_cache``;
            ``[num_blocks, NKV, block_size, D]`` with ``page_table``).
        v: values shaped like ``k`` with last dim ``Dv``, or None (MLA, needs ``head_dim_v``).
        is_causal: causal decode driven by ``cur_pos``; False attends all ``S`` positions.
        attn_mask: non-causal only: additive mask ``[B or 1, 1, NH, S]``.
        cur_pos: causal only, required: ``B`` last attended positions in ``-1..S-1``
            (``-1`` skips the user: zeros out, LSE ``-inf``).
        attention_sink: ``[NH]`` or ``[NH, 32]`` (column 0) per-head sink logits (unscaled).
        scale: logit scale; default ``1/sqrt(D)``.
        sliding_window_size: causal only: attend only the last ``W`` positions.
        share_cache: every user reads KV batch 0 (not with ``page_table``).
        page_table: ``[B, max_blocks]`` integer block ids for a paged cache.
        head_dim_v: ``Dv`` for MLA (``v`` None, ``Dv < D``); if ``v`` is given it must match.
        return_lse: also return the log-sum-exp ``[1, B, NH]``.
        dtype: torch.float64 (default) or torch.float32, the computation dtype.

    Returns:
        Output ``[T, B, NH, Dv]`` in ``dtype``; with ``return_lse`` the pair (output, LSE ``[T, B, NH]``).

    Raises:
        TypeError / ValueError naming the argument, what was expected and what came.
    """
    for arg, flag in (("is_causal", is_causal), ("share_cache", share_cache), ("return_lse", return_lse)):
        if not isinstance(flag, bool):
            raise _fail(arg, "a bool", repr(flag), TypeError)
    if dtype not in (torch.float64, torch.float32):
        raise _fail("dtype", "torch.float64 or torch.float32", dtype, TypeError)
    _check_float_tensor("q", q, 4)
    if q.shape[0] < 1 or q.shape[1] < 1 or q.shape[2] < 1 or q.shape[3] < 1:
        raise _fail("q", "shape [T>=1, B>=1, NH>=1, D>=1]", f"shape {_shape(q)}")
    tokens, batch, num_heads, head_dim = q.shape
    if tokens > 1:
        return _multi_token(q, k, v, is_causal=is_causal, attn_mask=attn_mask, cur_pos=cur_pos,
                            attention_sink=attention_sink, scale=scale, sliding_window_size=sliding_window_size,
                            share_cache=share_cache, page_table=page_table, head_dim_v=head_dim_v,
                            return_lse=return_lse, dtype=dtype)
    cache = _resolve_kv((batch, num_heads, head_dim), k, v, share_cache, page_table, head_dim_v)
    scale_f = _check_scale(scale, head_dim)
    sink = None if attention_sink is None else _check_sink(attention_sink, num_heads)
    valid, mask, skipped = _attended(is_causal, attn_mask, cur_pos, sliding_window_size, batch, num_heads,
                                     cache.seq_len, dtype)
    out, lse = _attend(q, cache, k.shape[1], valid, mask, skipped, sink, scale_f, dtype)
    if return_lse:
        return out, lse
    return out


def _check_scale(scale: Optional[float], head_dim: int) -> float:
    """The logit scale: 1 / sqrt(D) for None, else the caller's finite real number."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise _fail("scale", "a real number or None", repr(scale), TypeError)
    scale_f = float(scale)
    if not math.isfinite(scale_f):
        raise _fail("scale", "a finite number", scale_f)
    return scale_f


def _attended(is_causal: bool, attn_mask: Optional[torch.Tensor], cur_pos: Optional[Positions],
              sliding_window_size: Optional[int], batch: int, num_heads: int, seq_len: int,
              dtype: torch.dtype) -> Tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """Which cache positions each user attends. Causal: 0..cur_pos[b], with a window W only the last W
    of them (positions required, no mask); non-causal: all S (no positions, no window; an optional
    additive mask). Returns (valid [B, S] bool, the mask [Bm, NH, S] in `dtype` or None, skipped [B]
    bool: the users at -1)."""
    mask = None
    if is_causal:
        if attn_mask is not None:
            raise _fail("attn_mask", "None in causal mode (use is_causal=False for a mask)", "a tensor")
        if cur_pos is None:
            raise _fail("cur_pos", f"{batch} positions in causal mode", None)
        pos = _positions(cur_pos, batch, seq_len)
        s_idx = torch.arange(seq_len, dtype=torch.int64)
        valid = s_idx[None, :] <= pos[:, None]
        if sliding_window_size is not None:
            window = _check_int("sliding_window_size", sliding_window_size, 1)
            valid &= s_idx[None, :] > (pos[:, None] - window)
        skipped = pos < 0
    else:
        if cur_pos is not None:
            raise _fail("cur_pos", "None in non-causal mode (all S positions are attended)", "positions")
        if sliding_window_size is not None:
            raise _fail("sliding_window_size", "None in non-causal mode", sliding_window_size)
        if attn_mask is not None:
            mask = _check_mask(attn_mask, batch, num_heads, seq_len).to(dtype)
        valid = torch.ones(batch, seq_len, dtype=torch.bool)
        skipped = torch.zeros(batch, dtype=torch.bool)
    return valid, mask, skipped


def _attend(q: torch.Tensor, cache: "_Cache", nkv: int, valid: torch.Tensor, mask: Optional[torch.Tensor],
            skipped: torch.Tensor, sink: Optional[torch.Tensor], scale_f: float,
            dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """The softmax in `dtype` of one token per user over the attended positions (`valid`), plus the mask
    and the sink in the denominator. Returns (output [1, B, NH, Dv], LSE [1, B, NH]); a row with nothing
    to attend (or a skipped user) gives zeros and -inf."""
    _, batch, num_heads, head_dim = q.shape
    group = num_heads // nkv
    # Only positions up to the largest attended one are read (a causal decode of a short
    # prefix of a long cache stays cheap); at least one, so shapes stay non-empty.
    live_len = max(1, int(valid.any(dim=0).nonzero().max()) + 1) if bool(valid.any()) else 1
    kk, vv = cache.read(live_len)
    valid = valid[:, :live_len]
    if mask is not None:
        mask = mask[..., :live_len]
    seq_len = live_len
    device = q.device
    valid = valid.to(device)
    qd = q[0].to(dtype).reshape(batch, nkv, group, head_dim)
    # Zero the cache outside the window so garbage (even NaN) there cannot leak in.
    kd = torch.where(valid[:, None, :, None], kk.to(dtype), 0)
    vd = torch.where(valid[:, None, :, None], vv.to(dtype), 0)

    logits = torch.einsum("bhgd,bhsd->bhgs", qd, kd).reshape(batch, num_heads, seq_len) * scale_f
    if mask is not None:
        logits = logits + mask.to(device)
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))

    row_max = logits.amax(dim=-1)  # [B, NH]
    if sink is not None:
        sink_logit = (sink.to(device, dtype) * scale_f).expand(batch, num_heads)
        row_max = torch.maximum(row_max, sink_logit)
    # Rows with nothing to attend have max -inf; shift by 0 there so exp gives exact zeros.
    shift = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    probs = torch.exp(logits - shift[..., None])  # [B, NH, S]
    denom = probs.sum(dim=-1)
    if sink is not None:
        denom = denom + torch.exp(sink_logit - shift)
    numer = torch.einsum("bhgs,bhsd->bhgd", probs.reshape(batch, nkv, group, seq_len), vd)
    numer = numer.reshape(batch, num_heads, -1)

    empty = (denom == 0) | skipped.to(device)[:, None]
    safe = torch.where(empty, torch.ones_like(denom), denom)
    out = torch.where(empty[..., None], torch.zeros_like(numer), numer / safe[..., None])
    lse = torch.where(empty, torch.full_like(denom, float("-inf")), shift + torch.log(safe))
    return out.unsqueeze(0), lse.unsqueeze(0)


def _multi_token(q: torch.Tensor, k: torch.Tensor, v: Optional[torch.Tensor], *, is_causal: bool,
                 cur_pos: Optional[Positions], return_lse: bool, **options) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """T > 1 tokens: token j is a one-token decode at cur_pos - (T - 1 - j) (causal), or over all
    positions (non-causal); outputs stacked along dim 0."""
    tokens, batch = q.shape[0], q.shape[1]
    token_positions: list[Optional[list[int]]] = [None] * tokens
    if is_causal and cur_pos is not None:
        seq_len = (page_table.shape[1] * k.shape[2]) if isinstance(page_table := options.get("page_table"),
                                                                     torch.Tensor) else k.shape[2]
        pos = _positions(cur_pos, batch, seq_len)
        short = (pos >= 0) & (pos < tokens - 1)
        if bool(short.any()):
            i = int(short.nonzero()[0, 0])
            raise _fail(f"cur_pos[{i}]", f"-1 or a position >= T - 1 = {tokens - 1} (the last of T={tokens} new "
                        "tokens)", int(pos[i]))
        token_positions = [[int(p) - (tokens - 1 - j) if p >= 0 else -1 for p in pos] for j in range(tokens)]
    outs, lses = [], []
    for j in range(tokens):
        out, lse = sdpa_decode_reference(q[j:j + 1], k, v, is_causal=is_causal, cur_pos=token_positions[j],
                                         return_lse=True, **options)
        outs.append(out)
        lses.append(lse)
    out, lse = torch.cat(outs), torch.cat(lses)
    return (out, lse) if return_lse else out


def merge_partials(
    outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merge normalized partial attention results over disjoint key ranges.

    Each partial ``i`` is ``(outs[i] [..., Dv], lses[i] [...])`` as returned by
    :func:`sdpa_decode_reference` with ``return_lse=True`` over a subset of the keys.
    The merge is exact: ``lse = log(sum_i exp(lse_i))`` and
    ``out = sum_i exp(lse_i - lse) * out_i``. Partials with LSE ``-inf`` (no keys) weigh
    nothing; if all are ``-inf`` the result is zeros and ``-inf``. An attention sink must
    be counted in exactly one partial. Computation is in the promoted dtype of the inputs.

    Returns:
        ``(out [..., Dv], lse [...])``.
    """
    if isinstance(outs, torch.Tensor) or not isinstance(outs, Sequence) or len(outs) == 0:
        raise TypeError(f"merge_partials: argument 'outs': expected a non-empty sequence of tensors, "
                        f"got {type(outs).__name__}")
    if isinstance(lses, torch.Tensor) or not isinstance(lses, Sequence) or len(lses) != len(outs):
        got = f"{len(lses)} items" if isinstance(lses, Sequence) else type(lses).__name__
        raise ValueError(f"merge_partials: argument 'lses': expected a sequence of {len(outs)} tensors "
                         f"(one per partial output), got {got}")
    shape = None
    for i, (o, s) in enumerate(zip(outs, lses)):
        for arg, t in ((f"outs[{i}]", o), (f"lses[{i}]", s)):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise TypeError(f"merge_partials: argument '{arg}': expected a floating-point tensor, "
                                f"got {type(t).__name__ if not isinstance(t, torch.Tensor) else t.dtype}")
        if o.dim() < 1 or list(o.shape[:-1]) != list(s.shape):
            raise ValueError(f"merge_partials: argument 'lses[{i}]': expected shape {_shape(o)[:-1]} "
                             f"(outs[{i}] without its last dim), got {_shape(s)}")
        if shape is None:
            shape = _shape(o)
        elif _shape(o) != shape:
            raise ValueError(f"merge_partials: argument 'outs[{i}]': expected shape {shape} like outs[0], "
                             f"got {_shape(o)}")
    lse_all = torch.stack(list(lses))  # [P, ...]
    out_all = torch.stack(list(outs))  # [P, ..., Dv]
    dtype = torch.promote_types(lse_all.dtype, out_all.dtype)
    lse_all, out_all = lse_all.to(dtype), out_all.to(dtype)
    top = lse_all.amax(dim=0)
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(lse_all - shift)  # [P, ...]; zero for empty partials
    total = weights.sum(dim=0)
    empty = total == 0
    safe = torch.where(empty, torch.ones_like(total), total)
    # Empty partials may carry anything in their output; weight zero must not turn NaN.
    contrib = torch.where((weights > 0)[..., None], weights[..., None] * out_all, 0)
    out = torch.where(empty[..., None], 0, contrib.sum(dim=0) / safe[..., None])
    lse = torch.where(empty, float("-inf"), shift + torch.log(safe))
    return out, lse
