"""Host time per prompt token of the device backend on the mock Wormhole (``LlamaDecoder.generate``).

HOST-SIDE TIMES ONLY: real measurements of ttnn 0.81.1's host side on a mock N150 on this machine (no
chip: the mock computes nothing; no kernel/device time is measured). Random weights, ``--layers``
layers of the Llama-3.1-8B layer shape (32 q / 8 kv heads, D 128, hidden 4096, MLP 14336), the
vocabulary cut to ``--vocab`` rows, paged bfloat8_b caches (blocks of 64).

Per batch B (``--batches``): B users each with a ``--prompt``-token prompt through
``generate(prompt, max_new_tokens=1)`` (the prompt steps and the first token's choice, no decode
step); one untimed call compiles the step's programs, then the median of ``--repeat`` calls. Printed:
host ms per prompt (all B users), per prompt position (the prompt time / P: one position of every
user) and per user-token (/ B P), the prompt steps, the ttnn calls of the last step and the
host <-> device moves of one call.

    PYTHONPATH=. python perf/bench_prompt.py [--layers 1] [--prompt 128] [--batches 1,32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MARK = "BENCH_PROMPT:"


def child(layers: int, vocab: int, prompt: int, batch: int, repeat: int) -> dict[str, Any]:
    """One batch on a mock N150 (this process's mock environment set by the parent)."""
    import ttnn

    from bench_llama import MOCK_CASES, mock_spec, random_state
    from ttdecode.models import LlamaDecoder
    from ttdecode.testing.mock import open_mock_device
    from ttdecode.testing.transfers import count_transfers

    spec = mock_spec(MOCK_CASES["8b-n150"], layers, vocab)
    device = open_mock_device()
    seq = -(-(prompt + 1) // 64) * 64
    dec = LlamaDecoder(spec, random_state(spec), batch=batch, max_seq_len=seq, block_size=64, backend="device",
                       device=device)
    ids = torch.randint(0, vocab, (batch, prompt), generator=torch.Generator().manual_seed(1))
    t = time.perf_counter()
    dec.generate(ids, 1, progress=False)  # compiles every program of the prompt's steps
    first = time.perf_counter() - t
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        dec.generate(ids, 1, progress=False)
        times.append(time.perf_counter() - t)
    with count_transfers(ttnn) as log:
        dec.generate(ids, 1, progress=False)
        moves = log.counts()
    ops = dict(dec._device.ops)
    steps = dec.generate_steps
    dec.close()
    ttnn.close_device(device)
    ms = statistics.median(times) * 1e3
    return {"layers": layers, "vocab": vocab, "prompt": prompt, "batch": batch, "first_s": round(first, 2),
            "prompt_ms": ms, "ms_per_position": ms / prompt, "ms_per_user_token": ms / (prompt * batch),
            "steps": list(steps), "ops_last_step": ops, "moves": moves}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per user (default 128)")
    ap.add_argument("--batches", default="1,32", help="comma-separated batch sizes (default 1,32)")
    ap.add_argument("--repeat", type=int, default=3, help="timed generate calls per batch, median (default 3)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(MARK + json.dumps(child(args.layers, args.vocab, args.prompt, args.child, args.repeat)), flush=True)
        return 0
    from ttdecode.testing.mock import run_script

    print("host-side time, real measurements of ttnn 0.81.1's host side on a mock N150 (no chip: device/kernel "
          "time NOT measured)")
    print("| B | prompt | layers | prompt steps | host ms per prompt | ms per position | ms per user-token | "
          "moves per prompt | first call s (JIT) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    ok = True
    for batch in [int(b) for b in args.batches.split(",")]:
        argv_child = [str(Path(__file__).resolve()), "--child", str(batch), "--layers", str(args.layers), "--vocab",
                      str(args.vocab), "--prompt", str(args.prompt), "--repeat", str(args.repeat)]
        proc = run_script(argv_child, system="n150", timeout=args.timeout)
        got = [json.loads(line[len(MARK):]) for line in proc.stdout.splitlines() if line.startswith(MARK)]
        if proc.returncode != 0 or not got:
            print(f"B={batch}: child exited {proc.returncode}:\n" + "\n".join(proc.stderr.splitlines()[-20:]),
                  file=sys.stderr)
            ok = False
            continue
        r = got[0]
        print(f"| {batch} | {r['prompt']} | {r['layers']} | {r['steps'][0]} | {r['prompt_ms']:.1f} | "
              f"{r['ms_per_position']:.3f} | {r['ms_per_user_token']:.4f} | {r['moves']} | {r['first_s']} |",
              flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
