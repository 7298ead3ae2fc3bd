"""The paged sweep (`perf/sweep_flash_decode.py --paged`): our kernels on a bank-local paged pool beside
tt-metal's sdpa_decode structure on its standard (interleaved tile-page) pool, both through the Wormhole
cost model. ALL TIMES ARE MODEL ESTIMATES.

Ours: `ttdecode.perf_model.bank_paged` in closed form from a concrete page table (every user's row), for
our planner's bank-local plan of the point (make_plan with kv_pages "key_row" and the paged cache): its
pieces per (user, KV head), their cores, q tiles, DST tiles, chunk cap and split floor. tt-metal's: its structure
(`ttmetal_structure`) reading cur_pos and the page-table row from DRAM. Both at tt_transformers' decode
numerics: HiFi2, math_approx_mode True, fp32_dest_acc_en True, packer_l1_acc True (ours does not use it),
exp_approx_mode False. At that config tt-metal's kernel still runs the approximate exp where its Q tiles are
half tiles (`ttmetal_exp_approx`: a causal call with at most 16 q heads, as at the T3K and Galaxy points), so
"the same numerics" gives ours the exp tt-metal's kernel runs ("bank-local" rows, planned and priced at it), and a
row "bank-local, accurate exp" shows ours at the config's accurate exp wherever the two differ (more exact than
tt-metal there, and slower).

Points: Llama-3.1-8B N150 (32q/8kv, D 128) B 1/8/32 x S 4K/8K/32K/128K; Llama-3.1-70B T3K chip (8q/1kv)
B 1 and 32 at 32K; Galaxy Llama-70B chip (B 8, cur_pos 127, 8x4 grid); blocks 32 and 64; page tables
"sequential", "random" (distinct blocks drawn from a pool twice the need, seed 0) and "allocator" (the
balanced BlockAllocator of ttdecode.models.kv_cache filling the users in random interleaved rounds from a
pool twice the need). Besides the layout's own rows ("bank-local": the plan's P, 1 to 4 readers per bank of
R_h as the planner prices it for the batch size, at tt-metal's max_cores_per_head_batch), a row "bank-local,
cores not set" at the sequential tables: the planner's plan with max_cores_per_head_batch not set (a bank-local
pool then takes up to 4 readers per bank, within the grid; UNSET_MAX_CORES_TRIES_KEY_ROW), beside tt-metal at its
own default of 16; the goals judge "bank-local" only.
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from ttdecode.core.formats import DataType
from ttdecode.models.kv_cache import BlockAllocator
from ttdecode.ops.flash_decode.plan import DecodePlan, make_plan, power_of_two_scale
from ttdecode.perf_model.bank_paged import (PagedShape, PieceCompute, evaluate_paged, piece_imbalance,
                                            random_page_table, sequential_page_table)
from ttdecode.perf_model.constants import COST
from ttdecode.perf_model.evaluator import evaluate, message_cycles, start_spread_cycles
from ttdecode.perf_model.pricing import bank_local_floor_cycles, key_tile_cycles, round_cycles
from ttdecode.perf_model.ttmetal_structure import TTMetalShape, ttmetal_work

COLUMNS = ["point", "kernel", "layout", "batch", "seq", "block", "page_table", "us", "gbps", "ratio_vs_ttmetal",
           "pieces"]
PAGE_TABLES = ("sequential", "random", "allocator")
PEAK_GBPS = COST.dram_peak_bytes_per_cycle * COST.clock_hz / 1e9
BANK_LOCAL_GBPS = 265.5  # DRAMTile: 12 readers, one per bank (COST_SOURCES "dram_bank_local_readers_efficiency")


@dataclass(frozen=True)
class PagedPoint:
    """One model shape of the paged sweep; `pos` None = every user at seq - 1."""

    point: str
    batch: int
    num_q_heads: int
    num_kv_heads: int
    seq: int
    grid: tuple[int, int] = (8, 8)
    max_cores: int = 16  # tt-metal's max_cores_per_head_batch
    pos: Optional[int] = None

    @property
    def cur_pos(self) -> int:
        return self.seq - 1 if self.pos is None else self.pos


def paged_points(quick: bool) -> list[PagedPoint]:
    """The sweep's shapes (`quick`: a subset that runs in about a minute here)."""
    seqs = (4096, 32768) if quick else (4096, 8192, 32768, 131072)
    batches = (1, 8) if quick else (1, 8, 32)
    llama = [PagedPoint("llama8b-n150", b, 32, 8, s) for b in batches for s in seqs
             if not (quick and b == 8 and s > 4096)]
    t3k = [PagedPoint("llama70b-t3k", b, 8, 1, 32768) for b in (1, 32)]
    galaxy = [PagedPoint("galaxy-llama70b", 8, 8, 1, 128, (8, 4), 4, 127)]
    return llama + t3k + galaxy


def ttmetal_exp_approx(p: PagedPoint, exp_approx_mode: bool = False) -> bool:
    """Whether tt-metal's decode kernel runs the approximate softmax exp at p (ttnn 0.81.1): with
    `exp_approx_mode`, or where its program factory takes half (16 x 32) Q tiles, a causal call with a bf16 Q
    and at most 16 q heads (the user's, not per KV head), whose VectorMode::R selects the approximate exp
    whatever the mode (sdpa/device/kernels/compute/compute_common.hpp, sub_exp_block_bcast_cols_inplace)."""
    return exp_approx_mode or p.num_q_heads <= 16


def bank_local_plan(p: PagedPoint, block: int, exp_approx: bool = False, cores_set: bool = True) -> DecodePlan:
    """Our planner's bank-local plan at p (make_plan with kv_pages "key_row" and a paged cache of `block`, a pool
    twice the need, max_cores_per_head_batch p.max_cores as tt-metal's, or not set without `cores_set`) at
    tt_transformers' numerics, the softmax exp approximate with `exp_approx`: its pieces per (user, KV head),
    placement, chunk cap, split floor, spread and softmax block are what the model prices."""
    blocks = -(-p.seq // block)
    return make_plan(batch=p.batch, num_q_heads=p.num_q_heads, num_kv_heads=p.num_kv_heads, seq_len=p.seq,
                     head_dim=128, kv_dtype=DataType.bfloat8_b, cur_pos=[p.cur_pos] * p.batch, grid=p.grid,
                     kv_pages="key_row", block_size=block, num_blocks=2 * p.batch * blocks,
                     dram_banks=COST.dram_banks, prescale_q=power_of_two_scale(1 / math.sqrt(128)),
                     fp32_dest_acc_en=True, math_fidelity="HiFi2", exp_approx=exp_approx,
                     max_cores_per_head_batch=p.max_cores if cores_set else None)


def piece_compute(plan: DecodePlan, exp_approx: bool = False) -> PieceCompute:
    """The plan's fields the closed forms take, at tt_transformers' numerics (the exp approximate with
    `exp_approx`)."""
    return PieceCompute(q_tiles=plan.q_tiles, head_rows=min(32, plan.group_size), q_tile_rows=plan.q_tile_rows,
                        dst_tiles=plan.dst_tiles, prescale_q=plan.prescale_q, fp32_dest_acc_en=True,
                        exp_approx=exp_approx,
                        fidelity="HiFi2", chunk_cap=plan.chunk_cap, floor_tiles=plan.min_chunk_tiles,
                        fixed_chunk_tiles=plan.fixed_chunk_tiles, softmax_chunks=plan.softmax_chunks,
                        spread_banks=plan.spread_banks)


def allocator_page_table(batch: int, blocks: int, block: int, num_kv_heads: int, seed: int = 0,
                         policy: str = "balanced") -> np.ndarray:
    """The allocator's table (`policy`: "balanced", or "first_free" to compare) after the users grew in
    random interleaved rounds (each round every unfinished user takes 0-8 blocks) from a pool twice the
    need (int64 [batch, blocks])."""
    alloc = BlockAllocator(batch, blocks * block, block, 2 * batch * blocks, policy=policy,
                           num_kv_heads=num_kv_heads, dram_banks=COST.dram_banks)
    rng = np.random.default_rng(seed)
    have = [0] * batch
    while min(have) < blocks:
        grow = [min(blocks, h + int(rng.integers(0, 9))) for h in have]
        plan = alloc.plan_blocks([(False, g) if g > h else None for g, h in zip(grow, have)],
                                 [g * block for g in grow])
        alloc.commit(plan)
        have = grow
    return alloc.page_table().numpy().astype(np.int64)


def page_table(kind: str, p: PagedPoint, block: int) -> np.ndarray:
    blocks = -(-p.seq // block)
    if kind == "sequential":
        return sequential_page_table(p.batch, blocks)
    if kind == "random":
        return random_page_table(p.batch, blocks, seed=0, num_blocks=2 * p.batch * blocks)
    if kind == "allocator":
        return allocator_page_table(p.batch, blocks, block, p.num_kv_heads)
    raise ValueError(f"page_table: expected one of {PAGE_TABLES}, got {kind!r}")


def ttmetal_us(p: PagedPoint, block: int) -> tuple[float, float]:
    """(µs, GB/s) of tt-metal's structure on its interleaved paged pool (MODEL ESTIMATE)."""
    shape = TTMetalShape(p.batch, p.num_q_heads, p.num_kv_heads, 128, p.cur_pos, p.seq, p.grid, p.max_cores,
                         fp32_dest_acc=True, index_memory="dram", block_size=block, exp_approx_mode=False)
    works, red, _ = ttmetal_work(shape)
    b = evaluate(works, red, "HiFi2")
    return b.total_us, b.achieved_gbps


def run_paged(points: list[PagedPoint], blocks: tuple[int, ...] = (32, 64),
              tables: tuple[str, ...] = PAGE_TABLES) -> Iterator[dict[str, object]]:
    """Every row of the sweep (COLUMNS, plus `compute_over_reader` of ours), tt-metal's first per block; ours at
    tt-metal's exp ("bank-local", and "bank-local, cores not set" at the sequential tables), and at the config's
    accurate exp where that differs."""
    for p in points:
        same = ttmetal_exp_approx(p)
        for block in blocks:
            tm, tm_gbps = ttmetal_us(p, block)
            yield _row(p, "tt-metal", "interleaved tile pages", block, "-", tm, tm_gbps, 1.0, float("nan"))
            shape = PagedShape(p.batch, p.num_q_heads, p.num_kv_heads, 128, block, (p.cur_pos,) * p.batch, p.grid,
                               COST.dram_banks)
            plans = {(exp, True): bank_local_plan(p, block, exp) for exp in dict.fromkeys((same, False))}
            plans[same, False] = bank_local_plan(p, block, same, cores_set=False)
            for kind in tables:
                pt = page_table(kind, p, block)
                variants = [("bank-local", same, True)]
                variants += [("bank-local, cores not set", same, False)] if kind == "sequential" else []
                variants += [("bank-local, accurate exp", False, True)] if same else []
                for layout, exp, cores_set in variants:  # each its plan's pieces and placement
                    plan = plans[exp, cores_set]
                    placed = {(q.user, q.kv_head, q.index): q.core for q in plan.pieces}
                    b, _ = evaluate_paged(shape, piece_compute(plan, exp), pt, plan.pieces_per_work, placement=placed)
                    comp = sum(b.compute_us.values())
                    row = _row(p, "ttdecode", layout, block, kind, b.total_us, b.achieved_gbps, tm / b.total_us,
                               comp / b.reader_us if b.reader_us else float("inf"), plan.pieces_per_work)
                    # not CSV columns: the compute split compute_share_lines reports
                    yield {**row, "reader_us": b.reader_us, "sfpu_us": b.compute_us.get("sfpu", 0.0),
                           "compute_us": comp}


def _row(p: PagedPoint, kernel: str, layout: str, block: int, table: str, us: float, gbps: float, ratio: float,
         cr: float, pieces: int = 0) -> dict[str, object]:
    return {"point": p.point, "kernel": kernel, "layout": layout, "batch": p.batch, "seq": p.seq, "block": block,
            "page_table": table, "us": round(us, 2), "gbps": round(gbps, 1), "ratio_vs_ttmetal": round(ratio, 3),
            "compute_over_reader": round(cr, 3), "pieces": pieces}


def goals(rows: list[dict[str, object]]) -> list[tuple[str, bool, str]]:
    """(goal, met, the figure that decides it) of each goal, over the "bank-local" rows."""
    ours = [r for r in rows if r["layout"] == "bank-local"]
    tm = {(r["point"], r["batch"], r["seq"], r["block"]): float(r["us"]) for r in rows if r["kernel"] == "tt-metal"}

    def key(r: dict[str, object]) -> tuple[object, ...]:
        return r["point"], r["batch"], r["seq"], r["block"]

    def worst(rs: list[dict[str, object]]) -> str:
        r = min(rs, key=lambda r: float(r["ratio_vs_ttmetal"]))
        return (f"lowest {float(r['ratio_vs_ttmetal']):.2f}x at {r['point']} B {r['batch']} S {r['seq']} "
                f"block {r['block']} {r['page_table']}")

    long_tm = [r for r in ours if tm[key(r)] >= 200]
    short = [r for r in ours if tm[key(r)] < 200 and int(r["seq"]) >= 4096]
    bw = [r for r in ours if int(r["seq"]) >= 32768 and int(r["batch"]) in (1, 32)]
    pairs = {}
    for r in ours:
        pairs.setdefault(key(r), {})[r["page_table"]] = float(r["us"])
    spread = [(max(v[k] for k in v if k != "sequential") / v["sequential"], k) for k, v in pairs.items()
              if "sequential" in v and len(v) > 1]
    t3k = [r for r in ours if r["point"] == "llama70b-t3k"]
    out = []
    if long_tm:
        out.append(("ours >= 1.3x tt-metal where its step >= 200 us",
                    all(float(r["ratio_vs_ttmetal"]) >= 1.3 for r in long_tm), worst(long_tm)))
    if short:
        out.append(("ours >= 1.15x tt-metal at the other paged points with S >= 4K",
                    all(float(r["ratio_vs_ttmetal"]) >= 1.15 for r in short), worst(short)))
    for family in sorted({str(r["point"]) for r in bw}):  # one line per model: their K/V per step differ 8x
        rs = [r for r in bw if r["point"] == family]
        low = min(rs, key=lambda r: float(r["gbps"]))
        out.append((f">= 85% of 288 GB/s at S >= 32K, B 1 and B 32, {family}",
                    all(float(r["gbps"]) >= 0.85 * PEAK_GBPS for r in rs),
                    f"lowest {100 * float(low['gbps']) / PEAK_GBPS:.1f}% at B {low['batch']} S {low['seq']} "
                    f"block {low['block']} {low['page_table']}"))
    out.append(("never slower than tt-metal's structure", all(float(r["ratio_vs_ttmetal"]) >= 1.0 for r in ours),
                worst(ours)))
    if spread:
        s, k = max(spread)
        out.append(("random page tables within 10% of sequential", s <= 1.10,
                    f"worst {s:.3f}x at {k[0]} B {k[1]} S {k[2]} block {k[3]}"))
    if t3k:
        hi = max(t3k, key=lambda r: float(r["compute_over_reader"]))
        out.append(("compute / reader <= 1 at the T3K 32K points",
                    all(float(r["compute_over_reader"]) <= 1 for r in t3k),
                    f"highest {float(hi['compute_over_reader']):.2f} at B {hi['batch']} block {hi['block']} "
                    f"{hi['page_table']}"))
    return out


def plot(rows: list[dict[str, object]], path: Path) -> Path:
    """GB/s against S for Llama-3.1-8B N150 at B 1 and B 32: ours (sequential tables) and tt-metal's
    structure, with the 288 GB/s peak and the 265.5 GB/s bank-local rate drawn in."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    for batch, mark in ((1, "o"), (8, "^"), (32, "s")):
        for block, ls in ((32, "-"), (64, "--")):
            for kernel, layout, table in (("ttdecode", "bank-local", "sequential"),
                                          ("tt-metal", "interleaved tile pages", "-")):
                rs = sorted((r for r in rows if r["point"] == "llama8b-n150" and r["batch"] == batch
                             and r["block"] == block and r["layout"] == layout and r["page_table"] == table),
                            key=lambda r: int(r["seq"]))
                if rs:
                    ax.plot([int(r["seq"]) for r in rs], [float(r["gbps"]) for r in rs], mark + ls,
                            color="C0" if kernel == "ttdecode" else "C1", ms=5,
                            label=f"{kernel} {layout}, B {batch}, block {block}")
    ax.axhline(PEAK_GBPS, color="k", lw=1, label="DRAM peak 288 GB/s")
    ax.axhline(BANK_LOCAL_GBPS, color="k", ls=":", lw=1, label="bank-local readers 265.5 GB/s (DRAMTile)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length S (keys)")
    ax.set_ylabel("K/V GB/s (MODEL ESTIMATES)")
    ax.set_title("Llama-3.1-8B N150 paged decode, bfloat8_b K/V: bank-local paged vs tt-metal's structure", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=5.5, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def imbalance_rows(points: list[PagedPoint], blocks: tuple[int, ...] = (32, 64)) -> list[tuple[str, ...]]:
    """Piece imbalance max(n_i) / mean(n_i) (worst and mean over the (user, KV head)s) of each page table
    at each point with more than one user and at least 32K keys (a single user's random draw is the same
    arithmetic): random, the first_free allocator and the balanced one after the same interleaved growth."""
    out = []
    for p in points:
        if p.batch == 1 or p.seq < 32768:
            continue
        for block in blocks:
            exp = ttmetal_exp_approx(p)
            plan = bank_local_plan(p, block, exp)
            shape = PagedShape(p.batch, p.num_q_heads, p.num_kv_heads, 128, block, (p.cur_pos,) * p.batch, p.grid,
                               COST.dram_banks)
            n = -(-p.seq // block)
            tables = {"random": page_table("random", p, block),
                      "first_free allocator": allocator_page_table(p.batch, n, block, p.num_kv_heads,
                                                                   policy="first_free"),
                      "balanced allocator": page_table("allocator", p, block)}
            for kind, pt in tables.items():
                worst, mean = piece_imbalance(shape, piece_compute(plan, exp), pt, plan.pieces_per_work)
                out.append((p.point, str(p.batch), str(p.seq), str(block), kind, f"{worst:.3f}", f"{mean:.3f}"))
    return out


def summary_rows(rows: list[dict[str, object]]) -> list[str]:
    """perf/README's table, one markdown line per (point, B, S): the blocks side by side ("32 / 64"), P, tt-metal's
    µs, ours on a sequential table (x, GB/s), then x on a random table, the balanced allocator's, ours with
    max_cores_per_head_batch not set (pieces: x) and, where tt-metal's kernel approximates the exp, ours at the
    accurate exp (sequential / random tables; "same" where the two runs match)."""
    def pick(p: object, b: object, s: object, block: object, kernel: str, layout: str, table: str):
        return next((r for r in rows if (r["point"], r["batch"], r["seq"], r["block"], r["kernel"], r["layout"],
                                         r["page_table"]) == (p, b, s, block, kernel, layout, table)), None)

    out = []
    keys = list(dict.fromkeys((r["point"], r["batch"], r["seq"]) for r in rows))
    for p, b, s in keys:
        blocks = sorted({r["block"] for r in rows if (r["point"], r["batch"], r["seq"]) == (p, b, s)})
        ours = [pick(p, b, s, k, "ttdecode", "bank-local", "sequential") for k in blocks]
        tm = [pick(p, b, s, k, "tt-metal", "interleaved tile pages", "-") for k in blocks]
        if any(r is None for r in ours + tm):
            continue

        def x(table: str, layout: str = "bank-local") -> str:
            found = [pick(p, b, s, k, "ttdecode", layout, table) for k in blocks]
            return " / ".join("-" if r is None else f"{float(r['ratio_vs_ttmetal']):.2f}" for r in found)

        us = " / ".join(f"{float(r['us']):.1f} ({float(r['ratio_vs_ttmetal']):.2f}, {float(r['gbps']):.0f})"
                        for r in ours)
        tm_us = " / ".join(f"{float(r['us']):.1f}" for r in tm)
        pieces = " / ".join(str(r["pieces"]) for r in ours)
        out.append(f"| {p} B {b}, S {s} | {' / '.join(map(str, blocks))} | {pieces} | {tm_us} | {us} | "
                   f"{x('random')} | {x('allocator')} | {unset(pick, (p, b, s), blocks)} | "
                   f"{accurate(x)} |")
    return out


def compute_floor_us(p: PagedPoint, plan: DecodePlan, exp_approx: bool) -> float:
    """The least step the model allows ours at p with `plan`'s pieces, whatever the reads (MODEL ESTIMATE, µs):
    the most key tiles one piece of a (user, KV head) takes at an even split, each at a running chunk's price
    (pricing.key_tile_cycles, no chunk's fixed work, no read, no start), then the binomial tree's rounds."""
    pc = piece_compute(plan, exp_approx)
    tiles = -(-(p.cur_pos + 1) // 32 // plan.pieces_per_work)
    tile = key_tile_cycles(pc.q_tiles, 4, 4, True, pc.dst_tiles, pc.fidelity, COST, pc.head_rows, True, pc.prescale_q,
                           pc.q_tile_rows, False, 1088, exp_approx)
    rounds = (plan.pieces_per_work - 1).bit_length()
    tree = rounds * round_cycles(pc.q_tiles, 4, True, pc.dst_tiles, pc.fidelity, 8, COST, pc.head_rows,
                                 pc.q_tile_rows, exp_approx)
    return (tiles * tile + tree) * 1e6 / COST.clock_hz


def kv_bytes(p: PagedPoint) -> int:
    """The K/V bytes one step reads at p: every user's positions of K and V, D 128, bfloat8_b (1088 B a tile)."""
    return p.batch * p.num_kv_heads * p.seq * 2 * 128 * 1088 // 1024


def any_kernel_floor_us(p: PagedPoint) -> float:
    """The least step the model allows ANY kernel at p (MODEL ESTIMATE, µs), whatever its compute: the K/V bytes
    (bfloat8_b) at the published bank-local rate (pricing.bank_local_floor_cycles: every bank read by readers
    beside it, so at least one piece per bank: with W = batch x KV heads works, some work in at least
    ceil(dram_banks / W) pieces), the launch skew over those cores, and the ceil(log2) of that many rounds its
    pieces' partials need to reach one core, each round one message of the least partial any kernel can send
    (the heads' rows of O and of m and l, bf16), with no merge work at all. Fewer pieces read at the
    interleaved rate instead (pricing.interleaved_floor_cycles), which is slower."""
    kv = kv_bytes(p)
    banks = COST.dram_banks
    rows = p.num_q_heads // p.num_kv_heads
    partial = rows * (128 + 2) * 2
    works = p.batch * p.num_kv_heads
    rounds = (-(-banks // works) - 1).bit_length()
    cycles = (bank_local_floor_cycles(kv) + start_spread_cycles(banks)
              + rounds * message_cycles(partial, 1))
    return cycles * 1e6 / COST.clock_hz


def floor_lines(points: list[PagedPoint], block: int = 64) -> list[str]:
    """Where 85% of the peak lies below the compute floor (compute_floor_us at tt-metal's exp) or below any
    kernel's floor (any_kernel_floor_us): one line each."""
    out = []
    for p in points:
        if p.seq < 32768 or p.batch not in (1, 32):
            continue
        plan = bank_local_plan(p, block, ttmetal_exp_approx(p))
        floor = compute_floor_us(p, plan, ttmetal_exp_approx(p))
        kv = kv_bytes(p)
        need = kv / (0.85 * PEAK_GBPS * 1e3)
        if floor > need:
            out.append(f"(not a goal) {p.point} B {p.batch} S {p.seq}: 85% of the peak needs <= {need:.1f} us; its "
                       f"{plan.pieces_per_work} pieces' compute and tree "
                       f"alone take >= {floor:.1f} us (block {block}; {100 * kv / (floor * 1e3) / PEAK_GBPS:.0f}% "
                       f"of the peak at most)")
        least, split = any_kernel_floor_us(p), -(-COST.dram_banks // (p.batch * p.num_kv_heads))
        if least > need:
            out.append(f"(not a goal) {p.point} B {p.batch} S {p.seq}: no kernel reaches 85% in the model: the bytes "
                       f"at the bank-local rate, the launch skew and the bare messages of a {split}-piece tree take "
                       f">= {least:.1f} us ({100 * kv / (least * 1e3) / PEAK_GBPS:.1f}% of the peak at most)")
    return out


def compute_share_lines(rows: list[dict[str, object]], points: list[PagedPoint]) -> list[str]:
    """Where compute / reader > 1 at a T3K point: what the kernels' ops that move data (matmuls, copies, packs,
    configuration calls) alone price at, over the reader, on the worst "bank-local" row (MODEL ESTIMATE)."""
    out = []
    for p in points:
        mine = [r for r in rows if r["layout"] == "bank-local" and r["point"] == p.point and r["batch"] == p.batch
                and r["seq"] == p.seq and p.point == "llama70b-t3k"]
        if not mine:
            continue
        hi = max(mine, key=lambda r: float(r["compute_over_reader"]))
        if float(hi["compute_over_reader"]) <= 1:
            continue
        reader, sfpu = float(hi["reader_us"]), float(hi["sfpu_us"])
        rest = float(hi["compute_us"]) - sfpu
        out.append(f"(not a goal) {p.point} B {p.batch} S {p.seq} block {hi['block']} {hi['page_table']}: compute / "
                   f"reader {float(hi['compute_over_reader']):.2f}; without the SFPU (max fold, subtraction, scale, "
                   f"exp: {sfpu:.1f} us) the matmuls, copies, packs and inits alone are {rest / reader:.2f} of "
                   f"the reader's {reader:.1f} us, so <= 1 needs the SFPU at <= {max(0.0, reader - rest):.1f} us")
    return out


def more_cores_lines(rows: list[dict[str, object]], points: list[PagedPoint]) -> list[str]:
    """Where ours is compute-bound (a "bank-local" row's compute / reader > 1): its "cores not set" rows that take
    other pieces than the config's, beside tt-metal's structure at as many cores per (user, KV head) as ours took
    (MODEL ESTIMATES)."""
    out = []
    for p in points:
        mine = [r for r in rows if r["point"] == p.point and r["batch"] == p.batch and r["seq"] == p.seq]
        if not any(r["layout"] == "bank-local" and float(r["compute_over_reader"]) > 1 for r in mine):
            continue
        set_pieces = {r["block"]: r["pieces"] for r in mine if r["layout"] == "bank-local"}
        unset_rows = [r for r in mine if r["layout"] == "bank-local, cores not set"]
        for r in (r for r in unset_rows if r["pieces"] != set_pieces[r["block"]]):
            tm, _ = ttmetal_us(replace(p, max_cores=int(r["pieces"])), int(r["block"]))
            out.append(f"(not a goal) {p.point} B {p.batch} S {p.seq} block {r['block']} sequential, "
                       f"max_cores_per_head_batch not set: ours {float(r['us']):.1f} us with {r['pieces']} pieces "
                       f"(compute / reader {float(r['compute_over_reader']):.2f}, "
                       f"{100 * float(r['gbps']) / PEAK_GBPS:.0f}% of the peak); tt-metal's structure at "
                       f"{r['pieces']} cores a head {tm:.1f} us ({tm / float(r['us']):.2f}x)")
    return out


def unset(pick: Callable[..., Optional[dict[str, object]]], key: tuple[object, object, object],
          blocks: list[object]) -> str:
    """The summary's "cores not set" cell: "P: x" per block of ours at the sequential table ("-" where absent)."""
    found = [pick(*key, k, "ttdecode", "bank-local, cores not set", "sequential") for k in blocks]
    return " / ".join("-" if r is None else f"{r['pieces']}: {float(r['ratio_vs_ttmetal']):.2f}" for r in found)


def accurate(x: Callable[[str, str], str]) -> str:
    """The summary's accurate-exp cell from its `x(table, layout)` lookup: "seq. / random" ratios, or "same"."""
    seq, rnd = x("sequential", "bank-local, accurate exp"), x("random", "bank-local, accurate exp")
    return "same" if set(seq.split(" / ")) == {"-"} else f"{seq}; {rnd}"


def main_paged(quick: bool, out: Path, draw: bool, points: Optional[list[PagedPoint]] = None) -> int:
    """Run the paged sweep (`points`, default paged_points(quick)): CSV (COLUMNS) in `out`, the plot when
    `draw`, the rows and a PASS/FAIL line per goal on stdout. Returns 0 (a goal that fails is reported, not
    an error)."""
    t0 = time.perf_counter()
    rows = []
    for r in run_paged(paged_points(quick) if points is None else points):
        print(f"  {r['point']:<16} {r['kernel']:<8} {r['layout']:<24} B={r['batch']:<2} S={r['seq']:<6} "
              f"block={r['block']:<3} {r['page_table']:<10} {r['us']:>9} us {r['gbps']:>6} GB/s "
              f"x{r['ratio_vs_ttmetal']} P={r['pieces']}", flush=True)
        rows.append(r)
    path = out / f"sweep_paged{'_quick' if quick else ''}.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    made = [plot(rows, out / f"fd_paged_gbps_vs_seq{'_quick' if quick else ''}.png")] if draw else []
    print(f"\n{len(rows)} rows in {time.perf_counter() - t0:.0f} s (MODEL ESTIMATES); wrote {path}"
          + "".join(f", {m}" for m in made))
    print("\nthe table (MODEL ESTIMATES): point | block | P | tt-metal us | ours us (x, GB/s), sequential | random (x) "
          "| balanced allocator (x) | cores not set (P: x) | accurate exp (x: sequential; random)")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for line in summary_rows(rows):
        print(line)
    imb = imbalance_rows(paged_points(quick) if points is None else points)
    if imb:
        print("\npiece imbalance max(n_i) / mean(n_i), worst / mean over (user, KV head) (MODEL ARITHMETIC):")
        print("| point | B | S | block | page table | worst | mean |\n|---|---:|---:|---:|---|---:|---:|")
        for r in imb:
            print("| " + " | ".join(r) + " |")
    print()
    for goal, met, why in goals(rows):
        print(f"{'PASS' if met else 'FAIL'}: {goal} ({why})")
    for line in floor_lines(paged_points(quick) if points is None else points):
        print(line)
    for line in compute_share_lines(rows, paged_points(quick) if points is None else points):
        print(line)
    for line in more_cores_lines(rows, paged_points(quick) if points is None else points):
        print(line)
    acc = [r for r in rows if r["layout"] == "bank-local, accurate exp"]
    if acc:
        low = min(acc, key=lambda r: float(r["ratio_vs_ttmetal"]))
        print(f"(not a goal) ours at the config's accurate exp where tt-metal's kernel approximates it: lowest "
              f"{float(low['ratio_vs_ttmetal']):.2f}x at {low['point']} B {low['batch']} S {low['seq']} block "
              f"{low['block']} {low['page_table']}; compute / reader up to "
              f"{max(float(r['compute_over_reader']) for r in acc):.2f}")
    return 0
