"""The Llama decoder's device path: the decoder on one Wormhole or a mesh.

`DeviceDecoder` is ``LlamaDecoder(backend="device", device=...)``'s step on one chip (an N150) or
tensor parallel over a ``1 x N`` mesh (a T3K: 1 x 8): every layer through ttnn's ops and ours, the
caches on the device(s) for the decoder's lifetime, one write and one read per step (see its doc).
It runs on the mock Wormhole (``ttdecode.testing.mock``: tt-metal's host side for real, no numerics)
in tests/mock/test_llama_device.py (N150 and a 1 x 8 T3K); no chip has run it.
The weights' device forms (Megatron split, RoPE row permutation) and one chip's programs described
ahead of time: ``ttdecode.models.llama_device_weights``.

Context parallel over the whole mesh (``context_parallel`` = the mesh's devices, 1 x 8 or 2 x 4):
every device holds the whole model (replicated weights) and its shard of the paged caches, the
attention through ``ttdecode.distributed.device_context.ContextParallelDecode`` (mock T3K test:
tests/mock/test_context_parallel_device.py; the dataflow's numbers on a torch twin:
tests/distributed/test_cp_loop.py). Tensor x context parallelism on a 2-D mesh (``devices=N,
context_parallel=C`` with C the size of one mesh axis, `sharding.mesh_axes`): CP along that axis (the
loop's ``context_axis``: each device the step row of its CP rank, the gathers along the axis, the
combine of C partials), TP along the other (weights by ``ttnn.ShardTensor2dMesh``, the all_reduces and
the LM head's all_gather with ``cluster_axis``); mock T3K 2 x 4: tests/mock/test_llama_tp_cp_device.py,
numbers on the twin (T3K 2 x 4 and Galaxy 4 x 8 shapes) in tests/distributed/test_cp_loop.py. Not
built yet: a traced decode loop (trace capture segfaults on the mock). Prompt chunks and draft
tokens (T <= 32 per user per step) run with context parallelism too (`DeviceDecoder.chunk_cp`); tensor
parallelism alone on a 2-D mesh splits over all its chips, each collective along both axes in turn. ``LlamaDecoder(backend="device")``
without ``device=`` opens device 0 and refuses to start where there is none.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch

from ttdecode.core.formats import DataType
from ttdecode.models.llama_spec import LlamaSpec
from ttdecode.models import rope
from ttdecode.models.llama_device_weights import device_torch_weights, device_weights, weight_plan
from ttdecode.ops.rotary_append.program_factory import column_angles
from ttdecode.ttnn_backend.descriptor import ttnn_data_type
from ttdecode.ttnn_env import require_ttnn
from ttdecode.ops.rotary_append.program_factory import rotate_half_blocks
from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.api import paged_scaled_dot_product_attention_decode
from ttdecode.distributed import device_context
from ttdecode.distributed.device_context import pool_memory_config, rotary_program
from ttdecode.kv_pool import page_table_blocks, pages_program_config
from ttdecode.distributed.sharding import mesh_axes
from ttdecode.ttnn_backend.tensors import dram_banks

__all__ = ["DeviceDecoder", "rope_tables", "step_row", "chunk_grid"]


# ---- the decoder on a device ---------------------------------------------------------------------


def rope_tables(spec: LlamaSpec, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The device decoder's RoPE tables, float32 ``[positions, ceil(D / 32) * 32]``: row p holds the
    per-column cos (sin) of position p for the interleaved-pair rotation of the permuted Q/K rows
    (``ttdecode.ops.rotary_append.program_factory.column_angles`` of Hugging Face's cos/sin), looked up on the
    device by ``ttnn.embedding`` (stored there in bfloat16, the table format ttnn.embedding takes)."""
    d = spec.head_dim
    freq = rope.inv_freq(d, spec.rope_theta, spec.rope_scaling)
    cos, sin = rope.cos_sin(freq, torch.arange(positions))
    width = math.ceil(d / 32) * 32
    return column_angles(cos, d, True, width, 1.0), column_angles(sin, d, True, width, 0.0)


def step_row(tokens: torch.Tensor, positions: Sequence[int], page_table: torch.Tensor) -> torch.Tensor:
    """A device step's one input, int32. One token per user (``tokens`` ``[B]`` or ``[B, 1]``):
    ``[2 B + B * max_blocks]``, the token ids, the positions (-1: idle) and the page table row by row
    (the device slices it back into the three). T > 1 tokens per user (``tokens [B, T]``, ``positions``
    each user's first): ``[2 T B + B + T B * max_blocks]``, rows token-major (row ``j * B + b`` is
    user b's token j, as FlashDecode's Q ``[T, B, NH, D]``): the T B token ids, the T B positions of
    the rotary append (``positions[b] + j``, -1 for an idle user), FlashDecode's B positions (each
    user's last token, -1 idle) and the page table repeated T times (row r's table row is its user's)."""
    tok = tokens.to(torch.int32).reshape(len(positions), -1)
    t = tok.shape[1]
    pos = torch.tensor(list(positions), dtype=torch.int32)
    table = page_table.to(torch.int32)
    if t == 1:
        return torch.cat([tok.reshape(-1), pos, table.reshape(-1)])
    rows = torch.where(pos[None, :] >= 0, pos[None, :] + torch.arange(t, dtype=torch.int32)[:, None], -1)
    last = torch.where(pos >= 0, pos + t - 1, -1)
    return torch.cat([tok.T.reshape(-1), rows.reshape(-1), last, table.repeat(t, 1).reshape(-1)])


def chunk_grid(batch: int, grid: tuple[int, int]) -> tuple[int, int]:
    """The rotary append's grid for T-token rows ``j * batch + b``: n cores (``(x, y)``, x * y = n) with
    n the largest divisor of ``batch`` that fits ``grid``. The program deals row r to core ``r mod n``
    (``ttdecode.ops.rotary_append.program_factory``), so every row of user b lands on core ``b mod n``,
    which writes them one after the other: the rows of one user that share a cache tile are never
    written by two cores at once."""
    gx, gy = grid
    for n in range(min(batch, gx * gy), 0, -1):
        if batch % n == 0:
            for x in range(min(n, gx), 0, -1):
                if n % x == 0 and n // x <= gy:
                    return x, n // x
    return 1, 1


class DeviceDecoder:
    """The Llama decode step on one Wormhole (an N150), or tensor parallel over a mesh, through ttnn.

    Built once: the weights of `device_weights` (``devices=1``: the same preparation as the plan and
    the round-trip tests) moved to the device's DRAM (bfloat8_b matmul weights in TILE layout,
    bfloat16 norms, the embedding table row-major bfloat16 as ``ttnn.embedding`` wants it), the paged K
    and V caches of every layer (zeros, ``[num_blocks, NKV, block_size, D]`` in ``kv_dtype``, their pages
    ``kv_pages``: bank-local "key_row" by default, `device_context.pool_memory_config`; the append and
    FlashDecode built for them), the RoPE
    tables (per position, the per-column angles of the interleaved-pair rotation, bfloat16 row-major,
    looked up by ``ttnn.embedding``), the rotate-half blocks, and the step's input row the host writes
    into, int32 ``[1, 2 B + B * max_blocks]``: token ids, positions (-1: idle), the page table. The
    caches stay on the device for the decoder's lifetime.

    A step (`step`): one host -> device write (``ttnn.copy_host_to_device_tensor`` of the input row,
    4 * (2 B + B * max_blocks) bytes), then all on the device: ``slice`` s of the row into the token
    ids (``typecast`` to uint32), the positions and the page table (``reshape`` s); the RoPE index
    ``typecast(relu(positions))`` and the cos/sin rows by ``ttnn.embedding``; the token embedding;
    per layer ``rms_norm``, the fused QKV ``linear``, the fused RoPE + paged cache append
    (``ttdecode.rotary_kv_append``'s program, planned once: a `ttdecode.ttnn_backend.PreparedProgram`),
    paged FlashDecode with the positions and page table as device tensors
    (``ttdecode.paged_scaled_dot_product_attention_decode``, backend "device"), the heads
    concatenated (``reshape`` ``[1, B, NH, D] -> [1, 1, B, NH * D]``), the O ``linear``, ``add``,
    ``rms_norm``, gate ``linear`` (SiLU fused as its activation), up ``linear``, ``mul``, down
    ``linear``, ``add``; then the final
    ``rms_norm``, the LM head ``linear`` and, for greedy decoding, ``argmax``. Out: the logits
    (``to_torch``) or the argmax ids only. `ops` counts the ttnn calls of the last step.

    On a ``1 x N`` mesh (``device`` a MeshDevice of N chips), Megatron style as `weight_plan` splits the
    weights (``ttnn.ShardTensorToMesh`` over the same per-device slices as `device_torch_weights`; the
    rest replicated): each chip runs its NH/N q and NKV/N KV heads (its own caches), the O and down
    projections' partial sums meet in ``ttnn.all_reduce``, the LM head's vocabulary slices in
    ``ttnn.all_gather``; the argmax runs on every chip and the ids (or logits) are read from the first.
    On a 2-D ``R x C`` mesh alone (``context_parallel=1``) the same split over its R C chips, the slices
    dealt row-major, each collective as two along the mesh's axes (`tp_axes`: ``cluster_axis`` 1, the
    rows' chips, then 0; the 1-D fabric runs a collective along one axis): the all_reduces' sums of sums
    are the sums, the gathers put the vocabulary slices back in row-major order.

    T > 1 tokens per user (a prompt chunk, draft tokens) run as one step of T B
    rows, token-major (row ``j * B + b``): the row of `step_row` (made on the device at the first step
    of each T: one ``from_torch``), every op on T B rows, per layer one rotary append of the T B rows
    (planned per T on `chunk_grid`'s cores, each row's page-table row its user's) and one multi-token
    FlashDecode (Q ``[T, B, NH, D]`` a reshape of the append's ``[1, T B, NH, D]``, each user at its
    last token's position). With context parallelism, T > 1 tokens run on a loop of T B query rows
    (`chunk_cp`, built at the first step of each T over the same caches: its step row carries the T B
    token ids and positions, its append one launch per token, its FlashDecode the T B rows as one-token
    users, `ttdecode.distributed.loop_options`).
    The input row is written replicated (one ``copy_host_to_device_tensor``). The mesh needs
    ``ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)`` before it opens.

    Context parallel (``context_parallel`` = the mesh's N devices, ``1 x N`` or a 2-D mesh): the
    weights replicated, the caches, the step row and the attention are a
    ``ttdecode.distributed.device_context.ContextParallelDecode``'s: one write of every device's row
    (token ids and global positions, then that device's append and attention positions and page
    table), the RoPE at the global positions, K/V appended on the device owning each position,
    FlashDecode on every shard, ``all_gather`` of O and LSE and the combine program; no collective
    after O, down or the LM head (every device computes the whole model on the merged attention).
    Tensor x context parallel (``context_parallel`` C the size of one axis of a 2-D mesh,
    `sharding.mesh_axes`): the same loop along that axis (``context_axis``), each device with its TP
    share of the heads (the weights split over the other axis by ``ttnn.ShardTensor2dMesh``, replicated
    along the CP axis), ``all_reduce`` after O and down and the LM head's ``all_gather`` along the TP
    axis (``cluster_axis``).
    """

    def __init__(self, spec: LlamaSpec, state: dict[str, torch.Tensor], *, device: Any, batch: int,
                 max_seq_len: int, block_size: int, num_blocks: int, kv_dtype: DataType,
                 weight_dtype: str = "bfloat8_b", program_config: Any = None, ttnn: Any = None,
                 context_parallel: int = 1, kv_pages: str = "key_row") -> None:
        if spec.attention_bias or spec.mlp_bias:
            raise NotImplementedError("model: the device decoder implements Llama without biases (attention_bias and "
                                      "mlp_bias False), got a checkpoint with biases; use backend='host'")
        ttnn = require_ttnn() if ttnn is None else ttnn  # another module: tests' torch twin of the dataflow
        self.ttnn, self.spec, self.device = ttnn, spec, device
        self.batch, self.block_size, self.num_blocks = batch, block_size, num_blocks
        # page-table entries per user (even with block_size 16: kv_pool.page_table_blocks)
        self.max_blocks = page_table_blocks(math.ceil(max_seq_len / block_size), block_size)
        self.kv_pages = kv_pages
        self.program_config = pages_program_config(program_config, kv_pages, dram_banks(device))
        # tensor parallel over a 1 x N mesh (N = 1: one chip), context parallel over the whole mesh, or
        # both on a 2-D mesh (CP along one axis, TP along the other: `mesh_axes`)
        n = int(device.get_num_devices()) if hasattr(device, "get_num_devices") else 1
        self.cp_ways = context_parallel
        shape = getattr(device, "shape", None)
        dims = tuple(int(x) for x in shape) if shape is not None else (1, n)
        self.cp_axis, self.tp_axis = mesh_axes(dims, context_parallel)
        self.tp = tp = n // context_parallel
        # the TP collectives' cluster_axis, one collective each: none on one chip, the whole mesh on a
        # 1 x N mesh (None), the TP axis with CP along the other, both axes (1 then 0) of a 2-D mesh alone
        self.tp_axes: tuple[Optional[int], ...] = (
            () if tp == 1 else (self.tp_axis,) if self.tp_axis is not None else device_context.gather_axes(dims))
        if spec.num_kv_heads % tp or spec.intermediate_size % tp:
            raise ValueError(f"device: expected a mesh of a divisor of the KV heads ({spec.num_kv_heads}) and of the "
                             f"MLP size ({spec.intermediate_size}) devices, got {tp}")
        self.nh, self.nkv = spec.num_heads // tp, spec.num_kv_heads // tp  # per device
        d, nkv = spec.head_dim, self.nkv
        dram = ttnn.DRAM_MEMORY_CONFIG
        self.dram = dram
        self._rep = ttnn.ReplicateTensorToMesh(device) if n > 1 else None
        self.w = self._upload_weights(state, weight_dtype, n)
        cache_dt = ttnn_data_type(ttnn, kv_dtype)
        shape = (num_blocks, nkv, block_size, d)
        put = dict(device=device, memory_config=dram, mesh_mapper=self._rep)
        self.cp: Any = None  # ttdecode.distributed.device_context.ContextParallelDecode (context parallel)
        self.chunk_cp: dict[int, Any] = {}  # T > 1 tokens per user: a loop of T B rows per T, the same caches
        if context_parallel > 1:
            # the caches sharded over the mesh along the sequence, the step row per device (its prefix:
            # token ids and global positions), FlashDecode per shard, all_gather and the combine
            self._cp_args = dict(batch=batch, num_heads=self.nh, num_kv_heads=nkv, head_dim=d, max_seq_len=max_seq_len,
                                 block_size=block_size, num_blocks=num_blocks, kv_dtype=kv_dtype,
                                 layers=spec.num_layers, program_config=self.program_config, kv_pages=kv_pages,
                                 context_axis=self.cp_axis, ttnn=ttnn)
            self.cp = device_context.ContextParallelDecode(device, prefix=2 * batch, **self._cp_args)
            self.caches = self.cp.caches
        else:
            pool = dict(put, memory_config=pool_memory_config(ttnn, device, kv_pages, d))
            self.caches = [tuple(ttnn.from_torch(torch.zeros(shape), dtype=cache_dt, layout=ttnn.TILE_LAYOUT, **pool)
                                 for _ in range(2))
                           for _ in range(spec.num_layers)]
        # RoPE: per position the per-column angles of interleaved pairs (the permuted Q/K rows)
        self.rope_tables = [ttnn.from_torch(t, dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, **put)
                            for t in rope_tables(spec, self.max_blocks * block_size)]
        blocks = rotate_half_blocks(d, d, True)
        self.trans = ttnn.from_torch(torch.cat([blk for _, _, blk in blocks]).to(torch.float32), dtype=ttnn.bfloat16,
                                     layout=ttnn.TILE_LAYOUT, **put)
        # the step's input row, written by the host each step: [token ids | positions | page table]
        if self.cp is not None:  # [token ids | global positions | the CP object's part], one row per device
            self.step_width = self.cp.row_width
            self.inputs = self.cp.inputs
            self.rotary = self.cp.rotary
        else:
            self.step_width = 2 * batch + batch * self.max_blocks
            self.inputs = ttnn.from_torch(torch.zeros(1, self.step_width, dtype=torch.int32), dtype=ttnn.int32,
                                          layout=ttnn.ROW_MAJOR_LAYOUT, **put)
            self.rotary = self._prepare_rotary(kv_dtype, shape)
        self.kv_dtype, self.cache_shape = kv_dtype, shape
        # T > 1 tokens per user (without context parallelism): per T, the input row and the rotary append of
        # T B rows; with it, `chunk_cp`
        self.chunk_inputs: dict[int, Any] = {}
        self.chunk_rotary: dict[int, Any] = {}
        self.ops: dict[str, int] = {}
        self.writes = 0  # host -> device writes of the last step

    def _upload_weights(self, state: dict[str, torch.Tensor], weight_dtype: str, n: int) -> dict[str, Any]:
        """The weights on the device (`device_weights` on one chip, n = 1) or the mesh: each the per-device
        slices of `device_torch_weights` put together along the split dim and cut by the mesh mapper
        (`_weight_mapper`). The embedding table row-major (what ``ttnn.embedding`` reads)."""
        ttnn, spec, device, dram = self.ttnn, self.spec, self.device, self.dram
        if n == 1:
            host = device_weights(state, spec, 1, ttnn, weight_dtype=weight_dtype)[0]
            return {name: ttnn.to_device(t if name != "embedding" else ttnn.to_layout(t, ttnn.ROW_MAJOR_LAYOUT),
                                         device, memory_config=dram)
                    for name, t in host.items()}
        plan = {p.name: p for p in weight_plan(spec, self.tp, weight_dtype=weight_dtype)}
        per = device_torch_weights(state, spec, self.tp)
        w = {}
        for name, p in plan.items():
            full = per[0][name] if p.shard_dim is None else torch.cat([x[name] for x in per], dim=p.shard_dim)
            layout = ttnn.ROW_MAJOR_LAYOUT if name == "embedding" else ttnn.TILE_LAYOUT
            w[name] = ttnn.from_torch(full, dtype=getattr(ttnn, p.dtype), layout=layout, device=device,
                                      memory_config=dram, mesh_mapper=self._weight_mapper(p.shard_dim))
        return w

    def _weight_mapper(self, shard_dim: Optional[int]) -> Any:
        """How a weight goes onto the mesh: replicated (``shard_dim`` None, or no tensor parallelism),
        split along ``shard_dim`` over the mesh (a ``1 x N`` mesh, or a 2-D mesh alone: the slices dealt
        row-major, device ``i * C + j`` slice ``i * C + j``, the order the gathers along axis 1 then 0
        put them back in), or split over the TP axis and
        replicated along the CP axis of a 2-D mesh (``ttnn.ShardTensor2dMesh``)."""
        ttnn = self.ttnn
        if shard_dim is None or self.tp == 1:
            return self._rep
        if self.tp_axis is None:
            return ttnn.ShardTensorToMesh(self.device, dim=shard_dim)
        dims = [None, None]
        dims[self.tp_axis] = shard_dim
        return ttnn.ShardTensor2dMesh(self.device, mesh_shape=tuple(int(x) for x in self.device.shape), dims=tuple(dims))

    def _prepare_rotary(self, kv_dtype: DataType, cache_shape: tuple[int, ...], tokens: int = 1) -> Any:
        """The fused RoPE + paged append, planned once for every layer (same shapes; addresses per run):
        B rows on the device's grid, or (``tokens`` T > 1) T B rows token-major on `chunk_grid`'s cores."""
        grid = self.device.compute_with_storage_grid_size()
        cores = (int(grid.x), int(grid.y)) if tokens == 1 else chunk_grid(self.batch, (int(grid.x), int(grid.y)))
        program = rotary_program(batch=tokens * self.batch, num_q_heads=self.nh, num_kv_heads=self.nkv,
                                 head_dim=self.spec.head_dim, cache_dtype=kv_dtype, cache_shape=cache_shape,
                                 max_blocks=self.max_blocks, grid=cores, kv_pages=self.kv_pages)
        return PreparedProgram(program, self.device)

    def _rotary_append(self, qkv: Any, cos: Any, sin: Any, pos: Any, table: Any, kc: Any, vc: Any) -> Any:
        """RoPE on the packed qkv's q and k (interleaved pairs), k and v into the paged caches in place;
        qkv ``[1, R, W]`` with R = T B rows (token-major), ``pos`` ``[R]``, ``table`` ``[R, max_blocks]``.
        Returns q rotated ``[1, R, NH, D]``."""
        self.ops["rotary_kv_append"] = self.ops.get("rotary_kv_append", 0) + 1
        t = qkv.shape[1] // self.batch
        if t == 1:
            rotary = self.rotary
        else:
            if t not in self.chunk_rotary:
                self.chunk_rotary[t] = self._prepare_rotary(self.kv_dtype, self.cache_shape, t)
            rotary = self.chunk_rotary[t]
        return rotary.run({"qkv": qkv, "cos": cos, "sin": sin, "trans": self.trans, "cur_pos": pos,
                           "page_table": table, "k_cache": kc, "v_cache": vc})[0]

    # ---- one step ------------------------------------------------------------------------------

    def _op(self, name: str) -> Any:
        self.ops[name] = self.ops.get(name, 0) + 1
        obj = self.ttnn
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj

    def _attention(self, q: Any, k: Any, v: Any, positions: Any, page_table: Any) -> Any:
        """Paged FlashDecode, ``ttdecode.paged_scaled_dot_product_attention_decode`` on the device:
        positions and page table as device tensors; planned once per decode shape, a cached call
        checks metadata only."""
        self.ops["flash_decode"] = self.ops.get("flash_decode", 0) + 1
        return paged_scaled_dot_product_attention_decode(q, k, v, page_table_tensor=page_table,
                                                         cur_pos_tensor=positions,
                                                         program_config=self.program_config, backend="device")

    def _inputs(self, tokens: torch.Tensor, positions: Sequence[int], page_table: Any, t: int) -> tuple[Any, ...]:
        """The step's one host -> device write (`step_row`; context parallel: every device's row) and
        its device views: token ids uint32 ``[1, R]`` (R = T B rows), the RoPE positions row ``[1, R]``,
        then (None with context parallelism) the rotary append's positions ``[R]`` and page table ``[R,
        max_blocks]`` and FlashDecode's positions ``[B]`` and page table ``[B, max_blocks]`` (the same
        tensors with T = 1)."""
        ttnn, op, b, mb = self.ttnn, self._op, self.batch, self.max_blocks
        r = t * b
        if self.cp is not None:
            # one write: every device's row (token ids and global positions of the T B rows, token-major,
            # then its own positions and page table; the loop's positions: each user's last token)
            loop = self._context_loop(t)
            pos = torch.tensor(list(positions), dtype=torch.int32)
            rows = torch.where(pos[None, :] >= 0, pos[None, :] + torch.arange(t, dtype=torch.int32)[:, None], -1)
            head = torch.cat([tokens.to(torch.int32).reshape(b, t).T.reshape(-1), rows.reshape(-1)])
            loop.write(rows[-1].tolist(), page_table, head)
            self.writes = loop.writes
            inp = loop.inputs
        else:
            row = step_row(tokens, positions, page_table)
            if t == 1:
                inp = self.inputs
            elif t in self.chunk_inputs:
                inp = self.chunk_inputs[t]
            else:  # the first step of T tokens per user makes its row on the device (one move, once)
                inp = self.chunk_inputs[t] = ttnn.from_torch(torch.zeros(1, len(row), dtype=torch.int32),
                                                             dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT,
                                                             device=self.device, memory_config=self.dram,
                                                             mesh_mapper=self._rep)
            # the step's one host -> device write
            ttnn.copy_host_to_device_tensor(ttnn.from_torch(row[None], dtype=ttnn.int32,
                                                            layout=ttnn.ROW_MAJOR_LAYOUT, mesh_mapper=self._rep), inp)
            self.writes = 1
        tok = op("typecast")(op("slice")(inp, [0, 0], [1, r]), ttnn.uint32)
        pos_row = op("slice")(inp, [0, r], [1, 2 * r])  # the global positions (RoPE)
        if self.cp is not None:
            return tok, pos_row, None, None, None, None
        if t == 1:
            pos = op("reshape")(pos_row, [b])
            table = op("reshape")(op("slice")(inp, [0, 2 * b], [1, self.step_width]), [b, mb])
            return tok, pos_row, pos, table, pos, table
        start = 2 * r + b
        attn_pos = op("reshape")(op("slice")(inp, [0, 2 * r], [1, start]), [b])
        rows_table = op("reshape")(op("slice")(inp, [0, start], [1, start + r * mb]), [r, mb])
        attn_table = op("reshape")(op("slice")(inp, [0, start], [1, start + b * mb]), [b, mb])
        return tok, pos_row, op("reshape")(pos_row, [r]), rows_table, attn_pos, attn_table

    def step(self, tokens: torch.Tensor, positions: Sequence[int], page_table: Any,
             greedy: bool = False) -> torch.Tensor:
        """One decode step: ``tokens`` int ``[B]`` or ``[B, T]`` (T <= 32 new tokens per user, tensor
        parallel only; any id for idle users), ``positions`` ``[B]`` (each user's first token's; -1:
        idle), ``page_table`` int32 ``[B, max_blocks]`` after the step's allocation (context parallel:
        one ``[B, local_blocks]`` table per device, ``ContextParallelAllocator.page_tables``). T tokens
        run as T B rows in every op: one rotary append of the T B rows and one multi-token FlashDecode
        per layer. Returns the float32 logits ``[B, vocab]`` (``[B, T, vocab]`` for 2-D tokens; rows of
        idle users as the device left them) or, ``greedy``, the argmax ids int64 ``[B]`` (``[B, T]``)
        computed on the device: then only the ids are read."""
        ttnn, spec, w = self.ttnn, self.spec, self.w
        t = 1 if tokens.dim() == 1 else tokens.shape[1]
        b, nh, d, r = self.batch, self.nh, spec.head_dim, t * self.batch
        eps = spec.rms_norm_eps
        self.ops = {}
        op = self._op
        tok, pos_row, rows_pos, rows_table, attn_pos, attn_table = self._inputs(tokens, positions, page_table, t)
        # RoPE rows at each row's position (idle users: position 0; they write nothing)
        idx = op("typecast")(op("relu")(pos_row), ttnn.uint32)
        # [R, W] (the context-parallel loop's T > 1: [T, B, W], token-major)
        rope = [r] if self.cp is None or t == 1 else [t, b]
        cos, sin = (op("reshape")(op("embedding")(idx, table, layout=ttnn.TILE_LAYOUT, dtype=ttnn.float32,
                                                   memory_config=self.dram), [*rope, table.shape[-1]])
                    for table in self.rope_tables)
        x = op("reshape")(op("embedding")(tok, w["embedding"], layout=ttnn.TILE_LAYOUT,
                                          memory_config=self.dram), [1, 1, r, spec.hidden_size])
        for i, (kc, vc) in enumerate(self.caches):
            h = op("rms_norm")(x, weight=w[f"{i}.attention_norm"], epsilon=eps)
            qkv = op("linear")(h, w[f"{i}.wqkv"])
            qkv = op("reshape")(qkv, [1, r, qkv.shape[-1]] if len(rope) == 1 else [t, b, qkv.shape[-1]])
            if self.cp is not None:  # K/V written on the device owning the position; attention over all shards
                loop = self._context_loop(t)
                attn = loop.attend(i, loop.append(i, qkv, cos, sin, self.trans))
            else:
                q_rot = self._rotary_append(qkv, cos, sin, rows_pos, rows_table, kc, vc)
                if t > 1:  # [1, T B, NH, D] token-major is FlashDecode's Q [T, B, NH, D]
                    q_rot = op("reshape")(q_rot, [t, b, nh, d])
                attn = self._attention(q_rot, kc, vc, attn_pos, attn_table)
            attn = op("reshape")(attn, [1, 1, r, nh * d])
            x = op("add")(x, self._all_reduce(op("linear")(attn, w[f"{i}.wo"])))
            h = op("rms_norm")(x, weight=w[f"{i}.ffn_norm"], epsilon=eps)
            gate = op("linear")(h, w[f"{i}.w_gate"], activation="silu")
            up = op("linear")(h, w[f"{i}.w_up"])
            x = op("add")(x, self._all_reduce(op("linear")(op("mul")(gate, up), w[f"{i}.w_down"])))
        if self.cp is not None:  # the CP object's calls of this step (its row views, append, attention)
            for name, count in self._context_loop(t).ops.items():
                self.ops[name] = self.ops.get(name, 0) + count
        return self._read(self._head(x, r), t, greedy, tokens.dim())

    def _context_loop(self, t: int) -> Any:
        """The context-parallel loop of T tokens per user: `cp` (T = 1), else one of T B query rows over
        the same caches (its step row, views and programs; built at the first step of that T)."""
        if t == 1:
            return self.cp
        if t not in self.chunk_cp:
            self.chunk_cp[t] = device_context.ContextParallelDecode(
                self.device, prefix=2 * t * self.batch, tokens=t, caches=self.cp.caches, **self._cp_args)
        return self.chunk_cp[t]

    def _head(self, x: Any, rows: int) -> Any:
        """The final norm and the LM head: logits ``[1, 1, rows, vocab]`` (gathered over the mesh)."""
        op, spec = self._op, self.spec
        h = op("rms_norm")(x, weight=self.w["norm"], epsilon=spec.rms_norm_eps)
        logits = op("linear")(h, self.w["lm_head"])
        for axis in self.tp_axes:  # the vocabulary slices, on every device (of the TP group)
            logits = op("all_gather")(logits, dim=3, **self._cluster(axis))
        if self.tp > 1:
            if logits.shape[-1] != spec.vocab_size:  # the last slice's zero padding must not win the argmax
                logits = op("slice")(logits, [0, 0, 0, 0], [1, 1, rows, spec.vocab_size])
        return logits

    def _read(self, logits: Any, t: int, greedy: bool, dims: int) -> torch.Tensor:
        """The step's one device -> host read: the argmax ids (``greedy``: int64 ``[B]``, or ``[B, T]``
        for ``dims`` 2) or the float32 logits ``[B, vocab]`` (``[B, T, vocab]``)."""
        ttnn, b = self.ttnn, self.batch
        if greedy:
            ids = self._op("argmax")(logits, dim=-1)  # [1, 1, T B] uint32
            out = ttnn.to_torch(self._first(ids)).reshape(t, b).T.to(torch.int64)  # [B, T]
        else:
            out = ttnn.to_torch(self._first(logits)).reshape(t, b, -1)[..., : self.spec.vocab_size]
            out = out.transpose(0, 1).to(torch.float32)  # [B, T, vocab]
        return out[:, 0] if dims == 1 else out

    def _all_reduce(self, x: Any) -> Any:
        """Sum of the row-parallel partials over the TP group (`tp_axes`; nothing on one chip): over a 2-D
        mesh alone, the sums along its rows, then of those along its columns."""
        for axis in self.tp_axes:
            x = self._op("all_reduce")(x, **self._cluster(axis))
        return x

    @staticmethod
    def _cluster(axis: Optional[int]) -> dict[str, int]:
        """A collective's ``cluster_axis`` argument: none (the whole 1-D mesh) or the mesh axis."""
        return {} if axis is None else {"cluster_axis": axis}

    def _first(self, x: Any) -> Any:
        """The tensor of the first device (a replicated result is read from one chip only)."""
        return x if self._rep is None else self.ttnn.get_device_tensors(x)[0]

    def close(self) -> None:
        """Free the device tensors (the device itself is the caller's)."""
        ttnn = self.ttnn
        if self.cp is not None:
            for loop in self.chunk_cp.values():  # their step rows (the caches are cp's)
                loop.close()
            self.cp.close()  # the caches and the step row
        for t in [*self.w.values(), *self.rope_tables, self.trans, *self.chunk_inputs.values(),
                  *(() if self.cp is not None else (*(c for kv in self.caches for c in kv), self.inputs))]:
            ttnn.deallocate(t)
        self.w, self.caches = {}, []
