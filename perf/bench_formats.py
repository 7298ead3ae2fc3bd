"""Throughput of the host tile packer/unpacker (a long KV cache must convert in about a second).

Run: `.venv/bin/python perf/bench_formats.py`. Prints MB/s per format for a 128K x 128 cache.
"""

from __future__ import annotations

import time

import torch

from ttdecode.core import formats as F
from ttdecode.core.formats import DataType


def main() -> None:
    x = torch.randn(128 * 1024, 128)
    mb = x.numel() * 4 / 1e6
    print(f"{'format':<10} {'pack MB/s':>10} {'unpack MB/s':>12}")
    for dtype in (DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b, DataType.float32):
        t0 = time.perf_counter()
        data = F.pack_tiles(x, dtype)
        t1 = time.perf_counter()
        F.unpack_tiles(data, dtype, x.shape)
        t2 = time.perf_counter()
        print(f"{dtype.value:<10} {mb / (t1 - t0):>10.0f} {mb / (t2 - t1):>12.0f}")


if __name__ == "__main__":
    main()
