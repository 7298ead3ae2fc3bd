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
at the wrong keys fails the comparison. Positions cross blocks and windows; users skip steps."""

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
        assert all(torch.equal(o, outs.ts[0]) for o in outs.ts)
        merged, lse = run_combine(outs.ts[0], lses.ts[0][..., 0], in_dtype=DataType.bfloat16,
                                  out_dtype=DataType.bfloat16)
        self.merged_lse = lse.reshape(1, self.rows, self.num_heads)
        return twin.TwinTensor([merged.to(torch.float32)] * self.devices)


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
    """A loop on a twin mesh, its caller's allocator, and the whole cache as the reference sees it."""

    def __init__(self, ttnn: Any, monkeypatch: Any, shape: tuple[int, int], *, batch: int, tokens: int = 1,
                 window: Optional[int] = None, sink: Optional[torch.Tensor] = None, head_dim_v: Optional[int] = None,
                 kv: str = "bfloat8_b", num_heads: int = 4, num_kv_heads: int = 2, head_dim: int = 64,
                 max_seq_len: int = 512) -> None:
        monkeypatch.setattr(KernelTwinLoop, "real_ttnn", ttnn)
        n = shape[0] * shape[1]
        self.real, self.n, self.bs, self.batch, self.tokens = ttnn, n, 32, batch, tokens
        self.nh, self.nkv, self.d, self.dv = num_heads, num_kv_heads, head_dim, head_dim_v
        self.window, self.sink, self.kv = window, sink, getattr(ttnn, kv)
        self.alloc = ContextParallelAllocator(batch, max_seq_len, self.bs, num_blocks=batch * 8, context_parallel=n)
        self.loop = KernelTwinLoop(TwinMesh(shape), batch=batch, num_heads=num_heads, num_kv_heads=num_kv_heads,
                                   head_dim=head_dim, max_seq_len=max_seq_len, block_size=self.bs,
                                   num_blocks=batch * 8, kv_dtype=kv, tokens=tokens, sliding_window_size=window,
                                   attention_sink=sink, head_dim_v=head_dim_v, ttnn=option_ttnn(ttnn, shape))
        self.k = torch.zeros(batch, num_kv_heads, max_seq_len, head_dim)
        self.v = torch.zeros(batch, num_kv_heads, max_seq_len, head_dim)
        self.gen = torch.Generator().manual_seed(7)

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
        for b in range(self.batch):
            for p in range(upto):
                j = p // self.bs
                dev, local = j % self.n, j // self.n
                blk = int(tables[dev][b, local])
                k, v = (torch.randn(self.nkv, self.d, generator=self.gen) for _ in range(2))
                self.k[b, :, p] = row_in_format(self.real, k, self.kv)
                kc.ts[dev][blk, :, p % self.bs] = self.k[b, :, p]
                if vc is not None:
                    self.v[b, :, p] = row_in_format(self.real, v, self.kv)
                    vc.ts[dev][blk, :, p % self.bs] = self.v[b, :, p]
                else:
                    self.v[b, :, p] = self.k[b, :, p]

    def step(self, positions: list[int]) -> None:
        """One step of the loop: write, append (the T tokens' K/V, q rotated), attend; then the merged
        output and LSE of every live user against the float64 reference of the whole cache."""
        t_, b_, nh, nkv, d = self.tokens, self.batch, self.nh, self.nkv, self.d
        tables = self.allocate(positions)
        self.loop.write(positions, tables)
        qkv = torch.randn(t_, b_, (nh + 2 * nkv) * d, generator=self.gen).to(torch.bfloat16).to(torch.float32)
        angle = torch.rand(t_, b_, d // 2, generator=self.gen) * 6.0
        cos, sin = (f(angle).repeat_interleave(2, dim=-1) for f in (torch.cos, torch.sin))
        x = qkv.reshape(t_, b_, nh + 2 * nkv, d)
        want = rotate(x, cos[:, :, None], sin[:, :, None])
        rows = token_positions(positions, t_)
        if self.dv is None:
            shape = lambda a: a[0] if t_ == 1 else a  # noqa: E731 - T = 1: the loop's [1, B, W] / [B, R] forms
            q = self.loop.append(0, twin.TwinTensor([qkv[:1] if t_ == 1 else qkv] * self.n),
                                 *(twin.TwinTensor([shape(a)] * self.n) for a in (cos, sin)), None)
            assert torch.equal(q.ts[0].reshape(t_, b_, nh, d), want[:, :, :nh].to(torch.bfloat16).to(torch.float32))
            for i, p in enumerate(rows):  # the reference's cache: what the append must have written
                if p >= 0:
                    self.k[i % b_, :, p] = row_in_format(self.real, want[i // b_, i % b_, nh:nh + nkv], self.kv)
                    self.v[i % b_, :, p] = row_in_format(self.real, x[i // b_, i % b_, nh + nkv:], self.kv)
        else:  # MLA: the latent rows written by the caller (the loop refuses the fused append)
            q = twin.TwinTensor([want[:, :, :nh].to(torch.bfloat16).to(torch.float32)] * self.n)
            self.write_latent(rows, want[:, :, nh:nh + nkv])
        out = self.loop.attend(0, q)
        assert out.shape == (t_, b_, nh, self.dv or d)
        v = None if self.dv is not None else self.v.double()
        ref, ref_lse = sdpa_decode_reference(q.ts[0].reshape(t_, b_, nh, d).double(), self.k.double(), v,
                                             cur_pos=positions, sliding_window_size=self.window,
                                             attention_sink=self.sink, head_dim_v=self.dv, return_lse=True)
        lse = self.loop.merged_lse.reshape(t_, b_, nh)
        for b, p in enumerate(positions):
            if p >= 0:
                check_close(out.ts[0][:, b], ref[:, b], f"user {b} at {p}: output")
                check_lse(lse[:, b], ref_lse[:, b], f"user {b} at {p}: LSE")

    def write_latent(self, rows: list[int], k: torch.Tensor) -> None:
        """MLA: each row's latent K at the loop's own append positions (``append_rows``, ``page_table``)."""
        kc, _ = self.loop.caches[0]
        for i, p in enumerate(rows):
            if p < 0:
                continue
            t, b = divmod(i, self.batch)
            value = row_in_format(self.real, k[t, b], self.kv)
            self.k[b, :, p] = value
            owners = [dev for dev in range(self.n) if int(self.loop.append_rows[t].ts[dev][b]) >= 0]
            assert owners == [(p // self.bs) % self.n]
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
