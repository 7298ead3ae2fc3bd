"""One DeepSeek-V3-shaped MLA decode step on the host runtime: the L1 plan at D = 576, the DRAM bytes
each core reads, accuracy against the float64 reference, and the cost model's estimate.

MLA (``v=None``, ``head_dim_v=512``): one latent KV head, D = 576 (512 latent + 64 RoPE), V = the first
512 columns of K. The kernels read each K tile once and use it for Q . K^T and P . V. For comparison the
same step runs with a separate V tensor holding k[..., :512] (what a kernel without MLA reads), which
must give the same bits.

Usage (from the repository root):
    python perf/mla_point.py                 # 16 q heads, B=1, S=4096, bfloat8_b, cur_pos = S-1
    python perf/mla_point.py --heads 128 --max-cores 1 --seq 1024
    python perf/mla_point.py --heads 128 --k-chunk-size 128 --seq 1024   # 16 pieces, partials via the merge slot
    python perf/mla_point.py --heads 128 --seq 1024                      # dynamic chunks of up to 128 keys (short chunks)
Times: "host s" is the wall time of the host runtime on this machine; "model us" is the calibrated
Wormhole cost model's ESTIMATE (ttdecode.perf_model), not a measurement.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from ttdecode.accuracy import pcc, rel_l2  # noqa: E402
from ttdecode.perf_model.counters import work_from_counters  # noqa: E402
from ttdecode.perf_model.evaluator import evaluate  # noqa: E402
from ttdecode.ops.flash_decode.program_factory import run_flash_decode  # noqa: E402
from ttdecode.core.formats import DataType  # noqa: E402
from ttdecode.ops.flash_decode.plan import PlanError, format_plan, make_plan  # noqa: E402
from ttdecode.core.program_description import ComputeSettings, KernelKind  # noqa: E402
from ttdecode.reference import sdpa_decode_reference  # noqa: E402
from ttdecode.core.tensor import from_torch, to_torch  # noqa: E402

D, DV = 576, 512


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", type=int, default=16, help="q heads per latent KV head (16..128)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--kv-dtype", default="bfloat8_b", choices=["bfloat16", "bfloat8_b"])
    p.add_argument("--k-chunk-size", type=int, default=0)
    p.add_argument("--max-cores", type=int, default=16, help="max_cores_per_head_batch")
    args = p.parse_args()
    kv = DataType(args.kv_dtype)
    b, nh, s = args.batch, args.heads, args.seq
    pos = [s - 1 - 97 * u for u in range(b)]
    gen = torch.Generator().manual_seed(0)
    q_raw = torch.randn(1, b, nh, D, generator=gen)
    k_raw = torch.randn(b, 1, s, D, generator=gen)
    q, k, v = from_torch(q_raw, DataType.bfloat16), from_torch(k_raw, kv), from_torch(k_raw[..., :DV], kv)
    common = dict(batch=b, num_q_heads=nh, num_kv_heads=1, seq_len=s, head_dim=D, head_dim_v=DV, kv_dtype=kv,
                  cur_pos=pos, k_chunk_size=args.k_chunk_size, max_cores_per_head_batch=args.max_cores)
    scale = 1.0 / math.sqrt(D)
    rows = []
    outs = {}
    refused = {}
    for name, mla in (("MLA (v=None)", True), ("separate V = k[..., :512]", False)):
        try:
            plan = make_plan(mla=mla, **common)
        except PlanError as e:
            if mla:
                raise
            refused[name] = str(e)  # the V slots are what MLA saves: a separate V may not fit
            continue
        if mla:
            print(format_plan(plan, max_rows=0))
            print()
        t0 = time.perf_counter()
        out, _, result = run_flash_decode(plan, q=q, k=k, v=None if mla else v, cur_pos_source=None, scale=scale,
                                          compute=ComputeSettings())
        host_s = time.perf_counter() - t0
        outs[name] = out
        reads = [sum(result.counters.kernel(c, KernelKind.READER).dram_read_bytes) for c in plan.active_cores]
        est = evaluate(*work_from_counters(plan, result.counters))
        rows.append((name, plan.l1_bytes_per_core / 1024, len(plan.active_cores), sum(reads), max(reads), min(reads),
                     host_s, est.total_us))
        top = sorted(est.compute_us.items(), key=lambda kv_: -kv_[1])[:4]
        print(f"{name}: model breakdown (us): launch {est.launch_us:.1f}, busiest core {est.local_us:.1f} (reader "
              f"{est.reader_us:.1f}, compute {sum(est.compute_us.values()):.1f}: "
              + ", ".join(f"{op} {us:.1f}" for op, us in top) + f"), reduction {est.reduction_us:.1f}")
    ref = sdpa_decode_reference(to_torch(q).double(), to_torch(k).double(), None, head_dim_v=DV, cur_pos=pos,
                                scale=scale)
    mla_out = outs["MLA (v=None)"]
    other = outs.get("separate V = k[..., :512]")
    same = "n/a (refused)" if other is None else torch.equal(mla_out.view(torch.int16), other.view(torch.int16))
    print(f"B={b} NH={nh} NKV=1 S={s} D={D} Dv={DV} KV={kv.value} cur_pos={pos}")
    print(f"{'program':<28} {'L1 KiB/core':>11} {'cores':>5} {'DRAM read B':>12} {'max B/core':>11} "
          f"{'min B/core':>11} {'host s':>7} {'model us':>9}")
    for name, l1, cores, total, most, least, host_s, us in rows:
        print(f"{name:<28} {l1:>11.1f} {cores:>5} {total:>12} {most:>11} {least:>11} {host_s:>7.1f} {us:>9.1f}")
    for name, why in refused.items():
        print(f"{name:<28} refused by the planner: {why}")
    print(f"MLA vs reference: rel L2 {rel_l2(mla_out.double(), ref):.2e}, PCC {pcc(mla_out.double(), ref):.6f}; "
          f"MLA bits == separate-V bits: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
