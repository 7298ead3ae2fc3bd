"""What a run reuses from the runs before it changes no result: an input image given again as the same
(immutable) bytes object is not copied again, and a program changed in place runs as changed."""

import torch

from ttdecode.formats import DataType
from ttdecode.runtime import driver, run_program

from programs import copy_program, grid, tensor_in


def test_an_input_given_again_as_the_same_bytes_is_not_copied_again_and_new_bytes_are():
    x = torch.randn(512, 1024)  # 512 bf16 tiles: 1 MiB, an image large enough to be shared
    prog = copy_program(x, DataType.bfloat16, grid(2, 1))
    assert len(prog.tensor("x").data) >= driver._InputImages.MIN_BYTES
    before = driver._INPUTS.shared_writes
    assert run_program(prog).tensors["y"] == prog.tensor("x").data
    assert driver._INPUTS.shared_writes == before + 1
    assert run_program(prog).tensors["y"] == prog.tensor("x").data  # same object: not written again
    assert driver._INPUTS.shared_writes == before + 1

    prog.tensors[0] = tensor_in("x", torch.randn(512, 1024), DataType.bfloat16)  # new bytes, new values
    assert run_program(prog).tensors["y"] == prog.tensor("x").data
    assert driver._INPUTS.shared_writes == before + 2


def test_runtime_args_changed_in_place_take_effect_in_the_next_run():
    x = torch.randn(64, 64)  # 4 tiles, 2 per core
    prog = copy_program(x, DataType.bfloat16, grid(2, 1))
    data = prog.tensor("x").data
    assert run_program(prog).tensors["y"] == data
    core1 = grid(2, 1)[1]
    for k in prog.kernels:  # core 1 copies no tile: its half of y keeps the poison
        k.runtime_args[core1][2] = 0
    half = len(data) // 2
    assert run_program(prog).tensors["y"] == data[:half] + b"\xff" * half
