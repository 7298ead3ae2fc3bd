"""Tile operations of compute kernels match torch on exactly representable (bfloat16) inputs."""

import pytest
import torch

from ttdecode.core.formats import DataType, quantize
from ttdecode.runtime import run_program

from programs import out_tiles, tile_op_program

BF16 = DataType.bfloat16


def q(x):
    return quantize(x.reshape(1, -1), BF16).reshape(x.shape)


def tiles(t: torch.Tensor) -> torch.Tensor:
    """[32, 32*n] -> [n, 32, 32]"""
    return t.reshape(32, -1, 32).permute(1, 0, 2)


def close(got, want):
    torch.testing.assert_close(got, q(want), rtol=1 / 128, atol=1e-6)


@pytest.mark.parametrize("op,fn", [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)])
def test_eltwise_binary_ops_match_torch(op, fn):
    torch.manual_seed(1)
    a, b = q(torch.randn(32, 96)), q(torch.randn(32, 96))
    prog = tile_op_program(op, {0: a, 1: b}, 3)
    close(out_tiles(run_program(prog), prog), tiles(fn(a, b)))


@pytest.mark.parametrize("transpose", [0, 1])
def test_matmul_accumulates_over_inner_tiles_and_transposes_b_when_asked(transpose):
    torch.manual_seed(2)
    a, b = q(torch.randn(32, 64)), q(torch.randn(32, 64))  # one output tile from 2 inner tiles
    prog = tile_op_program("matmul", {0: a, 1: b}, 1, kt=2, transpose=transpose)
    want = sum((tiles(a)[k] @ (tiles(b)[k].T if transpose else tiles(b)[k])) for k in range(2))
    close(out_tiles(run_program(prog), prog)[0], want)


@pytest.mark.parametrize("op", ["reduce_max", "reduce_sum"])
def test_row_reduce_over_tiles_fills_column_zero_with_scaled_result(op):
    torch.manual_seed(3)
    a = q(torch.randn(32, 96) - 5.0)  # all-negative rows catch a max that starts from 0
    scale = 1.0 if op == "reduce_max" else 0.5
    prog = tile_op_program(op, {0: a, 2: torch.full((32, 32), scale)}, 1, kt=3)
    got = out_tiles(run_program(prog), prog)[0]
    want = a.max(dim=1).values if op == "reduce_max" else a.sum(dim=1) * scale
    close(got[:, 0], want)
    assert torch.count_nonzero(got[:, 1:]) == 0  # the reduce pack mask leaves only column 0 here


@pytest.mark.parametrize("op,fn", [("sub_bcast_cols", torch.sub), ("mul_bcast_cols", torch.mul)])
def test_bcast_cols_ops_use_column_zero_of_the_second_tile(op, fn):
    torch.manual_seed(4)
    a, b = q(torch.randn(32, 64)), q(torch.randn(32, 64))
    prog = tile_op_program(op, {0: a, 1: b}, 2)
    bt = tiles(b)
    want = torch.stack([fn(tiles(a)[i], bt[i][:, :1].expand(32, 32)) for i in range(2)])
    close(out_tiles(run_program(prog), prog), want)


@pytest.mark.parametrize("op,fn,lo,hi", [("exp", torch.exp, -4, 4), ("recip", torch.reciprocal, 0.5, 8),
                                         ("log", torch.log, 0.1, 50)])
def test_sfpu_unary_ops_match_torch(op, fn, lo, hi):
    torch.manual_seed(5)
    a = q(torch.rand(32, 64) * (hi - lo) + lo)
    prog = tile_op_program(op, {0: a}, 2)
    close(out_tiles(run_program(prog), prog), tiles(fn(a)))


@pytest.mark.parametrize("op,fn", [("add_binary", torch.add), ("sub_binary", torch.sub), ("mul_binary", torch.mul)])
def test_sfpu_binary_ops_on_dst_tiles_match_torch_in_fp32(op, fn):
    # Float32 tiles unpacked straight into an fp32 DST (UnpackToDestFp32) keep every mantissa bit, and
    # the SFPU computes in fp32: the result is torch's float32 result bit for bit (a TF32 or bf16 step
    # anywhere would show).
    torch.manual_seed(6)
    a, b = torch.randn(32, 64) * 100, torch.randn(32, 64)
    prog = tile_op_program(op, {0: a, 1: b}, 2, dtype=DataType.float32, dst_index=2, unpack_to_dest=(0, 1))
    assert torch.equal(out_tiles(run_program(prog), prog), tiles(fn(a, b)))
