"""Tenstorrent tile formats: tile layout and the byte images of float32 / bfloat16 / bfloat8_b / bfloat4_b tiles.

A tile is 32x32 values stored as four 16x16 faces (face 0 top-left, 1 top-right, 2 bottom-left,
3 bottom-right), each face row-major. "Tile order" below means the 1024 values of a tile in that
face-major order. A tensor `[..., H, W]` becomes tiles in row-major tile order over the last two
dims with the batch dims outermost; this is also the page order of an interleaved DRAM tensor
(one tile = one page).

Byte images of one tile (all little-endian):

- float32: 1024 x 4 bytes, the IEEE bits.
- bfloat16: 1024 x 2 bytes, the top 16 bits of float32 rounded to nearest, ties to even (as torch
  and ttnn); every NaN becomes the quiet NaN 0x7FC0 (as ttnn; torch's CPU cast makes 0xFFFF).
- bfloat8_b / bfloat4_b (block floats with an 8-bit exponent): 64 exponent bytes, one per 16
  values (one face row; order face 0 rows 0..15, face 1 rows 0..15, ...), then one sign-magnitude
  code per value in tile order: bfloat8_b 1 byte (sign bit 7, 7 magnitude bits), bfloat4_b 4 bits
  (sign bit 3, 3 magnitude bits; value 2k in the low nibble of byte k, value 2k+1 in the high one).

Block-float encoding (what ttnn 0.81.1's host packer does; pinned bit for bit by
tests/test_formats_ttnn.py), per group of 16 float32 values with IEEE fields (sign, exp, man):

1. shared exponent E = max of the 16 biased exponent fields (NaN/inf count as 255, zeros and
   denormals as 0);
2. a value with exponent field 0 (+-0.0 and every denormal) encodes as code 0;
3. otherwise the 24-bit significand (1 << 23 | man) is shifted right by E - exp (everything gone
   once the shift reaches 24), then rounded to its top 7 (bfp8) / 3 (bfp4) bits, to nearest with
   ties to even; a result that rounds past the largest magnitude (127 / 7) saturates at it (the
   exponent is not bumped);
4. the sign bit is kept only when the rounded magnitude is not 0.
In a group holding inf or NaN (E = 255) every finite value becomes 0; inf stays inf, and a NaN
stays NaN only if mantissa bits survive the rounding (quiet NaNs do; a NaN with only low payload
bits becomes inf of its sign).

Decoding a code (sign s, magnitude m != 0) with shared exponent E: normalise m so its top bit is
the implicit one, shifting left k times; the float has exponent field E - k and the remaining
bits as its top mantissa bits. m == 0 decodes to +-0.0 (sign kept). If k > E the value is
flushed to +0.0 (never produced by the packer itself, since k <= E for every encoded value).
"""

from __future__ import annotations

import enum
import functools
import math
from typing import Sequence, Union

import numpy as np
import torch

#: Tile edge, values.
TILE_DIM = 32
#: Face edge, values.
FACE_DIM = 16
#: Values per tile.
TILE_VALUES = TILE_DIM * TILE_DIM
#: Values sharing one block-float exponent (one face row).
BFP_GROUP = FACE_DIM
#: Exponent bytes at the start of a block-float tile.
BFP_EXPONENT_BYTES = TILE_VALUES // BFP_GROUP


class DataType(enum.Enum):
    """Storage formats of tiles. Values are tt-metal's names."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    bfloat8_b = "bfloat8_b"
    bfloat4_b = "bfloat4_b"


#: Bytes per 32x32 tile of each format.
_TILE_SIZES: dict[DataType, int] = {
    DataType.float32: 4 * TILE_VALUES,
    DataType.bfloat16: 2 * TILE_VALUES,
    DataType.bfloat8_b: BFP_EXPONENT_BYTES + TILE_VALUES,
    DataType.bfloat4_b: BFP_EXPONENT_BYTES + TILE_VALUES // 2,
}

#: Tiles encoded per step (4 MB of float32) to bound the temporaries of the block-float encoder.
_ENCODE_CHUNK_TILES = 1024

#: Magnitude bits of a block-float code (the implicit one included).
_BFP_MAGNITUDE_BITS: dict[DataType, int] = {DataType.bfloat8_b: 7, DataType.bfloat4_b: 3}

_FLOAT_TORCH_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)

DTypeLike = Union[DataType, str]


def as_data_type(dtype: DTypeLike, name: str = "dtype") -> DataType:
    """Return `dtype` as a `DataType`; accepts the enum or its name ("bfloat8_b", ...)."""
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, str):
        try:
            return DataType(dtype)
        except ValueError:
            pass
    expected = ", ".join(d.value for d in DataType)
    raise ValueError(f"{name}: expected a ttdecode DataType ({expected}), got {dtype!r}")


def format_id(dtype: DTypeLike) -> int:
    """The C++ `ttdecode::formats::DataFormat` number of `dtype` (float32 0, bfloat16 1,
    bfloat8_b 2, bfloat4_b 3; ttdecode/runtime/src/tile_formats.hpp)."""
    return list(DataType).index(as_data_type(dtype))


def is_block_float(dtype: DTypeLike) -> bool:
    """True for the shared-exponent formats bfloat8_b and bfloat4_b."""
    return as_data_type(dtype) in _BFP_MAGNITUDE_BITS


def tile_size(dtype: DTypeLike) -> int:
    """Bytes of one 32x32 tile: float32 4096, bfloat16 2048, bfloat8_b 1088, bfloat4_b 576."""
    return _TILE_SIZES[as_data_type(dtype)]


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def _check_shape(shape: Sequence[int], name: str = "shape") -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of ints, got {shape!r}") from None
    if len(dims) < 2:
        raise ValueError(f"{name}: expected rank >= 2 ([..., H, W]), got {dims}")
    if any(d < 0 for d in dims):
        raise ValueError(f"{name}: expected non-negative dims, got {dims}")
    return dims


def padded_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """`shape` with its last two dims rounded up to multiples of 32."""
    dims = _check_shape(shape)
    return dims[:-2] + (_round_up(dims[-2], TILE_DIM), _round_up(dims[-1], TILE_DIM))


def num_tiles(shape: Sequence[int]) -> int:
    """Tiles (= interleaved pages) of a tensor of logical `shape`."""
    return math.prod(padded_shape(shape)) // TILE_VALUES


def _check_float_tensor(x: object, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_TORCH_DTYPES:
        raise TypeError(
            f"{name}: expected a floating tensor (float32, bfloat16, float16, float64), got {x.dtype}"
        )
    if x.dim() < 2:
        raise ValueError(f"{name}: expected rank >= 2 ([..., H, W]), got shape {tuple(x.shape)}")
    return x


def tilize(x: torch.Tensor) -> torch.Tensor:
    """Rearrange `x: [..., H, W]` into tiles `[..., ntiles, 1024]` (any element dtype).

    H and W are padded with zeros up to multiples of 32 (documented padding, not an error).
    Tiles come in row-major tile order (ntiles = ceil(H/32) * ceil(W/32)); inside a tile the
    1024 values are in tile order (face 0, 1, 2, 3; each face row-major).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 2:
        raise ValueError(f"x: expected rank >= 2 ([..., H, W]), got shape {tuple(x.shape)}")
    *batch, h, w = x.shape
    hp, wp = _round_up(h, TILE_DIM), _round_up(w, TILE_DIM)
    if (hp, wp) != (h, w):
        x = torch.nn.functional.pad(x, (0, wp - w, 0, hp - h)) if x.numel() else x.new_zeros(*batch, hp, wp)
    ht, wt = hp // TILE_DIM, wp // TILE_DIM
    nb = len(batch)
    t = x.reshape(*batch, ht, 2, FACE_DIM, wt, 2, FACE_DIM)
    # [..., ht, fr, r, wt, fc, c] -> [..., ht, wt, fr, fc, r, c]
    perm = list(range(nb)) + [nb + i for i in (0, 3, 1, 4, 2, 5)]
    return t.permute(perm).reshape(*batch, ht * wt, TILE_VALUES)


def untilize(tiles: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Inverse of `tilize`: `tiles: [..., ntiles, 1024]` -> tensor of logical `shape` `[..., H, W]`.

    `tiles.shape[:-2]` must equal `shape[:-2]` and ntiles must be ceil(H/32) * ceil(W/32); the
    padding rows/columns are dropped.
    """
    dims = _check_shape(shape)
    if not isinstance(tiles, torch.Tensor):
        raise TypeError(f"tiles: expected a torch.Tensor, got {type(tiles).__name__}")
    *batch, h, w = dims
    hp, wp = _round_up(h, TILE_DIM), _round_up(w, TILE_DIM)
    ht, wt = hp // TILE_DIM, wp // TILE_DIM
    expected = (*batch, ht * wt, TILE_VALUES)
    if tuple(tiles.shape) != expected:
        raise ValueError(f"tiles: expected shape {expected} for logical shape {dims}, got {tuple(tiles.shape)}")
    nb = len(batch)
    t = tiles.reshape(*batch, ht, wt, 2, 2, FACE_DIM, FACE_DIM)
    # [..., ht, wt, fr, fc, r, c] -> [..., ht, fr, r, wt, fc, c]
    perm = list(range(nb)) + [nb + i for i in (0, 2, 4, 1, 3, 5)]
    out = t.permute(perm).reshape(*batch, hp, wp)
    return out[..., :h, :w].contiguous()


# ----------------------------------------------------------------------------------------------
# Per-tile encoders/decoders on numpy arrays in tile order.


def _bfp_codes(bits: np.ndarray, mag_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Block-float encode float32 bit patterns `bits: uint32[N, 64, 16]` (groups of 16).

    Returns (shared exponents uint8[N, 64], codes uint8[N, 64, 16]) following the module docstring.
    """
    exp = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32)
    shared = exp.max(axis=-1)
    shift = np.minimum(shared[..., None] - exp, 31).astype(np.uint32)
    sig = (bits & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
    sig >>= shift
    drop = np.uint32(24 - mag_bits)
    rest = sig & np.uint32((1 << (24 - mag_bits)) - 1)
    mag = sig >> drop
    tie = np.uint32(1 << (23 - mag_bits))
    round_up = (rest > tie) | ((rest == tie) & ((mag & np.uint32(1)) == 1))
    mag += round_up.astype(np.uint32)
    np.minimum(mag, np.uint32((1 << mag_bits) - 1), out=mag)
    mag[exp == 0] = 0  # zeros and denormals
    sign = (bits >> np.uint32(31)) & (mag != 0)
    codes = (sign << np.uint32(mag_bits)) | mag
    return shared.astype(np.uint8), codes.astype(np.uint8)


def _bfp_values(shared: np.ndarray, codes: np.ndarray, mag_bits: int) -> np.ndarray:
    """Decode block-float codes `codes: uint8[N, 64, 16]` with `shared: uint8[N, 64]` to uint32 bits."""
    codes = codes.astype(np.int64)
    sign = (codes >> mag_bits) & 1
    mag = codes & ((1 << mag_bits) - 1)
    # k = left shifts that bring the top set bit of mag (1 <= mag < 2^mag_bits) to bit mag_bits-1.
    top = np.zeros_like(mag)
    for b in range(1, mag_bits):
        top = np.where(mag >= (1 << b), b, top)
    k = (mag_bits - 1) - top
    # Drop the implicit one: the mag_bits-1 fraction bits end up in bits mag_bits-1 .. 1.
    frac = (mag << (k + 1)) & ((1 << mag_bits) - 1)
    e = shared.astype(np.int64)[..., None] - k
    out = (sign << 31) | (np.maximum(e, 0) << 23) | (frac << (23 - mag_bits))
    out = np.where(mag == 0, sign << 31, out)
    out = np.where((mag != 0) & (e < 0), 0, out)
    return out.astype(np.uint32)


@functools.lru_cache(maxsize=None)
def _bfp_decode_table(mag_bits: int) -> np.ndarray:
    """uint32[256, 2^(mag_bits+1)]: float32 bits of every (shared exponent, code) pair."""
    ncodes = 1 << (mag_bits + 1)
    shared = np.arange(256, dtype=np.uint8)
    codes = np.broadcast_to(np.arange(ncodes, dtype=np.uint8)[None, :], (256, ncodes))
    table = _bfp_values(shared, codes, mag_bits)
    table.setflags(write=False)
    return table


def _bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """Round float32 bit patterns (uint32) to bfloat16 bit patterns (uint16): nearest, ties to even;
    every NaN becomes the quiet NaN 0x7FC0 (as ttnn; torch's CPU cast gives 0xFFFF instead)."""
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded[is_nan] = 0x7FC0
    return rounded


def encode_tiles(tiles: np.ndarray, dtype: DTypeLike) -> np.ndarray:
    """Encode `tiles: float32[N, 1024]` (tile order) into byte images `uint8[N, tile_size(dtype)]`."""
    dt = as_data_type(dtype)
    tiles = np.ascontiguousarray(tiles, dtype=np.float32)
    if tiles.ndim != 2 or tiles.shape[1] != TILE_VALUES:
        raise ValueError(f"tiles: expected a float32 array [N, {TILE_VALUES}], got shape {tiles.shape}")
    n = tiles.shape[0]
    if dt is DataType.float32:
        return tiles.view(np.uint8).reshape(n, tile_size(dt)).copy()
    if dt is DataType.bfloat16:
        return _bfloat16_bits(tiles.view(np.uint32)).view(np.uint8).reshape(n, tile_size(dt))
    mag_bits = _BFP_MAGNITUDE_BITS[dt]
    out = np.empty((n, tile_size(dt)), dtype=np.uint8)
    for start in range(0, n, _ENCODE_CHUNK_TILES):  # bounded temporaries, cache friendly
        stop = min(n, start + _ENCODE_CHUNK_TILES)
        bits = tiles[start:stop].view(np.uint32).reshape(stop - start, BFP_EXPONENT_BYTES, BFP_GROUP)
        shared, codes = _bfp_codes(bits, mag_bits)
        codes = codes.reshape(stop - start, TILE_VALUES)
        if dt is DataType.bfloat4_b:
            codes = codes[:, 0::2] | (codes[:, 1::2] << np.uint8(4))
        out[start:stop, :BFP_EXPONENT_BYTES] = shared
        out[start:stop, BFP_EXPONENT_BYTES:] = codes
    return out


def decode_tiles(raw: np.ndarray, dtype: DTypeLike) -> np.ndarray:
    """Decode byte images `raw: uint8[N, tile_size(dtype)]` into `float32[N, 1024]` in tile order."""
    dt = as_data_type(dtype)
    size = tile_size(dt)
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if raw.ndim != 2 or raw.shape[1] != size:
        raise ValueError(f"raw: expected a uint8 array [N, {size}] for {dt.value}, got shape {raw.shape}")
    n = raw.shape[0]
    if dt is DataType.float32:
        return raw.view(np.float32).reshape(n, TILE_VALUES).copy()
    if dt is DataType.bfloat16:
        hi = raw.view(np.uint16).astype(np.uint32) << np.uint32(16)
        return hi.view(np.float32).reshape(n, TILE_VALUES)
    mag_bits = _BFP_MAGNITUDE_BITS[dt]
    shared = raw[:, :BFP_EXPONENT_BYTES]
    body = raw[:, BFP_EXPONENT_BYTES:]
    if dt is DataType.bfloat4_b:
        codes = np.empty((n, TILE_VALUES), dtype=np.uint8)
        codes[:, 0::2] = body & np.uint8(0x0F)
        codes[:, 1::2] = body >> np.uint8(4)
    else:
        codes = body
    table = _bfp_decode_table(mag_bits)
    index = (shared.astype(np.intp)[:, :, None] << (mag_bits + 1)) | codes.reshape(n, BFP_EXPONENT_BYTES, BFP_GROUP)
    return table.reshape(-1)[index].reshape(n, TILE_VALUES).view(np.float32)


# ----------------------------------------------------------------------------------------------
# Whole tensors.


def pack_tiles(x: torch.Tensor, dtype: DTypeLike) -> bytes:
    """Byte image of `x: [..., H, W]` (a floating torch tensor) as tiles of `dtype`.

    H and W are zero-padded to multiples of 32; the result holds num_tiles(x.shape) tiles of
    tile_size(dtype) bytes in interleaved page order. float64/float16/bfloat16 inputs are first
    converted to float32 (exact except float64, which torch rounds to nearest).
    """
    dt = as_data_type(dtype)
    _check_float_tensor(x, "x")
    t = tilize(x.detach().to(device="cpu", dtype=torch.float32))
    flat = t.reshape(-1, TILE_VALUES).contiguous().numpy()
    return encode_tiles(flat, dt).tobytes()


def unpack_tiles(data: Union[bytes, bytearray, memoryview], dtype: DTypeLike, shape: Sequence[int]) -> torch.Tensor:
    """Values of a tile byte image as a `torch.float32` tensor of logical `shape`.

    `data` must hold exactly num_tiles(shape) * tile_size(dtype) bytes; padding is dropped.
    """
    dt = as_data_type(dtype)
    dims = _check_shape(shape)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data: expected bytes, got {type(data).__name__}")
    ntiles = num_tiles(dims)
    size = tile_size(dt)
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size != ntiles * size:
        raise ValueError(
            f"data: expected {ntiles * size} bytes ({ntiles} {dt.value} tiles of {size} bytes for shape {dims}), "
            f"got {raw.size}"
        )
    values = decode_tiles(raw.reshape(ntiles, size), dt)
    pshape = padded_shape(dims)
    tiles = torch.from_numpy(values).reshape(*dims[:-2], (pshape[-2] // TILE_DIM) * (pshape[-1] // TILE_DIM), TILE_VALUES)
    return untilize(tiles, dims)


def quantize(x: torch.Tensor, dtype: DTypeLike) -> torch.Tensor:
    """`unpack_tiles(pack_tiles(x, dtype), dtype, x.shape)`: the float32 values `x` takes in `dtype`."""
    return unpack_tiles(pack_tiles(x, dtype), dtype, tuple(x.shape))
