"""Argument checks shared by every operator: the uniform error and the description of a tensor of any
kind (torch, ttdecode TileTensor, ttnn).

Every error is a ``TypeError`` (wrong kind of thing) or ``ValueError`` (wrong value) whose message names
the argument, what was expected and what came: ``"ttdecode: argument 'k': expected ..., got ..."``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import operator

import torch

from ttdecode.core.tensor import TileTensor


_OWNER = "ttdecode"
_TORCH_FLOATS = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16"}


def fail(arg: str, expected: str, got: object, exc: type = ValueError) -> Exception:
    """The uniform error: ``ttdecode: argument '<arg>': expected <expected>, got <got>``."""
    return exc(f"{_OWNER}: argument '{arg}': expected {expected}, got {got}")


# ---- tensors of any kind --------------------------------------------------------------------


@dataclass(frozen=True)
class TensorMeta:
    """What validation knows of one tensor argument.

    ``kind``: "torch" | "tile" | "ttnn"; ``shape``: logical shape; ``dtype``: the format it
    arrived in ("float32", "float64", "bfloat16", "bfloat8_b", "bfloat4_b", "int32", or another name
    such as "torch.float16"); ``obj``: the tensor itself.
    """

    arg: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    obj: Any

    @property
    def storage_dtype(self) -> str:
        """The format the kernels receive: torch floats are stored as bfloat16."""
        if self.kind == "torch" and self.dtype in ("float32", "float64", "bfloat16"):
            return "bfloat16"
        return self.dtype


def _is_ttnn_tensor(x: object) -> bool:
    t = type(x)
    return t.__name__ == "Tensor" and t.__module__.startswith("ttnn")


def _is_tile_tensor(x: object) -> bool:
    return isinstance(x, TileTensor)


def describe(arg: str, x: object) -> TensorMeta:
    """Shape and format of a torch tensor, TileTensor or ttnn tensor; anything else: TypeError."""
    if isinstance(x, torch.Tensor):
        dtype = _TORCH_FLOATS.get(x.dtype, "int32" if x.dtype == torch.int32 else str(x.dtype))
        return TensorMeta(arg, "torch", tuple(int(d) for d in x.shape), dtype, x)
    if _is_tile_tensor(x):
        return TensorMeta(arg, "tile", tuple(int(d) for d in x.shape), x.dtype.value, x)  # type: ignore[attr-defined]
    if _is_ttnn_tensor(x):
        name = getattr(x.dtype, "name", str(x.dtype)).lower()  # type: ignore[attr-defined]
        return TensorMeta(arg, "ttnn", tuple(int(d) for d in x.shape), name, x)  # type: ignore[attr-defined]
    raise fail(arg, "a torch.Tensor, ttdecode TileTensor or ttnn.Tensor", type(x).__name__, TypeError)


def int_values(meta: TensorMeta) -> torch.Tensor:
    """The values of an integer tensor (torch or ttnn) as a CPU int64 torch tensor."""
    if meta.kind == "torch":
        return meta.obj.detach().to("cpu", torch.int64)
    import ttnn  # a ttnn tensor came in, so ttnn is imported already

    return ttnn.to_torch(meta.obj).to(torch.int64)


# ---- scalar rules -----------------------------------------------------------------------------


def check_bool(arg: str, value: object) -> bool:
    """``value`` is a bool (not an int or None)."""
    if not isinstance(value, bool):
        raise fail(arg, "a bool", repr(value), TypeError)
    return value


def check_int(arg: str, value: object) -> int:
    """``value`` is an integer (bools refused)."""
    if isinstance(value, bool):
        raise fail(arg, "an integer", repr(value), TypeError)
    try:
        return operator.index(value)
    except TypeError:
        raise fail(arg, "an integer", repr(value), TypeError) from None


def check_choice(arg: str, value: object, choices: Sequence[str]) -> str:
    """``value`` is one of the strings ``choices`` (ValueError for another string, TypeError otherwise)."""
    if not isinstance(value, str) or value not in choices:
        raise fail(arg, f"one of {list(choices)}", repr(value), ValueError if isinstance(value, str) else TypeError)
    return value


def check_grid(arg: str, grid: object) -> tuple[int, int]:
    """``grid`` is a tuple (x, y) of ints >= 1 (bools refused)."""
    if (not isinstance(grid, tuple) or len(grid) != 2
            or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in grid)):
        raise fail(arg, "a tuple (x, y) of ints >= 1", repr(grid))
    return grid
