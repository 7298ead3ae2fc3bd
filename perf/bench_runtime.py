"""Benchmark of the ttdecode host runtime.

Prints a table: first compile of a kernel (empty cache), cached start of a 64-core program with three
kernels a core, tile matmul and exp throughput, and a decode-sized run (64 cores, ~16K tile matmuls and
~2K exp tiles, the work of a Llama-3.1-8B N150 decode step at 8K context).

    PYTHONPATH=. python perf/bench_runtime.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "runtime"))

from ttdecode.core.formats import DataType, tile_size  # noqa: E402
from ttdecode.core.program_description import (BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, Kernel, KernelKind,  # noqa: E402
                              MathFidelity, Program)
from ttdecode.runtime import run_program  # noqa: E402

from programs import crs, grid, kernel_path, tensor_in, tensor_out  # noqa: E402

BFP8, BF16 = DataType.bfloat8_b, DataType.bfloat16


def multicore_tile_op(op: str, cores: list[CoreCoord], n_out: int, kt: int, dtype=BF16) -> Program:
    """Every core runs tile_op.cpp: `n_out` outputs of `kt` inputs each (matmul) or `n_out` tiles (unary)."""
    where = crs(cores)
    per_in = n_out * kt
    a = torch.randn(len(cores) * 32, per_in * 32)
    inputs = {0: a, 1: a} if op == "matmul" else {0: a.abs() + 0.5}
    tensors = [tensor_in(f"in{cb}", x, dtype) for cb, x in inputs.items()]
    tensors.append(tensor_out("out", (len(cores) * 32, n_out * 32), BF16))
    reader = Kernel("inputs_reader", kernel_path("inputs_reader.cpp"), KernelKind.READER, where)
    compute = Kernel("tile_op", kernel_path("tile_op.cpp"), KernelKind.COMPUTE, where,
                     compile_time_args=[n_out, kt if op == "matmul" else 1, 1, 0], defines={f"OP_{op.upper()}": "1"},
                     compute=ComputeSettings(math_fidelity=MathFidelity.HiFi2, fp32_dest_acc_en=True))
    writer = Kernel("copy_writer", kernel_path("copy_writer.cpp"), KernelKind.WRITER, where, compile_time_args=[16])
    for i, c in enumerate(cores):
        # Core i reads its own row of tiles: tiles [i * per_in, (i + 1) * per_in) of each input.
        args: list = [len(inputs)]
        for cb in inputs:
            args += [BufferAddress(f"in{cb}"), cb, per_in]
        reader.runtime_args[c] = args
        compute.runtime_args[c] = []
        writer.runtime_args[c] = [BufferAddress("out"), i * n_out, n_out]
    kt_pages = max(2, kt if op == "matmul" else 1)
    cbs = [CircularBuffer(cb, where, dtype, tile_size(dtype), kt_pages) for cb in inputs]
    cbs.append(CircularBuffer(16, where, BF16, tile_size(BF16), 2))
    return Program([reader, compute, writer], cbs, [], tensors)


def timed(prog: Program, repeat: int = 3):
    best = None
    for _ in range(repeat):
        r = run_program(prog)
        best = r if best is None or r.run_seconds < best.run_seconds else best
    return best


def main() -> None:
    rows = []
    cores64 = grid(8, 8)
    # 1. First compile of a kernel: fresh cache (the runner is built first and not counted).
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("TTDECODE_CACHE")
        os.environ["TTDECODE_CACHE"] = tmp
        from ttdecode.runtime import build
        t = time.perf_counter()
        build.build_runner()
        runner_s = time.perf_counter() - t
        prog = multicore_tile_op("matmul", grid(1, 1), 1, 1)
        r = run_program(prog)
        rows.append(("runner build (once per runtime version)", f"{runner_s:.2f} s", "-"))
        rows.append(("first compile, 3 kernels (2 at a time)", f"{r.compile_seconds:.2f} s", "<= 5 s per kernel"))
        if old is None:
            del os.environ["TTDECODE_CACHE"]
        else:
            os.environ["TTDECODE_CACHE"] = old
    # 2. Cached start of a 64-core program with 3 kernels a core (one tile each).
    small = multicore_tile_op("exp", cores64, 1, 1)
    run_program(small)  # warm the cache
    t = time.perf_counter()
    r = timed(small)
    start_total = r.compile_seconds + r.run_seconds
    rows.append(("cached start+run, 64 cores x 3 kernels", f"{start_total:.3f} s", "<= 0.5 s"))
    # 3. Throughput on one core.
    mm = timed(multicore_tile_op("matmul", grid(1, 1), 64, 32))
    rows.append(("tile matmul throughput (1 core, 2048 tiles)",
                 f"{mm.counters.tiles('matmul') / mm.run_seconds:,.0f} tiles/s", "-"))
    ex = timed(multicore_tile_op("exp", grid(1, 1), 4096, 1))
    rows.append(("exp throughput incl. copy+pack (1 core, 4096 tiles)",
                 f"{ex.counters.tiles('exp') / ex.run_seconds:,.0f} tiles/s", "-"))
    # 4. Decode-sized work: 64 cores x 256 bfp8 matmuls, then 64 cores x 32 exp tiles.
    dm = timed(multicore_tile_op("matmul", cores64, 8, 32, dtype=BFP8), repeat=1)
    de = timed(multicore_tile_op("exp", cores64, 32, 1), repeat=1)
    rows.append((f"64 cores: {dm.counters.tiles('matmul')} bfp8 tile matmuls", f"{dm.run_seconds:.2f} s", "-"))
    rows.append((f"64 cores: {de.counters.tiles('exp')} exp tiles", f"{de.run_seconds:.2f} s", "-"))
    rows.append(("decode-step-sized total", f"{dm.run_seconds + de.run_seconds:.2f} s", "a few s"))
    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'value':>22}  target")
    for name, value, target in rows:
        print(f"{name:<{w}}  {value:>22}  {target}")


if __name__ == "__main__":
    main()
