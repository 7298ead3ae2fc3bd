"""The public API: the reference backend on torch, TileTensor and ttnn inputs; the host/device seam;
backend selection."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from ttdecode import api
from ttdecode.ops.flash_decode import op as fd_op
from ttdecode.api import (
    last_backend,
    paged_scaled_dot_product_attention_decode,
    scaled_dot_product_attention_decode,
)
from ttdecode.config import SDPAProgramConfig
from ttdecode.reference import sdpa_decode_reference

B, NH, NKV, S, D = 2, 8, 2, 128, 64




def rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def qkv(b: int = B, s: int = S) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return rand(1, b, NH, D, seed=1), rand(b, NKV, s, D, seed=2), rand(b, NKV, s, D, seed=3)


def bf(x: torch.Tensor) -> torch.Tensor:
    """The values a bfloat16 store keeps, in float64."""
    return x.to(torch.bfloat16).to(torch.float64)


def test_reference_backend_on_torch_is_the_reference_of_the_bf16_inputs() -> None:
    q, k, v = qkv()
    out, lse = scaled_dot_product_attention_decode(q, k, v, cur_pos=[100, 5], return_lse=True, backend="reference")
    want, want_lse = sdpa_decode_reference(bf(q), bf(k), bf(v), cur_pos=[100, 5], return_lse=True)
    assert out.dtype == torch.bfloat16 and list(out.shape) == [1, B, NH, D]
    assert lse.dtype == torch.float32 and list(lse.shape) == [1, B, NH]
    assert torch.equal(out, want.to(torch.bfloat16))
    assert torch.equal(lse, want_lse.to(torch.float32))
    assert last_backend() == "reference"


def test_torch_float32_inputs_are_taken_as_bfloat16() -> None:
    q, k, v = qkv()
    a = scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 0], backend="reference")
    b = scaled_dot_product_attention_decode(q.bfloat16(), k.bfloat16(), v.bfloat16(), cur_pos=[S - 1, 0],
                                            backend="reference")
    assert torch.equal(a, b)
    # and the rounding matters: float64 inputs to the reference give a different answer
    exact = sdpa_decode_reference(q.double(), k.double(), v.double(), cur_pos=[S - 1, 0]).to(torch.bfloat16)
    assert not torch.equal(a, exact)


def test_reference_backend_passes_every_option_through() -> None:
    q, k, v = qkv()
    sink = rand(NH, 32, seed=4)
    out = scaled_dot_product_attention_decode(q, k, v, cur_pos=[90, 40], attention_sink=sink, scale=0.3,
                                              sliding_window_size=33, backend="reference")
    want = sdpa_decode_reference(bf(q), bf(k), bf(v), cur_pos=[90, 40], attention_sink=bf(sink), scale=0.3,
                                 sliding_window_size=33)
    assert torch.equal(out, want.to(torch.bfloat16))


def test_non_causal_with_mask_on_the_reference_backend() -> None:
    q, k, v = qkv()
    mask = torch.zeros(1, 1, NH, S)
    mask[..., 64:] = float("-inf")
    out = scaled_dot_product_attention_decode(q, k, v, is_causal=False, attn_mask=mask, backend="reference")
    want = sdpa_decode_reference(bf(q), bf(k), bf(v), is_causal=False, attn_mask=bf(mask))
    assert torch.equal(out, want.to(torch.bfloat16))
    # masking positions >= 64 equals causal decode at position 63 for every user
    causal = scaled_dot_product_attention_decode(q, k, v, cur_pos=[63, 63], backend="reference")
    assert torch.allclose(out.float(), causal.float(), atol=1e-2)


def test_skipped_user_gets_zeros_and_minus_inf_lse() -> None:
    q, k, v = qkv()
    out, lse = scaled_dot_product_attention_decode(q, k, v, cur_pos=[-1, 7], return_lse=True, backend="reference")
    assert torch.equal(out[0, 0], torch.zeros(NH, D, dtype=torch.bfloat16))
    assert bool(torch.isneginf(lse[0, 0]).all()) and bool(torch.isfinite(lse[0, 1]).all())


def test_share_cache_every_user_reads_batch_0() -> None:
    q, k, v = qkv(b=1)
    q2 = torch.cat([q, q], dim=1)
    out = scaled_dot_product_attention_decode(q2, k, v, cur_pos=[50, 50], share_cache=True, backend="reference")
    assert torch.equal(out[0, 0], out[0, 1])


def test_mla_reads_v_out_of_k() -> None:
    q, k, _ = qkv()
    out = scaled_dot_product_attention_decode(q, k, None, head_dim_v=32, cur_pos=[S - 1, 10], backend="reference")
    want = scaled_dot_product_attention_decode(q, k, k[..., :32].contiguous(), cur_pos=[S - 1, 10],
                                               backend="reference")
    assert list(out.shape) == [1, B, NH, 32] and torch.equal(out, want)


def test_paged_reference_equals_the_contiguous_cache() -> None:
    q, k, v = qkv()
    block = 32
    blocks_per_user = S // block
    perm = torch.randperm(B * blocks_per_user, generator=torch.Generator().manual_seed(5))
    table = perm.reshape(B, blocks_per_user).to(torch.int32)
    kp = torch.empty(B * blocks_per_user, NKV, block, D)
    vp = torch.empty_like(kp)
    for b in range(B):
        for j in range(blocks_per_user):
            kp[table[b, j]] = k[b, :, j * block:(j + 1) * block]
            vp[table[b, j]] = v[b, :, j * block:(j + 1) * block]
    pos = torch.tensor([S - 1, 33], dtype=torch.int32)
    out = paged_scaled_dot_product_attention_decode(q, kp, vp, table, cur_pos_tensor=pos, backend="reference")
    want = scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 33], backend="reference")
    assert torch.equal(out, want)


def test_reference_backend_on_tile_tensors_uses_their_quantized_values() -> None:
    from ttdecode.core.formats import DataType
    from ttdecode.core.tensor import dequantize, from_torch

    q, k, v = qkv()
    kt, vt = from_torch(k, DataType.bfloat8_b), from_torch(v, DataType.bfloat8_b)
    qt = from_torch(q, DataType.bfloat16)
    out = scaled_dot_product_attention_decode(qt, kt, vt, cur_pos=[S - 1, 64], backend="reference")
    want = sdpa_decode_reference(dequantize(qt), dequantize(kt), dequantize(vt), cur_pos=[S - 1, 64])
    assert torch.equal(out, want.to(torch.bfloat16))
    # bfloat8_b loses precision: the answer differs from the bf16 one
    assert not torch.equal(out, scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 64], backend="reference"))


def test_reference_backend_on_ttnn_tensors(ttnn) -> None:
    q, k, v = qkv()
    qt = ttnn.from_torch(q, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    kt = ttnn.from_torch(k, dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
    vt = ttnn.from_torch(v, dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
    pos = ttnn.from_torch(torch.tensor([S - 1, 20], dtype=torch.int32), dtype=ttnn.int32)
    out, lse = scaled_dot_product_attention_decode(qt, kt, vt, cur_pos_tensor=pos, return_lse=True, backend="reference")
    deq = lambda t: ttnn.to_torch(t).to(torch.float64)  # noqa: E731
    want, want_lse = sdpa_decode_reference(deq(qt), deq(kt), deq(vt), cur_pos=[S - 1, 20], return_lse=True)
    assert torch.equal(out, want.to(torch.bfloat16)) and torch.equal(lse, want_lse.float())
    # ttnn's own golden function agrees on the same values
    golden = ttnn.transformer.scaled_dot_product_attention_decode.golden_function(
        deq(qt).float(), deq(kt).float(), deq(vt).float(), cur_pos=[S - 1, 20], scale=D ** -0.5)
    assert torch.allclose(out.float(), golden.float(), atol=2e-2, rtol=2e-2)


def test_ttnn_configs_are_accepted(ttnn) -> None:
    q, k, v = qkv()
    pc = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=0, k_chunk_size=64)
    cc = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.HiFi4, fp32_dest_acc_en=True)
    out = scaled_dot_product_attention_decode(q, k, v, cur_pos=[3, 4], program_config=pc, compute_kernel_config=cc,
                                              memory_config=ttnn.DRAM_MEMORY_CONFIG, backend="reference")
    assert list(out.shape) == [1, B, NH, D]


def test_host_backend_runs_the_kernels_and_matches_the_reference() -> None:
    from ttdecode.accuracy import check_close, check_lse

    q, k, v = qkv()
    out, lse = scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 9], backend="host", return_lse=True)
    ref, ref_lse = scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 9], backend="reference",
                                                       return_lse=True)
    assert last_backend() == "reference"
    assert out.dtype == torch.bfloat16 and list(out.shape) == [1, B, NH, D]
    check_close(out, ref, "host backend output")
    check_lse(lse, ref_lse, "host backend LSE")


def test_device_backend_without_a_device_says_so() -> None:
    q, k, v = qkv()
    with pytest.raises(RuntimeError, match="no Tenstorrent device"):
        scaled_dot_product_attention_decode(q, k, v, cur_pos=[1, 2], backend="device")
    assert last_backend() == "device"


def test_kernel_backends_get_the_validated_inputs_and_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake(inputs: Any, plan: Any) -> str:
        seen.update(backend=last_backend(), inputs=inputs, plan=plan)
        return "ran"

    monkeypatch.setattr(api, "run_host", fake)
    q, k, v = qkv()
    cfg = SDPAProgramConfig(k_chunk_size=64, max_cores_per_head_batch=4)
    assert scaled_dot_product_attention_decode(q, k, v, cur_pos=[S - 1, 9], program_config=cfg, backend="host") == "ran"
    plan = seen["plan"]
    assert seen["backend"] == "host" and seen["inputs"].positions == (S - 1, 9)
    assert (plan.batch, plan.num_q_heads, plan.num_kv_heads, plan.seq_len, plan.head_dim) == (B, NH, NKV, S, D)
    assert plan.fixed_chunk_tiles == 2 and plan.pieces_per_work <= 4 and plan.cur_pos == (S - 1, 9)
    assert plan.kv_dtype.value == "bfloat16"


def test_paged_calls_reach_the_kernel_backends_with_a_paged_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake(inputs: Any, plan: Any) -> str:
        seen.update(backend=last_backend(), inputs=inputs, plan=plan)
        return "ran"

    monkeypatch.setattr(api, "run_host", fake)
    q, _, _ = qkv()
    table = torch.tensor([[3, 0, 1, 2], [4, 5, 7, 6]], dtype=torch.int32)
    kp, vp = rand(9, NKV, 32, D, seed=4), rand(9, NKV, 32, D, seed=5)
    assert paged_scaled_dot_product_attention_decode(q, kp, vp, table, cur_pos=[S - 1, 40], backend="host") == "ran"
    plan = seen["plan"]
    assert fd_op.kernel_gaps(seen["inputs"]) == []
    assert (plan.block_size, plan.num_blocks, plan.max_blocks, plan.seq_len) == (32, 9, 4, S)
    assert torch.equal(seen["inputs"].page_table_values, table.to(torch.int64))


def test_planner_refusal_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    from ttdecode.ops.flash_decode.plan import PlanError

    monkeypatch.setattr(api, "run_host", lambda *a: pytest.fail("must not run"))
    q, k, v = qkv(s=4096)
    with pytest.raises(PlanError, match="L1 overflow"):
        scaled_dot_product_attention_decode(q, k, v, cur_pos=[1, 2], backend="host",
                                            program_config=SDPAProgramConfig(k_chunk_size=4096))


def _fake_device(monkeypatch: pytest.MonkeyPatch, available: bool) -> None:
    from ttdecode import ttnn_env

    monkeypatch.setattr(ttnn_env, "has_tenstorrent_device", lambda: available)


@pytest.mark.parametrize("available", [True, False])
def test_auto_sends_torch_inputs_to_the_host_even_with_a_device(monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture, available: bool) -> None:
    """Backend "auto" picks the device only for device tensors (tests/test_device_step.py); torch inputs go
    to the host runtime whether or not a Wormhole is present, and the choice is logged with its reason."""
    _fake_device(monkeypatch, available)
    monkeypatch.setattr(api, "run_host", lambda inputs, plan: "host")
    q, k, v = qkv()
    with caplog.at_level(logging.INFO, logger="ttdecode"):
        assert scaled_dot_product_attention_decode(q, k, v, cur_pos=[1, 2]) == "host"
    assert last_backend() == "host"
    assert "backend 'auto' -> 'host'" in caplog.text


def test_auto_without_a_device_falls_back_to_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from ttdecode.backend import select_backend

    _fake_device(monkeypatch, False)
    monkeypatch.setattr(api, "run_host", lambda inputs, plan: "host")
    q, k, v = qkv()
    assert scaled_dot_product_attention_decode(q, k, v, cur_pos=[1, 2], backend="auto") == "host"
    assert last_backend() == "host"
    assert select_backend() == "host"
    _fake_device(monkeypatch, True)
    assert select_backend() == "device"  # no tensors given: the device whenever one is present


def test_unknown_backend_is_refused() -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"argument 'backend': expected one of \['auto', 'device', 'host', 'reference'\], got 'gpu'"):
        scaled_dot_product_attention_decode(q, k, v, cur_pos=[1, 2], backend="gpu")


def test_bad_arguments_fail_before_any_backend_runs() -> None:
    q, k, v = qkv()
    scaled_dot_product_attention_decode(q, k, v, cur_pos=[1, 2], backend="reference")
    with pytest.raises(ValueError, match="argument 'cur_pos'"):
        scaled_dot_product_attention_decode(q, k, v, backend="host")
    assert last_backend() == "reference"  # unchanged: nothing was chosen for the bad call


def test_reference_reads_the_same_values_the_kernels_get(ttnn) -> None:
    from ttdecode.core.tensor import dequantize
    from ttdecode.ops.flash_decode.validate import describe

    x = torch.cat([rand(4, 64, seed=6) * 1e3, torch.tensor([[1.00390625, -2.0078125, 3e-39, 65504.0] * 16])])
    assert torch.equal(fd_op.dequantize_input(describe("k", x)), dequantize(x))
    t = ttnn.from_torch(x, dtype=ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT)
    assert torch.equal(fd_op.dequantize_input(describe("k", t)), dequantize(t))


def test_auto_with_the_real_device_module_picks_host_here(monkeypatch: pytest.MonkeyPatch) -> None:
    from ttdecode.ttnn_env import has_tenstorrent_device

    monkeypatch.setattr(api, "run_host", lambda inputs, plan: "host")
    q, k, v = qkv()
    scaled_dot_product_attention_decode(q, k, v, cur_pos=[1, 2])
    assert last_backend() == ("device" if has_tenstorrent_device() else "host")


def test_packer_l1_acc_is_refused_by_the_kernel_backends() -> None:
    from ttdecode.config import ComputeKernelConfig

    q, k, v = qkv()
    cc = ComputeKernelConfig(packer_l1_acc=True)
    with pytest.raises(NotImplementedError, match="backend 'host': .*compute_kernel_config.packer_l1_acc=True"):
        scaled_dot_product_attention_decode(q, k, v, cur_pos=[3, 4], compute_kernel_config=cc, backend="host")
