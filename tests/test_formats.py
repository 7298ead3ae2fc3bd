"""Tile layout and tile byte images (ttdecode.core.formats), without ttnn."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ttdecode.core import formats as F
from ttdecode.core.formats import DataType

ALL = list(DataType)
BFP = [DataType.bfloat8_b, DataType.bfloat4_b]
MAG_BITS = {DataType.bfloat8_b: 7, DataType.bfloat4_b: 3}


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


def one_tile(values: list[float], dtype: DataType) -> bytes:
    """Pack a 32x32 tile whose first face row (row 0, cols 0..15) holds `values`, rest zero."""
    x = torch.zeros(32, 32)
    x[0, : len(values)] = torch.tensor(values, dtype=torch.float32)
    return F.pack_tiles(x, dtype)


# ---- sizes -------------------------------------------------------------------------------------


def test_tile_sizes_match_tt_metal() -> None:
    assert [F.tile_size(d) for d in ALL] == [4096, 2048, 1088, 576]
    assert F.tile_size("bfloat8_b") == 1088


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("shape", [(32, 32), (1, 33), (3, 40, 70), (2, 2, 64, 96), (5, 0, 7)])
def test_packed_size_is_tiles_times_tile_size(shape: tuple[int, ...], dtype: DataType) -> None:
    x = torch.randn(shape)
    ntiles = F.num_tiles(shape)
    assert len(F.pack_tiles(x, dtype)) == ntiles * F.tile_size(dtype)
    h, w = shape[-2:]
    assert ntiles == int(np.prod(shape[:-2])) * -(-h // 32) * -(-w // 32)


def test_padded_shape_rounds_last_two_dims_only() -> None:
    assert F.padded_shape((3, 5, 40, 70)) == (3, 5, 64, 96)
    assert F.padded_shape((32, 64)) == (32, 64)


# ---- tile layout -------------------------------------------------------------------------------


def test_tilize_places_faces_in_order_and_rows_inside_faces() -> None:
    x = torch.arange(1024, dtype=torch.float32).reshape(32, 32)  # value = 32 r + c
    t = F.tilize(x)[0]
    for r, c in [(0, 0), (0, 15), (0, 16), (1, 16), (15, 31), (16, 0), (17, 18), (31, 31)]:
        face = (r // 16) * 2 + c // 16
        assert t[face * 256 + (r % 16) * 16 + c % 16] == 32 * r + c


def test_tilize_orders_tiles_row_major_with_batch_outermost() -> None:
    b, ht, wt = 2, 3, 4
    x = torch.zeros(b, ht * 32, wt * 32)
    for i in range(b):
        for r in range(ht):
            for c in range(wt):
                x[i, r * 32:(r + 1) * 32, c * 32:(c + 1) * 32] = 100 * i + 10 * r + c
    t = F.tilize(x).reshape(-1, 1024)
    pages = [100 * i + 10 * r + c for i in range(b) for r in range(ht) for c in range(wt)]
    assert t[:, 0].tolist() == pages
    assert torch.equal(t.min(dim=1).values, t.max(dim=1).values)


def test_tilize_pads_ragged_dims_with_zeros() -> None:
    x = torch.ones(2, 33, 40)
    t = F.tilize(x)
    assert t.shape == (2, 4, 1024)
    back = F.untilize(t, (2, 64, 64))
    assert torch.equal(back[:, :33, :40], x)
    assert back[:, 33:, :].abs().sum() == 0 and back[:, :, 40:].abs().sum() == 0


@settings(max_examples=40, deadline=None)
@given(
    batch=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    h=st.integers(1, 70),
    w=st.integers(1, 70),
)
def test_untilize_inverts_tilize(batch: list[int], h: int, w: int) -> None:
    x = torch.randn(*batch, h, w)
    assert torch.equal(F.untilize(F.tilize(x), x.shape), x)


def test_untilize_rejects_wrong_tile_count() -> None:
    with pytest.raises(ValueError, match=r"tiles: expected shape \(2, 1024\) for logical shape \(40, 32\), got \(3, 1024\)"):
        F.untilize(torch.zeros(3, 1024), (40, 32))


# ---- float32 / bfloat16 ------------------------------------------------------------------------


def test_float32_round_trip_is_bit_exact_including_nan_payloads() -> None:
    raw = np.random.default_rng(0).integers(0, 2**32, size=(40, 70), dtype=np.uint64).astype(np.uint32)
    x = torch.from_numpy(raw.view(np.float32).copy())
    assert torch.equal(bits(F.quantize(x, DataType.float32)), bits(x))


def test_float32_bytes_are_little_endian_ieee_in_tile_order() -> None:
    x = torch.zeros(32, 32)
    x[0, 16] = 1.5  # face 1, element 0 -> value index 256
    data = F.pack_tiles(x, DataType.float32)
    assert struct.unpack_from("<f", data, 4 * 256)[0] == 1.5


def test_bfloat16_rounds_to_nearest_even_like_torch_for_numbers() -> None:
    raw = np.random.default_rng(1).integers(0, 2**32, size=(64, 64), dtype=np.uint64).astype(np.uint32)
    x = torch.from_numpy(raw.view(np.float32).copy())
    x[torch.isnan(x)] = 0.0
    x[0, :4] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 3.4028235e38, -3.4028235e38])  # ties and overflow
    ours = F.quantize(x, DataType.bfloat16)
    assert torch.equal(bits(ours), bits(x.to(torch.bfloat16).float()))
    assert ours[0, :4].tolist() == [1.0, 1 + 2**-6, float("inf"), float("-inf")]


def test_bfloat16_turns_every_nan_into_quiet_nan_7fc0() -> None:
    x = torch.zeros(32, 32)
    x.view(torch.int32)[0, :3] = torch.tensor([0x7F800001, -0x00400001, 0x7FC00000], dtype=torch.int32)
    data = np.frombuffer(F.pack_tiles(x, DataType.bfloat16), dtype=np.uint16)
    assert data[:3].tolist() == [0x7FC0] * 3


# ---- block floats: hand-computed encodings -----------------------------------------------------


def test_bfp8_codes_and_shared_exponent_of_simple_values() -> None:
    data = one_tile([1.0, 0.5, -1.0, 1.5, 0.0, -0.0, 0.25, -0.75], DataType.bfloat8_b)
    assert data[0] == 127 and data[1] == 0  # exponent of group 0 (max = 1.x), group 1 all zeros
    assert list(data[64:72]) == [0x40, 0x20, 0xC0, 0x60, 0x00, 0x00, 0x10, 0xB0]


def test_bfp4_codes_and_nibble_order() -> None:
    data = one_tile([1.0, 0.5, -1.0, 1.5, 0.25, -0.75], DataType.bfloat4_b)
    assert data[0] == 127
    # codes 4, 2, 0xC, 6, 1, 0xB; value 2k in the low nibble of byte k
    assert list(data[64:67]) == [0x24, 0x6C, 0xB1]


def test_bfp_rounds_ties_to_even_and_halfway_up() -> None:
    step = 2.0**-6  # bfloat8_b step at shared exponent 127 (1.0 <= max < 2.0)
    vals = [1.0, 1 + step / 2, 1 + 3 * step / 2, 1 + step / 2 + 2**-20, 1 + step / 2 - 2**-20]
    data = one_tile(vals, DataType.bfloat8_b)
    assert list(data[64:69]) == [64, 64, 66, 65, 64]


def test_bfp_saturates_instead_of_bumping_the_exponent() -> None:
    q8 = F.quantize(torch.full((32, 32), 1.999), DataType.bfloat8_b)
    assert torch.all(q8 == 1 + 63 / 64)
    q4 = F.quantize(torch.full((32, 32), 1.9), DataType.bfloat4_b)
    assert torch.all(q4 == 1.75)


def test_bfp_exponent_bytes_follow_face_rows() -> None:
    x = torch.zeros(32, 32)
    for r in range(32):
        x[r, :16] = 2.0 ** (r - 16)  # face 0 (r < 16) or face 2
        x[r, 16:] = 2.0 ** (r + 20)  # face 1 or face 3
    data = F.pack_tiles(x, DataType.bfloat8_b)
    expected = [127 + r - 16 for r in range(16)] + [127 + r + 20 for r in range(16)]
    expected += [127 + r - 16 for r in range(16, 32)] + [127 + r + 20 for r in range(16, 32)]
    assert list(data[:64]) == expected


@pytest.mark.parametrize("dtype", BFP)
def test_bfp_flushes_denormals_and_drops_small_neighbours(dtype: DataType) -> None:
    x = torch.zeros(32, 32)
    x[0, :3] = torch.tensor([1e-39, -1e-40, 1e-45])  # denormals: code 0 even as the group max
    x[1, :2] = torch.tensor([8.0, 0.01])  # 0.01 is far below 8's step
    q = F.quantize(x, dtype)
    assert torch.equal(bits(q[0, :3]), torch.zeros(3, dtype=torch.int32))
    assert q[1, :2].tolist() == [8.0, 0.0]


@pytest.mark.parametrize("dtype", BFP)
def test_bfp_keeps_inf_and_nan_and_zeroes_their_group(dtype: DataType) -> None:
    x = torch.ones(32, 32)
    x[0, 0], x[1, 0], x[2, 0] = float("inf"), float("-inf"), float("nan")
    q = F.quantize(x, dtype)
    assert q[0, 0] == float("inf") and q[1, 0] == float("-inf") and torch.isnan(q[2, 0])
    assert torch.all(q[:3, 1:16] == 0) and torch.all(q[3:, :] == 1)


@pytest.mark.parametrize("dtype", BFP)
def test_bfp_decodes_minus_zero_code_denormal_results_and_flushes_below_range(dtype: DataType) -> None:
    mb = MAG_BITS[dtype]
    data = bytearray(F.tile_size(dtype))
    data[0] = 1  # shared exponent 1 for group 0
    # -0 | top bit set (k=0) | needs one shift (k=1), with a low bit | needs mb-1 > 1 shifts
    codes = [1 << mb, 1 << (mb - 1), (1 << (mb - 2)) | 1, 1]
    if dtype is DataType.bfloat8_b:
        data[64:68] = bytes(codes)
    else:
        data[64] = codes[0] | codes[1] << 4
        data[65] = codes[2] | codes[3] << 4
    vals = [v & 0xFFFFFFFF for v in bits(F.unpack_tiles(bytes(data), dtype, (32, 32))[0, :4]).tolist()]
    frac = ((((1 << (mb - 2)) | 1) << 2) & ((1 << mb) - 1)) << (23 - mb)  # exponent field 1 - 1 = 0
    assert vals == [0x80000000, 0x00800000, frac, 0]
    assert frac == (0x00040000 if mb == 7 else 0x00400000)


# ---- block floats: properties ------------------------------------------------------------------


def finite_tensors() -> st.SearchStrategy[torch.Tensor]:
    def build(args: tuple[int, int, int, float]) -> torch.Tensor:
        seed, h, w, scale = args
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(h, w, generator=g) * scale
        outliers = torch.rand(h, w, generator=g) < 0.01
        return torch.where(outliers, x * 10, x)

    return st.tuples(st.integers(0, 2**31), st.integers(1, 70), st.integers(1, 70),
                     st.sampled_from([1e-30, 1e-3, 1.0, 1e3, 1e30])).map(build)


@settings(max_examples=40, deadline=None)
@given(x=finite_tensors(), dtype=st.sampled_from(BFP))
def test_bfp_quantize_is_idempotent(x: torch.Tensor, dtype: DataType) -> None:
    q = F.quantize(x, dtype)
    assert torch.equal(bits(F.quantize(q, dtype)), bits(q))


@settings(max_examples=40, deadline=None)
@given(x=finite_tensors(), dtype=st.sampled_from(BFP))
def test_bfp_error_is_within_one_step_of_the_shared_exponent(x: torch.Tensor, dtype: DataType) -> None:
    q = F.quantize(x, dtype).double()
    groups = F.tilize(x.double()).reshape(-1, 16)
    qg = F.tilize(q).reshape(-1, 16)
    mx = groups.abs().max(dim=1, keepdim=True).values
    exp = torch.floor(torch.log2(mx.clamp_min(1e-300)))
    step = torch.pow(2.0, exp - (MAG_BITS[dtype] - 1))
    err = (qg - groups).abs()
    assert torch.all(err <= step + 2.0**-126)  # half a step from rounding, more only at saturation
    assert torch.all(torch.sign(qg) * torch.sign(groups) >= 0)  # never flips a sign


@pytest.mark.parametrize("dtype", ALL)
def test_unpack_inverts_pack_on_representable_values(dtype: DataType) -> None:
    x = F.quantize(torch.randn(3, 40, 70), dtype)
    assert torch.equal(bits(F.unpack_tiles(F.pack_tiles(x, dtype), dtype, x.shape)), bits(x))


def test_pack_accepts_bf16_and_float64_inputs_like_their_float32_value() -> None:
    x = torch.randn(40, 40)
    assert F.pack_tiles(x.bfloat16(), DataType.bfloat8_b) == F.pack_tiles(x.bfloat16().float(), DataType.bfloat8_b)
    assert F.pack_tiles(x.double(), DataType.bfloat4_b) == F.pack_tiles(x, DataType.bfloat4_b)


# ---- errors ------------------------------------------------------------------------------------


def test_bad_dtype_is_named() -> None:
    with pytest.raises(ValueError, match=r"dtype: expected a ttdecode DataType \(float32, bfloat16, bfloat8_b, bfloat4_b\), got 'bfp8'"):
        F.tile_size("bfp8")


def test_pack_rejects_non_float_and_low_rank_inputs() -> None:
    with pytest.raises(TypeError, match="x: expected a floating tensor .* got torch.int32"):
        F.pack_tiles(torch.zeros(32, 32, dtype=torch.int32), DataType.bfloat16)
    with pytest.raises(ValueError, match=r"x: expected rank >= 2 \(\[..., H, W\]\), got shape \(32,\)"):
        F.pack_tiles(torch.zeros(32), DataType.bfloat16)
    with pytest.raises(TypeError, match="x: expected a torch.Tensor, got ndarray"):
        F.pack_tiles(np.zeros((32, 32), np.float32), DataType.bfloat16)  # type: ignore[arg-type]


def test_unpack_rejects_wrong_byte_count() -> None:
    with pytest.raises(ValueError, match=r"data: expected 2176 bytes \(2 bfloat8_b tiles of 1088 bytes for shape \(33, 32\)\), got 1088"):
        F.unpack_tiles(bytes(1088), DataType.bfloat8_b, (33, 32))
    with pytest.raises(ValueError, match=r"shape: expected rank >= 2"):
        F.unpack_tiles(bytes(1088), DataType.bfloat8_b, (32,))


# ---- TileTensor (ttdecode.core.tensor) without ttnn -------------------------------------------------


def test_tile_tensor_geometry_follows_padded_shape() -> None:
    from ttdecode.core.tensor import from_torch

    t = from_torch(torch.randn(2, 3, 40, 70), DataType.bfloat8_b)
    assert (t.shape, t.padded_shape, t.num_pages, t.page_size) == ((2, 3, 40, 70), (2, 3, 64, 96), 36, 1088)
    assert len(t.data) == 36 * 1088
    assert t.page(35) == t.data[35 * 1088:]


def test_tile_tensor_rejects_inconsistent_fields() -> None:
    from ttdecode.core.tensor import TileTensor

    with pytest.raises(ValueError, match=r"data: expected 2048 bytes \(1 pages of 2048 bytes for bfloat16 shape \(32, 32\)\), got 10"):
        TileTensor((32, 32), DataType.bfloat16, bytes(10))
    with pytest.raises(ValueError, match="dtype: expected a ttdecode DataType"):
        TileTensor((32, 32), "fp8", bytes(2048))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"shape: expected rank >= 2 \(\[..., H, W\]\), got \(32,\)"):
        TileTensor((32,), DataType.bfloat16, bytes(2048))
    with pytest.raises(TypeError, match="data: expected bytes, got list"):
        TileTensor((32, 32), DataType.bfloat16, [0] * 2048)  # type: ignore[arg-type]
    t = TileTensor((32, 32), DataType.bfloat16, bytes(2048))
    with pytest.raises(IndexError, match=r"index: expected an int in \[0, 1\), got 1"):
        t.page(1)


def test_from_torch_rejects_non_float_tensors() -> None:
    from ttdecode.core.tensor import from_torch

    with pytest.raises(TypeError, match="x: expected a floating tensor"):
        from_torch(torch.ones(32, 32, dtype=torch.int64))
    with pytest.raises(TypeError, match="x: expected a torch.Tensor, got list"):
        from_torch([[1.0]])  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype,torch_dtype", [(DataType.float32, torch.float32), (DataType.bfloat16, torch.bfloat16),
                                               (DataType.bfloat8_b, torch.float32), (DataType.bfloat4_b, torch.float32)])
def test_to_torch_returns_ttnn_dtypes_and_quantized_values(dtype: DataType, torch_dtype: torch.dtype) -> None:
    from ttdecode.core.tensor import from_torch, to_torch

    x = torch.randn(3, 33, 65)
    y = to_torch(from_torch(x, dtype))
    assert y.dtype == torch_dtype and y.shape == x.shape
    assert torch.equal(y.float(), F.quantize(x, dtype))


def test_as_tile_tensor_passes_tile_tensors_through_and_packs_torch_in_default_dtype() -> None:
    from ttdecode.core.tensor import as_tile_tensor, from_torch

    t = from_torch(torch.randn(32, 32), DataType.bfloat4_b)
    assert as_tile_tensor(t, DataType.bfloat16) is t
    x = torch.randn(40, 40)
    assert as_tile_tensor(x, DataType.bfloat8_b) == from_torch(x, DataType.bfloat8_b)
    with pytest.raises(TypeError, match="x: expected a TileTensor, torch.Tensor or ttnn.Tensor, got ndarray"):
        as_tile_tensor(np.zeros((32, 32)))


def test_dequantize_gives_float64_of_the_stored_values() -> None:
    from ttdecode.core.tensor import dequantize, from_torch

    x = torch.randn(2, 40, 40)
    assert dequantize(x).dtype == torch.float64
    assert torch.equal(dequantize(x), x.bfloat16().double())  # torch floats are stored as bfloat16
    assert torch.equal(dequantize(x, default_dtype=None), x.double())
    assert torch.equal(dequantize(x, DataType.bfloat4_b), F.quantize(x, DataType.bfloat4_b).double())
    assert torch.equal(dequantize(from_torch(x, DataType.bfloat8_b)), F.quantize(x, DataType.bfloat8_b).double())


# ---- ttnn environment (ttdecode.ttnn_env), without importing ttnn --------------------------------


def test_ensure_ttnn_env_writes_the_mock_cluster_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from ttdecode import ttnn_env

    monkeypatch.delenv(ttnn_env.MOCK_CLUSTER_ENV, raising=False)
    monkeypatch.delenv(ttnn_env.CACHE_ENV, raising=False)
    monkeypatch.setattr(ttnn_env, "has_tenstorrent_device", lambda: False)
    done = ttnn_env.ensure_ttnn_env()
    import os

    path = os.environ[ttnn_env.MOCK_CLUSTER_ENV]
    assert done == {ttnn_env.MOCK_CLUSTER_ENV: path, ttnn_env.CACHE_ENV: os.environ[ttnn_env.CACHE_ENV]}
    assert os.path.isdir(os.environ[ttnn_env.CACHE_ENV])
    with open(path, encoding="utf-8") as f:
        desc = yaml.safe_load(f)
    assert desc["arch"] == {0: "Wormhole"} and desc["chips_with_mmio"] == [{0: 0}]
    assert desc["boards"] == [[{"board_id": 72059269369839682}, {"board_type": "n150"}, {"chips": [0]}]]
    assert desc["harvesting"] == {0: {"noc_translation": True, "harvest_mask": 32}}


def test_ensure_ttnn_env_keeps_user_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from ttdecode import ttnn_env

    monkeypatch.setenv(ttnn_env.MOCK_CLUSTER_ENV, "/my/cluster.yaml")
    monkeypatch.setenv(ttnn_env.CACHE_ENV, "/my/cache")
    monkeypatch.setattr(ttnn_env, "has_tenstorrent_device", lambda: False)
    assert ttnn_env.ensure_ttnn_env() == {}
    assert os.environ[ttnn_env.MOCK_CLUSTER_ENV] == "/my/cluster.yaml" and os.environ[ttnn_env.CACHE_ENV] == "/my/cache"


def test_ensure_ttnn_env_does_nothing_with_a_real_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from ttdecode import ttnn_env

    monkeypatch.delenv(ttnn_env.MOCK_CLUSTER_ENV, raising=False)
    monkeypatch.delenv(ttnn_env.CACHE_ENV, raising=False)
    monkeypatch.setattr(ttnn_env.glob, "glob", lambda pattern: ["/dev/tenstorrent/0"] if "tenstorrent" in pattern else [])
    assert ttnn_env.has_tenstorrent_device()
    assert ttnn_env.ensure_ttnn_env() == {}
    assert ttnn_env.MOCK_CLUSTER_ENV not in os.environ and ttnn_env.CACHE_ENV not in os.environ


def test_import_ttnn_returns_none_with_reason_when_ttnn_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from ttdecode import ttnn_env

    monkeypatch.setitem(sys.modules, "ttnn", None)  # makes `import ttnn` raise ImportError
    assert ttnn_env.import_ttnn() is None
    reason = ttnn_env.ttnn_unavailable_reason()
    assert reason is not None and reason.startswith("import ttnn failed: ModuleNotFoundError")


@pytest.mark.parametrize("dtype", BFP)
def test_bfp_nan_with_only_low_payload_bits_becomes_inf(dtype: DataType) -> None:
    x = torch.zeros(32, 32)
    x.view(torch.int32)[0, :2] = torch.tensor([0x7F800001, -0x007FFFFF], dtype=torch.int32)  # +NaN(1), -NaN(1)
    q = F.quantize(x, dtype)
    assert q[0, :2].tolist() == [float("inf"), float("-inf")]
