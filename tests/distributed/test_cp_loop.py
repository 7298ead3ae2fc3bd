"""The context-parallel decode loop on a mesh (``ttdecode.distributed.device_context.ContextParallelDecode``)
without a device.

1. Its per-device step rows (what one ``copy_host_to_device_tensor`` puts on each device) against the
   interleaved layout's definition (block j of a user on device ``j mod n``, as local block ``j div n``)
   and against the Llama's allocator (``kv_cache.ContextParallelAllocator``), whose page tables they
   carry.
2. Its dataflow for numbers: ``LlamaDecoder(backend="device", devices=n, context_parallel=n)`` runs the
   loop unchanged (its row views, the LSE rows to tiles, the all_gathers, the decoder's wiring) on the
   torch twin of ttnn of tests/models/test_llama_device_twin.py, with our three programs replaced: the
   RoPE append and FlashDecode on each device's shard by torch (the kernels' conventions: a user with no
   key on a device gets zero rows and LSE -inf, the LSE rows ``[B*NKV, 32]`` with a KV group's heads in
   the first g columns and NaN beyond, which the loop must cut off), and the combine by the combine
   kernels on the host runtime (``ttdecode.ops.combine.run_combine``). The teacher-forced logits meet
   Hugging Face's with the host backends' thresholds, on a 1 x 2 mesh and on a 2 x 4 mesh (two
   all_gathers with ``cluster_axis``), with positions crossing cache blocks (several devices write).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from ttdecode.distributed import device_context as dc
from ttdecode.distributed.sharding import context_ranks, device_step_positions, mesh_axes, shard_plan
from ttdecode.models import LlamaDecoder
from ttdecode.models import llama_device as ld
from ttdecode.models.kv_cache import ContextParallelAllocator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
import test_llama_device_twin as twin  # noqa: E402  (the torch twin of ttnn)
from _llama_cases import assert_hf_agreement, hf_llama, joining_schedule, multi_token_drafts, teacher_forced  # noqa: E402


# ---- 1. the rows ----------------------------------------------------------------------------------


def held(d: int, n: int, bs: int, p: int) -> list[int]:
    """Device d's global positions <= p: those of the blocks j with j mod n == d."""
    return [x for x in range(p + 1) if (x // bs) % n == d]


@pytest.mark.parametrize("n, bs", [(2, 32), (8, 32), (3, 64)])
def test_step_positions_follow_the_interleaved_layout(n, bs):
    blocks = 3 * n + 1
    plan = shard_plan(blocks, bs, n, "interleaved")
    positions = [-1, 0, bs - 1, bs, 2 * bs + 5, blocks * bs - 1]
    append, attend = device_step_positions(plan, positions)
    for b, p in enumerate(positions):
        if p < 0:
            assert all(append[d][b] == -1 and attend[d][b] == -1 for d in range(n))
            continue
        for d in range(n):
            assert attend[d][b] == len(held(d, n, bs, p)) - 1
            assert append[d][b] == (attend[d][b] if (p // bs) % n == d else -1)
    with pytest.raises(ValueError, match=r"positions\[0\]"):
        device_step_positions(plan, [blocks * bs])


def test_step_rows_carry_the_allocators_page_tables_and_local_positions():
    n, bs, batch, max_seq = 4, 32, 3, 512
    alloc = ContextParallelAllocator(batch, max_seq, bs, num_blocks=batch * 4, context_parallel=n)
    plan_rows = shard_plan(max_seq // bs, bs, n, "interleaved")
    local_blocks = max(len(u) for u in plan_rows.units)
    assert local_blocks == alloc.local_max_blocks
    lengths = [0, 0, 0]
    for step in range(200):
        positions = [lengths[0], lengths[1] if step % 3 else -1, lengths[2] if step >= 50 else -1]
        plan = alloc.plan(positions)
        tables = alloc.page_tables(plan)
        prefix = torch.tensor([7, 8, 9] + positions, dtype=torch.int32)
        rows = dc.step_rows(plan_rows, batch, local_blocks, 2 * batch, positions, tables, prefix)
        assert rows.dtype == torch.int32 and rows.shape == (n, 2 * batch + 2 * batch + batch * local_blocks)
        for d in range(n):
            r = rows[d]
            assert r[:2 * batch].tolist() == prefix.tolist()
            append, attend = r[2 * batch:3 * batch].tolist(), r[3 * batch:4 * batch].tolist()
            assert attend == [alloc.local_position(d, p) for p in positions]
            assert append == [alloc.local_position(d, p) if p >= 0 and (p // bs) % n == d else -1 for p in positions]
            assert torch.equal(r[4 * batch:].reshape(batch, local_blocks), tables[d].to(torch.int32))
            # the block a write goes to is allocated on that device
            for b, p in enumerate(append):
                if p >= 0:
                    assert int(tables[d][b, p // bs]) >= 0
        alloc.commit(plan)
        lengths = [p + 1 if p >= 0 else lengths[b] for b, p in enumerate(positions)]


def test_step_rows_refuse_bad_input_by_name():
    plan = shard_plan(8, 32, 2, "interleaved")
    tables = [torch.zeros(2, 4, dtype=torch.int32)] * 2
    with pytest.raises(ValueError, match="'positions'"):
        dc.step_rows(plan, 2, 4, 0, [0], tables)
    with pytest.raises(ValueError, match="'positions'"):
        dc.step_rows(plan, 2, 4, 0, [0, -2], tables)
    with pytest.raises(ValueError, match="'page_tables'"):
        dc.step_rows(plan, 2, 4, 0, [0, 1], tables[:1])
    with pytest.raises(ValueError, match=r"'page_tables\[1\]'"):
        dc.step_rows(plan, 2, 4, 0, [0, 1], [tables[0], torch.zeros(2, 3, dtype=torch.int32)])
    with pytest.raises(ValueError, match="'prefix'"):
        dc.step_rows(plan, 2, 4, 1, [0, 1], tables)


def test_gather_axes_cover_the_mesh():
    assert dc.gather_axes((1, 8)) == (None,) and dc.gather_axes((8, 1)) == (None,)
    assert dc.gather_axes((2, 4)) == (1, 0)


def test_mesh_axes_and_context_ranks_of_a_2d_mesh():
    """CP along the mesh axis of C devices (axis 1 when both are), TP along the other; a device's CP
    rank is its coordinate along the CP axis (row-major device order)."""
    assert mesh_axes((1, 8), 1) == (None, None) and mesh_axes((2, 4), 8) == (None, None)
    assert mesh_axes((2, 4), 4) == (1, 0) and mesh_axes((2, 4), 2) == (0, 1)
    assert mesh_axes((4, 8), 4) == (0, 1) and mesh_axes((4, 8), 8) == (1, 0) and mesh_axes((4, 4), 4) == (1, 0)
    with pytest.raises(NotImplementedError, match="context_parallel: expected 1, the mesh's 8 devices"):
        mesh_axes((1, 8), 2)
    assert context_ranks((2, 4), None) == tuple(range(8))
    assert context_ranks((2, 4), 1) == (0, 1, 2, 3, 0, 1, 2, 3)
    assert context_ranks((2, 4), 0) == (0, 0, 0, 0, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="'context_axis'"):
        context_ranks((1, 8), 0)


# ---- 2. the dataflow on the torch twin ------------------------------------------------------------


class TwinMesh(twin.TwinDevice):
    """A rows x cols twin mesh (device d at (d // cols, d % cols))."""

    def __init__(self, shape: tuple[int, int]) -> None:
        super().__init__(shape[0] * shape[1])
        self.shape = shape


def twin_mesh_ttnn(ttnn: Any, shape: tuple[int, int], base: Any) -> Any:
    """The twin's ttnn (``base``: test_llama_device_twin.twin_ttnn), with the loop's extra calls:
    to_layout of a device value (no value change), all_gather and all_reduce along one mesh axis
    (``cluster_axis``) or over all devices, and ``ShardTensor2dMesh`` (a split over each axis with a dim,
    replicated along an axis without)."""
    rows, cols = shape
    t = base(ttnn, rows * cols)
    base_from_torch = t.from_torch

    def group(d: int, cluster_axis: Any) -> list[int]:
        r, c = divmod(d, cols)
        if cluster_axis is None:
            return list(range(rows * cols))
        return [r * cols + j for j in range(cols)] if cluster_axis == 1 else [i * cols + c for i in range(rows)]

    def all_gather(x: Any, dim: int, cluster_axis: Any = None) -> Any:
        return twin.TwinTensor([torch.cat([x.ts[e] for e in group(d, cluster_axis)], dim=dim)
                                for d in range(rows * cols)])

    def all_reduce(x: Any, cluster_axis: Any = None) -> Any:
        return twin.TwinTensor([sum(x.ts[e] for e in group(d, cluster_axis)) for d in range(rows * cols)])

    def from_torch(x: torch.Tensor, dtype: Any = None, layout: Any = None, device: Any = None,
                   memory_config: Any = None, mesh_mapper: Any = None) -> Any:
        if mesh_mapper is None or mesh_mapper[0] != "shard2d":
            return base_from_torch(x, dtype=dtype, layout=layout, device=device, memory_config=memory_config,
                                   mesh_mapper=mesh_mapper)
        parts = []
        for d in range(rows * cols):
            part = x
            for axis, dim in enumerate(mesh_mapper[2]):
                if dim is not None:
                    part = part.chunk(shape[axis], dim=dim)[divmod(d, cols)[axis]]
            parts.append(part)
        dealt = base_from_torch(torch.stack(parts), dtype=dtype, layout=layout, device=device,
                                mesh_mapper=("shard", 0))
        return twin.TwinTensor([p[0] for p in dealt.ts])

    t.to_layout = twin.each(lambda x, layout: x.clone())
    t.all_gather, t.all_reduce, t.from_torch = all_gather, all_reduce, from_torch
    t.concat = lambda xs, dim: twin.TwinTensor([torch.cat([x.ts[d] for x in xs], dim=dim)
                                                for d in range(len(xs[0].ts))])
    t.ShardTensor2dMesh = lambda device, mesh_shape, dims: ("shard2d", tuple(mesh_shape), tuple(dims))
    return t


class TwinLoop(dc.ContextParallelDecode):
    """The loop on the twin: the RoPE append and FlashDecode as torch per device, the combine as the
    combine kernels on the host runtime; everything else is the loop's own code."""

    real_ttnn: Any = None

    def _prepare_rotary(self, kv: Any, cache_shape: tuple[int, ...]) -> Any:
        self.cache_dtype = getattr(self.real_ttnn, kv.value)
        return None

    def _prepare_flash(self, *args: Any) -> Any:
        return None

    def _prepare_combine(self) -> Any:
        return None

    def _rotary_run(self, layer: int, qkv: Any, cos: Any, sin: Any, trans: Any, pos: Any) -> Any:
        """One launch of the append (one token of every user; ``pos``: its append positions)."""
        self.ops["rotary_kv_append"] = self.ops.get("rotary_kv_append", 0) + 1
        kc, vc = self.caches[layer]
        b, nh, nkv, d, bs, real = self.batch, self.num_heads, self.num_kv_heads, self.head_dim, self.block_size, \
            self.real_ttnn
        out = []
        for dev in range(self.devices):
            x = qkv.ts[dev].reshape(b, nh + 2 * nkv, d)
            rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).reshape(x.shape)  # pairs (2i, 2i+1)
            y = x * cos.ts[dev][:, None, :d] + rot * sin.ts[dev][:, None, :d]
            q, k, v = y[:, :nh], y[:, nh:nh + nkv], x[:, nh + nkv:]
            for u in range(b):
                p = int(pos.ts[dev][u])
                if p >= 0:
                    blk = int(self.page_table.ts[dev][u, p // bs])
                    for cache, rows in ((kc, k), (vc, v)):  # the row alone in its format, as the append writes it
                        tile = torch.zeros(nkv, 32, d)
                        tile[:, 0] = rows[u]
                        host = real.from_torch(tile, dtype=self.cache_dtype, layout=real.TILE_LAYOUT)
                        cache.ts[dev][blk, :, p % bs] = real.to_torch(host).to(torch.float32)[:, 0]
            out.append(q.to(torch.bfloat16).to(torch.float32)[None])
        return twin.TwinTensor(out)

    def _flash_run(self, layer: int, q: Any) -> tuple[Any, Any]:
        kc, vc = self.caches[layer]
        b, nh, nkv, d, bs = self.rows, self.num_heads, self.num_kv_heads, self.head_dim, self.block_size  # R rows
        g = nh // nkv
        outs, rows = [], []
        for dev in range(self.devices):
            out = torch.zeros(1, b, nh, d)
            lse_rows = torch.full((b * nkv, 32), float("nan"))  # columns beyond g: not the loop's to read
            for u in range(b):
                p = int(self.attend_pos.ts[dev][u])
                if p < 0:  # no key on this device: zero rows, LSE -inf (the kernels' skipped user)
                    lse_rows[u * nkv:(u + 1) * nkv, :g] = float("-inf")
                    continue
                blocks = self.attend_table.ts[dev][u, : p // bs + 1].long()
                keys = kc.ts[dev][blocks].permute(1, 0, 2, 3).reshape(nkv, -1, d)[:, : p + 1]
                vals = vc.ts[dev][blocks].permute(1, 0, 2, 3).reshape(nkv, -1, d)[:, : p + 1]
                qh = q.ts[dev][0, u].reshape(nkv, g, d)
                logits = qh @ keys.transpose(1, 2) / math.sqrt(d)
                out[0, u] = (torch.softmax(logits, dim=-1) @ vals).reshape(nh, d)
                lse_rows[u * nkv:(u + 1) * nkv, :g] = torch.logsumexp(logits, dim=-1)
            outs.append(out.to(torch.bfloat16).to(torch.float32))
            rows.append(lse_rows)
        return twin.TwinTensor(outs), twin.TwinTensor(rows)

    def _combine_run(self, outs: Any, lses: Any) -> Any:
        from ttdecode.core.formats import DataType
        from ttdecode.ops.combine import run_combine

        if self.context_axis is None:  # the gathers left every device the same
            assert all(torch.equal(o, outs.ts[0]) for o in outs.ts)
        merged: list[torch.Tensor] = []
        for o, lse in zip(outs.ts, lses.ts):  # one combine per distinct (gathered partials), per device
            assert o.shape[0] == self.ranks and lse.shape == o.shape[:3] + (1,)
            done = [m for m, o2, l2 in zip(merged, outs.ts, lses.ts) if torch.equal(o, o2) and torch.equal(lse, l2)]
            if not done:
                done = [run_combine(o, lse[..., 0], in_dtype=DataType.bfloat16,
                                    out_dtype=DataType.bfloat16)[0].to(torch.float32)]
            merged.append(done[0])
        return twin.TwinTensor(merged)


def patch_twin_mesh(monkeypatch, ttnn: Any, shape: tuple[int, int], loop: bool = True) -> None:
    """The decoder's device path on the torch twin of a `shape` mesh: twin decoder (bfloat16 weights) and,
    with `loop`, the twin CP loop (TwinLoop) in place of ContextParallelDecode."""
    monkeypatch.setattr(twin.TwinDecoder, "real_ttnn", ttnn)
    monkeypatch.setattr(twin.TwinDecoder, "weights", "bfloat16")
    monkeypatch.setattr(ld, "DeviceDecoder", twin.TwinDecoder)
    if loop:
        monkeypatch.setattr(TwinLoop, "real_ttnn", ttnn)
        monkeypatch.setattr(dc, "ContextParallelDecode", TwinLoop)
    base = twin.twin_ttnn
    monkeypatch.setattr(twin, "twin_ttnn", lambda real, _n: twin_mesh_ttnn(real, shape, base))


@pytest.mark.parametrize("shape", [(1, 2), (2, 4)], ids=["1x2", "2x4"])
def test_context_parallel_loop_dataflow_matches_hf_teacher_forced(ttnn, monkeypatch, shape):
    """40 steps (slot 1 reaches position 37: blocks 0 and 1 on devices 0 and 1; the others' partials are
    empty), bfloat16 weights and cache: the host backends' thresholds."""
    n = shape[0] * shape[1]
    patch_twin_mesh(monkeypatch, ttnn, shape)
    hf = hf_llama(8, 2, 64)
    sched = joining_schedule(hf.config.vocab_size, steps=40)
    dec = LlamaDecoder.from_hf(hf, batch=sched.batch, max_seq_len=32 * n, block_size=32, kv_dtype="bfloat16",
                               devices=n, context_parallel=n, backend="device", device=TwinMesh(shape))
    loop = dec._device.cp
    assert isinstance(loop, TwinLoop) and dec._device.tp == 1 and dec._device.nkv == 2
    assert_hf_agreement(teacher_forced(dec, hf, sched))
    gathers = 2 if shape[0] > 1 else 1
    assert dec._device.ops["all_gather"] == 2 * gathers * 2 and dec._device.ops["combine"] == 2
    assert "all_reduce" not in dec._device.ops


def test_tensor_times_context_parallel_on_one_mesh_is_refused_by_name(ttnn):
    hf = hf_llama(8, 4, 64)
    with pytest.raises(NotImplementedError, match="context_parallel: expected 1, the mesh's 8 devices, or the size of one axis of its 2-D mesh 1x8"):
        LlamaDecoder.from_hf(hf, batch=2, max_seq_len=512, block_size=32, devices=8, context_parallel=2,
                             backend="device", device=TwinMesh((1, 8)))


@pytest.mark.parametrize("shape, cp, kv_heads, layers", [
    ((2, 4), 4, 2, 2), ((2, 4), 2, 4, 2),
    pytest.param((4, 8), 4, 8, 1, marks=pytest.mark.slow),  # a Galaxy: TP 8 along axis 1, CP 4 along axis 0
], ids=["t3k-tp2xcp4", "t3k-tp4xcp2", "galaxy-tp8xcp4"])
def test_tensor_times_context_parallel_dataflow_matches_hf_teacher_forced(ttnn, monkeypatch, shape, cp, kv_heads,
                                                                         layers):
    """TP x CP on one 2 x 4 mesh (``devices=8, context_parallel=C``): CP along the mesh axis of C devices,
    TP along the other (weights split over it by ``ShardTensor2dMesh``, replicated along the CP axis);
    per layer one all_gather of O and one of the LSE along the CP axis (``cluster_axis``), the combine of
    the C partials, and all_reduce after O and down along the TP axis; the vocabulary gathered along the
    TP axis. 40 steps crossing a block, bfloat16 weights and cache: the host backends' thresholds. Each
    device's step row is its CP rank's (the same down the TP axis)."""
    n = shape[0] * shape[1]
    cp_axis = 1 if shape[1] == cp else 0
    patch_twin_mesh(monkeypatch, ttnn, shape)
    hf = hf_llama(8, kv_heads, 64, layers=layers)
    sched = joining_schedule(hf.config.vocab_size, steps=40)
    dec = LlamaDecoder.from_hf(hf, batch=sched.batch, max_seq_len=32 * cp, block_size=32, kv_dtype="bfloat16",
                               devices=n, context_parallel=cp, backend="device", device=TwinMesh(shape))
    dev, loop = dec._device, dec._device.cp
    assert isinstance(loop, TwinLoop) and (dev.cp_axis, dev.tp_axis) == (cp_axis, 1 - cp_axis)
    assert dev.tp == n // cp and dev.nkv == kv_heads // dev.tp and loop.ranks == cp and loop.axes == (cp_axis,)
    rows = []
    host_rows = loop.host_rows
    loop.host_rows = lambda *a, **k: rows.append(host_rows(*a, **k)) or rows[-1]
    assert_hf_agreement(teacher_forced(dec, hf, sched))
    assert dev.ops["all_gather"] == 2 * layers + 1 and dev.ops["combine"] == layers
    assert dev.ops["all_reduce"] == 2 * layers
    rank = [divmod(d, shape[1])[cp_axis] for d in range(n)]
    for r in rows:  # device d carries the row of its CP rank
        assert r.shape[0] == n and all(torch.equal(r[d], r[rank.index(rank[d])]) for d in range(n))


@pytest.mark.parametrize("shape, cp", [((2, 4), 4), ((1, 2), 2)], ids=["t3k-tp2xcp4", "1x2-cp2"])
def test_multi_token_steps_of_context_parallel_dataflow_match_hf(ttnn, monkeypatch, shape, cp):
    """T tokens per user (prompt chunks, draft verification, a rewind; `multi_token_drafts`: T of 8, 6,
    5, 2, 18 and 1, the 18 crossing the block at 32) with context parallelism on the device path: the
    decoder's loop of T B rows per T (`DeviceDecoder.chunk_cp`, the same caches), each row its own
    one-token user on every shard; TP x CP on a 2 x 4 mesh and CP alone on a 1 x 2. bfloat16 weights
    and cache: the host backends' thresholds."""
    n = shape[0] * shape[1]
    patch_twin_mesh(monkeypatch, ttnn, shape)
    hf = hf_llama(8, 2 * (n // cp), 64)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=32 * cp, block_size=32, kv_dtype="bfloat16", devices=n,
                               context_parallel=cp, backend="device", device=TwinMesh(shape))
    assert_hf_agreement(multi_token_drafts(dec, hf))
    dev = dec._device
    assert sorted(dev.chunk_cp) == [2, 5, 6, 8, 18]
    assert all(loop.caches is dev.cp.caches and loop.tokens == t for t, loop in dev.chunk_cp.items())
    assert dev.ops["combine"] == 2  # the last step: one token per user, the one-token loop
    dec.close()


def test_block16_context_parallel_dataflow_matches_hf(ttnn, monkeypatch):
    """block_size 16 in tile pages on a twin 1 x 2 mesh: max_seq_len 80 is 5 blocks, 3 on rank 0, so each
    rank's page table takes 4 entries (whole key tiles); `multi_token_drafts` crosses the blocks at 16 and 32
    (one-token loop and T-token loops over the same caches). bfloat16 weights and cache: the host backends'
    thresholds."""
    patch_twin_mesh(monkeypatch, ttnn, (1, 2))
    hf = hf_llama(8, 2, 64)
    dec = LlamaDecoder.from_hf(hf, batch=2, max_seq_len=80, block_size=16, kv_pages="tile", kv_dtype="bfloat16",
                               devices=2, context_parallel=2, backend="device", device=TwinMesh((1, 2)))
    loop = dec._device.cp
    assert loop.local_blocks == 4 and loop.row_width == 2 * 2 + 2 * 2 + 2 * 4
    assert_hf_agreement(multi_token_drafts(dec, hf))
    dec.close()


def test_tensor_parallel_alone_on_a_2x4_mesh_matches_hf_teacher_forced(ttnn, monkeypatch):
    """TP 8 ways over a 2 x 4 mesh (``devices=8``, no context parallelism): the weights dealt row-major
    over the mesh (``ShardTensorToMesh``), each row-parallel sum as two all_reduces (along the rows'
    devices, ``cluster_axis`` 1, then along the columns, 0) and the vocabulary slices gathered in the same
    two steps, which put them back in order. 40 steps, bfloat16 weights and cache: the host backends'
    thresholds."""
    shape = (2, 4)
    patch_twin_mesh(monkeypatch, ttnn, shape, loop=False)
    hf = hf_llama(8, 8, 32, layers=1)
    sched = joining_schedule(hf.config.vocab_size, steps=40)
    dec = LlamaDecoder.from_hf(hf, batch=sched.batch, max_seq_len=64, block_size=32, kv_dtype="bfloat16", devices=8,
                               backend="device", device=TwinMesh(shape))
    dev = dec._device
    assert dev.cp is None and dev.tp == 8 and dev.tp_axes == (1, 0) and dev.nkv == 1
    assert_hf_agreement(teacher_forced(dec, hf, sched))
    assert dev.ops["all_reduce"] == 2 * 2 and dev.ops["all_gather"] == 2
