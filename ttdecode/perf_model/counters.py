"""Our kernels' work read from the host runtime's counters: per-core reads and compute ops, and the
partials' messages matched to the plan's merge tree (`work_from_counters`: what `evaluate` prices).
Plans are read by their fields (a DecodePlan of the FlashDecode planner): the model never imports the
planner."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ttdecode.core.formats import tile_size
from ttdecode.core.noc_geometry import noc_hops
from ttdecode.core.program_description import CoreCoord, KernelKind
from ttdecode.core.split import tree_parent
from ttdecode.perf_model.constants import COST, CostConstants
from ttdecode.perf_model.evaluator import (CoreWork, OpTally, Reduction, Tree, critical_path, sum_ops,
                                           tally_l1_bytes)
from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS, RunCounters

__all__ = ["Message", "writer_messages", "match_tree", "work_from_counters"]

_OP = {name: code for code, name in EVENT_OPS.items()}

@dataclass(frozen=True)
class Message:
    """One partial sent up the tree: `bytes` NoC-written from `src` to `dst`, closed by a semaphore
    increment; `seq` its place among src's messages. Tree fields are filled by matching the plan."""

    src: CoreCoord
    dst: CoreCoord
    bytes: int
    seq: int
    work: tuple[int, int] = (-1, -1)  # (user, kv head)
    child: int = -1  # piece index of the sender
    parent: int = -1
    round: int = -1

def writer_messages(counters: RunCounters) -> list[Message]:
    """The messages of every writer kernel, from its events: L1 writes to a core accumulate until
    a semaphore increment to that core closes them."""
    out: list[Message] = []
    for k in counters.kernels:
        if k.kind is not KernelKind.WRITER:
            continue
        pending: dict[int, int] = defaultdict(int)
        seq = 0
        for e in k.events:
            op, peer = int(e["op"]), int(e["peer"])
            if op == _OP["write_l1"]:
                pending[peer] += int(e["amount"]) * int(e["count"])
            elif op == _OP["sem_inc"]:
                for _ in range(int(e["count"])):
                    out.append(Message(k.core, counters.cores[peer], pending.pop(peer, 0), seq))
                    seq += 1
        if any(pending.values()):
            raise ValueError(f"writer on {k.core}: NoC writes to {sorted(pending)} with no semaphore increment")
    return out


def _whole_partials(messages: list[Message], rows: int) -> list[Message]:
    """A merge-slot plan's messages as whole partials: a partial leaves as `rows` messages (one per q tile
    row), each after a grant (a data-less increment the other way); the grants dropped, each sender's rows
    joined in order into one message."""
    by_src: dict[CoreCoord, list[Message]] = defaultdict(list)
    for m in messages:
        if m.bytes:
            by_src[m.src].append(m)
    out: list[Message] = []
    for src, sent in by_src.items():
        sent.sort(key=lambda m: m.seq)
        for i in range(0, len(sent), rows):
            part = sent[i:i + rows]
            out.append(Message(src, part[0].dst, sum(m.bytes for m in part), i // rows))
    return out


def _has_keys(plan: Any, piece: Any, page_table: Any) -> bool:
    """Does the piece read keys: its range's (DecodePlan.range_at), or on a bank-local plan its view's from the
    user's page-table row (DecodePlan.bank_local_view)?"""
    pos = plan.cur_pos[piece.user]
    if not getattr(plan, "bank_local", False):
        return not plan.range_at(pos, piece.index).empty
    if page_table is None:
        raise ValueError("a bank-local plan's pieces follow the page table: give work_from_counters the run's "
                         "page_table to match messages to the tree")
    row = [int(x) for x in page_table[piece.user]]
    return not plan.bank_local_view(pos, row, piece.kv_head, piece.index).empty


def match_tree(plan: Any, messages: list[Message], page_table: Any = None) -> list[Message]:
    """Attach (work, child, parent, round) to each message: a core's k-th message is its k-th
    non-root piece with work, in slot order (the writer's order). `page_table` ([batch, blocks]): a
    bank-local plan's (its pieces' keys follow it)."""
    if plan.cur_pos is None:
        raise ValueError("the model needs the plan's positions (cur_pos) to match messages to the tree")
    if getattr(plan, "merge_slot", False):
        messages = _whole_partials(messages, plan.q_tiles)
    by_src: dict[CoreCoord, list[Message]] = defaultdict(list)
    for m in messages:
        by_src[m.src].append(m)
    out: list[Message] = []
    for core, pieces in plan.core_pieces.items():
        senders = [p for p in pieces if p.parent_core is not None and _has_keys(plan, p, page_table)]
        sent = sorted(by_src.get(core, []), key=lambda m: m.seq)
        if len(sent) != len(senders):
            raise ValueError(f"core {core}: {len(sent)} messages in the events, the plan has {len(senders)} senders")
        for p, m in zip(senders, sent):
            if m.dst != p.parent_core:
                raise ValueError(f"core {core}: message {m.seq} went to {m.dst}, the plan's parent is {p.parent_core}")
            r, parent = tree_parent(p.index)  # type: ignore[misc]
            out.append(Message(m.src, m.dst, m.bytes, m.seq, (p.user, p.kv_head), p.index, parent, r))
    return out

def kv_read_shape(plan: Any) -> tuple[int, int]:
    """(bytes of one K/V read event, exponent bytes read just before it from the same bank): a whole tile and 0;
    with 16-position blocks (a paged pool of block_size 16, a padded tile per block) the reader takes rows 0-15
    of a tile: bfloat16 half the tile and 0, a block float half its codes after half its exponents (32 B)."""
    kv_tile = tile_size(plan.kv_dtype)
    if plan.block_size != 16:
        return kv_tile, 0
    exponents = 0 if kv_tile == 2048 else 64
    return (kv_tile - exponents) // 2, exponents // 2


def work_from_counters(plan: Any, counters: RunCounters, page_table: Any = None
                       ) -> tuple[list[CoreWork], Reduction, str]:
    """(per-core work, the reduction (every work's merge tree), fidelity) of a run of our kernels
    (`page_table`: the run's, needed for a bank-local plan whose pieces merge in a tree).

    Reads: the reader's read_dram events grouped by read_barrier (requests = events x count).
    Compute: every compute event is `count` calls of `amount` tiles; those between a cb_wait and a
    cb_pop of partial_in are merge work. A matmul feeds the rows of its in0 (32, or 16 with 16x32 q tiles:
    the event's flag); a copy or pack of a 16x32 tile moves half a tile (flag 16); an SFPU call runs the
    vector steps recorded in the event's flag (faces its VectorMode covers x ITERATIONS). exp is priced as the one the kernel ran: approximate when it was built with exp_approx,
    else the accurate one of its DST (fp32, or exp_21f on a bf16 DST).
    """
    cb = {spec.name: spec.index for spec in plan.circular_buffers}
    kv_read, kv_exponents = kv_read_shape(plan)
    compute_k = [k for k in counters.kernels if k.kind is KernelKind.COMPUTE]
    fidelity = str(compute_k[0].settings.get("math_fidelity", "HiFi4")) if compute_k else "HiFi4"
    # the exp the kernel ran: the approximate one (its named exp_approx arg), else the accurate one for its
    # DST: fp32 (_sfpu_exp_fp32_accurate_) or 16-bit (exp_21f)
    settings = compute_k[0].settings if compute_k else {}
    exp_name = ("exp_approx" if settings.get("exp_approx", False)
                else "exp" if settings.get("fp32_dest_acc_en", True) else "exp_bf16")
    by_core: dict[CoreCoord, CoreWork] = {}
    for k in counters.kernels:
        w = by_core.setdefault(k.core, CoreWork([], np.zeros(COST.dram_banks), defaultdict(list),
                                                defaultdict(list), 1, 0, 0))
        w.bank_bytes = w.bank_bytes + np.asarray(k.dram_read_bytes, float) + np.asarray(k.dram_write_bytes, float)
        ev = k.events
        if k.kind is KernelKind.READER:
            b = n = 0
            kv_group = False
            stages = 0
            kv_banks: set[int] = set()
            last_read = (0, -1)  # (bytes, bank) of the previous read event
            for e in ev:
                op = int(e["op"])
                if op == _OP["read_dram"]:
                    b += int(e["amount"]) * int(e["count"])
                    n += int(e["count"])
                    read = (int(e["amount"]), int(e["peer"]))
                    if read[0] == kv_read and (not kv_exponents or last_read == (kv_exponents, read[1])):
                        w.kv_bytes += (read[0] + kv_exponents) * int(e["count"])
                        kv_banks.add(read[1])
                        kv_group = True
                    last_read = read
                elif op == _OP["read_barrier"] and b:
                    w.read_groups.append((b, n))
                    stages += kv_group
                    b = n = 0
                    kv_group = False
                if op == _OP["cb_push"]:
                    w.cb_handshakes += int(e["count"])
            if b:
                w.read_groups.append((b, n))
                stages += kv_group
            # pipeline stages: the read-barrier groups that carry K/V tiles (one per chunk when K and V
            # share a barrier, two when each has its own)
            w.chunks = max(1, stages)
            # bank-local: every K/V tile this core read came from one DRAM bank (kv_pages "key_row"
            # with 12 | pieces); the bank floor then runs at the bank-local efficiency
            w.bank_local = len(kv_banks) == 1
        elif k.kind is KernelKind.COMPUTE:
            inside = False
            for e in ev:
                op, peer = int(e["op"]), int(e["peer"])
                if op == _OP["cb_wait"] and peer == cb["partial_in"]:
                    inside = True
                elif op == _OP["cb_pop"] and peer == cb["partial_in"]:
                    inside = False
                elif op == _OP["compute"]:
                    name = COMPUTE_OPS[peer]
                    name = exp_name if name == "exp" else name
                    # the flag: an SFPU call's vector steps (faces its VectorMode covers x ITERATIONS); a
                    # copy's or pack's of a 16x32 tile, 16 (half a tile); a matmul's with a 16x32 in0, its
                    # 16 rows; 0 for a whole 32x32 tile
                    flag = int(e["flag"])
                    rows = flag if name == "matmul" and flag else 32
                    steps = flag if flag and name != "matmul" else COST.sfpu_steps_per_tile
                    n = int(e["count"])
                    t = OpTally(float(e["amount"]) * n, n, rows=rows, steps=steps,
                                l1_bytes=float(e["l1_bytes"]) * n, unpacks=float(e["unpacks"]) * n)
                    (w.merge if inside else w.compute)[name].append(t)
    works = list(by_core.values())
    msgs = match_tree(plan, writer_messages(counters), page_table)
    reduction = _critical_chain(msgs, works, by_core, fidelity)
    return works, reduction, fidelity


def _noc_cycles(m: Message, c: CostConstants = COST) -> float:
    """The part of a round that depends on its message: its bytes over the link and its hops."""
    return m.bytes / c.noc_bytes_per_cycle + noc_hops(m.src, m.dst) * c.noc_hop_cycles

def _critical_chain(msgs: list[Message], works: list[CoreWork], by_core: Mapping[CoreCoord, CoreWork],
                    fidelity: str = "HiFi4") -> Reduction:
    """Every work's merge tree (`Reduction.trees`) from the messages, and the merge work per round:
    the root core's merge work (the root of the deepest chain, the most rounds then the most NoC
    cycles) divided by the merges it ran; `rounds` is the path that ends the slowest tree."""
    if not msgs:
        return Reduction((), {})
    children: dict[tuple[tuple[int, int], int], list[Message]] = defaultdict(list)
    for m in msgs:
        children[(m.work, m.parent)].append(m)

    def key(path: list[Message]) -> tuple[int, float]:
        return len(path), sum(_noc_cycles(m) for m in path)

    def chain(work: tuple[int, int], index: int) -> list[Message]:
        best: list[Message] = []
        for m in children.get((work, index), []):
            sub = chain(work, m.child) + [m]
            if key(sub) > key(best):
                best = sub
        return best

    def node(work: tuple[int, int], index: int) -> Tree:
        return tuple((m.bytes, noc_hops(m.src, m.dst), node(work, m.child))
                     for m in sorted(children.get((work, index), []), key=lambda m: m.round))

    path = max((chain(w, 0) for w, _ in children), key=key)
    dst_merges: dict[CoreCoord, int] = defaultdict(int)
    for m in msgs:
        dst_merges[m.dst] += 1
    root = path[-1].dst
    merges = by_core[root].merge
    n = max(1, dst_merges[root])
    per_round: dict[str, list[OpTally]] = {}
    for op, ts in merges.items():
        for steps in sorted({t.steps for t in ts}, reverse=True):  # full tiles and VectorMode calls apart
            same = [t for t in ts if t.steps == steps]
            per_round.setdefault(op, []).append(OpTally(
                sum(t.tiles for t in same) / n, max(1, round(sum(t.calls for t in same) / n)), steps=steps,
                l1_bytes=sum(tally_l1_bytes(t, op) for t in same) / n,
                unpacks=sum(t.tiles if t.unpacks is None else t.unpacks for t in same) / n))
    trees = tuple(sorted({node(w, 0) for w, parent in children if parent == 0}, key=repr))
    per_merge = sum(sum_ops(per_round, fidelity, COST).values())
    slowest = max((critical_path(t, per_merge) for t in trees), key=lambda tp: tp[0])
    return Reduction(tuple(slowest[1]), per_round, trees)
