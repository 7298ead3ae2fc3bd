"""Hazards the chip would show: stale L1, timing of NoC transfers and semaphores, write-after-read.

Each rule has a deliberately wrong kernel (kernels/tests/) that it catches, and the correct protocol
beside it, which must give the same bits under the deterministic schedule and under every seed.
Expected values are the input tiles themselves, the poison byte 0xFF, or the count a semaphore must
hold: nothing here is computed by the runtime under test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ttdecode.core.formats import DataType, tile_size
from ttdecode.core.program_description import CircularBuffer, CoreCoord, Kernel, KernelKind, NocX, NocY, Program, Semaphore
from ttdecode.core.program_description import BufferAddress
from ttdecode.runtime import KernelError, run_program
from ttdecode.runtime.driver import SCHEDULE_SEED_ENV

from programs import crs, kernel_path, tensor_in, tensor_out

BF16, FP32 = DataType.bfloat16, DataType.float32


@pytest.fixture(autouse=True)
def _deterministic_unless_seeded(monkeypatch):
    """`schedule_seed=None` must mean the deterministic schedule here, even when the suite runs seeded."""
    monkeypatch.delenv("TTDECODE_SCHEDULE_SEED", raising=False)

POISON = 0xFF
#: Seeds every perturbed check runs; a seed replays exactly, so the tests are deterministic.
SEEDS = range(12)


def _kernel(name: str, kind: KernelKind, where: dict[CoreCoord, list], cta=(), defines=None) -> Kernel:
    return Kernel(name, kernel_path(f"{name}.cpp"), kind, crs(list(where)), compile_time_args=list(cta),
                  defines=dict(defines or {}), runtime_args=dict(where))


# ---- poison: L1 that nothing wrote --------------------------------------------------------------


def stale_page_program(written: int, defines=None) -> Program:
    """Core (0,0) writes only the first `written` bytes of a CB page (bf16 1.0) and copies the page to y."""
    c = CoreCoord(0, 0)
    kernels = [
        _kernel("stale_l1_reader", KernelKind.READER, {c: [written]}, [0], defines),
        _kernel("copy_writer", KernelKind.WRITER, {c: [BufferAddress("y"), 0, 1]}, [0]),
    ]
    cbs = [CircularBuffer(0, crs([c]), BF16, tile_size(BF16), 2)]
    return Program(kernels, cbs, [], [tensor_out("y", (32, 32), BF16)])


def test_a_cb_page_nobody_wrote_holds_the_poison_pattern():
    written = 512  # the first 256 values
    res = run_program(stale_page_program(written))
    y = np.frombuffer(res.tensors["y"], dtype=np.uint8)
    assert (y[:written].view("<u2") == 0x3F80).all()
    assert (y[written:] == POISON).all()  # the rest of the page was never written
    as_f32 = (y[written:].view("<u2").astype(np.uint32) << 16).view(np.float32)
    assert np.isnan(as_f32).all()  # 0xFFFF is a bf16 NaN


def test_semaphores_start_at_their_initial_value_inside_the_poisoned_l1():
    # The host writes semaphore values (and runtime args) after the poison; the chain program below
    # reads semaphore 0 of core B, which starts at 0 and is incremented exactly once.
    value = _observed_semaphore(run_program(sem_chain_program()))
    assert value == 1


def test_reading_l1_above_the_highest_cb_crashes_with_a_clear_error():
    with pytest.raises(KernelError) as e:
        run_program(stale_page_program(0, {"READ_ABOVE_CBS": ""}))
    msg = str(e.value)
    assert "above the core's highest CB" in msg and "stale_l1_reader" in msg


# ---- a NoC read's destination before its barrier ------------------------------------------------


def early_use_program(defines=None) -> Program:
    c = CoreCoord(0, 0)
    x = torch.randn(64, 32)
    kernels = [
        _kernel("early_use_reader", KernelKind.READER, {c: [BufferAddress("x")]}, [0], defines),
        _kernel("copy_writer", KernelKind.WRITER, {c: [BufferAddress("y"), 0, 3]}, [0]),
    ]
    cbs = [CircularBuffer(0, crs([c]), BF16, tile_size(BF16), 3)]
    return Program(kernels, cbs, [], [tensor_in("x", x, BF16), tensor_out("y", (96, 32), BF16)])


def test_using_a_read_destination_after_its_barrier_gives_the_data_under_every_seed():
    prog = early_use_program()
    x = prog.tensor("x").data
    want = x + x[:2048]  # tiles 0, 1, then the copy of tile 0
    assert run_program(prog).tensors["y"] == want
    for seed in SEEDS:
        assert run_program(prog, schedule_seed=seed).tensors["y"] == want, f"seed {seed}"


def test_using_a_read_destination_before_its_barrier_depends_on_when_the_read_lands():
    prog = early_use_program({"COPY_BEFORE_BARRIER": ""})
    x = prog.tensor("x").data
    tile0 = x[:2048]
    # Deterministic schedule: the read lands at its barrier, so the copy sees the poison.
    y = run_program(prog).tensors["y"]
    assert y[:4096] == x and y[4096:] == bytes([POISON]) * 2048
    # Perturbed: the read may land at the second read's call, before the copy; or not.
    copies = {run_program(prog, schedule_seed=seed).tensors["y"][4096:] for seed in SEEDS}
    assert copies == {tile0, bytes([POISON]) * 2048}


def test_reading_into_pages_already_pushed_is_a_write_after_read_error():
    with pytest.raises(KernelError) as e:
        run_program(early_use_program({"REREAD_AFTER_PUSH": ""}))
    msg = str(e.value)
    assert "noc_async_read" in msg and "write-after-read hazard: reads into page 0 of CB 0" in msg
    assert e.value.failing.name == "early_use_reader"


# ---- semaphores: visible no later than the sender's atomic barrier ------------------------------


def sem_chain_program(defines=None) -> Program:
    """A increments B's semaphore 0, then C's; C then reads B's semaphore 0 into y (uint32 in word 0)."""
    a, b, c = CoreCoord(0, 0), CoreCoord(1, 0), CoreCoord(2, 0)
    kernels = [
        _kernel("sem_chain", KernelKind.WRITER, {a: [NocX(b), NocY(b), NocX(c), NocY(c)]}, (), defines),
        _kernel("sem_waiter", KernelKind.READER, {b: []}),
        _kernel("sem_observer", KernelKind.READER, {c: [NocX(b), NocY(b)]}, [0]),
        _kernel("copy_writer", KernelKind.WRITER, {c: [BufferAddress("y"), 0, 1]}, [0]),
    ]
    cbs = [CircularBuffer(0, crs([c]), FP32, tile_size(FP32), 1)]
    sems = [Semaphore(0, crs([b, c]), 0)]
    return Program(kernels, cbs, sems, [tensor_out("y", (32, 32), FP32)])


def _observed_semaphore(res) -> int:
    return int(np.frombuffer(res.tensors["y"][:4], dtype="<u4")[0])


def test_an_increment_has_landed_once_the_senders_atomic_barrier_returns():
    prog = sem_chain_program()
    assert {_observed_semaphore(run_program(prog, schedule_seed=s)) for s in SEEDS} == {1}


def test_increments_without_an_atomic_barrier_between_them_may_land_in_either_order():
    prog = sem_chain_program({"SKIP_FIRST_ATOMIC_BARRIER": ""})
    assert _observed_semaphore(run_program(prog)) == 1  # the deterministic schedule hides the race
    assert {_observed_semaphore(run_program(prog, schedule_seed=s)) for s in SEEDS} == {0, 1}


# ---- streaming tiles between two cores: semaphore-before-data and write-after-read --------------


def stream_program(n: int, sender_defines=None, receiver_defines=None) -> Program:
    """Core A (0,0) streams n tiles of x into CB 0 of core B (1,0) (2 pages), whose writer copies them to y."""
    a, b = CoreCoord(0, 0), CoreCoord(1, 0)
    both = crs([a, b])
    x = torch.randn(32 * n, 32)
    kernels = [
        _kernel("copy_reader", KernelKind.READER, {a: [BufferAddress("x"), 0, n]}, [0]),
        _kernel("stream_sender", KernelKind.WRITER, {a: [NocX(b), NocY(b), n]}, [0], sender_defines),
        _kernel("stream_receiver", KernelKind.READER, {b: [NocX(a), NocY(a), n]}, [0], receiver_defines),
        _kernel("stream_consumer", KernelKind.WRITER, {b: [BufferAddress("y"), n]}, [0]),
    ]
    cbs = [CircularBuffer(0, both, BF16, tile_size(BF16), 2)]
    sems = [Semaphore(0, both, 0), Semaphore(1, both, 0)]
    return Program(kernels, cbs, sems, [tensor_in("x", x, BF16), tensor_out("y", x.shape, BF16)])


def _outcomes(prog: Program) -> dict[str, list[int]]:
    """Seeds grouped by what the run gave: 'ok' (y == x), 'wrong' (y != x) or 'war' (the hazard error)."""
    x = prog.tensor("x").data
    got: dict[str, list[int]] = {"ok": [], "wrong": [], "war": []}
    for seed in SEEDS:
        try:
            y = run_program(prog, schedule_seed=seed).tensors["y"]
        except KernelError as e:
            assert "write-after-read hazard" in str(e), str(e)
            got["war"].append(seed)
            continue
        got["ok" if y == x else "wrong"].append(seed)
    return got


def test_a_correct_streaming_protocol_gives_the_same_bits_under_every_seed():
    prog = stream_program(6)
    assert run_program(prog).tensors["y"] == prog.tensor("x").data
    assert _outcomes(prog) == {"ok": list(SEEDS), "wrong": [], "war": []}


def test_signalling_a_tile_before_writing_it_is_caught_under_perturbation():
    prog = stream_program(6, sender_defines={"SIGNAL_BEFORE_WRITE": ""})
    assert run_program(prog).tensors["y"] == prog.tensor("x").data  # the deterministic schedule hides it
    got = _outcomes(prog)
    assert got["wrong"] or got["war"], got


def test_writing_into_pages_the_receiver_has_pushed_is_a_write_after_read_error():
    prog = stream_program(2, receiver_defines={"PUSH_BEFORE_DATA": ""})
    with pytest.raises(KernelError) as e:
        run_program(prog)
    msg = str(e.value)
    assert "write-after-read hazard" in msg
    assert "noc_async_write(src=0x" in msg  # the call
    assert "core (0, 0) writer kernel 'stream_sender'" in msg  # the sender
    assert "of CB 0 of core (1, 0)" in msg  # the CB and the receiver
    assert e.value.failing.core == CoreCoord(0, 0) and e.value.failing.name == "stream_sender"


def test_announcing_a_page_before_reserving_it_is_caught_under_perturbation():
    prog = stream_program(6, receiver_defines={"SIGNAL_BEFORE_RESERVE": ""})
    got = _outcomes(prog)
    assert got["war"], got


# ---- the seed itself ----------------------------------------------------------------------------


def test_a_seed_replays_exactly_and_is_reported():
    prog = stream_program(6, sender_defines={"SIGNAL_BEFORE_WRITE": ""})
    res = run_program(stream_program(3), schedule_seed=7)
    assert res.schedule_seed == 7
    assert run_program(stream_program(3)).schedule_seed is None
    got = [_outcomes(prog) for _ in range(2)]
    assert got[0] == got[1]


def test_the_environment_seed_applies_when_no_seed_is_given(monkeypatch):
    monkeypatch.setenv(SCHEDULE_SEED_ENV, "3")
    assert run_program(stream_program(2)).schedule_seed == 3
    assert run_program(stream_program(2), schedule_seed=4).schedule_seed == 4


@pytest.mark.parametrize("bad, err", [(-1, ValueError), (1 << 64, ValueError), (1.5, TypeError), (True, TypeError),
                                      ("7", TypeError)])
def test_a_bad_seed_is_refused_by_name(bad, err):
    with pytest.raises(err, match="schedule_seed"):
        run_program(stream_program(1), schedule_seed=bad)


def test_a_bad_environment_seed_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(SCHEDULE_SEED_ENV, "abc")
    with pytest.raises(ValueError, match=SCHEDULE_SEED_ENV):
        run_program(stream_program(1))
