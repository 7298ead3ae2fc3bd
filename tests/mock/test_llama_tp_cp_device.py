"""Tensor x context parallelism on one 2-D mesh, on a mock T3K 2 x 4 (`LlamaDecoder(backend="device",
devices=8, context_parallel=4)`): context parallel along mesh axis 1 (the 4 chips of a row hold the
cache's blocks j mod 4), tensor parallel along axis 0 (the 2 rows hold the two KV-head groups; the
weights split by ``ttnn.ShardTensor2dMesh`` over that axis, replicated along the other). A small Llama
(2 layers, 4 q / 2 KV heads: one KV head per chip) decodes 20 steps with users joining and leaving, then
a 70-position generation whose positions cross three cache blocks (three CP ranks write). Checked: every
op is accepted by ttnn on the mesh (per layer one ``all_gather`` of O and one of the LSE with
``cluster_axis=1``, two ``all_reduce`` with ``cluster_axis=0``; one ``all_gather`` of the vocabulary
slices along axis 0); each step moves exactly one host -> device write and one device -> host read
(``ttdecode.testing.transfers``); no program-cache entry is added after step 2; our programs' kernels
were compiled by tt-metal's JIT; each device's row is its CP rank's (column's), and each active user's
new K/V row is written, in each TP group (mesh row), on exactly the one device the interleaved layout
names (block j on column j mod 4). The mock computes nothing: the numbers of this layout are the host
backend's (tests/models/test_llama_tp_cp.py) and the dataflow twin's (tests/distributed/test_cp_loop.py)."""

from __future__ import annotations

import pytest

from ttdecode.testing.dry_run import check_jit, jit_records

TP_CP_LLAMA = r"""
import torch
import ttnn
from pathlib import Path
from ttdecode.models import LlamaDecoder
from ttdecode.testing.dry_run import emit
from ttdecode.testing.drivers import join_leave_steps
from ttdecode.testing.mesh_llama import mesh_decoder, record_host_rows

B = 4
with mesh_decoder(LlamaDecoder, (2, 4), devices=8, context_parallel=4, batch=B) as run:
    device, dec, log = run.device, run.decoder, run.log
    dd = dec._device
    cp = dd.cp
    rows = record_host_rows(cp)
    steps = join_leave_steps(dec, device, B, log)
    entries = int(device.num_program_cache_entries())
    step_rows = len(rows)
    gen = dec.generate(torch.arange(1, 41)[None], 30, progress=False, prompt_chunk=1)  # one token a step
    gen_moves = list(log.moves)
shapes = {name: [list(t.shape) for t in ttnn.get_device_tensors(dd.w[name])] for name in ("0.wqkv", "0.wo", "lm_head")}
cache_shapes = [list(t.shape) for t in ttnn.get_device_tensors(cp.caches[0][0])]
programs = [cp.rotary.program, cp.flash.program, cp.combine.program]
kernels = [{"name": k.name, "source": str(Path(k.source).resolve()), "kind": k.kind.value}
           for p in programs for k in p.kernels]
layout = {"prefix": cp.prefix, "batch": cp.batch, "local_blocks": cp.local_blocks, "axes": list(cp.axes),
          "ranks": cp.ranks, "device_ranks": list(cp.device_ranks), "tp_axis": dd.tp_axis, "tp": dd.tp,
          "nh": dd.nh, "nkv": dd.nkv, "combine_partials": cp.combine.plan.partials}
dec.close()
emit({"build_moves": run.build_moves, "steps": steps, "kernels": kernels, "rows": rows, "step_rows": step_rows,
      "layout": layout, "shapes": shapes, "cache_shapes": cache_shapes,
      "generate": {"shape": list(gen.shape), "new_entries": int(device.num_program_cache_entries()) - entries,
                   "moves": gen_moves}})
ttnn.close_mesh_device(device)
"""

LAYERS, BATCH, VOCAB, ROWS, COLS, BLOCK = 2, 4, 256, 2, 4, 32


def _ops(greedy: bool) -> dict[str, int]:
    """The ttnn calls of one TP x CP step: those of a CP step (tests/mock/test_context_parallel_device.py)
    with one gather of O and one of the LSE per layer (along the CP axis), plus the TP collectives:
    all_reduce after O and down, all_gather of the LM head's vocabulary slices."""
    ops = {"slice": 2 + 3 + LAYERS, "typecast": 2, "relu": 1, "embedding": 3,
           "reshape": 3 + 3 + 2 * LAYERS + LAYERS, "rms_norm": 2 * LAYERS + 1, "linear": 5 * LAYERS + 1,
           "rotary_kv_append": LAYERS, "flash_decode": LAYERS, "to_layout": LAYERS,
           "all_gather": 2 * LAYERS + 1, "all_reduce": 2 * LAYERS, "combine": LAYERS, "add": 2 * LAYERS,
           "mul": LAYERS}
    if greedy:
        ops["argmax"] = 1
    return ops


def _held(c: int, p: int) -> list[int]:
    """CP rank c's global positions <= p (block j on rank j mod COLS)."""
    return [x for x in range(p + 1) if (x // BLOCK) % COLS == c]


def _check_rows(result: dict, rows: list) -> set[int]:
    """Each step's device rows against the layout: device (i, j) carries CP rank j's row; in each mesh
    row (TP group) exactly the owner column writes. Returns the CP ranks that wrote."""
    lay = result["layout"]
    b, pre = lay["batch"], lay["prefix"]
    writers = set()
    for step in rows:
        assert len(step) == ROWS * COLS
        assert all(step[i * COLS + j] == step[j] for i in range(ROWS) for j in range(COLS))
        positions = step[0][b:2 * b]
        for u, p in enumerate(positions):
            append = [row[pre + u] for row in step]
            attend = [row[pre + b + u] for row in step]
            if p < 0:
                assert append == [-1] * (ROWS * COLS) and attend == [-1] * (ROWS * COLS)
                continue
            owner = (p // BLOCK) % COLS
            for i in range(ROWS):
                mine = append[i * COLS:(i + 1) * COLS]
                assert [j for j in range(COLS) if mine[j] >= 0] == [owner], (p, append)
                assert attend[i * COLS:(i + 1) * COLS] == [len(_held(j, p)) - 1 for j in range(COLS)], (p, attend)
            writers.add(owner)
    return writers


@pytest.mark.slow
def test_tensor_times_context_parallel_llama_decodes_on_a_mock_t3k_2x4(run_mock, mock_run) -> None:
    r = run_mock(TP_CP_LLAMA, timeout=900, system="t3k")
    assert r.returncode == 0 and r.result is not None, r.describe()
    result = r.result
    lay = result["layout"]
    assert lay["axes"] == [1] and lay["tp_axis"] == 0 and lay["ranks"] == COLS and lay["tp"] == ROWS
    assert lay["device_ranks"] == [d % COLS for d in range(ROWS * COLS)]
    assert (lay["nh"], lay["nkv"], lay["combine_partials"]) == (2, 1, COLS)
    # the weights split over the TP axis (two slices), the same slice down each column... on every chip
    # its own heads: fused QKV (2 q + 1 k + 1 v heads of 32), O's rows, the vocabulary's half
    assert result["shapes"]["0.wqkv"] == [[128, 4 * 32]] * 8
    assert result["shapes"]["0.wo"] == [[2 * 32, 128]] * 8
    assert result["shapes"]["lm_head"] == [[128, VOCAB // 2]] * 8
    assert result["cache_shapes"] == [[BATCH * 4, 1, BLOCK, 32]] * 8
    kinds = sorted(k["kind"] for k in result["kernels"])
    assert kinds == ["compute"] * 3 + ["reader"] * 3 + ["writer"] * 3, kinds
    problems = check_jit(result["kernels"], jit_records(mock_run["jit_log"]))
    assert not problems, "\n".join(problems)
    steps = result["steps"]
    assert len(steps) == 20
    for s in steps:
        assert s["ops"] == _ops(s["greedy"]), (s["step"], s["ops"])
        assert s["moves"] == ["copy_host_to_device_tensor", "to_torch"], (s["step"], s["moves"])
        assert s["writes"] == 1
        assert s["out_shape"] == ([BATCH] if s["greedy"] else [BATCH, VOCAB])
    entries = [s["entries"] for s in steps]
    assert all(e == entries[1] for e in entries[1:]), entries
    assert result["build_moves"] and set(result["build_moves"]) <= {"from_torch"}
    n = result["step_rows"]
    assert n == 20 - sum(all(p < 0 for p in s["positions"]) for s in steps)
    assert _check_rows(result, result["rows"][:n]) == {0}
    assert _check_rows(result, result["rows"][n:]) == {0, 1, 2}
    gen = result["generate"]
    assert gen["shape"] == [1, 70] and gen["new_entries"] == 0
    assert gen["moves"] == ["copy_host_to_device_tensor", "to_torch"] * 69



MESH_2X4 = r"""
import torch
import ttnn
from ttdecode.distributed import device_context
from ttdecode.models import LlamaDecoder
from ttdecode.testing.dry_run import emit
from ttdecode.testing.mesh_llama import tiny_llama
from ttdecode.testing.mock import open_mock_mesh
from ttdecode.testing.transfers import count_transfers

def recorded(dd, steps):
    _step = dd.step
    def step(tokens, *args, **kwargs):
        out = _step(tokens, *args, **kwargs)
        steps.append({"t": 1 if tokens.dim() == 1 else int(tokens.shape[1]), "ops": dict(dd.ops),
                      "writes": dd.writes})
        return out
    dd.step = step

def twice(dec, prompts, log):
    runs = []
    for i in range(2):
        log.clear()
        out = dec.generate(prompts, 3, progress=False)
        runs.append({"steps": list(dec.generate_steps), "moves": list(log.moves), "lengths": [len(x) for x in out],
                     "entries": int(device.num_program_cache_entries())})
    return runs

device = open_mock_mesh((2, 4), fabric=True)
rows = []
_host_rows = device_context.ContextParallelDecode.host_rows
def recording(self, *args, **kwargs):
    r = _host_rows(self, *args, **kwargs)
    rows.append({"tokens": self.tokens, "prefix": self.prefix, "rows": r.tolist()})
    return r
device_context.ContextParallelDecode.host_rows = recording
result = {}
with count_transfers() as log:
    # TP 2 x CP 4: prompts of 40 and 17 tokens in chunks of T = 32 and 8
    dec = LlamaDecoder.from_hf(tiny_llama(4, 2, hidden=128, layers=1), batch=2, max_seq_len=256, block_size=32,
                               devices=8, context_parallel=4, backend="device", device=device)
    dd, steps = dec._device, []
    recorded(dd, steps)
    runs = twice(dec, [torch.arange(1, 41), torch.arange(3, 20)], log)
    loops = {str(t): {"caches_shared": loop.caches is dd.cp.caches, "rows": loop.rows,
                      "combine_groups": loop.combine.plan.groups} for t, loop in dd.chunk_cp.items()}
    dec.close()
    result["tpcp"] = {"runs": runs, "steps": steps, "rows": rows, "loops": loops}
    # TP 8 alone over the 2 x 4 mesh: a 9-token prompt in one step of T = 9
    dec = LlamaDecoder.from_hf(tiny_llama(8, 8, hidden=256, layers=1), batch=2, max_seq_len=256, block_size=32,
                               devices=8, backend="device", device=device)
    dd, steps = dec._device, []
    recorded(dd, steps)
    runs = twice(dec, [torch.arange(1, 10)], log)
    shapes = {name: [list(t.shape) for t in ttnn.get_device_tensors(dd.w[name])] for name in ("0.wqkv", "lm_head")}
    result["tp"] = {"runs": runs, "steps": steps, "tp_axes": list(dd.tp_axes), "shapes": shapes}
    dec.close()
emit(result)
ttnn.close_mesh_device(device)
"""


def _check_chunk_rows(rows: list) -> set[int]:
    """Each recorded step row set (every T) against the layout: device (i, j) carries column j's row;
    each live token row's new K/V on the one owner column in each mesh row. Returns the owner columns."""
    writers = set()
    for rec in rows:
        t, pre, step = rec["tokens"], rec["prefix"], rec["rows"]
        r = 2 * t  # batch 2
        assert len(step) == ROWS * COLS
        assert all(step[i * COLS + j] == step[j] for i in range(ROWS) for j in range(COLS))
        positions = step[0][r:2 * r]  # the prefix's RoPE positions of the T B rows
        for row, p in enumerate(positions):
            append = [dev_row[pre + row] for dev_row in step]
            if p < 0:
                assert append == [-1] * (ROWS * COLS)
                continue
            owner = (p // BLOCK) % COLS
            for i in range(ROWS):
                assert [j for j in range(COLS) if append[i * COLS + j] >= 0] == [owner], (t, p, append)
            writers.add(owner)
    return writers


def _check_runs(runs: list, steps: list[int], lengths: list[int], new_t: int) -> None:
    """Both generate calls: the same steps, one write and one read per step (the first call also makes,
    at the first step of each of its ``new_t`` new T, that T's step row on the device: one
    ``from_torch``), no program-cache entry added by the second."""
    for i, run in enumerate(runs):
        assert run["steps"] == steps and run["lengths"] == lengths
        moves = run["moves"]
        assert moves.count("from_torch") == (new_t if i == 0 else 0), moves
        assert [m for m in moves if m != "from_torch"] == ["copy_host_to_device_tensor", "to_torch"] * sum(steps)
    assert runs[1]["entries"] == runs[0]["entries"]


@pytest.mark.slow
def test_prompt_chunks_with_tp_x_cp_and_tensor_parallel_alone_on_a_mock_t3k_2x4(run_mock) -> None:
    """Two decoders in turn on one mock T3K 2 x 4 (1-layer Llamas, batch 2):

    * TP 2 x CP 4 (``devices=8, context_parallel=4``): prompts of 40 and 17 tokens go in steps of T = 32
      and 8 tokens per user (the decoder's loop of T B rows per T, `DeviceDecoder.chunk_cp`, over the
      same caches), then one token per step. Per step: T launches of the append, q joined by concats
      of at most 8 (`device_context.CONCAT_PARTS`: ttnn's concat reader of 32 inputs overflows its code
      region), one FlashDecode of the T B rows, the gathers and one combine; every device's row is its
      CP rank's, each token row's new K/V on the one column the layout names in each mesh row.
    * TP 8 alone (``devices=8``, no context parallelism): the weights dealt over the 8 chips, each
      all_reduce and the LM head's all_gather along axis 1 then axis 0 (``cluster_axis``), which ttnn
      accepts on the 1-D fabric; a 9-token prompt in one step of 9 tokens per user.

    Each: every op accepted, one write and one read per step, a second identical generate adds no
    program-cache entry."""
    r = run_mock(MESH_2X4, timeout=900, system="t3k")
    assert r.returncode == 0 and r.result is not None, r.describe()
    tpcp, tp = r.result["tpcp"], r.result["tp"]
    _check_runs(tpcp["runs"], [2, 2], [43, 20], new_t=2)
    assert tpcp["loops"] == {"32": {"caches_shared": True, "rows": 64, "combine_groups": 64},
                             "8": {"caches_shared": True, "rows": 16, "combine_groups": 16}}
    assert [s["t"] for s in tpcp["steps"]] == [32, 8, 1, 1] * 2
    for s in tpcp["steps"]:
        ops, t = s["ops"], s["t"]
        assert s["writes"] == 1
        assert ops["rotary_kv_append"] == t and ops["flash_decode"] == 1 and ops["combine"] == 1
        assert ops["all_gather"] == 3 and ops["all_reduce"] == 2 and ops.get("concat", 0) == {32: 5, 8: 1, 1: 0}[t]
    assert _check_chunk_rows(tpcp["rows"]) == {0, 1}
    _check_runs(tp["runs"], [1, 2], [12], new_t=1)
    assert tp["tp_axes"] == [1, 0]
    assert tp["shapes"] == {"0.wqkv": [[256, 3 * 32]] * 8, "lm_head": [[256, 32]] * 8}
    assert [s["t"] for s in tp["steps"]] == [9, 1, 1] * 2
    for s in tp["steps"]:
        assert s["writes"] == 1 and s["ops"]["all_reduce"] == 4 and s["ops"]["all_gather"] == 2
