"""The bounded merge ("merge slot"): when the children's partials do not fit a core's L1 side by side, a parent
receives them through one slot of one q tile row of a partial (O's dv tiles, then m, then l) at a time.

The protocol (writer.cpp, compute.cpp): a parent's writer, at its piece, takes its children with keys in
merge order and, for each of a child's q tile rows, waits for the slot to be free (the compute kernel popped
the last row), grants the child that row (the child core's semaphore 1 + the child's slot), waits for the row
to land (its own semaphore 0) and hands it to the compute kernel. A child's writer sends each row of its
partial only once granted. The merge order, and so every bit, is the one the dedicated areas give.

Every tree edge (a child and its parent) is then a meeting of two writers, each of which meets its edges in its
core's run order (a piece's children in merge order, then the piece's own edge to its parent). Such meetings
cannot deadlock exactly when no cycle runs through these per-core orders (`merge_slot_order_ok`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping

from ttdecode.core.program_description import CoreCoord
from ttdecode.core.split import tree_children
from ttdecode.ops.flash_decode.plan.types import Piece

__all__ = ["MAX_SEMAPHORES", "merge_slot_order_ok", "merge_slot_fits"]

#: Semaphores a Wormhole core gives a program (tt-metal's NUM_SEMAPHORES): the merge slot takes one for
#: the rows that land and one per piece of the core for the grants it receives.
MAX_SEMAPHORES = 16


def merge_slot_order_ok(core_pieces: Mapping[CoreCoord, tuple[Piece, ...]], pieces: int) -> bool:
    """Whether the cores' run orders let the merge slot's meetings finish: every core's writer meets the
    edges of its pieces in run order (a piece's children in merge order, then the piece's own edge), and the
    union of these orders has no cycle (Kahn's sort over the edges, an edge named by (user, KV head, child
    index)). Edges whose child has no keys are skipped by the kernels; leaving them out keeps an order
    acyclic, so checking all of them covers every position."""
    after: dict[tuple[int, int, int], set[tuple[int, int, int]]] = defaultdict(set)
    edges: set[tuple[int, int, int]] = set()
    for items in core_pieces.values():
        seq = []
        for p in items:
            seq += [(p.user, p.kv_head, child) for _, child in tree_children(p.index, pieces)]
            if p.index != 0:
                seq.append((p.user, p.kv_head, p.index))
        edges.update(seq)
        for a, b in zip(seq, seq[1:]):
            after[a].add(b)
    before = {e: 0 for e in edges}
    for a in after:
        for b in after[a]:
            before[b] += 1
    ready = [e for e, n in before.items() if n == 0]
    done = 0
    while ready:
        e = ready.pop()
        done += 1
        for b in after[e]:
            before[b] -= 1
            if before[b] == 0:
                ready.append(b)
    return done == len(edges)


def merge_slot_fits(core_pieces: Mapping[CoreCoord, tuple[Piece, ...]], pieces: int) -> bool:
    """Whether a plan with these cores' pieces can merge through the slot: a tree (pieces > 1), a grant
    semaphore for each piece of the busiest core beside the landing one, and meetings that cannot deadlock."""
    most = max((len(v) for v in core_pieces.values()), default=0)
    return pieces > 1 and 1 + most <= MAX_SEMAPHORES and merge_slot_order_ok(core_pieces, pieces)
