"""DRAM -> CB -> DRAM copies move the exact bytes, on many cores and in every tile format."""

import pytest
import torch

from ttdecode.core.formats import DataType, quantize, unpack_tiles
from ttdecode.runtime import run_program

from programs import copy_program, grid


@pytest.mark.parametrize("dtype", [DataType.bfloat16, DataType.bfloat8_b])
def test_copy_through_cbs_on_64_cores_returns_the_input_bytes(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 8 * 32, 16 * 32)  # 256 tiles over 64 cores
    prog = copy_program(x, dtype, grid(8, 8))
    res = run_program(prog)
    assert res.tensors["y"] == prog.tensor("x").data
    assert torch.equal(unpack_tiles(res.tensors["y"], dtype, x.shape), quantize(x, dtype))


def test_copy_with_more_tiles_than_cb_pages_and_float32_on_three_cores():
    x = torch.arange(5 * 32 * 32, dtype=torch.float32).reshape(5 * 32, 32)
    prog = copy_program(x, DataType.float32, grid(3, 1), cb_pages=1)
    res = run_program(prog)
    assert res.tensors["y"] == prog.tensor("x").data
