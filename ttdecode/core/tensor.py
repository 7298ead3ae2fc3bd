"""Host tile tensors: the byte image a DRAM-interleaved TILE-layout tensor holds on the device.

A `TileTensor` of logical shape `[..., H, W]` holds its values as tiles (see `ttdecode.core.formats`)
of H and W padded with zeros to multiples of 32, one tile per page, pages in interleaved page
order (batch dims outermost, then tile rows, then tile columns).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from ttdecode.core import formats
from ttdecode.core.formats import DataType, DTypeLike, as_data_type

#: ttnn DataType names (`ttnn.bfloat8_b.name` == "BFLOAT8_B") -> ttdecode formats.
_TTNN_DTYPES: dict[str, DataType] = {
    "FLOAT32": DataType.float32,
    "BFLOAT16": DataType.bfloat16,
    "BFLOAT8_B": DataType.bfloat8_b,
    "BFLOAT4_B": DataType.bfloat4_b,
}


@dataclass(frozen=True)
class TileTensor:
    """A tensor stored as tiles on the host.

    Fields: `shape` (logical, rank >= 2), `dtype` (tile format), `data` (the tile byte image,
    `num_pages * page_size` bytes in interleaved page order). Derived: `padded_shape` (last two
    dims rounded up to 32), `num_pages` (tiles), `page_size` (bytes per tile).
    """

    shape: tuple[int, ...]
    dtype: DataType
    data: bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", formats._check_shape(self.shape, "shape"))
        object.__setattr__(self, "dtype", as_data_type(self.dtype, "dtype"))
        if not isinstance(self.data, bytes):
            if isinstance(self.data, (bytearray, memoryview)):
                object.__setattr__(self, "data", bytes(self.data))
            else:
                raise TypeError(f"data: expected bytes, got {type(self.data).__name__}")
        expected = self.num_pages * self.page_size
        if len(self.data) != expected:
            raise ValueError(
                f"data: expected {expected} bytes ({self.num_pages} pages of {self.page_size} bytes for "
                f"{self.dtype.value} shape {self.shape}), got {len(self.data)}"
            )

    @property
    def padded_shape(self) -> tuple[int, ...]:
        """`shape` with H and W rounded up to multiples of 32."""
        return formats.padded_shape(self.shape)

    @property
    def num_pages(self) -> int:
        """Number of tiles (= DRAM pages)."""
        return math.prod(self.padded_shape) // formats.TILE_VALUES

    @property
    def page_size(self) -> int:
        """Bytes per tile (= DRAM page)."""
        return formats.tile_size(self.dtype)

    def page(self, index: int) -> bytes:
        """The byte image of tile `index` (0 <= index < num_pages)."""
        if not isinstance(index, int) or not 0 <= index < self.num_pages:
            raise IndexError(f"index: expected an int in [0, {self.num_pages}), got {index!r}")
        return self.data[index * self.page_size:(index + 1) * self.page_size]

    def __repr__(self) -> str:
        return f"TileTensor(shape={self.shape}, dtype={self.dtype.value}, pages={self.num_pages}x{self.page_size}B)"


def from_torch(x: torch.Tensor, dtype: DTypeLike = DataType.bfloat16) -> TileTensor:
    """Pack `x: [..., H, W]` (float32, bfloat16, float16 or float64 torch tensor) into a TileTensor.

    Values are rounded to `dtype` exactly as ttnn 0.81.1's `from_torch(..., layout=TILE_LAYOUT)`
    does; H and W are zero-padded to multiples of 32.
    """
    dt = as_data_type(dtype)
    formats._check_float_tensor(x, "x")
    return TileTensor(tuple(int(d) for d in x.shape), dt, formats.pack_tiles(x, dt))


def to_torch(t: TileTensor) -> torch.Tensor:
    """Values of `t` in its logical shape, with ttnn's `to_torch` dtypes: torch.bfloat16 for
    bfloat16, torch.float32 for float32, bfloat8_b and bfloat4_b."""
    if not isinstance(t, TileTensor):
        raise TypeError(f"t: expected a ttdecode TileTensor, got {type(t).__name__}")
    values = formats.unpack_tiles(t.data, t.dtype, t.shape)
    if t.dtype is DataType.bfloat16:
        return values.to(torch.bfloat16)  # exact: the values are bfloat16 already
    return values


def _is_ttnn_tensor(x: object) -> bool:
    cls = type(x)
    return cls.__name__ == "Tensor" and cls.__module__.startswith("ttnn")


def ttnn_data_type(x: Any) -> DataType:
    """The ttdecode format of a ttnn tensor `x` (TypeError for formats ttdecode does not store)."""
    name = getattr(x.dtype, "name", str(x.dtype)).upper()
    if name not in _TTNN_DTYPES:
        supported = ", ".join(_TTNN_DTYPES)
        raise TypeError(f"x: expected a ttnn tensor of dtype {supported}, got {name}")
    return _TTNN_DTYPES[name]


def _ttnn_tile_bytes(x: Any, dt: DataType, shape: tuple[int, ...]) -> Optional[bytes]:
    """The raw tile image of a host TILE-layout ttnn tensor, or None if it is stored otherwise.

    ttnn 0.81.1 exposes a host tensor's bytes through `host_buffer().get_shard(coord)` and DLPack.
    Only single-shard host tensors with 32x32 tiles and no extra padding qualify.
    """
    import ttnn

    try:
        if x.storage_type() != ttnn.StorageType.HOST or x.layout != ttnn.TILE_LAYOUT:
            return None
        tile = x.tile.tile_shape if hasattr(x, "tile") else None
        if tile is not None and tuple(tile) != (formats.TILE_DIM, formats.TILE_DIM):
            return None
        if tuple(int(d) for d in x.padded_shape) != formats.padded_shape(shape):
            return None
        host = x.host_buffer()
        if tuple(host.shape()) != (1, 1):
            return None
        raw = np.from_dlpack(host.get_shard(ttnn.MeshCoordinate(0, 0)))
    except (AttributeError, TypeError, RuntimeError, BufferError):
        return None
    expected = formats.num_tiles(shape) * formats.tile_size(dt)
    if raw.dtype != np.uint8 or raw.size != expected:
        return None
    return raw.tobytes()


def from_ttnn(x: Any) -> TileTensor:
    """A TileTensor holding exactly the values of the ttnn tensor `x` in its own format.

    A host TILE-layout tensor is copied byte for byte. Otherwise (row-major, device, sharded) the
    values come through `ttnn.to_torch` and are re-packed in the same format, which is exact
    because they are representable in it, except that bfloat8_b/bfloat4_b values below 2^-126
    (flushed by the packer) and -0.0 become +0.0; a device can produce those, the host packer cannot.
    """
    if not _is_ttnn_tensor(x):
        raise TypeError(f"x: expected a ttnn.Tensor, got {type(x).__name__}")
    import ttnn

    dt = ttnn_data_type(x)
    shape = formats._check_shape(tuple(int(d) for d in x.shape), "x.shape")
    raw = _ttnn_tile_bytes(x, dt, shape)
    if raw is not None:
        return TileTensor(shape, dt, raw)
    return from_torch(ttnn.to_torch(x), dt)


def as_tile_tensor(x: Any, default_dtype: DTypeLike = DataType.bfloat16) -> TileTensor:
    """`x` as a TileTensor: a TileTensor as it is; a ttnn tensor in its own format (`from_ttnn`);
    a torch float tensor packed in `default_dtype` (`from_torch`)."""
    if isinstance(x, TileTensor):
        return x
    if isinstance(x, torch.Tensor):
        return from_torch(x, default_dtype)
    if _is_ttnn_tensor(x):
        return from_ttnn(x)
    raise TypeError(f"x: expected a TileTensor, torch.Tensor or ttnn.Tensor, got {type(x).__name__}")


def dequantize(x: Any, default_dtype: Optional[DTypeLike] = DataType.bfloat16) -> torch.Tensor:
    """The values the kernels read from `x`, as a torch.float64 tensor of `x`'s logical shape.

    TileTensor / ttnn tensor: their stored values. torch float tensor: its values after storage in
    `default_dtype` (bfloat16 by default, the format torch inputs are given to the kernels), or
    as they are with `default_dtype=None`.
    """
    if isinstance(x, torch.Tensor) and default_dtype is None:
        formats._check_float_tensor(x, "x")
        return x.detach().to(device="cpu", dtype=torch.float64)
    dt = DataType.bfloat16 if default_dtype is None else default_dtype
    t = as_tile_tensor(x, dt)
    return formats.unpack_tiles(t.data, t.dtype, t.shape).to(torch.float64)
