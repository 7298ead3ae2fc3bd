"""A 1M-token KV cache over 8 devices, end to end on the host runtime (not in CI).

One user, one KV head, 8 query heads (one Llama-3.1-70B KV group), D = 128, bfloat8_b K/V,
S = 2^20 positions, every position attended. ``context_parallel_decode`` shards the cache over 8
worker processes (each holds 2^17 positions), runs the FlashDecode kernels on the host runtime on
every shard and merges the partials over gloo. Reports the accuracy against the float64 reference
over the whole cache and the wall times (host runtime on this machine: not a device time).

    PYTHONPATH=. python perf/run_context_parallel_1m.py [--seq 1048576] [--devices 8]
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

import ttdecode
from ttdecode.accuracy import check_close, check_lse
from ttdecode.distributed import WorkerPool
from ttdecode.reference import sdpa_decode_reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1 << 20)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    args = ap.parse_args()
    s, n, nh, d = args.seq, args.devices, args.heads, args.dim

    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, nh, d, generator=g)
    k = ttdecode.from_torch(torch.randn(1, 1, s, d, generator=g), dtype=ttdecode.bfloat8_b)
    v = ttdecode.from_torch(torch.randn(1, 1, s, d, generator=g), dtype=ttdecode.bfloat8_b)
    t_pack = time.perf_counter() - t0
    print(f"cache: S={s} D={d} 1 KV head, {nh} q heads, bfloat8_b: {2 * len(k.data) / 2**20:.0f} MiB K+V "
          f"(packed in {t_pack:.1f} s)", flush=True)

    pool = WorkerPool(n, label="device", timeout=7200.0)
    try:
        t0 = time.perf_counter()  # warm-up: kernel compilation (cached) and worker imports, a short prefix
        ttdecode.context_parallel_decode(q, k, v, cur_pos=[32 * n - 1], devices=pool, backend="host")
        t_warm = time.perf_counter() - t0
        rows = []
        for layout, combine in (("interleaved", "all_to_all"), ("contiguous", "all_gather")):
            t0 = time.perf_counter()
            out, lse = ttdecode.context_parallel_decode(q, k, v, cur_pos=[s - 1], devices=pool, kv_layout=layout,
                                                        combine=combine, return_lse=True, backend="host")
            rows.append((layout, combine, out, lse, time.perf_counter() - t0))
            print(f"{layout}/{combine}: {rows[-1][-1]:.1f} s wall", flush=True)
    finally:
        pool.close()

    t0 = time.perf_counter()
    ref, ref_lse = sdpa_decode_reference(q.to(torch.bfloat16).double(), ttdecode.to_torch(k).double(),
                                         ttdecode.to_torch(v).double(), cur_pos=[s - 1], return_lse=True)
    t_ref = time.perf_counter() - t0
    print(f"warm-up {t_warm:.1f} s; float64 reference {t_ref:.1f} s; parent peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GiB")
    for layout, combine, out, lse, wall in rows:
        e, c = check_close(out, ref, f"{layout}/{combine}")
        lse_err = check_lse(lse, ref_lse, f"{layout}/{combine}")
        print(f"| {s} | {n} | {layout} | {combine} | {wall:.1f} s | rel L2 {e:.2e} | PCC {c:.7f} | |LSE err| {lse_err:.1e} |")


if __name__ == "__main__":
    main()
