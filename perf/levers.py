"""How far two structural changes could move the open T3K goals (perf/README.md, "Goals (model estimates)",
"What the open goals would need"; MODEL ESTIMATES).

1. The tree's shape. The kernels reduce a work's pieces with a binomial tree (`ttdecode.core.split.tree_children`) and
   equal pieces. For the model's merge cost m and message cost n (setup, bytes, hops, semaphore) of
   the point, this computes the exposed reduction of
   - the binomial tree as the model prices it (perf_model.evaluator.reduction_cycles);
   - the best tree of any shape with equal pieces (`best_equal_tree`: a node merges its children one
     at a time, each merge m after the child's message n);
   - the best tree with pieces of any size (`best_loaded_tree`): a piece that merges more gets fewer
     key tiles; this only pays where a piece's local time shrinks with its keys (compute-bound), so
     it is reported at compute-bound points only.
2. A softmax block longer than a read chunk (`block_bound`): if the running (m, l, O) were rescaled
   once per piece instead of once per chunk, each piece would save its chunks' fixed cost
   (perf_model.op_counts.chunk_ops) but one. An upper bound: the overlap of reads and compute and any new
   per-piece cost are left as they are.

    PYTHONPATH=. python perf/levers.py
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ttdecode.perf_model.constants import COST  # noqa: E402
from ttdecode.perf_model.counters import work_from_counters  # noqa: E402
from ttdecode.perf_model.evaluator import (Breakdown, bank_floor_cycles, core_cycles, evaluate, message_cycles,  # noqa: E402
                                           op_cycles, reader_cycles, reduction_cycles)
from ttdecode.perf_model.op_counts import chunk_ops, intermediate_bytes, softmax_exp  # noqa: E402

_spec = importlib.util.spec_from_file_location("sweep_flash_decode", REPO / "perf" / "sweep_flash_decode.py")
sweep = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("sweep_flash_decode", sweep)
_spec.loader.exec_module(sweep)  # type: ignore[union-attr]


# ---- tree shapes -------------------------------------------------------------------------------


def best_equal_tree(pieces: int, merge: float, message: float) -> float:
    """Least time, after every piece has finished its (equal) local work, until one root holds all
    `pieces` partials, over every tree shape: a subtree done by time t has its root's last merge in
    [t - merge, t], its last child done by t - merge - message, and the root itself (with its earlier
    children) done by t - merge, so N(t) = N(t - merge) + N(t - merge - message) pieces, N = 1 below
    merge + message."""
    if pieces <= 1:
        return 0.0

    # every finish time is a * merge + b * message for whole a >= b >= 0: scan them in increasing order
    times = sorted({(a * merge + b * message, a, b) for a in range(0, 8 * pieces.bit_length() + 8)
                    for b in range(0, a + 1)})
    for t, _, _ in times:
        if _count(round(t, 9), merge, message) >= pieces:
            return t
    raise ValueError(f"pieces={pieces}: no tree found")


@functools.lru_cache(maxsize=None)
def _count(t: float, merge: float, message: float) -> int:
    """N(t) of best_equal_tree."""
    if t < merge + message - 1e-9:
        return 1
    return _count(round(t - merge, 9), merge, message) + _count(round(t - merge - message, 9), merge, message)


def best_loaded_tree(pieces: int, merge: float, message: float) -> float:
    """Least mean loss per piece of a tree whose pieces may hold different amounts of local work: a
    subtree with deadline D of p pieces can hold p * D - g(p) cycles of local work, where a root
    merging children c_1..c_d (in that order) stops its own work at D - d * merge and child c_i's
    subtree has deadline D - (d - i + 1) * merge - message. Returns g(pieces) / pieces: the step
    then takes (total local work) / pieces + this."""

    @functools.lru_cache(maxsize=None)
    def g(p: int) -> float:
        if p == 1:
            return 0.0

        @functools.lru_cache(maxsize=None)
        def children(rest: int, k: int) -> float:  # `rest` pieces in children k, k + 1, ... merges from the end
            if rest == 0:
                return 0.0
            return min(q * (k * merge + message) + g(q) + merge + children(rest - q, k + 1)
                       for q in range(1, rest + 1))

        return children(p - 1, 1)

    return g(pieces) / pieces


def binomial_loss(pieces: int, merge: float, message: float) -> float:
    """The binomial tree with equal pieces (the kernels' tree as the model prices it, with one message
    cost for every round): rounds x (merge + message)."""
    return (pieces - 1).bit_length() * (merge + message)


# ---- the points --------------------------------------------------------------------------------


def _points() -> list:
    P = sweep.Point
    out = []
    for nh in (4, 8):
        out.append(P("cores", f"T3K chip {nh}q/1kv, 16 cores per head", 1, nh, 1, 32768, 16))
    for nh in (4, 8):
        out.append(P("cores", f"T3K chip {nh}q/1kv key_row, 60 per head", 1, nh, 1, 32768, 60, kv_pages="key_row"))
    return out


def lever_row(p) -> dict[str, object]:
    """One point: the model's step, the tree bounds and the softmax-block bound (cycles and µs)."""
    plan, counters, _ = sweep.run_point(p)
    works, red, fid = work_from_counters(plan, counters)
    b: Breakdown = evaluate(works, red, fid)
    us = 1e6 / COST.clock_hz
    _, merge_by_class = reduction_cycles(red, fid)
    merge = sum(merge_by_class.values())
    # the mean message of the path that ends the slowest tree
    message = sum(message_cycles(nbytes, hops) for nbytes, hops in red.rounds) / max(1, len(red.rounds))
    pieces = plan.pieces_per_work
    comp = sum(b.compute_us.values())
    compute_bound = comp > b.reader_us
    eq = best_equal_tree(pieces, merge, message) * us
    loaded = best_loaded_tree(pieces, merge, message) * us if compute_bound else None
    rest = b.total_us - b.reduction_us
    # the softmax block: every chunk's fixed cost but one per piece, on the slowest core (evaluate's core time
    # with that much less compute; its overlap stages kept)
    head_rows = min(plan.num_tokens * plan.group_size, 32)
    fixed = chunk_ops(plan.q_tiles, plan.dv_tiles, softmax_exp(plan.fp32_dest_acc_en), head_rows, plan.q_tile_rows,
                      plan.mla, intermediate_bytes(plan.fp32_dest_acc_en))
    per_chunk = sum(op_cycles(op, t, fid) for op, ts in fixed.items() for t in ts)
    chunks = max(plan.range_at(p.pos, i).num_chunks for i in range(pieces))
    floor = bank_floor_cycles(works)

    def core(w, saved: float) -> float:  # evaluate's core time with `saved` cycles less compute
        cc = sum(op_cycles(op, t, fid) for op, ts in w.compute.items() for t in ts) - saved
        return core_cycles(w, max(reader_cycles(w.read_groups), floor), cc)

    saved = (chunks - 1) * per_chunk
    local_block = max(core(w, saved) for w in works) * us
    comp_block = comp - saved * us
    total_block = b.total_us - b.local_us + local_block
    return {
        "point": p.model, "pieces": pieces, "step_us": b.total_us, "reduction_us": b.reduction_us,
        "share_pct": 100 * b.reduction_share, "merge_cycles": merge, "message_cycles": message,
        "equal_tree_us": eq, "equal_tree_share_pct": 100 * eq / (rest + eq),
        "loaded_tree_step_us": None if loaded is None else rest + loaded,
        "compute_over_reader": comp / b.reader_us, "chunks": chunks, "chunk_fixed_cycles": per_chunk,
        "block_compute_over_reader": comp_block / b.reader_us, "block_step_us": total_block,
    }


def table(rows: Sequence[dict[str, object]]) -> str:
    head = ["point", "pieces", "step (µs)", "reduction: binomial (µs, share)", "best tree, equal pieces (µs, share)",
            "best tree, sized pieces: step (µs)", "compute / reader", "softmax block: compute / reader, step (µs)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        loaded = "n/a (DRAM-bound)" if r["loaded_tree_step_us"] is None else f"{r['loaded_tree_step_us']:.1f}"
        lines.append("| " + " | ".join([
            str(r["point"]), str(r["pieces"]), f"{r['step_us']:.1f}",
            f"{r['reduction_us']:.1f} ({r['share_pct']:.1f}%; merge {r['merge_cycles']:.0f} + message "
            f"{r['message_cycles']:.0f} cycles per round)",
            f"{r['equal_tree_us']:.1f} ({r['equal_tree_share_pct']:.1f}%)", loaded,
            f"{r['compute_over_reader']:.2f}",
            f"{r['block_compute_over_reader']:.2f}, {r['block_step_us']:.1f} ({r['chunks']} chunks of "
            f"{r['chunk_fixed_cycles']:.0f} fixed cycles)"]) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    print("What the open T3K goals would need (MODEL ESTIMATES; our kernels run on the host runtime at each point)\n")
    print(table([lever_row(p) for p in _points()]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
