"""`run_combine`: merge partials with the combine kernels on the host runtime."""

from __future__ import annotations

from typing import Optional

import torch

from ttdecode.core.formats import DataType
from ttdecode.ops.combine.validate import _check_partials
from ttdecode.ops.combine.program_factory import _decode, build_combine_program
from ttdecode.ops.combine.plan import make_combine_plan
from ttdecode.runtime import run_program

__all__ = ["run_combine"]


def run_combine(outs: torch.Tensor, lses: torch.Tensor, *, in_dtype: DataType = DataType.bfloat16,
                out_dtype: DataType = DataType.float32, max_cores: int = 8,
                schedule_seed: Optional[int] = None, return_result: bool = False):
    """Merge partials with the combine kernels on the host runtime.

    Args:
        outs: ``[n, G, H, Dv]`` (or ``[n, 1, B, NH, Dv]``) normalized partial outputs; packed to
            ``in_dtype`` tiles (bfloat16 or float32) as the device would hold them.
        lses: ``[n, G, H]`` (or ``[n, 1, B, NH]``) their LSEs, finite or ``-inf``.
        out_dtype: the merged output's tiles (float32 or bfloat16).
        max_cores: the program's cores (at most one per tile row).

    Returns:
        ``(out [1, G, H, Dv], lse [1, G, H])`` (out in torch.bfloat16 or float32, lse float32), and the
        runtime's ``RunResult`` too with ``return_result``.
    """
    outs, lses = _check_partials(outs, lses)
    n, g, h, dv = outs.shape
    plan = make_combine_plan(partials=n, groups=g, heads=h, head_dim_v=dv, in_dtype=in_dtype,
                             out_dtype=out_dtype, max_cores=max_cores)
    result = run_program(build_combine_program(plan, outs, lses), schedule_seed=schedule_seed)
    out, lse = _decode(plan, result.tensors)
    return (out, lse, result) if return_result else (out, lse)
