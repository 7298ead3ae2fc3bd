"""The cost model's constants, each with its source: what a Wormhole core, its DRAM and its NoC do per
cycle (`CostConstants`, the nominal set `COST`, the sources `COST_SOURCES`; fitted and assumed ones say
so). The NoC's geometry (where cores and banks sit) is `ttdecode.core.noc_geometry`'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["CostConstants", "COST", "COST_SOURCES"]

@dataclass(frozen=True)
class CostConstants:
    """Every constant of the model; units in the names; sources in COST_SOURCES (fitted ones say so)."""

    clock_hz: float = 1.0e9
    dram_peak_bytes_per_cycle: float = 288.0
    dram_banks: int = 12
    dram_latency_cycles: float = 384.0
    dram_request_issue_cycles: float = 6.8
    core_read_plateau_bytes_per_cycle: float = 22.3
    dram_bank_local_efficiency: float = 267.0 / 288.0
    dram_bank_reader_bytes_per_cycle: float = 22.2  # sourced: one reader alone on one bank (DRAMTile)
    dram_bank_local_readers_efficiency: float = 265.5 / 288.0  # sourced: 12 readers, one per bank (DRAMTile)
    page_table_pass_entry_cycles: float = 20.0  # ESTIMATE: the reader's up-front pass, per page-table entry
    page_table_guard_entry_cycles: float = 4.0  # ESTIMATE: the guard's share of page_table_pass_entry_cycles
    page_table_walk_entry_cycles: float = 10.0  # ESTIMATE: a piece's lazy walk, per page-table entry
    dram_interleaved_efficiency: float = 0.66  # sourced: 189.8 / 288 = 0.659 (DRAMTile README), see sources
    dram_interleaved_efficiency_noc1: float = 82.1 / 288.0  # sourced, the same benchmark on NoC 1 (not used by reads)
    noc_bytes_per_cycle: float = 32.0
    noc_hop_cycles: float = 9.0
    noc_write_setup_cycles: float = 40.0  # ASSUMED
    semaphore_handshake_cycles: float = 100.0  # ASSUMED
    cb_handshake_cycles: float = 20.0  # ASSUMED, per cb push/wait pair
    start_spread_cycles: float = 2315.9  # sourced: the first-to-last kernel start of tt-metal's decode op, see sources
    compute_startup_cycles: float = 380.0  # sourced (a range, its midpoint): the compute kernel's own init
    l1_index_read_cycles: float = 150.0  # ASSUMED: a NoC read of a few bytes from an L1 shard (cur_pos, page table)
    split_compute_margin: float = 0.10  # ASSUMED: the split's choices keep this much compute under the floor
    tile_call_cycles: float = 20.0  # ASSUMED: the TRISC overhead of one LLK tile call
    init_cycles: float = 60.0  # ASSUMED: one configuration call (an op's init, a data-format reconfig)
    unpack_address_cycles: float = 2.0
    unpack_bytes_per_cycle: float = 64.0
    packer_bytes_per_cycle: float = 16.0  # per packer; a tile's faces are packed in parallel
    intermediate_tile_bytes: int = 2048  # bf16 tile, the unit unpack/pack costs are charged on
    matmul_tile_cycles_lofi: float = 16.0
    matmul_min_rows: int = 8
    eltwise_tile_cycles: float = 8.0  # 8x16 per cycle
    reduce_tile_cycles: float = 4.0  # 16x16 per cycle
    sfpu_steps_per_tile: int = 32
    # SFPU instructions per 32-lane vector step (one instruction per cycle), counted from the LLK
    sfpu_instructions_per_step: Mapping[str, float] = field(default_factory=lambda: {
        "exp": 40.0, "exp_bf16": 22.0, "recip": 18.0, "log": 30.0, "max": 6.0, "scalar": 5.0,
        "ternary": 7.0, "exp_poly2": 31.5, "exp_poly4": 35.5, "correction_bf16": 87.0, "correction": 109.0})
    exp_approx_tile_cycles: float = 70.7
    fidelity_phases: Mapping[str, int] = field(
        default_factory=lambda: {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4})


COST = CostConstants()

COST_SOURCES: dict[str, str] = {
    "clock_hz": "Wormhole AI clock 1 GHz (tt-metal tech_reports)",
    "dram_peak_bytes_per_cycle": "288 GB/s, 12 GDDR6 banks (tt-metal tech_reports/Saturating_DRAM_bandwidth)",
    "dram_banks": "12 GDDR6 banks (tt-metal tech_reports/Saturating_DRAM_bandwidth)",
    "dram_latency_cycles": "~384 cycles for a first small DRAM read (tt-metal tests/tt_metal/tt_metal/data_movement/"
                           "documentation); charged once per read barrier",
    "dram_request_issue_cycles": "about one read request per 6.8 cycles at a DRAM endpoint per NoC (tt-metal issue "
                                 "#55898)",
    "core_read_plateau_bytes_per_cycle": "22.3 B/cycle: one core's interleaved DRAM read plateau (tt-metal "
                                         "tests/tt_metal/tt_metal/data_movement/documentation, perf_plots "
                                         "'DRAM Interleaved Packet Sizes')",
    "dram_bank_local_efficiency": "267/288 = 92.7%: the DRAM micro-benchmark with one bank-local reader per bank "
                                  "(tech_reports/Saturating_DRAM_bandwidth)",
    "dram_bank_reader_bytes_per_cycle": "22.2 B/cycle: one Tensix reading 1 MiB from one DRAM channel, NoC 0 "
                                        "(tt-isa-documentation WormholeB0/DRAMTile/README.md: 22.2 GB/s, 92.5%); 12 or "
                                        "48 readers on that one channel reach 22.3 GB/s in all: readers beyond one per "
                                        "bank share the bank's rate (the bank-local paged model's fair share)",
    "dram_bank_local_readers_efficiency": "265.5/288 = 92.2%: 12 Tensix readers carefully paired one per DRAM "
                                          "channel, NoC 0 (tt-isa-documentation WormholeB0/DRAMTile/README.md; 48 "
                                          "such readers: 267.5 GB/s). A bank's rate in the bank-local paged model "
                                          "(265.5 / 12 = 22.1 B/cycle); dram_bank_local_efficiency (267/288, the "
                                          "tech report) stays the contiguous key_row floor the planner prices with",
    "page_table_pass_entry_cycles": "ESTIMATE (not measured): the bank-local reader's up-front pass over a user's "
                                    "page-table row, per entry, on an in-order RV32IM core at 1 GHz (tt-isa-"
                                    "documentation WormholeB0/TensixTile/BabyRISCV/README.md): the entry's L1 load "
                                    "(>= 8 cycles latency, not hidden: the next steps depend on it), the out-of-pool "
                                    "guard (compare, branch: 2), the block's base bank pt * NKV * bt mod NB by a "
                                    "multiply-shift modulus (3 multiplies of 2 cycles, a subtract: 7), the "
                                    "histogram bump in core-local RAM (load 2, add, store: 4) and the loop (2): "
                                    "~23, rounded to 20 as the compiler overlaps a few; serial before the first read",
    "page_table_guard_entry_cycles": "ESTIMATE (not measured): of page_table_pass_entry_cycles' items, the "
                                     "out-of-pool guard's compare and branch (2) and its loop (2): the part of "
                                     "an entry's pass that stays before the first read for a user other than "
                                     "the first piece's (whose whole-row guard overlaps its early chunks); "
                                     "also the price of checking one early chunk's entry",
    "page_table_walk_entry_cycles": "ESTIMATE (not measured): a piece's lazy walk over the page-table row, per "
                                    "entry: the L1 load (8, overlapped with the reads in flight), the block's base "
                                    "bank by an incremental residue (2), the owned-bank test and branch (2): ~10; "
                                    "charged on the reader's issue side beside its read requests",
    "dram_interleaved_efficiency": "0.66 of the bank peak for interleaved reads from every core: 12 readers paired "
                                   "randomly with banks reach 189.8 GB/s on NoC 0 (tt-isa-documentation WormholeB0/"
                                   "DRAMTile/README.md; 189.8/288 = 0.659, kept at 0.66, the value it had when it was "
                                   "fitted on the FlashDecode tech report's ~180 GB/s, so the planner's choices stay "
                                   "put); the tech report is now an independent check (perf/calibrate_model.py)",
    "dram_interleaved_efficiency_noc1": "82.1/288: the same benchmark's readers on NoC 1 (DRAMTile/README.md); only "
                                        "the calibration row uses it: tt-metal reads DRAM on NoC 0 on Wormhole "
                                        "(its preferred DRAM-read NoC) and so do our readers",
    "noc_bytes_per_cycle": "32-byte flit per cycle per link (Wormhole NoC documentation)",
    "noc_hop_cycles": "~9 cycles per router hop (Wormhole NoC documentation)",
    "noc_write_setup_cycles": "ASSUMED: issuing one NoC write (command buffer setup) from a RISC-V, ~40 cycles",
    "semaphore_handshake_cycles": "ASSUMED: write barrier + semaphore increment + the receiver's poll, ~100 cycles",
    "cb_handshake_cycles": "ASSUMED: one CB push/wait pair between RISC-Vs (L1 pointer update + poll), ~20 cycles",
    "start_spread_cycles": "the launch skew inside tt-metal's DEVICE KERNEL DURATION (first core's kernel start to "
                           "the last core's kernel end; not firmware start, dispatch or the completion handshake): "
                           "FIRST TO LAST START 2315.9 ns of the Galaxy Llama-70B decode SDPA on 32 cores "
                           "(tt-metal models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_6u.json; 6U, 1 GHz, so "
                           "2316 cycles); a published 64-core Wormhole trace's median is 1906 ns (tt-perf-report "
                           "tests/data/wh_clip_encoder_2.csv): no growth with the core count, so one spread for any op "
                           "on more than one core, 0 on one core. evaluate charges it whole: at the calibration points "
                           "every core has the same work, so the last core to start is the last to finish; NOT fitted",
    "compute_startup_cycles": "the compute kernel's own init (hw configure, the first op's init) inside the kernel "
                              "zone: LLK harness INIT zones 250-510 cycles (tt-metal issue #51592), the midpoint; "
                              "charged once per core to its compute (it runs while the first read is in flight, so "
                              "the overlap hides part of it)",
    "l1_index_read_cycles": "ASSUMED: reading cur_pos or the page table from an L1 shard instead of DRAM: a NoC read "
                            "round trip of a few bytes (~2 x 4 hops x 9 cycles + command setup), ~150 cycles, against "
                            "dram_latency_cycles from DRAM; used by tt-metal's structure (index_memory)",
    "split_compute_margin": "ASSUMED: the plan's choice of pieces (tile_pieces, key_row_pieces) counts a core's "
                            "closed-form compute 10% dearer, so it does not bet on a few % of slack under the DRAM "
                            "floor with call and init costs that are themselves assumed (the sensitivity table: "
                            "x0.5 / x2 on them moves the Galaxy point by 5-15%); the step estimates do not use it",
    "tile_call_cycles": "ASSUMED: the instructions a TRISC issues around one LLK tile call (address setup, MOP "
                        "start, semaphore / context toggles, the Dst address clear), ~20 cycles; charged per tile call "
                        "(copy_tile, exp_tile, pack_tile, one matmul_block, ...) in both kernels",
    "init_cycles": "ASSUMED: one configuration call (an op's *_init, a data-format reconfig: unpack/math/pack "
                   "config writes behind a stall), ~60 cycles; ours counted by the runtime (op 'init'), tt-metal's "
                   "one per op block of its compute kernel",
    "unpack_address_cycles": "2 cycles of address calculation per unpack (tt-isa-documentation UNPACR_Regular.md)",
    "unpack_bytes_per_cycle": "L1 fetch at up to 64 B/cycle per unpacker (UNPACR_Regular.md: x1/x2/x4 = 16/32/64 B "
                              "per cycle; the LLK sets Throttle_mode 2, x4, cunpack_common.h); two unpackers "
                              "fetching at once get x2 each (UNPACR_Regular.md), so the bytes of both operands of an "
                              "op are charged at 64 B/cycle in all; plus the 2 address cycles per unpacked tile",
    "packer_bytes_per_cycle": "one 128-bit L1 write per cycle per packer, four packers (tt-isa-documentation L1.md); "
                              "the LLK packs a tile's faces on as many packers at once (llk_pack.h: "
                              "PACK_SEL(num_faces)), so a pack takes a face's bytes / 16 cycles: a 16x32 tile's two "
                              "faces on two packers, a 32x32 tile's four on four",
    "intermediate_tile_bytes": "bf16 tile = 2048 B (tt-metal docs: 32x32 elements, 2 B each)",
    "matmul_tile_cycles_lofi": "32x32x32 tile 16/32/48/64 cycles at LoFi..HiFi4 (tech_reports/matrix_engine)",
    "matmul_min_rows": "the engine multiplies 8x16 by 16x16 per cycle: in0 under 8 rows costs 8 rows (GEMM_FLOPS)",
    "eltwise_tile_cycles": "eltwise 8x16 elements per cycle: 8 cycles per tile, mul x fidelity phases "
                           "(tech_reports/matrix_engine/matrix_engine.md)",
    "reduce_tile_cycles": "reduce 16x16 per cycle: 4 cycles per tile, sum x fidelity phases (matrix_engine.md)",
    "sfpu_steps_per_tile": "a 32x32 tile is 32 SFPU vector steps of 32 lanes (VectorUnit.md); VectorMode::R "
                           "(rows of faces 0-1 only) runs 16",
    "sfpu_instructions_per_step": "counted from the LLK in the ttnn 0.81.1 wheel (llk_sfpu/): exp_bf16 22 = "
                                  "BODY_LEN of _sfpu_exp_21f_bf16_tti_ (17 + scale 2 + bf16 rounding 1 + clamp 2); "
                                  "exp (fp32 Dst, _sfpu_exp_fp32_accurate_) ~40 (11 MAD/MUL, 2 converts, abs, "
                                  "copysgn, exexp/setexp, 2 int adds, 2 conditionals, load/store, NOPs after "
                                  "dependent MADs); recip ~18 (sfpu_reciprocal_iter + scale/sign); log ~30; "
                                  "binary max/add/sub/mul on Dst ~6 (2 loads, op, NOP, store, incr); scalar ~5; "
                                  "ternary (addcmul_tile, ckernel_sfpu_addcmul.h) ~7: per two rows 6 loads, "
                                  "2 SFPMUL, 2 SFPMAD, 2 stores and the Dst increment (6.5 per row, rounded up); "
                                  "exp_poly2/exp_poly4 (experimental/llk_sfpu/ckernel_sfpu_sdpa.h, "
                                  "calculate_exponential_polynomial with the scale, degree 2 on a bf16 Dst, 4 on "
                                  "an fp32 one): 30 / 33 per step (load, scale 3, x/ln2 3, NOPs, int8 round, "
                                  "cast, k ln2 3, Horner MADs and NOPs, 2^k 5, clamp 3, bf16 round, store, incr) "
                                  "and its 6 / 10 coefficient loads per 4-step call: 31.5 / 35.5; "
                                  "correction_bf16/correction (experimental/llk_sfpu/ckernel_sfpu_sdpa.h, "
                                  "calculate_fused_max_sub_exp_add_tile, the merge's one SFPU call, bf16 / fp32 "
                                  "Dst): its own ~29 / ~27 per step (4 loads, the max by a compare (subtract, NOP, "
                                  "set-cc) under v_if/v_else with a store each and the cc push/complement/pop, "
                                  "the max's reload, 2 subtractions, 2 stores of the factors, 2 multiplies and an "
                                  "add with their NOPs, the stores and reloads between them (the corrected child "
                                  "sum's store and reload dropped in the four-tile layout of an fp32 half-sync "
                                  "Dst), the Dst increment) plus 2 accurate exps with the scale: 2 x ~29 on a bf16 "
                                  "Dst (_sfpu_exp_21f_bf16_ as SFPI code, not the TTI kernel exp_bf16 counts: scale "
                                  "load, multiply, NOP; 1/ln2 and 127 loads, MAD, NOP; clamp 3; exexp, exman, shift; "
                                  "exexp, exman, cast; 3 fp32 coefficients 6 loads, 2 MADs, 2 NOPs; setexp; bf16 "
                                  "rounding), 2 x ~41 on an fp32 one (exp's ~40 less its load and store, plus the "
                                  "scale's load, multiply and NOP): 87 / 109",
    "exp_approx_tile_cycles": "fast approximate exp ~70.7 cycles per tile on Wormhole (tt-llk PR #1190)",
}
