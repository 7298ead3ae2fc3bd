"""Drivers the mock tests share (each runs in the test's child process, on a mock device or mesh).

* `join_leave_steps`: a decoder's 20-step decode loop with users joining and leaving, one record a step
  (the Llama decoder on a mock N150 / T3K, context parallelism on a mock T3K);
* `decode_inputs`: the Q / K / V / positions (and page table) of a FlashDecode call on a device.

Nothing here imports the operators, the public API or the models (this room sits below them, see
tests/test_imports.py): what a driver drives comes in as an argument (the decoder, the ``ttnn`` module).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from ttdecode.testing.transfers import TransferLog

__all__ = ["JOINS", "LEAVES", "join_leave_steps", "DecodeInputs", "decode_inputs"]

#: Step -> the slots that (re)start at position 0 in it (the default of `join_leave_steps`, batch >= 4).
JOINS: dict[int, list[int]] = {0: [0, 1], 3: [2], 8: [3], 11: [0], 14: [1]}
#: Step -> the slots that go idle (position -1) in it.
LEAVES: dict[int, list[int]] = {6: [1], 10: [0], 17: [2]}


def join_leave_steps(decoder: Any, device: Any, batch: int, log: TransferLog, *,
                     joins: Optional[dict[int, list[int]]] = None, leaves: Optional[dict[int, list[int]]] = None,
                     steps: int = 20) -> list[dict[str, Any]]:
    """``steps`` decode steps of ``decoder`` (a ``LlamaDecoder`` on the device backend) over ``batch``
    slots, slots (re)starting at position 0 (``joins``, default `JOINS`) or going idle (``leaves``,
    default `LEAVES`); a joining slot's token is ``1 + 7 * slot + step``, then each active slot feeds
    back its argmax. Steps 0, 3, 6, ... ask for the logits (``step``), the others for the on-device
    argmax (``next_tokens``).

    One record a step: ``step``, ``positions`` (the ``batch`` positions, -1 idle), ``greedy``,
    ``seconds`` (wall time of the call), ``moves`` (``log``'s host <-> device moves during the step;
    ``log`` is cleared before the first step and after each), ``writes`` and ``ops`` (the device
    decoder's counters, ``decoder._device``), ``entries`` (``device``'s program-cache entries after the
    step), ``out_shape`` and ``idle_out`` (each idle slot's logits' absolute sum, or its argmax id)."""
    joins = JOINS if joins is None else joins
    leaves = LEAVES if leaves is None else leaves
    pos = [-1] * batch
    nxt = torch.zeros(batch, dtype=torch.int64)
    records = []
    log.clear()
    for s in range(steps):
        for b in leaves.get(s, []):
            pos[b] = -1
        for b in joins.get(s, []):
            pos[b] = 0
            nxt[b] = 1 + 7 * b + s
        greedy = s % 3 != 0
        positions = torch.tensor(pos, dtype=torch.int64)
        t0 = time.perf_counter()
        out = decoder.next_tokens(nxt, positions) if greedy else decoder.step(nxt, positions)
        seconds = time.perf_counter() - t0
        ids = out if greedy else out.argmax(-1)
        records.append({"step": s, "positions": list(pos), "greedy": greedy, "seconds": round(seconds, 4),
                        "moves": list(log.moves), "writes": decoder._device.writes,
                        "ops": dict(decoder._device.ops), "entries": int(device.num_program_cache_entries()),
                        "out_shape": list(out.shape),
                        "idle_out": [float(out[b].abs().sum()) if not greedy else int(out[b])
                                     for b in range(batch) if pos[b] < 0]})
        log.clear()
        nxt = torch.where(positions >= 0, ids, nxt).clamp(min=0)
        pos = [p + 1 if p >= 0 else -1 for p in pos]
    return records


@dataclass
class DecodeInputs:
    """A FlashDecode call's device tensors: ``q`` bfloat16 ``[1, B, NH, D]``, ``k`` / ``v`` bfloat8_b
    ``[B, NKV, S, D]`` (contiguous) or ``[blocks, NKV, block, D]`` (paged), ``pos`` int32 ``[B]`` (the
    cur_pos_tensor) and ``table`` int32 ``[B, blocks / B]`` (paged; None contiguous), all on the device."""

    q: Any
    k: Any
    v: Any
    pos: Any
    table: Any = None


def decode_inputs(ttnn: Any, device: Any, positions: Sequence[int], *, heads: int, kv_heads: int, head_dim: int,
                  paged: bool, seq_len: int = 0, blocks: int = 0, block_size: int = 64) -> DecodeInputs:
    """Random Q, K, V (tiles) and the int32 positions (row major) on ``device``, one user a position:
    K / V contiguous of ``seq_len`` positions, or (``paged``) a pool of ``blocks`` blocks of
    ``block_size`` positions with a shuffled page table dealing them out evenly."""
    batch = len(positions)
    tile = dict(layout=ttnn.TILE_LAYOUT, device=device)
    ints = dict(dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    q = ttnn.from_torch(torch.randn(1, batch, heads, head_dim), dtype=ttnn.bfloat16, **tile)
    shape = (blocks, kv_heads, block_size, head_dim) if paged else (batch, kv_heads, seq_len, head_dim)
    k = ttnn.from_torch(torch.randn(*shape), dtype=ttnn.bfloat8_b, **tile)
    v = ttnn.from_torch(torch.randn(*shape), dtype=ttnn.bfloat8_b, **tile)
    table = (ttnn.from_torch(torch.randperm(blocks, dtype=torch.int32).reshape(batch, -1), **ints)
             if paged else None)
    pos = ttnn.from_torch(torch.tensor(list(positions), dtype=torch.int32), **ints)
    return DecodeInputs(q=q, k=k, v=v, pos=pos, table=table)
