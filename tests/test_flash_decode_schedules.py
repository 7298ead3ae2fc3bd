"""The FlashDecode kernels give the same bits under every schedule the host runtime can perturb.

A seeded run (`schedule_seed`) picks the next kernel at random, preempts kernels between API calls,
lands NoC transfers at random points before their barriers and makes semaphore increments visible
at random points before the sender's atomic barrier (ttdecode/runtime/README.md, Hazards). The
results of a correct multi-core program cannot depend on any of that: every program class below
(contiguous with a three-round merge tree, several pieces per core, paged, sliding window with a
sink, without LSE) must give exactly the bytes of the deterministic schedule, and a user's output
must stay bit-identical whatever the rest of the batch, under every seed.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import pytest
import torch

from ttdecode.accuracy import check_close
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.core.program_description import ComputeSettings
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import from_torch, to_torch

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b


@pytest.fixture(autouse=True)
def _deterministic_unless_seeded(monkeypatch):
    """`schedule_seed=None` must mean the deterministic schedule here, even when the suite runs seeded."""
    monkeypatch.delenv("TTDECODE_SCHEDULE_SEED", raising=False)

#: Seeds each program runs under (besides the deterministic schedule); each seed replays exactly.
SEEDS = (1, 2, 3, 4)


def _inputs(b: int, nh: int, nkv: int, s: int, d: int, kv: DataType, seed: int):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, b, nh, d, generator=gen)
    k = torch.randn(b, nkv, s, d, generator=gen)
    v = torch.randn(b, nkv, s, d, generator=gen)
    return q, k, v


def _paged(k: torch.Tensor, block_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The contiguous cache [B, NKV, S, D] as shuffled blocks, and the page table [B, S / block_size]."""
    b, nkv, s, d = k.shape
    per_user = s // block_size
    table = torch.randperm(b * per_user, generator=torch.Generator().manual_seed(seed)).reshape(b, per_user)
    blocks = torch.empty(b * per_user, nkv, block_size, d)
    for u in range(b):
        for j in range(per_user):
            blocks[table[u, j]] = k[u, :, j * block_size:(j + 1) * block_size]
    return blocks, table.to(torch.int32)


#: name -> (shape and plan options). Shapes are lean; each class exercises a different protocol.
CLASSES = {
    "contiguous, 8 pieces per head, 3-round tree": dict(
        b=2, nh=8, nkv=2, s=1024, d=64, pos=[1023, 600], kv=BFP8, plan=dict(max_cores_per_head_batch=8,
                                                                             k_chunk_size=32, return_lse=True)),
    "several pieces per core (3 on each of 8 cores, 2-round tree)": dict(
        b=3, nh=8, nkv=2, s=512, d=64, pos=[511, 300, -1], kv=BFP4, plan=dict(max_cores_per_head_batch=4,
                                                                               k_chunk_size=32, grid=(4, 2),
                                                                               return_lse=True)),
    "paged, shuffled blocks": dict(
        b=2, nh=8, nkv=2, s=512, d=64, pos=[511, 200], kv=BF16, block_size=64,
        plan=dict(max_cores_per_head_batch=4, k_chunk_size=64, return_lse=True)),
    "sliding window and attention sink": dict(
        b=2, nh=8, nkv=2, s=512, d=64, pos=[511, 150], kv=BFP8, window=100,
        plan=dict(max_cores_per_head_batch=4, k_chunk_size=32, return_lse=True)),
    "dynamic chunks without LSE, GQA group of 8": dict(
        b=2, nh=16, nkv=2, s=1024, d=128, pos=[1023, 31], kv=BFP8, plan=dict(max_cores_per_head_batch=8)),
}


def _run(case: dict, seed: Optional[int], users: Optional[Sequence[int]] = None):
    """Run one program class (restricted to `users`, default all) under `seed`; returns (out, lse, ref)."""
    q, k, v = _inputs(case["b"], case["nh"], case["nkv"], case["s"], case["d"], case["kv"], seed=7)
    users = list(range(case["b"])) if users is None else list(users)
    q, k, v = q[:, users], k[users], v[users]
    pos = [case["pos"][u] for u in users]
    window = case.get("window")
    sink = 3 * torch.randn(case["nh"], generator=torch.Generator().manual_seed(3)) if window else None
    kv_dt = case["kv"]
    table = None
    paging = {}
    if "block_size" in case:
        k, table = _paged(k, case["block_size"], seed=5)
        v, _ = _paged(v, case["block_size"], seed=5)
        paging = dict(block_size=case["block_size"], num_blocks=k.shape[0])
    qt, kt, vt = from_torch(q, BF16), from_torch(k, kv_dt), from_torch(v, kv_dt)
    plan = make_plan(batch=len(users), num_q_heads=case["nh"], num_kv_heads=case["nkv"], seq_len=case["s"],
                     head_dim=case["d"], kv_dtype=kv_dt, cur_pos=pos, sliding_window_size=window,
                     attention_sink=sink is not None, **paging, **case["plan"])
    scale = 1.0 / math.sqrt(case["d"])
    out, lse, _ = run_flash_decode(plan, q=qt, k=kt, v=vt, cur_pos_source=None, scale=scale,
                                   compute=ComputeSettings(), page_table=table, attention_sink=sink,
                                   schedule_seed=seed)
    ref, _ = sdpa_decode_reference(to_torch(qt).double(), to_torch(kt).double(), to_torch(vt).double(),
                                   cur_pos=pos, scale=scale, sliding_window_size=window, page_table=table,
                                   attention_sink=None if sink is None else sink.to(torch.bfloat16).double(),
                                   return_lse=True)
    return plan, out, lse, ref


def _bits(out: torch.Tensor, lse: Optional[torch.Tensor]) -> tuple[bytes, Optional[bytes]]:
    return out.view(torch.int16).numpy().tobytes(), None if lse is None else lse.view(torch.int32).numpy().tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CLASSES))
def test_every_schedule_seed_gives_the_bits_of_the_deterministic_schedule(name: str) -> None:
    case = CLASSES[name]
    plan, out, lse, ref = _run(case, seed=None)
    assert len(plan.active_cores) > 1 and plan.rounds >= 2, "a multi-core program with a multi-round merge tree"
    for u, p in enumerate(case["pos"]):
        if p >= 0:
            check_close(out[:, u], ref[:, u], f"{name}: user {u}, deterministic schedule")
    want = _bits(out, lse)
    for seed in SEEDS:
        _, out_s, lse_s, _ = _run(case, seed=seed)
        assert _bits(out_s, lse_s) == want, f"{name}: schedule seed {seed} changed the result"


@pytest.mark.parametrize("seed", (None,) + SEEDS)
def test_a_users_output_does_not_depend_on_the_batch_under_any_schedule(seed: Optional[int]) -> None:
    case = CLASSES["contiguous, 8 pieces per head, 3-round tree"]
    case = {**case, "b": 3, "pos": [1023, 600, 77]}
    _, full, full_lse, _ = _run(case, seed=seed)
    _, alone, alone_lse, _ = _run(case, seed=seed, users=[1])
    _, pair, pair_lse, _ = _run(case, seed=seed, users=[2, 1])
    assert torch.equal(full[:, 1].view(torch.int16), alone[:, 0].view(torch.int16))
    assert torch.equal(pair[:, 1].view(torch.int16), alone[:, 0].view(torch.int16))
    assert torch.equal(full_lse[:, 1].view(torch.int32), alone_lse[:, 0].view(torch.int32))
    assert torch.equal(pair_lse[:, 1].view(torch.int32), alone_lse[:, 0].view(torch.int32))
