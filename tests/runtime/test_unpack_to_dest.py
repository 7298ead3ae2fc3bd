"""Unpack to DST (`unpack_to_dest_mode`), as tt-metal 0.81.1's JIT build and LLK define it.

- A Float32 CB in UnpackToDestFp32 mode gets the unpack format Float32 (`get_unpack_dst_formats`);
  `copy_tile` (`llk_unpack_A<..., UnpackToDestEn>` + `is_32bit_input`) then writes it straight into
  the fp32 DST, bit for bit. In Default mode the tile passes through SrcA as TF32 (10 mantissa bits,
  denormals flushed) with an fp32 DST.
- `unary_bcast<COL>` of such a CB broadcasts inside DST (the MOVD2B/MOVB2D hi16/lo16 sequence of
  `_llk_math_eltwise_unary_datacopy_`), exactly; otherwise through SrcB (TF32).
- An FPU op (matmul, eltwise, broadcast, reduce) reading such a CB is refused naming the CB and the
  op: the LLK does not support a Float32 -> Float32 unpack into SrcA/SrcB
  (`is_unpacker_format_conversion_supported_dest(Float32, Float32, false)` is false).
- `sfpu_reduce<MAX, Float32, REDUCE_ROW>` (ckernel_sfpu_reduce.h) is a compare-and-swap on DST: exact.
Expected values are computed here from those rules with plain bit operations.
"""

from __future__ import annotations

import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings, Program, UnpackToDestMode, check_unpack_to_dest, unpack_to_dest_modes
from ttdecode.runtime import KernelError, run_program

from programs import out_tiles, tile_op_program

F32, BF16 = DataType.float32, DataType.bfloat16


def tf32(x: torch.Tensor) -> torch.Tensor:
    """SrcA's view of fp32 data with an fp32 DST: low 13 mantissa bits cut, denormals flushed (to a
    signed zero); inf/NaN kept."""
    bits = x.to(torch.float32).view(torch.int32)
    exp = (bits >> 23) & 0xFF
    cut = torch.where(exp == 0, bits & torch.tensor(-0x80000000, dtype=torch.int32),
                      torch.where(exp == 0xFF, bits, bits & ~0x1FFF))
    return cut.view(torch.float32)


def values() -> torch.Tensor:
    """fp32 values needing all 23 mantissa bits, a denormal, a negative zero, +-inf, wide exponents."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(32, 32, generator=gen) * torch.exp2(torch.randint(-60, 60, (32, 32), generator=gen).float())
    x[0, 0], x[0, 1], x[0, 2], x[0, 3] = 1.0 + 2.0 ** -23, 2.0 ** -140, -0.0, float("-inf")
    x[1, 0] = 3.0 * 2.0 ** -130  # a denormal in column 0 (the broadcast column)
    return x


def dst_op(op: str, x: torch.Tensor, *, u2d: tuple[int, ...], n_tiles: int = 1, defines=None,
           settings: ComputeSettings | None = None, extra: dict[int, torch.Tensor] | None = None) -> Program:
    inputs = {0: x, **(extra or {})}
    return tile_op_program(op, inputs, 1, kt=n_tiles, dtype=F32, unpack_to_dest=u2d, kernel="dst_op.cpp",
                           extra_defines=defines, settings=settings)


def test_copy_of_a_float32_cb_is_tf32_without_unpack_to_dest():
    x = values()
    prog = dst_op("copy", x, u2d=())
    got = out_tiles(run_program(prog), prog)[0]
    assert torch.equal(got.view(torch.int32), tf32(x).view(torch.int32))
    assert got[0, 1] == 0 and got[1, 0] == 0  # the denormals were flushed


def test_copy_of_an_unpack_to_dest_cb_is_exact():
    x = values()
    prog = dst_op("copy", x, u2d=(0,))
    got = out_tiles(run_program(prog), prog)[0]
    assert torch.equal(got.view(torch.int32), x.view(torch.int32))  # every bit, the denormal and -0 too


def test_unary_bcast_col_is_exact_from_dst_and_tf32_through_srcb():
    x = values()
    exact = dst_op("bcast_col", x, u2d=(0,))
    through_srcb = dst_op("bcast_col", x, u2d=())
    col = x[:, :1].expand(32, 32)
    assert torch.equal(out_tiles(run_program(exact), exact)[0].view(torch.int32), col.contiguous().view(torch.int32))
    got = out_tiles(run_program(through_srcb), through_srcb)[0]
    assert torch.equal(got.view(torch.int32), tf32(col.contiguous()).view(torch.int32))


def test_sfpu_row_max_over_tiles_is_exact_in_column_0():
    gen = torch.Generator().manual_seed(4)
    # rows whose largest entries differ only in low mantissa bits (a TF32 max would tie them)
    x = 1000.0 + torch.randint(0, 1 << 12, (32, 96), generator=gen).float() * 2.0 ** -14
    x[5, :] = float("-inf")
    x[5, 70] = -3.0
    prog = dst_op("row_max", x, u2d=(0,), n_tiles=3)
    got = out_tiles(run_program(prog), prog)[0]
    assert torch.equal(got[:, 0], x.max(dim=1).values)


def test_sfpu_row_max_with_a_format_other_than_dst_s_is_refused():
    prog = dst_op("row_max", values(), u2d=(0,), defines={"WRONG_REDUCE_FORMAT": "1"})
    with pytest.raises(KernelError, match=r"sfpu_reduce: format Float16_b .* but DST holds Float32"):
        run_program(prog)


def test_copy_init_for_a_default_cb_then_copy_of_an_unpack_to_dest_cb_is_refused():
    prog = dst_op("copy", values(), u2d=(0,), defines={"WRONG_COPY_INIT": "1"}, extra={1: torch.zeros(32, 32)})
    with pytest.raises(KernelError, match=r"copy_tile: CB 0 unpacks straight to DST .*call copy_init for this CB"):
        run_program(prog)


@pytest.mark.parametrize("op,cb", [("matmul", 1), ("add", 0), ("mul_bcast_cols", 1), ("reduce_max", 0)])
def test_fpu_op_reading_an_unpack_to_dest_cb_is_refused_naming_cb_and_op(op, cb):
    x = torch.randn(32, 32)
    inputs = {0: x, 1: x, 2: torch.ones(32, 32)} if op == "reduce_max" else {0: x, 1: x}
    prog = tile_op_program(op, inputs, 1, dtype=F32, unpack_to_dest=(cb,), input_dtypes={2: BF16})
    with pytest.raises(KernelError, match=rf"CB {cb} is in UnpackToDestFp32 mode .* an FPU op cannot read it"):
        run_program(prog)


def test_unpack_to_dest_needs_an_fp32_dst_and_a_float32_cb():
    with pytest.raises(ValueError, match="needs fp32_dest_acc_en=True"):
        ComputeSettings(fp32_dest_acc_en=False, unpack_to_dest_mode=unpack_to_dest_modes([3]))
    with pytest.raises(ValueError, match="expected 32 entries"):
        ComputeSettings(unpack_to_dest_mode=(UnpackToDestMode.Default,) * 3)
    prog = tile_op_program("add", {0: torch.zeros(32, 32), 1: torch.zeros(32, 32)}, 1, dtype=BF16, unpack_to_dest=(1,))
    with pytest.raises(ValueError, match=r"unpack_to_dest_mode\[1\] is UnpackToDestFp32 but CB 1 holds bfloat16"):
        check_unpack_to_dest(prog)
    with pytest.raises(ValueError, match=r"CB 1 holds bfloat16"):
        run_program(prog)
