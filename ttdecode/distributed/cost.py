"""A model of one decode step's attention on several Wormhole chips: per-chip FlashDecode + the LSE combine.

MODEL ESTIMATES, not measurements: nothing here has run on a Tenstorrent device.

Per chip (the FlashDecode op on its heads and its part of the sequence), from the planner's real
work split (``ttdecode.ops.flash_decode.plan.make_plan``, planned as the API plans it for the default scale
1/sqrt(D): its pieces, split floor, cap of dynamic chunks (``chunk_cap``) and ``prescale_q``; which
core reads which chunks of which key tiles) put through the calibrated cost model
``ttdecode.perf_model`` (``evaluate``; constants ``COST``, sources in ``COST_SOURCES``). Without a run
there are no counters, so each core's ``CoreWork`` is written here from the closed forms the planner's
own choices price a piece with (``plan.split_choices.split_costs``: ``tile_pieces``, ``key_row_pieces``,
``chunk_cap``), without their split margin:

* reads: per chunk two read-barrier groups, its K tiles then its V tiles (kernels/flash_decode/reader.cpp), one
  request per tile, and two pipeline stages; the bank floor over the 12 banks at the interleaved
  efficiency;
* compute: every key tile the core holds x ``chunk_tile_ops`` (one more key tile of a running chunk:
  Q.K^T, P.V and the row sum as matmul blocks, the scale unless Q is pre-scaled, the exp, the row max
  fold and the subtraction, the copies, the packs, configuration calls; per q tile row: 64 q heads per
  KV head are two), plus every chunk it holds (the plan's actual chunks, ``plan.range_at``: dynamic
  chunks up to the plan's cap) x ``chunk_ops`` (a running chunk's fixed work: the row max reduction,
  alpha, the rescales of l and O, the copies and packs of the running set, configuration calls). A
  piece's first chunk is priced as a running one, as the planner does (it has no rescale, but a
  piece's own fixed work - Q, the first chunk's packs, the finish - is not in any closed form);
* the in-chip tree: ``tree_rounds`` over the pieces that hold keys, each a partial's message (fp32 O
  and two statistics tiles per q tile row) and one merge (``merge_ops``); the launch as in
  ``ttdecode.perf_model.evaluator.evaluate``;
* ``max_cores_per_head_batch`` chosen per layout among 16/32/64 (the fastest), so that TP-only is
  not handicapped by idle cores at small batch.

Checked against the same ``evaluate`` on the counters of host-runtime runs of the same plans (21
shapes: 1-8 KV heads, 8-64 q heads per KV head, D 128, 4K-256K keys, B 1-32, caps 8 and 16; before
the kernels' 16x32 q tiles, steps 25-26 of tech_report/perf_history.md): within -2.8% to +3.2% on 19 of
them, and a forced cap of 8 key tiles vs the plan's 16 (8q/1kv, 32K) moved both by the same amount;
tests/distributed/test_cp_cost.py pins two shapes (within 5%) and that difference (within 10%) on
the present kernels. It is high where every piece is one chunk of 4-8 key tiles with two q tile rows (64 q
heads per KV head, B 32, 4K keys: +7% and +16%, a first chunk priced as a running one); its tree
rounds are up to 20% high below 32 q rows per tile row (the kernels send only the rows that hold
heads; the message is priced as whole tiles, as the planner prices it); its reader leaves out the
per-piece Q read.

Across chips (``EthernetLink``, sources in ``LINK_SOURCES``): a T3K's 8 chips form a 2x4 mesh of
100 Gb/s Ethernet links; a CP group of ``c`` chips is modelled as a ring of ``c`` with one link per
hop (a 2x4 mesh splits into rings of 2, 4 or 8 chips on disjoint links):

* ``all_gather``: ``(c - 1) x (hop latency + P / link_bw)`` with P one chip's partial (bf16 output +
  fp32 LSE), then every chip merges the ``c`` partials of all rows (32-row tile rows spread over its 64 cores);
* ``all_to_all``: ``(c - 1) x (hop latency + P / (c link_bw))`` twice (shares out, merged shares
  back), each chip merging 1/c of the rows.

The merge is the combine program (``ttdecode.ops.combine``, kernels/combine/*.cpp), priced from its own op
counts (``combine_op_counts``, equal to the host runtime's counters of the kernels, pinned by
``tests/test_combine_kernel.py``) through the same ``evaluate``: per tile row and partial one read
group (its LSE tile and O tiles), the copies into DST, the SFPU binary ops, exps and packs, then the
finish (max, recip, log); a launch of its own.

Not modelled: CCL op set-up and synchronisation (a fixed cost per collective that favours TP-only),
NoC congestion.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ttdecode.perf_model.constants import COST, CostConstants
from ttdecode.perf_model.evaluator import CoreWork, OpTally, Reduction, evaluate
from ttdecode.perf_model.op_counts import chunk_ops, chunk_tile_ops, intermediate_bytes, merge_ops, softmax_exp
from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.split import tree_children, tree_rounds
from ttdecode.ops.flash_decode.plan import PlanError, make_plan, power_of_two_scale
from ttdecode.ops.combine import TILE, combine_op_counts
from ttdecode.ops.combine import COMBINE_CBS
from ttdecode.core.program_description import KernelKind
from ttdecode.runtime.results import COMPUTE_OPS, EVENT_OPS

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
    chunk_cap: int = 0  # the plan's largest dynamic chunk, key tiles
    pieces: int = 0  # the plan's pieces per (user, KV head)


def _scaled(ops: Mapping[str, Sequence[OpTally]], n: float) -> dict[str, list[OpTally]]:
    """`n` times the tallies `ops` (their tiles, calls, L1 bytes and unpacks; the cost model is linear in each)."""
    def times(x):
        return None if x is None else x * n
    return {op: [dataclasses.replace(t, tiles=t.tiles * n, calls=t.calls * n, l1_bytes=times(t.l1_bytes),
                                     unpacks=times(t.unpacks)) for t in ts] for op, ts in ops.items()}


def _core_compute(key_tile: Mapping[str, Sequence[OpTally]], chunk_fixed: Mapping[str, Sequence[OpTally]],
                  tiles: int, chunks: int) -> dict[str, list[OpTally]]:
    """A core's compute: `tiles` key tiles of `key_tile` ops and `chunks` chunks of `chunk_fixed` ops
    (as ``plan.split_choices.SplitCosts.piece`` prices a piece, without the split's margin)."""
    out = _scaled(key_tile, tiles)
    for op, ts in _scaled(chunk_fixed, chunks).items():
        out.setdefault(op, []).extend(ts)
    return out


def chip_attention(*, batch: int, q_heads: int, kv_heads: int, seq_len: int, head_dim: int = 128,
                   kv_dtype: DataType = DataType.bfloat8_b, fidelity: str = "HiFi2", grid: tuple[int, int] = (8, 8),
                   max_cores_per_head_batch: int = 16, chunk_cap: int | None = None,
                   c: CostConstants = COST) -> ChipAttention:
    """Estimated time of the op on one chip: ``batch`` users at cur_pos = seq_len - 1 over ``kv_heads``
    KV heads (``q_heads`` q heads) and ``seq_len`` positions, planned as the API plans it for the
    default scale 1/sqrt(head_dim) at ``fidelity``; ``chunk_cap``: the cap of dynamic chunks (None =
    the model's choice, as in ``make_plan``). See the module doc."""
    plan = make_plan(batch=batch, num_q_heads=q_heads, num_kv_heads=kv_heads, seq_len=seq_len, head_dim=head_dim,
                     kv_dtype=kv_dtype, cur_pos=[seq_len - 1] * batch, grid=grid, return_lse=True,
                     max_cores_per_head_batch=max_cores_per_head_batch, math_fidelity=fidelity, chunk_cap=chunk_cap,
                     prescale_q=power_of_two_scale(1 / math.sqrt(head_dim)))
    d, dv = plan.d_tiles, plan.dv_tiles
    exp = softmax_exp(plan.fp32_dest_acc_en)
    head_rows = min(plan.num_tokens * plan.group_size, 32)  # the q rows holding heads, as make_plan counts them
    # the closed forms the plan's split choices price a piece with (plan.split_choices.split_costs)
    key_tile = chunk_tile_ops(plan.q_tiles, d, dv, plan.dst_tiles, exp, head_rows, running=True,
                              prescale_q=plan.prescale_q, q_tile_rows=plan.q_tile_rows, mla=plan.mla,
                              kv_tile_bytes=tile_size(kv_dtype), im_bytes=intermediate_bytes(plan.fp32_dest_acc_en))
    chunk_fixed = chunk_ops(plan.q_tiles, dv, exp, head_rows, plan.q_tile_rows, plan.mla,
                            intermediate_bytes(plan.fp32_dest_acc_en))
    kv_tile = tile_size(kv_dtype)
    works: dict[object, CoreWork] = {}
    counts: dict[object, list[int]] = {}  # per core: [key tiles, chunks]
    merges: dict[object, int] = {}  # per core: the merges it runs (children with keys)
    for piece in plan.pieces:
        r = plan.range_at(seq_len - 1, piece.index)
        if r.empty:
            continue
        merges[piece.core] = merges.get(piece.core, 0) + sum(
            1 for _, child in tree_children(piece.index, plan.pieces_per_work)
            if not plan.range_at(seq_len - 1, child).empty)
        w = works.setdefault(piece.core, CoreWork([], np.zeros(c.dram_banks), {}, {}, 0, 0, 0))
        left = r.num_tiles
        for _ in range(r.num_chunks):  # the last chunk of the root may be short
            k = min(r.chunk_tiles, left)
            left -= k
            # K, then V, each under a read barrier of its own (kernels/flash_decode/reader.cpp)
            w.read_groups += [(k * d * kv_tile, k * d), (k * dv * kv_tile, k * dv)]
        nbytes = r.num_tiles * (d + dv) * kv_tile
        w.bank_bytes = w.bank_bytes + nbytes / c.dram_banks
        w.kv_bytes += nbytes
        w.chunks += 2 * r.num_chunks  # pipeline stages: a chunk's K read and its V read
        w.cb_handshakes += 2 * r.num_chunks  # K and V pushed per chunk
        n = counts.setdefault(piece.core, [0, 0])
        n[0] += r.num_tiles
        n[1] += r.num_chunks
    for core, w in works.items():
        w.compute = _core_compute(key_tile, chunk_fixed, *counts[core])
    # the tree's rounds over the pieces that hold keys (the split floor may leave some empty), each a
    # partial's message (fp32 O and two statistics tiles per q tile row, as the plan's split choices (plan.split_choices)
    # count it) and one merge (merge_ops)
    working = sum(1 for i in range(plan.pieces_per_work) if not plan.range_at(seq_len - 1, i).empty)
    hops = 10  # a typical partial's NoC 0 path on the 8x8 worker grid
    # the partials' tiles of q_tile_rows rows (fp32, or bf16 with a bf16 DST)
    partial_bytes = plan.partial_pages * 1024 * intermediate_bytes(plan.fp32_dest_acc_en) * plan.q_tile_rows // 32
    one_merge = merge_ops(plan.q_tiles, dv, exp, head_rows, plan.dst_tiles, plan.q_tile_rows,
                          intermediate_bytes(plan.fp32_dest_acc_en))
    reduction = Reduction(((partial_bytes, hops),) * tree_rounds(working), one_merge)
    for core, w in works.items():  # each core's merges count as its compute too (perf_model.evaluator.evaluate)
        w.merge = _scaled(one_merge, merges.get(core, 0))
    b = evaluate(list(works.values()), reduction, fidelity, c)
    return ChipAttention(seconds=b.total_us * 1e-6, dram_s=b.reader_us * 1e-6,
                         compute_s=sum(b.compute_us.values()) * 1e-6, reduction_s=b.reduction_us * 1e-6,
                         cores=b.cores, chip_bytes=b.kv_bytes, chunk_cap=plan.chunk_cap,
                         pieces=plan.pieces_per_work)


def combine_kernel_seconds(partials: int, rows: int, head_dim_v: int = 128, cores: int = 64,
                           in_dtype: DataType = DataType.bfloat16, out_dtype: DataType = DataType.bfloat16,
                           fidelity: str = "HiFi2", c: CostConstants = COST) -> float:
    """Estimated time of the combine program merging ``partials`` partials of ``rows`` rows on one chip:
    its tile rows dealt over at most ``cores`` cores (``ttdecode.ops.combine.make_combine_plan``), each core
    priced from the kernels' op counts (``combine_op_counts``) through ``evaluate`` (launch included)."""
    dv = head_dim_v // TILE
    tile_rows = math.ceil(rows / TILE)
    used = min(tile_rows, cores)
    per_core = math.ceil(tile_rows / used)  # the busiest core's tile rows
    ops = combine_op_counts(partials, dv, in_dtype, out_dtype)
    counts = {"copy": ops.copies, "max": ops.sfpu_binary, "ternary": ops.ternary, "exp": ops.exps,
              "recip": ops.recips, "log": ops.logs, "pack": ops.packs, "init": ops.inits}
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
    ``ttdecode.perf_model.counters.work_from_counters`` reads the op's: the reader's DRAM reads grouped by read
    barrier, its CB pushes (handshakes; the O pushes are the double-buffered chunks), every compute
    call with its tiles, the DRAM bytes per bank."""
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
