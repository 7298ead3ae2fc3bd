"""Each program kind's inputs, its float64 reference, our device call and ttnn's own op on the same inputs.

`build(kind, ttnn, device)` returns a `Case`: ``reference`` (the float64 outputs by name, computed by the
public API's reference backend on the same quantized inputs), ``ours`` (one device call, its outputs read
back to torch by the same names) and ``theirs`` (ttnn's op on the same device tensors, or None where ttnn has
no such op). Inputs are seeded from the kind's name, so a report's figures are reproducible.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ttdecode import api
from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import from_torch as tile_from_torch
from ttdecode.core.tensor import to_torch as tile_to_torch
from ttdecode.distributed.context import combine_partials
from ttdecode.hwcheck.kinds import Combine, Decode, Kind, Rotary
from ttdecode.ops.combine.device_step import combine_on_device
from ttdecode.ops.rotary_append.device_step import angles_to_device
from ttdecode.ops.rotary_append.op import rotary_kv_append
from ttdecode.ttnn_backend import key_row_memory_config

__all__ = ["Case", "build", "decode_host_tensors", "decode_device_tensors", "decode_device_call", "ttnn_decode_call",
           "ttnn_dtype"]

Outputs = dict[str, torch.Tensor]


@dataclass
class Case:
    """A kind made concrete: reference outputs, our device call, ttnn's op (or None) and its name."""

    reference: Outputs
    ours: Callable[[], Outputs]
    theirs: Optional[Callable[[], Outputs]] = None
    theirs_name: Optional[str] = None


def ttnn_dtype(ttnn: Any, name: str) -> Any:
    """``"bfloat8_b"`` -> ``ttnn.bfloat8_b``."""
    return getattr(ttnn, name)


def _read(ttnn: Any, t: Any, shape: tuple[int, ...]) -> torch.Tensor:
    """A device tensor (or a torch tensor the op read back itself, such as the LSE) as float32 of the
    reference's `shape` (an LSE's trailing column dropped)."""
    x = (t if isinstance(t, torch.Tensor) else ttnn.to_torch(t)).float()
    if x.dim() == len(shape) + 1:
        x = x[..., 0]
    if x.dim() == len(shape) and tuple(x.shape) != shape:  # heads padded to a tile's rows (ttnn's MLA op)
        x = x[tuple(slice(0, n) for n in shape)]
    return x.reshape(shape)


def _gen(kind: Kind) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(kind.name.encode()))


def _configs(p: Decode) -> tuple[Any, Any]:
    pc = SDPAProgramConfig(compute_with_storage_grid_size=p.grid, k_chunk_size=p.k_chunk,
                                    kv_pages=p.pages, max_cores_per_head_batch=p.max_cores,
                                    exp_approx_mode=p.exp_approx)
    ck = {k: v for k, v in (("math_fidelity", p.fidelity), ("fp32_dest_acc_en", p.fp32_dest)) if v is not None}
    return pc, ComputeKernelConfig(**ck)


def decode_host_tensors(p: Decode, g: torch.Generator) -> dict[str, Any]:
    """The call's torch tensors: q (bfloat16 values), k, v (float32; v None for MLA), table, mask, sink."""
    blocks = p.b * p.s // p.block
    shape = (blocks, p.nkv, p.block, p.d) if p.paged else (p.b, p.nkv, p.s, p.d)
    return dict(
        q=torch.randn(p.t, p.b, p.nh, p.d, generator=g).bfloat16().float(),
        k=torch.randn(*shape, generator=g), v=None if p.dv else torch.randn(*shape, generator=g),
        table=torch.randperm(blocks, generator=g).view(p.b, -1).to(torch.int32) if p.paged else None,
        mask=(torch.randn(p.b, 1, p.nh, p.s, generator=g) * 2).bfloat16().float() if p.mask else None,
        sink=torch.randn(p.nh, 32, generator=g).bfloat16().float() if p.sink else None)


def _decode_options(p: Decode) -> dict[str, Any]:
    pc, ck = _configs(p)
    return dict(is_causal=not p.mask, sliding_window_size=p.window, program_config=pc, compute_kernel_config=ck,
                head_dim_v=p.dv, return_lse=p.lse)


def _decode_reference(p: Decode, h: dict[str, Any]) -> Outputs:
    dt = DataType(p.kv_dtype)
    k = tile_from_torch(h["k"], dt)
    v = None if h["v"] is None else tile_from_torch(h["v"], dt)
    kw = dict(_decode_options(p), attn_mask=h["mask"], attention_sink=h["sink"], backend="reference")
    if not p.mask:
        kw["cur_pos"] = list(p.pos)
    if p.paged:
        res = api.paged_scaled_dot_product_attention_decode(h["q"], k, v, h["table"], **kw)
    else:
        res = api.scaled_dot_product_attention_decode(h["q"], k, v, **kw)
    out, lse = res if p.lse else (res, None)
    ref = {"out": out.double()}
    if lse is not None:
        ref["lse"] = lse.double()
    return ref


def decode_device_tensors(p: Decode, h: dict[str, Any], ttnn: Any, device: Any, tile_pages: bool = False) -> dict[str, Any]:
    """The call's tensors on `device`; K/V in key-row pages for a key_row kind unless `tile_pages`."""
    mem = key_row_memory_config(ttnn, device, p.d) if p.pages == "key_row" and not tile_pages else ttnn.DRAM_MEMORY_CONFIG
    kv = dict(dtype=ttnn_dtype(ttnn, p.kv_dtype), layout=ttnn.TILE_LAYOUT, device=device, memory_config=mem)
    tile = dict(dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    ints = dict(dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    return dict(
        q=ttnn.from_torch(h["q"], **tile), k=ttnn.from_torch(h["k"], **kv),
        v=None if h["v"] is None else ttnn.from_torch(h["v"], **kv),
        table=None if h["table"] is None else ttnn.from_torch(h["table"], **ints),
        pos=None if p.mask else ttnn.from_torch(torch.tensor(p.pos, dtype=torch.int32), **ints),
        mask=None if h["mask"] is None else ttnn.from_torch(h["mask"], **tile),
        sink=None if h["sink"] is None else ttnn.from_torch(h["sink"], **tile))


def decode_device_call(p: Decode, d: dict[str, Any]) -> Callable[[], Any]:
    """Our FlashDecode call on the device tensors `d` (`decode_device_tensors`), as the README's loop makes it."""
    kw = dict(_decode_options(p), attn_mask=d["mask"], attention_sink=d["sink"], cur_pos_tensor=d["pos"],
              backend="device")
    if p.paged:
        return lambda: api.paged_scaled_dot_product_attention_decode(
            d["q"], d["k"], d["v"], page_table_tensor=d["table"], **kw)
    return lambda: api.scaled_dot_product_attention_decode(d["q"], d["k"], d["v"], **kw)


def ttnn_decode_call(p: Decode, d: dict[str, Any], ttnn: Any, numerics: Optional[tuple[str, bool]] = None
                     ) -> Optional[Callable[[], Any]]:
    """ttnn's own decode op on the same device tensors (tile pages): its SDPA decode, or its multi-latent
    attention decode for MLA; None where it has none (multi-token, an LSE). `numerics`: (fidelity, fp32 DST)
    for ttnn's op (default: the kind's)."""
    if p.t > 1 or p.lse:
        return None
    pc, ck = _configs(p)
    if numerics is not None:
        ck = ComputeKernelConfig(math_fidelity=numerics[0], fp32_dest_acc_en=numerics[1])
    pc = SDPAProgramConfig(compute_with_storage_grid_size=p.grid, k_chunk_size=p.k_chunk,
                                    max_cores_per_head_batch=p.max_cores, exp_approx_mode=p.exp_approx)
    kw = dict(is_causal=not p.mask, attn_mask=d["mask"], attention_sink=d["sink"], sliding_window_size=p.window,
              program_config=pc.to_ttnn(), compute_kernel_config=ck.to_ttnn())
    if not p.mask:
        kw["cur_pos_tensor"] = d["pos"]
    op = ttnn.transformer
    if p.dv and p.paged:
        return lambda: op.paged_flash_multi_latent_attention_decode(d["q"], d["k"], head_dim_v=p.dv,
                                                                     page_table_tensor=d["table"], **kw)
    if p.dv:
        return lambda: op.flash_multi_latent_attention_decode(d["q"], d["k"], head_dim_v=p.dv, **kw)
    if p.paged:
        return lambda: op.paged_scaled_dot_product_attention_decode(d["q"], d["k"], d["v"],
                                                                     page_table_tensor=d["table"], **kw)
    return lambda: op.scaled_dot_product_attention_decode(d["q"], d["k"], d["v"], **kw)


def _build_decode(kind: Kind, p: Decode, ttnn: Any, device: Any) -> Case:
    h = decode_host_tensors(p, _gen(kind))
    ref = _decode_reference(p, h)
    d = decode_device_tensors(p, h, ttnn, device)
    call = decode_device_call(p, d)

    def ours() -> Outputs:
        res = call()
        outs = res if p.lse else (res,)
        return {name: _read(ttnn, t, tuple(ref[name].shape)) for name, t in zip(("out", "lse"), outs)}

    theirs_d = decode_device_tensors(p, h, ttnn, device, tile_pages=True) if p.pages == "key_row" else d
    theirs_call = ttnn_decode_call(p, theirs_d, ttnn)
    if theirs_call is None:
        return Case(ref, ours)
    name = "ttnn.transformer." + ("paged_" if p.paged else "") + (
        "flash_multi_latent_attention_decode" if p.dv else "scaled_dot_product_attention_decode")
    return Case(ref, ours, lambda: {"out": _read(ttnn, theirs_call(), tuple(ref["out"].shape))}, name)


def _build_combine(kind: Kind, p: Combine, ttnn: Any, device: Any) -> Case:
    g = _gen(kind)
    outs = torch.randn(p.n, p.g, p.h, p.dv, generator=g)
    lses = torch.randn(p.n, p.g, p.h, generator=g) * 3
    if p.empty:
        lses[0] = float("-inf")
    if p.in_dtype == "bfloat16":
        outs = outs.bfloat16().float()
    ref_out, ref_lse = combine_partials(outs.double()[:, None], lses.double()[:, None])
    ref = {"out": ref_out.reshape(1, p.g, p.h, p.dv), "lse": ref_lse.reshape(1, p.g, p.h)}
    tile = dict(layout=ttnn.TILE_LAYOUT, device=device)
    o_dev = ttnn.from_torch(outs, dtype=ttnn_dtype(ttnn, p.in_dtype), **tile)
    l_dev = ttnn.from_torch(lses[..., None], dtype=ttnn.float32, **tile)

    def ours() -> Outputs:
        out, lse = combine_on_device(o_dev, l_dev, out_dtype=DataType(p.out_dtype))
        return {"out": _read(ttnn, out, tuple(ref["out"].shape)), "lse": _read(ttnn, lse, tuple(ref["lse"].shape))}

    return Case(ref, ours)


def _rope(p: Rotary, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    rd = p.rotary_dim or p.d
    ang = torch.rand(p.b, rd // 2, generator=g) * 6
    return torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)


def _written_rows(cache: torch.Tensor, p: Rotary, table: Optional[torch.Tensor]) -> torch.Tensor:
    """The rows the append wrote, ``[users with a position, nkv, d]`` (paged: looked up in `table`)."""
    rows = []
    for b, pos in enumerate(p.pos):
        if pos < 0:
            continue
        rows.append(cache[int(table[b, pos // 32]), :, pos % 32] if table is not None else cache[b, :, pos])
    return torch.stack(rows)


def _build_rotary(kind: Kind, p: Rotary, ttnn: Any, device: Any) -> Case:
    g = _gen(kind)
    blocks = p.b * p.s // 32
    shape = (blocks, p.nkv, 32, p.d) if p.paged else (p.b, p.nkv, p.s, p.d)
    kc, vc = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    table = torch.randperm(blocks, generator=g).view(p.b, -1).to(torch.int32) if p.paged else None
    cos, sin = _rope(p, g)
    new = {"qkv": torch.randn(1, p.b, (p.nh + 2 * p.nkv) * p.d, generator=g)} if p.packed else {
        "k_new": torch.randn(1, p.b, p.nkv, p.d, generator=g), "v_new": torch.randn(1, p.b, p.nkv, p.d, generator=g),
        **({"q": torch.randn(1, p.b, p.nh, p.d, generator=g)} if p.with_q else {})}
    new = {k: v.bfloat16().float() for k, v in new.items()}
    extra = dict(num_q_heads=p.nh) if p.packed else {}
    opts = dict(rotary_interleaved=p.interleaved, rotary_dim=p.rotary_dim, **extra)
    dt = DataType(p.kv_dtype)
    res = rotary_kv_append(k_cache=tile_from_torch(kc, dt), v_cache=tile_from_torch(vc, dt), cur_pos=list(p.pos),
                                    cos=cos, sin=sin, page_table=table, backend="reference", **new, **opts)
    q_ref, k_img, v_img = res if len(res) == 3 else (None,) + tuple(res)
    ref = {"k_rows": _written_rows(tile_to_torch(k_img).double(), p, table),
           "v_rows": _written_rows(tile_to_torch(v_img).double(), p, table)}
    if q_ref is not None:
        ref["q"] = q_ref.double()
    tile = dict(layout=ttnn.TILE_LAYOUT, device=device)
    ints = dict(dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    kd, vd = (ttnn.from_torch(x, dtype=ttnn_dtype(ttnn, p.kv_dtype), **tile) for x in (kc, vc))
    dev_new = {k: ttnn.from_torch(v, dtype=ttnn.bfloat16, **tile) for k, v in new.items()}
    cos_d, sin_d = angles_to_device(cos, sin, device=device, rotary_interleaved=p.interleaved, rotary_dim=p.rotary_dim)
    pos_d = ttnn.from_torch(torch.tensor(p.pos, dtype=torch.int32), **ints)
    table_d = None if table is None else ttnn.from_torch(table, **ints)

    def ours() -> Outputs:
        out = rotary_kv_append(k_cache=kd, v_cache=vd, cur_pos=pos_d, cos=cos_d, sin=sin_d, page_table=table_d,
                                        backend="device", **dev_new, **opts)
        got = {"k_rows": _written_rows(ttnn.to_torch(kd).float(), p, table),
               "v_rows": _written_rows(ttnn.to_torch(vd).float(), p, table)}
        if q_ref is not None:
            got["q"] = _read(ttnn, out[0], tuple(q_ref.shape))
        return got

    return Case(ref, ours)


_BUILDERS = {Decode: _build_decode, Combine: _build_combine, Rotary: _build_rotary}


def build(kind: Kind, ttnn: Any, device: Any) -> Case:
    """The kind's inputs on `device`, its reference, our call and ttnn's op (module doc)."""
    return _BUILDERS[type(kind.params)](kind, kind.params, ttnn, device)
