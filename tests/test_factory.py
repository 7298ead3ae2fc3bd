"""The program factory and the kernels' shared arithmetic (kernels/flash_decode/common.hpp) against the planner."""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from ttdecode.ops.flash_decode import plan as plan_mod
from ttdecode.ops.flash_decode.program_factory import build_program, decode_outputs, kernel_sources
from ttdecode.ops.flash_decode.program_inputs import FactoryError, page_table_bytes, positions_bytes
from ttdecode.core.formats import DataType
from ttdecode.core.split import piece_range, tree_children, tree_parent
from ttdecode.ops.flash_decode.plan import make_plan
from ttdecode.core.program_description import BufferAddress, ComputeSettings, KernelKind, NocX, NocY, unpack_to_dest_modes
from ttdecode.core.tensor import from_torch

KERNELS = Path(__file__).resolve().parent.parent / "kernels" / "flash_decode"


def _inputs(b: int, nh: int, nkv: int, s: int, d: int, kv: DataType = DataType.bfloat8_b, share: bool = False):
    g = torch.Generator().manual_seed(0)
    kb = 1 if share else b
    q = from_torch(torch.randn(1, b, nh, d, generator=g))
    k = from_torch(torch.randn(kb, nkv, s, d, generator=g), kv)
    v = from_torch(torch.randn(kb, nkv, s, d, generator=g), kv)
    return q, k, v


# ---- common.hpp mirrors ttdecode/core/split.py --------------------------------------------------

_DRIVER = textwrap.dedent(
    """
    #include <cstdio>
    #include <initializer_list>
    #include "common.hpp"
    using namespace flash_decode;
    int main() {
        const unsigned fixed_sizes[] = {0, 1, 2, 4, 8, 16};
        for (unsigned window : {0u, 1u, 7u, 32u, 33u, 100u, 300u, 5000u}) {
        for (int pos = -1; pos < 1100; pos += (pos < 100 ? 1 : 53)) {
            for (unsigned fixed : fixed_sizes) {
            for (unsigned floor : {1u, 4u}) {  // the split floor applies to dynamic chunks only
            for (unsigned cap : {2u, 4u, 8u, 16u, 32u}) {  // so does the cap (the short caps included)
                if (fixed && (floor > 1 || cap != 8)) continue;
                for (unsigned pieces : {1u, 2u, 3u, 5u, 7u, 8u, 16u, 33u, 64u}) {
                    for (unsigned i = 0; i < pieces; ++i) {
                        PieceRange r = piece_range(pos, fixed, pieces, i, window, floor, false, cap, 12u);
                        std::printf("%d %u %u %u %u %u %u %u %u %u %u %u %u %u %u\\n", pos, fixed, pieces, i,
                                    r.first_chunk, r.num_chunks, r.chunk_tiles, r.first_tile, r.num_tiles,
                                    tree_height(i, pieces), i ? tree_parent(i) : 0u,
                                    children_with_work(pos, fixed, pieces, i, window, floor, false, cap, 12u), window,
                                    floor, cap);
                    }
                }
            }
            }
            }
        }
        }
        return 0;
    }
    """
)


@pytest.fixture(scope="module")
def common_hpp_table(tmp_path_factory: pytest.TempPathFactory) -> list[list[int]]:
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.fail("no host C++ compiler (g++ or clang++) to build the common.hpp driver")
    d = tmp_path_factory.mktemp("common_hpp")
    (d / "driver.cpp").write_text(_DRIVER)
    build = subprocess.run([cxx, "-std=c++17", "-O1", f"-I{KERNELS}", str(d / "driver.cpp"), "-o", str(d / "driver")],
                           capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"kernels/flash_decode/common.hpp does not compile on the host:\n{build.stderr}")
    out = subprocess.run([str(d / "driver")], check=True, capture_output=True, text=True).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines()]


@pytest.mark.slow
def test_common_hpp_chunk_ranges_equal_plan_piece_range(common_hpp_table: list[list[int]]) -> None:
    assert len(common_hpp_table) > 10_000
    for pos, fixed, pieces, i, first_chunk, count, c, first_tile, ntiles, *_, window, floor, cap in common_hpp_table:
        r = piece_range(pos, fixed, pieces, i, window, floor, chunk_cap=cap)
        assert (r.num_chunks, r.chunk_tiles, r.num_tiles) == (count, c, ntiles), (pos, fixed, pieces, i)
        if count:
            assert (r.first_chunk, r.first_tile) == (first_chunk, first_tile), (pos, fixed, pieces, i)


def test_common_hpp_tree_equals_plan_tree_and_counts_children_with_work(common_hpp_table: list[list[int]]) -> None:
    for pos, fixed, pieces, i, _, _, _, _, _, height, parent, with_work, window, floor, cap in common_hpp_table:
        children = tree_children(i, pieces)
        assert height == len(children), (pieces, i)
        if i:
            assert parent == tree_parent(i)[1], (pieces, i)
        expected = sum(1 for _, child in children
                       if not piece_range(pos, fixed, pieces, child, window, floor, chunk_cap=cap).empty)
        assert with_work == expected, (pos, fixed, pieces, i)


def test_common_hpp_circular_buffer_indices_equal_plan_names() -> None:
    text = (KERNELS / "common.hpp").read_text()
    in_kernels = {m.group(1): int(m.group(2)) for m in re.finditer(r"constexpr uint32_t cb_(\w+) = (\d+);", text)}
    specs = plan_mod.flash_decode_cbs(q_tiles=1, d_tiles=4, dv_tiles=4, max_chunk_tiles=8,
                                      kv_dtype=DataType.bfloat8_b, batch=1, recv_areas=2, max_blocks=4,
                                      attention_sink=True, attn_mask=True, prescale_q=True, piece_views=3,
                                      softmax_chunks=2)
    assert in_kernels == {cb.name: cb.index for cb in specs}
    # a contiguous cache without a sink or a mask has every buffer but the page-table row, the sink
    # tiles and the attn_mask slots; a scale other than +-2^k has no scaled Q; a plan that is not bank-local
    # no piece views; one chunk per softmax update no block's keys
    contiguous = plan_mod.flash_decode_cbs(q_tiles=1, d_tiles=4, dv_tiles=4, max_chunk_tiles=8,
                                           kv_dtype=DataType.bfloat8_b, batch=1, recv_areas=2)
    assert {cb.name for cb in specs} - {cb.name for cb in contiguous} == {"page_table", "sink", "attn_mask", "q_scaled",
                                                                    "view_compute", "view_writer", "keys"}


# ---- the program ----------------------------------------------------------------------------------


def test_program_has_three_kernels_on_exactly_the_cores_that_run_pieces() -> None:
    p = make_plan(batch=3, num_q_heads=8, num_kv_heads=2, seq_len=512, head_dim=64, cur_pos=[5, 300, -1],
                  grid=(4, 2), max_cores_per_head_batch=4)
    q, k, v = _inputs(3, 8, 2, 512, 64)
    prog = build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=0.125, compute=ComputeSettings())
    kinds = sorted(kk.kind.value for kk in prog.kernels)
    assert kinds == ["compute", "reader", "writer"]
    active = set(p.active_cores)
    for kk in prog.kernels:
        assert set(kk.cores.cores()) == active
        assert set(kk.runtime_args) == active
        assert Path(kk.source) == kernel_sources()[kk.name]
    for cb in prog.circular_buffers:
        assert set(cb.cores.cores()) == active
    assert [s.id for s in prog.semaphores] == list(range(p.rounds))


def test_writer_args_point_each_piece_at_its_parents_core_and_area() -> None:
    p = make_plan(batch=2, num_q_heads=32, num_kv_heads=8, seq_len=1024, head_dim=128, cur_pos=[1000, 17],
                  grid=(8, 4), max_cores_per_head_batch=16)
    q, k, v = _inputs(2, 32, 8, 1024, 128)
    prog = build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=0.1, compute=ComputeSettings())
    writer = next(kk for kk in prog.kernels if kk.kind is KernelKind.WRITER)
    reader = next(kk for kk in prog.kernels if kk.kind is KernelKind.READER)
    compute = next(kk for kk in prog.kernels if kk.kind is KernelKind.COMPUTE)
    seen = set()
    for core, pieces in p.core_pieces.items():
        if not pieces:
            continue
        w, r, c = writer.runtime_args[core], reader.runtime_args[core], compute.runtime_args[core]
        assert w[:1] == [len(pieces)] and r[:1] == [len(pieces)]
        assert c[0] == len(pieces)
        for slot, piece in enumerate(pieces):
            args = w[1 + 6 * slot: 7 + 6 * slot]
            assert args[:3] == [piece.user, piece.kv_head, piece.index]
            assert r[1 + 3 * slot: 4 + 3 * slot] == [piece.user, piece.kv_head, piece.index]
            assert c[1 + 2 * slot: 3 + 2 * slot] == [piece.user, piece.index]
            if piece.index == 0:
                assert args[3:] == [0, 0, 0]
            else:
                assert args[3:] == [NocX(piece.parent_core), NocY(piece.parent_core), piece.parent_area]
            seen.add((piece.user, piece.kv_head, piece.index))
    assert len(seen) == 2 * 8 * p.pieces_per_work
    # the addresses are common runtime args (the same on every core; patched once per call)
    assert writer.common_runtime_args == [BufferAddress("out"), 0]
    assert reader.common_runtime_args == [BufferAddress("q"), BufferAddress("k"), BufferAddress("v"),
                                          BufferAddress("cur_pos"), 0, 0, 0]


def test_tensors_have_interleaved_page_geometry_and_lse_only_when_asked() -> None:
    for lse in (False, True):
        p = make_plan(batch=2, num_q_heads=48, num_kv_heads=1, seq_len=256, head_dim=64, cur_pos=[3, 255],
                      grid=(2, 2), return_lse=lse, kv_dtype=DataType.bfloat4_b)
        q, k, v = _inputs(2, 48, 1, 256, 64, DataType.bfloat4_b)
        prog = build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=0.125, compute=ComputeSettings())
        geo = {t.name: (t.page_size, t.num_pages, t.layout, t.is_output) for t in prog.tensors}
        assert geo["q"] == (2048, 2 * 2 * 2, "tile", False)
        assert geo["k"] == (576, 2 * 8 * 2, "tile", False)
        assert geo["cur_pos"] == (8, 1, "row_major", False)
        assert geo["out"] == (2048, 2 * 2 * 2, "tile", True)
        assert ("lse" in geo) == lse
        if lse:
            assert geo["lse"] == (2 * 32 * 4, 2, "row_major", True)


def test_positions_page_is_little_endian_int32_from_list_or_tensor() -> None:
    p = make_plan(batch=3, num_q_heads=4, num_kv_heads=1, seq_len=128, head_dim=32, cur_pos=None, grid=(2, 1))
    a = positions_bytes(p, [0, -1, 127])
    b = positions_bytes(p, torch.tensor([0, -1, 127], dtype=torch.int32))
    assert a == b == np.array([0, -1, 127], dtype="<i4").tobytes()
    with pytest.raises(FactoryError, match="cur_pos_source"):
        positions_bytes(p, None)
    with pytest.raises(FactoryError, match=r"cur_pos_source\[2\]"):
        positions_bytes(p, [0, 0, 128])
    with pytest.raises(FactoryError, match="3 positions"):
        positions_bytes(p, [0, 0])


def test_build_program_names_the_argument_that_does_not_match_the_plan() -> None:
    p = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=256, head_dim=64, cur_pos=[10], grid=(2, 1))
    q, k, v = _inputs(1, 8, 1, 256, 64)
    with pytest.raises(FactoryError, match="^k: expected bfloat8_b"):
        build_program(p, q=q, k=from_torch(torch.zeros(1, 1, 256, 64)), v=v, cur_pos_source=None, scale=1.0,
                      compute=ComputeSettings())
    with pytest.raises(FactoryError, match=r"^v: expected shape \[1, 1, 256, 64\]"):
        build_program(p, q=q, k=k, v=from_torch(torch.zeros(1, 1, 128, 64), DataType.bfloat8_b),
                      cur_pos_source=None, scale=1.0, compute=ComputeSettings())
    with pytest.raises(FactoryError, match="^compute: fp32_dest_acc_en=False"):
        build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=1.0,
                      compute=ComputeSettings(fp32_dest_acc_en=False))
    with pytest.raises(FactoryError, match="^scale"):
        build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=float("nan"), compute=ComputeSettings())
    with pytest.raises(FactoryError, match="differ from the plan"):
        build_program(p, q=q, k=k, v=v, cur_pos_source=[11], scale=1.0, compute=ComputeSettings())


def test_only_the_copy_read_fp32_cbs_are_unpacked_to_dest_and_a_callers_modes_are_refused() -> None:
    p = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=256, head_dim=64, cur_pos=[200], grid=(2, 1))
    q, k, v = _inputs(1, 8, 1, 256, 64)
    prog = build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=0.1, compute=ComputeSettings())
    compute = next(k for k in prog.kernels if k.kind is KernelKind.COMPUTE).compute
    names = {cb.index: cb.name for cb in p.circular_buffers}
    assert sorted(names[i] for i in compute.unpack_to_dest_cbs) == sorted(
        ["scores", "max_bcast", "max_a", "max_b", "sum_a", "sum_b", "acc_a", "acc_b", "alpha", "partial_in"])
    assert "probs" not in {names[i] for i in compute.unpack_to_dest_cbs}  # the matmuls read it
    with pytest.raises(FactoryError, match="^compute: unpack_to_dest_mode is set by the FlashDecode program"):
        build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=0.1,
                      compute=ComputeSettings(unpack_to_dest_mode=unpack_to_dest_modes([9])))


def test_decode_outputs_keeps_the_first_g_lse_values_of_each_group_row() -> None:
    p = make_plan(batch=2, num_q_heads=6, num_kv_heads=2, seq_len=128, head_dim=32, cur_pos=[1, 2],
                  grid=(2, 1), return_lse=True)
    rows = np.full((2 * 2, 32), np.nan, dtype="<f4")
    for b in range(2):
        for h in range(2):
            rows[b * 2 + h, :3] = [100 * b + 10 * h + r for r in range(3)]
    out_img = from_torch(torch.arange(2 * 6 * 32, dtype=torch.float32).reshape(1, 2, 6, 32)).data
    out, lse = decode_outputs(p, {"out": out_img, "lse": rows.tobytes()})
    assert out.dtype == torch.bfloat16 and out.shape == (1, 2, 6, 32)
    assert lse.tolist() == [[[0, 1, 2, 10, 11, 12], [100, 101, 102, 110, 111, 112]]]


# ---- the paged cache ------------------------------------------------------------------------------


def _paged_plan(**kw):
    args = dict(batch=2, num_q_heads=8, num_kv_heads=2, seq_len=256, head_dim=64, cur_pos=[200, 31], grid=(4, 2),
                max_cores_per_head_batch=4, block_size=64, num_blocks=10)
    args.update(kw)
    return make_plan(**args)


def _paged_inputs(p, kv: DataType = DataType.bfloat8_b):
    g = torch.Generator().manual_seed(1)
    q = from_torch(torch.randn(1, p.batch, p.num_q_heads, p.head_dim, generator=g))
    k = from_torch(torch.randn(p.num_blocks, p.num_kv_heads, p.block_size, p.head_dim, generator=g), kv)
    v = from_torch(torch.randn(p.num_blocks, p.num_kv_heads, p.block_size, p.head_dim_v, generator=g), kv)
    return q, k, v


def test_paged_program_carries_the_page_table_and_the_block_geometry() -> None:
    p = _paged_plan()
    q, k, v = _paged_inputs(p)
    table = torch.tensor([[9, 0, 4, 2], [1, 1, 8, 3]], dtype=torch.int32)
    prog = build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=0.125, compute=ComputeSettings(),
                         page_table=table)
    geo = {t.name: (t.page_size, t.num_pages, t.shape, t.layout, t.element_type) for t in prog.tensors}
    assert geo["k"] == (1088, 10 * 2 * 2 * 2, (10, 2, 64, 64), "tile", None)
    assert geo["v"] == (1088, 10 * 2 * 2 * 2, (10, 2, 64, 64), "tile", None)
    assert geo["page_table"] == (16, 2, (2, 4), "row_major", "int32")
    assert prog.tensor("page_table").data == np.array([[9, 0, 4, 2], [1, 1, 8, 3]], dtype="<i4").tobytes()
    reader = next(kk for kk in prog.kernels if kk.kind is KernelKind.READER)
    ct = reader.named_compile_time_args
    assert (ct["paged"], ct["block_tiles"], ct["max_blocks"]) == (1, 2, 4)  # blocks of 64 keys, 4 per user
    assert reader.common_runtime_args[4] == BufferAddress("page_table")
    assert ct["num_blocks"] == 10 and ct["positions_in_args"] == 0
    # the page-table row CB: 4 int32 rounded up to 32 B, counted in the plan's L1
    cb = next(c for c in p.circular_buffers if c.name == "page_table")
    assert (cb.index, cb.page_size, cb.num_pages) == (23, 32, 1)
    contiguous = make_plan(batch=2, num_q_heads=8, num_kv_heads=2, seq_len=256, head_dim=64, cur_pos=[200, 31],
                           grid=(4, 2), max_cores_per_head_batch=4)
    assert p.l1_bytes_per_core == contiguous.l1_bytes_per_core + 32
    assert p.pieces == contiguous.pieces  # chunks and pieces count logical key tiles either way


def test_contiguous_program_has_no_page_table() -> None:
    p = make_plan(batch=1, num_q_heads=8, num_kv_heads=1, seq_len=256, head_dim=64, cur_pos=[10], grid=(2, 1))
    q, k, v = _inputs(1, 8, 1, 256, 64)
    prog = build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=1.0, compute=ComputeSettings())
    assert "page_table" not in {t.name for t in prog.tensors}
    reader = next(kk for kk in prog.kernels if kk.kind is KernelKind.READER)
    ct = reader.named_compile_time_args
    assert (ct["paged"], ct["block_tiles"], ct["max_blocks"]) == (0, 0, 0)
    with pytest.raises(FactoryError, match="^page_table: expected None"):
        build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=1.0, compute=ComputeSettings(),
                      page_table=torch.zeros(1, 4, dtype=torch.int32))


@pytest.mark.parametrize(
    "table, message",
    [
        (None, r"^page_table: expected an integer torch tensor \[2, 4\].*got NoneType"),
        (torch.zeros(2, 4), r"^page_table: expected an integer torch tensor .*got torch.float32"),
        (torch.zeros(2, 5, dtype=torch.int32), r"^page_table: expected shape \[2, 4\].*got \[2, 5\]"),
        (torch.tensor([[0, 1, 2, 3], [10, 5, 0, 0]]), r"^page_table\[1, 0\]: expected a block id in 0..9 \(user 1 at position 31 reads it\), got 10"),
        (torch.tensor([[0, 1, -1, 3], [4, 5, 0, 0]]), r"^page_table\[0, 2\]: expected a block id in 0..9 \(user 0 at position 200 reads it\), got -1"),
        (torch.tensor([[0, 1, 2, 3], [4, 1 << 31, 0, 0]]), r"^page_table\[1, 1\]: expected an int32 value, got 2147483648"),
    ],
)
def test_bad_page_tables_are_refused_naming_the_entry(table, message: str) -> None:
    p = _paged_plan()
    with pytest.raises(FactoryError, match=message):
        page_table_bytes(p, table)


def test_paged_k_must_have_the_block_shape() -> None:
    p = _paged_plan()
    q, _, v = _paged_inputs(p)
    k = from_torch(torch.zeros(2, 2, 256, 64), DataType.bfloat8_b)  # a contiguous cache
    with pytest.raises(FactoryError, match=r"^k: expected shape \[10, 2, 64, 64\]"):
        build_program(p, q=q, k=k, v=v, cur_pos_source=None, scale=1.0, compute=ComputeSettings(),
                      page_table=torch.zeros(2, 4, dtype=torch.int32))
