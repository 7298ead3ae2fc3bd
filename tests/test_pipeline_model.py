"""The cost model's reader/compute pipeline (ttdecode/perf_model/pipeline.py): its arithmetic on small cases
worked by hand from the kernels' order, and that order itself read off the program-order events of a real
run of the kernels on the host runtime (where the compute kernel waits for K and V, where its exps fall,
when it frees the slots, and the reader's K then V per chunk)."""

from __future__ import annotations

import math

import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings, KernelKind, MathFidelity
from ttdecode.core.tensor import from_torch
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.perf_model.bank_paged import sequential_page_table
from ttdecode.perf_model.pipeline import PiecePipe, pipeline_cycles
from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS

CB_K, CB_V = 1, 2  # plan/buffers.py flash_decode_cbs


def _pipe(chunks: int, softmax_chunks: int, post: float) -> PiecePipe:
    return PiecePipe((1,) * chunks, softmax_chunks, max(2, softmax_chunks), scores_per_tile=1.0, pv_per_tile=1.0,
                     post=post)


@pytest.mark.parametrize("softmax_chunks, expected", [(1, 53.0), (2, 57.0)])
def test_a_block_waits_for_its_last_k_and_its_v_slots_hold_the_next_block_back(softmax_chunks, expected):
    """Four chunks of one key tile, K and V reads of 5 cycles, scores and P.V 1 cycle a tile, the rest 10 a tile.
    One chunk per update (K, V per chunk; each chunk frees its slots at its end): the step ends at 53. Blocks
    of 2 (a block's K slots, then its V slots): block 0's exps wait for K1 (10), its P.V ends at 33; the
    reader's V2 waits for that (two V slots, both block 0's) and lands at 38, V3 at 43, while the compute runs
    block 1's scores and exps; the step ends at 57."""
    pipe = _pipe(4, softmax_chunks, post=40.0)
    assert pipeline_cycles((pipe,), [0.0], [[5.0] * 4], [[5.0] * 4], 0.0) == expected


def test_a_compute_bound_piece_costs_its_first_k_and_its_compute() -> None:
    """Two chunks, the compute slower than the reads: 5 (the first K) + 2 x (10 + 10 + 10) = 65, with or
    without a block."""
    for s in (1, 2):
        pipe = PiecePipe((1, 1), s, 2, scores_per_tile=10.0, pv_per_tile=10.0, post=20.0)
        assert pipeline_cycles((pipe,), [0.0], [[5.0] * 2], [[5.0] * 2], 0.0) == 65.0


def _compute_and_reader_events(softmax_chunks: int) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
    """(compute, reader) events (op, peer, amount) of a one-piece bank-local run: 8 chunks of 16 key tiles."""
    seq, block = 4096, 32
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=seq, head_dim=128, kv_dtype=DataType.bfloat8_b,
                     cur_pos=[seq - 1], key_row_pieces=1, kv_pages="key_row", block_size=block,
                     num_blocks=seq // block, chunk_cap=16, softmax_chunks=softmax_chunks)
    assert (plan.pieces_per_work, plan.max_chunk_tiles) == (1, 16)
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, 1, 8, 128, generator=g))
    k = from_torch(torch.randn(seq // block, 1, block, 128, generator=g), DataType.bfloat8_b)
    _, _, result = run_flash_decode(plan, q=q, k=k, v=k, cur_pos_source=None,
                                    page_table=torch.tensor(sequential_page_table(1, seq // block)),
                                    scale=1 / math.sqrt(128), exp_approx=False,
                                    compute=ComputeSettings(math_fidelity=MathFidelity("HiFi2"), fp32_dest_acc_en=True))
    core = plan.pieces[0].core
    kernels = result.counters

    def events(kind: KernelKind) -> list[tuple[str, int, int]]:
        return [(EVENT_OPS.get(int(e["op"]), "?"), int(e["peer"]), int(e["amount"]))
                for e in kernels.kernel(core, kind).events for _ in range(int(e["count"]))]

    return events(KernelKind.COMPUTE), events(KernelKind.READER)


def _marks(events: list[tuple[str, int, int]]) -> str:
    """The compute kernel's K/V waits (K, V), pops (k, v) and exps (E), in program order, repeats folded."""
    exp = COMPUTE_OPS.index("exp")
    out = []
    for op, peer, _ in events:
        m = {("cb_wait", CB_K): "K", ("cb_wait", CB_V): "V", ("cb_pop", CB_K): "k", ("cb_pop", CB_V): "v",
             ("compute", exp): "E"}.get((op, peer))
        if m and not (out and out[-1] == m):
            out.append(m)
    return "".join(out)


@pytest.mark.parametrize("softmax_chunks", [1, 4])
def test_the_compute_kernel_waits_where_the_pipeline_model_says(softmax_chunks):
    """One chunk per update: per chunk wait K, exps, wait V, then pop K and V. Blocks of 4: per block, per chunk
    wait K and pop it (no exp before the block's last K), then the exps, one wait for the block's V, one pop. The
    reader pushes K then V per chunk, and with blocks each block's K slots then its V slots."""
    compute, reader = _compute_and_reader_events(softmax_chunks)
    marks = _marks(compute)
    if softmax_chunks == 1:
        assert marks == "KEVkv" * 8
    else:
        assert marks == ("KkKkKkKkEVv") * 2
    pushes = "".join({CB_K: "K", CB_V: "V"}[peer] for op, peer, _ in reader if op == "cb_push" and peer in (CB_K, CB_V))
    assert pushes == ("KV" * 8 if softmax_chunks == 1 else ("K" * 4 + "V" * 4) * 2)
