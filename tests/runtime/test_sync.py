"""Semaphores and NoC writes between cores; deadlocks are caught and explained."""


import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import CoreCoord, KernelKind
from ttdecode.runtime import DeadlockError, run_program

from programs import handshake_program


def test_two_core_semaphore_handshake_delivers_the_tile():
    x = torch.randn(32, 32)
    prog = handshake_program(x, DataType.bfloat16)
    res = run_program(prog)
    assert res.tensors["y"] == prog.tensor("x").data
    sender = res.counters.kernel(CoreCoord(0, 0), KernelKind.WRITER)
    assert sender.noc_write_bytes == {CoreCoord(1, 0): 2048}
    assert sender.sem_incs == {CoreCoord(1, 0): 1}


def test_deadlock_is_reported_with_what_every_kernel_waits_for():
    prog = handshake_program(torch.randn(32, 32), DataType.bfloat16, receiver_defines={"NEVER_SIGNAL": ""})
    with pytest.raises(DeadlockError) as e:
        run_program(prog)
    states = {(k.core, k.kind): k for k in e.value.kernels}
    sender = states[(CoreCoord(0, 0), "writer")]
    receiver = states[(CoreCoord(1, 0), "reader")]
    writer = states[(CoreCoord(1, 0), "writer")]
    assert sender.state == "blocked" and "noc_semaphore_wait" in sender.waiting_for
    assert "semaphore 0): value 0, waiting for == 1" in sender.waiting_for
    assert "semaphore 1): value 0, waiting for == 1" in receiver.waiting_for
    assert "cb_wait_front(cb=0, 1 pages): 0 pages available" in writer.waiting_for
    assert states[(CoreCoord(0, 0), "reader")].state == "done"
    assert "core (1, 0) reader 'sem_receiver'" in str(e.value)
