"""Tensor x context parallelism on a whole mock Galaxy (opt-in; not part of `make test`).

Opens the mock 6U Galaxy (``ttdecode.testing.mock`` system "galaxy32": 32 Wormhole chips) as a 4 x 8
``ttnn.MeshDevice`` with FABRIC_1D and runs ``LlamaDecoder(backend="device", devices=32,
context_parallel=4)`` on it: context parallel along mesh axis 0 (the 4 chips of a column hold the
cache's blocks j mod 4), tensor parallel along axis 1 (8 ways: one KV head per chip). A small Llama
(2 layers, 16 q / 8 KV heads of 32) decodes ``--steps`` steps with users joining and leaving. Checked
per step: every op accepted by ttnn on the mesh, one host -> device write and one device -> host read,
no program-cache entry added after step 2. The mock computes nothing (no numerics, no device timing):
the times printed are host wall times measured through ttnn on the mock.

Run in its own process under a timeout, against the kept ``TT_METAL_CACHE`` of galaxy32: its first use
builds the fabric's ERISC routers (some 120 variants) and every kernel through the stand-in compiler,
which is why this is not a `make test` item; later runs reuse them::

    PYTHONPATH=. .venv/bin/python tools/galaxy_tp_cp.py [--steps 6] [--timeout 900]

Exit status 0 when every check passes (the same ttnn calls each step, plus the on-device argmax on the
greedy steps), 1 when one fails, 124 on timeout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any, Optional, Sequence

from ttdecode.testing.dry_run import run_isolated

CHILD = r"""
import sys, resource
import ttnn
from ttdecode.models import LlamaDecoder
from ttdecode.testing.dry_run import emit
from ttdecode.testing.drivers import join_leave_steps
from ttdecode.testing.mesh_llama import mesh_decoder

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
with mesh_decoder(LlamaDecoder, (4, 8), devices=32, context_parallel=4, heads=16, kv_heads=8, batch=4,
                  system="galaxy32") as run:
    device, dec = run.device, run.decoder
    dd, cp = dec._device, dec._device.cp
    layout = {"cp_axes": list(cp.axes), "cp_ranks": cp.ranks, "tp_axis": dd.tp_axis, "tp": dd.tp,
              "heads_per_chip": [dd.nh, dd.nkv]}
    steps = join_leave_steps(dec, device, 4, run.log, steps=STEPS)
dec.close()
ttnn.close_mesh_device(device)
emit({"times": run.seconds, "layout": layout, "steps": steps, "cluster": str(ttnn.cluster.get_cluster_type()),
      "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
"""


def check(result: dict[str, Any]) -> list[str]:
    """The failed checks of one run's result (empty when all pass)."""
    problems = []
    if result["layout"] != {"cp_axes": [0], "cp_ranks": 4, "tp_axis": 1, "tp": 8, "heads_per_chip": [2, 1]}:
        problems.append(f"layout: {result['layout']}")
    steps = result["steps"]
    for s in steps:
        if s["moves"] != ["copy_host_to_device_tensor", "to_torch"] or s["writes"] != 1:
            problems.append(f"step {s['step']}: moves {s['moves']}, writes {s['writes']}")
    ops = [{k: v for k, v in s["ops"].items() if k != "argmax"} for s in steps]
    if any(o != ops[0] for o in ops) or any(("argmax" in s["ops"]) != s["greedy"] for s in steps):
        problems.append(f"ops differ between steps: {[s['ops'] for s in steps]}")
    entries = [s["entries"] for s in steps[1:]]
    if len(set(entries)) > 1:
        problems.append(f"program-cache entries grew after step 2: {entries}")
    return problems


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the decoder on the mock Galaxy in a child process and print its times and checks."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=6, help="decode steps (default: 6)")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds before the child process is killed, exit 124 (default: 900)")
    args = p.parse_args(argv)
    code = f"import sys; sys.argv = ['galaxy_tp_cp', '{args.steps}']\n" + CHILD
    try:
        r = run_isolated(code, system="galaxy32", timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"galaxy_tp_cp: timed out after {args.timeout} s (killed)", file=sys.stderr)
        return 124
    if r.returncode != 0 or r.result is None:
        print(r.stderr[-4000:], file=sys.stderr)
        return 1
    res = r.result
    t = res["times"]
    print(f"mock Galaxy 4x8 ({res['cluster']}), host wall times measured through ttnn on the mock: "
          f"open {t['open']:.1f} s, decoder build {t['build']:.1f} s, peak RSS {res['maxrss_mb']:.0f} MB")
    for s in res["steps"]:
        print(f"  step {s['step']}: {s['seconds']:.2f} s, positions {s['positions']}, "
              f"{sum(s['ops'].values())} ttnn ops, moves {s['moves']}")
    problems = check(res)
    for line in problems:
        print("FAILED:", line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
