"""A model of one decode step's attention on several Wormhole chips: per-chip FlashDecode + the LSE combine.

MODEL ESTIMATES, not measurements: nothing here has run on a Tenstorrent device.

Per chip (the FlashDecode op on its heads and its part of the sequence), from the planner's real
work split (``ttdecode.plan.make_plan``: which core reads which chunks of which key tiles) put through
the calibrated cost model ``ttdecode.costmodel`` (``evaluate``; constants ``COST``, sources in
``COST_SOURCES``). Without a run there are no counters, so each core's ``CoreWork`` is written here
in closed form:

* reads: one read-barrier group per chunk (its K and V tiles, one request per tile), spread over the
  12 banks (interleaved: the bank floor at the interleaved efficiency);
* compute, per 32-key tile of a (user, KV head) piece, one LLK call per tile: the matmuls Q.K^T and
  P.V (``(D + Dv) / 32`` tiles, a full 32-row tile each whatever the q heads in the group), the exp
  of the score tile, its row max and row sum (reduce) and the scale and subtract (eltwise);
* the in-chip tree: ``ceil(log2 pieces)`` rounds of (partial message + merge: one exp tile and a
  broadcast multiply and an add per output tile); the launch as in ``costmodel``;
* ``max_cores_per_head_batch`` chosen per layout among 16/32/64 (the fastest), so that TP-only is
  not handicapped by idle cores at small batch.

This closed form leaves out some of what our kernels' counters show (the copies, packs, the scalar
scale and the SFPU binary ops of the rescale), so it is lower than ``costmodel`` on the counters of
the same run; every layout's per-chip term shares that bias.

Across chips (``EthernetLink``, sources in ``LINK_SOURCES``): a T3K's 8 chips form a 2x4 mesh of
100 Gb/s Ethernet links; a CP group of ``c`` chips is modelled as a ring of ``c`` with one link per
hop (a 2x4 mesh splits into rings of 2, 4 or 8 chips on disjoint links):

* ``all_gather``: ``(c - 1) x (hop latency + P / link_bw)`` with P one chip's partial (bf16 output +
  fp32 LSE), then every chip merges the ``c`` partials of all rows (32-row tile rows spread over its 64 cores);
* ``all_to_all``: ``(c - 1) x (hop latency + P / (c link_bw))`` twice (shares out, merged shares
  back), each chip merging 1/c of the rows.

The merge is the combine program (``ttdecode.combine``, kernels/combine/*.cpp), priced from its own op
counts (``combine_op_counts``, equal to the host runtime's counters of the kernels, pinned by
``tests/test_combine_kernel.py``) through the same ``evaluate``: per tile row and partial one read
group (its LSE tile and O tiles), the copies into DST, the SFPU binary ops, exps and packs, then the
finish (max, recip, log); a launch of its own.

Not modelled: CCL op set-up and synchronisation (a fixed cost per collective that favours TP-only),
NoC congestion, the copies and packs of the op (listed above; the combine's are counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ttdecode.costmodel import COST, CostConstants, CoreWork, OpTally, Reduction, evaluate
from ttdecode.formats import DataType, tile_size
from ttdecode.plan import PlanError, make_plan

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ttdecode.runtime.results import RunCounters

__all__ = ["EthernetLink", "T3K_LINK", "LINK_SOURCES", "ChipAttention", "chip_attention", "combine_seconds", "combine_kernel_seconds", "combine_work_from_counters",
           "LayoutEstimate", "estimate_layout"]


@dataclass(frozen=True)
class EthernetLink:
    """One Wormhole Ethernet link, per direction."""

    raw_bytes_per_s: float = 12.5e9
    payload_efficiency: float = 0.95
    hop_latency_s: float = 650e-9

    @property
    def bytes_per_s(self) -> float:
        return self.raw_bytes_per_s * self.payload_efficiency


T3K_LINK = EthernetLink()

LINK_SOURCES: dict[str, str] = {
    "raw_bytes_per_s": "100 Gb/s = 12.5 GB/s per direction per Wormhole Ethernet link; a T3000 is 8 Wormhole "
                       "chips (four N300) in a 2x4 mesh, link speeds as on N300 (tt-metal "
                       "tech_reports/EthernetMultichip/BasicEthernetGuide.md, 'Ethernet Link', 'T3000')",
    "payload_efficiency": "packet header + CRC overhead under 5% for bf16/bfp8 tile-sized payloads "
                          "(same report, 'Ethernet Link')",
    "hop_latency_s": "~650 ns per hop in an 8-chip ring ping (single-link one-way 530-620 ns) "
                     "(same report, 'Microbenchmarks: Ring Ping Latency, Single Ethernet Link Round-Trip')",
    "links_per_hop": "1 (conservative: an N300's internal pair keeps 1 of its 2 links for user kernels, the "
                     "other is reserved for dispatch; same report, 'N300')",
}


@dataclass(frozen=True)
class ChipAttention:
    """The op on one chip. Times in seconds."""

    seconds: float
    dram_s: float
    compute_s: float
    reduction_s: float
    cores: int
    chip_bytes: int


def _piece_ops(tiles: int, d_tiles: int, dv_tiles: int) -> dict[str, list[OpTally]]:
    """The compute of `tiles` 32-key tiles of one piece, one LLK call per tile (see the module doc)."""
    mm = tiles * (d_tiles + dv_tiles)
    return {"matmul": [OpTally(mm, mm)], "exp": [OpTally(tiles, tiles)], "reduce_max": [OpTally(tiles, tiles)],
            "reduce_sum": [OpTally(tiles, tiles)], "sub_bcast": [OpTally(tiles, tiles)],
            "mul_bcast": [OpTally(tiles, tiles)]}


def _merge_ops(dv_tiles: int) -> dict[str, list[OpTally]]:
    """One more partial merged into a 32-row tile group: one exp tile (its weight, or the rescale of
    the running sum), a broadcast multiply and an add per output tile."""
    return {"exp": [OpTally(1, 1)], "mul_bcast": [OpTally(dv_tiles, dv_tiles)], "add": [OpTally(dv_tiles, dv_tiles)]}


def chip_attention(*, batch: int, q_heads: int, kv_heads: int, seq_len: int, head_dim: int = 128,
                   kv_dtype: DataType = DataType.bfloat8_b, fidelity: str = "HiFi2", grid: tuple[int, int] = (8, 8),
                   max_cores_per_head_batch: int = 16, c: CostConstants = COST) -> ChipAttention:
    """Estimated time of the op on one chip: ``batch`` users at cur_pos = seq_len - 1 over ``kv_heads``
    KV heads (``q_heads`` q heads) and ``seq_len`` positions (see the module doc)."""
    plan = make_plan(batch=batch, num_q_heads=q_heads, num_kv_heads=kv_heads, seq_len=seq_len, head_dim=head_dim,
                     kv_dtype=kv_dtype, cur_pos=[seq_len - 1] * batch, grid=grid, return_lse=True,
                     max_cores_per_head_batch=max_cores_per_head_batch)
    d = dv = head_dim // 32
    kv_tile = tile_size(kv_dtype)
    works: dict[object, CoreWork] = {}
    for piece in plan.pieces:
        r = plan.range_at(seq_len - 1, piece.index)
        if r.empty:
            continue
        w = works.setdefault(piece.core, CoreWork([], np.zeros(c.dram_banks), {}, {}, 0, 0, 0))
        left = r.num_tiles
        for _ in range(r.num_chunks):  # the last chunk of the root may be short
            k = min(r.chunk_tiles, left)
            left -= k
            w.read_groups.append((k * (d + dv) * kv_tile, k * (d + dv)))
        nbytes = r.num_tiles * (d + dv) * kv_tile
        w.bank_bytes = w.bank_bytes + nbytes / c.dram_banks
        w.kv_bytes += nbytes
        for op, ts in _piece_ops(r.num_tiles, d, dv).items():
            w.compute.setdefault(op, []).extend(ts)
        w.chunks += r.num_chunks
        w.cb_handshakes += 2 * r.num_chunks  # K and V pushed per chunk
    message = (head_dim // 32 + 2) * 4096  # fp32 O tiles + l and m
    # the tree's rounds over the pieces that hold keys (the split floor may leave some empty)
    working = sum(1 for i in range(plan.pieces_per_work) if not plan.range_at(seq_len - 1, i).empty)
    rounds = math.ceil(math.log2(working)) if working > 1 else 0
    hops = 10  # a typical partial's NoC 0 path on the 8x8 worker grid
    reduction = Reduction(((message, hops),) * rounds, _merge_ops(dv))
    b = evaluate(list(works.values()), reduction, fidelity, c)
    return ChipAttention(seconds=b.total_us * 1e-6, dram_s=b.reader_us * 1e-6,
                         compute_s=sum(b.compute_us.values()) * 1e-6, reduction_s=b.reduction_us * 1e-6,
                         cores=b.cores, chip_bytes=b.kv_bytes)


def combine_kernel_seconds(partials: int, rows: int, head_dim_v: int = 128, cores: int = 64,
                           in_dtype: DataType = DataType.bfloat16, out_dtype: DataType = DataType.bfloat16,
                           fidelity: str = "HiFi2", c: CostConstants = COST) -> float:
    """Estimated time of the combine program merging ``partials`` partials of ``rows`` rows on one chip:
    its tile rows dealt over at most ``cores`` cores (``ttdecode.combine.make_combine_plan``), each core
    priced from the kernels' op counts (``combine_op_counts``) through ``evaluate`` (launch included)."""
    from ttdecode.combine import TILE, combine_op_counts

    dv = head_dim_v // TILE
    tile_rows = math.ceil(rows / TILE)
    used = min(tile_rows, cores)
    per_core = math.ceil(tile_rows / used)  # the busiest core's tile rows
    ops = combine_op_counts(partials, dv, in_dtype, out_dtype)
    counts = {"copy": ops.copies, "max": ops.sfpu_binary, "exp": ops.exps, "recip": ops.recips, "log": ops.logs,
              "pack": ops.packs, "init": ops.inits}
    read_group = (ops.dram_read_bytes // partials, 1 + dv)  # one partial's LSE tile and O tiles, one barrier
    core_bytes = per_core * (ops.dram_read_bytes + ops.dram_write_bytes)
    work = CoreWork(read_groups=[read_group] * (partials * per_core),
                    bank_bytes=np.full(c.dram_banks, core_bytes / c.dram_banks),
                    compute={op: [OpTally(per_core * n + (op == "init"), per_core * n + (op == "init"))]
                             for op, n in counts.items()}, merge={},  # init: + the core's hardware start-up
                    chunks=partials * per_core, cb_handshakes=per_core * 2 * partials, kv_bytes=0)
    return evaluate([work] * used, Reduction((), {}), fidelity, c).total_us * 1e-6


def combine_work_from_counters(counters: "RunCounters") -> list[CoreWork]:
    """Per-core work of a run of the combine program, read from the host runtime's events as
    ``ttdecode.costmodel.work_from_counters`` reads the op's: the reader's DRAM reads grouped by read
    barrier, its CB pushes (handshakes; the O pushes are the double-buffered chunks), every compute
    call with its tiles, the DRAM bytes per bank."""
    from ttdecode.combine import COMBINE_CBS
    from ttdecode.program import KernelKind
    from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS

    op_code = {name: code for code, name in EVENT_OPS.items()}
    o_in = dict(COMBINE_CBS)["o_in"]
    by_core: dict[object, CoreWork] = {}
    for k in counters.kernels:
        w = by_core.setdefault(k.core, CoreWork([], np.zeros(COST.dram_banks), {}, {}, 0, 0, 0))
        w.bank_bytes = w.bank_bytes + np.asarray(k.dram_read_bytes, float) + np.asarray(k.dram_write_bytes, float)
        if k.kind is KernelKind.READER:
            b = n = 0
            for e in k.events:
                op, count = int(e["op"]), int(e["count"])
                if op == op_code["read_dram"]:
                    b, n = b + int(e["amount"]) * count, n + count
                elif op == op_code["read_barrier"] and b:
                    w.read_groups.append((b, n))
                    b = n = 0
                elif op == op_code["cb_push"]:
                    w.cb_handshakes += count
                    w.chunks += count if int(e["peer"]) == o_in else 0
        elif k.kind is KernelKind.COMPUTE:
            for e in k.events:
                if int(e["op"]) == op_code["compute"]:
                    t = OpTally(float(e["amount"]) * int(e["count"]), int(e["count"]))
                    w.compute.setdefault(COMPUTE_OPS[int(e["peer"])], []).append(t)
    return list(by_core.values())


def combine_seconds(combine: str, group: int, batch: int, q_heads: int, head_dim_v: int = 128,
                    link: EthernetLink = T3K_LINK, fidelity: str = "HiFi2", cores: int = 64,
                    c: CostConstants = COST) -> tuple[float, float]:
    """(link seconds, merge seconds) of combining ``group`` partials of ``batch x q_heads`` rows; the
    merge is the combine program (``combine_kernel_seconds``) on every chip: all rows (all_gather) or
    a 1/group share of them (all_to_all)."""
    if group == 1:
        return 0.0, 0.0
    rows = batch * q_heads
    partial = rows * (2 * head_dim_v + 4)  # bf16 output + fp32 LSE per row
    if combine == "all_gather":
        link_s = (group - 1) * (link.hop_latency_s + partial / link.bytes_per_s)
        merged_rows = rows
    elif combine == "all_to_all":
        link_s = 2 * (group - 1) * (link.hop_latency_s + partial / group / link.bytes_per_s)
        merged_rows = math.ceil(rows / group)
    else:
        raise ValueError(f"combine: expected 'all_gather' or 'all_to_all', got {combine!r}")
    return link_s, combine_kernel_seconds(group, merged_rows, head_dim_v, cores, fidelity=fidelity, c=c)


@dataclass(frozen=True)
class LayoutEstimate:
    """One layout (tp x cp chips) of one layer's attention at one context length."""

    tp: int
    cp: int
    combine: str
    chip: ChipAttention
    link_s: float
    merge_s: float
    kv_bytes_per_chip: int  # one layer

    @property
    def seconds(self) -> float:
        return self.chip.seconds + self.link_s + self.merge_s


def estimate_layout(*, tp: int, cp: int, batch: int, q_heads: int, kv_heads: int, seq_len: int,
                    head_dim: int = 128, combine: str = "all_gather", kv_dtype: DataType = DataType.bfloat8_b,
                    link: EthernetLink = T3K_LINK) -> LayoutEstimate:
    """TP over heads ``tp`` ways (KV heads replicated when ``kv_heads < tp``) times CP over the
    sequence ``cp`` ways."""
    if q_heads % tp:
        raise ValueError(f"tp: expected a divisor of q_heads={q_heads}, got {tp}")
    kv_local = max(1, kv_heads // tp)
    q_local = q_heads // tp
    s_local = seq_len // cp
    # the op's best max_cores_per_head_batch for this chip (ttnn's default 16 leaves cores idle at B=1)
    options = []
    for m in (16, 32, 64):
        try:
            options.append(chip_attention(batch=batch, q_heads=q_local, kv_heads=kv_local, seq_len=s_local,
                                          head_dim=head_dim, kv_dtype=kv_dtype, max_cores_per_head_batch=m))
        except PlanError:  # that many partials per head do not fit in L1 at this shape
            continue
    if not options:
        raise PlanError(f"no max_cores_per_head_batch in 16/32/64 fits tp={tp} cp={cp} batch={batch} S={seq_len}")
    chip = min(options, key=lambda a: a.seconds)
    link_s, merge_s = combine_seconds(combine, cp, batch, q_local, head_dim, link)
    return LayoutEstimate(tp=tp, cp=cp, combine=combine, chip=chip, link_s=link_s, merge_s=merge_s,
                          kv_bytes_per_chip=chip.chip_bytes)
