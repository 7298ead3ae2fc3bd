"""Hash the FlashDecode plans and programs of two dozen configurations (pure data, no kernel run).

A behaviour-neutral change (a move, a refactor of the planner or the program factory) must print the same
lines before and after:

    PYTHONPATH=. .venv/bin/python tools/plan_dumps.py > /tmp/after.txt

Each line is `name sha256(repr(plan)) sha256(format_plan(plan)) sha256(repr(program))`, or the refusal's
message hashed when the planner refuses. Only `make_plan` / `format_plan` of the planner and the host
program builder are used, found by their current or former module paths, so one script runs on old and new
trees.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

from ttdecode import DataType


def _find(name: str, modules: tuple[str, ...]) -> Any:
    for m in modules:
        try:
            mod = importlib.import_module(m)
        except ImportError:
            continue
        if hasattr(mod, name):
            return getattr(mod, name)
    raise ImportError(f"{name} in none of {modules}")


make_plan = _find("make_plan", ("ttdecode.ops.flash_decode.plan",))
format_plan = _find("format_plan", ("ttdecode.ops.flash_decode.plan", "ttdecode.ops.flash_decode.plan.report"))
build_program_for_device = _find("build_program_for_device", ("ttdecode.ops.flash_decode.program_factory",
                                                              "ttdecode.ops.flash_decode.program"))
ComputeSettings = _find("ComputeSettings", ("ttdecode.program", "ttdecode.core.program_description"))
ROOT = str(Path(__file__).resolve().parent.parent)

BASE = dict(batch=2, num_q_heads=8, num_kv_heads=2, seq_len=1024, head_dim=64, grid=(8, 8), cur_pos=[1000, 517])

CASES: dict[str, dict] = {
    "gqa": {},
    "gqa_fp32_off": dict(fp32_dest_acc_en=False),
    "mqa": dict(num_kv_heads=1),
    "mha": dict(num_q_heads=4, num_kv_heads=4),
    "llama8b_b1_8k": dict(batch=1, num_q_heads=32, num_kv_heads=8, seq_len=8192, head_dim=128, cur_pos=[8191]),
    "llama8b_b32_4k": dict(batch=32, num_q_heads=32, num_kv_heads=8, seq_len=4096, head_dim=128,
                           cur_pos=[(97 * i) % 4096 for i in range(32)]),
    "llama70b_t3k_32k": dict(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=32768, head_dim=128, cur_pos=[32767]),
    "mla": dict(num_q_heads=16, num_kv_heads=1, head_dim=576, head_dim_v=512, mla=True, seq_len=2048,
                cur_pos=[2047, 33]),
    "deepseek_mla_paged": dict(batch=4, num_q_heads=128, num_kv_heads=1, head_dim=576, head_dim_v=512, mla=True,
                               seq_len=4096, block_size=64, num_blocks=256, cur_pos=[4095, 100, 2000, 64],
                               max_cores_per_head_batch=None),
    "paged": dict(block_size=64, num_blocks=40, cur_pos=[1000, 63]),
    "window": dict(sliding_window_size=256),
    "sink": dict(attention_sink=True),
    "multi_token": dict(num_tokens=4),
    "mask": dict(is_causal=False, attn_mask_batch=2, cur_pos=None),
    "key_row": dict(kv_pages="key_row", seq_len=4096, cur_pos=[4095, 1200]),
    "key_row_pieces_24": dict(kv_pages="key_row", seq_len=8192, cur_pos=[8191, 3000], key_row_pieces=24,
                              max_cores_per_head_batch=24),
    "chunk_fixed": dict(k_chunk_size=128),
    "chunk_cap_8": dict(chunk_cap=8),
    "share_cache": dict(share_cache=True),
    "lse": dict(return_lse=True),
    "bfp4": dict(kv_dtype=DataType.bfloat4_b),
    "bf16_kv": dict(kv_dtype=DataType.bfloat16),
    "sub_core_grids": dict(sub_core_grids=[((1, 0), (3, 7))], grid=(8, 8)),
    "small_grid": dict(grid=(2, 2), batch=4, cur_pos=[1023, 1, 500, 32]),
    "refused_l1": dict(head_dim=576, head_dim_v=512, mla=True, num_q_heads=128, num_kv_heads=1,
                       l1_bytes_per_core=200_000),
    "refused_heads": dict(num_q_heads=6, num_kv_heads=4),
}


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def main() -> None:
    for name, over in CASES.items():
        kw = {**BASE, **over}
        if kw.get("cur_pos") is None:
            kw.pop("cur_pos")
        try:
            plan = make_plan(**kw)
        except ValueError as e:
            print(f"{name} refused {_h(type(e).__name__ + ': ' + str(e))}")
            continue
        program = build_program_for_device(plan, scale=0.125, compute=ComputeSettings(fp32_dest_acc_en=plan.fp32_dest_acc_en))
        print(f"{name} {_h(repr(plan))} {_h(format_plan(plan))} {_h(repr(program).replace(ROOT, '<root>'))}")


if __name__ == "__main__":
    main()
