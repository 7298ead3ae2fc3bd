"""A readable table of a FlashDecode plan (`format_plan`): the shape, the split, each core's pieces with
their chunks and keys, and the L1 use per circular buffer."""

from __future__ import annotations

from ttdecode.core.program_description import L1_BYTES_PER_CORE
from ttdecode.core.split import TILE
from ttdecode.ops.flash_decode.plan.types import DecodePlan
from ttdecode.runtime.layout import L1_UNRESERVED_BASE

__all__ = ["format_plan"]


def format_plan(plan: DecodePlan, *, max_rows: int = 64) -> str:
    """A readable table of the plan and its L1 use."""
    lines = [
        f"FlashDecode plan: B={plan.batch} NH={plan.num_q_heads} NKV={plan.num_kv_heads} S={plan.seq_len} "
        f"D={plan.head_dim} Dv={plan.head_dim_v} KV={plan.kv_dtype.value} grid={plan.grid[0]}x{plan.grid[1]}"
        + (f" paged: {plan.num_blocks} blocks of {plan.block_size} keys, {plan.max_blocks} per user" if plan.paged else "")
        + (" MLA: V = K[..., :Dv], read once with K" if plan.mla else "")
        + (f" tokens per user: {plan.num_tokens}" if plan.num_tokens > 1 else "")
        + ("" if plan.is_causal else " non-causal") + (f" attn_mask batch {plan.attn_mask_batch}" if plan.has_attn_mask else ""),
        f"pieces per (user, KV head): {plan.pieces_per_work}"
        + (" (key-row pages: every p'-th key tile, one DRAM bank per piece)" if plan.cyclic_split else "")
        + f"; reduction rounds: {plan.rounds}; "
        f"chunk: {'dynamic, max ' + str(plan.max_chunk_tiles * TILE) if not plan.fixed_chunk_tiles else plan.fixed_chunk_tiles * TILE} keys; "
        f"q tile rows per group: {plan.q_tiles}; DST tiles: {plan.dst_tiles}",
        f"cores used: {len(plan.active_cores)} of {len(plan.cores)}; "
        f"most pieces on one core: {max((len(v) for v in plan.core_pieces.values()), default=0)}"
        + ("; merge slot: children's partials received one q tile row at a time" if plan.merge_slot else ""),
        "",
        f"{'core':>8} {'user':>4} {'kvh':>4} {'piece':>5} {'height':>6} {'chunks':>10} {'keys':>14} {'parent':>10}",
    ]
    rows = 0
    for core in plan.cores:
        for p in plan.core_pieces.get(core, ()):
            if rows >= max_rows:
                break
            if plan.bank_local:
                chunks = keys = "page table"  # a piece's tiles follow the page table (bank_local_view)
            elif plan.cur_pos is not None:
                r = plan.range_at(plan.cur_pos[p.user], p.index)
                chunks = "-" if r.empty else f"{r.first_chunk}..{r.first_chunk + r.num_chunks - 1}"
                last = r.tile_at(r.num_tiles - 1)
                keys = "-" if r.empty else f"{r.first_tile * TILE}..{min((last + 1) * TILE, plan.cur_pos[p.user] + 1) - 1}" + (
                    f" /{r.stride}" if r.stride > 1 else "")
            else:
                chunks = keys = "on device"
            parent = "root" if p.parent_core is None else f"({p.parent_core.x},{p.parent_core.y})"
            lines.append(
                f"{f'({core.x},{core.y})':>8} {p.user:>4} {p.kv_head:>4} {p.index:>5} {p.height:>6} {chunks:>10} {keys:>14} {parent:>10}"
            )
            rows += 1
    if rows >= max_rows and len(plan.pieces) > max_rows:
        lines.append(f"... {len(plan.pieces) - max_rows} more pieces")
    lines.append("")
    lines.append(f"L1 per core: {plan.l1_bytes_per_core / 1024:.1f} KiB of {L1_BYTES_PER_CORE // 1024} KiB "
                 f"(firmware and kernel config below {L1_UNRESERVED_BASE:#x})")
    for cb in plan.circular_buffers:
        shape = f"{cb.tile_rows}x32"
        lines.append(f"  cb{cb.index:<3} {cb.name:<12} {cb.data_format.value:<10} {shape:<5} {cb.num_pages:>4} x "
                     f"{cb.page_size:>5} B = {cb.total_size / 1024:8.1f} KiB")
    return "\n".join(lines)
