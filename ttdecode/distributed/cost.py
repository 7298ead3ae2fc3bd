"""A model of one decode step's attention on several Wormhole chips: per-chip FlashDecode + the LSE combine.

MODEL ESTIMATES, not measurements: nothing here has run on a Tenstorrent device.

Per chip (the FlashDecode op on its heads and its part of the sequence), from the planner's real
work split (``ttdecode.plan.make_plan``: which core reads which key tiles) and published figures:

* DRAM, per core: ``max(core_bytes / core_rate, chip_bytes / dram_peak)`` (a core cannot pull more
  than one core's ideal read rate; all cores together share the chip's DRAM peak);
* compute, per core: for each 32-key tile of a (user, KV head) piece, the matmuls Q.K^T and P.V
  (``(D + Dv) / 32`` tiles at the fidelity, a full 32-row tile each whatever the q heads in the
  group), the SFPU exp of one score tile and a few reduce/eltwise tiles, with the constants of
  ``ttdecode.perfmodel.WORMHOLE`` (its sources in ``CONSTANT_SOURCES``);
* ``max_cores_per_head_batch`` chosen per layout among 16/32/64 (the fastest), so that TP-only is
  not handicapped by idle cores at small batch;
* core time ``max(DRAM, compute)`` (the two K/V chunk slots overlap them), chip time = the slowest
  core + the in-chip tree reduction (``rounds x (partial message + merge)``).

Across chips (``EthernetLink``, sources in ``LINK_SOURCES``): a T3K's 8 chips form a 2x4 mesh of
100 Gb/s Ethernet links; a CP group of ``c`` chips is modelled as a ring of ``c`` with one link per
hop (a 2x4 mesh splits into rings of 2, 4 or 8 chips on disjoint links):

* ``all_gather``: ``(c - 1) x (hop latency + P / link_bw)`` with P one chip's partial (bf16 output +
  fp32 LSE), then every chip merges the ``c`` partials of all rows (32-row groups spread over its 64 cores);
* ``all_to_all``: ``(c - 1) x (hop latency + P / (c link_bw))`` twice (shares out, merged shares
  back), each chip merging 1/c of the rows.

Not modelled: program launch and dispatch, CCL op set-up and synchronisation (a fixed cost per
collective that favours TP-only), DRAM latency, NoC congestion; the per-chip term is an optimistic
bound of the same kind as ``ttdecode.perfmodel``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ttdecode.formats import DataType, tile_size
from ttdecode.perfmodel import WORMHOLE, WormholeConstants
from ttdecode.plan import PlanError, make_plan, piece_range

__all__ = ["EthernetLink", "T3K_LINK", "LINK_SOURCES", "ChipAttention", "chip_attention", "combine_seconds",
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


def _tile_cycles(fidelity: str, head_dim: int, head_dim_v: int, c: WormholeConstants) -> float:
    """Compute cycles per 32-key tile of one piece (one KV head's q group in one 32-row tile)."""
    phases = c.fidelity_phases[fidelity]
    matmul = c.matmul_tile_cycles_lofi * phases * (head_dim + head_dim_v) / 32
    exp = c.sfpu_instructions_per_element["exp"] * 32 * 32 / c.sfpu_lanes
    stats = 2 * c.reduce_tile_cycles * phases + 2 * c.eltwise_tile_cycles * phases  # max/sum, sub/scale
    return matmul + exp + stats


def _merge_cycles(fidelity: str, head_dim_v: int, c: WormholeConstants) -> float:
    """One more partial merged into a 32-row tile group: one exp tile (its weight, or the rescale of
    the running sum) and a broadcast multiply-add per output tile."""
    phases = c.fidelity_phases[fidelity]
    exp = c.sfpu_instructions_per_element["exp"] * 32 * 32 / c.sfpu_lanes
    return exp + (head_dim_v / 32) * 2 * c.eltwise_tile_cycles * phases


def chip_attention(*, batch: int, q_heads: int, kv_heads: int, seq_len: int, head_dim: int = 128,
                   kv_dtype: DataType = DataType.bfloat8_b, fidelity: str = "HiFi2", grid: tuple[int, int] = (8, 8),
                   max_cores_per_head_batch: int = 16, c: WormholeConstants = WORMHOLE) -> ChipAttention:
    """Estimated time of the op on one chip: ``batch`` users at cur_pos = seq_len - 1 over ``kv_heads``
    KV heads (``q_heads`` q heads) and ``seq_len`` positions (see the module doc)."""
    plan = make_plan(batch=batch, num_q_heads=q_heads, num_kv_heads=kv_heads, seq_len=seq_len, head_dim=head_dim,
                     kv_dtype=kv_dtype, cur_pos=[seq_len - 1] * batch, grid=grid, return_lse=True,
                     max_cores_per_head_batch=max_cores_per_head_batch)
    row_bytes = 2 * (head_dim // 32) * tile_size(kv_dtype)  # one key tile of K and V
    tile_cycles = _tile_cycles(fidelity, head_dim, head_dim, c)
    per_core_tiles = {}
    for piece in plan.pieces:
        r = piece_range(seq_len - 1, plan.fixed_chunk_tiles, plan.pieces_per_work, piece.index)
        per_core_tiles[piece.core] = per_core_tiles.get(piece.core, 0) + r.num_tiles
    chip_bytes = sum(per_core_tiles.values()) * row_bytes
    shared = chip_bytes / c.dram_peak_bytes_per_s
    worst = dram_w = comp_w = 0.0
    for tiles in per_core_tiles.values():
        dram = max(tiles * row_bytes / c.core_dram_bytes_per_s, shared)
        comp = tiles * tile_cycles / c.clock_hz
        if max(dram, comp) > worst:
            worst, dram_w, comp_w = max(dram, comp), dram, comp
    message = (head_dim // 32 + 2) * 4096 / c.noc_bytes_per_cycle + 10 * c.noc_hop_cycles
    rounds = math.ceil(math.log2(plan.pieces_per_work)) if plan.pieces_per_work > 1 else 0
    reduction = rounds * (message + _merge_cycles(fidelity, head_dim, c)) / c.clock_hz
    return ChipAttention(seconds=worst + reduction, dram_s=dram_w, compute_s=comp_w, reduction_s=reduction,
                         cores=sum(1 for t in per_core_tiles.values() if t > 0), chip_bytes=chip_bytes)


def combine_seconds(combine: str, group: int, batch: int, q_heads: int, head_dim_v: int = 128,
                    link: EthernetLink = T3K_LINK, fidelity: str = "HiFi2", cores: int = 64,
                    c: WormholeConstants = WORMHOLE) -> tuple[float, float]:
    """(link seconds, merge seconds) of combining ``group`` partials of ``batch x q_heads`` rows; the
    32-row groups are merged in parallel on ``cores`` cores of each chip."""
    if group == 1:
        return 0.0, 0.0
    partial = batch * q_heads * (2 * head_dim_v + 4)  # bf16 output + fp32 LSE per row
    row_groups = math.ceil(batch * q_heads / 32)
    per_merge = _merge_cycles(fidelity, head_dim_v, c) / c.clock_hz
    if combine == "all_gather":
        link_s = (group - 1) * (link.hop_latency_s + partial / link.bytes_per_s)
        merge_s = (group - 1) * math.ceil(row_groups / cores) * per_merge
    elif combine == "all_to_all":
        link_s = 2 * (group - 1) * (link.hop_latency_s + partial / group / link.bytes_per_s)
        merge_s = (group - 1) * math.ceil(math.ceil(row_groups / group) / cores) * per_merge
    else:
        raise ValueError(f"combine: expected 'all_gather' or 'all_to_all', got {combine!r}")
    return link_s, merge_s


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
