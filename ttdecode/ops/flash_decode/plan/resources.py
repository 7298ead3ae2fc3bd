"""make_plan's last step: the resource check. A plan whose buffers overflow a core's L1, or whose busiest core
needs more runtime args than a kernel takes, is refused (`ResourceError`) naming the knob that makes it fit;
finding that knob re-plans the call with other knobs through a function the caller passes (`Replan`)."""

from __future__ import annotations

from typing import Any, Callable

from ttdecode.core.program_description import MAX_RUNTIME_ARGS
from ttdecode.core.split import CHUNK_CAPS, SMALL_CHUNK_TILES, TILE
from ttdecode.ops.flash_decode.plan.buffers import flash_decode_cbs
from ttdecode.ops.flash_decode.plan.types import (RUNTIME_ARGS_HEADER, RUNTIME_ARGS_PER_PIECE, DecodePlan, PlanError,
                                                  ResourceError, cbs_bytes_per_core)

__all__ = ["Replan", "check_resources"]

#: make_plan on the caller's arguments with the knobs given by name replaced (k_chunk_size, min_chunk_tiles,
#: chunk_cap, max_cores_per_head_batch); it raises PlanError without advice of its own when that plan does
#: not fit.
Replan = Callable[..., DecodePlan]


def _fitting_chunk(plan: DecodePlan, replan: Replan, *, tree: bool) -> int | None:
    """The largest k_chunk_size (keys) below the plan's largest chunk with which the same call plans
    (`replan`: make_plan with the caller's arguments but the ones given, refusing without advice; without
    partials, i.e. one piece per head, unless `tree`), or None. A smaller chunk changes the split (more
    chunks, more pieces, a deeper tree, more partial areas), so only the plan itself can tell."""
    c = plan.max_chunk_tiles
    while c > 1:
        c //= 2
        if plan.seq_len % (c * TILE):
            continue
        over = dict(k_chunk_size=c * TILE, min_chunk_tiles=None, chunk_cap=None)
        if not tree:
            over["max_cores_per_head_batch"] = 1
        try:
            replan(**over)
            return c * TILE
        except PlanError:
            continue
    return None


def _l1_advice(plan: DecodePlan, l1_bytes: int, cb_args: dict[str, Any], replan: Replan) -> str:
    """Which knob makes an overflowing plan fit: a smaller k_chunk_size (the largest chunk that fits
    is named), else one piece per work (max_cores_per_head_batch=1: no partial buffers), else fewer
    q heads per KV head on the chip."""
    if not plan.fixed_chunk_tiles and plan.chunk_cap > SMALL_CHUNK_TILES:
        # the model's cap took more L1 than this batch leaves: a smaller cap may fit
        for cap in sorted(CHUNK_CAPS, reverse=True):
            if cap < plan.chunk_cap and cbs_bytes_per_core(
                    flash_decode_cbs(**dict(cb_args, max_chunk_tiles=min(cap, plan.seq_len // TILE)))) <= l1_bytes:
                return (f"Set chunk_cap={cap} (SDPAProgramConfig / make_plan; the cost model took dynamic chunks of "
                        f"up to {plan.chunk_cap} key tiles for this shape).")
    if plan.bank_local:
        fewer = (f"Lower key_row_pieces (now {plan.pieces_per_work} pieces per head): fewer pieces per core and "
                 f"partials to receive" if plan.pieces_per_work > 1 else "Use kv_pages='tile'")
        return f"{fewer}, or a smaller batch per program."
    if plan.cyclic_split:
        # key_row: every piece reads one bank; fewer pieces per head (>= the banks) mean fewer partials per core
        banks = plan.dram_banks
        fewer = (f"Lower max_cores_per_head_batch (now {plan.pieces_per_work} pieces per head; kv_pages='key_row' "
                 f"takes a multiple of {banks}, at least {banks}): fewer pieces per core and partials to receive"
                 if plan.pieces_per_work > banks else "Use kv_pages='tile'")
        return f"{fewer}, or a smaller batch per program."
    now = f"now {plan.fixed_chunk_tiles * TILE if plan.fixed_chunk_tiles else 'dynamic, up to'} " \
          f"{'' if plan.fixed_chunk_tiles else str(plan.max_chunk_tiles * TILE) + ' keys'}".rstrip()
    chunk = _fitting_chunk(plan, replan, tree=plan.pieces_per_work > 1)
    if chunk is not None:
        fewer = (f", or lower max_cores_per_head_batch (now {plan.pieces_per_work} pieces per head, fewer "
                 f"partials to receive)") if plan.pieces_per_work > 1 else ""
        return f"Set k_chunk_size={chunk} or lower ({now}){fewer}."
    if plan.pieces_per_work > 1:
        one = dict(cb_args, tree=False, recv_areas=0)
        if cbs_bytes_per_core(flash_decode_cbs(**one)) <= l1_bytes:
            return (f"No k_chunk_size fits with {plan.pieces_per_work} pieces per head (partial_out and one "
                    f"partial_in area alone take {2 * plan.partial_pages * 4 * plan.q_tile_rows // 32} KiB); set max_cores_per_head_batch=1 "
                    f"(one core per (user, KV head), no partials).")
        chunk = _fitting_chunk(plan, replan, tree=False)
        if chunk is not None:
            return (f"No k_chunk_size fits with {plan.pieces_per_work} pieces per head; set "
                    f"max_cores_per_head_batch=1 (no partials) and k_chunk_size={chunk} or lower.")
    return (f"No k_chunk_size fits even with one piece per head: {plan.group_size} q heads per KV head "
            f"({plan.q_tiles} tile rows) at head_dim={plan.head_dim}, head_dim_v={plan.head_dim_v} are too "
            f"many for one core; split the q heads over more devices.")


def check_resources(plan: DecodePlan, l1_bytes: int, cb_args: dict[str, Any], replan: Replan | None) -> None:
    """make_plan's last step: refuse a plan whose buffers overflow `l1_bytes` (bytes per core, firmware
    area included) or whose busiest core needs more runtime args than MAX_RUNTIME_ARGS, naming the knob
    that makes it fit (_l1_advice, which re-plans the call through `replan` with other knobs and the
    flash_decode_cbs arguments `cb_args`). `replan` None (the plan is itself such a re-plan): the overflow
    is refused without advice. Decides nothing else; raises PlanError."""
    used = plan.l1_bytes_per_core
    if used > l1_bytes:
        biggest = sorted(plan.circular_buffers, key=lambda cb: -cb.total_size)[:3]
        detail = ", ".join(f"{cb.name} {cb.total_size // 1024} KiB" for cb in biggest)
        if replan is None:
            raise ResourceError(f"L1 overflow: the plan needs {used // 1024} KiB per core")
        raise ResourceError(
            f"L1 overflow: the plan needs {used // 1024} KiB per core, a Wormhole core has "
            f"{l1_bytes // 1024} KiB (largest buffers: {detail}). {_l1_advice(plan, l1_bytes, cb_args, replan)}"
            + (f" Or fewer new tokens per user (num_tokens now {plan.num_tokens}: {plan.q_tiles} q tile rows "
               f"per KV group)." if plan.num_tokens > 1 else "")
        )
    most = max((len(v) for v in plan.core_pieces.values()), default=0)
    if RUNTIME_ARGS_HEADER + RUNTIME_ARGS_PER_PIECE * most > MAX_RUNTIME_ARGS:
        raise ResourceError(
            f"too much work per core: {most} pieces on one core need "
            f"{RUNTIME_ARGS_HEADER + RUNTIME_ARGS_PER_PIECE * most} runtime args (limit {MAX_RUNTIME_ARGS}); "
            f"use a larger grid or a smaller batch, or lower max_cores_per_head_batch (now {plan.pieces_per_work})."
        )
