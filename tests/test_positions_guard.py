"""Positions as runtime args and the kernels' guards, on the host runtime (the same kernels as the device).

A device step may not read positions or page tables back, so the reader guards them: a position
outside -1..S-1 or a page id outside the pool in the blocks a user attends skips the user (zero
output); the other users' bits do not change. Positions given as a list travel as the reader's
common runtime args (`positions_in_args`) with the same output bits as the cur_pos tensor.
"""

from __future__ import annotations

import dataclasses

import torch

from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.ops.flash_decode.kernel_args import READER_COMMON_ARGS
from ttdecode.ops.flash_decode.program_factory import build_program, decode_outputs
from ttdecode.core.program_description import ComputeSettings
from ttdecode.runtime import run_program
from ttdecode.core.tensor import from_torch

B, NH, NKV, S, D, BS = 3, 8, 2, 256, 64, 64


def _qkv(paged: bool):
    g = torch.Generator().manual_seed(1)
    lead, rows = (B * S // BS, BS) if paged else (B, S)
    q = from_torch(torch.randn(1, B, NH, D, generator=g))
    k = from_torch(torch.randn(lead, NKV, rows, D, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(lead, NKV, rows, D, generator=g), DataType.bfloat8_b)
    return q, k, v


def _run(program, plan):
    return decode_outputs(plan, run_program(program).tensors)[0]


def _plan(paged: bool, pos):
    extra = dict(block_size=BS, num_blocks=B * S // BS) if paged else {}
    return make_plan(batch=B, num_q_heads=NH, num_kv_heads=NKV, seq_len=S, head_dim=D, cur_pos=pos, grid=(4, 2),
                     max_cores_per_head_batch=2, **extra)


def test_list_positions_as_runtime_args_give_the_same_bits() -> None:
    pos = [200, 17, -1]
    plan = _plan(False, pos)
    q, k, v = _qkv(False)
    common = dict(plan=plan, q=q, k=k, v=v, cur_pos_source=pos, scale=0.125, compute=ComputeSettings())
    as_tensor = build_program(**common)
    as_args = build_program(**common, positions_in_args=True)
    assert as_args.kernels[0].common_runtime_args[READER_COMMON_ARGS:] == [200, 17, 0xFFFFFFFF]
    assert torch.equal(_run(as_tensor, plan).view(torch.int16), _run(as_args, plan).view(torch.int16))


def test_a_position_beyond_the_cache_skips_only_that_user() -> None:
    pos = [200, 17, 100]
    plan = _plan(False, pos)
    q, k, v = _qkv(False)
    prog = build_program(plan, q=q, k=k, v=v, cur_pos_source=pos, scale=0.125, compute=ComputeSettings(),
                         positions_in_args=True)
    good = _run(prog, plan)
    reader = prog.kernels[0]
    reader.common_runtime_args[READER_COMMON_ARGS + 2] = S + 40  # beyond the cache: never read
    bad = _run(prog, plan)
    assert torch.equal(bad[:, :2].view(torch.int16), good[:, :2].view(torch.int16))
    assert bool((bad[:, 2] == 0).all())
    reader.common_runtime_args[READER_COMMON_ARGS + 2] = (-7) & 0xFFFFFFFF  # below -1: skipped too
    assert bool((_run(prog, plan)[:, 2] == 0).all())


def test_a_page_id_outside_the_pool_skips_only_that_user() -> None:
    pos = [200, 17, 100]
    table = torch.arange(B * S // BS, dtype=torch.int32).reshape(B, S // BS)
    plan = _plan(True, pos)
    q, k, v = _qkv(True)
    prog = build_program(plan, q=q, k=k, v=v, cur_pos_source=pos, scale=0.125, compute=ComputeSettings(),
                         page_table=table)
    good = _run(prog, plan)
    bad_table = table.clone()
    bad_table[0, 200 // BS] = 10_000  # in user 0's attended blocks
    bad_table[1, 3] = -5             # past user 1's position: never read, not a reason to skip
    image = bad_table.numpy().astype("<i4").tobytes()
    prog.tensors[:] = [dataclasses.replace(t, data=image) if t.name == "page_table" else t for t in prog.tensors]
    bad = _run(prog, plan)
    assert bool((bad[:, 0] == 0).all())
    assert torch.equal(bad[:, 1:].view(torch.int16), good[:, 1:].view(torch.int16))
