"""The FlashDecode program factory: a `DecodePlan` becomes one `Program` (see ttdecode/core/program_description.py).

`build_program` is a pure function of the plan and the inputs: three kernels (reader, writer,
compute from ``kernels/``) on every core that runs a piece, the plan's circular buffers and one
semaphore per tree height level on those cores, and the DRAM tensors:

==========  ==========================================  =========  =================================
name        shape                                       layout     format
==========  ==========================================  =========  =================================
q           [T, B, NH, D] (T new tokens per user)       tile       bfloat16
k, v        [B or 1, NKV, S, D] / [.., Dv]              tile       the plan's kv_dtype
            paged: [num_blocks, NKV, block_size, D/Dv]
            MLA (plan.mla): no v; V = k[..., :Dv]
cur_pos     [B] int32 (-1 skips a user)                 row-major  4-byte words (DataType.float32)
page_table  [B, max_blocks] int32 (paged only)          row-major  4-byte words, one page per user
sink        [NH, 32] (attention sink only; column 0)    tile       bfloat16
attn_mask   [B or 1, 1, NH, S] (attn_mask only)         tile       bfloat16 (additive, -inf masks)
out         [T, B, NH, Dv]                              tile       bfloat16 (output)
lse         [B * NKV, q_tiles * 32] (return_lse only)   row-major  float32 (output; T x g rows, token-major)
==========  ==========================================  =========  =================================

Positions reach the kernels through the ``cur_pos`` tensor (``cur_pos_tensor``, or the host
runtime's image of a list), or, with ``positions_in_args`` (a device call given a list), as the
reader's common runtime args: nothing is uploaded. The kernels derive every chunk range from them,
so the same program serves every decode step. The reader guards them: a position outside -1..S-1
(or a page id outside the pool in the blocks a user attends) skips the user.

Common runtime arguments (the same on every core; a cached program patches them per call):

- reader:  q, k, v (0 with MLA), cur_pos (0 with positions_in_args), page_table (0 without paging),
  sink (0 without a sink), attn_mask (0 without a mask) addresses; with positions_in_args the B
  positions;
- writer:  out, lse (0 without LSE) addresses.

Runtime arguments (per core; ``n`` = pieces on the core, in slot order):

- reader:  n, then (user, kv head, piece index) per piece;
- writer:  n, then (user, kv head, piece index, parent NoC x, parent NoC y, parent's area) per piece
  (zeros for a root);
- compute: n, then (user, piece index) per piece.

Compile-time arguments are named (``kernel_args.compile_args``; the kernels read them with
``get_named_compile_time_arg_val("name")``). The inputs' checks and byte images: ``program_inputs``; the
kernels' argument lists: ``kernel_args``.

`run_flash_decode` runs the program on a backend and decodes the output tensors.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ttdecode.core import formats
from ttdecode.core.formats import DataType
from ttdecode.core.split import TILE
from ttdecode.ops.flash_decode.plan import DecodePlan, power_of_two_scale
from ttdecode.core.program_description import (
    kv_cache_tensor,
    Arg,
    UnpackToDestMode,
    unpack_to_dest_modes,
    CircularBuffer,
    ComputeSettings,
    CoreCoord,
    CoreRangeSet,
    DramTensor,
    Kernel,
    KernelKind,
    NocX,
    NocY,
    Program,
    Semaphore,
)
from ttdecode.core.tensor import TileTensor
from ttdecode.core.paths import operator_kernels
from ttdecode.ops.flash_decode.kernel_args import common_args, compile_args, runtime_args
from ttdecode.ops.flash_decode.program_inputs import (
    FactoryError, Positions, expect_tile_tensor, kv_shapes, mask_shape, mask_tiles, page_table_bytes, positions_bytes,
    sink_tiles,
)
from ttdecode.ops.flash_decode.validate import HALF_TILE_BLOCK
from ttdecode.runtime import run_program

__all__ = ["build_program", "build_program_for_device", "run_flash_decode", "decode_outputs", "decode_lse_rows",
           "kernel_sources", "QShards"]

#: Q (or the output) held height-sharded in L1: (the holder cores in shard order, tiles per shard). None:
#: interleaved DRAM.
QShards = Optional[tuple[tuple[CoreCoord, ...], int]]


def kernel_sources() -> dict[str, Path]:
    """Paths of reader.cpp, writer.cpp and compute.cpp (the package's ``kernels/flash_decode/``)."""
    return operator_kernels("flash_decode", FactoryError)


# ---- the program --------------------------------------------------------------------------------


def build_program(
    plan: DecodePlan,
    *,
    q: TileTensor,
    k: TileTensor,
    v: Optional[TileTensor],
    cur_pos_source: Optional[Positions],
    scale: float,
    compute: ComputeSettings,
    exp_approx: bool = False,
    page_table: Optional[torch.Tensor] = None,
    attention_sink: Optional[torch.Tensor] = None,
    attn_mask: Any = None,
    positions_in_args: bool = False,
    q_shards: QShards = None,
    out_shards: QShards = None,
) -> Program:
    """The one FlashDecode program of a decode step, carrying its input bytes (the host runtime).
    `positions_in_args`: the positions travel as the reader's common runtime args (the device form of a
    list), not as the cur_pos tensor; the same outputs. `q_shards` / `out_shards`: Q read from / the output
    written to L1 shards (`_program`).

    q/k/v: tile tensors in the plan's shapes and formats (paged: [num_blocks, NKV, block_size, D]);
    v is None for an MLA plan (V = k[..., :Dv], read out of K by the kernels);
    cur_pos_source: the positions (list or int tensor; None to take the plan's); scale: the softmax
    scale; compute: the compute-kernel settings, whose fp32 accumulation must be the plan's (it
    sized DST blocks); exp_approx: the softmax's exp in approximate mode (SDPAProgramConfig's
    exp_approx_mode, resolved; a compile-time arg of the compute kernel); page_table: a paged plan's integer tensor [B, max_blocks] (None otherwise).
    """
    b, nh = plan.batch, plan.num_q_heads
    k_shape, v_shape = kv_shapes(plan)
    q = expect_tile_tensor("q", q, (plan.num_tokens, b, nh, plan.head_dim), DataType.bfloat16)
    k = expect_tile_tensor("k", k, k_shape, plan.kv_dtype)
    pos_image = positions_bytes(plan, cur_pos_source)
    images = {"q": q.data, "k": k.data, "cur_pos": pos_image}
    if plan.mla:
        if v is not None:
            raise FactoryError("v: expected None for an MLA plan (V = k[..., :head_dim_v]), got a tensor")
    else:
        images["v"] = expect_tile_tensor("v", v, v_shape, plan.kv_dtype).data
    table_image = page_table_bytes(plan, page_table)  # also refuses a page table for a contiguous plan
    if plan.paged:
        images["page_table"] = table_image
    if plan.attention_sink:
        images["sink"] = sink_tiles(plan, attention_sink).data
    elif attention_sink is not None:
        raise FactoryError("attention_sink: expected None (the plan has no sink), got a tensor")
    if plan.has_attn_mask:
        images["attn_mask"] = mask_tiles(plan, attn_mask).data
    elif attn_mask is not None:
        raise FactoryError("attn_mask: expected None (the plan has no mask), got a tensor")
    positions = list(struct.unpack(f"<{plan.batch}i", pos_image)) if positions_in_args else None
    return _program(plan, scale=scale, compute=compute, exp_approx=exp_approx, images=images, positions=positions,
                    q_shards=q_shards, out_shards=out_shards)


def build_program_for_device(plan: DecodePlan, *, scale: float, compute: ComputeSettings,
                             exp_approx: bool = False, positions: Optional[Sequence[int]] = None,
                             q_shards: QShards = None, out_shards: QShards = None) -> Program:
    """The same program without input bytes: on a device the inputs already live in DRAM (or, with
    `q_shards`, Q in the L1 shards of its holders).
    `positions` (B ints): positions_in_args, the positions travel as the reader's common runtime args
    (no cur_pos tensor; a cached program patches them per call); None: the kernels read the cur_pos tensor."""
    return _program(plan, scale=scale, compute=compute, exp_approx=exp_approx, images=None, positions=positions,
                    q_shards=q_shards, out_shards=out_shards)


def _bf16_tiles(name: str, shape: tuple[int, ...], data: Optional[bytes], shards: QShards,
                is_output: bool = False) -> DramTensor:
    """Q [T, B, NH, D] or the output [T, B, NH, Dv], bf16 tiles: interleaved in DRAM, or height-sharded in
    L1 on `shards`' holders."""
    bf16 = DataType.bfloat16
    cores, pages = shards if shards is not None else ((), 0)
    return DramTensor(name, bf16, formats.tile_size(bf16), formats.num_tiles(shape), shape, "tile", data,
                      is_output=is_output, shard_cores=tuple(cores), shard_pages=pages)


def _shard_defines(prefix: str, shards: QShards, common: list[Arg]) -> dict[str, str]:
    """With a tensor in L1 shards: a kernel's defines (`prefix`_SHARDS: shard count, _SHARD_PAGES: tiles per
    shard, _SHARD_ARGS: the common-arg index of the holders' NoC coordinates) and those coordinates
    appended to `common` (x, y per holder)."""
    if shards is None:
        return {}
    cores, pages = shards
    first = len(common)
    common += [a for c in cores for a in (NocX(c), NocY(c))]
    return {f"{prefix}_SHARDS": str(len(cores)), f"{prefix}_SHARD_PAGES": str(pages),
            f"{prefix}_SHARD_ARGS": str(first)}


#: The CBs the compute kernel reads only with copy_tile / unary_bcast: unpacked straight to the fp32
#: DST (UnpackToDestFp32), so their fp32 values arrive bit for bit. cb_probs, read by the matmuls,
#: stays Default (TF32 through SrcB); the other float32 CBs are never unpacked by the compute kernel.
UNPACK_TO_DEST_CBS = ("scores", "max_bcast", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b", "alpha",
                      "partial_in")


def compute_settings_for(plan: DecodePlan, compute: ComputeSettings) -> ComputeSettings:
    """`compute` with the kernels' per-CB unpack-to-dest modes (none with a bf16 DST, where a 32-bit
    unpack to DST is not available); a caller's own non-empty modes are refused."""
    if compute.unpack_to_dest_mode and any(m is not UnpackToDestMode.Default for m in compute.unpack_to_dest_mode):
        raise FactoryError("compute: unpack_to_dest_mode is set by the FlashDecode program (per CB), expected it "
                           f"empty, got UnpackToDestFp32 on CBs {list(compute.unpack_to_dest_cbs)}")
    if not compute.fp32_dest_acc_en:
        return dataclasses.replace(compute, unpack_to_dest_mode=())
    index = {cb.name: cb.index for cb in plan.circular_buffers}
    return dataclasses.replace(compute, unpack_to_dest_mode=unpack_to_dest_modes(index[n] for n in UNPACK_TO_DEST_CBS))


def _program(plan: DecodePlan, *, scale: float, compute: ComputeSettings, exp_approx: bool,
             images: Optional[dict[str, bytes]], positions: Optional[Sequence[int]] = None,
             q_shards: QShards = None, out_shards: QShards = None) -> Program:
    if not isinstance(compute, ComputeSettings):
        raise FactoryError(f"compute: expected ComputeSettings, got {type(compute).__name__}")
    compute = compute_settings_for(plan, compute)
    if compute.fp32_dest_acc_en != plan.fp32_dest_acc_en or compute.dst_tiles != plan.dst_tiles:
        raise FactoryError(
            f"compute: fp32_dest_acc_en={compute.fp32_dest_acc_en} (DST {compute.dst_tiles} tiles) differs from "
            f"the plan's fp32_dest_acc_en={plan.fp32_dest_acc_en} (DST {plan.dst_tiles} tiles)"
        )
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) or scale == 0:
        raise FactoryError(f"scale: expected a finite non-zero number, got {scale!r}")
    if plan.prescale_q and not power_of_two_scale(scale):
        raise FactoryError(f"scale: expected +-2^k for a plan made with prescale_q (Q is multiplied by it "
                           f"exactly once per piece), got {scale!r}; plan with prescale_q=False")

    cores = plan.active_cores
    core_set = CoreRangeSet.of(cores)
    sources = kernel_sources()
    if not isinstance(exp_approx, bool):
        raise FactoryError(f"exp_approx: expected a bool, got {exp_approx!r}")
    ct = compile_args(plan, float(scale), compute, exp_approx, positions_in_args=positions is not None)
    where = {(p.user, p.kv_head, p.index): p for p in plan.pieces} if plan.merge_slot else None
    rt = {c: runtime_args(plan, c, where) for c in cores}
    common = common_args(plan, positions)
    reader_defines = _shard_defines("Q", q_shards, common["reader"])
    if plan.block_size == HALF_TILE_BLOCK:  # 16-position blocks: the reader takes key tiles by halves
        reader_defines["HALF_TILE_BLOCKS"] = "1"
    writer_defines = _shard_defines("OUT", out_shards, common["writer"])
    kernels = [
        Kernel("reader", sources["reader"], KernelKind.READER, core_set, named_compile_time_args=ct["reader"],
               runtime_args={c: rt[c]["reader"] for c in cores}, common_runtime_args=common["reader"],
               defines=reader_defines),
        Kernel("writer", sources["writer"], KernelKind.WRITER, core_set, named_compile_time_args=ct["writer"],
               runtime_args={c: rt[c]["writer"] for c in cores}, common_runtime_args=common["writer"],
               defines=writer_defines),
        Kernel("compute", sources["compute"], KernelKind.COMPUTE, core_set, named_compile_time_args=ct["compute"],
               runtime_args={c: rt[c]["compute"] for c in cores}, compute=compute),
    ]
    cbs = [CircularBuffer(cb.index, core_set, cb.data_format, cb.page_size, cb.num_pages, cb.tile_rows)
           for cb in plan.circular_buffers]
    # One semaphore per tree height level: children of every piece of height h on a core count on
    # semaphore h - 1 of that core. merge_slot: semaphore 0 counts the messages that land in the core's
    # slot, 1 + p the grants piece p of the core receives.
    count = 1 + max(len(plan.core_pieces[c]) for c in cores) if plan.merge_slot else plan.rounds
    semaphores = [Semaphore(i, core_set, 0) for i in range(count)]

    b, nkv = plan.batch, plan.num_kv_heads
    k_shape, v_shape = kv_shapes(plan)
    image = (lambda name: None) if images is None else images.__getitem__
    bf16 = DataType.bfloat16
    tensors = [
        _bf16_tiles("q", (plan.num_tokens, b, plan.num_q_heads, plan.head_dim), image("q"), q_shards),
        kv_cache_tensor("k", plan.kv_dtype, k_shape, plan.kv_pages, image("k")),
    ]
    if positions is None:
        # int32 positions (-1 skips a user): 4-byte words, typed int32 for the device
        tensors.append(DramTensor("cur_pos", DataType.float32, 4 * b, 1, (b,), "row_major", image("cur_pos"),
                                  element_type="int32"))
    if not plan.mla:  # MLA: V lives inside K
        tensors.insert(2, kv_cache_tensor("v", plan.kv_dtype, v_shape, plan.kv_pages, image("v")))
    if plan.attention_sink:
        sink_shape = (plan.num_q_heads, TILE)
        tensors.append(DramTensor("sink", bf16, formats.tile_size(bf16), formats.num_tiles(sink_shape), sink_shape,
                                  "tile", image("sink")))
    if plan.has_attn_mask:
        shape = mask_shape(plan)
        tensors.append(DramTensor("attn_mask", bf16, formats.tile_size(bf16), formats.num_tiles(shape), shape,
                                  "tile", image("attn_mask")))
    if plan.paged:
        # int32 block ids, one row-major page per user (ttnn's layout of a [B, max_blocks] int32 tensor)
        tensors.append(DramTensor("page_table", DataType.float32, 4 * plan.max_blocks, b, (b, plan.max_blocks),
                                  "row_major", image("page_table"), element_type="int32"))
    out_shape = (plan.num_tokens, b, plan.num_q_heads, plan.head_dim_v)
    tensors.append(_bf16_tiles("out", out_shape, None, out_shards, is_output=True))
    if plan.return_lse:
        row = plan.q_tiles * TILE
        tensors.append(DramTensor("lse", DataType.float32, 4 * row, b * nkv, (b * nkv, row), "row_major",
                                  None, is_output=True))
    return Program(kernels=kernels, circular_buffers=cbs, semaphores=semaphores, tensors=tensors,
                   dram_banks=plan.dram_banks)


# ---- outputs ------------------------------------------------------------------------------------


def decode_lse_rows(plan: DecodePlan, rows: torch.Tensor) -> torch.Tensor:
    """LSE [T, B, NH] float32 from the kernel's rows [B * NKV, q_tiles * 32] (one per KV group; its
    q rows are the T tokens' g heads, token-major)."""
    t, g = plan.num_tokens, plan.group_size
    rows = rows.reshape(plan.batch, plan.num_kv_heads, plan.q_tiles * TILE)[:, :, : t * g]
    rows = rows.reshape(plan.batch, plan.num_kv_heads, t, g).permute(2, 0, 1, 3)
    return rows.to(torch.float32).reshape(t, plan.batch, plan.num_q_heads).clone()


def decode_outputs(plan: DecodePlan, tensors: dict[str, bytes]) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(out [T, B, NH, Dv] torch.bfloat16, lse [T, B, NH] float32 or None) from the output images."""
    shape = (plan.num_tokens, plan.batch, plan.num_q_heads, plan.head_dim_v)
    out = formats.unpack_tiles(tensors["out"], DataType.bfloat16, shape).to(torch.bfloat16)
    lse = None
    if plan.return_lse:
        raw = np.frombuffer(tensors["lse"], dtype="<f4")
        lse = decode_lse_rows(plan, torch.from_numpy(raw.copy()))
    return out, lse


def run_flash_decode(
    plan: DecodePlan,
    *,
    q: TileTensor,
    k: TileTensor,
    v: Optional[TileTensor],
    cur_pos_source: Optional[Positions],
    scale: float,
    compute: ComputeSettings,
    exp_approx: bool = False,
    backend: str = "host",
    page_table: Optional[torch.Tensor] = None,
    attention_sink: Optional[torch.Tensor] = None,
    attn_mask: Any = None,
    schedule_seed: Optional[int] = None,
    positions_in_args: bool = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor], Any]:
    """Build and run the program; returns (out, lse or None, the backend's RunResult).

    `schedule_seed` runs the host runtime's perturbed schedule (see `ttdecode.runtime.run_program`).
    """
    program = build_program(plan, q=q, k=k, v=v, cur_pos_source=cur_pos_source, scale=scale, compute=compute,
                            exp_approx=exp_approx, page_table=page_table, attention_sink=attention_sink,
                            attn_mask=attn_mask, positions_in_args=positions_in_args)
    if backend != "host":
        raise FactoryError(f"backend: run_flash_decode runs 'host' (the device path goes through ttdecode.ttnn_backend), got {backend!r}")

    result = run_program(program, schedule_seed=schedule_seed)
    out, lse = decode_outputs(plan, result.tensors)
    return out, lse, result
