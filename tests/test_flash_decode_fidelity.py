"""Math fidelity reaches the FlashDecode kernels end to end.

The host runtime runs MVMUL/ELWMUL fidelity phase by phase (SrcA 5 and SrcB 7 magnitude bits per
phase, `tests/runtime/test_chip_fpu.py`), so the API's `math_fidelity` must change the kernels'
result, and more phases must not be less accurate. The package default (HiFi4, exact exp, fp32 DST)
meets the accuracy bar; LoFi and HiFi2 miss it on the Llama shapes (`tech_report/accuracy_table.md`,
`perf/accuracy_table.py`), which is why they are documented as not recommended.
"""

from __future__ import annotations

import torch

import ttdecode
from ttdecode.accuracy import check_close, check_lse, rel_l2
from ttdecode.config import ComputeKernelConfig, SDPAProgramConfig
from ttdecode.reference import sdpa_decode_reference
from ttdecode.core.tensor import dequantize

S, D, NH = 256, 128, 8


def _inputs():
    g = torch.Generator().manual_seed(7)
    q = ttdecode.from_torch(torch.randn(1, 1, NH, D, generator=g), dtype=ttdecode.bfloat16)
    k = ttdecode.from_torch(torch.randn(1, 1, S, D, generator=g), dtype=ttdecode.bfloat8_b)
    v = ttdecode.from_torch(torch.randn(1, 1, S, D, generator=g), dtype=ttdecode.bfloat8_b)
    return q, k, v


def _run(fidelity: str):
    q, k, v = _inputs()
    return ttdecode.scaled_dot_product_attention_decode(
        q, k, v, cur_pos=[S - 1], return_lse=True, backend="host",
        program_config=SDPAProgramConfig(compute_with_storage_grid_size=(4, 1), max_cores_per_head_batch=4),
        compute_kernel_config=ComputeKernelConfig(math_fidelity=fidelity))


def test_math_fidelity_changes_the_kernels_result_and_more_phases_are_more_accurate() -> None:
    q, k, v = _inputs()
    ref, ref_lse = sdpa_decode_reference(dequantize(q), dequantize(k), dequantize(v), cur_pos=[S - 1],
                                         return_lse=True)
    outs = {f: _run(f) for f in ("LoFi", "HiFi2", "HiFi4")}
    errs = {f: rel_l2(o, ref) for f, (o, _) in outs.items()}
    assert not torch.equal(outs["LoFi"][0], outs["HiFi2"][0])
    assert not torch.equal(outs["HiFi2"][0], outs["HiFi4"][0])
    assert errs["HiFi4"] < errs["HiFi2"] < errs["LoFi"], errs
    # The package default (HiFi4) meets the bar; the others are reported, not asserted to pass.
    check_close(outs["HiFi4"][0], ref, "HiFi4")
    check_lse(outs["HiFi4"][1], ref_lse, "HiFi4 LSE")
