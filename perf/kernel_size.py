"""Kernel image sizes of every program kind, ours beside tt-metal's FlashDecode (`sdpa_flash_decode`).

Every program kind of the hardware check (`ttdecode.hwcheck.kinds.KINDS`) is built on the mock N150 in one
child process, and, where ttnn has the op (and tt-metal accepts the configuration on the N150), tt-metal's
own decode op on the same call at the same numerics; then one extra pair at tt_transformers' decode
numerics (`TT_TRANSFORMERS`: HiFi2, math approx mode, fp32 DST accumulation, exp_approx_mode False). Sizes:
`ttdecode.testing.kernel_size` (data movement real, compute a GCC 12 -O3 proxy). A kind with no tt-metal op
of its own (multi-token, an LSE, the combine, the rotary append, a configuration tt-metal refuses) is
compared with tt-metal's FlashDecode of `gqa_d64` at the package default numerics.

    PYTHONPATH=. python perf/kernel_size.py                 # every kind (about 20 minutes on 2 shared cores)
    PYTHONPATH=. python perf/kernel_size.py --only gqa_d64 paged combine_bf16
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ttdecode.hwcheck.kinds import KINDS, Decode, select  # noqa: E402
from ttdecode.testing import gcc_front_end as gfe  # noqa: E402
from ttdecode.testing import kernel_size as ks  # noqa: E402
from ttdecode.testing.dry_run import run_isolated  # noqa: E402

#: The reference for kinds without a tt-metal op of their own.
BASELINE = "gqa_d64"
#: The extra pair at tt_transformers' decode numerics (its name in the table, its call).
TT_TRANSFORMERS = "tt_transformers_fp32"
TT_TRANSFORMERS_CALL = Decode()

CHILD = """
import os, sys
sys.path.insert(0, {repo!r})
from perf.kernel_size import build_programs
from ttdecode.testing.dry_run import emit
emit(build_programs({names!r}))
"""


def _tt_transformers_calls(ttnn: Any, device: Any) -> tuple[Any, Any]:
    """Our call and ttnn's on `TT_TRANSFORMERS_CALL` at tt_transformers' decode numerics."""
    import torch

    from ttdecode import api
    from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig
    from ttdecode.hwcheck import programs

    p = TT_TRANSFORMERS_CALL
    h = programs.decode_host_tensors(p, torch.Generator().manual_seed(7))
    d = programs.decode_device_tensors(p, h, ttnn, device)
    ck = ComputeKernelConfig(math_fidelity="HiFi2", math_approx_mode=True, fp32_dest_acc_en=True)
    pc = SDPAProgramConfig(compute_with_storage_grid_size=p.grid, k_chunk_size=0, exp_approx_mode=False)
    kw = dict(is_causal=True, cur_pos_tensor=d["pos"])
    ours = lambda: api.scaled_dot_product_attention_decode(  # noqa: E731
        d["q"], d["k"], d["v"], program_config=pc, compute_kernel_config=ck, backend="device", **kw)
    theirs = lambda: ttnn.transformer.scaled_dot_product_attention_decode(  # noqa: E731
        d["q"], d["k"], d["v"], program_config=pc.to_ttnn(), compute_kernel_config=ck.to_ttnn(), **kw)
    return ours, theirs


def build_programs(names: Sequence[str]) -> dict[str, list[str]]:
    """(In the mock child.) Build the kinds `names` (ours, then tt-metal's where ttnn has the op) and the
    tt_transformers pair, each program closed by `kernel_size.end_program`; the labels built."""
    import os

    import ttnn

    from ttdecode.hwcheck import programs
    from ttdecode.testing.mock import JIT_LOG_ENV, open_mock_device

    log, cache = os.environ[JIT_LOG_ENV], os.environ["TT_METAL_CACHE"]
    device = open_mock_device()
    built: list[str] = []

    def run(label: str, call: Any) -> None:
        try:
            call()
        except Exception as exc:  # tt-metal refuses some of its own op's configurations on the N150
            label = f"refused:{label}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ks.end_program(label, ttnn, device, log, cache)
        built.append(label)

    for kind in [k for k in KINDS if k.name in names]:
        case = programs.build(kind, ttnn, device)
        run(f"ours:{kind.name}", case.ours)
        if case.theirs is not None:
            run(f"tt-metal:{kind.name}", case.theirs)
    ours, theirs = _tt_transformers_calls(ttnn, device)
    run(f"ours:{TT_TRANSFORMERS}", ours)
    run(f"tt-metal:{TT_TRANSFORMERS}", theirs)
    ttnn.close_device(device)
    return {"built": built}


def measure(names: Optional[Sequence[str]] = None, jobs: int = 2, timeout: float = 2400,
            keep: Optional[str] = None) -> list[tuple[ks.ProgramImages, ks.ProgramImages]]:
    """(ours, tt-metal's) images per kind of `names` (default: every kind; `BASELINE` is always built)
    plus the tt_transformers pair, built on the mock N150 in a child process and sized. `keep`: a new
    directory for the JIT log and cache, kept (default: a temporary one)."""
    names = list(names or [k.name for k in KINDS])
    if BASELINE not in names:
        names.insert(0, BASELINE)
    if keep:
        os.makedirs(keep)
    with (contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="kernel-size-")) as tmp:
        log = Path(tmp) / "jit.log"
        r = run_isolated(CHILD.format(repo=str(REPO), names=names), timeout=timeout, jit_log=str(log),
                         env={"TT_METAL_CACHE": f"{tmp}/cache/"})
        if r.returncode != 0 or r.result is None:
            raise RuntimeError(r.describe())
        images = ks.measure(gfe.read_log(log), jobs=jobs)
    refused = [b for b in r.result["built"] if b.startswith("refused:ours:")]
    if refused:
        raise RuntimeError(f"our programs failed on the mock: {refused}")
    ref = images[f"tt-metal:{BASELINE}"]
    return [(images[f"ours:{n}"], images.get(f"tt-metal:{n}", ref)) for n in [*names, TT_TRANSFORMERS]]


def limits(pairs: Sequence[tuple[ks.ProgramImages, ks.ProgramImages]]) -> list[str]:
    """Our images over the hard limits: NCRISC beyond its IRAM (real bytes) and, as a check on the order
    of size only (the compute proxy overcounts), five images beyond the kernel-config buffer."""
    out = []
    for ours, _ in pairs:
        if ours.bytes.get("ncrisc", 0) > ks.NCRISC_IRAM_BYTES:
            out.append(f"{ours.label}: NCRISC {ours.bytes['ncrisc']} B > {ks.NCRISC_IRAM_BYTES} B IRAM")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help="program kinds (default: all)")
    p.add_argument("--quick", action="store_true", help="the hardware check's --quick kinds")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--keep", help="a new directory to keep the JIT log and cache in")
    args = p.parse_args(argv)
    names = args.only or ([k.name for k in select(quick=True)] if args.quick else None)
    pairs = measure(names, jobs=args.jobs, keep=args.keep)
    print(ks.table(pairs))
    print()
    for name, (r, label) in ks.worst(pairs).items():
        print(f"worst {name}: {r:.2f}x ({label})")
    theirs_total = max(t.total for _, t in pairs)
    ours_total = max(o.total for o, _ in pairs)
    print(f"largest five-image total: ours {ours_total} B, tt-metal's {theirs_total} B "
          f"(proxy for compute; kernel-config buffer {ks.KERNEL_CONFIG_BYTES} B)")
    for line in limits(pairs):
        print("OVER:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
