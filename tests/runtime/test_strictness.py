"""Each device rule broken by a deliberately wrong kernel is caught, naming the core, kernel and call."""

import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import ComputeSettings, CoreCoord
from ttdecode.runtime import KernelError, run_program

from programs import copy_program, grid, handshake_program, tile_op_program

BF16 = DataType.bfloat16


def fails(prog, *needles):
    with pytest.raises(KernelError) as e:
        run_program(prog, watchdog_seconds=1.0)
    text = str(e.value)
    for n in needles:
        assert n in text, f"{n!r} not in:\n{text}"
    return e.value


def copy_with(reader=None, writer=None, cb_pages=2):
    prog = copy_program(torch.randn(32, 64), BF16, grid(1, 1), cb_pages=cb_pages)
    prog.kernels[0].defines.update({k: "" for k in reader or []})
    prog.kernels[1].defines.update({k: "" for k in writer or []})
    return prog


def test_push_with_an_outstanding_read_is_a_missing_read_barrier():
    err = fails(copy_with(reader=["SKIP_READ_BARRIER"]), "core (0, 0) reader kernel 'copy_reader'",
                "cb_push_back", "missing noc_async_read_barrier")
    assert err.failing.core == CoreCoord(0, 0)


def test_semaphore_signal_before_write_barrier_is_caught():
    fails(handshake_program(torch.randn(32, 32), BF16, sender_defines={"SKIP_WRITE_BARRIER": ""}),
          "writer kernel 'sem_sender'", "noc_semaphore_inc", "call noc_async_write_barrier first")


def test_reserving_more_pages_than_the_cb_holds_is_caught():
    fails(copy_with(reader=["RESERVE_TOO_MANY"]), "cb_reserve_back: 3 pages requested but CB 0 holds 2")


def test_popping_more_pages_than_waited_for_is_caught():
    fails(copy_with(writer=["POP_TOO_MANY"]), "writer kernel 'copy_writer'", "cb_pop_front: pops 2 pages",
          "only 1 were made visible by cb_wait_front")


def test_push_without_reserve_is_caught():
    fails(copy_with(reader=["PUSH_WITHOUT_RESERVE"]), "cb_push_back: pushes 1 pages of CB 0 but only 0 are reserved")


def test_pop_of_a_page_still_being_written_is_caught():
    fails(copy_with(writer=["POP_BEFORE_WRITE_BARRIER"]), "cb_pop_front",
          "source of an outstanding noc_async_write")


def test_read_pointer_without_wait_is_caught():
    fails(copy_with(writer=["READ_PTR_WITHOUT_WAIT"]), "get_read_ptr: CB 0 has no pages made visible")


def test_kernel_ending_with_reserved_pages_is_caught():
    fails(copy_with(writer=["END_WITH_RESERVED_PAGE"]), "(kernel end)", "1 pages of CB 0 reserved but never pushed")


def test_misaligned_dram_read_is_caught():
    fails(copy_with(reader=["MISALIGNED_READ"]), "noc_async_read", "misaligned transfer", "modulo 32 B")


def test_write_outside_the_target_l1_regions_is_caught():
    fails(handshake_program(torch.randn(32, 32), BF16, sender_defines={"WRITE_OUTSIDE_L1": ""}),
          "noc_async_write: writes 2048 B at", "of core (1, 0), outside its CBs and semaphores")


def test_op_without_its_init_is_caught():
    a = torch.randn(32, 32)
    fails(tile_op_program("mul", {0: a, 1: a}, 1, extra_defines={"MISSING_INIT": ""}),
          "compute kernel 'tile_op'", "mul_tiles: the FPU is configured by reduce_init")


def test_pack_before_tile_regs_wait_is_out_of_order():
    a = torch.randn(32, 32)
    fails(tile_op_program("add", {0: a, 1: a}, 1, extra_defines={"SKIP_REGS_WAIT": ""}),
          "pack_tile: must run after tile_regs_wait")


def test_dst_index_beyond_half_sync_fp32_capacity_is_caught():
    a = torch.randn(32, 32)
    fails(tile_op_program("add", {0: a, 1: a}, 1, dst_index=4, settings=ComputeSettings(fp32_dest_acc_en=True)),
          "DST index 4 out of range: DST holds 4 tiles (fp32_dest_acc_en=true, dst_full_sync_en=false)")


def test_bf16_dst_in_half_sync_holds_eight_tiles():
    a = torch.randn(32, 32)
    run_program(tile_op_program("add", {0: a, 1: a}, 1, dst_index=7, settings=ComputeSettings(fp32_dest_acc_en=False)))
    fails(tile_op_program("add", {0: a, 1: a}, 1, dst_index=8, settings=ComputeSettings(fp32_dest_acc_en=False)),
          "DST index 8 out of range: DST holds 8 tiles")


def test_unpacking_a_tile_not_waited_for_is_caught():
    a = torch.randn(32, 32)
    fails(tile_op_program("add", {0: a, 1: a}, 1, extra_defines={"READ_UNWAITED_TILE": ""}),
          "add_tiles: reads tile 1 of CB 0 but only 1 pages were made visible")


def test_null_pointer_write_becomes_a_kernel_error():
    err = fails(copy_with(reader=["NULL_WRITE"]), "crash", "Segmentation fault", "address 0x0",
                "core (0, 0) reader kernel 'copy_reader'")
    assert err.kind == "crash"


def test_polling_memory_without_api_calls_trips_the_watchdog():
    err = fails(copy_with(reader=["SPIN_WITHOUT_API"]), "made no API call for")
    assert err.kind == "watchdog"


def test_failed_assert_names_the_condition_and_the_kernel():
    fails(copy_with(reader=["ASSERT_TILE_COUNT"]), "reader kernel 'copy_reader'", "ASSERT failed: n == 1000")


def test_dprint_lines_reach_stderr_with_the_core(capsys):
    run_program(copy_with(reader=["PRINT_COUNT"]))
    assert "core (0, 0) reader: tiles 2" in capsys.readouterr().err


def test_packing_a_dst_tile_that_was_never_written_is_caught():
    a = torch.randn(32, 32)
    fails(tile_op_program("add", {0: a, 1: a}, 1, extra_defines={"PACK_UNWRITTEN": ""}),
          "pack_tile: DST tile 1 was not written since tile_regs_acquire")


def test_unpacking_with_unconfigured_formats_is_caught():
    a = torch.randn(32, 32)
    fails(tile_op_program("add", {0: a, 1: a}, 1, extra_defines={"SKIP_HW_STARTUP": ""}),
          "add_tiles: unpacker srcA is configured for (not configured) but CB 0 holds Float16_b")


def test_sfpu_binary_op_under_another_sfpu_init_is_caught():
    a = torch.randn(32, 32)
    fails(tile_op_program("add_binary", {0: a, 1: a}, 1, dst_index=1, extra_defines={"WRONG_SFPU_INIT": ""}),
          "compute kernel 'tile_op'", "add_binary_tile: the SFPU is configured by exp_tile_init")


def test_sfpu_binary_op_reading_a_dst_tile_without_data_is_caught():
    a = torch.randn(32, 32)
    fails(tile_op_program("mul_binary", {0: a, 1: a}, 1, dst_index=1, extra_defines={"SKIP_SECOND_COPY": ""}),
          "compute kernel 'tile_op'", "mul_binary_tile: DST tile 2 holds no data since tile_regs_acquire")
