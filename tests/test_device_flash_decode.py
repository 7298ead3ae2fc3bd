"""The FlashDecode program on the device path: the real ttnn 0.81.1 descriptors, and the dataflow
kernels compiled against the real tt-metal headers with the factory's own compile-time args."""

from __future__ import annotations

from typing import Any


from ttdecode import ttnn_backend as dev
from ttdecode.ttnn_env import has_tenstorrent_device
from ttdecode.ops.flash_decode.program_factory import build_program_for_device
from ttdecode.core.formats import DataType
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.core.program_description import ComputeSettings, KernelKind

LLAMA = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, seq_len=8192)




class GridView:
    """An 8x8 worker grid at NoC (18 + x, 18 + y) and made-up DRAM addresses."""

    def __init__(self) -> None:
        self.addresses = {"q": 0x100000, "k": 0x200000, "v": 0x300000, "cur_pos": 0x400000, "out": 0x500000,
                          "lse": 0x600000, "page_table": 0x700000, "attn_mask": 0x800000}

    def grid_size(self) -> tuple[int, int]:
        return (8, 8)

    def worker_core(self, core: Any) -> tuple[int, int]:
        return (18 + core.x, 18 + core.y)

    def buffer_address(self, name: str) -> int:
        return self.addresses[name]


def program(batch: int = 4, lse: bool = True, kv: DataType = DataType.bfloat8_b, block_size: int | None = None):
    paging = dict(block_size=block_size, num_blocks=batch * LLAMA["seq_len"] // block_size) if block_size else {}
    plan = make_plan(batch=batch, cur_pos=None, kv_dtype=kv, return_lse=lse, **paging, **LLAMA)
    return plan, build_program_for_device(plan, scale=128 ** -0.5, compute=ComputeSettings())


def test_device_program_carries_no_input_bytes_and_types_positions_int32() -> None:
    _, prog = program()
    assert all(t.data is None for t in prog.tensors)
    pos = prog.tensor("cur_pos")
    assert pos.element_type == "int32" and pos.layout == "row_major" and pos.page_size == 16


def test_flash_decode_program_converts_to_real_ttnn_descriptors(ttnn: Any) -> None:
    plan, prog = program()
    desc = dev.build_program_descriptor(prog, GridView())
    assert [k.kernel_source.rsplit("/", 1)[-1] for k in desc.kernels] == ["reader.cpp", "writer.cpp", "compute.cpp"]
    assert len(desc.cbs) == len(plan.circular_buffers)
    assert len(desc.semaphores) == plan.rounds
    # the writer's parent coordinates were resolved to NoC coordinates of the grid
    writer = next(k for k in prog.kernels if k.kind is KernelKind.WRITER)
    some_core = next(c for c, args in writer.runtime_args.items() if args)
    resolved = list(desc.kernels[1].runtime_args[some_core.x][some_core.y])
    assert all(isinstance(a, int) for a in resolved)
    assert list(desc.kernels[1].common_runtime_args)[0] == GridView().addresses["out"]


def test_positions_are_int32_on_the_device_and_kv_keeps_its_format(ttnn: Any) -> None:
    _, prog = program(batch=1, lse=False)
    spec = prog.tensor("cur_pos")
    assert dev.tensor_dtype(ttnn, spec) == ttnn.int32
    assert dev.tensor_dtype(ttnn, prog.tensor("k")) == ttnn.bfloat8_b


def test_paged_program_resolves_the_page_table_address_and_types_it_int32(ttnn: Any) -> None:
    plan, prog = program(batch=2, block_size=64)
    spec = prog.tensor("page_table")
    assert spec.data is None and spec.layout == "row_major" and spec.shape == (2, 8192 // 64)
    assert dev.tensor_dtype(ttnn, spec) == ttnn.int32
    dev.check_page_geometry(spec)  # one int32 row per user, as ttnn lays out [B, max_blocks]
    assert prog.tensor("k").shape == (2 * 128, 8, 64, 128)
    desc = dev.build_program_descriptor(prog, GridView())
    assert prog.kernels[0].kind is KernelKind.READER  # the descriptor keeps the kernels in order
    resolved = list(desc.kernels[0].common_runtime_args)
    assert resolved[:5] == [GridView().addresses[n] for n in ("q", "k", "v", "cur_pos", "page_table")]
    assert len(desc.cbs) == len(plan.circular_buffers) == 23  # 0..24 without the unused 22, + page table


def test_masked_program_streams_a_bf16_tile_mask_at_reader_common_arg_6(ttnn: Any) -> None:
    # Non-causal with a [1, 1, NH, S] mask: the mask is a bf16 tile tensor laid out as ttnn lays it,
    # its address is reader common runtime arg 6, the positions are S - 1 and the mask slots are a CB.
    plan = make_plan(batch=2, cur_pos=None, kv_dtype=DataType.bfloat8_b, is_causal=False, attn_mask_batch=1, **LLAMA)
    assert plan.cur_pos == (LLAMA["seq_len"] - 1,) * 2
    prog = build_program_for_device(plan, scale=128 ** -0.5, compute=ComputeSettings())
    spec = prog.tensor("attn_mask")
    assert spec.data is None and spec.layout == "tile" and spec.shape == (1, 1, 32, 8192)
    assert dev.tensor_dtype(ttnn, spec) == ttnn.bfloat16
    dev.check_page_geometry(spec)
    desc = dev.build_program_descriptor(prog, GridView())
    assert prog.kernels[0].kind is KernelKind.READER  # the descriptor keeps the kernels in order
    resolved = list(desc.kernels[0].common_runtime_args)
    assert resolved[6] == GridView().addresses["attn_mask"]
    assert any(cb.name == "attn_mask" for cb in plan.circular_buffers)
    assert len(desc.cbs) == len(plan.circular_buffers)


def test_multi_token_program_has_t_token_q_and_output_tensors_laid_out_as_ttnn(ttnn: Any) -> None:
    plan = make_plan(batch=3, cur_pos=None, kv_dtype=DataType.bfloat8_b, num_tokens=5, return_lse=True, **LLAMA)
    assert plan.q_tiles == 1 and plan.key_window == 0  # 5 tokens x 4 heads = 20 rows
    prog = build_program_for_device(plan, scale=128 ** -0.5, compute=ComputeSettings())
    assert prog.tensor("q").shape == (5, 3, 32, 128) and prog.tensor("out").shape == (5, 3, 32, 128)
    for name in ("q", "out", "lse"):
        dev.check_page_geometry(prog.tensor(name))
    desc = dev.build_program_descriptor(prog, GridView())
    assert len(desc.kernels) == 3
    args = {k.kind: k.named_compile_time_args for k in prog.kernels}
    assert args[KernelKind.READER]["tokens"] == 5
    assert (args[KernelKind.WRITER]["tokens"], args[KernelKind.WRITER]["batch"]) == (5, 3)
    assert args[KernelKind.COMPUTE]["tokens"] == 5 and args[KernelKind.COMPUTE]["guard_empty_rows"] == 1


def test_device_backend_refuses_without_a_device() -> None:
    assert not has_tenstorrent_device()  # this machine has no /dev/tenstorrent


def test_copy_only_fp32_cbs_are_unpacked_to_dest_on_the_device(ttnn: Any) -> None:
    # The compute kernel's fp32 statistics reach DST exactly only in UnpackToDestFp32 mode: the mode
    # list of the real ComputeConfigDescriptor, entry by entry. cb_probs (read by the matmuls) stays
    # Default; so do every CB the compute kernel never unpacks and every non-float32 CB.
    plan, prog = program()
    cfg = dev.build_program_descriptor(prog, GridView()).kernels[2].config
    modes = list(cfg.unpack_to_dest_mode)
    assert len(modes) == 32
    copy_only = {"scores", "max_bcast", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b", "alpha",
                 "partial_in"}
    by_index = {cb.index: cb for cb in plan.circular_buffers}
    for i, m in enumerate(modes):
        want = ttnn.UnpackToDestMode.UnpackToDestFp32 if i in by_index and by_index[i].name in copy_only \
            else ttnn.UnpackToDestMode.Default
        assert m == want, f"CB {i} ({by_index[i].name if i in by_index else 'none'}): {m}"
    assert all(by_index[i].data_format is DataType.float32 for i, m in enumerate(modes)
               if m == ttnn.UnpackToDestMode.UnpackToDestFp32)


def test_a_bf16_dst_program_unpacks_nothing_to_dest(ttnn: Any) -> None:
    plan = make_plan(batch=1, cur_pos=None, kv_dtype=DataType.bfloat8_b, fp32_dest_acc_en=False, **LLAMA)
    prog = build_program_for_device(plan, scale=0.1, compute=ComputeSettings(fp32_dest_acc_en=False))
    cfg = dev.build_program_descriptor(prog, GridView()).kernels[2].config
    assert len(cfg.unpack_to_dest_mode) == 0
