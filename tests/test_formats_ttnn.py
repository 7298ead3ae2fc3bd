"""ttdecode's tile images against ttnn 0.81.1's host packer and unpacker, byte for byte.

ttnn exposes a host tensor's raw tile bytes: `t.host_buffer().get_shard(MeshCoordinate(0, 0))`
supports DLPack, so `np.from_dlpack` gives the packed image as uint8. Every comparison below is
on those bytes (packing) or on float32 bit patterns of `ttnn.to_torch` (unpacking).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable

import numpy as np
import pytest
import torch

from ttdecode.core import formats as F
from ttdecode.core import tensor as T
from ttdecode.core.formats import DataType
from ttdecode.ttnn_env import import_ttnn, ttnn_unavailable_reason

ttnn = import_ttnn()
if ttnn is None and os.environ.get("TTDECODE_REQUIRE_TTNN") == "1":  # `make test` installs ttnn
    raise RuntimeError(f"ttnn is required for these interop tests: {ttnn_unavailable_reason()}")
pytestmark = pytest.mark.skipif(ttnn is None, reason=f"ttnn cannot be imported: {ttnn_unavailable_reason()}")

ALL = list(DataType)


def ttnn_dtype(dtype: DataType) -> Any:
    return getattr(ttnn, dtype.value)


def ttnn_bytes(t: Any) -> np.ndarray:
    """The raw tile image of a single-device host ttnn tensor (read-only view)."""
    return np.from_dlpack(t.host_buffer().get_shard(ttnn.MeshCoordinate(0, 0)))


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().float().view(torch.int32)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _outliers(shape: tuple[int, ...]) -> torch.Tensor:
    g = _gen(5)
    x = torch.randn(shape, generator=g)
    return torch.where(torch.rand(shape, generator=g) < 0.001, 10 * x, x)


def _random_bits(shape: tuple[int, ...]) -> torch.Tensor:
    raw = np.random.default_rng(7).integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    return torch.from_numpy(raw.view(np.float32).copy())


def _exponent_band(shape: tuple[int, ...]) -> torch.Tensor:
    """Random values whose exponents in a row lie within 4 of each other, over the whole range."""
    rng = np.random.default_rng(8)
    e = rng.integers(0, 256, size=shape[:-1] + (1,)) + rng.integers(-3, 1, size=shape)
    b = (rng.integers(0, 2, size=shape).astype(np.uint32) << 31) | (np.clip(e, 0, 255).astype(np.uint32) << 23)
    b |= rng.integers(0, 1 << 23, size=shape).astype(np.uint32)
    return torch.from_numpy(b.view(np.float32).copy())


def _ties(shape: tuple[int, ...]) -> torch.Tensor:
    g = _gen(9)
    m = torch.randint(0, 1 << 12, shape, generator=g).float() / (1 << 10) + 1
    return m * torch.sign(torch.randn(shape, generator=g))


INPUTS: dict[str, Callable[[], torch.Tensor]] = {
    "randn": lambda: torch.randn(2, 64, 96, generator=_gen(1)),
    "zeros": lambda: torch.zeros(64, 64),
    "minus_zeros": lambda: -torch.zeros(64, 64),
    "denormals": lambda: torch.randn(64, 64, generator=_gen(2)) * 1e-39,
    "denormals_mixed_with_normals": lambda: torch.randn(64, 64, generator=_gen(3))
    * torch.tensor([1e-39, 1e-38, 1e-37, 1e-45]).repeat(16)[None, :],
    "huge": lambda: torch.randn(64, 64, generator=_gen(4)) * 3e38,
    "float32_max": lambda: torch.tensor([3.4028235e38, -3.4028235e38, 3.3e38, 1.1754944e-38] * 256).reshape(32, 32),
    "outliers_p001": lambda: _outliers((3, 128, 64)),
    "ragged": lambda: torch.randn(2, 3, 40, 70, generator=_gen(6)),
    "wide_dynamic_range": lambda: torch.randn(64, 64, generator=_gen(10)) * torch.logspace(-30, 30, 64)[None, :],
    "inf_nan": lambda: torch.tensor([float("inf"), float("-inf"), float("nan"), 1.0, -2.0, 1e-40, 0.0, -0.0] * 128).reshape(32, 32),
    "random_bit_patterns": lambda: _random_bits((128, 96)),
    "exponent_band": lambda: _exponent_band((128, 128)),
    "rounding_ties": lambda: _ties((64, 64)),
}


@pytest.mark.parametrize("dtype", ALL, ids=[d.value for d in ALL])
@pytest.mark.parametrize("name", list(INPUTS))
def test_pack_tiles_matches_ttnn_bytes(name: str, dtype: DataType) -> None:
    x = INPUTS[name]()
    ref = ttnn.from_torch(x, dtype=ttnn_dtype(dtype), layout=ttnn.TILE_LAYOUT)
    expected = ttnn_bytes(ref)
    ours = np.frombuffer(F.pack_tiles(x, dtype), dtype=np.uint8)
    assert ours.shape == expected.shape
    mismatch = np.flatnonzero(ours != expected)
    assert mismatch.size == 0, f"{mismatch.size} bytes differ, first at {mismatch[:8].tolist()}"


@pytest.mark.parametrize("dtype", ALL, ids=[d.value for d in ALL])
@pytest.mark.parametrize("name", list(INPUTS))
def test_unpack_tiles_matches_ttnn_to_torch(name: str, dtype: DataType) -> None:
    x = INPUTS[name]()
    ref = ttnn.from_torch(x, dtype=ttnn_dtype(dtype), layout=ttnn.TILE_LAYOUT)
    ours = F.unpack_tiles(ttnn_bytes(ref).tobytes(), dtype, tuple(x.shape))
    assert torch.equal(bits(ours), bits(ttnn.to_torch(ref)))


@pytest.mark.parametrize("dtype", [DataType.bfloat8_b, DataType.bfloat4_b], ids=["bfloat8_b", "bfloat4_b"])
def test_unpack_matches_ttnn_for_every_exponent_and_code(dtype: DataType) -> None:
    """All 256 x 2^(bits+1) (shared exponent, code) pairs, including ones the packer never makes
    (-0 codes, codes that normalise below the exponent range). ttnn builds bfloat8_b/bfloat4_b
    tensors only from floats, so this test writes the crafted image into a ttnn host tensor's own
    buffer (exported read-only through DLPack) before calling `ttnn.to_torch`."""
    mag_bits = 7 if dtype is DataType.bfloat8_b else 3
    ncodes = 1 << (mag_bits + 1)
    exps = np.repeat(np.arange(256), ncodes)
    codes = np.tile(np.arange(ncodes), 256).astype(np.uint8)
    ntiles = exps.size // 1024
    image = np.zeros((ntiles, F.tile_size(dtype)), dtype=np.uint8)
    image[:, :64] = exps.reshape(ntiles, 64, 16)[:, :, 0]
    tile_codes = codes.reshape(ntiles, 1024)
    if dtype is DataType.bfloat4_b:
        tile_codes = tile_codes[:, 0::2] | (tile_codes[:, 1::2] << 4)
    image[:, 64:] = tile_codes
    shape = (32, 32 * ntiles)

    holder = ttnn.from_torch(torch.zeros(shape), dtype=ttnn_dtype(dtype), layout=ttnn.TILE_LAYOUT)
    view = ttnn_bytes(holder)
    assert view.size == image.size
    writable = np.ctypeslib.as_array((ctypes.c_uint8 * view.size).from_address(view.ctypes.data))
    writable[:] = image.reshape(-1)
    assert np.array_equal(ttnn_bytes(holder), image.reshape(-1))

    expected = ttnn.to_torch(holder)
    ours = F.unpack_tiles(image.tobytes(), dtype, shape)
    assert torch.equal(bits(ours), bits(expected))


def test_pack_of_bf16_torch_input_matches_ttnn() -> None:
    x = torch.randn(64, 96, generator=_gen(11)).bfloat16()
    for dtype in [DataType.bfloat16, DataType.bfloat8_b, DataType.bfloat4_b]:
        ref = ttnn.from_torch(x, dtype=ttnn_dtype(dtype), layout=ttnn.TILE_LAYOUT)
        assert F.pack_tiles(x, dtype) == ttnn_bytes(ref).tobytes()


# ---- TileTensor interop ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=[d.value for d in ALL])
def test_to_torch_mirrors_ttnn_values_and_dtypes(dtype: DataType) -> None:
    x = _outliers((2, 40, 70))
    ref = ttnn.to_torch(ttnn.from_torch(x, dtype=ttnn_dtype(dtype), layout=ttnn.TILE_LAYOUT))
    ours = T.to_torch(T.from_torch(x, dtype))
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert torch.equal(bits(ours), bits(ref))


@pytest.mark.parametrize("dtype", ALL, ids=[d.value for d in ALL])
def test_as_tile_tensor_of_ttnn_tensor_keeps_its_format_and_bytes(dtype: DataType) -> None:
    x = torch.randn(2, 40, 70, generator=_gen(12))
    tiled = ttnn.from_torch(x, dtype=ttnn_dtype(dtype), layout=ttnn.TILE_LAYOUT)
    t = T.as_tile_tensor(tiled, DataType.bfloat16)
    assert (t.shape, t.dtype) == ((2, 40, 70), dtype)
    assert t.data == ttnn_bytes(tiled).tobytes()
    assert torch.equal(T.dequantize(tiled), ttnn.to_torch(tiled).double())


@pytest.mark.parametrize("dtype", [DataType.float32, DataType.bfloat16], ids=["float32", "bfloat16"])
def test_as_tile_tensor_of_row_major_ttnn_tensor_repacks_the_same_values(dtype: DataType) -> None:
    x = torch.randn(40, 70, generator=_gen(13))
    row_major = ttnn.from_torch(x, dtype=ttnn_dtype(dtype))
    assert row_major.layout == ttnn.ROW_MAJOR_LAYOUT
    t = T.as_tile_tensor(row_major)
    tiled = ttnn.from_torch(x, dtype=ttnn_dtype(dtype), layout=ttnn.TILE_LAYOUT)
    assert t.dtype is dtype and t.data == ttnn_bytes(tiled).tobytes()


def test_as_tile_tensor_rejects_integer_ttnn_tensor() -> None:
    x = ttnn.from_torch(torch.arange(32 * 32, dtype=torch.int32).reshape(32, 32), dtype=ttnn.int32)
    with pytest.raises(TypeError, match="x: expected a ttnn tensor of dtype FLOAT32, BFLOAT16, BFLOAT8_B, BFLOAT4_B, got INT32"):
        T.as_tile_tensor(x)
