"""Context parallelism as a decode loop on a mock T3K (`LlamaDecoder(backend="device", devices=8,
context_parallel=8)`, ``ttdecode.distributed.device_context.ContextParallelDecode``): a small Llama
(2 layers) decodes 20 steps with users joining and leaving (position -1: a skipped user), then a
70-position generation whose positions cross three cache blocks (so three devices write K/V). Checked:
every op is accepted by ttnn on the 1 x 8 mesh (one ``all_gather`` of O and one of the LSE per layer)
and on the 2 x 4 mesh (two of each: ``cluster_axis`` 1 then 0); each step moves exactly one host ->
device write (every device's int32 row: token ids, global positions, its append and attention
positions and page table) and one device -> host read (the logits or the argmax ids), counted with
``ttdecode.testing.transfers``; no program-cache entry is added after step 2; our programs' kernels
(rotary append, FlashDecode, combine) were compiled by tt-metal's JIT; and the rows that went to the
devices put each active user's new K/V on exactly one device, the one the interleaved layout names
(block j on device j mod 8), with each device's attention position the last of its own positions.
The mock computes nothing (reads return zeros): the numerics of context parallelism are the host
backend's (tests/distributed, tests/models/test_llama_context_parallel.py)."""

from __future__ import annotations

import pytest

from ttdecode.testing.dry_run import check_jit, jit_records

CP_LLAMA = r"""
import torch
import ttnn
from pathlib import Path
from ttdecode.models import LlamaDecoder
from ttdecode.testing.dry_run import emit
from ttdecode.testing.drivers import join_leave_steps
from ttdecode.testing.mesh_llama import mesh_decoder, record_host_rows

B = 4
with mesh_decoder(LlamaDecoder, __SHAPE__, devices=8, context_parallel=8, batch=B) as run:
    device, dec, log = run.device, run.decoder, run.log
    cp = dec._device.cp
    rows = record_host_rows(cp)  # every step's rows as they went to the devices
    steps = join_leave_steps(dec, device, B, log)  # the default joins and leaves
    # a 40-token prompt and 30 new tokens: positions 0..68 in blocks 0, 1, 2 (devices 0, 1, 2 write)
    entries = int(device.num_program_cache_entries())
    step_rows = len(rows)
    gen = dec.generate(torch.arange(1, 41)[None], 30, progress=False, prompt_chunk=1)  # one token a step
    gen_moves = list(log.moves)
# how the loop's mapper deals the n rows: device tensor i of the mesh gets row i (a host tensor: its
# values are real on the mock), and each device's share of the step row is one row
probe = torch.arange(8 * cp.row_width, dtype=torch.int32).reshape(8, cp.row_width)
dealt = [ttnn.to_torch(t).reshape(-1).tolist() for t in
         ttnn.get_device_tensors(ttnn.from_torch(probe, dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT,
                                                 mesh_mapper=cp._shard_rows))]
dealt_ok = dealt == probe.tolist()
row_shapes = [list(t.shape) for t in ttnn.get_device_tensors(cp.inputs)]
programs = [cp.rotary.program, cp.flash.program, cp.combine.program]
kernels = [{"name": k.name, "source": str(Path(k.source).resolve()), "kind": k.kind.value}
           for p in programs for k in p.kernels]
from ttdecode import is_bank_local
layout = {"prefix": cp.prefix, "batch": cp.batch, "local_blocks": cp.local_blocks, "axes": list(cp.axes),
          "bank_local": [all(is_bank_local(c) for kv in cp.caches for c in kv), cp.flash.plan.bank_local,
                         cp.rotary.program.tensor("k_cache").layout, dec.allocator.ranks[0].policy]}
dec.close()
emit({"open_seconds": round(run.seconds["open"], 1), "build_seconds": round(run.seconds["build"], 2),
      "build_moves": run.build_moves, "steps": steps, "kernels": kernels, "rows": rows, "step_rows": step_rows,
      "layout": layout, "dealt_ok": dealt_ok, "row_shapes": row_shapes, "row_width": cp.row_width,
      "generate": {"shape": list(gen.shape), "new_entries": int(device.num_program_cache_entries()) - entries,
                   "moves": gen_moves}})
ttnn.close_mesh_device(device)
"""

LAYERS, BATCH, VOCAB, DEVICES, BLOCK = 2, 4, 256, 8, 32


def _ops(greedy: bool, gathers_per_attention: int) -> dict[str, int]:
    """The ttnn calls of one CP step: the row's views (the decoder's token ids and RoPE positions; the
    loop's append / attention positions and page table), the RoPE rows and embedding, per layer norm,
    QKV, our append, FlashDecode, the LSE rows to tiles (slice, reshape, to_layout), the all_gathers
    of O and LSE, the combine, the head concat, O, residual, norm, SwiGLU, down, residual; the final
    norm, the LM head (no collective: every device holds the whole model) and the argmax."""
    ops = {"slice": 2 + 3 + LAYERS, "typecast": 2, "relu": 1, "embedding": 3,
           "reshape": 3 + 3 + 2 * LAYERS + LAYERS, "rms_norm": 2 * LAYERS + 1, "linear": 5 * LAYERS + 1,
           "rotary_kv_append": LAYERS, "flash_decode": LAYERS, "to_layout": LAYERS,
           "all_gather": 2 * gathers_per_attention * LAYERS, "combine": LAYERS, "add": 2 * LAYERS, "mul": LAYERS}
    if greedy:
        ops["argmax"] = 1
    return ops


def _held(d: int, p: int) -> list[int]:
    """Device d's global positions <= p under the interleaved layout (block j on device j mod 8)."""
    return [x for x in range(p + 1) if (x // BLOCK) % DEVICES == d]


def _check_rows(result: dict) -> set[int]:
    """Each recorded step's rows against the layout's definition; returns the devices that wrote."""
    lay = result["layout"]
    b, pre = lay["batch"], lay["prefix"]
    writers = set()
    for step in result["rows"]:
        assert len(step) == DEVICES
        positions = step[0][b:2 * b]  # the prefix: token ids, global positions (the same on every device)
        assert all(row[:pre] == step[0][:pre] for row in step)
        for u, p in enumerate(positions):
            append = [row[pre + u] for row in step]
            attend = [row[pre + b + u] for row in step]
            if p < 0:
                assert append == [-1] * DEVICES and attend == [-1] * DEVICES
                continue
            owner = (p // BLOCK) % DEVICES
            assert [d for d in range(DEVICES) if append[d] >= 0] == [owner], (p, append)
            assert attend == [len(_held(d, p)) - 1 for d in range(DEVICES)], (p, attend)
            assert append[owner] == attend[owner]
            writers.add(owner)
    return writers


def _check(result: dict, jit_log, gathers_per_attention: int) -> None:
    kinds = sorted(k["kind"] for k in result["kernels"])
    assert kinds == ["compute"] * 3 + ["reader"] * 3 + ["writer"] * 3, kinds
    problems = check_jit(result["kernels"], jit_records(jit_log))
    assert not problems, "\n".join(problems)
    steps = result["steps"]
    assert len(steps) == 20
    for s in steps:
        assert s["ops"] == _ops(s["greedy"], gathers_per_attention), (s["step"], s["ops"])
        assert s["moves"] == ["copy_host_to_device_tensor", "to_torch"], (s["step"], s["moves"])
        assert s["writes"] == 1
        assert s["out_shape"] == ([BATCH] if s["greedy"] else [BATCH, VOCAB])
        assert all(v == (-1 if s["greedy"] else 0.0) for v in s["idle_out"]), s
    entries = [s["entries"] for s in steps]
    assert all(e == entries[1] for e in entries[1:]), entries
    # the weights, caches, RoPE tables, step row go to the device at build only
    assert result["build_moves"] and set(result["build_moves"]) <= {"from_torch"}
    assert result["layout"]["axes"] == ([None] if gathers_per_attention == 1 else [1, 0])
    # the default kv_pages "key_row": bank-local shards, read and written in that layout, balanced blocks
    assert result["layout"]["bank_local"] == [True, True, "key_row", "balanced"]
    # ttnn deals row d of the step's [8, W] rows to device d, one [1, W] row each
    assert result["dealt_ok"] and result["row_shapes"] == [[1, result["row_width"]]] * DEVICES
    # every step wrote one row per device; the 20 steps kept to block 0, the generation reached block 2
    assert result["step_rows"] == 20 - sum(all(p < 0 for p in s["positions"]) for s in steps)
    assert _check_rows({**result, "rows": result["rows"][:result["step_rows"]]}) == {0}
    assert _check_rows({**result, "rows": result["rows"][result["step_rows"]:]}) == {0, 1, 2}
    gen = result["generate"]
    # 40 prompt tokens + 30 new: 69 one-token device steps (context parallel steps are one token each),
    # one write and one read each, no new program
    assert gen["shape"] == [1, 70] and gen["new_entries"] == 0
    assert gen["moves"] == ["copy_host_to_device_tensor", "to_torch"] * 69


@pytest.mark.slow
@pytest.mark.parametrize("shape,gathers", [((1, 8), 1), ((2, 4), 2)], ids=["t3k-1x8", "t3k-2x4-cluster-axis"])
def test_context_parallel_llama_decodes_on_a_mock_t3k(run_mock, mock_run, shape, gathers) -> None:
    # a cold run builds the fabric and JIT-compiles the CCL programs: hence the long timeout
    r = run_mock(CP_LLAMA.replace("__SHAPE__", repr(tuple(shape))), timeout=900, system="t3k")
    assert r.returncode == 0 and r.result is not None, r.describe()
    _check(r.result, mock_run["jit_log"], gathers)
