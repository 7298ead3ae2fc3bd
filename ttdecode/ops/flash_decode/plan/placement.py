"""make_plan's placement: where every piece runs and the merge tree's addresses. Tile pages deal the pieces
work-major over the cores; key_row pages keep cores for each DRAM bank (`key_row_placement`,
`bank_core_counts`, `key_row_deal`); each work's pieces are then relabeled to shorten the tree's NoC 0 paths
(`short_hop_order`, `tree_hops`); `build_tree` gives each core's run order and the tree's scratch areas.
Where pieces run changes no number, only the NoC paths and the cores' loads."""

from __future__ import annotations

import functools
from typing import Mapping, Sequence

from ttdecode.core.formats import DataType
from ttdecode.core.noc_geometry import dram_return_hops, noc_hops
from ttdecode.core.program_description import MAX_RUNTIME_ARGS, WORMHOLE_DRAM_BANKS, CoreCoord
from ttdecode.core.split import (bank_local_banks, cyclic_piece_range, span_window, split_block_tiles,
                                 tree_children, tree_parent)
from ttdecode.ops.flash_decode.plan.split_choices import split_costs
from ttdecode.ops.flash_decode.plan.types import (RUNTIME_ARGS_HEADER, RUNTIME_ARGS_PER_PIECE, TILE_BYTES, Piece,
                                                  PlanError, Split)

__all__ = ["grid_cores", "place_pieces", "build_tree", "tree_hops", "short_hop_order", "key_row_placement",
           "bank_core_counts", "key_row_deal"]


def grid_cores(grid: tuple[int, int], sub_core_grids: Sequence[tuple[tuple[int, int], tuple[int, int]]] | None) -> tuple[CoreCoord, ...]:
    """Logical cores of the grid (row-major), or of the sub-core grids in the order given."""
    gx, gy = grid
    if sub_core_grids is None:
        return tuple(CoreCoord(x, y) for y in range(gy) for x in range(gx))
    out: list[CoreCoord] = []
    for (x0, y0), (x1, y1) in sub_core_grids:
        if not (0 <= x0 <= x1 < gx and 0 <= y0 <= y1 < gy):
            raise PlanError(
                f"sub_core_grids: rectangle ({x0},{y0})-({x1},{y1}) lies outside the {gx}x{gy} grid"
            )
        for y in range(y0, y1 + 1):
            for x in range(x0, x1 + 1):
                c = CoreCoord(x, y)
                if c in out:
                    raise PlanError(f"sub_core_grids: core ({x},{y}) appears twice")
                out.append(c)
    return tuple(out)


def _heights(pieces: int) -> dict[int, int]:
    """Tree height of each piece index: the merge rounds in which it receives a partial."""
    return {i: len(tree_children(i, pieces)) for i in range(pieces)}


def place_pieces(*, cores: Sequence[CoreCoord], works: Sequence[tuple[int, int]], split: Split, kv_pages: str,
                 share_cache: bool, num_kv_heads: int, seq_len: int, window: int, num_tokens: int, shape: dict,
                 kv_dtype: DataType, block_size: int | None, dram_banks: int
                 ) -> dict[CoreCoord, list[tuple[int, int, int]]]:
    """Decides where every piece (user, KV head, index) runs: core -> its pieces (every core a key, in
    `cores` order). Tile pages: work-major over the cores, each further wave shifted by one core so the
    roots spread; key_row pages: on cores kept for the piece's DRAM bank (key_row_deal, weighing each
    piece's work in cycles: tiles, chunks and merges priced by the model). Then each work's pieces are
    relabeled to shorten the tree's NoC paths (_short_hop_placement). Bank-local (key_row pages of a paged
    cache, `block_size`): piece i of KV head h on a core kept for bank R_h[i % |R_h|] (bank_local_banks), its weight
    a piece's share ceil(S / 32 / pieces) of a full cache; not relabeled (each piece keeps its bank). A cache
    so short that fewer pieces than |R_h| ever get keys (S / 32 / floor; each then reads several banks): the
    pieces that can get keys one per core first, over every core (_spread)."""
    pieces = split.pieces
    flat = [(b, h, i) for (b, h) in works for i in range(pieces)]
    placed: dict[CoreCoord, list[tuple[int, int, int]]] = {c: [] for c in cores}
    if kv_pages == "key_row" and block_size is not None:
        reach = [bank_local_banks(h, num_kv_heads, split_block_tiles(block_size), dram_banks) for h in range(num_kv_heads)]
        live = max(1, split.seq_tiles // (split.fixed or split.floor))  # the most pieces with keys at any position
        if live < len(reach[0]):
            placed.update(_spread(cores, flat, live))
            return placed
        costs = split_costs(**shape, kv_tile_bytes=TILE_BYTES[kv_dtype])
        n = -(-split.seq_tiles // pieces)
        chunk = split.fixed or min(split.cap, n)
        weights = [n * costs.tile + -(-n // chunk) * costs.chunk + len(tree_children(i, pieces)) * costs.round
                   for i in range(pieces)]
        bank = {it: reach[it[1]][it[2] % len(reach[it[1]])] for it in flat}
        placed.update(key_row_deal(cores, flat, bank, {it: weights[it[2]] for it in flat}, dram_banks))
        return placed
    if kv_pages == "key_row":
        # -- the pieces of bank r (key tile rows (kv_batch * NKV + h) * S/32 + t with that row % banks == r)
        # run on cores kept for bank r, as many as the bank's work (chunks and merges) asks
        costs = split_costs(**shape, kv_tile_bytes=TILE_BYTES[kv_dtype])
        span = span_window(window, num_tokens)

        def weight(i: int) -> float:
            r = cyclic_piece_range(seq_len - 1, split.fixed, pieces, i, span, split.floor, split.cap, dram_banks)
            return r.num_tiles * costs.tile + r.num_chunks * costs.chunk + len(tree_children(i, pieces)) * costs.round

        weights = [weight(i) for i in range(pieces)]
        st = split.seq_tiles
        bank = {it: (((0 if share_cache else it[0]) * num_kv_heads + it[1]) * st + it[2]) % dram_banks for it in flat}
        placed.update(key_row_deal(cores, flat, bank, {it: weights[it[2]] for it in flat}, dram_banks))
    else:
        # -- place pieces: work-major over the cores; each further wave of pieces is shifted by one
        # core so that roots (which receive the most partials) spread evenly; each core then runs its
        # pieces leaves first
        n_cores = len(cores)
        for g, item in enumerate(flat):
            placed[cores[(g + g // n_cores) % n_cores]].append(item)
    return _short_hop_placement(placed, works, pieces, _heights(pieces), dram_banks if kv_pages == "key_row" else 1)


def _spread(cores: Sequence[CoreCoord], flat: Sequence[tuple[int, int, int]], live: int
            ) -> dict[CoreCoord, list[tuple[int, int, int]]]:
    """Bank-local pieces of a short cache: the pieces that can get keys (index < `live`, in `flat` order),
    then the rest, dealt round robin over the cores, so no core holds two pieces with keys before every core
    holds one."""
    placed: dict[CoreCoord, list[tuple[int, int, int]]] = {c: [] for c in cores}
    order = [it for it in flat if it[2] < live] + [it for it in flat if it[2] >= live]
    for g, item in enumerate(order):
        placed[cores[g % len(cores)]].append(item)
    return placed


def build_tree(placed: dict[CoreCoord, list[tuple[int, int, int]]], *, pieces: int, cores: Sequence[CoreCoord]
               ) -> tuple[tuple[Piece, ...], dict[CoreCoord, tuple[Piece, ...]], dict[CoreCoord, int]]:
    """Decides each core's run order and the merge tree's addresses: a core runs its pieces leaves first
    (by tree height, then (user, KV head, index)); each receiving piece gets consecutive scratch areas
    (one per child round) on its core; each non-root piece learns its parent's core, area and height.
    Returns (the pieces sorted by core row, column and slot; core -> its pieces in run order, for every
    core of `cores`; core -> its count of scratch areas, for every core of `placed`). Sorts the lists of
    `placed` in place."""
    heights = _heights(pieces)
    where: dict[tuple[int, int, int], tuple[CoreCoord, int, int]] = {}  # -> core, slot, recv_area
    recv_areas: dict[CoreCoord, int] = {}
    for core, items in placed.items():
        items.sort(key=lambda it: (heights[it[2]], it))
        area = 0
        for slot, it in enumerate(items):
            h_ = heights[it[2]]
            where[it] = (core, slot, area if h_ else -1)
            area += h_
        recv_areas[core] = area

    piece_list: list[Piece] = []
    for it, (core, slot, recv) in where.items():
        b, h, i = it
        parent = tree_parent(i)
        if parent is None:
            pcore, parea, pheight = None, -1, 0
        else:
            r, pi = parent
            pc, _, precv = where[(b, h, pi)]
            # the parent's areas are its child rounds in order; this piece's round is its r-th
            rounds_of_parent = [rr for rr, _ in tree_children(pi, pieces)]
            pcore, parea, pheight = pc, precv + rounds_of_parent.index(r), heights[pi]
        piece_list.append(Piece(b, h, i, core, slot, heights[i], recv, pcore, parea, pheight))
    piece_list.sort(key=lambda p: (p.core.y, p.core.x, p.slot))
    core_pieces = {c: tuple(p for p in piece_list if p.core == c) for c in cores}
    return tuple(piece_list), core_pieces, recv_areas


def tree_hops(cores_of: Sequence[CoreCoord], pieces: int) -> tuple[int, int]:
    """(NoC 0 hops along the tree's critical chain, all the tree's hops) of one work whose piece i runs
    on cores_of[i]. The critical chain is the leaf-to-root chain of the most rounds and, among those,
    the most hops (the perf model: each round pays its message's hops on the way to the parent)."""
    return _tree_hops(list(range(pieces)), _hop_matrix(cores_of), _children(pieces))


def _hop_matrix(cores: Sequence[CoreCoord]) -> list[list[int]]:
    """hops[k][l]: NoC 0 hops from cores[k] to cores[l] (noc_geometry.noc_hops)."""
    return [[noc_hops(a, b) for b in cores] for a in cores]


def _children(pieces: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(c for _, c in tree_children(i, pieces)) for i in range(pieces))


def _tree_hops(order: Sequence[int], hops: Sequence[Sequence[int]],
               children: Sequence[Sequence[int]]) -> tuple[int, int]:
    """tree_hops with piece i on slot order[i] and hops[k][l] the NoC 0 hops from slot k to slot l."""
    depth = [0] * len(order)
    chain = [0] * len(order)
    total = 0
    for i in reversed(range(len(order))):  # children have higher indices than their parent
        d = h = 0
        row = order[i]
        for c in children[i]:
            step = hops[order[c]][row]
            total += step
            if (depth[c] + 1, chain[c] + step) > (d, h):
                d, h = depth[c] + 1, chain[c] + step
        depth[i], chain[i] = d, h
    return chain[0], total


@functools.lru_cache(maxsize=512)
def short_hop_order(slots: tuple[CoreCoord, ...], modulus: int) -> tuple[int, ...]:
    """A relabeling of one work's pieces: piece i takes the slot (core) that piece order[i] would have,
    with order[i] = i mod `modulus` (key_row: the same DRAM bank), chosen to shorten the tree's NoC 0
    paths: the fewest hops on the critical chain, then in all (tree_hops). Pairwise swaps from the
    identity until none helps: deterministic, a local optimum."""
    n = len(slots)
    hops = _hop_matrix(slots)
    children = _children(n)
    order = list(range(n))
    cost = _tree_hops(order, hops, children)
    improved = True
    while improved:
        improved = False
        for a in range(n):
            for b in range(a + modulus, n, modulus):
                order[a], order[b] = order[b], order[a]
                c = _tree_hops(order, hops, children)
                if c < cost:
                    cost, improved = c, True
                else:
                    order[a], order[b] = order[b], order[a]
    return tuple(order)


def _short_hop_placement(placed: dict[CoreCoord, list[tuple[int, int, int]]], works: Sequence[tuple[int, int]],
                         pieces: int, heights: dict[int, int], modulus: int) -> dict[CoreCoord, list[tuple[int, int, int]]]:
    """The placement with every work's pieces relabeled by short_hop_order (tuned on the first work's
    cores): piece i of a work runs where piece order[i] of that work was placed, so each core keeps
    its number of pieces and (order[i] = i mod the banks with key_row pages) each piece its bank. Kept only
    if no core then needs more partial areas than before (the CB is sized by the busiest core). Where
    pieces run changes no number (every piece and merge computes the same), only the NoC paths."""
    if pieces < 2 or not works:
        return placed
    at = {it: core for core, items in placed.items() for it in items}
    b0, h0 = works[0]
    order = short_hop_order(tuple(at[(b0, h0, k)] for k in range(pieces)), modulus)
    moved: dict[CoreCoord, list[tuple[int, int, int]]] = {c: [] for c in placed}
    for b, h in works:
        for i in range(pieces):
            moved[at[(b, h, order[i])]].append((b, h, i))

    def areas(p: dict[CoreCoord, list[tuple[int, int, int]]]) -> int:
        return max((sum(heights[i] for _, _, i in items) for items in p.values()), default=0)

    return moved if areas(moved) <= areas(placed) else placed


def key_row_placement(cores: Sequence[CoreCoord], per_bank: int | Sequence[int],
                      dram_banks: int = WORMHOLE_DRAM_BANKS) -> list[list[CoreCoord]]:
    """The cores kept for each of the `dram_banks` DRAM banks: `per_bank` each (or per_bank[r] for bank r, one per
    bank), the banks in
    turn taking the free core with the fewest NoC 0 hops from the bank's DRAM tiles (the data's way
    back; WormholeB0 NoC map, noc_geometry.dram_return_hops) until each has its count. Only where the
    pieces run; the numbers do not depend on it."""
    counts = [per_bank] * dram_banks if isinstance(per_bank, int) else list(per_bank)
    if sum(counts) > len(cores):
        raise PlanError(f"key_row placement: {sum(counts)} cores asked of a grid of {len(cores)}")
    free = list(cores)
    out: list[list[CoreCoord]] = [[] for _ in counts]
    for k in range(max(counts, default=0)):
        for bank in range(len(counts)):
            if counts[bank] > k:
                best = min(free, key=lambda c: (dram_return_hops(bank, c), c.y, c.x))
                out[bank].append(best)
                free.remove(best)
    return out


def _pieces_per_core_limit() -> int:
    """The most pieces one core can run: its kernels' runtime args (RUNTIME_ARGS_HEADER + RUNTIME_ARGS_PER_PIECE
    per piece) within MAX_RUNTIME_ARGS."""
    return (MAX_RUNTIME_ARGS - RUNTIME_ARGS_HEADER) // RUNTIME_ARGS_PER_PIECE


def bank_core_counts(bank_weights: Sequence[float], bank_pieces: Sequence[int], cores: int,
                     per_core: int | None = None) -> list[int]:
    """Cores per DRAM bank for kv_pages "key_row": each bank with pieces first gets the cores its pieces
    need at `per_core` pieces per core at most (the runtime args' limit by default), then the rest go
    one at a time to the bank whose work per core (`bank_weights[r]` / its cores) is the largest, never
    more cores than the bank has pieces (ties to the lower bank). With one user every bank has as many
    pieces, all but the merges' work the same, and the cores go evenly; in a batch the banks that hold
    the parents' tiles (every user's tree puts its merges in the same banks) get more. Too few cores
    for the pieces is left to the plan's resource checks (a core over the runtime args' limit)."""
    most = per_core if per_core is not None else _pieces_per_core_limit()
    banks = len(bank_pieces)
    if cores < banks:
        raise PlanError(f"kv_pages: 'key_row' keeps at least one core per DRAM bank ({banks}), the grid "
                        f"gives {cores} cores")
    counts = [max(1, min(-(-n // most), cores // banks)) if n else 0 for n in bank_pieces]
    for _ in range(cores - sum(counts)):
        open_ = [r for r in range(len(counts)) if counts[r] < bank_pieces[r]]
        if not open_:
            break
        r = max(open_, key=lambda r: (bank_weights[r] / counts[r], -r))
        counts[r] += 1
    return counts


def key_row_deal(cores: Sequence[CoreCoord], items: Sequence[tuple[int, int, int]], bank: Mapping[tuple[int, int, int], int],
                 weight: Mapping[tuple[int, int, int], float], dram_banks: int = WORMHOLE_DRAM_BANKS
                 ) -> dict[CoreCoord, list[tuple[int, int, int]]]:
    """Where the pieces `items` ((user, KV head, index)) of kv_pages "key_row" run: each runs on a core
    kept for the bank its tiles sit in (`bank`), the banks' cores counted by bank_core_counts from the
    pieces' work (`weight`, cycles: key tiles, chunks and merges priced by the model), and each bank's
    pieces, heaviest first, going to its least loaded core (ties to the earlier core) among those under
    the runtime args' limit while the bank's cores can hold its pieces that way. Depends on the batch
    (where pieces run), never a number."""
    bank_items: list[list[tuple[int, int, int]]] = [[] for _ in range(dram_banks)]
    for it in items:
        bank_items[bank[it]].append(it)
    counts = bank_core_counts([sum(weight[it] for it in its) for its in bank_items],
                              [len(its) for its in bank_items], len(cores))
    groups = key_row_placement(cores, counts, dram_banks)
    placed: dict[CoreCoord, list[tuple[int, int, int]]] = {}
    for r, its in enumerate(bank_items):
        # no core past the runtime args' limit while the bank's cores can take its pieces evenly
        most = max(_pieces_per_core_limit(), -(-len(its) // max(1, len(groups[r]))))
        load = [0.0] * len(groups[r])
        held = [0] * len(groups[r])
        for it in sorted(its, key=lambda it: (-weight[it], it)):
            k = min((k for k in range(len(load)) if held[k] < most), key=lambda k: (load[k], k))
            load[k] += weight[it]
            held[k] += 1
            placed.setdefault(groups[r][k], []).append(it)
    return placed
