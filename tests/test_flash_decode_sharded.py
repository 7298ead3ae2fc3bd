"""FlashDecode with Q and the output height-sharded in L1 on the host runtime: the reader reads each
user's Q tiles from the L1 shard of the core holding them and the writer writes each user's output rows
into the L1 shard of its holder (NoC coordinates of the holders, as on the chip); the output is bit for
bit the one of the same call with Q and the output interleaved in DRAM. Q [1, B, NH <= 32, D] in
``nlp_create_qkv_heads_decode``'s placement: one user's [32 padded heads, D] a shard, on B cores of the
batch grid -- here on holders that run no FlashDecode piece too. A read of the shards' address on a core
that holds no shard is refused by the host runtime (no region there), as the chip would read another
buffer."""

from __future__ import annotations

import math

import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings, CoreCoord, NocX, NocY
from ttdecode.core.tensor import from_torch
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.ops.flash_decode.program_factory import build_program, decode_outputs
from ttdecode.runtime import KernelError, run_program

B, NH, NKV, D, S = 3, 8, 2, 64, 256


def _case():
    g = torch.Generator().manual_seed(4)
    q = from_torch(torch.randn(1, B, NH, D, generator=g), DataType.bfloat16)
    k = from_torch(torch.randn(B, NKV, S, D, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(B, NKV, S, D, generator=g), DataType.bfloat8_b)
    pos = [255, 17, 130]
    plan = make_plan(batch=B, num_q_heads=NH, num_kv_heads=NKV, seq_len=S, head_dim=D, cur_pos=pos, grid=(4, 2),
                     kv_dtype=DataType.bfloat8_b)
    return plan, dict(q=q, k=k, v=v, cur_pos_source=torch.tensor(pos, dtype=torch.int32),
                      scale=1 / math.sqrt(D), compute=ComputeSettings())


@pytest.mark.parametrize("holders", [[(0, 0), (1, 0), (2, 0)], [(5, 3), (0, 1), (7, 7)]],
                         ids=["batch-grid", "outside-the-grid"])
def test_q_read_from_its_l1_shards_gives_the_dram_bits(holders) -> None:
    plan, args = _case()
    want, _ = decode_outputs(plan, run_program(build_program(plan, **args)).tensors)
    shards = (tuple(CoreCoord(x, y) for x, y in holders), D // 32)  # one user's tile row a shard
    program = build_program(plan, q_shards=shards, **args)
    assert program.tensor("q").sharded
    got, _ = decode_outputs(plan, run_program(program).tensors)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_a_shard_read_from_a_core_that_does_not_hold_it_is_refused() -> None:
    plan, args = _case()
    holders = (CoreCoord(0, 0), CoreCoord(1, 0), CoreCoord(2, 0))
    program = build_program(plan, q_shards=(holders, D // 32), **args)
    reader = program.kernels[0]
    first = int(reader.defines["Q_SHARD_ARGS"])
    # user 1's holder named as (3, 0), a core of the grid holding no shard
    reader.common_runtime_args[first + 2:first + 4] = [NocX(CoreCoord(3, 0)), NocY(CoreCoord(3, 0))]
    with pytest.raises(KernelError, match="outside its CBs and semaphores"):
        run_program(program, watchdog_seconds=1.0)


@pytest.mark.parametrize("with_q", [False, True])
def test_the_output_written_to_its_l1_shards_is_the_dram_output(with_q: bool) -> None:
    """SCORES_BATCHED_MM_OUTPUT_MEMCFG's placement: user b's [32 padded heads, Dv] on core (b, 0)."""
    plan, args = _case()
    want = run_program(build_program(plan, **args)).tensors["out"]
    holders = tuple(CoreCoord(b, 0) for b in range(B))
    q_shards = ((CoreCoord(6, 5), CoreCoord(7, 5), CoreCoord(0, 4)), D // 32) if with_q else None
    program = build_program(plan, q_shards=q_shards, out_shards=(holders, D // 32), **args)
    assert program.tensor("out").sharded and program.kernels[1].defines["OUT_SHARDS"] == str(B)
    assert run_program(program).tensors["out"] == want
