"""The model's prices of a split candidate, in cycles (1 GHz): the narrow interface the FlashDecode planner
chooses its split with (the model prices, the planner decides). Closed forms of our kernels (`op_counts`)
through the evaluator's op costs (`evaluator.sum_ops`), and the DRAM and reader terms `evaluate` charges,
for one key tile, one running chunk's fixed work, one tree round, one core's reader and the DRAM floor; and a
whole bank-local paged step (`bank_local_step_cycles`, through bank_paged)."""

from __future__ import annotations

import functools

from ttdecode.perf_model.bank_paged import (PagedShape, PieceCompute, evaluate_paged, random_page_table,
                                            sequential_page_table)
from ttdecode.perf_model.constants import COST, CostConstants
from ttdecode.perf_model.evaluator import sum_ops
from ttdecode.perf_model.op_counts import chunk_ops, chunk_tile_ops, intermediate_bytes, merge_ops, softmax_exp

__all__ = ["key_tile_cycles", "chunk_cycles", "round_cycles", "core_reader_cycles", "interleaved_floor_cycles",
           "bank_local_floor_cycles", "bank_local_step_cycles"]


def key_tile_cycles(q_tiles: int, d_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool, dst_tiles: int,
                    fidelity: str, c: CostConstants, head_rows: int, running: bool, prescale_q: bool = False,
                    q_tile_rows: int = 32, mla: bool = False, kv_tile_bytes: int = 1088,
                    exp_approx: bool = False) -> float:
    """Compute cycles one more key tile adds to a chunk (chunk_tile_ops through the cost model; `exp_approx`: the
    softmax's exp in approximate mode, op_counts.softmax_exp)."""
    ops = chunk_tile_ops(q_tiles, d_tiles, dv_tiles, dst_tiles, softmax_exp(fp32_dest_acc_en, exp_approx), head_rows,
                         running=running,
                         prescale_q=prescale_q, q_tile_rows=q_tile_rows, mla=mla, kv_tile_bytes=kv_tile_bytes,
                         im_bytes=intermediate_bytes(fp32_dest_acc_en))
    return sum(sum_ops(ops, fidelity, c).values())


def chunk_cycles(q_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool, fidelity: str, c: CostConstants,
                 head_rows: int, q_tile_rows: int = 32, mla: bool = False, exp_approx: bool = False) -> float:
    """Compute cycles of a running chunk's fixed work beyond its key tiles (chunk_ops through the cost model)."""
    return sum(sum_ops(chunk_ops(q_tiles, dv_tiles, softmax_exp(fp32_dest_acc_en, exp_approx), head_rows, q_tile_rows, mla,
                                 intermediate_bytes(fp32_dest_acc_en)),
                       fidelity, c).values())


def round_cycles(q_tiles: int, dv_tiles: int, fp32_dest_acc_en: bool, dst_tiles: int, fidelity: str, hops: int,
                 c: CostConstants, head_rows: int, q_tile_rows: int = 32, exp_approx: bool = False) -> float:
    """One tree round: the partial's message (fp32 O and two statistics tiles per q tile row, of
    q_tile_rows rows), the semaphore handshake and one merge (merge_ops)."""
    ops = merge_ops(q_tiles, dv_tiles, softmax_exp(fp32_dest_acc_en, exp_approx), head_rows, dst_tiles, q_tile_rows,
                    intermediate_bytes(fp32_dest_acc_en))
    merge = sum(sum_ops(ops, fidelity, c).values())
    partial_bytes = q_tiles * (dv_tiles + 2) * 1024 * intermediate_bytes(fp32_dest_acc_en) * q_tile_rows // 32
    return (c.noc_write_setup_cycles + partial_bytes / c.noc_bytes_per_cycle + hops * c.noc_hop_cycles
            + c.semaphore_handshake_cycles + merge)


def core_reader_cycles(busiest: int, tiles: int, chunks: int, key_bytes: int, c: CostConstants = COST) -> float:
    """A core's reader for `busiest` pieces of `tiles` key tiles in `chunks` chunks in all: the per-core
    plateau, one DRAM latency per chunk."""
    return busiest * tiles * key_bytes / c.core_read_plateau_bytes_per_cycle + chunks * c.dram_latency_cycles


def interleaved_floor_cycles(nbytes: int, c: CostConstants = COST) -> float:
    """The DRAM floor of `nbytes` bytes read interleaved over every bank: the peak at the fitted
    interleaved efficiency."""
    return nbytes / (c.dram_peak_bytes_per_cycle * c.dram_interleaved_efficiency)


def bank_local_floor_cycles(nbytes: int, c: CostConstants = COST) -> float:
    """The DRAM floor of `nbytes` bytes spread evenly over the banks, each read bank-locally: one bank's
    share at one bank's peak times the bank-local efficiency."""
    return nbytes / c.dram_banks / (c.dram_peak_bytes_per_cycle / c.dram_banks * c.dram_bank_local_efficiency)


def bank_local_step_cycles(*, batch: int, num_q_heads: int, num_kv_heads: int, head_dim: int, block_size: int,
                           seq_len: int, pieces: int, grid: tuple[int, int], dram_banks: int, kv_tile_bytes: int,
                           q_tiles: int, head_rows: int, q_tile_rows: int, dst_tiles: int, prescale_q: bool,
                           fp32_dest_acc_en: bool, fidelity: str, chunk_cap: int, floor_tiles: int,
                           fixed_chunk_tiles: int, spread_banks: bool = False, random_table: bool = False,
                           softmax_chunks: int = 1, exp_approx: bool = False, c: CostConstants = COST) -> float:
    """A bank-local paged step (bank_paged.evaluate_paged) in cycles: `batch` users, each at the cache's
    length (cur_pos seq_len - 1) over a sequential page table (each user's blocks in order: every bank of
    R_h evenly loaded; `random_table`: a fixed random table of distinct blocks from a pool twice the need, as a
    serving allocator's), `pieces` per (user, KV head) (`spread_banks`, `softmax_chunks`: the DecodePlan fields;
    `exp_approx`: the softmax's exp mode), the
    model's own placement over the `grid`. Depends on
    the config, the shape and the batch size only (remembered for the default constants)."""
    args = dict(batch=batch, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                block_size=block_size, seq_len=seq_len, pieces=pieces, grid=tuple(grid), dram_banks=dram_banks,
                kv_tile_bytes=kv_tile_bytes, q_tiles=q_tiles, head_rows=head_rows, q_tile_rows=q_tile_rows,
                dst_tiles=dst_tiles, prescale_q=prescale_q, fp32_dest_acc_en=fp32_dest_acc_en, fidelity=fidelity,
                chunk_cap=chunk_cap, floor_tiles=floor_tiles, fixed_chunk_tiles=fixed_chunk_tiles,
                spread_banks=spread_banks, random_table=random_table, softmax_chunks=softmax_chunks,
                exp_approx=exp_approx)
    return _remembered_step_cycles(**args) if c is COST else _step_cycles(c, **args)


@functools.lru_cache(maxsize=256)
def _remembered_step_cycles(**args) -> float:
    return _step_cycles(COST, **args)


def _step_cycles(c: CostConstants, *, batch: int, num_q_heads: int, num_kv_heads: int, head_dim: int,
                 block_size: int, seq_len: int, pieces: int, grid: tuple[int, int], dram_banks: int,
                 kv_tile_bytes: int, q_tiles: int, head_rows: int, q_tile_rows: int, dst_tiles: int,
                 prescale_q: bool, fp32_dest_acc_en: bool, fidelity: str, chunk_cap: int, floor_tiles: int,
                 fixed_chunk_tiles: int, spread_banks: bool, random_table: bool, softmax_chunks: int,
                 exp_approx: bool) -> float:
    shape = PagedShape(batch, num_q_heads, num_kv_heads, head_dim, block_size, (seq_len - 1,) * batch, grid,
                       dram_banks, kv_tile_bytes)
    pc = PieceCompute(q_tiles=q_tiles, head_rows=head_rows, q_tile_rows=q_tile_rows, dst_tiles=dst_tiles,
                      prescale_q=prescale_q, fp32_dest_acc_en=fp32_dest_acc_en, fidelity=fidelity,
                      chunk_cap=chunk_cap, floor_tiles=floor_tiles, fixed_chunk_tiles=fixed_chunk_tiles,
                      spread_banks=spread_banks, softmax_chunks=softmax_chunks, exp_approx=exp_approx)
    blocks = -(-seq_len // block_size)
    table = (random_page_table(batch, blocks, seed=0, num_blocks=2 * batch * blocks) if random_table
             else sequential_page_table(batch, blocks))
    breakdown, _ = evaluate_paged(shape, pc, table, pieces, c)
    return breakdown.cycles
