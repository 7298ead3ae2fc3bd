"""Context parallelism on a mesh of Wormhole chips: the decode loop (`ContextParallelDecode`); the
one-shot call (``context_parallel_decode(..., backend="device")``) is ``ttdecode.distributed.mesh_decode``.

**The decode loop** (`ContextParallelDecode`; ``LlamaDecoder(backend="device", devices=n,
context_parallel=n)`` runs on it): the paged KV cache sharded over a mesh's n devices along the
sequence (interleaved blocks: a user's block j on device ``j mod n`` as local block ``j div n``, the
per-rank pools and page tables of ``kv_cache.ContextParallelAllocator``), allocated once and kept on
the devices; per step one host -> device write (every device's int32 row: its append positions,
attention positions and page table, `step_rows` / `sharding.device_step_positions`); the new token's
K/V written only on the device owning its position (the fused RoPE append with -1 elsewhere); FlashDecode
on every shard with its positions and page table as device tensors (one SPMD program: every
difference between devices is in the device tensors); a user with no key on a device gets the
kernels' skipped-user partial (zero rows, LSE -inf: kernels/flash_decode/writer.cpp), weight 0 in the
merge; ``ttnn.all_gather(dim=0)`` of O and LSE (on a 2-D mesh two gathers, ``cluster_axis`` 1 then 0,
as the 1-D fabric needs) and the combine program (`ttdecode.ops.combine.CombineStep`). The three
programs are `ttdecode.ttnn_backend.PreparedProgram` s built once: no plan, build or upload after the build.

What runs without a chip: on a mock T3K (``ttdecode.testing``, tt-metal's host side for real, nothing
computed) tests/mock/test_context_parallel_device.py runs the context-parallel Llama on a 1 x 8 and a
2 x 4 mesh (FABRIC_1D): every op accepted, one write and one read per step, no program-cache entry
after step 2. The numbers of the dataflow (rows, views, LSE rows to tiles, gathers, merge) are checked
on a torch twin of ttnn with the combine kernels on the host runtime (tests/distributed/test_cp_loop.py);
the numerics of context parallelism are the host backend's (``context.py``, backend "host"). The
loop's options (``ttdecode.distributed.loop_options``, each exact, why there): a sliding window (a
multiple of n x block_size: the local window W / n on every shard), an attention sink (the combine's
extra partial), T <= 32 tokens per user per step (R = T B one-token query rows), MLA (no V cache);
checked against the float64 reference on the twin with the FlashDecode kernels on the host runtime
(tests/distributed/test_cp_loop_options.py) and dry-run on a mock N300
(tests/mock/test_cp_loop_options_device.py). ``context_axis``: the loop along one axis of a 2-D
mesh only (`sharding.context_ranks`: a device's CP rank is its coordinate along that axis; the devices
along the other axis are a tensor-parallel group of other heads, each with its own caches): every
device gets the row of its CP rank, one gather of O and one of the LSE along that axis, the combine of
its ranks' partials (``LlamaDecoder(devices=8, context_parallel=4)`` on a 2 x 4 mesh); every option
above holds along the axis, n its size (twin: tests/distributed/test_cp_loop_options.py, TP groups with
their own data). Loops of several T (a Llama's prompt chunks) share one cache (``caches``). Not built in
the loop: other windows, the MLA append, the all_to_all combine (`device_combine.ALL_TO_ALL_ON_DEVICE`);
no chip has run it.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from ttdecode.distributed.sharding import ShardPlan, shard_plan, device_step_positions, context_ranks
from ttdecode.core.program_description import Program
from ttdecode.distributed.device_combine import lse_rows_to_tiles
from ttdecode.ttnn_backend.descriptor import ttnn_data_type
from ttdecode.ttnn_env import require_ttnn
from ttdecode.core.formats import as_data_type
from ttdecode.ttnn_backend.prepared import PreparedProgram
from ttdecode.ops.rotary_append.program_factory import build_program
from ttdecode.ops.rotary_append.validate import RotaryInputs
from ttdecode.config import KV_PAGES
from ttdecode.kv_pool import HALF_TILE_BLOCK, page_table_blocks, pages_program_config
from ttdecode.ttnn_backend.tensors import dram_banks, key_row_memory_config
from ttdecode.ops.flash_decode.device_step import FlashDecodeStep
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.ops.flash_decode.validate import validate_decode
from ttdecode.core.formats import DataType
from ttdecode.ops.combine import CombineStep, make_combine_plan
from ttdecode.distributed.loop_options import MLA_APPEND, loop_options, sink_partial, token_positions

__all__ = ["ContextParallelDecode", "step_rows", "gather_axes", "rotary_program", "pool_memory_config",
           "CONCAT_PARTS"]

#: Most tensors one ``ttnn.concat`` of the loop joins: ttnn 0.81.1's interleaved concat reader compiles
#: one branch per input, and with 32 inputs its NCRISC code (20004 bytes) overflows the 16 KiB region
#: (tt-metal's JIT refuses the ELF); T tokens' q then join in a tree of concats of up to 8.
CONCAT_PARTS = 8


# ---- the decode loop on a mesh: the KV shards stay on the devices -------------------------------


def rotary_program(*, batch: int, num_q_heads: int, num_kv_heads: int, head_dim: int, cache_dtype: DataType,
                   cache_shape: tuple[int, ...], max_blocks: int, grid: tuple[int, int], kv_pages: str) -> Program:
    """A decode loop's fused RoPE + paged append described ahead of time (its tensors on a device): packed
    qkv ``[1, B, (NH + 2 NKV) D]``, interleaved pairs, the paged caches ``cache_shape`` with a ``[B,
    max_blocks]`` table, in ``kv_pages`` ("tile" or "key_row": the bank-local pool), the rows dealt over
    ``grid``. The program of ``ttdecode.ops.rotary_append.program_factory.device_program`` with the pools'
    pages."""
    inp = RotaryInputs(
        batch=batch, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, rotary_dim=head_dim,
        interleaved=True, packed=True, cache_dtype=cache_dtype, cache_shape=tuple(cache_shape), paged=True,
        positions=(-1,) * batch, page_table=torch.zeros(batch, max_blocks, dtype=torch.int64),
        cos=torch.ones(batch, head_dim), sin=torch.zeros(batch, head_dim), x={}, k_cache=None, v_cache=None,
        device_tensors=True, kv_pages=kv_pages,
    )
    return build_program(inp, None, grid)


def pool_memory_config(ttnn: Any, device: Any, kv_pages: str, head_dim: int) -> Any:
    """The DRAM memory config of a paged K/V pool in ``kv_pages`` on ``device`` (a device or mesh): the
    bank-local ``key_row_memory_config`` over its DRAM banks, or interleaved tile pages."""
    return key_row_memory_config(ttnn, device, head_dim) if kv_pages == "key_row" else ttnn.DRAM_MEMORY_CONFIG


def _mesh_dims(mesh_device: Any) -> tuple[int, int]:
    """(rows, cols) of a ``ttnn.MeshDevice`` (any 2-D shape), or a TypeError naming ``mesh_device``."""
    shape = getattr(mesh_device, "shape", None)
    dims = tuple(int(x) for x in shape) if shape is not None else ()
    if len(dims) != 2 or min(dims) < 1 or dims[0] * dims[1] < 2:
        raise TypeError(f"ContextParallelDecode: argument 'mesh_device': expected an open ttnn.MeshDevice of at "
                        f"least 2 devices (ttnn.open_mesh_device), got {type(mesh_device).__name__} {dims}")
    return dims


def gather_axes(mesh_shape: tuple[int, int]) -> tuple[Optional[int], ...]:
    """The ``cluster_axis`` of each ``ttnn.all_gather`` that brings every device's partial to every
    device: a 1-D mesh one gather over all (None); a 2-D ``R x C`` mesh (1-D fabric: a gather runs along
    one axis) first along its rows' devices (axis 1: C partials each), then along its columns (axis 0:
    R x C partials)."""
    rows, cols = mesh_shape
    if rows == 1 or cols == 1:
        return (None,)
    return (1, 0)


def step_rows(shards: ShardPlan, batch: int, local_blocks: int, prefix_width: int, positions: Sequence[int],
              page_tables: Sequence[Any], prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The n devices' step rows of `ContextParallelDecode`, int32 ``[n, prefix_width + 2 B + B * local_blocks]``:
    per device d ``[prefix | append[d] | attend[d] | page_tables[d] row by row]``.

    ``positions``: the global position of each user's new token ``[B]`` (-1: skipped);
    ``page_tables``: per device an int ``[B, local_blocks]`` table (local logical -> local physical block,
    e.g. ``ContextParallelAllocator.page_tables``); ``prefix``: int ``[prefix_width]``, the same on every
    device. ``append`` / ``attend``: `sharding.device_step_positions`."""
    n = shards.devices
    pos = [int(p) for p in positions]
    if len(pos) != batch or any(p < -1 for p in pos):
        raise ValueError(f"ContextParallelDecode: argument 'positions': expected {batch} ints >= -1, got {pos}")
    if len(page_tables) != n:
        raise ValueError(f"ContextParallelDecode: argument 'page_tables': expected one per device ({n}), got "
                         f"{len(page_tables)}")
    tables = [torch.as_tensor(t) for t in page_tables]
    for d, t in enumerate(tables):
        if tuple(t.shape) != (batch, local_blocks) or t.is_floating_point() or t.dtype == torch.bool:
            raise ValueError(f"ContextParallelDecode: argument 'page_tables[{d}]': expected an int tensor "
                             f"[{batch}, {local_blocks}], got {t.dtype} {list(t.shape)}")
    head = torch.zeros(0, dtype=torch.int32) if prefix is None else torch.as_tensor(prefix).to(torch.int32).reshape(-1)
    if head.numel() != prefix_width:
        raise ValueError(f"ContextParallelDecode: argument 'prefix': expected {prefix_width} ints, got {head.numel()}")
    append, attend = device_step_positions(shards, pos)
    return torch.stack([torch.cat([head, torch.tensor(append[d], dtype=torch.int32),
                                   torch.tensor(attend[d], dtype=torch.int32),
                                   tables[d].to(torch.int32).reshape(-1)]) for d in range(n)])


class ContextParallelDecode:
    """A context-parallel decode loop on a ``ttnn.MeshDevice``: the paged KV cache sharded over the
    mesh's n devices along the sequence for the loop's lifetime, each step attending with FlashDecode on
    every shard and merging the n partials with ttnn's all_gather and the combine program.

    Layout (``ttdecode.distributed.sharding``, interleaved units of ``block_size``): a user's global
    block j lives on device ``j mod n`` as its local block ``j div n``, i.e. the per-rank pools and page
    tables of ``ttdecode.models.kv_cache.ContextParallelAllocator`` (the caller's allocator: the page
    tables come with each step). Device d of the mesh is the d-th device in row-major order (the
    order ``ttnn.ShardTensorToMesh(dim=0)`` deals rows to).

    Built once (device tensors, kept until `close`):

    * ``caches[layer] = (K, V)``: per device ``[num_blocks, NKV, block_size, D]`` in ``kv_dtype``
      (a mesh tensor: one spec, each device's own blocks), in ``kv_pages``: "key_row" (the default,
      the bank-local pool: `pool_memory_config`, a key-tile row a page over each device's DRAM banks;
      the caller's allocator should hand out blocks by ``kv_cache.policy_for("key_row")``, "balanced")
      or "tile" (interleaved tile pages); the append and FlashDecode are built for it (a
      ``program_config`` as `kv_pool.pages_program_config` takes it: a grid of at least one core per
      bank with "key_row"). With MLA the caller's own writes into ``caches[layer][0]`` keep its pages;
    * ``inputs``: the step's int32 row, per device ``[1, prefix + 2 B + B * local_blocks]``: the
      caller's ``prefix`` (the same on every device, e.g. token ids and global positions), then that
      device's append positions (where it writes each user's new K/V row, -1: another device owns the
      position, `sharding.device_step_positions`), its attention positions (each user's last local
      position, -1: no key here) and its page table ``[B, local_blocks]`` (an even local_blocks with
      block_size 16, `kv_pool.page_table_blocks`);
    * three `ttdecode.ttnn_backend.PreparedProgram` s, the same on every device (SPMD: everything that
      differs per device is in the device tensors): the fused RoPE + paged append
      (``ttdecode.ops.rotary_append``, packed qkv, interleaved pairs), FlashDecode on the shard (paged,
      the positions and page table as device tensors, ``return_lse=True``: the
      ``ttdecode.ops.flash_decode.device_step.FlashDecodeStep`` the public op would build for these tensors) and
      the combine of the n gathered partials (``ttdecode.ops.combine.CombineStep``).

    A step: `write` (one ``ttnn.copy_host_to_device_tensor`` of the n rows; then ``slice`` /
    ``reshape`` views of each device's positions and page table), per layer `append` (q rotated on
    every device; K/V written only on the device owning the position) and `attend`: FlashDecode on
    every shard (a user with no key on a device: zero rows and LSE -inf, the kernels' skipped user,
    weight 0 in the merge), the LSE rows ``[B*NKV, 32]`` to the combine's ``[1, B, NH, 1]`` float32
    tiles (``slice``, ``reshape``, ``to_layout``), ``ttnn.all_gather(dim=0)`` of O and LSE
    (`gather_axes`: one gather on a 1-D mesh, two with ``cluster_axis`` on a 2-D mesh), the combine:
    the merged ``[1, B, NH, D]`` on every device. Nothing is planned, built or uploaded after the
    build; the mesh needs ``ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)`` before it opens.
    `ops` counts the ttnn calls of the last `write` and the `append` / `attend` calls since.

    Options (`loop_options`): ``tokens`` T (the row carries R = T B query rows, token t of user b at
    row t B + b: positions, attention positions and the page table repeated per token; `append` runs
    the one-token program once per token; `attend` runs the R rows as one-token users),
    ``sliding_window_size`` W (FlashDecode's window W / n on every shard), ``attention_sink`` (``[NH]``:
    the combine's n + 1-th partial, `sink_parts`), ``head_dim_v`` (MLA: ``caches[layer] = (K, None)``,
    no `append`), ``context_axis`` (0 or 1: the CP group is one axis of a 2-D mesh, n its size; device d
    gets the row of its CP rank ``device_ranks[d]``, `sharding.context_ranks`; ``num_heads`` /
    ``num_kv_heads`` are then each device's, a tensor-parallel share; every option above holds along
    the axis as over the whole mesh: n is the axis's size), ``caches`` (another loop's ``caches`` on the
    same mesh, e.g. a loop of another T over the same cache; freed by that loop, not by `close`).
    """

    def __init__(self, mesh_device: Any, *, batch: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 max_seq_len: int, block_size: int, num_blocks: int, kv_dtype: Any = "bfloat8_b", layers: int = 1,
                 prefix: int = 0, scale: Optional[float] = None, program_config: Any = None,
                 compute_kernel_config: Any = None, tokens: int = 1, sliding_window_size: Optional[int] = None,
                 attention_sink: Any = None, head_dim_v: Optional[int] = None, kv_pages: str = "key_row",
                 context_axis: Optional[int] = None, caches: Optional[list] = None, ttnn: Any = None) -> None:
        import math

        ttnn = require_ttnn() if ttnn is None else ttnn  # another module: tests' torch twin of the dataflow
        self.ttnn, self.mesh = ttnn, mesh_device
        self.mesh_shape = _mesh_dims(mesh_device)
        self.devices = self.mesh_shape[0] * self.mesh_shape[1]
        # the CP rank of each device (row-major over the mesh); n: the CP ranks (partials to merge)
        self.context_axis, self.device_ranks = context_axis, context_ranks(self.mesh_shape, context_axis)
        n = self.ranks = max(self.device_ranks) + 1
        for name, value, low in (("batch", batch, 1), ("num_heads", num_heads, 1), ("num_kv_heads", num_kv_heads, 1),
                                 ("head_dim", head_dim, 32), ("max_seq_len", max_seq_len, 1),
                                 ("block_size", block_size, 1), ("num_blocks", num_blocks, 1), ("layers", layers, 1),
                                 ("prefix", prefix, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"ContextParallelDecode: argument '{name}': expected an int >= {low}, got {value!r}")
        if (block_size % 32 and block_size != HALF_TILE_BLOCK) or head_dim % 32:
            raise ValueError(f"ContextParallelDecode: arguments 'block_size', 'head_dim': expected multiples of 32 "
                             f"(tiles; block_size {HALF_TILE_BLOCK} too), got {block_size}, "
                             f"{head_dim}")
        if num_heads % num_kv_heads:
            raise ValueError(f"ContextParallelDecode: argument 'num_heads': expected a multiple of num_kv_heads="
                             f"{num_kv_heads}, got {num_heads}")
        max_blocks = math.ceil(max_seq_len / block_size)
        if max_blocks < n:
            raise ValueError(f"ContextParallelDecode: argument 'max_seq_len': expected at least one block of "
                             f"{block_size} per CP rank ({n} ranks: >= {n * block_size}), got {max_seq_len}")
        kv = as_data_type(kv_dtype, "kv_dtype")
        if not isinstance(kv_pages, str) or kv_pages not in KV_PAGES:
            raise ValueError(f"ContextParallelDecode: argument 'kv_pages': expected one of {list(KV_PAGES)}, got "
                             f"{kv_pages!r}")
        self.kv_pages = kv_pages
        program_config = pages_program_config(program_config, kv_pages, dram_banks(mesh_device),
                                              owner="ContextParallelDecode: ")
        self.options = loop_options(devices=n, block_size=block_size, num_heads=num_heads, head_dim=head_dim,
                                    tokens=tokens, sliding_window_size=sliding_window_size,
                                    attention_sink=attention_sink, head_dim_v=head_dim_v)
        self.batch, self.num_heads, self.num_kv_heads, self.head_dim = batch, num_heads, num_kv_heads, head_dim
        self.tokens, self.rows = tokens, tokens * batch  # query rows: token t of user b is row t * B + b
        self.head_dim_v = head_dim if head_dim_v is None else head_dim_v
        self.block_size, self.num_blocks, self.prefix = block_size, num_blocks, prefix
        self.shards = shard_plan(max_blocks, block_size, n, "interleaved")
        # page-table entries per user on a device (even with block_size 16: kv_pool.page_table_blocks)
        self.local_blocks = page_table_blocks(max(len(us) for us in self.shards.units), block_size)
        self.row_width = prefix + 2 * self.rows + self.rows * self.local_blocks
        self.axes = gather_axes(self.mesh_shape) if context_axis is None else (context_axis,)
        dram = ttnn.DRAM_MEMORY_CONFIG
        rep = ttnn.ReplicateTensorToMesh(mesh_device)
        self._shard_rows = ttnn.ShardTensorToMesh(mesh_device, dim=0)
        shape = (num_blocks, num_kv_heads, block_size, head_dim)
        cache_dt = ttnn_data_type(ttnn, kv)
        put = dict(device=mesh_device, memory_config=dram, mesh_mapper=rep)
        pool = dict(put, memory_config=pool_memory_config(ttnn, mesh_device, kv_pages, head_dim))
        self._own_caches = caches is None  # another loop's caches (of another T) are that loop's to free
        self.caches = caches if caches is not None else [
            tuple(ttnn.from_torch(torch.zeros(shape), dtype=cache_dt, layout=ttnn.TILE_LAYOUT, **pool)
                  if i == 0 or head_dim_v is None else None for i in range(2)) for _ in range(layers)]
        self.sink_parts = None  # the sink as the combine's extra partial (loop_options.sink_partial)
        if self.options.sink is not None:
            out, lse = sink_partial(self.options.sink, scale or 1.0 / math.sqrt(head_dim), self.rows, self.head_dim_v)
            self.sink_parts = (ttnn.from_torch(out, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, **put),
                               ttnn.from_torch(lse, dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT, **put))
        self.inputs = ttnn.from_torch(torch.zeros(self.devices, self.row_width, dtype=torch.int32), dtype=ttnn.int32,
                                      layout=ttnn.ROW_MAJOR_LAYOUT, device=mesh_device, memory_config=dram,
                                      mesh_mapper=self._shard_rows)
        self.ops: dict[str, int] = {}
        self.writes = 0
        self._views()
        self.rotary = self._prepare_rotary(kv, shape)
        self.flash = self._prepare_flash(scale, program_config, compute_kernel_config)
        self.combine = self._prepare_combine()

    # ---- build ---------------------------------------------------------------------------------

    def _op(self, name: str) -> Any:
        self.ops[name] = self.ops.get(name, 0) + 1
        return getattr(self.ttnn, name)

    def _views(self) -> None:
        """The device views of this step's row (``slice`` + ``reshape``: the same ops every step):
        ``append_pos`` (token t's ``append_rows[t]``, ``[B]``), ``attend_pos`` ``[R]``, ``page_table``
        (the users' ``[B, local_blocks]``) and ``attend_table`` (the rows' ``[R, local_blocks]``)."""
        op, b, r, p, inp, lb = self._op, self.batch, self.rows, self.prefix, self.inputs, self.local_blocks
        self.append_rows = [op("reshape")(op("slice")(inp, [0, p + t * b], [1, p + (t + 1) * b]), [b])
                            for t in range(self.tokens)]
        self.append_pos = self.append_rows[0]
        self.attend_pos = op("reshape")(op("slice")(inp, [0, p + r], [1, p + 2 * r]), [r])
        self.attend_table = op("reshape")(op("slice")(inp, [0, p + 2 * r], [1, self.row_width]), [r, lb])
        self.page_table = self.attend_table if r == b else \
            op("reshape")(op("slice")(inp, [0, p + 2 * r], [1, p + 2 * r + b * lb]), [b, lb])

    def _prepare_rotary(self, kv: Any, cache_shape: tuple[int, ...]) -> Any:
        if self.options.head_dim_v is not None:
            return None  # MLA: no fused append (loop_options.MLA_APPEND)
        grid = self.mesh.compute_with_storage_grid_size()
        program = rotary_program(batch=self.batch, num_q_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                                 head_dim=self.head_dim, cache_dtype=kv, cache_shape=cache_shape,
                                 max_blocks=self.local_blocks, grid=(int(grid.x), int(grid.y)),
                                 kv_pages=self.kv_pages)
        return PreparedProgram(program, self.mesh)

    def _prepare_flash(self, scale: Optional[float], program_config: Any, compute_kernel_config: Any) -> Any:
        """FlashDecode on one shard: the op's own validation and plan of these device tensors (a q
        allocated, never written), its `FlashDecodeStep` (the prepared program) kept."""
        ttnn = self.ttnn
        q = ttnn.allocate_tensor_on_device(ttnn.Shape([1, self.rows, self.num_heads, self.head_dim]), ttnn.bfloat16,
                                           ttnn.TILE_LAYOUT, self.mesh, ttnn.DRAM_MEMORY_CONFIG)
        k, v = self.caches[0]
        options = DecodeOptions(paged=True, page_table=self.attend_table, cur_pos_tensor=self.attend_pos, scale=scale,
                                program_config=program_config, compute_kernel_config=compute_kernel_config,
                                sliding_window_size=self.options.local_window, head_dim_v=self.options.head_dim_v,
                                return_lse=True)
        step = FlashDecodeStep(options, validate_decode(q, k, v, options), self.mesh)
        ttnn.deallocate(q)
        return step

    def _prepare_combine(self) -> Any:
        plan = make_combine_plan(partials=self.ranks + (self.sink_parts is not None), groups=self.rows,
                                 heads=self.num_heads, head_dim_v=self.head_dim_v, in_dtype=DataType.bfloat16,
                                 out_dtype=DataType.bfloat16)
        return CombineStep(plan, self.mesh)

    # ---- a step --------------------------------------------------------------------------------

    def host_rows(self, positions: Sequence[int], page_tables: Sequence[Any],
                  prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The mesh's devices' rows of one step, int32 ``[devices, row_width]`` (row-major over the mesh):
        device d gets the row of its CP rank (``device_ranks[d]``), `step_rows` of this loop's shards over
        the R query rows (``positions [B]``: each user's newest token, `loop_options.token_positions`;
        ``page_tables``: one ``[B, local_blocks]`` table per CP rank, repeated for the T tokens)."""
        if self.tokens == 1:
            rows = step_rows(self.shards, self.batch, self.local_blocks, self.prefix, positions, page_tables, prefix)
        else:
            if len(positions) != self.batch:
                raise ValueError(f"ContextParallelDecode: argument 'positions': expected {self.batch} ints >= -1, "
                                 f"got {list(positions)}")
            tables = [torch.as_tensor(t).repeat(self.tokens, 1) for t in page_tables]
            rows = step_rows(self.shards, self.rows, self.local_blocks, self.prefix,
                             token_positions(positions, self.tokens), tables, prefix)
        return rows if self.context_axis is None else rows[list(self.device_ranks)]

    def write(self, positions: Sequence[int], page_tables: Sequence[Any], prefix: Optional[torch.Tensor] = None) -> None:
        """Start a step: the n rows of `host_rows` in one host -> device write into ``inputs``, and the
        device views of the positions and page tables (``append_pos``, ``attend_pos``, ``page_table``)."""
        ttnn = self.ttnn
        rows = self.host_rows(positions, page_tables, prefix)
        self.ops = {}
        ttnn.copy_host_to_device_tensor(ttnn.from_torch(rows, dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT,
                                                        mesh_mapper=self._shard_rows), self.inputs)
        self.writes = 1
        self._views()

    def append(self, layer: int, qkv: Any, cos: Any, sin: Any, trans: Any) -> Any:
        """The fused RoPE + append of one layer: ``qkv`` ``[T, B, (NH + 2 NKV) D]`` (packed, interleaved
        pairs), ``cos`` / ``sin`` float32 tiles of each token's global position, ``[B, ceil(D/32)*32]``
        (T = 1) or ``[T, B, ceil(D/32)*32]``, ``trans`` the rotate-half blocks. K/V rows go into
        ``caches[layer]`` on the device owning each position only (``append_rows``), one launch per
        token; q is rotated on every device. Returns q ``[T, B, NH, D]``. Refused with MLA (`MLA_APPEND`)."""
        if self.options.head_dim_v is not None:
            raise NotImplementedError(f"ContextParallelDecode.append: {MLA_APPEND}")
        if self.tokens == 1:
            return self._rotary_run(layer, qkv, cos, sin, trans, self.append_pos)
        op, b = self._op, self.batch
        qs = []
        for t in range(self.tokens):
            x = op("slice")(qkv, [t, 0, 0], [t + 1, b, qkv.shape[-1]])
            c, s = (op("reshape")(op("slice")(a, [t, 0, 0], [t + 1, b, a.shape[-1]]), [b, a.shape[-1]])
                    for a in (cos, sin))
            qs.append(self._rotary_run(layer, x, c, s, trans, self.append_rows[t]))
        while len(qs) > 1:  # at most CONCAT_PARTS tensors a concat (its reader's code grows with them)
            qs = [op("concat")(qs[i:i + CONCAT_PARTS], dim=0) if len(qs[i:i + CONCAT_PARTS]) > 1 else qs[i]
                  for i in range(0, len(qs), CONCAT_PARTS)]
        return qs[0]

    def _rotary_run(self, layer: int, qkv: Any, cos: Any, sin: Any, trans: Any, pos: Any) -> Any:
        """One launch of the fused append for one token of every user (``pos``: its append positions)."""
        kc, vc = self.caches[layer]
        self.ops["rotary_kv_append"] = self.ops.get("rotary_kv_append", 0) + 1
        return self.rotary.run({"qkv": qkv, "cos": cos, "sin": sin, "trans": trans, "cur_pos": pos,
                                "page_table": self.page_table, "k_cache": kc, "v_cache": vc})[0]

    def attend(self, layer: int, q: Any) -> Any:
        """Decode attention of ``q`` ``[T, B, NH, D]`` (bfloat16 tiles, the same on every device) over
        the whole sharded cache of ``layer``: the merged output ``[T, B, NH, Dv]`` bfloat16 on every
        device. The R query rows run as one-token users (``reshape`` to ``[1, R, NH, D]`` and back for
        T > 1); with a sink, its partial joins the gathered ones (``concat``) before the combine."""
        op, r = self._op, self.rows
        self.ops["flash_decode"] = self.ops.get("flash_decode", 0) + 1
        if self.tokens > 1:
            q = op("reshape")(q, [1, r, self.num_heads, self.head_dim])
        out, rows = self._flash_run(layer, q)
        lse = lse_rows_to_tiles(self.ttnn, rows, r, self.num_heads, self.num_kv_heads, op=op)
        for axis in self.axes:
            extra = {} if axis is None else {"cluster_axis": axis}
            out = op("all_gather")(out, dim=0, **extra)
            lse = op("all_gather")(lse, dim=0, **extra)
        if self.sink_parts is not None:
            out = op("concat")([out, self.sink_parts[0]], dim=0)
            lse = op("concat")([lse, self.sink_parts[1]], dim=0)
        self.ops["combine"] = self.ops.get("combine", 0) + 1
        merged = self._combine_run(out, lse)
        if self.tokens > 1:
            merged = op("reshape")(merged, [self.tokens, self.batch, self.num_heads, self.head_dim_v])
        return merged

    def _flash_run(self, layer: int, q: Any) -> tuple[Any, Any]:
        """FlashDecode on every device's shard of ``layer``: (out ``[1, R, NH, Dv]`` bfloat16 tiles, the
        LSE rows ``[R*NKV, 32]`` float32 row-major), per device."""
        kc, vc = self.caches[layer]
        io = {"q": q, "k": kc, "cur_pos": self.attend_pos, "page_table": self.attend_table}
        if vc is not None:
            io["v"] = vc
        return self.flash.prepared.run(io)

    def _combine_run(self, outs: Any, lses: Any) -> Any:
        """The combine of the gathered ``[P, R, NH, Dv]`` / ``[P, R, NH, 1]`` (P: n, or n + 1 with the
        sink): the merged ``[1, R, NH, Dv]``."""
        merged, _ = self.combine.run(outs, lses)
        return merged

    def close(self) -> None:
        """Free the device tensors (the mesh is the caller's)."""
        mine = self.caches if self._own_caches else []
        for t in [*(c for kv in mine for c in kv if c is not None), self.inputs, *(self.sink_parts or ())]:
            self.ttnn.deallocate(t)
        self.caches = []
