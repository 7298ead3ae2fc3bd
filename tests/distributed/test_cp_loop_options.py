"""The context-parallel decode loop's options (``ttdecode.distributed.loop_options``): sliding window,
attention sink, several tokens per user per step, MLA -- each against the float64 reference of the
whole (unsharded) cache with `ttdecode.accuracy`'s thresholds.

The loop (``device_context.ContextParallelDecode``) runs its own code on the torch twin of ttnn
(tests/distributed/test_cp_loop.py: its row views, per-token slices and launches, the LSE rows to
tiles, the all_gathers, the sink's partial joined by concat, the reshapes) with the programs replaced:
the RoPE append by torch (each row quantized alone in its tile, as the append writes it), FlashDecode
on each device's shard by the FlashDecode kernels on the host runtime (paged, in the loop's kv_pages:
bank-local by default; the device's own attention positions, page table and local window,
``return_lse=True``), the combine by the combine
kernels on the host runtime. The cache is filled independently of the loop's rows (global block j of
a user on device j mod n as its local block j div n, the allocator's page tables), so a row pointing
at the wrong keys fails the comparison. Positions cross blocks and windows; users skip steps. Every
option also along one axis of a 2 x 4 mesh (``context_axis``), the other axis's devices tensor-parallel
groups with their own data, each device against its group's reference."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

from ttdecode.accuracy import check_close, check_lse
from ttdecode.api import decode
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import from_torch
from ttdecode.distributed import device_context as dc
from ttdecode.distributed.loop_options import MLA_APPEND, loop_options, token_positions
from ttdecode.models.kv_cache import ContextParallelAllocator
from ttdecode.ops.combine import run_combine
from ttdecode.ops.flash_decode.options import DecodeOptions
from ttdecode.reference import sdpa_decode_reference

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_llama_device_twin as twin  # noqa: E402  (the torch twin of ttnn)
from test_cp_loop import TwinMesh, twin_mesh_ttnn  # noqa: E402

def option_ttnn(real: Any, shape: tuple[int, int]) -> Any:
    """The twin's ttnn with the loop's extra calls: ``concat`` over each device's values."""
    t = twin_mesh_ttnn(real, shape, twin.twin_ttnn)
    t.concat = lambda xs, dim: twin.TwinTensor([torch.cat([x.ts[d] for x in xs], dim=dim)
                                                for d in range(len(xs[0].ts))])
    return t


class KernelTwinLoop(dc.ContextParallelDecode):
    """The loop on the twin, FlashDecode and the combine as our kernels on the host runtime."""

    real_ttnn: Any = None

    def _prepare_rotary(self, kv: Any, cache_shape: tuple[int, ...]) -> Any:
        self.cache_format, self.kv = getattr(self.real_ttnn, kv.value), kv
        return None

    def _prepare_flash(self, scale: Optional[float], program_config: Any, *args: Any) -> Any:
        self.scale, self.program_config = scale, program_config  # its kv_pages: the loop's ("key_row" default)
        return None

    def _prepare_combine(self) -> Any:
        return None

    def _rotary_run(self, layer: int, qkv: Any, cos: Any, sin: Any, trans: Any, pos: Any) -> Any:
        self.ops["rotary_kv_append"] = self.ops.get("rotary_kv_append", 0) + 1
        kc, vc = self.caches[layer]
        b, nh, nkv, d = self.batch, self.num_heads, self.num_kv_heads, self.head_dim
        out = []
        for dev in range(self.devices):
            x = qkv.ts[dev].reshape(b, nh + 2 * nkv, d)
            y = rotate(x, cos.ts[dev][:, None, :d], sin.ts[dev][:, None, :d])
            k, v = y[:, nh:nh + nkv], x[:, nh + nkv:]
            for u in range(b):
                p = int(pos.ts[dev][u])
                if p >= 0:
                    blk = int(self.page_table.ts[dev][u, p // self.block_size])
                    for cache, rows in ((kc, k), (vc, v)):
                        cache.ts[dev][blk, :, p % self.block_size] = row_in_format(self.real_ttnn, rows[u],
                                                                                   self.cache_format)
            out.append(y[:, :nh].to(torch.bfloat16).to(torch.float32)[None])
        return twin.TwinTensor(out)

    def _flash_run(self, layer: int, q: Any) -> tuple[Any, Any]:
        kc, vc = self.caches[layer]
        r, nh, nkv = self.rows, self.num_heads, self.num_kv_heads
        g, fmt = nh // nkv, self.kv
        outs, rows = [], []
        for dev in range(self.devices):
            options = DecodeOptions(paged=True, page_table=self.attend_table.ts[dev].to(torch.int32),
                                    cur_pos=[int(p) for p in self.attend_pos.ts[dev]], scale=self.scale,
                                    sliding_window_size=self.options.local_window,
                                    head_dim_v=self.options.head_dim_v, return_lse=True, backend="host",
                                    program_config=self.program_config)
            v = None if vc is None else from_torch(vc.ts[dev], fmt)
            o, lse = decode(from_torch(q.ts[dev], DataType.bfloat16), from_torch(kc.ts[dev], fmt), v, options)
            lse_rows = torch.full((r * nkv, 32), float("nan"))  # the kernels' rows: a group's heads first
            lse_rows[:, :g] = lse.to(torch.float32).reshape(r * nkv, g)
            outs.append(o.to(torch.float32))
            rows.append(lse_rows)
        return twin.TwinTensor(outs), twin.TwinTensor(rows)

    def _combine_run(self, outs: Any, lses: Any) -> Any:
        """The combine of every device's gathered partials (one run per distinct set: a TP group's devices
        gather the same); ``merged_lse[d]``: device d's merged LSE ``[1, R, NH]``."""
        if self.context_axis is None:
            assert all(torch.equal(o, outs.ts[0]) for o in outs.ts)
        done: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        merged, self.merged_lse = [], []
        for d, (o, l_) in enumerate(zip(outs.ts, lses.ts)):
            assert o.shape[0] == self.ranks + (self.sink_parts is not None)
            same = next((e for e in done if torch.equal(outs.ts[e], o) and torch.equal(lses.ts[e], l_)), None)
            if same is None:
                m, lse = run_combine(o, l_[..., 0], in_dtype=DataType.bfloat16, out_dtype=DataType.bfloat16)
                done[d] = (m.to(torch.float32), lse.reshape(1, self.rows, self.num_heads))
                same = d
            merged.append(done[same][0])
            self.merged_lse.append(done[same][1])
        return twin.TwinTensor(merged)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on interleaved pairs (2i, 2i+1), float32."""
    rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).reshape(x.shape)
    return x * cos + rot * sin


def row_in_format(real: Any, row: torch.Tensor, fmt: Any) -> torch.Tensor:
    """A cache row ``[NKV, D]`` as the append stores it: alone in its tile, in the cache's format."""
    tile = torch.zeros(row.shape[0], 32, row.shape[1])
    tile[:, 0] = row
    host = real.from_torch(tile, dtype=fmt, layout=real.TILE_LAYOUT)
    return real.to_torch(host).to(torch.float32)[:, 0]


class Case:
    """A loop on a twin mesh, its caller's allocator, and the whole cache as the reference sees it.

    ``context_axis``: the loop along one axis of a 2-D mesh; the devices along the other axis form G
    tensor-parallel groups, each with its own keys, values and queries (other heads), each checked
    against its own reference (G = 1 without)."""

    def __init__(self, ttnn: Any, monkeypatch: Any, shape: tuple[int, int], *, batch: int, tokens: int = 1,
                 window: Optional[int] = None, sink: Optional[torch.Tensor] = None, head_dim_v: Optional[int] = None,
                 kv: str = "bfloat8_b", num_heads: int = 4, num_kv_heads: int = 2, head_dim: int = 64,
                 max_seq_len: int = 512, context_axis: Optional[int] = None) -> None:
        monkeypatch.setattr(KernelTwinLoop, "real_ttnn", ttnn)
        self.loop = KernelTwinLoop(TwinMesh(shape), batch=batch, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                   head_dim=head_dim, max_seq_len=max_seq_len, block_size=32,
                                   num_blocks=batch * 8, kv_dtype=kv, tokens=tokens, sliding_window_size=window,
                                   attention_sink=sink, head_dim_v=head_dim_v, context_axis=context_axis,
                                   ttnn=option_ttnn(ttnn, shape))
        n = self.loop.ranks
        self.real, self.n, self.bs, self.batch, self.tokens = ttnn, n, 32, batch, tokens
        self.nh, self.nkv, self.d, self.dv = num_heads, num_kv_heads, head_dim, head_dim_v
        self.window, self.sink, self.kv = window, sink, getattr(ttnn, kv)
        # each device's TP group: its coordinate along the other axis (one group without context_axis)
        self.group = [0 if context_axis is None else divmod(d, shape[1])[1 - context_axis]
                      for d in range(self.loop.devices)]
        self.groups = max(self.group) + 1
        self.alloc = ContextParallelAllocator(batch, max_seq_len, self.bs, num_blocks=batch * 8, context_parallel=n)
        self.k = torch.zeros(self.groups, batch, num_kv_heads, max_seq_len, head_dim)
        self.v = torch.zeros(self.groups, batch, num_kv_heads, max_seq_len, head_dim)
        self.gen = torch.Generator().manual_seed(7)

    def devices_of(self, rank: int, g: int) -> list[int]:
        """The devices of CP rank ``rank`` in TP group ``g``."""
        return [d for d in range(self.loop.devices) if self.loop.device_ranks[d] == rank and self.group[d] == g]

    def next_positions(self, active: list[bool]) -> list[int]:
        """Each active user's newest token this step (its next T positions), -1 for the others."""
        return [self.alloc.lengths[b] + self.tokens - 1 if a else -1 for b, a in enumerate(active)]

    def allocate(self, positions: list[int]) -> tuple[torch.Tensor, ...]:
        """The caller's allocator, one token at a time (it takes a user's next position only)."""
        for t in range(self.tokens):
            plan = self.alloc.plan([p - (self.tokens - 1) + t if p >= 0 else -1 for p in positions])
            self.alloc.commit(plan)
        return self.alloc.page_tables()

    def fill(self, upto: int) -> None:
        """Cache positions 0..upto-1 of every user, written at the layout's place independently of the loop."""
        for p in range(upto):
            self.alloc.commit(self.alloc.plan([p] * self.batch))
        tables = self.alloc.page_tables()
        kc, vc = self.loop.caches[0]
        for g in range(self.groups):
            for b in range(self.batch):
                for p in range(upto):
                    j = p // self.bs
                    rank, local = j % self.n, j // self.n
                    blk = int(tables[rank][b, local])
                    k, v = (torch.randn(self.nkv, self.d, generator=self.gen) for _ in range(2))
                    self.k[g, b, :, p] = row_in_format(self.real, k, self.kv)
                    self.v[g, b, :, p] = row_in_format(self.real, v, self.kv) if vc is not None else self.k[g, b, :, p]
                    for dev in self.devices_of(rank, g):
                        kc.ts[dev][blk, :, p % self.bs] = self.k[g, b, :, p]
                        if vc is not None:
                            vc.ts[dev][blk, :, p % self.bs] = self.v[g, b, :, p]

    def step(self, positions: list[int]) -> None:
        """One step of the loop: write, append (the T tokens' K/V, q rotated), attend; then the merged
        output and LSE of every live user on every device against the float64 reference of its TP
        group's whole cache."""
        t_, b_, nh, nkv, d = self.tokens, self.batch, self.nh, self.nkv, self.d
        tables = self.allocate(positions)
        self.loop.write(positions, tables)
        rows = token_positions(positions, t_)
        qs = []
        per_group = []
        for g in range(self.groups):
            qkv = torch.randn(t_, b_, (nh + 2 * nkv) * d, generator=self.gen).to(torch.bfloat16).to(torch.float32)
            angle = torch.rand(t_, b_, d // 2, generator=self.gen) * 6.0
            cos, sin = (f(angle).repeat_interleave(2, dim=-1) for f in (torch.cos, torch.sin))
            per_group.append((qkv, cos, sin))
        if self.dv is None:
            def forms(i: int) -> Any:  # per device its group's qkv (i = 0), cos, sin in the loop's forms
                fit = (lambda a: a) if t_ > 1 else (lambda a: a[:1]) if i == 0 else (lambda a: a[0])  # T = 1:
                return twin.TwinTensor([fit(per_group[self.group[dev]][i]) for dev in range(self.loop.devices)])
            q = self.loop.append(0, forms(0), forms(1), forms(2), None)  # [1, B, W] / [B, R]
        for g, (qkv, cos, sin) in enumerate(per_group):
            x = qkv.reshape(t_, b_, nh + 2 * nkv, d)
            want = rotate(x, cos[:, :, None], sin[:, :, None])
            qs.append(want[:, :, :nh].to(torch.bfloat16).to(torch.float32))
            if self.dv is None:
                for dev in range(self.loop.devices):
                    if self.group[dev] == g:
                        assert torch.equal(q.ts[dev].reshape(t_, b_, nh, d), qs[g])
                for i, p in enumerate(rows):  # the reference's cache: what the append must have written
                    if p >= 0:
                        self.k[g, i % b_, :, p] = row_in_format(self.real, want[i // b_, i % b_, nh:nh + nkv], self.kv)
                        self.v[g, i % b_, :, p] = row_in_format(self.real, x[i // b_, i % b_, nh + nkv:], self.kv)
            else:  # MLA: the latent rows written by the caller (the loop refuses the fused append)
                self.write_latent(g, rows, want[:, :, nh:nh + nkv])
        if self.dv is not None:
            q = twin.TwinTensor([qs[self.group[dev]] for dev in range(self.loop.devices)])
        out = self.loop.attend(0, q)
        assert out.shape == (t_, b_, nh, self.dv or d)
        for g in range(self.groups):
            v = None if self.dv is not None else self.v[g].double()
            ref, ref_lse = sdpa_decode_reference(qs[g].double(), self.k[g].double(), v, cur_pos=positions,
                                                 sliding_window_size=self.window, attention_sink=self.sink,
                                                 head_dim_v=self.dv, return_lse=True)
            for dev in (e for e in range(self.loop.devices) if self.group[e] == g):
                lse = self.loop.merged_lse[dev].reshape(t_, b_, nh)
                for b, p in enumerate(positions):
                    if p >= 0:
                        check_close(out.ts[dev][:, b], ref[:, b], f"device {dev}: user {b} at {p}: output")
                        check_lse(lse[:, b], ref_lse[:, b], f"device {dev}: user {b} at {p}: LSE")

    def write_latent(self, g: int, rows: list[int], k: torch.Tensor) -> None:
        """MLA: each row's latent K of TP group ``g`` at the loop's own append positions (``append_rows``,
        ``page_table``) on that group's devices."""
        kc, _ = self.loop.caches[0]
        mine = [dev for dev in range(self.loop.devices) if self.group[dev] == g]
        for i, p in enumerate(rows):
            if p < 0:
                continue
            t, b = divmod(i, self.batch)
            value = row_in_format(self.real, k[t, b], self.kv)
            self.k[g, b, :, p] = value
            owners = [dev for dev in mine if int(self.loop.append_rows[t].ts[dev][b]) >= 0]
            assert [self.loop.device_ranks[dev] for dev in owners] == [(p // self.bs) % self.n]
            local = int(self.loop.append_rows[t].ts[owners[0]][b])
            blk = int(self.loop.page_table.ts[owners[0]][b, local // self.bs])
            kc.ts[owners[0]][blk, :, local % self.bs] = value


def sinks(nh: int) -> torch.Tensor:
    return torch.tensor([0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 3.0, 0.25][:nh])


def test_sliding_window_of_n_blocks_is_exact_per_shard(ttnn, monkeypatch):
    """1 x 2 mesh, W = 64 = 2 x 32: every shard runs window 32; positions from 120 on: the window's
    first key crosses the block boundary at 64 and the newest the one at 128 (a device's window keys
    then sit in two of its blocks)."""
    case = Case(ttnn, monkeypatch, (1, 2), batch=3, window=64)
    assert case.loop.options.local_window == 32
    case.fill(120)
    for s in range(16):
        case.step(case.next_positions([True, s % 3 != 0, s % 5 != 1]))


def test_sink_joins_once_through_the_combine(ttnn, monkeypatch):
    """1 x 4 mesh, sink per head: a user over three devices' blocks, and a user restarted at 0 whose
    keys all sit on device 0 (three devices give LSE -inf); the merged LSE includes exp(scale x sink)
    once."""
    case = Case(ttnn, monkeypatch, (1, 4), batch=2, sink=sinks(4))
    assert case.loop.sink_parts is not None
    case.fill(70)
    for s in range(4):  # user 1 restarts at 0: its keys all on device 0
        case.step([70 + s, s])


def test_tokens_keep_the_causal_structure_across_shards(ttnn, monkeypatch):
    """2 x 2 mesh (two gathers), T = 8 tokens per user: the steps' tokens straddle the blocks at 32 and
    64 (two devices write in one step, the others see all 8 tokens attend one local prefix)."""
    case = Case(ttnn, monkeypatch, (2, 2), batch=2, tokens=8)
    case.fill(20)
    for s in range(6):
        case.step(case.next_positions([True, s != 2]))


def test_all_options_together(ttnn, monkeypatch):
    """1 x 2 mesh, T = 4, W = 64, sink, bfloat16 cache."""
    case = Case(ttnn, monkeypatch, (1, 2), batch=2, tokens=4, window=64, sink=sinks(4), kv="bfloat16")
    case.fill(55)
    for s in range(6):
        case.step(case.next_positions([True, True]))


def test_mla_reads_v_out_of_k(ttnn, monkeypatch):
    """MLA (one latent head D = 96, Dv = 64) on a 1 x 2 mesh, with T = 2 and a sink: no V cache; the
    fused append is refused by name (the latent rows are the caller's to write)."""
    case = Case(ttnn, monkeypatch, (1, 2), batch=2, tokens=2, sink=sinks(4), head_dim_v=64, num_kv_heads=1,
                head_dim=96)
    assert all(v is None for _, v in case.loop.caches)
    case.fill(60)
    for s in range(4):
        case.step(case.next_positions([True, s != 0]))
    with pytest.raises(NotImplementedError, match="MLA"):
        case.loop.append(0, None, None, None, None)
    assert "caches[layer][0]" in MLA_APPEND


@pytest.mark.parametrize("axis, options, fill, steps", [
    (1, dict(window=128), 240, 6),
    (0, dict(sink=sinks(4)), 70, 3),
    (1, dict(tokens=8), 20, 5),
    (1, dict(tokens=4, window=128, sink=sinks(4), kv="bfloat16"), 118, 5),
    (0, dict(tokens=2, sink=sinks(4), head_dim_v=64, num_kv_heads=1, head_dim=96), 60, 3),
], ids=["window-cp4", "sink-cp2", "tokens-cp4", "all-cp4", "mla-cp2"])
def test_every_option_along_one_axis_of_a_2x4_mesh(ttnn, monkeypatch, axis, options, fill, steps):
    """The loop along one axis of a 2 x 4 mesh (``context_axis``: CP 4 ways along the columns, or 2 ways
    along the rows), the devices along the other axis TP groups with their own keys, values and queries:
    each option as on a whole mesh, n the axis's size (the window a multiple of n x 32, W / n on every
    shard; the sink once per TP group's merge; T rows; MLA), every device against its group's
    reference."""
    case = Case(ttnn, monkeypatch, (2, 4), batch=2, context_axis=axis, **options)
    n = 4 if axis == 1 else 2
    assert case.loop.ranks == n and case.loop.axes == (axis,) and case.groups == 8 // n
    if "window" in options:
        assert case.loop.options.local_window == options["window"] // n
    case.fill(fill)
    for s in range(steps):
        case.step(case.next_positions([True, s != 1]))


def test_options_refused_by_name():
    common = dict(devices=2, block_size=32, num_heads=4, head_dim=64)
    with pytest.raises(NotImplementedError, match="'sliding_window_size': expected a multiple of .* = 64"):
        loop_options(**common, sliding_window_size=96)
    with pytest.raises(ValueError, match="'tokens': expected at most 32"):
        loop_options(**common, tokens=33)
    with pytest.raises(ValueError, match="'attention_sink': expected shape"):
        loop_options(**common, attention_sink=torch.zeros(3))
    with pytest.raises(ValueError, match="'head_dim_v'"):
        loop_options(**common, head_dim_v=64)
    with pytest.raises(ValueError, match=r"positions\[1\]: expected -1 or a position >= tokens - 1 = 3"):
        token_positions([5, 2], 4)
    assert token_positions([5, -1], 2) == [4, -1, 5, -1]
    assert math.isclose(loop_options(**common, sliding_window_size=128).local_window, 64)


def test_the_loops_pages_are_bank_local_by_default_and_checked_by_name(ttnn, monkeypatch):
    monkeypatch.setattr(KernelTwinLoop, "real_ttnn", ttnn)
    args = dict(batch=2, num_heads=4, num_kv_heads=2, head_dim=64, max_seq_len=128, block_size=32, num_blocks=8,
                ttnn=option_ttnn(ttnn, (1, 2)))
    loop = KernelTwinLoop(TwinMesh((1, 2)), **args)
    assert loop.kv_pages == "key_row" and loop.program_config.kv_pages == "key_row"
    assert KernelTwinLoop(TwinMesh((1, 2)), kv_pages="tile", **args).program_config.kv_pages == "tile"
    with pytest.raises(ValueError, match="ContextParallelDecode: argument 'kv_pages': expected one of"):
        KernelTwinLoop(TwinMesh((1, 2)), kv_pages="rows", **args)
    # 16-position blocks in either layout (the default "key_row": a page per (block, KV head))
    for pages in ("tile", "key_row"):
        loop16 = KernelTwinLoop(TwinMesh((1, 2)), kv_pages=pages, **dict(args, block_size=16))
        assert loop16.local_blocks == 4 and loop16.program_config.kv_pages == pages
