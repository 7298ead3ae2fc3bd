"""Public entry points, drop-in compatible with ``ttnn.transformer.scaled_dot_product_attention_decode``.

Inputs may be ``ttnn.Tensor``, ``ttdecode.tensor.TileTensor`` or torch tensors. A torch float tensor
(float32 or bfloat16) is taken as bfloat16, the format the kernels read: Q always; K/V unless they
come as a TileTensor/ttnn tensor in bfloat8_b or bfloat4_b. See ``ttdecode.validate`` for every
shape and format rule.

Backends (``backend=``):

* ``"reference"``: validate, dequantize exactly the values that came (after the bfloat16 storage
  of torch inputs), run ``ttdecode.reference.sdpa_decode_reference`` in float64 and return torch:
  the output ``[T, B, NH, Dv]`` cast to bfloat16 (like the device output) and, with
  ``return_lse=True``, the log-sum-exp ``[T, B, NH]`` in float32 (``-inf`` for a skipped user).
* ``"host"``: the Metalium kernels on the host runtime. ``"device"``: the same kernels on a
  Wormhole through ``ttnn.generic_op``. Both go through ``_run_kernels``.
* ``"auto"``: ``"device"`` if ``ttdecode.device.available()``, else ``"host"``. The choice is logged
  (logger ``"ttdecode"``, INFO) and ``last_backend()`` returns the backend the last call used.

``memory_config`` must be None or an interleaved DRAM ``ttnn.MemoryConfig`` (what the writer kernel
produces; L1 and sharded outputs are refused by name). ``compute_kernel_config.packer_l1_acc=True``
is refused by the kernel backends (their packs never accumulate onto L1). Unlike ttnn's golden function, causal mode needs positions
(``cur_pos`` or ``cur_pos_tensor``): there is no silent "last position" default.
Extensions over ttnn: ``return_lse``, ``backend``, ``head_dim_v`` with ``v=None`` (MLA, as in
``ttnn.transformer.flash_multi_latent_attention_decode``; the kernels read each K tile once and take
V = k[..., :head_dim_v] out of it), and ``cur_pos`` on the paged entry.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Optional, Union

import torch

from ttdecode.validate import DecodeInputs, TensorMeta, fail, validate_decode
from ttdecode.formats import DataType

__all__ = [
    "BACKENDS",
    "scaled_dot_product_attention_decode",
    "paged_scaled_dot_product_attention_decode",
    "last_backend",
]

#: Accepted values of ``backend=``.
BACKENDS = ("auto", "device", "host", "reference")

log = logging.getLogger("ttdecode")
_last_backend: Optional[str] = None

Result = Union[Any, tuple[Any, Any]]


def last_backend() -> Optional[str]:
    """The backend ("device", "host" or "reference") chosen by the last call; None before any call.
    Set once the arguments are valid, before the backend runs."""
    return _last_backend


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
            ``ttdecode.config`` or ttnn configs. memory_config: device only.
        return_lse: also return the LSE ``[T, B, NH]``. backend: see the module doc.

    Returns:
        The output ``[T, B, NH, Dv]`` (torch bfloat16 on the reference backend), or
        ``(output, lse)`` with ``return_lse``.
    """
    return _decode(
        q, k, v, page_table=None, paged=False, is_causal=is_causal, attn_mask=attn_mask,
        cur_pos=cur_pos, cur_pos_tensor=cur_pos_tensor, attention_sink=attention_sink, scale=scale,
        sliding_window_size=sliding_window_size, share_cache=share_cache, program_config=program_config,
        compute_kernel_config=compute_kernel_config, memory_config=memory_config, head_dim_v=head_dim_v,
        return_lse=return_lse, backend=backend,
    )


def paged_scaled_dot_product_attention_decode(
    q: Any,
    k: Any,
    v: Any,
    page_table: Any,
    *,
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
) -> Result:
    """Decode attention over a paged cache.

    ``k``/``v``: ``[num_blocks, NKV, block_size, D/Dv]`` (block_size a multiple of 32);
    ``page_table``: int32 ``[B, max_blocks]``, user b's position p lives in block
    ``page_table[b, p // block_size]``; ``S = max_blocks * block_size``. Other arguments as in
    `scaled_dot_product_attention_decode` (no ``share_cache``).
    """
    return _decode(
        q, k, v, page_table=page_table, paged=True, is_causal=is_causal, attn_mask=attn_mask,
        cur_pos=cur_pos, cur_pos_tensor=cur_pos_tensor, attention_sink=attention_sink, scale=scale,
        sliding_window_size=sliding_window_size, share_cache=False, program_config=program_config,
        compute_kernel_config=compute_kernel_config, memory_config=memory_config, head_dim_v=head_dim_v,
        return_lse=return_lse, backend=backend,
    )


def _decode(q: Any, k: Any, v: Any, *, backend: str, **options: Any) -> Result:
    """Validate, pick the backend, run it."""
    global _last_backend
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise fail("backend", f"one of {list(BACKENDS)}", repr(backend),
                   ValueError if isinstance(backend, str) else TypeError)
    inputs = validate_decode(q, k, v, **options)
    chosen = _select_backend() if backend == "auto" else backend
    _last_backend = chosen
    if chosen == "reference":
        return _run_reference(inputs)
    plan = _make_plan(inputs)
    return _run_kernels(chosen, inputs, plan)


def _select_backend() -> str:
    """"device" when a Wormhole is usable (``ttdecode.device.available()``), else "host"; logged."""
    try:
        device = importlib.import_module("ttdecode.device")
    except ModuleNotFoundError as e:
        if e.name != "ttdecode.device":
            raise
        log.info("ttdecode: backend 'auto' -> 'host' (ttdecode.device is not built)")
        return "host"
    if device.available():
        log.info("ttdecode: backend 'auto' -> 'device' (a Tenstorrent device is available)")
        return "device"
    log.info("ttdecode: backend 'auto' -> 'host' (no Tenstorrent device)")
    return "host"


def _make_plan(inputs: DecodeInputs) -> Any:
    """The FlashDecode plan for these inputs (``ttdecode.plan.make_plan``; raises PlanError)."""
    from ttdecode.formats import DataType
    from ttdecode.plan import make_plan, power_of_two_scale

    pc, cc = inputs.program_config, inputs.compute_kernel_config
    return make_plan(
        batch=inputs.batch, num_q_heads=inputs.num_heads, num_kv_heads=inputs.num_kv_heads,
        seq_len=inputs.seq_len, head_dim=inputs.head_dim, head_dim_v=inputs.head_dim_v,
        kv_dtype=DataType(inputs.kv_dtype), q_dtype=DataType(inputs.q.storage_dtype),
        cur_pos=inputs.cur_pos, grid=pc.compute_with_storage_grid_size,
        sub_core_grids=pc.sub_core_grids, k_chunk_size=pc.k_chunk_size,
        max_cores_per_head_batch=pc.max_cores_per_head_batch, fp32_dest_acc_en=cc.fp32_dest_acc_en,
        math_fidelity=cc.math_fidelity, share_cache=inputs.share_cache, return_lse=inputs.return_lse,
        block_size=inputs.block_size, num_blocks=inputs.k.shape[0] if inputs.paged else None,
        sliding_window_size=inputs.sliding_window_size, attention_sink=inputs.attention_sink is not None,
        mla=inputs.v is None, is_causal=inputs.is_causal,
        attn_mask_batch=0 if inputs.attn_mask is None else inputs.attn_mask.shape[0],
        num_tokens=inputs.num_tokens, kv_pages=pc.kv_pages, chunk_cap=pc.chunk_cap,
        prescale_q=power_of_two_scale(inputs.scale),
    )


def _kernel_gaps(inputs: DecodeInputs) -> list[str]:
    """Options the FlashDecode kernels do not implement yet (the reference backend does)."""
    gaps = []
    if inputs.compute_kernel_config.packer_l1_acc:
        gaps.append("compute_kernel_config.packer_l1_acc=True (the kernels accumulate in DST and never pack "
                    "onto L1; set it False)")
    return gaps


def check_kernel_mask(inputs: DecodeInputs) -> None:
    """The kernels stream the mask as bfloat16 tiles (ttnn's layout [B or 1, 1, NH, S]): a torch float
    mask (stored as bfloat16) or a bfloat16 TileTensor / ttnn tensor; block-float masks are refused
    (a -inf would share its exponent with 15 neighbours)."""
    mask = inputs.attn_mask
    if mask is not None and mask.storage_dtype != "bfloat16":
        raise fail("attn_mask", "a bfloat16 mask (or a torch float tensor) for the kernel backends",
                   f"{mask.kind} tensor of dtype {mask.dtype}", TypeError)


def compute_settings(inputs: DecodeInputs) -> Any:
    """The compute-kernel settings of a call (ttdecode.program.ComputeSettings): the compute config's
    math_approx_mode becomes the kernels' APPROX (it selects recip_tile's mode); the softmax exp's mode
    (SDPAProgramConfig.exp_approx_mode) travels as a compile-time arg (exp_approx)."""
    from ttdecode.program import ComputeSettings, MathFidelity

    cc = inputs.compute_kernel_config
    return ComputeSettings(
        math_fidelity=MathFidelity(cc.math_fidelity),
        fp32_dest_acc_en=cc.fp32_dest_acc_en,
        math_approx_mode=cc.math_approx_mode,
    )


def _run_kernels(backend: str, inputs: DecodeInputs, plan: Any) -> Result:
    """Run the FlashDecode kernels on ``backend`` ("host" or "device")."""
    gaps = _kernel_gaps(inputs)
    if gaps:
        raise NotImplementedError(
            f"backend '{backend}': the FlashDecode kernels do not implement {', '.join(gaps)} yet; "
            f"backend='reference' computes every option"
        )
    check_kernel_mask(inputs)
    if backend == "device":
        from ttdecode import device

        return device.run_decode(inputs, plan, compute_settings(inputs))
    from ttdecode.factory import run_flash_decode
    from ttdecode.tensor import as_tile_tensor

    out, lse, _ = run_flash_decode(
        plan,
        q=as_tile_tensor(inputs.q.obj, DataType.bfloat16),
        k=as_tile_tensor(inputs.k.obj, DataType.bfloat16),
        v=None if inputs.v is None else as_tile_tensor(inputs.v.obj, DataType.bfloat16),  # None: MLA
        cur_pos_source=inputs.positions,
        scale=inputs.scale,
        compute=compute_settings(inputs),
        exp_approx=inputs.program_config.resolved_exp_approx_mode(inputs.compute_kernel_config),
        page_table=inputs.page_table_values,  # None for a contiguous cache
        attention_sink=None if inputs.attention_sink is None else _sink_values(inputs.attention_sink),
        attn_mask=None if inputs.attn_mask is None else as_tile_tensor(inputs.attn_mask.obj, DataType.bfloat16),
    )
    return (out, lse) if inputs.return_lse else out


# ---- the reference backend ----------------------------------------------------------------------


def _dequantize(meta: TensorMeta) -> torch.Tensor:
    """The exact values the kernels would read, as float64 (torch floats pass through bfloat16)."""
    from ttdecode.tensor import dequantize

    return dequantize(meta.obj, default_dtype=DataType.bfloat16)


def _sink_values(meta: TensorMeta) -> torch.Tensor:
    """The sink logits the kernels read, float32 [NH] or [NH, 32] (a torch [NH] goes through bf16)."""
    obj = meta.obj
    if isinstance(obj, torch.Tensor) and obj.dim() == 1:
        return obj.detach().cpu().to(torch.bfloat16).to(torch.float32)
    return _dequantize(meta).to(torch.float32)


def _run_reference(inputs: DecodeInputs) -> Result:
    """Float64 reference on the dequantized inputs; bfloat16 output, float32 LSE."""
    from ttdecode.reference import sdpa_decode_reference

    deq = lambda m: None if m is None else _dequantize(m)  # noqa: E731
    out, lse = sdpa_decode_reference(
        deq(inputs.q), deq(inputs.k), deq(inputs.v),
        is_causal=inputs.is_causal,
        attn_mask=deq(inputs.attn_mask),
        cur_pos=list(inputs.positions) if inputs.positions is not None else None,
        attention_sink=None if inputs.attention_sink is None else _sink_values(inputs.attention_sink).double(),
        scale=inputs.scale,
        sliding_window_size=inputs.sliding_window_size,
        share_cache=inputs.share_cache,
        page_table=inputs.page_table_values,
        head_dim_v=inputs.head_dim_v if inputs.v is None else None,
        return_lse=True,
        dtype=torch.float64,
    )
    out = out.to(torch.bfloat16)
    if inputs.return_lse:
        return out, lse.to(torch.float32)
    return out
