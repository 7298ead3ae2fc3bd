"""Llama decode on the host backend: wall time per step, and the modelled Wormhole attention time.

Random weights (no download), 1 layer by default (``--layers 2``), the FlashDecode kernels on the
host runtime (backend ``host``), bfloat8_b KV caches of 8K positions filled with random values
(every user at position 8191 after the fill; blocks of 64 positions). Cases:

  8b-n150   Llama-3.1-8B shape on one N150: 32 q / 8 kv heads, D 128, hidden 4096, MLP 14336,
            vocab 128256; B = 1 and 32.
  70b-t3k   Llama-3.1-70B on a T3K, ONE chip's shard: 8 q / 1 kv heads, D 128, hidden 8192, MLP
            28672 / 8, vocab 128256 / 8; B = 1 and 32. The shard runs as a devices=1 decoder, so the
            two all-reduces and the all-gather of the 8-way step are not in its time.
  tiny-b4   the 2-layer test model (8 q / 2 kv, D 64, hidden 256) at B = 4, S 64.
  op-call   one op call of the smallest shape (B 1, 1 q / 1 kv head, D 32, S 32) on the host backend,
            compile cache warm: the fixed cost a decode step pays once per layer.
  attn-8b   one Llama-3.1-8B-shaped attention call alone (B 1, 8K, N150 8x8 grid).

For every case that calls the op, the model estimate of the attention on a Wormhole
(``ttdecode.perf_model.costmodel``: ``evaluate(*work_from_counters(plan, counters))`` of the counters of the
same kernel runs) is printed as "per
layer" (one call serves all B users), "per step" (= per layer x the full model's layers, 32 for
8B and 80 for 70B: the attention share of one full-depth decode step, which yields one token per
user) and "per token" (per step / B). These are MODEL ESTIMATES, not device measurements. Host wall times are of this
machine (2 shared cores).

    PYTHONPATH=. python perf/bench_llama.py            # all cases (a few minutes), plot in --out
    PYTHONPATH=. python perf/bench_llama.py --quick    # tiny-b4, op-call, attn-8b and the B=1 cases
    PYTHONPATH=. python perf/bench_llama.py --update-committed   # all cases, plot into tech_report/figures/

The plot goes to ``--out`` (default ``build/perf/``, untracked); only ``--update-committed`` (a full
run) rewrites the committed ``tech_report/figures/llama_decode_bench.png``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BUILD_OUT = REPO / "build" / "perf"  # default output directory (gitignored)
COMMITTED = REPO / "tech_report" / "figures"  # the committed plot, rewritten by --update-committed only

import ttdecode  # noqa: E402
import ttdecode.ops.flash_decode.program as factory  # noqa: E402
from ttdecode.models.llama import LlamaDecoder, LlamaSpec  # noqa: E402
from ttdecode.perf_model.costmodel import evaluate, work_from_counters  # noqa: E402

SHAPES = {
    # name: (heads, kv_heads, head_dim, hidden, intermediate, vocab, full-model layers)
    "8b-n150": (32, 8, 128, 4096, 14336, 128256, 32),
    "70b-t3k": (8, 1, 128, 8192, 28672 // 8, 128256 // 8, 80),
    "tiny-b4": (8, 2, 64, 256, 512, 512, 2),
}
LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}


class AttentionCounters:
    """Records (plan, counters) of every host kernel run while active (wraps run_flash_decode)."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, Any]] = []
        self._orig = factory.run_flash_decode

    def __enter__(self) -> "AttentionCounters":
        def wrapped(plan: Any, **kw: Any) -> Any:
            out = self._orig(plan, **kw)
            self.runs.append((plan, out[2].counters))
            return out

        factory.run_flash_decode = wrapped
        return self

    def __exit__(self, *exc: Any) -> None:
        factory.run_flash_decode = self._orig

    def model_us(self) -> list[float]:
        """The cost model's step time (µs, a MODEL ESTIMATE) of every recorded run."""
        return [evaluate(*work_from_counters(plan, counters)).total_us for plan, counters in self.runs]


def spec_of(name: str, layers: int) -> LlamaSpec:
    h, kv, d, hidden, inter, vocab, _ = SHAPES[name]
    return LlamaSpec(vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=h, num_kv_heads=kv,
                     head_dim=d, intermediate_size=inter, rms_norm_eps=1e-5, rope_theta=500000.0,
                     rope_scaling=LLAMA31_ROPE, attention_bias=False, mlp_bias=False)


def random_state(spec: LlamaSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    """Hugging Face state-dict names, random bfloat16 weights (std 0.02; norms 1)."""
    g = torch.Generator().manual_seed(seed)
    w = lambda *shape: (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)  # noqa: E731
    q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    hs, inter = spec.hidden_size, spec.intermediate_size
    state = {"model.embed_tokens.weight": w(spec.vocab_size, hs), "lm_head.weight": w(spec.vocab_size, hs),
             "model.norm.weight": torch.ones(hs)}
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        state.update({
            p + "input_layernorm.weight": torch.ones(hs), p + "post_attention_layernorm.weight": torch.ones(hs),
            p + "self_attn.q_proj.weight": w(q, hs), p + "self_attn.k_proj.weight": w(kv, hs),
            p + "self_attn.v_proj.weight": w(kv, hs), p + "self_attn.o_proj.weight": w(hs, q),
            p + "mlp.gate_proj.weight": w(inter, hs), p + "mlp.up_proj.weight": w(inter, hs),
            p + "mlp.down_proj.weight": w(hs, inter),
        })
    return state


def fill_caches(dec: LlamaDecoder, length: int, seed: int = 0) -> None:
    """Give every user ``length`` cached positions of random K/V (one random block repeated)."""
    alloc = dec.allocator
    per_user = math.ceil((length + 1) / alloc.block_size)
    for kc, vc in dec._shard.caches:
        for c in (kc, vc):
            block = torch.randn(1, *c.shape[1:], generator=torch.Generator().manual_seed(seed))
            tile = ttdecode.from_torch(block, c.dtype).data
            c.image[:] = tile * c.shape[0]
    for b in range(alloc.batch):
        alloc.blocks[b] = list(range(b * per_user, (b + 1) * per_user))
        alloc.lengths[b] = length
    used = {blk for blocks in alloc.blocks for blk in blocks}
    alloc._free = [blk for blk in range(alloc.num_blocks - 1, -1, -1) if blk not in used]


def bench_model(name: str, batch: int, seq: int, layers: int, repeat: int) -> dict[str, Any]:
    spec = spec_of(name, layers)
    block = 64 if seq > 64 else 32
    t0 = time.perf_counter()
    dec = LlamaDecoder(spec, random_state(spec), batch=batch, max_seq_len=seq, kv_dtype=ttdecode.bfloat8_b,
                       backend="host", block_size=block)
    fill_caches(dec, seq - 1 - repeat)
    build = time.perf_counter() - t0
    tokens = torch.randint(0, spec.vocab_size, (batch,), generator=torch.Generator().manual_seed(1))
    times = []
    with AttentionCounters() as rec:
        for r in range(repeat + 1):  # the first step compiles the kernels: not timed
            pos = torch.full((batch,), seq - 1 - repeat + r, dtype=torch.int64)
            t = time.perf_counter()
            dec.step(tokens, pos)
            if r:
                times.append(time.perf_counter() - t)
    model = rec.model_us()[-layers:]  # the last step's calls, one per layer
    full_layers = SHAPES[name][6]
    return dict(case=f"{name} B={batch}", layers=layers, seq=seq, host_s=statistics.median(times),
                build_s=build, attn_model_us_layer=statistics.mean(model),
                attn_model_us_token=statistics.mean(model) * full_layers, full_layers=full_layers)


def bench_op(batch: int, heads: int, kv_heads: int, d: int, seq: int, repeat: int, label: str) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, batch, heads, d, generator=g)
    k = ttdecode.from_torch(torch.randn(batch, kv_heads, seq, d, generator=g), ttdecode.bfloat8_b)
    v = ttdecode.from_torch(torch.randn(batch, kv_heads, seq, d, generator=g), ttdecode.bfloat8_b)
    pos = [seq - 1] * batch
    times = []
    with AttentionCounters() as rec:
        for r in range(repeat + 1):
            t = time.perf_counter()
            ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=pos, backend="host")
            if r:
                times.append(time.perf_counter() - t)
    return dict(case=label, layers=1, seq=seq, host_s=statistics.median(times), build_s=0.0,
                attn_model_us_layer=rec.model_us()[-1], attn_model_us_token=float("nan"), full_layers=1)


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    names = [r["case"] for r in rows]
    a.barh(names, [r["host_s"] * 1e3 for r in rows], color="tab:gray")
    a.set_xscale("log")
    a.set_xlabel("host wall time per step / call (ms, this 2-core machine)")
    a.set_title("host backend (measured)")
    m = [r for r in rows if not math.isnan(r["attn_model_us_layer"])]
    b.barh([r["case"] for r in m], [r["attn_model_us_layer"] for r in m], color="tab:blue")
    b.set_xscale("log")
    b.set_xlabel("attention per layer, one Wormhole (us, model estimate)")
    b.set_title("ttdecode.perf_model.costmodel estimate (not measured)")
    fig.tight_layout()
    path = out / "llama_decode_bench.png"
    fig.savefig(path, dpi=120)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the B=32 model cases")
    ap.add_argument("--layers", type=int, default=1, choices=(1, 2))
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=2, help="timed steps per case (median)")
    ap.add_argument("--out", type=Path, default=None,
                    help="directory for the plot (default: build/perf/, untracked)")
    ap.add_argument("--update-committed", action="store_true",
                    help="write the plot into tech_report/figures/, replacing the committed one (full run only)")
    args = ap.parse_args(argv)
    if args.update_committed and (args.out is not None or args.quick):
        ap.error("--update-committed writes tech_report/figures/ from a full run: without --out and --quick")
    out = COMMITTED if args.update_committed else (args.out or BUILD_OUT)
    torch.set_num_threads(2)
    rows = [
        bench_op(1, 1, 1, 32, 32, 20, "op-call (smallest)"),
        bench_model("tiny-b4", 4, 64, 2, 5),
        bench_op(1, 32, 8, 128, args.seq, args.repeat, "attn-8b B=1 (op alone)"),
    ]
    cases = [("8b-n150", 1), ("70b-t3k", 1)] + ([] if args.quick else [("8b-n150", 32), ("70b-t3k", 32)])
    for name, batch in cases:
        rows.append(bench_model(name, batch, args.seq, args.layers, args.repeat))
        print(f"  done {rows[-1]['case']}", file=sys.stderr, flush=True)
    print(f"{'case':28s} {'layers':>6s} {'S':>6s} {'host ms/step':>13s} {'model us/layer':>15s} "
          f"{'model us/step':>18s} {'model us/token':>15s}")
    for r in rows:
        full = r["attn_model_us_token"]
        step = "" if math.isnan(full) else f"{full:.0f} ({r['full_layers']} L)"
        users = int(r["case"].split("B=")[1].split()[0]) if "B=" in r["case"] else 1
        tok = "" if math.isnan(full) else f"{full / users:.0f}"
        print(f"{r['case']:28s} {r['layers']:6d} {r['seq']:6d} {r['host_s'] * 1e3:13.1f} "
              f"{r['attn_model_us_layer']:15.1f} {step:>18s} {tok:>15s}")
    print("host ms: measured wall time on this machine; model us: ttdecode.perf_model.costmodel ESTIMATES of the attention "
          "on one Wormhole chip (not device measurements); per step = per layer x the full model's layers (one "
          "full-depth decode step, one token per user); per token = per step / B")
    out.mkdir(parents=True, exist_ok=True)
    print(f"plot: {plot(rows, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
