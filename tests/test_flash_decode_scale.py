"""The softmax scale, any sign and magnitude: the kernels against the float64 reference.

The kernels multiply the fp32 scores by `scale` on the SFPU before the row max, so the running max
is in logit units whatever the sign (a negative scale used to turn the max of the unscaled scores
into the wrong extreme: exp overflowed, and masked keys at -inf became +inf) and whatever the
magnitude (a max taken on TF32 scores was off by up to |logit| * 2^-10, which overflowed exp at
scale 1e4). Zero, infinite and NaN scales are refused by validation, naming `scale`.
"""

from __future__ import annotations

import pytest
import torch

import numpy as np

from ttdecode.accuracy import check_close, check_lse
from ttdecode.api import scaled_dot_product_attention_decode
from ttdecode.ops.flash_decode.program_factory import run_flash_decode
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import PlanError, make_plan, power_of_two_scale
from ttdecode.core.program_description import ComputeSettings
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import from_torch, to_torch

BF16, BFP8 = DataType.bfloat16, DataType.bfloat8_b
POS = [-1, 0, 37, 200, 255]  # a skipped user, one key, a partial tile, several pieces, the last key


def run(scale: float, *, sink: torch.Tensor | None = None, seed: int = 0):
    b, nh, nkv, s, d = len(POS), 8, 2, 256, 64
    gen = torch.Generator().manual_seed(seed)
    q = from_torch(torch.randn(1, b, nh, d, generator=gen), BF16)
    k = from_torch(torch.randn(b, nkv, s, d, generator=gen), BFP8)
    v = from_torch(torch.randn(b, nkv, s, d, generator=gen), BFP8)
    plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=BFP8,
                     cur_pos=POS, grid=(8, 8), max_cores_per_head_batch=4, k_chunk_size=32, return_lse=True,
                     attention_sink=sink is not None)
    out, lse, _ = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=scale, compute=ComputeSettings(),
                                   attention_sink=sink)
    ref, ref_lse = sdpa_decode_reference(to_torch(q).double(), to_torch(k).double(), to_torch(v).double(),
                                         cur_pos=POS, scale=scale, return_lse=True,
                                         attention_sink=None if sink is None else sink.to(torch.bfloat16).double())
    return out, lse, ref, ref_lse


def check_lse_in_float32(lse: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """The LSE bar, where float32 (the LSE's output format) can hold it: beyond |LSE| = 2^17 one
    float32 ulp alone exceeds 1e-2, so there the LSE must be within 2 ulp of the reference."""
    if float(ref[torch.isfinite(ref)].abs().max()) < 2.0 ** 17:
        check_lse(lse, ref, what)
        return
    live = torch.isfinite(ref)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref)), what
    ulp = torch.from_numpy(np.spacing(ref[live].abs().to(torch.float32).numpy())).double()
    err = (lse[live].double() - ref[live]).abs()
    assert bool((err <= 2 * ulp).all()), f"{what}: LSE off by {float(err.max()):.3e}, more than 2 float32 ulp"


@pytest.mark.parametrize("scale", [1e-4, -1e-4, 0.125, -0.125, -1.0, 30.0, -30.0, 1e4, -1e4])
def test_every_sign_and_magnitude_of_scale_matches_the_reference(scale: float) -> None:
    out, lse, ref, ref_lse = run(scale)
    for u in range(1, len(POS)):
        check_close(out[:, u], ref[:, u], f"scale {scale}: user {u} output")
        check_lse_in_float32(lse[:, u], ref_lse[:, u], f"scale {scale}: user {u} LSE")
    assert torch.all(out[:, 0] == 0) and torch.all(torch.isneginf(lse[:, 0]))


@pytest.mark.parametrize("scale", [-0.125, 1e4])
def test_attention_sink_is_scaled_like_the_scores(scale: float) -> None:
    sink = 3 * torch.randn(8, generator=torch.Generator().manual_seed(3))
    out, lse, ref, ref_lse = run(scale, sink=sink, seed=1)
    for u in range(1, len(POS)):
        check_close(out[:, u], ref[:, u], f"scale {scale} with sink: user {u} output")
        check_lse_in_float32(lse[:, u], ref_lse[:, u], f"scale {scale} with sink: user {u} LSE")


@pytest.mark.parametrize("bad", [0.0, float("nan"), float("inf"), -float("inf")])
def test_zero_nan_and_infinite_scales_are_refused_naming_scale(bad: float) -> None:
    q = torch.randn(1, 1, 8, 64)
    k = torch.randn(1, 1, 64, 64)
    with pytest.raises(ValueError, match="argument 'scale': expected a finite non-zero number"):
        scaled_dot_product_attention_decode(q, k, k, cur_pos=[10], scale=bad, backend="host")



# ---- Q pre-scaled by a power-of-two scale -------------------------------------------------------------


def _prescale_pair(scale: float, *, nh: int = 8, nkv: int = 1, d: int = 64, plan_kw=None, compute=None, seed: int = 3):
    """The same inputs through a plan that scales every score and one that scales Q once."""
    b, s = 3, 1024
    gen = torch.Generator().manual_seed(seed)
    q = from_torch(torch.randn(1, b, nh, d, generator=gen) * 4, BF16)
    k = from_torch(torch.randn(b, nkv, s, d, generator=gen), BFP8)
    v = None if (plan_kw or {}).get("mla") else from_torch(torch.randn(b, nkv, s, d, generator=gen), BFP8)
    runs = []
    for prescale in (False, True):
        plan = make_plan(batch=b, num_q_heads=nh, num_kv_heads=nkv, seq_len=s, head_dim=d, kv_dtype=BFP8,
                         cur_pos=[1023, 700, 40], max_cores_per_head_batch=4, return_lse=True, prescale_q=prescale,
                         min_chunk_tiles=1, **(plan_kw or {}))
        out, lse, _ = run_flash_decode(plan, q=q, k=k, v=v, cur_pos_source=None, scale=scale,
                                       compute=compute or ComputeSettings())
        runs.append((plan, out, lse))
    return runs


@pytest.mark.parametrize("scale, d, plan_kw, compute", [
    (0.125, 64, {}, None),                                # 1/sqrt(64)
    (-0.25, 128, {}, None),                               # either sign
    (1 / 16, 256, {}, None),                              # 1/sqrt(256)
    (0.125, 64, {"sliding_window_size": 300}, None),      # masks added after the scale
    (0.125, 64, {"fp32_dest_acc_en": False}, ComputeSettings(fp32_dest_acc_en=False)),  # bf16 DST
    (8.0, 64, {"mla": True, "head_dim_v": 32}, None),
])
def test_a_power_of_two_scale_applied_to_q_once_gives_the_bits_of_scaling_every_score(scale, d, plan_kw, compute) -> None:
    """Q x 2^k is exact in bf16 (only the exponents move) and 2^k commutes with the matmul's products and
    fp32 (or bf16) sums, so the scores, and everything after them, are the same bits."""
    (plain, out0, lse0), (pre, out1, lse1) = _prescale_pair(scale, d=d, plan_kw=plan_kw, compute=compute)
    assert not plain.prescale_q and pre.prescale_q
    assert "q_scaled" in {cb.name for cb in pre.circular_buffers} - {cb.name for cb in plain.circular_buffers}
    assert torch.equal(out0.view(torch.int16), out1.view(torch.int16))
    assert torch.equal(lse0.view(torch.int32), lse1.view(torch.int32))


@pytest.mark.parametrize("scale", [0.1, 1 / np.sqrt(128), 3.0, 2.0 ** -127])
def test_a_prescaled_plan_refuses_a_scale_that_is_not_a_power_of_two(scale: float) -> None:
    plan = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=256, head_dim=64, cur_pos=[255], prescale_q=True)
    t = from_torch(torch.zeros(1, 1, 256, 64), BFP8)
    with pytest.raises(ValueError, match=r"scale: expected \+-2\^k for a plan made with prescale_q"):
        run_flash_decode(plan, q=from_torch(torch.zeros(1, 1, 8, 64), BF16), k=t, v=t, cur_pos_source=None,
                         scale=float(scale), compute=ComputeSettings())


def test_power_of_two_scale_names_the_scales_q_may_take() -> None:
    assert all(power_of_two_scale(x) for x in (0.125, -0.125, 1.0, 2.0 ** -126, 2.0 ** 127, 1 / 16))
    assert not any(power_of_two_scale(x) for x in (0.1, 1 / np.sqrt(128), 0.0, float("inf"), float("nan"),
                                                   2.0 ** -127, True, 3.0))


def test_prescale_q_must_be_a_bool() -> None:
    with pytest.raises(PlanError, match="prescale_q: expected a bool, got 1"):
        make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=256, head_dim=64, cur_pos=[255], prescale_q=1)


def test_the_api_prescales_q_for_a_power_of_two_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    import ttdecode.api as api

    plans = []
    real = api.make_decode_plan
    monkeypatch.setattr(api, "make_decode_plan", lambda inputs: plans.append(real(inputs)) or plans[-1])
    gen = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(1, 1, 8, 64, generator=gen), torch.randn(1, 1, 256, 64, generator=gen), \
        torch.randn(1, 1, 256, 64, generator=gen)
    for scale in (None, 0.1):  # None: 1/sqrt(64) = 2^-3
        out = api.scaled_dot_product_attention_decode(q, k, v, cur_pos=[255], scale=scale, backend="host")
        ref = api.scaled_dot_product_attention_decode(q, k, v, cur_pos=[255], scale=scale, backend="reference")
        check_close(out, ref, f"api scale {scale}")
    assert [p.prescale_q for p in plans] == [True, False]
