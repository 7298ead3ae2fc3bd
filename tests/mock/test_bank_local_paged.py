"""The bank-local paged FlashDecode (kv_pages "key_row" with a paged pool) through ttnn on a mock N150:
the K/V pool is a device tensor in ttdecode.ttnn_backend.key_row_memory_config ([1, 1, 32, D] ND shards
round robin over the DRAM banks) of the pool's shape [num_blocks, NKV, block_size, D]; a planned step
(plan_decode) is accepted by tt-metal, the JIT compiles its three kernels (GCC 12 too), and its steps after the first,
with a device page table and device positions, move nothing between host and device and, from the second
on, add no program-cache entry; for pieces that keep to their banks and for spread pieces (DecodePlan.spread_banks). The plan takes the device's DRAM banks (device.dram_grid_size()). The mock
computes nothing (the numbers are checked on the host runtime: tests/test_flash_decode_bank_paged.py)."""

from __future__ import annotations

import os

from ttdecode.testing import gcc_front_end as gfe
from ttdecode.testing.dry_run import check_jit, jit_records

STEPS = r"""
from pathlib import Path
import torch
import ttnn
import ttdecode
from ttdecode import SDPAProgramConfig
from ttdecode.ops.flash_decode.device_step import plan_decode
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.transfers import decode_steps
from ttdecode.ttnn_backend import dram_banks, key_row_memory_config

d = open_mock_device()


def steps(B, NH, NKV, D, BLOCK, S, positions, **config):
    blocks = B * S // BLOCK
    tile = dict(layout=ttnn.TILE_LAYOUT, device=d)
    ints = dict(dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=d)
    pool = dict(dtype=ttnn.bfloat8_b, memory_config=key_row_memory_config(ttnn, d, D), **tile)
    q = ttnn.from_torch(torch.randn(1, B, NH, D), dtype=ttnn.bfloat16, **tile)
    k = ttnn.from_torch(torch.randn(blocks, NKV, BLOCK, D), **pool)
    v = ttnn.from_torch(torch.randn(blocks, NKV, BLOCK, D), **pool)
    table = ttnn.from_torch(torch.randperm(blocks, dtype=torch.int32).reshape(B, -1), **ints)
    pos = ttnn.from_torch(torch.tensor(positions, dtype=torch.int32), **ints)
    pc = SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), k_chunk_size=0, kv_pages="key_row", **config)
    step = plan_decode(q, k, v, DecodeOptions(paged=True, page_table=table, cur_pos_tensor=pos, program_config=pc))
    moves, entries, pos = decode_steps(ttnn, d, step, q, k, v, pos, table)
    kernels = [{"name": kk.name, "source": str(Path(kk.source).resolve()), "kind": kk.kind.value}
               for kk in step.program.kernels]
    for t in (q, k, v, table, pos):
        ttnn.deallocate(t)
    return {"moves": moves, "entries": entries, "kernels": kernels, "bank_local": step.plan.bank_local,
            "dram_banks": step.plan.dram_banks, "device_banks": dram_banks(d), "pieces": step.plan.pieces_per_work,
            "softmax_chunks": step.plan.softmax_chunks, "spread_banks": step.plan.spread_banks,
            "layouts": sorted({t.layout for t in step.program.tensors if t.name in ("k", "v")})}


# Llama-3.1-8B's heads at B 4, blocks of 64; a Llama-70B T3K shard (one KV head) at B 1 and 16K, blocks of 32,
# at ttnn's default max_cores_per_head_batch (16): the length where the planner spreads its pieces
emit({"llama8b": steps(4, 32, 8, 128, 64, 2048, [0, 63, 64, 2000]),
      "t3k_shard": steps(1, 8, 1, 128, 32, 16384, [16000], max_cores_per_head_batch=16)})
ttnn.close_device(d)
"""


def check_steps(res: dict, jit_log: str) -> None:
    """A case's steps: accepted, every kernel JIT-compiled (by GCC 12 too), nothing moved after the first step,
    no program-cache entry after the second."""
    assert res["bank_local"] and res["layouts"] == ["key_row"]
    assert res["dram_banks"] == res["device_banks"] == 12
    problems = check_jit(res["kernels"], jit_records(jit_log))
    assert not problems, "\n".join(problems)
    assert sorted(k["kind"] for k in res["kernels"]) == ["compute", "reader", "writer"]
    # GCC 12 (the second front end, tests/mock/test_gcc_front_end.py) takes the bank-local builds too
    ours = {os.path.realpath(k["source"]) for k in res["kernels"]}
    builds = [b for b in gfe.kernel_builds(gfe.read_log(jit_log)) if set(b.kernels) <= ours]
    assert builds, "no JIT build of the bank-local kernels in the log"
    failed = [r.describe() for r in gfe.compile_all(builds) if not r.ok]
    assert not failed, "GCC 12 rejects:\n" + "\n".join(failed)
    assert res["moves"] == [], f"host<->device moves after the first step: {res['moves']}"
    # after step 2 (the FlashDecode program and the positions' ttnn.add are cached by then) no new entry
    assert len(set(res["entries"][1:])) == 1, f"program-cache entries per step: {res['entries']}"


def test_bank_local_paged_steps_on_a_mock_n150_compile_and_move_nothing(run_mock, mock_run) -> None:
    r = run_mock(STEPS, timeout=420)
    assert r.returncode == 0 and r.result is not None, r.describe()
    llama, shard = r.result["llama8b"], r.result["t3k_shard"]
    check_steps(llama, mock_run["jit_log"])
    # 4 users of 2K: three pieces per (user, KV head) over its 6 banks (the bank-local pricing's choice), each
    # keeping to its own banks, in softmax blocks of 2 chunks (plan/softmax_block.py, the model's choice)
    assert (llama["pieces"], llama["spread_banks"], llama["softmax_chunks"]) == (3, False, 2)
    # the one-KV-head shard's 16 pieces take turns over every bank (the planner's spread split at 16K), in softmax
    # blocks of 4 chunks (the model's choice); both cases compile the reader's block order (a block's K slots,
    # then its V slots, the keys kept in cb_keys)
    check_steps(shard, mock_run["jit_log"])
    assert shard["softmax_chunks"] == 4, shard["softmax_chunks"]
    assert (shard["pieces"], shard["spread_banks"]) == (16, True)
