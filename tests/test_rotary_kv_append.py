"""ttdecode.rotary_kv_append: the fused RoPE + KV-cache append program on the host runtime.

Expected values are built here, independently of ttdecode.ops.rotary_append and of the runtime:

* the rotation in float32 as the chip computes it (x from bf16 exactly, the +-1 matmul exact, then
  x*cos, rot*sin and their sum each rounded to nearest-even in fp32: SFPMAD, one rounding), with
  rotate_half written out per convention from its definition (Hugging Face's rotate_half, Meta's
  interleaved pairs), and checked against a float64 rotation to within one step of the format;
* the packer's rounding of each new row to the cache format (Packers/FormatConversion.md of the ISA
  documentation: early rounding ties away from zero, block floats share the largest exponent of a
  16-value face row, bfp4 truncated from bfp8) and the tile layout of ttdecode.core.formats' docstring
  (faces, exponent bytes in face-row order, codes in tile order), written out byte by byte;
* every other byte of both caches: exactly the input's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ttdecode
from ttdecode.core.formats import DataType
from ttdecode.core.tensor import TileTensor

BF16, BFP8, BFP4 = DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b


# ---- the independent expectation -----------------------------------------------------------------


def hf_angles(b: int, rotary_dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [B, rotary_dim] float32 in Hugging Face's layout cat(c, c)."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.rand(b, rotary_dim // 2, generator=g, dtype=torch.float64) * 40.0
    return torch.cat([theta.cos()] * 2, 1).float(), torch.cat([theta.sin()] * 2, 1).float()


def rotate_half(x: np.ndarray, rotary_dim: int, interleaved: bool) -> np.ndarray:
    """rotate_half over the first rotary_dim columns (zeros elsewhere), by its definition."""
    out = np.zeros_like(x)
    r = x[..., :rotary_dim]
    if interleaved:  # (x0, x1) -> (-x1, x0) per pair (2i, 2i+1)
        out[..., 0:rotary_dim:2] = -r[..., 1::2]
        out[..., 1:rotary_dim:2] = r[..., 0::2]
    else:  # [a, b] -> [-b, a]
        h = rotary_dim // 2
        out[..., :h] = -r[..., h:]
        out[..., h:rotary_dim] = r[..., :h]
    return out


def per_column(cs: np.ndarray, d: int, rotary_dim: int, interleaved: bool, fill: float) -> np.ndarray:
    col = cs[:, : rotary_dim // 2].repeat(2, axis=1) if interleaved else cs
    out = np.full((cs.shape[0], d), fill, dtype=cs.dtype)
    out[:, :rotary_dim] = col
    return out


def rotate_fp32(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rotary_dim: int, interleaved: bool) -> np.ndarray:
    """x [B, H, D] float32 (bf16 values): x*cos + rot*sin, each op rounded in float32."""
    d = x.shape[-1]
    c = per_column(cos, d, rotary_dim, interleaved, 1.0)[:, None, :].astype(np.float32)
    s = per_column(sin, d, rotary_dim, interleaved, 0.0)[:, None, :].astype(np.float32)
    y = (x * c).astype(np.float32) + (rotate_half(x, rotary_dim, interleaved) * s).astype(np.float32)
    return np.where(np.abs(y) < 2.0**-126, np.float32(0.0), y).astype(np.float32)  # SFPU flushes denormals


def rotate_f64(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rotary_dim: int, interleaved: bool) -> np.ndarray:
    x = x.astype(np.float64)
    d = x.shape[-1]
    c = per_column(cos.astype(np.float64), d, rotary_dim, interleaved, 1.0)[:, None, :]
    s = per_column(sin.astype(np.float64), d, rotary_dim, interleaved, 0.0)[:, None, :]
    return x * c + rotate_half(x, rotary_dim, interleaved) * s


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def early_round(x: np.ndarray, mant_bits: int) -> np.ndarray:
    """To `mant_bits` mantissa bits, ties away from zero (finite normal inputs; zeros stay +0)."""
    x = np.asarray(x, dtype=np.float32)
    e = (_bits(x) >> 23) & 0xFF
    q = np.ldexp(1.0, e.astype(np.int64) - 127 - mant_bits)
    r = np.floor(np.abs(x.astype(np.float64)) / q + 0.5) * q
    return np.where(e == 0, 0.0, np.copysign(r, x)).astype(np.float32)


def packed_row(values: np.ndarray, dtype: DataType) -> list[tuple[int, bytes]]:
    """One row of 32 values as the packer writes it: per face-row half, (exponent byte or -1, codes)."""
    out = []
    for half in range(2):
        v = values[16 * half:16 * half + 16]
        if dtype is BF16:
            out.append((-1, (_bits(early_round(v, 7)) >> 16).astype("<u2").tobytes()))
            continue
        y = early_round(v, 6)
        e = (_bits(y) >> 23) & 0xFF
        shared = int(e.max())
        unit = 2.0 ** (shared - 127 - 6)
        mag = np.where(e == 0, 0, np.floor(np.abs(y.astype(np.float64)) / unit + 0.5)).astype(np.int64)
        neg = (_bits(y) >> 31).astype(np.int64)
        if dtype is BFP4:
            mag = mag // 16
            codes = np.where(mag > 0, neg << 3 | mag, 0).astype(np.uint8)
            out.append((shared, (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8).tobytes()))
        else:
            out.append((shared, np.where(mag > 0, neg << 7 | mag, 0).astype(np.uint8).tobytes()))
    return out


def expected_cache(original: bytes, dtype: DataType, rows: dict[tuple[int, int], np.ndarray]) -> bytes:
    """`original` with tile row (page, row) replaced by the packed values, byte for byte."""
    size = {BF16: 2048, BFP8: 1088, BFP4: 576}[dtype]
    exp_bytes = 0 if dtype is BF16 else 64
    row_bytes = {BF16: 32, BFP8: 16, BFP4: 8}[dtype]
    img = bytearray(original)
    for (page, row), values in rows.items():
        for half, (exponent, codes) in enumerate(packed_row(values, dtype)):
            face_row = ((row // 16) * 2 + half) * 16 + row % 16
            base = page * size
            if exponent >= 0:
                img[base + face_row] = exponent
            off = base + exp_bytes + face_row * row_bytes
            img[off:off + row_bytes] = codes
    return bytes(img)


def step_bound(values: np.ndarray, dtype: DataType) -> np.ndarray:
    """Per value: the largest error one row packed to `dtype` may have (early rounding + shift)."""
    if dtype is BF16:
        return np.abs(values) * 2.0**-8 + 1e-30
    out = np.empty_like(values, dtype=np.float64)
    for g in range(0, values.size, 16):
        v = values.reshape(-1)[g:g + 16]
        shared = math.frexp(float(np.abs(v).max()))[1] - 1 + 1  # the exponent after a possible carry
        unit = 2.0 ** (shared - 6)
        out.reshape(-1)[g:g + 16] = unit * (17 if dtype is BFP4 else 1)
    return out


def bf16(x: torch.Tensor) -> np.ndarray:
    return x.to(torch.bfloat16).float().numpy()


def page_of(cache_shape: tuple[int, ...], user: int, head: int, pos: int, j: int, table: torch.Tensor | None) -> int:
    """Tile page of (user, head, position, column tile j) in a [lead, NKV, rows, D] tile tensor."""
    _, nkv, rows, d = cache_shape
    if table is None:
        lead, r = user, pos
    else:
        lead, r = int(table[user, pos // rows]), pos % rows
    return ((lead * nkv + head) * (rows // 32) + r // 32) * (d // 32) + j


def check_call(result, *, q, k, v, kc, vc, positions, cos, sin, rotary_dim, interleaved, table=None) -> None:
    """The op's result against the independent expectation (see the module doc)."""
    d = k.shape[-1]
    c, s = cos.numpy(), sin.numpy()
    if q is not None:
        q_rot, k_out, v_out = result
        want_q = rotate_fp32(bf16(q[0]), c, s, rotary_dim, interleaved)
        got_q = q_rot[0].float().numpy()
        assert np.array_equal(_bits(got_q), _bits(early_round(want_q, 7))), "q_rot differs from the fp32 rotation"
        ref = rotate_f64(bf16(q[0]), c, s, rotary_dim, interleaved)
        assert np.all(np.abs(got_q - ref) <= step_bound(ref, BF16))
    else:
        k_out, v_out = result
    k_rows = rotate_fp32(bf16(k[0]), c, s, rotary_dim, interleaved)
    k_ref = rotate_f64(bf16(k[0]), c, s, rotary_dim, interleaved)
    v_rows = bf16(v[0])
    for cache, out, new, ref in ((kc, k_out, k_rows, k_ref), (vc, v_out, v_rows, v_rows)):
        want = {}
        for b, p in enumerate(positions):
            if p < 0:
                continue
            for h in range(k.shape[2]):
                for j in range(d // 32):
                    want[(page_of(cache.shape, b, h, p, j, table), p % 32)] = new[b, h, 32 * j:32 * j + 32]
        assert isinstance(out, TileTensor) and out.shape == cache.shape and out.dtype == cache.dtype
        expected = expected_cache(cache.data, cache.dtype, want)
        assert len(out.data) == len(expected)
        diff = [i for i, (a, e) in enumerate(zip(out.data, expected)) if a != e]
        assert not diff, f"{len(diff)} cache bytes differ from the expectation, first at byte {diff[0]}"
        # the stored rows are within one step of the format from the float64 rotation
        got = ttdecode.to_torch(out).float().numpy()
        for b, p in enumerate(positions):
            if p < 0:
                continue
            lead, r = (b, p) if table is None else (int(table[b, p // cache.shape[2]]), p % cache.shape[2])
            row = got[lead, :, r, :]
            assert np.all(np.abs(row - ref[b]) <= step_bound(ref[b], cache.dtype) + 1e-6)


def cache_pair(shape: tuple[int, ...], dtype: DataType, seed: int) -> tuple[TileTensor, TileTensor]:
    g = torch.Generator().manual_seed(seed)
    return (ttdecode.from_torch(torch.randn(shape, generator=g), dtype=dtype),
            ttdecode.from_torch(torch.randn(shape, generator=g), dtype=dtype))


# ---- the kernels on the host runtime -------------------------------------------------------------


@pytest.mark.parametrize("pages", ["tile", "key_row"])
@pytest.mark.parametrize("dtype", [BF16, BFP8, BFP4], ids=lambda d: d.value)
def test_contiguous_append_rows_0_31_and_middle_with_q_half_split(dtype: DataType, pages: str) -> None:
    """D=128 half-split (rotate_half pairs tiles 0-1 with 2-3), q given; positions on row 0, row 31,
    a middle row of a later tile, and a user at -1; whole caches byte for byte (key_row: the same
    tile-order image in key-row pages)."""
    b, nh, nkv, d, s = 5, 4, 2, 128, 96
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, b, n, d, generator=g) * 3 for n in (nh, nkv, nkv))
    kc, vc = cache_pair((b, nkv, s, d), dtype, 2)
    cos, sin = hf_angles(b, d, 3)
    positions = [0, 31, -1, 49, 95]
    out = ttdecode.rotary_kv_append(k, v, kc, vc, cur_pos=positions, cos=cos, sin=sin, q=q, backend="host",
                                    kv_pages=pages)
    check_call(out, q=q, k=k, v=v, kc=kc, vc=vc, positions=positions, cos=cos, sin=sin, rotary_dim=d,
               interleaved=False)


@pytest.mark.parametrize("dtype", [BF16, BFP8, BFP4], ids=lambda d: d.value)
def test_paged_append_writes_the_bank_local_pool(dtype: DataType) -> None:
    """kv_pages "key_row" with a paged cache (the bank-local pool: a key-tile row a page): positions on
    the last row of a block, the first row of the next block, row 31 / 32 of a block (a tile-row
    boundary inside it), a middle row, and a user at -1; both pools byte for byte against the
    independent expectation (the key-row pool holds the tile-order bytes, so the expectation is the
    tile pool's), and the same bytes as kv_pages "tile" gives."""
    b, nkv, d, bs, nblocks = 6, 3, 64, 64, 13
    g = torch.Generator().manual_seed(11)
    k, v = (torch.randn(1, b, nkv, d, generator=g) * 2 for _ in range(2))
    kc, vc = cache_pair((nblocks, nkv, bs, d), dtype, 12)
    table = torch.randperm(nblocks, generator=g)[:b * 2].reshape(b, 2).to(torch.int32)
    cos, sin = hf_angles(b, d, 13)
    positions = [63, 64, 31, 32, -1, 100]
    kwargs = dict(cur_pos=positions, cos=cos, sin=sin, page_table=table, backend="host")
    out = ttdecode.rotary_kv_append(k, v, kc, vc, kv_pages="key_row", **kwargs)
    check_call(out, q=None, k=k, v=v, kc=kc, vc=vc, positions=positions, cos=cos, sin=sin, rotary_dim=d,
               interleaved=False, table=table)
    tiles = ttdecode.rotary_kv_append(k, v, kc, vc, kv_pages="tile", **kwargs)
    assert [t.data for t in out] == [t.data for t in tiles]


def test_paged_interleaved_partial_rotary_dim_and_two_q_tile_rows() -> None:
    """bfloat8_b paged cache (block 64, shuffled blocks), interleaved pairs, rotary_dim 48 < D=64
    (a tile half rotated), 34 q heads (two tile rows); the result is the same under a perturbed
    schedule."""
    b, nh, nkv, d, bs, nblocks = 3, 34, 3, 64, 64, 7
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, b, n, d, generator=g) for n in (nh, nkv, nkv))
    kc, vc = cache_pair((nblocks, nkv, bs, d), BFP8, 5)
    table = torch.tensor([[6, 2], [0, 5], [3, 1]], dtype=torch.int32)
    cos, sin = hf_angles(b, 48, 6)
    positions = [127, 0, 94]  # block 1 row 63 (tile row 31), block 0 row 0, block 1 row 30
    kwargs = dict(cur_pos=positions, cos=cos, sin=sin, page_table=table, q=q, rotary_interleaved=True,
                  rotary_dim=48)
    out = ttdecode.rotary_kv_append(k, v, kc, vc, backend="host", **kwargs)
    check_call(out, q=q, k=k, v=v, kc=kc, vc=vc, positions=positions, cos=cos, sin=sin, rotary_dim=48,
               interleaved=True, table=table)

    from ttdecode.ops.rotary_append import op as rotary
    from ttdecode.runtime import run_program

    inp = rotary.validate(k, v, kc, vc, qkv=None, num_q_heads=None, **{**kwargs, "rotary_interleaved": True})
    seeded = run_program(rotary.build_program(inp, rotary.input_images(inp)), schedule_seed=5)
    assert seeded.tensors["k_cache"] == out[1].data and seeded.tensors["v_cache"] == out[2].data


def _run_caches(inp, positions_in_args: bool) -> tuple[bytes, bytes]:
    """The caches after the program of validated `inp` on the host runtime (positions as the writer's
    runtime args, or the cur_pos tensor it reads)."""
    from ttdecode.ops.rotary_append import op as rotary
    from ttdecode.runtime import run_program

    program = rotary.build_program(inp, rotary.input_images(inp), grid=(2, 2), positions_in_args=positions_in_args)
    assert ("cur_pos" in {t.name for t in program.tensors}) is not positions_in_args
    result = run_program(program)
    return result.tensors["k_cache"], result.tensors["v_cache"]


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_positions_as_runtime_args_write_what_the_positions_tensor_writes(paged: bool) -> None:
    """The writer's positions_in_args variant (the device path's host positions) against the cur_pos
    tensor variant and the op's result: the same cache bytes."""
    from ttdecode.ops.rotary_append import op as rotary

    kw = _paged() if paged else _good()
    kw["cur_pos"] = [33, -1] if paged else [63, 0]
    inp = rotary.validate(kw["k_new"] + 1, kw["v_new"] - 2, kw["k_cache"], kw["v_cache"], cur_pos=kw["cur_pos"],
                          cos=kw["cos"], sin=kw["sin"], page_table=kw.get("page_table"), q=None, qkv=None,
                          num_q_heads=None, rotary_interleaved=False, rotary_dim=None)
    in_args = _run_caches(inp, True)
    assert in_args == _run_caches(inp, False)
    out = ttdecode.rotary_kv_append(kw["k_new"] + 1, kw["v_new"] - 2, kw["k_cache"], kw["v_cache"],
                                    **{n: kw[n] for n in ("cur_pos", "cos", "sin", "backend")},
                                    page_table=kw.get("page_table"))
    assert in_args == (out[0].data, out[1].data) and in_args[0] != kw["k_cache"].data


@pytest.mark.parametrize("positions_in_args", [False, True], ids=["pos-tensor", "pos-args"])
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_the_writer_skips_positions_beyond_the_cache_and_blocks_outside_the_pool(paged: bool,
                                                                               positions_in_args: bool) -> None:
    """Values on the device are not checked on the host, so the writer guards: a position at or beyond
    the capacity (S, or max_blocks x block_size) or a page-table entry outside the pool (negative too)
    writes no cache byte; the other user's row is written as usual. The program is run with values the
    validation would refuse (set after it)."""
    import dataclasses

    from ttdecode.ops.rotary_append import op as rotary

    kw = _paged() if paged else _good()
    inp = rotary.validate(kw["k_new"] + 1, kw["v_new"] + 1, kw["k_cache"], kw["v_cache"], cur_pos=[1, 2],
                          cos=kw["cos"], sin=kw["sin"], page_table=kw.get("page_table"), q=None, qkv=None,
                          num_q_heads=None, rotary_interleaved=False, rotary_dim=None)
    cases = [(64, 5), (1000, 5), (2 ** 31 - 1, 5)]  # (user 0's position, user 1's): 64 = the capacity
    if paged:
        bad = torch.tensor([[0, 99], [2, 3]])
        cases += [((40, 5), bad), ((40, 5), torch.tensor([[0, -3], [2, 3]]))]  # user 0's block 1 outside the pool
    want = _run_caches(dataclasses.replace(inp, positions=(-1, 5)), positions_in_args)
    assert want[0] != kw["k_cache"].data  # user 1 wrote
    for case in cases:
        positions, table = (case, inp.page_table) if not isinstance(case[1], torch.Tensor) else case
        got = _run_caches(dataclasses.replace(inp, positions=positions, page_table=table), positions_in_args)
        assert got == want, (positions, table)


@pytest.mark.parametrize("interleaved", [False, True], ids=["half-split", "interleaved"])
def test_packed_qkv_is_unpacked_rotated_and_appended_in_one_program(interleaved: bool) -> None:
    """qkv [1, B, (NH + 2 NKV) D] gives exactly what separate q / k_new / v_new give (and the
    independent expectation); rotary_dim 40 makes half-split blocks pair columns across tiles."""
    b, nh, nkv, d, s = 33, 3, 1, 64, 64  # 33 users: two tile rows of users in qkv
    g = torch.Generator().manual_seed(7)
    qkv = torch.randn(1, b, (nh + 2 * nkv) * d, generator=g)
    q, k, v = (qkv[..., :nh * d].reshape(1, b, nh, d), qkv[..., nh * d:(nh + nkv) * d].reshape(1, b, nkv, d),
               qkv[..., (nh + nkv) * d:].reshape(1, b, nkv, d))
    kc, vc = cache_pair((b, nkv, s, d), BF16, 8)
    cos, sin = hf_angles(b, 40, 9)
    positions = [(13 * i) % 64 if i % 5 else -1 for i in range(b)]
    opts = dict(cur_pos=positions, cos=cos, sin=sin, rotary_dim=40, rotary_interleaved=interleaved,
                grid=(4, 2), backend="host")
    packed = ttdecode.rotary_kv_append(qkv=qkv, k_cache=kc, v_cache=vc, **opts)
    check_call(packed, q=q, k=k, v=v, kc=kc, vc=vc, positions=positions, cos=cos, sin=sin, rotary_dim=40,
               interleaved=interleaved)
    separate = ttdecode.rotary_kv_append(k, v, kc, vc, q=q, **opts)
    assert torch.equal(packed[0], separate[0])
    assert packed[1].data == separate[1].data and packed[2].data == separate[2].data


def test_without_q_returns_the_caches_and_a_user_s_row_ignores_the_others() -> None:
    """(k_cache, v_cache) without q; user 0's written bytes are the same whatever user 1 holds."""
    b, nkv, d, s = 2, 1, 32, 32
    g = torch.Generator().manual_seed(10)
    k, v = torch.randn(1, b, nkv, d, generator=g), torch.randn(1, b, nkv, d, generator=g)
    kc, vc = cache_pair((b, nkv, s, d), BFP4, 11)
    cos, sin = hf_angles(b, d, 12)
    out = ttdecode.rotary_kv_append(k, v, kc, vc, cur_pos=[7, 20], cos=cos, sin=sin, backend="host")
    assert len(out) == 2
    check_call(out, q=None, k=k, v=v, kc=kc, vc=vc, positions=[7, 20], cos=cos, sin=sin, rotary_dim=d,
               interleaved=False)
    k2 = k.clone()
    k2[0, 1] = torch.randn(nkv, d, generator=g) * 100
    other = ttdecode.rotary_kv_append(k2, v, kc, vc, cur_pos=[7, 20], cos=cos, sin=sin, backend="host")
    user0 = slice(0, len(kc.data) // 2)
    assert other[0].data[user0] == out[0].data[user0]


def test_reference_backend_agrees_within_one_step_and_writes_only_the_rows() -> None:
    b, nh, nkv, d, s = 2, 2, 1, 64, 32
    g = torch.Generator().manual_seed(13)
    q, k, v = (torch.randn(1, b, n, d, generator=g) for n in (nh, nkv, nkv))
    kc, vc = cache_pair((b, nkv, s, d), BFP8, 14)
    cos, sin = hf_angles(b, d, 15)
    ref = ttdecode.rotary_kv_append(k, v, kc, vc, cur_pos=[3, -1], cos=cos, sin=sin, q=q, backend="reference")
    assert ttdecode.last_backend() == "reference"
    want = rotate_f64(bf16(q[0]), cos.numpy(), sin.numpy(), d, False)
    assert np.all(np.abs(ref[0][0].float().numpy() - want) <= step_bound(want, BF16))
    got = ttdecode.to_torch(ref[1]).float().numpy()
    kw = rotate_f64(bf16(k[0]), cos.numpy(), sin.numpy(), d, False)
    assert np.all(np.abs(got[0, :, 3] - kw[0]) <= step_bound(kw[0], BFP8))
    before = ttdecode.to_torch(kc).float().numpy()
    mask = np.ones_like(got, dtype=bool)
    mask[0, :, 3] = False
    assert np.array_equal(got[mask], before[mask])


# ---- bad input: named, before any cache byte is written -------------------------------------------


def _good() -> dict:
    b, nkv, d = 2, 2, 64
    kc, vc = cache_pair((b, nkv, 64, d), BFP8, 20)
    cos, sin = hf_angles(b, d, 21)
    return dict(k_new=torch.zeros(1, b, nkv, d), v_new=torch.zeros(1, b, nkv, d), k_cache=kc, v_cache=vc,
                cur_pos=[1, 2], cos=cos, sin=sin, backend="host")


def _paged() -> dict:
    kw = _good()
    kc, vc = cache_pair((4, 2, 32, 64), BFP8, 22)
    return {**kw, "k_cache": kc, "v_cache": vc, "page_table": torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)}


BAD = {
    "k_new shape": (lambda kw: {**kw, "k_new": torch.zeros(1, 2, 3, 64)}, "k_new", "[1, 2, 2, 64]"),
    "v_new shape": (lambda kw: {**kw, "v_new": torch.zeros(1, 2, 2, 32)}, "v_new", "[1, 2, 2, 64]"),
    "k_new dtype": (lambda kw: {**kw, "k_new": ttdecode.from_torch(torch.zeros(1, 2, 2, 64), dtype=BFP8)},
                    "k_new", "bfloat8_b"),
    "cache torch": (lambda kw: {**kw, "k_cache": torch.zeros(2, 2, 64, 64)}, "k_cache", "torch tensor"),
    "cache float32": (lambda kw: {**kw, "k_cache": ttdecode.from_torch(torch.zeros(2, 2, 64, 64),
                                                                         dtype=DataType.float32)},
                      "k_cache", "float32"),
    "v_cache format": (lambda kw: {**kw, "v_cache": ttdecode.from_torch(torch.zeros(2, 2, 64, 64), dtype=BF16)},
                       "v_cache", "bfloat16"),
    "cache batch": (lambda kw: {**kw, **dict(zip(("k_cache", "v_cache"), cache_pair((3, 2, 64, 64), BFP8, 1)))},
                    "k_cache", "got 3"),
    "cache S not tiles": (lambda kw: {**kw, **dict(zip(("k_cache", "v_cache"), cache_pair((2, 2, 48, 64), BFP8, 1)))},
                          "k_cache", "[2, 2, 48, 64]"),
    "cos shape": (lambda kw: {**kw, "cos": torch.ones(2, 32)}, "cos", "[2, 32]"),
    "sin not HF": (lambda kw: {**kw, "sin": torch.arange(128.0).reshape(2, 64)}, "sin", "halves that differ"),
    "rotary_dim odd": (lambda kw: {**kw, "rotary_dim": 33}, "rotary_dim", "33"),
    "rotary_dim > D": (lambda kw: {**kw, "rotary_dim": 96}, "rotary_dim", "96"),
    "position beyond": (lambda kw: {**kw, "cur_pos": [1, 64]}, "cur_pos[1]", "64"),
    "position -2": (lambda kw: {**kw, "cur_pos": [-2, 0]}, "cur_pos[0]", "-2"),
    "positions count": (lambda kw: {**kw, "cur_pos": [1]}, "cur_pos", "1"),
    "positions float": (lambda kw: {**kw, "cur_pos": torch.tensor([1.0, 2.0])}, "cur_pos", "float32"),
    "same tile twice (paged)": (lambda kw: {**_paged(), "page_table": torch.tensor([[0, 1], [0, 3]]),
                                            "cur_pos": [3, 7]}, "cur_pos[1]", "user 0"),
    "page table too short": (lambda kw: {**_paged(), "cur_pos": [64, 0]}, "cur_pos[0]", "2 blocks"),
    "page table block id": (lambda kw: {**_paged(), "page_table": torch.tensor([[0, 9], [2, 3]]),
                                        "cur_pos": [40, 0]}, "page_table[0, 1]", "9"),
    "page table rows": (lambda kw: {**_paged(), "page_table": torch.zeros(3, 2, dtype=torch.int32)},
                        "page_table", "[3, 2]"),
    "backend": (lambda kw: {**kw, "backend": "gpu"}, "backend", "'gpu'"),
    "qkv and k_new": (lambda kw: {**kw, "qkv": torch.zeros(1, 2, 4 * 64)}, "qkv", "both"),
    "qkv width": (lambda kw: {**{k: v for k, v in kw.items() if k not in ("k_new", "v_new")},
                              "qkv": torch.zeros(1, 2, 4 * 64)}, "qkv", "256 columns"),
    "q shape": (lambda kw: {**kw, "q": torch.zeros(1, 3, 4, 64)}, "q", "[1, 3, 4, 64]"),
}


def test_a_head_dim_beyond_l1_is_refused_at_plan_time() -> None:
    """D = 4096: cos, sin, x and the output CBs need more than one core's L1; refused naming it."""
    from ttdecode.ops.rotary_append import program_factory as rotary

    with pytest.raises(ValueError, match=r"argument 'k_cache': expected a head_dim whose circular buffers fit .*D=4096"):
        rotary.device_program(batch=1, num_q_heads=0, num_kv_heads=1, head_dim=4096, cache_dtype=BF16,
                              cache_shape=(1, 1, 32, 4096), packed=False)


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_is_refused_naming_argument_expected_and_got(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, arg, got = BAD[case]
    kw = make(_good())
    from ttdecode.ops.rotary_append import op as rotary

    def no_program(*a, **k):  # every refusal comes before a program exists (so before any cache write)
        raise AssertionError("a program was built for bad input")

    monkeypatch.setattr(rotary, "build_program", no_program)
    with pytest.raises((ValueError, TypeError)) as err:
        ttdecode.rotary_kv_append(**kw)
    msg = str(err.value)
    assert f"argument '{arg}'" in msg and "expected" in msg and got in msg, msg


# ---- the program description on the device path --------------------------------------------------


def test_device_descriptor_carries_named_args_and_in_place_caches(ttnn) -> None:
    """The same Program as real ttnn descriptors (fake device view, as tests/test_device_program.py)."""
    from ttdecode import ttnn_backend
    from ttdecode.ops.rotary_append import op as rotary
    from ttdecode.core.program_description import CoreCoord

    class View:
        def grid_size(self):
            return (8, 8)

        def worker_core(self, core: CoreCoord):
            return core.x + 18, core.y + 18

        def buffer_address(self, name: str):
            return 0x10000 * (1 + ["qkv", "cos", "sin", "trans", "cur_pos", "page_table", "k_cache", "v_cache",
                                   "q_rot"].index(name))

    kw = _paged()
    inp = rotary.validate(None, None, kw["k_cache"], kw["v_cache"], cur_pos=[3, 40], cos=kw["cos"], sin=kw["sin"],
                          page_table=kw["page_table"], q=None, qkv=torch.zeros(1, 2, 6 * 64), num_q_heads=2,
                          rotary_interleaved=False, rotary_dim=None)
    program = rotary.build_program(inp, None)
    assert [t.name for t in program.tensors if t.in_place] == ["k_cache", "v_cache"]
    desc = ttnn_backend.build_program_descriptor(program, View())
    reader, writer, compute = desc.kernels
    assert dict(reader.named_compile_time_args)["packed"] == 1
    assert dict(writer.named_compile_time_args)["paged"] == 1
    assert dict(writer.named_compile_time_args)["cache_tile_bytes"] == 1088
    assert dict(compute.named_compile_time_args)["q_row_tiles"] == 1
    assert str(compute.config.math_fidelity).endswith("HiFi4")
    # every address a common arg (the same on all cores); per core only its users (1 user, the user)
    assert list(writer.common_runtime_args) == [0x90000, 0x70000, 0x80000, 0x50000, 0x60000]  # q_rot k v pos table
    assert list(reader.common_runtime_args) == [0x10000, 0, 0, 0x20000, 0x30000, 0x40000]  # qkv 0 0 cos sin trans
    assert list(writer.runtime_args[0][0]) == [1, 0] and list(writer.runtime_args[1][0]) == [1, 1]
    assert list(reader.runtime_args[0][0]) == [1, 0] and list(reader.runtime_args[1][0]) == [1, 1]
    assert list(compute.common_runtime_args) == []


def test_an_unknown_named_compile_time_arg_fails_the_kernel_build() -> None:
    """As on the device, a name the program did not give does not compile."""
    from ttdecode.ops.rotary_append import op as rotary
    from ttdecode.runtime import KernelError, run_program

    kw = _good()
    inp = rotary.validate(kw["k_new"], kw["v_new"], kw["k_cache"], kw["v_cache"], cur_pos=[0, 1], cos=kw["cos"],
                          sin=kw["sin"], page_table=None, q=None, qkv=None, num_q_heads=None,
                          rotary_interleaved=False, rotary_dim=None)
    program = rotary.build_program(inp, rotary.input_images(inp), grid=(1, 1))
    del program.kernels[0].named_compile_time_args["num_pairs"]
    with pytest.raises(KernelError) as err:
        run_program(program)
    assert "named_compile_time_arg_not_given_by_the_program" in str(err.value)


def test_launch_updates_the_caches_in_place_and_passes_them_last_to_generic_op(ttnn, monkeypatch) -> None:
    """Without q the program has no output: launch allocates nothing and hands the in-place caches
    to generic_op last (generic_op returns its last tensor). ttnn's device calls are stubbed."""
    from ttdecode import ttnn_backend
    from ttdecode.ops.rotary_append import op as rotary

    class Mem:
        buffer_type = ttnn.BufferType.DRAM
        memory_layout = ttnn.TensorMemoryLayout.INTERLEAVED

    class FakeDeviceTensor:
        def __init__(self, spec, address: int) -> None:
            self.dtype = ttnn_backend.tensor_dtype(ttnn, spec)
            self.layout = ttnn.TILE_LAYOUT if spec.layout == "tile" else ttnn.ROW_MAJOR_LAYOUT
            self.shape, self.address = spec.shape, address

        def memory_config(self):
            return Mem()

        def buffer_address(self) -> int:
            return self.address

    class Dev:
        def compute_with_storage_grid_size(self):
            return ttnn.CoreCoord(8, 8)

        def worker_core_from_logical_core(self, c):
            return ttnn.CoreCoord(c.x + 18, c.y + 18)

    calls = {}
    monkeypatch.setattr(ttnn, "is_tensor_storage_on_device", lambda t: isinstance(t, FakeDeviceTensor))
    monkeypatch.setattr(ttnn, "allocate_tensor_on_device", lambda *a: calls.setdefault("allocated", a))
    monkeypatch.setattr(ttnn, "generic_op", lambda tensors, desc: calls.setdefault("generic_op", (tensors, desc)))
    kw = _good()
    inp = rotary.validate(kw["k_new"], kw["v_new"], kw["k_cache"], kw["v_cache"], cur_pos=[0, 1], cos=kw["cos"],
                          sin=kw["sin"], page_table=None, q=None, qkv=None, num_q_heads=None,
                          rotary_interleaved=False, rotary_dim=None)
    program = rotary.build_program(inp, None)
    io = {t.name: FakeDeviceTensor(t, 0x1000 * (i + 1)) for i, t in enumerate(program.tensors)}
    assert ttnn_backend.launch(program, io, Dev()) == []
    tensors, desc = calls["generic_op"]
    assert "allocated" not in calls
    assert tensors[-2:] == [io["k_cache"], io["v_cache"]]
    assert isinstance(desc, ttnn.ProgramDescriptor)


# ---- the device backend: a cached step per shape (ttnn's device calls faked) ----------------------


def _fake_device(ttnn, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Real ttnn descriptors; the device, its tensors, generic_op, the output allocation and
    from_torch stand-ins (no device here). Records generic_op calls and uploads."""
    from ttdecode.ops.rotary_append import device_step as rd

    class Tensor:  # a ttnn tensor to the checks: a class called Tensor from a ttnn module
        next_address = 0x100000

        def __init__(self, dtype, layout, shape, device) -> None:
            self.dtype, self.layout, self.shape, self._device = dtype, layout, tuple(shape), device
            self.address = Tensor.next_address
            Tensor.next_address += 0x100000

        def memory_config(self):
            return ttnn.DRAM_MEMORY_CONFIG

        def buffer_address(self) -> int:
            return self.address

        def device(self):
            return self._device

    Tensor.__module__ = "ttnn.fake"

    class Dev:
        def compute_with_storage_grid_size(self):
            return ttnn.CoreCoord(8, 8)

        def worker_core_from_logical_core(self, c):
            return ttnn.CoreCoord(c.x + 18, c.y + 18)

    rec = {"generic_op": [], "uploads": []}

    def generic_op(tensors, desc):
        writer = desc.kernels[1]
        rec["generic_op"].append((desc, [len(writer.runtime_args[c][0]) for c in range(2)],
                                  [list(writer.runtime_args[c][0]) for c in range(2)],
                                  list(writer.common_runtime_args)))
        return tensors[-1]

    def from_torch(t, dtype=None, layout=None, device=None, **kw):
        rec["uploads"].append((tuple(t.shape), dtype))
        return Tensor(dtype, layout, tuple(t.shape), device)

    def move(*a, **k):
        raise AssertionError("a host<->device move other than from_torch")

    monkeypatch.setattr(ttnn, "generic_op", generic_op)
    monkeypatch.setattr(ttnn, "allocate_tensor_on_device",
                        lambda shape, dtype, layout, device, mem: Tensor(dtype, layout, tuple(shape), device))
    monkeypatch.setattr(ttnn, "is_tensor_storage_on_device", lambda t: isinstance(t, Tensor))
    monkeypatch.setattr(ttnn, "from_torch", from_torch)
    for name in ("to_torch", "to_device", "from_device"):
        monkeypatch.setattr(ttnn, name, move)
    rd.clear_steps()
    dev = Dev()
    b, nh, nkv, d = 2, 2, 2, 64
    tile, rm = ttnn.TILE_LAYOUT, ttnn.ROW_MAJOR_LAYOUT
    t = dict(qkv=Tensor(ttnn.bfloat16, tile, (1, b, (nh + 2 * nkv) * d), dev),
             k_cache=Tensor(ttnn.bfloat8_b, tile, (b, nkv, 64, d), dev),
             v_cache=Tensor(ttnn.bfloat8_b, tile, (b, nkv, 64, d), dev),
             cur_pos=Tensor(ttnn.int32, rm, (b,), dev),
             cos=Tensor(ttnn.float32, tile, (b, d), dev), sin=Tensor(ttnn.float32, tile, (b, d), dev))
    return {"Tensor": Tensor, "device": dev, "rec": rec, "rd": rd, "t": t}


def test_device_steps_plan_once_and_read_device_inputs_in_place(ttnn, monkeypatch: pytest.MonkeyPatch) -> None:
    """20 calls with device cur_pos / cos / sin: one step (Program, descriptor), one upload (the
    rotate-half blocks, when the step is made), the same runtime-arg counts on every call and the
    writer reading each call's cur_pos tensor where it lies; host angles are uploaded, host positions
    are the writer's runtime args."""
    f = _fake_device(ttnn, monkeypatch)
    t, rec, rd, T, dev = f["t"], f["rec"], f["rd"], f["Tensor"], f["device"]
    positions = []
    for _ in range(20):
        pos = T(ttnn.int32, ttnn.ROW_MAJOR_LAYOUT, (2,), dev)  # e.g. advanced on the device each step
        positions.append(pos.address)
        q_rot, kc, vc = ttdecode.rotary_kv_append(qkv=t["qkv"], k_cache=t["k_cache"], v_cache=t["v_cache"],
                                                  cur_pos=pos, cos=t["cos"], sin=t["sin"], num_q_heads=2,
                                                  rotary_interleaved=True, backend="device")
        assert kc is t["k_cache"] and vc is t["v_cache"] and q_rot.shape == (1, 2, 2, 64)
    calls = rec["generic_op"]
    assert rd.cached_steps() == 1 and len(calls) == 20 and len({id(c[0]) for c in calls}) == 1
    assert rec["uploads"] == [((2 * 32, 32), ttnn.bfloat16)]  # the rotate-half blocks: 2 (tile, source) pairs
    assert all(c[1] == calls[0][1] for c in calls)  # runtime-arg counts never change
    # writer common args: q_rot, k_cache, v_cache, cur_pos, page_table (0); per core: 1 user, the user
    assert [c[3][3] for c in calls] == positions
    assert calls[-1][3][1:3] == [t["k_cache"].address, t["v_cache"].address] and calls[-1][2][1] == [1, 1]
    # host inputs: cos and sin uploaded (one move each); host positions are the writer's common runtime
    # args (no upload; a step of its own: no cur_pos tensor, the positions after the 5 addresses)
    cos, sin = hf_angles(2, 64, 3)
    for positions in ([5, 6], [-1, 9]):
        ttdecode.rotary_kv_append(qkv=t["qkv"], k_cache=t["k_cache"], v_cache=t["v_cache"], cur_pos=positions,
                                  cos=cos, sin=sin, num_q_heads=2, rotary_interleaved=True, backend="device")
    assert rd.cached_steps() == 2 and len(calls) == 22
    assert rec["uploads"][1:] == [((64, 32), ttnn.bfloat16)] + [((2, 64), ttnn.float32)] * 4
    assert [c[3][3:] for c in calls[-2:]] == [[0, 0, 5, 6], [0, 0, 0xFFFFFFFF, 9]]
    assert calls[-1][1] == calls[-2][1]  # the same runtime-arg counts


def test_cached_calls_skip_validation_only_for_the_specs_of_a_validated_call(ttnn, monkeypatch) -> None:
    """With TensorSpecs on the (fake) device tensors: a validated call's step is kept; later calls of the
    same options and specs run without validation (device positions, or host positions patched into the
    writer's args); a changed spec, a position beyond the cache or a torch angle takes the validating
    path again (and is refused there by name)."""
    from ttdecode.ops.rotary_append import op as rotary_op

    f = _fake_device(ttnn, monkeypatch)
    t, rec, T, dev = f["t"], f["rec"], f["Tensor"], f["device"]
    T.spec = property(lambda self: (str(self.dtype), str(self.layout), self.shape))
    T.is_allocated = lambda self: True
    validated = []
    real = rotary_op.validate
    monkeypatch.setattr(rotary_op, "validate", lambda *a, **k: validated.append(1) or real(*a, **k))
    kw = dict(qkv=t["qkv"], k_cache=t["k_cache"], v_cache=t["v_cache"], cos=t["cos"], sin=t["sin"], num_q_heads=2,
              rotary_interleaved=True, backend="device")
    for _ in range(3):
        ttdecode.rotary_kv_append(cur_pos=t["cur_pos"], **kw)
    assert len(validated) == 1 and len(rec["generic_op"]) == 3
    for positions in ([3, 4], [-1, 63], [5, 6]):
        ttdecode.rotary_kv_append(cur_pos=positions, **kw)
    assert len(validated) == 2 and [c[3][5:] for c in rec["generic_op"][-3:]] == [[3, 4], [0xFFFFFFFF, 63], [5, 6]]
    with pytest.raises(ValueError, match=r"argument 'cur_pos\[1\]': expected a position < S=64"):
        ttdecode.rotary_kv_append(cur_pos=[1, 64], **kw)
    with pytest.raises(TypeError, match="argument 'cos': expected a float32 TILE ttnn tensor"):
        ttdecode.rotary_kv_append(cur_pos=[1, 2], **{**kw, "cos": T(ttnn.bfloat16, ttnn.TILE_LAYOUT, (2, 64), dev)})
    assert len(validated) == 4 and len(rec["generic_op"]) == 6
    cos, sin = hf_angles(2, 64, 3)  # torch angles: validated (and uploaded) every call
    for _ in range(2):
        ttdecode.rotary_kv_append(cur_pos=[1, 2], **{**kw, "cos": cos, "sin": sin})
    assert len(validated) == 6 and len(rec["generic_op"]) == 8


def test_device_forms_are_refused_by_name_when_they_do_not_fit(ttnn, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _fake_device(ttnn, monkeypatch)
    t, T, dev = f["t"], f["Tensor"], f["device"]
    tile, rm = ttnn.TILE_LAYOUT, ttnn.ROW_MAJOR_LAYOUT
    kw = dict(qkv=t["qkv"], k_cache=t["k_cache"], v_cache=t["v_cache"], cur_pos=t["cur_pos"], cos=t["cos"],
              sin=t["sin"], num_q_heads=2, backend="device")
    cases = [
        ({"cos": T(ttnn.bfloat16, tile, (2, 64), dev)}, "cos", "a float32 TILE ttnn tensor [B=2, 64]"),
        ({"sin": T(ttnn.float32, tile, (2, 96), dev)}, "sin", "shape [2, 96]"),
        ({"rotary_dim": 32}, "cos", "[B=2, 32]"),  # rotary_dim 32: one tile of angles, not two
        ({"cur_pos": T(ttnn.uint32, rm, (2,), dev)}, "cur_pos", "an int32 ROW_MAJOR ttnn tensor [2]"),
        ({"cur_pos": T(ttnn.int32, rm, (3,), dev)}, "cur_pos", "[2]"),
        ({"page_table": T(ttnn.int32, rm, (2,), dev)}, "page_table", "shape [B=2, max_blocks >= 1]"),
        ({"page_table": T(ttnn.int32, tile, (2, 4), dev)}, "page_table", "int32 ROW_MAJOR"),
        ({"cur_pos": ttnn.Tensor(torch.zeros(2, dtype=torch.int32), ttnn.int32)}, "cur_pos", "a ttnn host tensor"),
        ({"backend": "host"}, "cos", "a host value (torch tensor or list) for backend 'host'"),
    ]
    for change, arg, got in cases:
        with pytest.raises((ValueError, TypeError)) as err:
            ttdecode.rotary_kv_append(**{**kw, **change})
        msg = str(err.value)
        assert f"argument '{arg}'" in msg and "expected" in msg and got in msg, msg
    host = _good()
    with pytest.raises(TypeError, match="argument 'cur_pos': expected a host value .* got a ttnn tensor on a device"):
        ttdecode.rotary_kv_append(**{**host, "cur_pos": t["cur_pos"]})
    assert f["rec"]["generic_op"] == []
