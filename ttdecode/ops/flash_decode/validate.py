"""Argument checks of the decode operator, shared by every backend.

Each rule is one function; `validate_decode` runs them all and returns `DecodeInputs`, the
checked description every backend (reference, host, device) works from. Every error is a
``TypeError`` (wrong kind of thing) or ``ValueError`` (wrong value) whose message names the
argument, what was expected and what came:
``"ttdecode: argument 'k': expected ..., got ..."``.

Tensors may be torch tensors, ``ttdecode.core.tensor.TileTensor`` or ``ttnn.Tensor``; only their
shape and format are read, except the small integer tensors (``cur_pos_tensor``, page table),
whose values are read (device-resident ttnn tensors are copied back for that) and range-checked.

Shapes (``B`` users, ``NH`` q heads, ``NKV`` KV heads, ``S`` cache positions, ``D`` head dim):

* ``q`` ``[T, B, NH, D]`` (``1 <= T <= 32`` new tokens per user; ``cur_pos[b]`` is the position of
  user b's last one, ``-1`` or at least ``T - 1``; ``T > 1`` is causal only); ``k`` ``[B, NKV, S, D]`` (``[1, NKV, S, D]`` with ``share_cache``);
  ``v`` ``[B, NKV, S, Dv]`` like ``k`` or None (MLA: ``V = k[..., :head_dim_v]``, ``head_dim_v < D``).
* paged: ``k``/``v`` ``[num_blocks, NKV, block_size, D/Dv]``, ``page_table`` ``[B, max_blocks]``
  int32; ``S = max_blocks * block_size``. The entries a user's positions reach -- the blocks holding the
  keys it attends, ``first // block_size .. cur_pos // block_size`` with ``first`` 0, or with a sliding
  window ``cur_pos - (W + T - 1) + 1`` (its T tokens' windows together) -- must be block ids in
  ``0..num_blocks-1``; the kernels never read the others, which may hold anything (vLLM pads with -1).
  A skipped user (-1) reaches none; non-causal, every user reaches all blocks.
* ``D``, ``Dv`` and ``S`` are multiples of 32 (whole tiles); ``block_size`` a multiple of 32, or 16 as
  ttnn 0.81.1 runs it: in the TILE layout each (block, KV head) of a ``[num_blocks, NKV, 16, D]`` pool is
  one tile row whose rows 16-31 are padding (the DRAM bytes of a block of 32); the reader takes rows
  0-15 of two blocks' tiles into one key tile and never reads the padding. Block 16 wants an even
  ``max_blocks`` (S a multiple of 32) and tile pages (``kv_pages`` "tile").

Formats (storage dtypes; a torch float tensor, float32, float64 or bfloat16, is stored as bfloat16, the
format the kernels take, on every backend: the reference computes on the values the kernels read):

* ``q``: torch float32/float64/bfloat16, or TileTensor/ttnn in bfloat16, bfloat8_b or bfloat4_b. The kernels
  read bfloat16 Q tiles (the reader takes single rows out of them); a block-float Q is converted to
  bfloat16 first, exactly (every bfloat8_b / bfloat4_b value is a bfloat16 value: ``ttdecode.core.formats``),
  on the host runtime (`as_bfloat16_tiles`) and on a device (a ``ttnn.typecast`` before the program). The
  output is bfloat16 either way (ttnn's own op returns it in Q's format, and takes a block-float Q
  only with one KV head).
* ``k``/``v``: torch float32/float64/bfloat16, or TileTensor/ttnn in bfloat16, bfloat8_b or bfloat4_b;
  ``k`` and ``v`` in the same format (one KV format per program).
* ``attn_mask``: like ``q``; a bfloat8_b/bfloat4_b mask is converted to bfloat16 like Q (exactly: the
  stored values, including a group a -inf made all -inf/0, as ttnn's kernels would unpack them).
* ``attention_sink``: torch float32/float64/bfloat16, or TileTensor/ttnn in bfloat16.
* ``cur_pos_tensor``, ``page_table``: int32 (torch or ttnn).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig
from ttdecode.core.formats import DataType, is_block_float
from ttdecode.core.checks import TensorMeta, check_bool, check_int, describe, fail, int_values
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.core.tensor import dequantize
from ttdecode.core.tensor import as_tile_tensor, from_torch, to_torch

__all__ = [
    "TILE",
    "HALF_TILE_BLOCK",
    "TensorMeta",
    "DecodeInputs",
    "describe",
    "validate_decode",
]

TILE = 32
#: The one paged block size below a tile: ttnn's [num_blocks, NKV, 16, D] pool, a padded tile per block.
HALF_TILE_BLOCK = TILE // 2
KV_DTYPES = ("bfloat16", "bfloat8_b", "bfloat4_b")
#: Q and mask formats: the kernels read bfloat16, a block-float one is converted exactly first.
Q_DTYPES = KV_DTYPES


def check_scale(scale: object, head_dim: int) -> float:
    """``scale`` is None (-> 1/sqrt(D)) or a finite non-zero real number that stays finite and non-zero
    in float32 (the kernels multiply the fp32 scores by it); either sign. Returns the scale in force."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise fail("scale", "a real number or None", repr(scale), TypeError)
    value = float(scale)
    if not math.isfinite(value) or value == 0.0:
        raise fail("scale", "a finite non-zero number", scale)
    as_f32 = struct.unpack("<f", struct.pack("<f", value))[0] if abs(value) < 3.5e38 else math.inf
    if not math.isfinite(as_f32) or as_f32 == 0.0:
        raise fail("scale", "a finite non-zero number in float32 range (|scale| between 1.2e-38 and 3.4e38)", scale)
    return value


def check_sliding_window(sliding_window_size: object, is_causal: bool) -> Optional[int]:
    """``sliding_window_size`` is None or a positive int, and only in causal mode."""
    if sliding_window_size is None:
        return None
    w = check_int("sliding_window_size", sliding_window_size)
    if w < 1:
        raise fail("sliding_window_size", "a positive integer or None", w)
    if not is_causal:
        raise fail("sliding_window_size", "None in non-causal mode (the window follows cur_pos)", w)
    return w


# ---- shape and format rules --------------------------------------------------------------------


def check_rank(meta: TensorMeta, ndim: int, layout: str) -> None:
    """``meta`` has ``ndim`` dims (``layout`` names them, e.g. "[1, B, NH, D]")."""
    if len(meta.shape) != ndim:
        raise fail(meta.arg, f"a {ndim}-D tensor {layout}", f"shape {list(meta.shape)}")


#: Most new tokens per user in one decode call (multi-token decode, Q [T, B, NH, D]).
MAX_TOKENS = 32


def check_q(q: TensorMeta) -> tuple[int, int, int, int]:
    """Q is ``[T, B, NH, D]`` with 1 <= T <= 32 new tokens per user, B, NH >= 1 and D a positive
    multiple of 32; returns (T, B, NH, D)."""
    check_rank(q, 4, "[T, B, NH, D]")
    t, b, nh, d = q.shape
    if not 1 <= t <= MAX_TOKENS or b < 1 or nh < 1:
        raise fail("q", f"shape [T, B>=1, NH>=1, D] with 1 <= T <= {MAX_TOKENS} new tokens per user",
                   f"shape {list(q.shape)}")
    if d < TILE or d % TILE:
        raise fail("q", "a head dim D (last dim) that is a positive multiple of 32", f"shape {list(q.shape)}")
    return t, b, nh, d


def check_float_format(meta: TensorMeta, allowed: Sequence[str]) -> None:
    """A float tensor in an accepted format: torch float32/float64/bfloat16, or TileTensor/ttnn in ``allowed``."""
    if meta.kind == "torch":
        if meta.dtype not in ("float32", "float64", "bfloat16"):
            raise fail(meta.arg, "a torch float32, float64 or bfloat16 tensor", f"dtype {meta.dtype}", TypeError)
    elif meta.dtype not in allowed:
        raise fail(meta.arg, f"a {meta.kind} tensor in {' / '.join(allowed)}", f"dtype {meta.dtype}", TypeError)


def check_q_format(q: TensorMeta) -> None:
    """Q: torch float32/bfloat16 (stored as bfloat16) or TileTensor/ttnn bf16/bfp8/bfp4 (module doc)."""
    check_float_format(q, Q_DTYPES)


def check_kv_format(k: TensorMeta, v: Optional[TensorMeta]) -> str:
    """K/V: torch float32/bfloat16 or TileTensor/ttnn bf16/bfp8/bfp4, both in one format; returns it."""
    check_float_format(k, KV_DTYPES)
    if v is not None:
        check_float_format(v, KV_DTYPES)
        if v.storage_dtype != k.storage_dtype:
            raise fail("v", f"the format of k ({k.storage_dtype}; one KV format per program)",
                       f"{v.storage_dtype}", TypeError)
    return k.storage_dtype


def check_gqa(num_heads: int, k: TensorMeta) -> int:
    """K's head count NKV (dim 1) is >= 1 and divides NH; returns NKV."""
    nkv = k.shape[1]
    if nkv < 1 or num_heads % nkv:
        raise fail("k", f"a number of KV heads (dim 1) that divides NH={num_heads}", f"shape {list(k.shape)}")
    return nkv


def check_head_dim(k: TensorMeta, head_dim: int) -> None:
    """K's last dim equals Q's D."""
    if k.shape[3] != head_dim:
        raise fail("k", f"head dim (last dim) D={head_dim} like q", f"shape {list(k.shape)}")


def check_seq_len(k: TensorMeta) -> int:
    """K's positions (dim 2) are a positive multiple of 32 (whole tiles); returns S (or block_size)."""
    s = k.shape[2]
    if s < TILE or s % TILE:
        raise fail("k", "a sequence length (dim 2) that is a positive multiple of 32", f"shape {list(k.shape)}")
    return s


def check_kv_batch(k: TensorMeta, batch: int, share_cache: bool, q: Optional[TensorMeta] = None) -> None:
    """Non-paged K batch is B, or 1 with ``share_cache`` (every user reads KV batch 0). The message
    names both sides: k's batch and q's B with q's shape, since either may be the wrong one (a q given
    as ``[B, 1, NH, D]`` reads as T=B tokens of one user)."""
    want = 1 if share_cache else batch
    if k.shape[0] != want:
        what = "1 (share_cache: all users read KV batch 0)" if share_cache else f"B={batch} like q"
        got = f"shape {list(k.shape)}"
        if q is not None and not share_cache:
            t = q.shape[0]
            got += (f": k's batch {k.shape[0]} against q's B={batch}, dim 1 of q [T, B, NH, D] = "
                    f"{list(q.shape)} ({t} new token{'s' if t > 1 else ''} per user)")
            if batch == 1 and t == k.shape[0]:
                got += (f"; if q holds {t} users of one token each, pass it as [1, {t}, {q.shape[2]}, "
                        f"{q.shape[3]}] (q.transpose(0, 1))")
        raise fail("k", f"batch (dim 0) {what}", got)


def check_v(v: Optional[TensorMeta], k: TensorMeta, head_dim: int, head_dim_v: object) -> int:
    """V matches K in dims 0..2 with Dv a multiple of 32; or V is None and ``head_dim_v`` is
    a multiple of 32 up to D (MLA; ``head_dim_v == D`` means V = K, as ttnn allows). ``head_dim_v``
    with a V must equal Dv. Returns Dv."""
    if v is None:
        if head_dim_v is None:
            raise fail("head_dim_v", "an integer when v is None (MLA: V = k[..., :head_dim_v])", None)
        dv = check_int("head_dim_v", head_dim_v)
        if not (0 < dv <= head_dim) or dv % TILE:
            raise fail("head_dim_v", f"a positive multiple of 32 up to D={head_dim} when v is None (MLA)", dv)
        return dv
    check_rank(v, 4, "like k with last dim Dv")
    if v.shape[:3] != k.shape[:3]:
        raise fail("v", f"the first three dims of k {list(k.shape[:3])}", f"shape {list(v.shape)}")
    dv = v.shape[3]
    if dv < TILE or dv % TILE:
        raise fail("v", "a head dim Dv (last dim) that is a positive multiple of 32", f"shape {list(v.shape)}")
    if head_dim_v is not None and check_int("head_dim_v", head_dim_v) != dv:
        raise fail("head_dim_v", f"None or v's last dim {dv}", head_dim_v)
    return dv


def check_share_cache_not_paged(share_cache: bool, paged: bool) -> None:
    """``share_cache`` cannot be combined with a paged cache (paged caches are per user)."""
    if share_cache and paged:
        raise fail("share_cache", "False with a paged cache (the page table already maps users to blocks)", True)


def check_block_size(k: TensorMeta) -> int:
    """Paged K ``[num_blocks, NKV, block_size, D]``: block_size a positive multiple of 32, or 16 (ttnn's
    padded tile per block: rows 16-31 of each block's tile are padding)."""
    bs = k.shape[2]
    if bs != HALF_TILE_BLOCK and (bs < TILE or bs % TILE):
        raise fail("k", "a paged cache [num_blocks, NKV, block_size, D] with block_size 16 or a positive "
                   "multiple of 32 (a K/V tile holds 32 positions)", f"shape {list(k.shape)}")
    return bs


def check_half_tile_blocks(block_size: int, max_blocks: int) -> None:
    """Block 16: an even number of page-table entries per user (S = max_blocks x 16 a multiple of 32, whole
    key tiles), in tile or key-row pages."""
    if block_size != HALF_TILE_BLOCK:
        return
    if max_blocks % 2:
        raise fail("page_table", f"an even number of entries per user with block_size {HALF_TILE_BLOCK} "
                   f"(S = max_blocks x 16 a multiple of 32)", f"{max_blocks} entries")


def on_device(meta: TensorMeta) -> bool:
    """A ttnn tensor in device storage (its values would need a read back)."""
    if meta.kind != "ttnn":
        return False
    import ttnn  # a ttnn tensor came in, so ttnn is imported already

    return bool(ttnn.is_tensor_storage_on_device(meta.obj))


def check_page_table(page_table: object, batch: int, num_blocks: int,
                     validate_values: bool = True) -> tuple[TensorMeta, Optional[torch.Tensor]]:
    """Page table ``[B, max_blocks]`` int32 (torch or ttnn). Returns its meta and its values (int64
    ``[B, max_blocks]``; the ids are checked by `check_page_table_reach` once the positions are known); a
    device tensor's values are not read (None) unless `validate_values` (the kernels guard: a user with a
    page id outside the pool among the blocks it reaches is skipped)."""
    if page_table is None:
        raise fail("page_table", f"an int32 tensor [B={batch}, max_blocks]", None, TypeError)
    meta = describe("page_table", page_table)
    if meta.kind == "tile" or meta.dtype != "int32":
        raise fail("page_table", "an int32 torch or ttnn tensor", f"{meta.kind} tensor of dtype {meta.dtype}",
                   TypeError)
    if len(meta.shape) != 2 or meta.shape[0] != batch or meta.shape[1] < 1:
        raise fail("page_table", f"shape [B={batch}, max_blocks>=1]", f"shape {list(meta.shape)}")
    if on_device(meta) and not validate_values:
        return meta, None
    return meta, int_values(meta)


def reached_blocks(position: int, block_size: int, window: Optional[int], tokens: int) -> range:
    """The page-table entries of a user at `position` (its last token's) the kernels read: the blocks
    holding the keys its T = `tokens` tokens attend, from the first key of the span (0, or with a sliding
    window of W keys ``position - (W + T - 1) + 1``, the tokens' windows together) to `position`; none for
    a skipped user (-1). (kernels/flash_decode/reader.cpp reads K/V tiles window_first_tile..cur_pos / 32
    only, and its guard checks exactly these entries.)"""
    if position < 0:
        return range(0)
    first = 0 if not window else max(0, position - (window + tokens - 1) + 1)
    return range(first // block_size, position // block_size + 1)


def check_page_table_reach(table: torch.Tensor, positions: Sequence[int], block_size: int, num_blocks: int,
                           window: Optional[int], tokens: int) -> None:
    """Every entry a user reaches (`reached_blocks`) is a block id in ``0..num_blocks-1``; the entries
    beyond are never read and may hold anything (-1 padding). Raises ValueError naming the entry."""
    for b, pos in enumerate(positions):
        reach = reached_blocks(int(pos), block_size, window, tokens)
        for j in reach:
            value = int(table[b, j])
            if not 0 <= value < num_blocks:
                raise fail(f"page_table[{b}, {j}]",
                           f"a block id in 0..{num_blocks - 1} (user {b} at position {int(pos)} reads entries "
                           f"{reach.start}..{reach.stop - 1}; the entries beyond may hold anything)", value)


# ---- positions ------------------------------------------------------------------------------


def _check_position_values(arg: str, pos: torch.Tensor, seq_len: int, tokens: int = 1) -> tuple[int, ...]:
    bad = (pos < -1) | (pos > seq_len - 1)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise fail(f"{arg}[{i}]", f"a position in -1..{seq_len - 1} (S={seq_len}; -1 skips the user)", int(pos[i]))
    short = (pos >= 0) & (pos < tokens - 1)
    if bool(short.any()):
        i = int(short.nonzero()[0, 0])
        raise fail(f"{arg}[{i}]", f"-1 or the position of the last of T={tokens} new tokens (>= {tokens - 1})",
                   int(pos[i]))
    return tuple(int(p) for p in pos)


def check_cur_pos(cur_pos: object, batch: int, seq_len: int, tokens: int = 1) -> tuple[int, ...]:
    """``cur_pos``: a sequence of B ints (or a 1-D integer torch tensor) in ``-1..S-1``."""
    if isinstance(cur_pos, torch.Tensor):
        if cur_pos.is_floating_point() or cur_pos.is_complex() or cur_pos.dtype == torch.bool:
            raise fail("cur_pos", "a list of ints or a 1-D integer tensor", f"dtype {cur_pos.dtype}", TypeError)
        if cur_pos.dim() != 1:
            raise fail("cur_pos", f"a 1-D tensor of length B={batch}", f"shape {list(cur_pos.shape)}")
        pos = cur_pos.detach().to("cpu", torch.int64)
    elif isinstance(cur_pos, (str, bytes)) or not isinstance(cur_pos, Sequence):
        raise fail("cur_pos", "a list of ints or a 1-D integer tensor", type(cur_pos).__name__, TypeError)
    else:
        pos = torch.tensor([check_int(f"cur_pos[{i}]", p) for i, p in enumerate(cur_pos)], dtype=torch.int64)
    if pos.numel() != batch:
        raise fail("cur_pos", f"one position per user (length B={batch})", f"length {pos.numel()}")
    return _check_position_values("cur_pos", pos, seq_len, tokens)


def check_cur_pos_tensor(cur_pos_tensor: object, batch: int, seq_len: int,
                         tokens: int = 1, validate_values: bool = True) -> tuple[TensorMeta, Optional[tuple[int, ...]]]:
    """``cur_pos_tensor``: an int32 torch or ttnn tensor ``[B]`` with values in ``-1..S-1``. A device
    tensor's values are not read (None) unless `validate_values` (the kernels skip a user whose
    position is outside the cache)."""
    meta = describe("cur_pos_tensor", cur_pos_tensor)
    if meta.kind == "tile" or meta.dtype != "int32":
        raise fail("cur_pos_tensor", "an int32 torch or ttnn tensor",
                   f"{meta.kind} tensor of dtype {meta.dtype}", TypeError)
    if meta.shape != (batch,):
        raise fail("cur_pos_tensor", f"shape [B={batch}]", f"shape {list(meta.shape)}")
    if on_device(meta) and not validate_values:
        return meta, None
    return meta, _check_position_values("cur_pos_tensor", int_values(meta), seq_len, tokens)


def check_positions_mode(is_causal: bool, cur_pos: object, cur_pos_tensor: object) -> None:
    """Causal: exactly one of ``cur_pos`` / ``cur_pos_tensor``. Non-causal: neither (all S attended).
    (An empty ``cur_pos`` list, ttnn's default, counts as not given.)"""
    has_list, has_tensor = cur_pos is not None, cur_pos_tensor is not None
    if is_causal:
        if has_list and has_tensor:
            raise fail("cur_pos_tensor", "None when cur_pos is given (exactly one of the two)", "a tensor")
        if not (has_list or has_tensor):
            raise fail("cur_pos", "the B positions in causal mode (or cur_pos_tensor)", None)
    elif has_list or has_tensor:
        arg = "cur_pos" if has_list else "cur_pos_tensor"
        raise fail(arg, "None in non-causal mode (all S positions are attended)", "positions")


# ---- optional tensors ------------------------------------------------------------------------


def check_attn_mask(attn_mask: object, is_causal: bool, batch: int, num_heads: int, seq_len: int) -> Optional[TensorMeta]:
    """``attn_mask``: non-causal only, ``[B or 1, 1, NH, S]`` float (additive)."""
    if attn_mask is None:
        return None
    if is_causal:
        raise fail("attn_mask", "None in causal mode (use is_causal=False for a mask)", "a tensor")
    meta = describe("attn_mask", attn_mask)
    check_float_format(meta, KV_DTYPES)
    shape = list(meta.shape)
    if len(shape) != 4 or shape[0] not in (1, batch) or shape[1:] != [1, num_heads, seq_len]:
        raise fail("attn_mask", f"shape [B={batch} or 1, 1, NH={num_heads}, S={seq_len}]", f"shape {shape}")
    return meta


def check_attention_sink(attention_sink: object, num_heads: int) -> Optional[TensorMeta]:
    """``attention_sink``: ``[NH]`` or ``[NH, 32]`` (column 0 holds each head's sink logit)."""
    if attention_sink is None:
        return None
    meta = describe("attention_sink", attention_sink)
    check_float_format(meta, ("bfloat16",))
    if meta.shape not in ((num_heads,), (num_heads, TILE)):
        raise fail("attention_sink", f"shape [NH={num_heads}] or [NH={num_heads}, 32]", f"shape {list(meta.shape)}")
    return meta


def check_k_chunk_size(program_config: SDPAProgramConfig, seq_len: int) -> None:
    """A fixed ``k_chunk_size`` (> 0) divides S (the cache is cut into whole chunks)."""
    k = program_config.k_chunk_size
    if k and seq_len % k:
        raise fail("program_config.k_chunk_size", f"a divisor of S={seq_len} (or 0 = dynamic)", k)


def check_memory_config(memory_config: object) -> None:
    """``memory_config`` (the output's placement, device backend): None (interleaved DRAM), an interleaved
    DRAM or L1 ``ttnn.MemoryConfig``, or a height-sharded L1 one with a shard spec (e.g. tt_transformers'
    ``[32 padded heads, Dv]`` shards over B cores). The writer writes interleaved DRAM; the device step
    moves the output into the placement asked for (``ttnn.to_memory_config``, a device op) and checks
    there that a sharded spec holds the output's shape. Width/block sharding, DRAM sharding and a
    sharded config without a shard spec are refused by name.
    """
    if memory_config is None:
        return
    if type(memory_config).__name__ != "MemoryConfig":
        raise fail("memory_config", "None or a ttnn.MemoryConfig", type(memory_config).__name__, TypeError)
    buffer_type = str(getattr(memory_config, "buffer_type", "?")).rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    layout = str(getattr(memory_config, "memory_layout", "?")).rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    if layout == "INTERLEAVED" and buffer_type in ("DRAM", "L1"):
        return
    if (buffer_type, layout) != ("L1", "HEIGHT_SHARDED"):
        raise fail("memory_config",
                   "an interleaved DRAM or L1 ttnn.MemoryConfig, or a height-sharded L1 one (width/block "
                   "and DRAM sharding are not implemented)", f"buffer_type {buffer_type}, memory_layout {layout}")
    if getattr(memory_config, "shard_spec", None) is None:
        raise fail("memory_config", "a height-sharded L1 ttnn.MemoryConfig with a shard_spec (the output's "
                   "placement: shard shape and cores)", "one without a shard_spec")


# ---- everything together ---------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeInputs:
    """Checked arguments of one decode call (shapes as in the module doc)."""

    q: TensorMeta
    k: TensorMeta
    v: Optional[TensorMeta]
    num_tokens: int  # T new tokens per user (Q [T, B, NH, D])
    batch: int
    num_heads: int
    num_kv_heads: int
    seq_len: int
    head_dim: int
    head_dim_v: int
    kv_dtype: str
    paged: bool
    page_table: Optional[TensorMeta]
    page_table_values: Optional[torch.Tensor]  # int64 [B, max_blocks]; None: on the device, not read
    block_size: Optional[int]
    is_causal: bool
    cur_pos: Optional[tuple[int, ...]]  # the positions as given in the list
    cur_pos_tensor: Optional[TensorMeta]
    positions: Optional[tuple[int, ...]]  # from either source; None in non-causal mode or on the device (not read)
    attn_mask: Optional[TensorMeta]
    attention_sink: Optional[TensorMeta]
    scale: float
    sliding_window_size: Optional[int]
    share_cache: bool
    return_lse: bool
    program_config: SDPAProgramConfig
    compute_kernel_config: ComputeKernelConfig
    memory_config: Any


def validate_decode(q: object, k: object, v: object, options: DecodeOptions, *,
                    read_values: Optional[bool] = None) -> DecodeInputs:
    """Run every rule on Q, K, V and `options`; return the checked inputs or raise TypeError/ValueError
    naming the argument.

    Values that live on the device (a ttnn device ``cur_pos_tensor`` or page table) are not read back
    unless `read_values` (None: ``options.validate_values``, checked to be a bool): their ``positions``
    / ``page_table_values`` are then None and the kernels guard (a position outside ``-1..S-1`` or a
    page id outside the pool skips the user). Host inputs (torch tensors, lists) are always checked.
    ``options.backend`` is not looked at (the caller's choice).

    ``share_cache=None`` (ttnn's default) means False; an empty ``cur_pos`` list (ttnn's default)
    means "not given".
    """
    o = options
    paged, page_table, cur_pos, cur_pos_tensor = o.paged, o.page_table, o.cur_pos, o.cur_pos_tensor
    causal = check_bool("is_causal", o.is_causal)
    share = check_bool("share_cache", False if o.share_cache is None else o.share_cache)
    lse = check_bool("return_lse", o.return_lse)
    read = check_bool("validate_values", o.validate_values) if read_values is None else read_values
    pconf = SDPAProgramConfig.coerce(o.program_config)
    cconf = ComputeKernelConfig.coerce(o.compute_kernel_config)
    memory_config = o.memory_config
    check_memory_config(memory_config)
    if isinstance(cur_pos, (list, tuple)) and len(cur_pos) == 0:
        cur_pos = None

    qm = describe("q", q)
    num_tokens, batch, num_heads, head_dim = check_q(qm)
    if num_tokens > 1 and not causal:
        raise fail("q", "one token per user [1, B, NH, D] in non-causal mode (multi-token decode is causal)",
                   f"shape {list(qm.shape)}")
    check_q_format(qm)
    km = describe("k", k)
    check_rank(km, 4, "[num_blocks, NKV, block_size, D]" if paged else "[B, NKV, S, D]")
    vm = None if v is None else describe("v", v)
    kv_dtype = check_kv_format(km, vm)
    check_head_dim(km, head_dim)
    nkv = check_gqa(num_heads, km)
    dv = check_v(vm, km, head_dim, o.head_dim_v)

    check_share_cache_not_paged(share, paged)
    table_meta, table = None, None
    block_size = None
    if paged:
        block_size = check_block_size(km)
        table_meta, table = check_page_table(page_table, batch, km.shape[0], read)
        check_half_tile_blocks(block_size, table_meta.shape[1])
        seq_len = table_meta.shape[1] * block_size
    else:
        seq_len = check_seq_len(km)
        check_kv_batch(km, batch, share, qm)

    check_positions_mode(causal, cur_pos, cur_pos_tensor)
    pos_list, pos_meta, positions = None, None, None
    if cur_pos is not None:
        pos_list = positions = check_cur_pos(cur_pos, batch, seq_len, num_tokens)
    if cur_pos_tensor is not None:
        pos_meta, positions = check_cur_pos_tensor(cur_pos_tensor, batch, seq_len, num_tokens, read)

    window = check_sliding_window(o.sliding_window_size, causal)
    if table is not None:
        # the entries the users reach (non-causal: all S keys); unknown positions (a device cur_pos_tensor
        # not read back): the kernels guard the same entries
        reach_from = positions if causal else (seq_len - 1,) * batch
        if reach_from is not None:
            check_page_table_reach(table, reach_from, block_size, km.shape[0], window, num_tokens)
    mask = check_attn_mask(o.attn_mask, causal, batch, num_heads, seq_len)
    sink = check_attention_sink(o.attention_sink, num_heads)
    scale_f = check_scale(o.scale, head_dim)
    check_k_chunk_size(pconf, seq_len)

    return DecodeInputs(
        q=qm, k=km, v=vm, num_tokens=num_tokens, batch=batch, num_heads=num_heads, num_kv_heads=nkv, seq_len=seq_len,
        head_dim=head_dim, head_dim_v=dv, kv_dtype=kv_dtype, paged=paged, page_table=table_meta,
        page_table_values=table, block_size=block_size, is_causal=causal, cur_pos=pos_list,
        cur_pos_tensor=pos_meta, positions=positions, attn_mask=mask, attention_sink=sink,
        scale=scale_f, sliding_window_size=window, share_cache=share, return_lse=lse,
        program_config=pconf, compute_kernel_config=cconf, memory_config=memory_config,
    )


# ---- the values the kernels read ----------------------------------------------------------------


def dequantize_input(meta: TensorMeta) -> torch.Tensor:
    """The exact values the kernels would read, as float64 (torch floats pass through bfloat16)."""
    return dequantize(meta.obj, default_dtype=DataType.bfloat16)


def as_bfloat16_tiles(meta: TensorMeta) -> Any:
    """The tensor as the bfloat16 tiles the kernels read (a ``ttdecode.core.tensor.TileTensor``): a torch float
    tensor packed in bfloat16; a bfloat16 TileTensor / host ttnn tensor as it is; a bfloat8_b / bfloat4_b
    one converted exactly (its decoded values are bfloat16 values: ``ttdecode.core.formats`` decodes a code to
    at most 6 fraction bits with its exponent; pinned by tests/test_formats.py). The host runtime's half
    of the conversion a device does with ``ttnn.typecast`` (Q, attn_mask)."""
    tiles = as_tile_tensor(meta.obj, DataType.bfloat16)
    if not is_block_float(tiles.dtype):
        return tiles
    return from_torch(to_torch(tiles).to(torch.float32), DataType.bfloat16)


def sink_values(meta: TensorMeta) -> torch.Tensor:
    """The sink logits the kernels read, float32 [NH] or [NH, 32] (a torch [NH] goes through bf16)."""
    obj = meta.obj
    if isinstance(obj, torch.Tensor) and obj.dim() == 1:
        return obj.detach().cpu().to(torch.bfloat16).to(torch.float32)
    return dequantize_input(meta).to(torch.float32)
