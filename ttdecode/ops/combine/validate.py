"""The combine's argument checks (partials and their LSEs, plan sizes)."""

from __future__ import annotations

import torch

from ttdecode.core.formats import DataType

#: Formats the kernels take for the partial outputs and give the merged output.
O_FORMATS = (DataType.bfloat16, DataType.float32)
#: The most negative finite bf16 (0xFF7F): the floor of the kernel's running max (kernels/combine/cbs.hpp).
NEG_BIG = -(2.0 - 2.0 ** -7) * 2.0 ** 127


class CombineError(ValueError):
    """Inputs or a plan the combine program cannot take; the message names the argument."""


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CombineError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


def _check_partials(outs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``outs [n, G, H, Dv]`` / ``lses [n, G, H]`` checked (floating point, matching shapes, no NaN or
    +inf LSE); 5-D / 4-D ``combine_partials`` shapes ``[n, 1, B, NH, ...]`` are taken too."""
    for arg, t in (("outs", outs), ("lses", lses)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise CombineError(f"{arg}: expected a floating-point torch tensor, got {got}")
    if outs.dim() == 5 and outs.shape[1] == 1:
        outs = outs[:, 0]
    if lses.dim() == 4 and lses.shape[1] == 1:
        lses = lses[:, 0]
    if outs.dim() != 4 or 0 in outs.shape:
        raise CombineError(f"outs: expected shape [n, G, H, Dv] (or [n, 1, B, NH, Dv]), got {list(outs.shape)}")
    if list(lses.shape) != list(outs.shape[:3]):
        raise CombineError(f"lses: expected shape {list(outs.shape[:3])} (outs without Dv), got {list(lses.shape)}")
    bad = torch.isnan(lses) | torch.isposinf(lses)
    if bool(bad.any()):
        at = [int(i) for i in bad.nonzero()[0]]
        raise CombineError(f"lses{at}: expected a finite LSE or -inf (no key), got {float(lses[tuple(at)])}")
    # The kernel's running max starts at the most negative bf16 (-BIG): a finite LSE below it would weigh 0.
    low = torch.isfinite(lses) & (lses.double() < NEG_BIG)
    if bool(low.any()):
        at = [int(i) for i in low.nonzero()[0]]
        raise CombineError(f"lses{at}: expected a finite LSE >= {NEG_BIG:.6g} (the kernel's floor) or -inf, "
                           f"got {float(lses[tuple(at)])}")
    return outs, lses
