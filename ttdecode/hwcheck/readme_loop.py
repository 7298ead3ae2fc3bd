"""The README's traced decode loop ("On a Wormhole: a traced loop"), as the hardware check runs it.

The lines between the two marker comments are the README block's lines after its ``ttnn.open_device``
line, character for character (tests/test_readme.py holds them equal): the user's loop and the check's are
one code path. The check opens the device itself and times the call of `readme_traced_loop`.
"""

from __future__ import annotations

from typing import Any

import torch

from ttdecode import api as ttdecode  # the public API under the README's name

__all__ = ["readme_traced_loop", "BEGIN", "END"]

BEGIN = "# README.md: begin"
END = "# README.md: end"


def readme_traced_loop(ttnn: Any, device: Any) -> None:
    """The README's loop on `device` (opened with a trace region of at least 8 MiB): a paged Llama-3.1-8B
    decode step (B 8, 32 q / 8 KV heads, D 128, bfloat8_b blocks of 64) captured in a trace with the
    on-device position advance, then 16 replays, then the trace released."""
    # README.md: begin
    B, NH, NKV, D, BLOCK, BLOCKS = 8, 32, 8, 128, 64, 256  # Llama-3.1-8B heads
    tile = dict(layout=ttnn.TILE_LAYOUT, device=device)
    k_cache = ttnn.from_torch(torch.zeros(BLOCKS, NKV, BLOCK, D), dtype=ttnn.bfloat8_b, **tile)
    v_cache = ttnn.from_torch(torch.zeros(BLOCKS, NKV, BLOCK, D), dtype=ttnn.bfloat8_b, **tile)
    ints = dict(dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    table = ttnn.from_torch(torch.randperm(BLOCKS, dtype=torch.int32).reshape(B, -1), **ints)
    pos = ttnn.from_torch(torch.zeros(B, dtype=torch.int32), **ints)
    q = ttnn.from_torch(torch.randn(1, B, NH, D), dtype=ttnn.bfloat16, **tile)

    def attend():
        return ttdecode.paged_scaled_dot_product_attention_decode(
            q, k_cache, v_cache, page_table_tensor=table, cur_pos_tensor=pos, backend="device")

    attend()  # plan, program, JIT: once per shape
    tid = ttnn.begin_trace_capture(device, cq_id=0)
    out = attend()  # keep `out` alive
    ttnn.plus_one(pos, skip_negative_entries=True)  # positions advance on the device
    ttnn.end_trace_capture(device, tid, cq_id=0)
    for _ in range(16):
        ttnn.execute_trace(device, tid, cq_id=0, blocking=False)  # one token a replay
    ttnn.release_trace(device, tid)
    # README.md: end
    ttnn.synchronize_device(device)
    ttnn.deallocate(out)
