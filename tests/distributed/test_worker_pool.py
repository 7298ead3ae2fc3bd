"""The torch.distributed worker pool: collectives across ranks, state kept, errors named."""

from __future__ import annotations

import os
import signal

import pytest
import torch
import torch.distributed as dist

from ttdecode.distributed import RankContext, WorkerError, WorkerPool


def _all_reduce_rank(ctx: RankContext, base: torch.Tensor) -> torch.Tensor:
    x = base * (ctx.rank + 1)
    dist.all_reduce(x)
    return x


def _remember(ctx: RankContext, value: int) -> int:
    previous = ctx.state.get("value", -1)
    ctx.state["value"] = value
    return previous


def _gather_ranks(ctx: RankContext) -> list[int]:
    out = [torch.zeros(1, dtype=torch.int64) for _ in range(ctx.world_size)]
    dist.all_gather(out, torch.tensor([ctx.rank * 10]))
    return [int(t) for t in out]


def _fail_on(ctx: RankContext, rank: int) -> str:
    if ctx.rank == rank:
        raise ValueError(f"bad input on {ctx.name}")
    return ctx.name


def _die_on(ctx: RankContext, rank: int) -> None:
    if ctx.rank == rank:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()  # the survivors wait for the dead rank


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(3, label="device", timeout=60.0) as p:
        yield p


def test_all_reduce_sums_every_rank_contribution(pool):
    outs = pool.run_all(_all_reduce_rank, torch.ones(4))
    for out in outs:
        assert torch.equal(out, torch.full((4,), 1.0 + 2.0 + 3.0))


def test_per_rank_arguments_and_state_persist_across_calls(pool):
    assert pool.run(_remember, [(10,), (11,), (12,)]) == [-1, -1, -1]
    assert pool.run(_remember, [(20,), (21,), (22,)]) == [10, 11, 12]


def test_all_gather_returns_results_in_rank_order(pool):
    assert pool.run_all(_gather_ranks) == [[0, 10, 20]] * 3


def test_error_in_one_rank_names_the_device_and_pool_survives(pool):
    with pytest.raises(WorkerError, match=r"device 1: ValueError: bad input on device 1") as info:
        pool.run_all(_fail_on, 1)
    assert info.value.rank == 1
    assert pool.run_all(_fail_on, -1) == ["device 0", "device 1", "device 2"]


def test_wrong_number_of_argument_tuples_is_refused(pool):
    with pytest.raises(ValueError, match=r"per_rank_args: expected 3 argument tuples .* got 2"):
        pool.run(_remember, [(1,), (2,)])


def test_dead_worker_is_an_error_naming_the_device_not_a_hang():
    p = WorkerPool(2, label="device", timeout=30.0)
    with pytest.raises(WorkerError, match=r"device 1: the worker process died during the call") as info:
        p.run_all(_die_on, 1)
    assert info.value.rank == 1
    assert p.closed
    with pytest.raises(WorkerError, match="pool is closed"):
        p.run_all(_remember, 1)
