"""What a run reuses from the runs before it changes no result: an input image given again as the same
(immutable) bytes object is not copied again, and a program changed in place runs as changed."""

import dataclasses

import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import BufferAddress
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


def test_kernels_writing_into_a_shared_input_image_leave_it_unchanged_for_the_next_run():
    x = torch.randn(512, 1024)  # 512 tiles, 1 MiB: a shared image
    n = 512
    core = grid(1, 1)[0]
    writes_x = copy_program(x, DataType.bfloat16, grid(1, 1))  # copies the second half of x over its first half
    writes_x.kernels[0].runtime_args[core] = [BufferAddress("x"), n // 2, n // 2]
    writes_x.kernels[1].runtime_args[core] = [BufferAddress("x"), 0, n // 2]
    writes_x.tensors[0].in_place = True
    data = writes_x.tensor("x").data
    half = len(data) // 2
    copies_x = copy_program(x, DataType.bfloat16, grid(1, 1))
    copies_x.tensors[0] = dataclasses.replace(writes_x.tensors[0], in_place=False)
    assert copies_x.tensor("x").data is data
    before = driver._INPUTS.shared_writes
    assert run_program(writes_x).tensors["x"] == data[half:] + data[half:]
    assert run_program(copies_x).tensors["y"] == data  # the image as given, not as the last run left it
    assert driver._INPUTS.shared_writes == before + 1
