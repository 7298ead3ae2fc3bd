"""Accuracy metrics and the project's pass thresholds (the one place they are set).

Both metrics compare a result against a float64 reference computed on the *same quantized*
inputs, so they measure the kernels' own arithmetic, not the input formats.

- ``rel_l2(a, ref) = ||a - ref||_2 / ||ref||_2``: sensitive to a uniform scale error that PCC
  cannot see (PCC is invariant to scaling, which is how a 2.6% error can pass PCC 0.999);
- ``pcc(a, ref)``: Pearson correlation, the metric tt-metal's tests use.

The LSE (natural log of the softmax denominator) is checked by its absolute error instead: an
error d in the LSE scales the denominator it stands for by e^d, so ``max_lse_abs`` = 1e-2 is the
same 1% budget as the output's; PCC over a handful of near-equal LSE values says little. An LSE of
-inf (a skipped user) must be -inf exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Thresholds", "THRESHOLDS", "TT_METAL_PAGED_MIN_PCC", "rel_l2", "pcc", "check_close", "check_lse"]


@dataclass(frozen=True)
class Thresholds:
    """An output passes when rel_l2 <= max_rel_l2 and pcc >= min_pcc; an LSE when every finite
    entry is within max_lse_abs of the reference."""

    max_rel_l2: float
    min_pcc: float
    max_lse_abs: float


#: Thresholds for bf16, bfloat8_b and bfloat4_b K/V (against the dequantized K/V).
THRESHOLDS = Thresholds(max_rel_l2=1e-2, min_pcc=0.9999, max_lse_abs=1e-2)

#: tt-metal's own bar for its paged decode tests (test_sdpa_decode.py, PCC vs torch in fp32): not this
#: package's bar. A replayed tt-metal case is reported against both (perf/accuracy_table.py).
TT_METAL_PAGED_MIN_PCC = 0.98


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to("cpu", torch.float64).reshape(-1)


def rel_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    """||a - ref|| / ||ref|| in float64; 0 when both are all zero, inf when only ref is."""
    x, r = _flat(a), _flat(ref)
    if x.shape != r.shape:
        raise ValueError(f"rel_l2: shapes differ: {tuple(a.shape)} vs {tuple(ref.shape)}")
    num = torch.linalg.vector_norm(x - r).item()
    den = torch.linalg.vector_norm(r).item()
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def pcc(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Pearson correlation in float64; 1.0 when both are identical constants."""
    x, r = _flat(a), _flat(ref)
    if x.shape != r.shape:
        raise ValueError(f"pcc: shapes differ: {tuple(a.shape)} vs {tuple(ref.shape)}")
    if torch.equal(x, r):
        return 1.0
    xc, rc = x - x.mean(), r - r.mean()
    den = (torch.linalg.vector_norm(xc) * torch.linalg.vector_norm(rc)).item()
    if den == 0.0:
        return 0.0
    return float((xc @ rc).item() / den)


def check_close(a: torch.Tensor, ref: torch.Tensor, what: str, thresholds: Thresholds = THRESHOLDS) -> tuple[float, float]:
    """Assert both metrics pass; returns (rel_l2, pcc). The message names `what` and both figures."""
    if not torch.isfinite(_flat(a)).all():
        bad = (~torch.isfinite(_flat(a))).sum().item()
        raise AssertionError(f"{what}: {bad} non-finite values in the result")
    e, c = rel_l2(a, ref), pcc(a, ref)
    if e > thresholds.max_rel_l2 or c < thresholds.min_pcc:
        raise AssertionError(
            f"{what}: rel_l2 {e:.3e} (max {thresholds.max_rel_l2:.0e}), pcc {c:.6f} (min {thresholds.min_pcc})"
        )
    return e, c


def check_lse(a: torch.Tensor, ref: torch.Tensor, what: str, thresholds: Thresholds = THRESHOLDS) -> float:
    """Assert -inf exactly where the reference has it and |a - ref| <= max_lse_abs elsewhere;
    returns the largest absolute error."""
    x, r = _flat(a), _flat(ref)
    if x.shape != r.shape:
        raise ValueError(f"check_lse: shapes differ: {tuple(a.shape)} vs {tuple(ref.shape)}")
    skipped = torch.isneginf(r)
    if not torch.equal(torch.isneginf(x), skipped):
        raise AssertionError(f"{what}: -inf at {torch.isneginf(x).nonzero().flatten().tolist()[:8]}, "
                             f"the reference at {skipped.nonzero().flatten().tolist()[:8]}")
    live_x, live_r = x[~skipped], r[~skipped]
    if not torch.isfinite(live_x).all():
        raise AssertionError(f"{what}: non-finite LSE where the reference is finite")
    err = (live_x - live_r).abs().max().item() if live_x.numel() else 0.0
    if err > thresholds.max_lse_abs:
        raise AssertionError(f"{what}: LSE off by {err:.3e} (max {thresholds.max_lse_abs:.0e})")
    return err
