"""The approximation knobs reach the kernels: SDPAProgramConfig.exp_approx_mode selects the softmax's
exp_tile<approx> (compute compile-time arg 11), ComputeKernelConfig.math_approx_mode becomes the
kernels' APPROX (recip_tile's Default mode) and the device descriptor's math_approx_mode."""

from __future__ import annotations

import torch

import ttdecode
from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig
from ttdecode.ops.flash_decode.program_factory import build_program
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind
from ttdecode.core.tensor import from_torch


def _compute_kernel(exp_approx: bool):
    p = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=64, head_dim=64, cur_pos=[40], grid=(2, 1),
                  max_cores_per_head_batch=2)
    g = torch.Generator().manual_seed(0)
    q = from_torch(torch.randn(1, 1, 8, 64, generator=g), DataType.bfloat16)
    k = from_torch(torch.randn(1, 1, 64, 64, generator=g), DataType.bfloat8_b)
    v = from_torch(torch.randn(1, 1, 64, 64, generator=g), DataType.bfloat8_b)
    prog = build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=0.125, compute=ComputeSettings(),
                         exp_approx=exp_approx)
    return next(kk for kk in prog.kernels if kk.kind is KernelKind.COMPUTE)


def test_exp_approx_is_the_compute_kernels_named_compile_time_arg() -> None:
    assert _compute_kernel(True).named_compile_time_args["exp_approx"] == 1
    assert _compute_kernel(False).named_compile_time_args["exp_approx"] == 0


def _run(exp_approx_mode, math_approx_mode: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 1, 8, 64, generator=g)
    k = torch.randn(1, 1, 96, 64, generator=g)
    v = torch.randn(1, 1, 96, 64, generator=g)
    out = ttdecode.scaled_dot_product_attention_decode(
        q, k, v, cur_pos=[90], backend="host",
        program_config=SDPAProgramConfig(compute_with_storage_grid_size=(2, 1), exp_approx_mode=exp_approx_mode),
        compute_kernel_config=ComputeKernelConfig(math_approx_mode=math_approx_mode))
    return out.float()


def test_exp_approx_mode_changes_the_kernels_exp_and_none_follows_math_approx_mode() -> None:
    exact = _run(False, False)
    approx_exp = _run(True, False)   # Schraudolph exp in the softmax, recip_tile precise
    both = _run(True, True)          # and recip_tile's Default mode approximate (APPROX)
    follows = _run(None, True)       # exp_approx_mode None follows math_approx_mode
    assert not torch.equal(exact, approx_exp)
    assert torch.equal(follows, both)
    assert not torch.equal(follows, _run(False, True))


def test_the_plan_is_priced_at_the_exp_the_kernels_run(monkeypatch) -> None:
    """make_decode_plan hands the planner the exp mode in force (exp_approx_mode, or math_approx_mode when it is
    None), the one the compute kernel is built with."""
    import ttdecode.ops.flash_decode.op as op

    seen: list[bool] = []
    real = op.make_plan
    monkeypatch.setattr(op, "make_plan", lambda **kw: seen.append(kw["exp_approx"]) or real(**kw))
    for exp_approx_mode, math_approx_mode in ((False, False), (True, False), (None, True), (None, False)):
        _run(exp_approx_mode, math_approx_mode)
    assert seen == [False, True, True, False]


def test_a_bank_local_plan_weighs_its_softmax_block_at_that_exp() -> None:
    """Llama-3.1-8B's heads at B 1, 4K, a bank-local pool of 32-position blocks: at the accurate exp a softmax block
    of 2 chunks saves more fixed work than the overlap it loses; at the approximate exp (a cheaper key tile) it does
    not, and the plan keeps one chunk per update."""
    def plan(exp_approx: bool):
        return make_plan(batch=1, num_q_heads=32, num_kv_heads=8, seq_len=4096, head_dim=128, cur_pos=[4095],
                         kv_pages="key_row", block_size=32, num_blocks=128, math_fidelity="HiFi2",
                         exp_approx=exp_approx)
    assert (plan(False).softmax_chunks, plan(True).softmax_chunks) == (2, 1)
