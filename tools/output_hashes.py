"""Hash the output bits (O and LSE) of the kernels over a dozen configurations, on the host runtime.

A behaviour-neutral change (a move, a refactor) must print the same table before and after:

    PYTHONPATH=. .venv/bin/python tools/output_hashes.py > /tmp/after.txt

Only the public API is used (plus the combine's host runner, found by either of its paths), so one
script runs on the old and the new tree. Inputs are seeded; each line is `name sha256(O) sha256(LSE)`.
"""

from __future__ import annotations

import hashlib
import importlib
import zlib

import torch

import ttdecode
from ttdecode import ComputeKernelConfig, SDPAProgramConfig


def _digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's bytes, as float32 (bfloat16 widens exactly), first 16 hex digits."""
    return hashlib.sha256(t.detach().to(torch.float32).contiguous().numpy().tobytes()).hexdigest()[:16]


def _kv(b: int, nkv: int, s: int, d: int, g: torch.Generator, dtype=ttdecode.bfloat8_b) -> "ttdecode.TileTensor":
    return ttdecode.from_torch(torch.randn(b, nkv, s, d, generator=g), dtype=dtype)


def _decode(name: str, *, b=2, nh=8, nkv=2, s=1024, d=64, dv=None, t=1, paged=False, grid=(4, 4), **kw) -> tuple:
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    q = torch.randn(t, b, nh, d, generator=g)
    k = _kv(b, nkv, s, d, g)
    v = None if dv else _kv(b, nkv, s, d, g)
    pc = kw.pop("program_config", SDPAProgramConfig(compute_with_storage_grid_size=grid, k_chunk_size=0))
    common = dict(program_config=pc, return_lse=True, backend="host", **kw)
    if dv:
        common["head_dim_v"] = dv
    if paged:
        block = 64
        blocks = s // block
        perm = torch.randperm(b * blocks, generator=g)
        pool_k = torch.empty(b * blocks, nkv, block, d)
        pool_v = torch.empty(b * blocks, nkv, block, d)
        kt, vt = ttdecode.to_torch(k), ttdecode.to_torch(v)
        for u in range(b):
            for j in range(blocks):
                pool_k[perm[u * blocks + j]] = kt[u, :, j * block:(j + 1) * block]
                pool_v[perm[u * blocks + j]] = vt[u, :, j * block:(j + 1) * block]
        table = perm.view(b, blocks).to(torch.int32)
        out, lse = ttdecode.paged_scaled_dot_product_attention_decode(
            q, ttdecode.from_torch(pool_k, dtype=ttdecode.bfloat8_b), ttdecode.from_torch(pool_v, dtype=ttdecode.bfloat8_b),
            table, **common)
    else:
        out, lse = ttdecode.scaled_dot_product_attention_decode(q, k, v, **common)
    return out, lse


def _cases() -> dict:
    pos2 = [700, 1023]
    return {
        "gqa": lambda n: _decode(n, cur_pos=pos2),
        "mqa": lambda n: _decode(n, nkv=1, cur_pos=[5, 900]),
        "mha_d128": lambda n: _decode(n, nh=4, nkv=4, d=128, cur_pos=[300, 1000]),
        "mla": lambda n: _decode(n, nh=16, nkv=1, d=192, dv=128, cur_pos=[511, 77]),
        "paged": lambda n: _decode(n, paged=True, cur_pos=[640, 1000]),
        "mask": lambda n: _decode(n, is_causal=False, s=512,
                                 attn_mask=torch.randn(2, 1, 8, 512, generator=torch.Generator().manual_seed(3)),
                                 program_config=SDPAProgramConfig(compute_with_storage_grid_size=(4, 4),
                                                                  k_chunk_size=128)),
        "multi_token": lambda n: _decode(n, t=3, cur_pos=[400, 1020]),
        "sink": lambda n: _decode(n, cur_pos=pos2,
                                 attention_sink=torch.randn(8, 32, generator=torch.Generator().manual_seed(4))),
        "window": lambda n: _decode(n, cur_pos=pos2, sliding_window_size=200),
        "key_row": lambda n: _decode(n, b=1, s=1536, cur_pos=[1500], grid=(8, 8),
                                    program_config=SDPAProgramConfig(compute_with_storage_grid_size=(8, 8),
                                                                     k_chunk_size=0, kv_pages="key_row")),
        "bf16_dst_approx_exp": lambda n: _decode(
            n, cur_pos=pos2,
            program_config=SDPAProgramConfig(compute_with_storage_grid_size=(4, 4), k_chunk_size=0,
                                             exp_approx_mode=True),
            compute_kernel_config=ComputeKernelConfig(fp32_dest_acc_en=False)),
        "combine": _combine,
        "rotary_append": _rotary,
    }


def _combine(name: str) -> tuple:
    for path in ("ttdecode.ops.combine", "ttdecode.combine"):
        try:
            run_combine = importlib.import_module(path).run_combine
            break
        except (ImportError, AttributeError):
            continue
    g = torch.Generator().manual_seed(7)
    outs = torch.randn(3, 2, 8, 64, generator=g)
    lses = torch.randn(3, 2, 8, generator=g) * 4
    lses[1, 0, 3] = float("-inf")
    return run_combine(outs, lses)


def _rotary(name: str) -> tuple:
    g = torch.Generator().manual_seed(11)
    b, nh, nkv, d, s = 2, 8, 2, 64, 256
    qkv = torch.randn(1, b, (nh + 2 * nkv) * d, generator=g)
    kc = _kv(b, nkv, s, d, g)
    vc = _kv(b, nkv, s, d, g)
    ang = torch.rand(b, d // 2, generator=g) * 6
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    q_rot, k2, v2 = ttdecode.rotary_kv_append(qkv=qkv, k_cache=kc, v_cache=vc, cur_pos=[100, 255], cos=cos, sin=sin,
                                              num_q_heads=nh, backend="host")
    return q_rot, torch.cat([ttdecode.to_torch(k2).flatten(), ttdecode.to_torch(v2).flatten()])


def main() -> None:
    for name, case in _cases().items():
        out, second = case(name)
        print(f"{name:22s} {_digest(out)} {_digest(second)}", flush=True)


if __name__ == "__main__":
    main()
