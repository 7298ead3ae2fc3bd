"""TP-only vs TP x CP on a T3K's 8 chips: estimated attention time of one decode step vs context length.

MODEL ESTIMATES (``ttdecode.distributed.cost``: the planner's real work split per chip through the
calibrated cost model ``ttdecode.perf_model``, 100 Gb/s Ethernet links with 650 ns per hop), not
measurements. One layer's attention, bfloat8_b K/V, every user at cur_pos = S - 1.

Models: Llama-3.1-70B (64 q heads, 8 KV heads, D 128) and, for contrast, the same shape with one
KV head (MQA/MLA-like: TP over 8 chips replicates its cache on every chip). Layouts tp x cp with
tp * cp = 8; both combines. Writes ``sweep_context_parallel.csv`` and ``cp_time_vs_seq.png`` into
``--out`` (default ``build/perf/``, untracked; ``--update-committed``: ``perf/figures/``, replacing the
committed ones) and prints the table and the crossovers.

    PYTHONPATH=. python perf/sweep_context_parallel.py [--out DIR | --update-committed]
"""

from __future__ import annotations

import argparse
import csv
import os

from ttdecode.distributed.cost import estimate_layout

MODELS = {"Llama-3.1-70B (8 KV heads)": 8, "70B shape, 1 KV head (MQA)": 1}
LAYOUTS = [(8, 1), (4, 2), (2, 4), (1, 8)]
COMBINES = ["all_gather", "all_to_all"]
SEQS = [32768 << i for i in range(6)]  # 32K .. 1M
BATCHES = [1, 32]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=None, help="directory for the CSV and the plot (default: build/perf/, untracked)")
    ap.add_argument("--update-committed", action="store_true",
                    help="write into perf/figures/, replacing the committed CSV and plot")
    args = ap.parse_args()
    if args.update_committed and args.out is not None:
        ap.error("--update-committed writes perf/figures/: without --out")
    args.out = (os.path.join(here, "figures") if args.update_committed
                else args.out or os.path.join(os.path.dirname(here), "build", "perf"))
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for model, kv in MODELS.items():
        for b in BATCHES:
            for s in SEQS:
                for tp, cp in LAYOUTS:
                    for combine in (COMBINES if cp > 1 else COMBINES[:1]):
                        e = estimate_layout(tp=tp, cp=cp, batch=b, q_heads=64, kv_heads=kv, seq_len=s, combine=combine)
                        rows.append(dict(model=model, batch=b, seq=s, tp=tp, cp=cp, combine=combine if cp > 1 else "-",
                                         us=e.seconds * 1e6, chip_us=e.chip.seconds * 1e6, dram_us=e.chip.dram_s * 1e6,
                                         compute_us=e.chip.compute_s * 1e6, link_us=e.link_s * 1e6,
                                         merge_us=e.merge_s * 1e6, cores=e.chip.cores,
                                         kv_mib_per_chip=e.kv_bytes_per_chip / 2**20))
    path = os.path.join(args.out, "sweep_context_parallel.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path} ({len(rows)} rows; model estimates)")

    print("\n| model | B | S | TP8 (us) | best TPxCP | its time (us) | combine link + merge (us) |")
    print("|---|---|---|---|---|---|---|")
    crossovers = {}
    for model in MODELS:
        for b in BATCHES:
            for s in SEQS:
                pts = [r for r in rows if r["model"] == model and r["batch"] == b and r["seq"] == s]
                tp_only = next(r for r in pts if r["cp"] == 1)
                best = min((r for r in pts if r["cp"] > 1), key=lambda r: r["us"])
                print(f"| {model} | {b} | {s // 1024}K | {tp_only['us']:.0f} | {best['tp']}x{best['cp']} {best['combine']} "
                      f"| {best['us']:.0f} | {best['link_us']:.1f} + {best['merge_us']:.1f} |")
                if best["us"] < tp_only["us"] and (model, b) not in crossovers:
                    crossovers[(model, b)] = s
    print()
    for model, kv in MODELS.items():  # the crossover, searched from 1K (powers of two) up to 1M
        for b in BATCHES:
            found = None
            for s in [1024 << i for i in range(11)]:
                tp_only = estimate_layout(tp=8, cp=1, batch=b, q_heads=64, kv_heads=kv, seq_len=s).seconds
                best = min(estimate_layout(tp=tp, cp=cp, batch=b, q_heads=64, kv_heads=kv, seq_len=s,
                                           combine=c).seconds for tp, cp in LAYOUTS[1:] for c in COMBINES)
                if best < tp_only:
                    found = (s, tp_only, best)
                    break
            print(f"crossover {model}, B={b}: " + (
                f"CP pays from S = {found[0] // 1024}K ({found[1] * 1e6:.1f} us TP-only vs {found[2] * 1e6:.1f} us)"
                if found else "none in 1K..1M (TP-only is never slower)"))
    plot(rows, os.path.join(args.out, "cp_time_vs_seq.png"))


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(MODELS), len(BATCHES), figsize=(11, 8), squeeze=False)
    for i, model in enumerate(MODELS):
        for j, b in enumerate(BATCHES):
            ax = axes[i][j]
            for tp, cp in LAYOUTS:
                for combine in (COMBINES if cp > 1 else ["-"]):
                    pts = [r for r in rows if r["model"] == model and r["batch"] == b and r["tp"] == tp
                           and r["combine"] == combine]
                    style = "-" if combine in ("-", "all_gather") else "--"
                    label = f"TP{tp}" + (f" x CP{cp} {combine}" if cp > 1 else " only")
                    ax.plot([r["seq"] / 1024 for r in pts], [r["us"] / 1000 for r in pts], style, marker="o",
                            markersize=3, label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{model}, B={b}", fontsize=9)
            ax.set_xlabel("context length (K tokens)")
            ax.set_ylabel("attention per step, one layer (ms)")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("T3K (8 Wormhole chips): TP-only vs TP x CP, MODEL ESTIMATES", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
