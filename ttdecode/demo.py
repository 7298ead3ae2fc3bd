"""`make demo`: one Llama-3.1-8B decode step on the host runtime, checked against the reference.

The step has the shapes of Llama-3.1-8B's attention on an N150 (32 q heads, 8 KV heads, head_dim
128, the 8x8 grid), a bfloat8_b KV cache of 8K positions and a few users at different positions
(one skipped with -1). It prints the plan summary, the accuracy against the float64 reference on
the same quantized inputs, and the run's counters: DRAM bytes read per core, NoC bytes of the
reduction, reduction rounds.
"""

from __future__ import annotations

import time
from collections import Counter

import torch

from ttdecode.accuracy import THRESHOLDS, pcc, rel_l2
from ttdecode.factory import run_flash_decode
from ttdecode.formats import DataType
from ttdecode.plan import format_plan, make_plan
from ttdecode.program import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.tensor import dequantize, from_torch

NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, SEQ = 32, 8, 128, 8192
POSITIONS = [8191, 5000, 1234, 31, -1]


def inputs(batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q, K, V like tt-metal's tests: N(0, 1) with 10x outliers at probability 0.001."""
    g = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        x = torch.randn(*shape, generator=g)
        outliers = torch.rand(*shape, generator=g) < 1e-3
        return torch.where(outliers, 10 * x, x)

    return (draw(1, batch, NUM_Q_HEADS, HEAD_DIM), draw(batch, NUM_KV_HEADS, SEQ, HEAD_DIM),
            draw(batch, NUM_KV_HEADS, SEQ, HEAD_DIM))


def main() -> int:
    batch = len(POSITIONS)
    q, k, v = inputs(batch)
    qt = from_torch(q, DataType.bfloat16)
    kt, vt = from_torch(k, DataType.bfloat8_b), from_torch(v, DataType.bfloat8_b)
    plan = make_plan(batch=batch, num_q_heads=NUM_Q_HEADS, num_kv_heads=NUM_KV_HEADS, seq_len=SEQ,
                     head_dim=HEAD_DIM, kv_dtype=DataType.bfloat8_b, cur_pos=POSITIONS, return_lse=True)
    print(format_plan(plan, max_rows=12))
    print()

    scale = HEAD_DIM ** -0.5
    t0 = time.perf_counter()
    out, lse, result = run_flash_decode(plan, q=qt, k=kt, v=vt, cur_pos_source=POSITIONS, scale=scale,
                                        compute=ComputeSettings())
    wall = time.perf_counter() - t0
    ref, ref_lse = sdpa_decode_reference(dequantize(qt), dequantize(kt), dequantize(vt), cur_pos=POSITIONS,
                                         scale=scale, return_lse=True)
    err, corr = rel_l2(out, ref), pcc(out, ref)
    ok = err <= THRESHOLDS.max_rel_l2 and corr >= THRESHOLDS.min_pcc
    live = ref_lse.isfinite()
    lse_err = float((lse[live].double() - ref_lse[live]).abs().max())
    print(f"host runtime: {wall:.2f} s wall ({result.compile_seconds:.2f} s compiling, {result.run_seconds:.2f} s running)")
    print(f"accuracy vs float64 reference (same bfloat8_b K/V): rel L2 {err:.2e}, PCC {corr:.6f}, "
          f"max |LSE error| {lse_err:.2e}  ->  {'PASS' if ok else 'FAIL'} "
          f"(thresholds rel L2 <= {THRESHOLDS.max_rel_l2}, PCC >= {THRESHOLDS.min_pcc})")
    skipped = [b for b, p in enumerate(POSITIONS) if p < 0]
    if skipped:
        zeros = all(bool((out[0, b] == 0).all()) for b in skipped)
        print(f"skipped users {skipped}: output zeros {zeros}, LSE -inf {bool(lse[0, skipped].isneginf().all())}")

    counters = result.counters
    readers = [kc for kc in counters.kernels if kc.kind is KernelKind.READER]
    per_core = sorted(sum(kc.dram_read_bytes) for kc in readers)
    kv_bytes = sum(per_core)
    print()
    print(f"DRAM read: {kv_bytes / 2**20:.1f} MiB in all; per core min {per_core[0] / 1024:.0f} KiB, "
          f"median {per_core[len(per_core) // 2] / 1024:.0f} KiB, max {per_core[-1] / 1024:.0f} KiB "
          f"over {len(per_core)} cores")
    banks = [sum(kc.dram_read_bytes[b] for kc in readers) for b in range(12)]
    print("DRAM read per bank (MiB): " + " ".join(f"{x / 2**20:.2f}" for x in banks))
    noc = sum(sum(kc.noc_write_bytes.values()) for kc in counters.kernels)
    incs = sum(sum(kc.sem_incs.values()) for kc in counters.kernels)
    print(f"reduction: {plan.rounds} rounds over {plan.pieces_per_work} pieces per (user, KV head); "
          f"{noc / 1024:.0f} KiB of partials over the NoC in {incs} semaphore increments "
          f"({100 * noc / max(1, kv_bytes):.2f}% of the DRAM bytes)")
    ops = Counter()
    for kc in counters.kernels:
        ops.update(kc.tiles)
    inits = ops.pop("init", 0)
    print("compute tiles: " + ", ".join(f"{op} {n}" for op, n in sorted(ops.items()) if n)
          + f"; configuration calls (inits, reconfigs): {inits}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
