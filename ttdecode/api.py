"""Public entry points, drop-in compatible with ``ttnn.transformer.scaled_dot_product_attention_decode``.

Inputs may be ``ttnn.Tensor``, ``ttdecode.core.tensor.TileTensor`` or torch tensors. A torch float tensor
(float32, float64 or bfloat16) is taken as bfloat16, the format the kernels read: Q always; K/V unless they
come as a TileTensor/ttnn tensor in bfloat8_b or bfloat4_b. See ``ttdecode.ops.flash_decode.validate`` for every
shape and format rule.

Backends (``backend=``):

* ``"reference"``: validate, dequantize exactly the values that came (after the bfloat16 storage
  of torch inputs), run ``ttdecode.reference.sdpa_decode_reference`` in float64 and return torch:
  the output ``[T, B, NH, Dv]`` cast to bfloat16 (like the device output) and, with
  ``return_lse=True``, the log-sum-exp ``[T, B, NH]`` in float32 (``-inf`` for a skipped user).
* ``"host"``: the Metalium kernels on the host runtime. ``"device"``: the same kernels on a
  Wormhole through ``ttnn.generic_op``: ``ttdecode.ops.flash_decode.op.run_host`` and the device's
  cached steps (``ttdecode.ops.flash_decode.device_steps.STEPS``; a caller may keep its own step:
  ``ttdecode.plan_decode``).
* ``"auto"``: ``"device"`` if ``ttdecode.ttnn_env.has_tenstorrent_device()`` and Q, K, V are ttnn device tensors,
  else ``"host"`` (torch / host inputs run on the host runtime). The choice is logged
  (logger ``"ttdecode"``, INFO) and ``last_backend()`` returns the backend the last call used.

``memory_config`` (the output's placement; the device backend honours it, the host and reference
backends only check it): None or interleaved DRAM (what the writer kernel
produces), interleaved L1, or height-sharded L1 with a shard spec that holds the output (e.g.
tt_transformers' ``[32 padded heads, Dv]`` shards over B cores); the device step moves the output
there with ``ttnn.to_memory_config`` and ``out.memory_config()`` is the config given. Width/block or
DRAM sharding and a sharded config without a shard spec are refused by name. On the device backend
Q may be interleaved in DRAM or L1 or height-sharded in L1 (as ``ttnn.experimental.nlp_create_qkv_heads_decode``
makes it), and ``cur_pos_tensor`` / the page table interleaved in DRAM or L1 or height-sharded in L1:
what is not interleaved DRAM is copied there by ``ttnn.to_memory_config`` inside the step (a device
op; the copy is freed after the step). Beyond ttnn 0.81.1's own op, which refuses them: a sharded
output with GQA, Q interleaved in L1, an int32 height-sharded page table (ttnn wants uint16 there;
ttdecode's page table is int32 only). ``compute_kernel_config.packer_l1_acc=True``
is refused by the kernel backends (their packs never accumulate onto L1). Unlike ttnn's golden function, causal mode needs positions
(``cur_pos`` or ``cur_pos_tensor``): there is no silent "last position" default.
Extensions over ttnn: ``return_lse``, ``backend``, ``head_dim_v`` with ``v=None`` (MLA, as in
``ttnn.transformer.flash_multi_latent_attention_decode``; the kernels read each K tile once and take
V = k[..., :head_dim_v] out of it), and ``cur_pos`` on the paged entry.
"""

from __future__ import annotations

from typing import Any, Optional

from ttdecode.backend import BACKENDS, last_backend, record, select_backend
from ttdecode.core.checks import fail
from ttdecode.ops.flash_decode.op import Result, make_decode_plan, run_host, run_reference
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.ops.flash_decode.validate import validate_decode
from ttdecode.ops.flash_decode.device_steps import MISS, STEPS

__all__ = [
    "BACKENDS",
    "scaled_dot_product_attention_decode",
    "paged_scaled_dot_product_attention_decode",
    "last_backend",
    "DecodeOptions",
    "decode",
]


def scaled_dot_product_attention_decode(
    q: Any,
    k: Any,
    v: Any,
    *,
    is_causal: bool = True,
    attn_mask: Any = None,
    cur_pos: Any = None,
    cur_pos_tensor: Any = None,
    attention_sink: Any = None,
    scale: Optional[float] = None,
    sliding_window_size: Optional[int] = None,
    share_cache: Optional[bool] = False,
    program_config: Any = None,
    compute_kernel_config: Any = None,
    memory_config: Any = None,
    head_dim_v: Optional[int] = None,
    return_lse: bool = False,
    backend: str = "auto",
    validate_values: bool = False,
) -> Result:
    """Decode attention: one query token per user over a KV cache, or T <= 32 new tokens per user
    (multi-token decode, e.g. verifying speculative draft tokens).

    Args:
        q: ``[T, B, NH, D]`` (T = 1 for plain decode). Token j of user b sits at
            ``cur_pos[b] - (T - 1 - j)`` and attends keys up to there (each its own window); the T
            tokens share every K/V read. k: ``[B, NKV, S, D]`` (``[1, NKV, S, D]`` with ``share_cache``).
        v: ``[B, NKV, S, Dv]``, or None with ``head_dim_v`` (MLA: V = k[..., :head_dim_v]).
        is_causal: attend ``0..cur_pos[b]`` (True) or all S positions (False, optional mask).
        attn_mask: non-causal only, additive ``[B or 1, 1, NH, S]``.
        cur_pos / cur_pos_tensor: causal only, exactly one: B positions in ``-1..S-1``
            (-1 skips the user: zero output; with T tokens the last token's, at least T - 1);
            the tensor is int32 ``[B]``.
        attention_sink: ``[NH]`` or ``[NH, 32]`` per-head sink logits (column 0).
        scale: default ``1/sqrt(D)``. sliding_window_size: causal only, last W positions.
        share_cache: every user reads KV batch 0. program_config / compute_kernel_config:
            ``ttdecode.config`` or ttnn configs. memory_config: the output's placement (module doc).
        return_lse: also return the LSE ``[T, B, NH]``. backend: see the module doc.
        validate_values: on the device backend, read a device ``cur_pos_tensor`` / page table back
            and raise the clear error for a bad value (off by default: a step then moves no data
            between host and device, and the kernels skip a user whose position lies outside the
            cache or whose page ids lie outside the pool). The host and reference backends and host
            inputs (lists, torch tensors) are always checked.

    Returns:
        The output ``[T, B, NH, Dv]`` (torch bfloat16 on the reference backend), or
        ``(output, lse)`` with ``return_lse``.
    """
    return decode(q, k, v, DecodeOptions(
        is_causal=is_causal, attn_mask=attn_mask, cur_pos=cur_pos, cur_pos_tensor=cur_pos_tensor,
        attention_sink=attention_sink, scale=scale, sliding_window_size=sliding_window_size,
        share_cache=share_cache, program_config=program_config, compute_kernel_config=compute_kernel_config,
        memory_config=memory_config, head_dim_v=head_dim_v, return_lse=return_lse, backend=backend,
        validate_values=validate_values,
    ))


def paged_scaled_dot_product_attention_decode(
    q: Any,
    k: Any,
    v: Any,
    page_table_tensor: Any = None,
    *,
    page_table: Any = None,
    is_causal: bool = True,
    attn_mask: Any = None,
    cur_pos: Any = None,
    cur_pos_tensor: Any = None,
    attention_sink: Any = None,
    scale: Optional[float] = None,
    sliding_window_size: Optional[int] = None,
    program_config: Any = None,
    compute_kernel_config: Any = None,
    memory_config: Any = None,
    head_dim_v: Optional[int] = None,
    return_lse: bool = False,
    backend: str = "auto",
    validate_values: bool = False,
) -> Result:
    """Decode attention over a paged cache.

    ``k``/``v``: ``[num_blocks, NKV, block_size, D/Dv]`` (block_size a multiple of 32, or 16: ttnn's padded
    tile per block, with an even max_blocks);
    ``page_table_tensor`` (ttnn's name; ``page_table=`` is an alias, not both): int32 ``[B, max_blocks]``,
    user b's position p lives in block
    ``page_table[b, p // block_size]``; ``S = max_blocks * block_size``. Other arguments as in
    `scaled_dot_product_attention_decode` (no ``share_cache``).
    """
    if page_table_tensor is not None and page_table is not None:
        raise fail("page_table", "None when page_table_tensor is given (page_table is its alias; give one)",
                   "a tensor", TypeError)
    return decode(q, k, v, DecodeOptions(
        paged=True, page_table=page_table_tensor if page_table is None else page_table, is_causal=is_causal,
        attn_mask=attn_mask, cur_pos=cur_pos, cur_pos_tensor=cur_pos_tensor, attention_sink=attention_sink,
        scale=scale, sliding_window_size=sliding_window_size, program_config=program_config,
        compute_kernel_config=compute_kernel_config, memory_config=memory_config, head_dim_v=head_dim_v,
        return_lse=return_lse, backend=backend, validate_values=validate_values,
    ))


def decode(q: Any, k: Any, v: Any, options: DecodeOptions) -> Result:
    """The two public functions' run: Q, K, V (shapes as in `scaled_dot_product_attention_decode`) and
    the call's `DecodeOptions`. Validate, pick the backend, run it. Values on the device are read back
    only for the host and reference backends (which need them) or with ``options.validate_values``.
    A device call of device tensors whose specs match an earlier validated call of the same options
    checks tensor metadata only (``step_cache.DeviceSteps.run_cached``)."""
    backend, validate_values = options.backend, options.validate_values
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise fail("backend", f"one of {list(BACKENDS)}", repr(backend),
                   ValueError if isinstance(backend, str) else TypeError)
    if backend == "device" and not validate_values:
        # the device machinery (ttdecode.ttnn_backend) is imported by device calls only
        out = STEPS.run_cached(q, k, v, options)
        if out is not MISS:
            record("device")
            return out
    chosen = select_backend(q, k, v) if backend == "auto" else backend
    inputs = validate_decode(q, k, v, options, read_values=bool(validate_values) or chosen != "device")
    record(chosen)
    if chosen == "reference":
        return run_reference(inputs)
    if chosen == "host":  # the host runtime plans each call (its positions included)
        return run_host(inputs, make_decode_plan(inputs))

    return STEPS.run(q, k, v, options, inputs)  # the device plans once per decode shape (a kept step)
