"""The planner's checks of a `make_plan` call (sizes, chunking, cache, positions), in one fixed order: a call
with several faults is refused for the first. Their errors are `PlanError` (a ValueError naming the knob), not
the argument errors of `validate.py`: `make_plan` is also called directly, with sizes rather than tensors."""

from __future__ import annotations

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import MathFidelity
from ttdecode.core.split import CHUNK_CAPS, SMALL_CHUNK_TILES
from ttdecode.ops.flash_decode.validate import HALF_TILE_BLOCK, MAX_TOKENS, TILE

#: Deepest reduction tree the kernels support (2^6 = 64 pieces per work).
MAX_ROUNDS = 6
#: The K/V tile formats the kernels read.
KV_TILE_FORMATS = frozenset({DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b})


class PlanError(ValueError):
    """A decode plan that cannot run; the message names the knob to change."""


def check_plan_sizes(*, batch, num_q_heads: int, num_kv_heads: int, seq_len: int, head_dim: int,
                     head_dim_v: int, mla, math_fidelity, kv_dtype) -> None:
    """Refuse shapes and types the kernels cannot take: B, NH, NKV, S, D, Dv positive ints (NH a multiple
    of NKV; S, D, Dv multiples of 32 elements), `mla` a bool with Dv <= D, a known math fidelity and a
    K/V tile format (bfloat16, bfloat8_b or bfloat4_b). Decides nothing; raises PlanError."""
    for name, v in (("batch", batch), ("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads),
                    ("seq_len", seq_len), ("head_dim", head_dim), ("head_dim_v", head_dim_v)):
        if not isinstance(v, int) or v <= 0:
            raise PlanError(f"{name}: expected a positive int, got {v!r}")
    if num_q_heads % num_kv_heads:
        raise PlanError(f"num_q_heads: expected a multiple of num_kv_heads={num_kv_heads}, got {num_q_heads}")
    for name, v in (("head_dim", head_dim), ("head_dim_v", head_dim_v), ("seq_len", seq_len)):
        if v % TILE:
            raise PlanError(f"{name}: expected a multiple of {TILE}, got {v}")
    if not isinstance(mla, bool):
        raise PlanError(f"mla: expected a bool, got {mla!r}")
    if mla and head_dim_v > head_dim:
        raise PlanError(f"head_dim_v: expected <= head_dim={head_dim} with mla (V = K[..., :head_dim_v]), "
                        f"got {head_dim_v}")
    fidelities = [f.value for f in MathFidelity]
    if not isinstance(math_fidelity, str) or math_fidelity not in fidelities:
        raise PlanError(f"math_fidelity: expected one of {fidelities}, got {math_fidelity!r}")
    if kv_dtype not in KV_TILE_FORMATS:
        raise PlanError(f"kv_dtype: expected bfloat16, bfloat8_b or bfloat4_b, got {kv_dtype}")


def check_plan_chunking(*, seq_len: int, num_q_heads: int, num_kv_heads: int, num_tokens, k_chunk_size: int,
                        min_chunk_tiles, chunk_cap, prescale_q, q_tile_rows) -> None:
    """Refuse chunk and q-tile knobs out of range: `k_chunk_size` (keys) 0 or a power-of-two multiple of 32
    dividing S; `min_chunk_tiles` and `chunk_cap` (key tiles) for dynamic chunks only, from their allowed
    sets; `prescale_q` a bool; `q_tile_rows` None, 8, 16 or 32, and 8 or 16 only when num_tokens x group
    size q rows fit. Decides nothing; raises PlanError."""
    if k_chunk_size:
        if k_chunk_size < TILE or k_chunk_size % TILE or k_chunk_size & (k_chunk_size - 1):
            raise PlanError(
                f"k_chunk_size: expected 0 (dynamic) or a power of two multiple of 32, got {k_chunk_size}"
            )
        if seq_len % k_chunk_size:
            raise PlanError(f"k_chunk_size: seq_len={seq_len} is not a multiple of k_chunk_size={k_chunk_size}")
    if min_chunk_tiles is not None:
        if (not isinstance(min_chunk_tiles, int) or not 1 <= min_chunk_tiles <= SMALL_CHUNK_TILES
                or min_chunk_tiles & (min_chunk_tiles - 1)):
            raise PlanError(f"min_chunk_tiles: expected None or a power of two 1..{SMALL_CHUNK_TILES}, "
                            f"got {min_chunk_tiles!r}")
        if k_chunk_size and min_chunk_tiles > 1:
            raise PlanError(f"min_chunk_tiles: applies to dynamic chunks only (k_chunk_size 0), got "
                            f"{min_chunk_tiles} with k_chunk_size={k_chunk_size}")
    if not isinstance(prescale_q, bool):
        raise PlanError(f"prescale_q: expected a bool, got {prescale_q!r}")
    if q_tile_rows is not None and (isinstance(q_tile_rows, bool) or q_tile_rows not in (8, 16, 32)):
        raise PlanError(f"q_tile_rows: expected None, 8, 16 or 32, got {q_tile_rows!r}")
    if q_tile_rows in (8, 16) and num_tokens * (num_q_heads // num_kv_heads) > q_tile_rows:
        raise PlanError(f"q_tile_rows: {q_tile_rows} holds at most {q_tile_rows} q rows, but num_tokens x group size = "
                        f"{num_tokens} x {num_q_heads // num_kv_heads} = {num_tokens * (num_q_heads // num_kv_heads)}")
    if chunk_cap is not None:
        if not isinstance(chunk_cap, int) or isinstance(chunk_cap, bool) or chunk_cap not in CHUNK_CAPS:
            raise PlanError(f"chunk_cap: expected None or one of {sorted(CHUNK_CAPS)} tiles, got {chunk_cap!r}")
        if k_chunk_size:
            raise PlanError(f"chunk_cap: applies to dynamic chunks only (k_chunk_size 0), got {chunk_cap} with "
                            f"k_chunk_size={k_chunk_size}")


def check_plan_cache(*, seq_len: int, block_size, num_blocks, share_cache: bool, sliding_window_size) -> int:
    """Refuse a malformed paged cache (`block_size` keys, a multiple of 32 or 16 (ttnn's padded tile per
    block, in tile or key-row pages), dividing S, and `num_blocks`: both or neither, positive ints, not shared)
    or sliding window. Returns the window in keys (0 = none)."""
    if (block_size is None) != (num_blocks is None):
        raise PlanError(
            f"block_size, num_blocks: expected both (a paged cache) or neither, got block_size={block_size!r}, "
            f"num_blocks={num_blocks!r}"
        )
    if block_size is not None:
        for name, v in (("block_size", block_size), ("num_blocks", num_blocks)):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise PlanError(f"{name}: expected a positive int, got {v!r}")
        if block_size % TILE and block_size != HALF_TILE_BLOCK:
            raise PlanError(f"block_size: expected a multiple of {TILE} or {HALF_TILE_BLOCK}, got {block_size}")
        if seq_len % block_size:
            raise PlanError(
                f"seq_len: expected a multiple of block_size={block_size} (max_blocks x block_size), got {seq_len}"
            )
        if share_cache:
            raise PlanError("share_cache: expected False with a paged cache, got True")
    window = 0 if sliding_window_size is None else sliding_window_size
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise PlanError(f"sliding_window_size: expected None or a positive int, got {sliding_window_size!r}")
    return window


def check_plan_positions(*, batch: int, seq_len: int, cur_pos, window: int, max_cores_per_head_batch: int,
                         num_tokens, is_causal, attn_mask_batch) -> tuple[int, ...] | None:
    """Refuse a bad piece limit (`max_cores_per_head_batch` 1..64), token count (1..32), causal mode or
    attn_mask batch (0, 1 or B; non-causal only), and positions: B of them, each -1 (skip) or
    num_tokens - 1..S - 1. Returns the positions as a tuple of ints (keys), S - 1 for every user when
    non-causal, or None (read on the device)."""
    if not 1 <= max_cores_per_head_batch <= 1 << MAX_ROUNDS:
        raise PlanError(
            f"max_cores_per_head_batch: expected 1..{1 << MAX_ROUNDS}, got {max_cores_per_head_batch}"
        )
    if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or not 1 <= num_tokens <= MAX_TOKENS:
        raise PlanError(f"num_tokens: expected 1..{MAX_TOKENS} new tokens per user, got {num_tokens!r}")
    if not isinstance(is_causal, bool):
        raise PlanError(f"is_causal: expected a bool, got {is_causal!r}")
    if not isinstance(attn_mask_batch, int) or isinstance(attn_mask_batch, bool) or attn_mask_batch not in (0, 1, batch):
        raise PlanError(f"attn_mask_batch: expected 0 (no mask), 1 or B={batch}, got {attn_mask_batch!r}")
    if attn_mask_batch and is_causal:
        raise PlanError("attn_mask_batch: expected 0 in causal mode (a mask needs is_causal=False), "
                        f"got {attn_mask_batch}")
    if not is_causal:
        if cur_pos is not None and any(int(p) != seq_len - 1 for p in cur_pos):
            raise PlanError(f"cur_pos: expected None in non-causal mode (every user attends all S={seq_len} keys), "
                            f"got {list(cur_pos)}")
        if window:
            raise PlanError(f"sliding_window_size: expected None in non-causal mode, got {window}")
        if num_tokens != 1:
            raise PlanError(f"num_tokens: expected 1 in non-causal mode (multi-token decode is causal), got {num_tokens}")
        cur_pos = [seq_len - 1] * batch
    if cur_pos is not None:
        cur_pos = tuple(int(p) for p in cur_pos)
        if len(cur_pos) != batch:
            raise PlanError(f"cur_pos: expected {batch} positions (one per user), got {len(cur_pos)}")
        for b, pos in enumerate(cur_pos):
            if not -1 <= pos < seq_len:
                raise PlanError(f"cur_pos[{b}]: expected -1..{seq_len - 1} (seq_len={seq_len}), got {pos}")
            if 0 <= pos < num_tokens - 1:
                raise PlanError(f"cur_pos[{b}]: expected -1 or at least num_tokens - 1 = {num_tokens - 1} (the "
                                f"position of the last of {num_tokens} new tokens), got {pos}")
    return cur_pos
