"""Pins the hardware semantics the compute model follows (see ttdecode/runtime/README.md)."""

import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings
from ttdecode.runtime import run_program

from programs import out_tiles, tile_op_program

F32, BF16 = DataType.float32, DataType.bfloat16


def test_mul_tiles_accumulates_onto_what_dst_already_holds():
    a, b = torch.full((32, 32), 3.0), torch.full((32, 32), 2.0)
    prog = tile_op_program("mul", {0: a, 1: b}, 1, extra_defines={"MUL_ONTO_COPY": "1"})
    assert torch.equal(out_tiles(run_program(prog), prog)[0], torch.full((32, 32), 3.0 + 6.0))


def test_float32_operands_are_tf32_with_fp32_dest_and_bf16_without():
    x = 1.0 + 2.0**-9 + 2.0**-12  # needs 12 mantissa bits
    a, z = torch.full((32, 32), x), torch.zeros(32, 32)
    fp32 = tile_op_program("add", {0: a, 1: z}, 1, dtype=F32, settings=ComputeSettings(fp32_dest_acc_en=True))
    bf16 = tile_op_program("add", {0: a, 1: z}, 1, dtype=F32, settings=ComputeSettings(fp32_dest_acc_en=False))
    assert out_tiles(run_program(fp32), fp32)[0, 0, 0].item() == 1.0 + 2.0**-9  # TF32 keeps 10 bits
    assert out_tiles(run_program(bf16), bf16)[0, 0, 0].item() == 1.0  # bf16 keeps 7 bits


def test_exp_result_in_a_bf16_dst_is_rounded_to_bf16():
    a = torch.full((32, 32), 0.5)
    prog = tile_op_program("exp", {0: a}, 1, dtype=F32, settings=ComputeSettings(fp32_dest_acc_en=False))
    got = out_tiles(run_program(prog), prog)[0, 0, 0].item()
    assert got == torch.tensor(0.5).exp().to(torch.bfloat16).float().item()


def tf32(x: float) -> float:
    """The value a Float32 operand holds in srcA/srcB with an fp32 DST: mantissa cut to 10 bits."""
    bits = torch.tensor([x], dtype=torch.float32).view(torch.int32) & ~0x1FFF
    return bits.view(torch.float32).item()


# Both need 12 mantissa bits, so TF32 drops a different amount from each (2^-12 and 2^-11).
X, Y = 1.0 + 2.0**-9 + 2.0**-12, 2.5 + 2.0**-9 + 2.0**-11
BF16_VALUE = 1.5  # exact in bf16: an operand from a bf16 CB is not cut

#: op -> (the CB of the second operand, the value every output element takes from operand values a, b)
FPU_OPS = {
    "add": (1, lambda a, b: a + b),
    "sub": (1, lambda a, b: a - b),
    "mul": (1, lambda a, b: a * b),
    "sub_bcast_cols": (1, lambda a, b: a - b),
    "mul_bcast_cols": (1, lambda a, b: a * b),
    "matmul": (1, lambda a, b: a * b),  # b is zero past its row 0: one product per output
    "reduce_sum": (2, lambda a, b: a * b),  # a is zero past its column 0, b is the scaler (CB 2)
}


#: multiplying op -> which operand sits in SrcA (mul: in0; matmul: in1; reduce: the scaler)
SRCA_OF_MULTIPLY = {"mul": 0, "mul_bcast_cols": 0, "matmul": 1, "reduce_sum": 1}


def _mask(v: float, keep: int) -> float:
    b = torch.tensor([v], dtype=torch.float32).view(torch.int32) & torch.tensor([keep], dtype=torch.int64).to(torch.int32)
    return b.view(torch.float32).item()


def operand_tile(op: str, which: int, value: float) -> torch.Tensor:
    t = torch.full((32, 32), value)
    if (op, which) == ("matmul", 1):
        t[1:] = 0.0
    elif (op, which) == ("reduce_sum", 0):
        t[:, 1:] = 0.0
    return t


@pytest.mark.parametrize("formats", [(F32, F32), (BF16, F32), (F32, BF16)], ids=lambda f: f"{f[0].value}-{f[1].value}")
@pytest.mark.parametrize("op", list(FPU_OPS))
def test_every_fpu_operand_from_a_float32_cb_is_cut_to_tf32(op, formats):
    # Each operand is cut with its own CB's format, whatever order the runner reads them in: a
    # Float32 operand that slipped through exact (or a bf16 one cut) changes the result.
    second_cb, fn = FPU_OPS[op]
    values = [(X, Y)[i] if f is F32 else BF16_VALUE for i, f in enumerate(formats)]
    inputs = {0: operand_tile(op, 0, values[0]), second_cb: operand_tile(op, 1, values[1])}
    prog = tile_op_program(op, inputs, 1, dtype=F32, input_dtypes={0: formats[0], second_cb: formats[1]},
                           settings=ComputeSettings(fp32_dest_acc_en=True))
    got = out_tiles(run_program(prog), prog)[0]
    if op == "reduce_sum":
        got = got[:, 0]  # the reduce leaves its result in column 0
    cut = [tf32(v) if f is F32 else v for v, f in zip(values, formats)]
    if op in SRCA_OF_MULTIPLY:  # SrcASrcB.md: no fidelity phase consumes SrcA's last TF32 mantissa bit
        i = SRCA_OF_MULTIPLY[op]
        cut[i] = _mask(cut[i], 0xFFFFC000)
    want = fn(*cut)
    for i, f in enumerate(formats):  # the check can fail: either Float32 operand left exact differs
        if f is F32:
            assert fn(*[values[j] if j == i else cut[j] for j in range(2)]) != want
    assert torch.equal(got, torch.full_like(got, want)), f"{op}: got {got.flatten()[0].item()!r}, want {want!r}"


def test_reduce_max_of_a_float32_cb_sees_the_tf32_value():
    prog = tile_op_program("reduce_max", {0: torch.full((32, 32), X), 2: torch.ones(32, 32)}, 1, dtype=F32,
                           settings=ComputeSettings(fp32_dest_acc_en=True))
    got = out_tiles(run_program(prog), prog)[0][:, 0]
    assert torch.equal(got, torch.full_like(got, tf32(X)))


# 1 + 0.75 ulp of bf16 at 1: truncation gives 1, nearest-even 1 + 2^-7.
ONE, THREE_QUARTER_ULP = 1.0, 2.0**-8 + 2.0**-9


def test_sfpu_add_into_a_bf16_dst_truncates_unless_nearest_even_is_asked():
    a, b = torch.full((32, 32), ONE), torch.full((32, 32), THREE_QUARTER_ULP)
    bf16_dst = ComputeSettings(fp32_dest_acc_en=False)
    plain = tile_op_program("add_binary", {0: a, 1: b}, 1, dtype=BF16, settings=bf16_dst)
    even = tile_op_program("add_binary", {0: a, 1: b}, 1, dtype=BF16, settings=bf16_dst,
                           extra_defines={"NEAREST_EVEN": "1"})
    assert torch.equal(out_tiles(run_program(plain), plain)[0], torch.full((32, 32), 1.0))
    assert torch.equal(out_tiles(run_program(even), even)[0], torch.full((32, 32), 1.0 + 2.0**-7))
    fp32 = tile_op_program("add_binary", {0: a, 1: b}, 1, dtype=BF16, out_dtype=F32,
                           settings=ComputeSettings(fp32_dest_acc_en=True))
    assert torch.equal(out_tiles(run_program(fp32), fp32)[0], torch.full((32, 32), ONE + THREE_QUARTER_ULP))


def test_sfpu_mul_into_a_bf16_dst_rounds_to_nearest_even_and_zero_times_inf_is_zero():
    a = torch.full((32, 32), 1.0 + 2.0**-7)
    a[0, 0] = 0.0
    b = torch.full((32, 32), 1.0 + 2.0**-1 + 2.0**-7)  # product 1 + 2^-1 + 2^-6 + 2^-8 + 2^-14
    b[0, 0] = float("inf")
    prog = tile_op_program("mul_binary", {0: a, 1: b}, 1, dtype=BF16, settings=ComputeSettings(fp32_dest_acc_en=False))
    got = out_tiles(run_program(prog), prog)[0]
    want = torch.full((32, 32), 1.0 + 2.0**-1 + 2.0**-6 + 2.0**-7)  # 2^-8 + 2^-14 is over half an ulp: up
    want[0, 0] = 0.0
    assert torch.equal(got, want)
