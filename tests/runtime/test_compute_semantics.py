"""Pins the hardware semantics the compute model follows (see ttdecode/runtime/README.md)."""

import torch

from ttdecode.formats import DataType
from ttdecode.program import ComputeSettings
from ttdecode.runtime import run_program

from programs import out_tiles, tile_op_program

F32 = DataType.float32


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
