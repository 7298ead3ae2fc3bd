"""The device programs of ttdecode's operators, for the mock-Wormhole tests (imported in the child
processes). Each is built the way the device backend builds it, from inputs the public API has
validated: the API is called with backend="host" and stopped right after validation (the host run
never starts), then the device program is made from the validated inputs (no input bytes)."""

from __future__ import annotations

import zlib
from typing import Any, Callable

import torch

import ttdecode
from ttdecode import ComputeKernelConfig, SDPAProgramConfig
from ttdecode.core.program_description import Program


class _Captured(Exception):
    def __init__(self, *args: Any) -> None:
        super().__init__("captured")
        self.captured = args


def _capture(module: Any, name: str, call: Callable[[], Any]) -> tuple:
    original = getattr(module, name)

    def grab(*args: Any, **kwargs: Any) -> Any:
        raise _Captured(*args, *kwargs.values())

    setattr(module, name, grab)
    try:
        call()
    except _Captured as c:
        return c.captured
    finally:
        setattr(module, name, original)
    raise AssertionError(f"{module.__name__}.{name} was not reached")


def _kv(b: int, nkv: int, s: int, d: int, g: torch.Generator, dtype: Any = ttdecode.bfloat8_b) -> Any:
    return ttdecode.from_torch(torch.randn(b, nkv, s, d, generator=g), dtype=dtype)


def _decode_call(name: str, *, b=2, nh=8, nkv=2, s=1024, d=64, dv=None, t=1, paged=False, grid=(4, 4),
                 kv_dtype: Any = ttdecode.bfloat8_b, block: int = 64, **kw: Any) -> Callable[[], Any]:
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    pc = kw.pop("program_config", SDPAProgramConfig(compute_with_storage_grid_size=grid, k_chunk_size=0))
    common = dict(program_config=pc, backend="host", **kw)
    if dv:
        common["head_dim_v"] = dv
    q = torch.randn(t, b, nh, d, generator=g)
    if paged:
        blocks = s // block
        table = torch.randperm(b * blocks, generator=g).view(b, blocks).to(torch.int32)
        pool_k = _kv(b * blocks, nkv, block, d, g, kv_dtype)
        pool_v = None if dv else _kv(b * blocks, nkv, block, d, g, kv_dtype)
        return lambda: ttdecode.paged_scaled_dot_product_attention_decode(q, pool_k, pool_v, table, **common)
    k = _kv(b, nkv, s, d, g, kv_dtype)
    v = None if dv else _kv(b, nkv, s, d, g, kv_dtype)
    return lambda: ttdecode.scaled_dot_product_attention_decode(q, k, v, **common)


def _pc(**kw: Any) -> SDPAProgramConfig:
    kw.setdefault("compute_with_storage_grid_size", (4, 4))
    kw.setdefault("k_chunk_size", 0)
    return SDPAProgramConfig(**kw)


POS = [700, 1023]

#: name -> keyword arguments of _decode_call: the FlashDecode variants the mock checks.
FLASH_DECODE_CASES: dict[str, dict[str, Any]] = {
    "gqa_d64": dict(cur_pos=POS),
    "mqa": dict(nkv=1, cur_pos=[5, 900]),
    "mha_d128": dict(nh=4, nkv=4, d=128, cur_pos=[300, 1000]),
    "gqa_d256": dict(nh=8, nkv=1, d=256, s=512, cur_pos=[100, 511]),
    "q16x32": dict(b=1, nh=16, nkv=1, d=64, cur_pos=[1000]),
    "q32x32": dict(b=1, nh=32, nkv=1, d=64, cur_pos=[1000]),
    "mla_d576": dict(b=1, nh=16, nkv=1, d=576, dv=512, s=512, cur_pos=[500]),
    "mla_d192": dict(nh=16, nkv=1, d=192, dv=128, cur_pos=[511, 77]),
    "paged": dict(paged=True, cur_pos=[640, 1000]),
    "key_row": dict(b=1, s=1536, cur_pos=[1500], grid=(8, 8),
                    program_config=_pc(compute_with_storage_grid_size=(8, 8), kv_pages="key_row")),
    "mask": dict(is_causal=False, s=512,
                 attn_mask=torch.randn(2, 1, 8, 512, generator=torch.Generator().manual_seed(3)),
                 program_config=_pc(k_chunk_size=128)),
    "multi_token": dict(t=3, cur_pos=[400, 1020]),
    "sink": dict(cur_pos=POS, attention_sink=torch.randn(8, 32, generator=torch.Generator().manual_seed(4))),
    "window": dict(cur_pos=POS, sliding_window_size=200),
    "lse": dict(cur_pos=POS, return_lse=True),
    "bf16_dst_exp_approx": dict(cur_pos=POS, program_config=_pc(exp_approx_mode=True),
                                compute_kernel_config=ComputeKernelConfig(fp32_dest_acc_en=False)),
    "fp32_dst_lofi": dict(cur_pos=POS, compute_kernel_config=ComputeKernelConfig(fp32_dest_acc_en=True,
                                                                               math_fidelity="LoFi")),
    "kv_bf16": dict(cur_pos=POS, kv_dtype=ttdecode.bfloat16),
    "paged_bfp4_block128": dict(paged=True, kv_dtype=ttdecode.bfloat4_b, block=128, cur_pos=[640, 1000]),
    "mla_paged_bf16": dict(nh=16, nkv=1, d=192, dv=128, paged=True, kv_dtype=ttdecode.bfloat16, cur_pos=[511, 900]),
    # ttnn's block_size 16 (a padded tile per block): the reader's half-tile build, with a window and 2 tokens
    "paged_block16": dict(paged=True, block=16, t=2, sliding_window_size=100, cur_pos=[640, 1000]),
    "key_row_mask": dict(b=1, s=1536, is_causal=False, grid=(8, 8),
                         attn_mask=torch.randn(1, 1, 8, 1536, generator=torch.Generator().manual_seed(5)),
                         program_config=_pc(compute_with_storage_grid_size=(8, 8), kv_pages="key_row",
                                            k_chunk_size=128)),
    "multi_token_window_sink": dict(t=8, cur_pos=[400, 1020], sliding_window_size=100,
                                    attention_sink=torch.randn(8, 32, generator=torch.Generator().manual_seed(6))),
    "sub_grid": dict(cur_pos=POS, program_config=_pc(compute_with_storage_grid_size=(8, 8),
                                                     sub_core_grids=(((1, 2), (4, 5)),))),
    # DeepSeek-V3's MLA decode, 128 q heads, 16 cores per head: the partials through the merge slot
    "mla_merge_slot": dict(b=4, nh=128, nkv=1, d=576, dv=512, s=1024, paged=True, grid=(8, 8),
                           cur_pos=[1023, 40, 700, 511],
                           program_config=_pc(compute_with_storage_grid_size=(8, 8), k_chunk_size=128,
                                              max_cores_per_head_batch=16)),
    "mla_merge_slot_key_row": dict(b=4, nh=128, nkv=1, d=576, dv=512, s=1024, paged=True, grid=(8, 8),
                                   cur_pos=[1023, 40, 700, 511],
                                   program_config=_pc(compute_with_storage_grid_size=(8, 8), k_chunk_size=128,
                                                      max_cores_per_head_batch=16, kv_pages="key_row")),
    # the same at ttnn's default config (dynamic chunks): the planner takes chunks of up to 4 tiles
    "mla_merge_slot_dynamic": dict(b=4, nh=128, nkv=1, d=576, dv=512, s=1024, paged=True, grid=(8, 8),
                                   cur_pos=[1023, 40, 700, 511],
                                   program_config=_pc(compute_with_storage_grid_size=(8, 8),
                                                      max_cores_per_head_batch=16)),
}


def flash_decode_program(name: str) -> tuple[Program, dict[str, Any]]:
    """The device Program of FLASH_DECODE_CASES[name] and a few facts of its plan."""
    import ttdecode.api as api
    from ttdecode.ops.flash_decode.device_step import decode_program
    from ttdecode.ops.flash_decode.op import compute_settings, make_decode_plan

    inputs = _capture(api, "run_host", _decode_call(name, **dict(FLASH_DECODE_CASES[name])))[0]
    plan = make_decode_plan(inputs)
    program = decode_program(inputs, plan, compute_settings(inputs))
    facts = {"q_tile_rows": plan.q_tile_rows, "cores": len(program.cores()), "kernels": len(program.kernels),
             "merge_slot": plan.merge_slot, "bank_local": plan.bank_local, "chunk_cap": plan.chunk_cap}
    return program, facts


def combine_program(partials: int = 3, groups: int = 2, heads: int = 8, dv: int = 64,
                    in_dtype: Any = ttdecode.bfloat16) -> Program:
    from ttdecode.ops.combine.plan import make_combine_plan
    from ttdecode.ops.combine.program_factory import build_combine_program_for_device

    return build_combine_program_for_device(make_combine_plan(partials=partials, groups=groups, heads=heads,
                                                              head_dim_v=dv, in_dtype=in_dtype))


ROTARY_CASES: dict[str, dict[str, Any]] = {
    "half": dict(rotary_interleaved=False),
    "interleaved": dict(rotary_interleaved=True),
    "partial_dim": dict(rotary_interleaved=False, rotary_dim=32),
    "packed_qkv": dict(packed=True),
    "k_v_only": dict(q=False),
    "paged": dict(rotary_interleaved=False, paged=True),
    "paged_block16": dict(rotary_interleaved=False, paged=True, block=16),
}


def rotary_program(name: str) -> Program:
    import ttdecode.ops.rotary_append.op as op
    from ttdecode.ops.rotary_append.program_factory import build_program

    kw = dict(ROTARY_CASES[name])
    g = torch.Generator().manual_seed(11)
    b, nh, nkv, d, s = 2, 8, 2, 64, 256
    kc, vc = _kv(b, nkv, s, d, g), _kv(b, nkv, s, d, g)
    rd = kw.get("rotary_dim") or d
    ang = torch.rand(b, rd // 2, generator=g) * 6
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    packed = kw.pop("packed", False)
    with_q = kw.pop("q", True)
    block = kw.pop("block", 32)
    if kw.pop("paged", False):  # a pool of 512 / block blocks, users' blocks shuffled
        n = b * s // block
        kc, vc = _kv(n, nkv, block, d, g), _kv(n, nkv, block, d, g)
        kw["page_table"] = torch.randperm(n, generator=g).view(b, n // b).to(torch.int32)
    args: dict[str, Any] = dict(k_cache=kc, v_cache=vc, cur_pos=[100, 255], cos=cos, sin=sin, backend="host", **kw)
    if packed:
        args.update(qkv=torch.randn(1, b, (nh + 2 * nkv) * d, generator=g), num_q_heads=nh)
    else:
        args.update(k_new=torch.randn(1, b, nkv, d, generator=g), v_new=torch.randn(1, b, nkv, d, generator=g))
        if with_q:
            args.update(q=torch.randn(1, b, nh, d, generator=g))
    inp, grid = _capture(op, "_run_host", lambda: ttdecode.rotary_kv_append(**args))
    return build_program(inp, None, grid)
