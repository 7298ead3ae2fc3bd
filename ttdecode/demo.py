"""`make demo`: one Llama-3.1-8B decode step on the host runtime, checked against the reference.

The step has the shapes of Llama-3.1-8B's attention on an N150 (32 q heads, 8 KV heads, head_dim
128, the 8x8 grid), a bfloat8_b KV cache of 8K positions and a few users at different positions
(one skipped with -1). It prints the plan summary, the accuracy against the float64 reference on
the same quantized inputs, and the run's counters: DRAM bytes read per core, NoC bytes of the
reduction, reduction rounds. Then the same step with the cache in key-row pages (kv_pages "key_row":
a page per key-tile row, round robin over the 12 DRAM banks, pieces that read one bank each), and the
Wormhole cost model's estimate of both (MODEL ESTIMATES: nothing here runs on a device).
"""

from __future__ import annotations

import time
from collections import Counter

import torch

from ttdecode.accuracy import THRESHOLDS, pcc, rel_l2
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import format_plan, make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import dequantize, from_torch
from ttdecode.perf_model.counters import work_from_counters
from ttdecode.perf_model.evaluator import evaluate

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
    ok_rows = key_row_step(qt, kt, vt, scale, ref, plan, result)
    return 0 if ok and ok_rows else 1


def key_row_step(qt, kt, vt, scale: float, ref: torch.Tensor, tile_plan, tile_result) -> bool:
    """The step again with kv_pages "key_row" (12 pieces per KV head); its accuracy, how many cores read
    their K/V from a single bank, and both layouts' modelled step time."""
    plan = make_plan(batch=len(POSITIONS), num_q_heads=NUM_Q_HEADS, num_kv_heads=NUM_KV_HEADS, seq_len=SEQ,
                     head_dim=HEAD_DIM, kv_dtype=DataType.bfloat8_b, cur_pos=POSITIONS, return_lse=True,
                     max_cores_per_head_batch=12, kv_pages="key_row")
    out, _, result = run_flash_decode(plan, q=qt, k=kt, v=vt, cur_pos_source=POSITIONS, scale=scale,
                                      compute=ComputeSettings())
    err, corr = rel_l2(out, ref), pcc(out, ref)
    ok = err <= THRESHOLDS.max_rel_l2 and corr >= THRESHOLDS.min_pcc
    works, red, fid = work_from_counters(plan, result.counters)
    readers = [w for w in works if w.kv_bytes]
    local = sum(w.bank_local for w in readers)
    print()
    print(f"kv_pages='key_row': {plan.pieces_per_work} pieces per (user, KV head) on {len(plan.active_cores)} cores; "
          f"rel L2 {err:.2e}, PCC {corr:.6f} -> {'PASS' if ok else 'FAIL'}; {local} of {len(readers)} cores read "
          f"their K/V from one DRAM bank (a user with fewer than 12 x 4 key tiles gets fewer than 12 pieces, which read "
          f"several banks; the model counts a core bank-local only when all its pieces read one bank)")
    for name, p, r in (("tile pages", tile_plan, tile_result), ("key-row pages", plan, result)):
        b = evaluate(*work_from_counters(p, r.counters))
        print(f"  MODEL ESTIMATE, {name}: {b.total_us:.1f} us per step, {b.achieved_gbps:.0f} GB/s of K/V "
              f"(DRAM floor {b.dram_floor_us:.1f} us, reduction {b.reduction_us:.1f} us)")
    return ok


if __name__ == "__main__":
    raise SystemExit(main())
