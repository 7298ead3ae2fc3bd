"""16x32 tiles (two faces, rows 0-15) and 8x32 tiles (two faces of 8 rows) in the host runtime: what
the chip does with them, and the geometry hazards it has.

Expected values come from the documented behaviour, computed here independently: a 16x32 tile is
faces 0 and 1 of a 32x32 tile (rows 0-15; in memory the first half of the tile's image for float32
and bfloat16); an 8x32 tile is face 0's 8 rows of 16 datums, then face 1's (ttnn's Tile((8, 32)),
pinned against ttnn in tests/test_formats_ttnn.py); a matmul with a 16x32 (8x32) in0 gives the 16 (8)
rows of in0 x in1; copy_tile and unary_bcast fill those rows of faces 0-1 of the DST tile. The
unpackers and the packer are programmed for a tile shape by the op inits (and
compute_kernel_hw_startup), not by data-format reconfigs (tt-metal issue #49266); an unpacker's face
stride (8- or 16-row faces) only by compute_kernel_hw_startup and an (old, new) reconfig whose CBs
differ in tile shape (llk_unpack_common_api.h). Facts from the LLK of the ttnn 0.81.1 wheel: the
datacopy moves 16 rows per face whatever the face height; an unpack to DST leaves unpacker A's X-end
at a whole face (TEN-3868 workaround, cunpack_common.h), so a later 8x32 copy without copy_init reads
16 rows per face, of which rows 0-7 are still the tile's.
"""

from __future__ import annotations

import pytest
import torch

from programs import crs, kernel_path
from ttdecode.core.formats import DataType, pack_tiles, tile_size, unpack_tiles
from ttdecode.core.program_description import (BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, DramTensor, Kernel,
                              KernelKind, MathFidelity, Program, unpack_to_dest_modes)
from ttdecode.runtime import KernelError, run_program

CORE = CoreCoord(0, 0)


def half_image(x: torch.Tensor, dtype: DataType) -> bytes:
    """Byte image of `x: [16, 32 n]` as n 16x32 tiles: each the first half of the 32x32 tile image
    of x padded with zero rows (faces 0 and 1)."""
    n = x.shape[1] // 32
    full = pack_tiles(torch.cat([x, torch.zeros(16, x.shape[1])]), dtype)
    size = tile_size(dtype)
    return b"".join(full[t * size: t * size + size // 2] for t in range(n))


def half_values(data: bytes, dtype: DataType, n: int) -> torch.Tensor:
    """[n, 16, 32] values of n 16x32 tile images."""
    size = tile_size(dtype) // 2
    full = b"".join(data[t * size:(t + 1) * size] + bytes(size) for t in range(n))
    return unpack_tiles(full, dtype, (32, 32 * n)).reshape(32, n, 32).permute(1, 0, 2)[:, :16]


def eighth_image(x: torch.Tensor, dtype: DataType) -> bytes:
    """Byte image of `x: [8, 32 n]` as n 8x32 tiles, by hand: face 0 (rows 0-7, columns 0-15, row by
    row), then face 1 (columns 16-31); float32 or bfloat16 little-endian (bf16: the top 16 bits of the
    fp32 value, x holding bf16 values)."""
    assert dtype in (DataType.float32, DataType.bfloat16)
    out = []
    for t in range(x.shape[1] // 32):
        tile = x[:, 32 * t:32 * t + 32]
        faces = torch.cat([tile[:, :16].reshape(-1), tile[:, 16:].reshape(-1)]).float().contiguous()
        words = faces.view(torch.int32)
        out.append((words >> 16).to(torch.int16).numpy().tobytes() if dtype is DataType.bfloat16
                   else words.numpy().tobytes())
    return b"".join(out)


def eighth_values(data: bytes, n: int) -> torch.Tensor:
    """[n, 8, 32] values of n float32 8x32 tile images (the layout of eighth_image)."""
    v = torch.frombuffer(bytearray(data[:n * 1024]), dtype=torch.float32).reshape(n, 2, 8, 16)
    return torch.cat([v[:, 0], v[:, 1]], dim=2)


def program(op: str, inputs: dict[int, tuple[torch.Tensor, DataType, int]], n_out: int, kt: int = 1,
            defines: dict[str, str] | None = None, unpack_to_dest: tuple[int, ...] = (), out_rows: int = 16) -> Program:
    """inputs: CB -> (values [rows, 32 n], format, tile rows). Output CB 16: float32 tiles of `out_rows`
    rows (16 or 8)."""
    where = crs([CORE])
    tensors, cbs, args = [], [], [len(inputs)]
    for cb, (x, dt, rows) in sorted(inputs.items()):
        n = x.shape[1] // 32 * (x.shape[0] // rows)
        data = half_image(x, dt) if rows == 16 else eighth_image(x, dt) if rows == 8 else pack_tiles(x, dt)
        page = tile_size(dt) * rows // 32
        tensors.append(DramTensor(f"in{cb}", dt, page, n, tuple(x.shape), data=data))
        cbs.append(CircularBuffer(cb, where, dt, page, max(2, kt), tile_rows=rows))
        args += [BufferAddress(f"in{cb}"), cb, n]
    f32 = DataType.float32
    cbs.append(CircularBuffer(16, where, f32, tile_size(f32) * out_rows // 32, 2, tile_rows=out_rows))
    cbs.append(CircularBuffer(17, where, f32, tile_size(f32), 1))
    tensors.append(DramTensor("out", f32, tile_size(f32) * out_rows // 32, n_out, (out_rows, 32 * n_out),
                              is_output=True))
    reader = Kernel("inputs_reader", kernel_path("inputs_reader.cpp"), KernelKind.READER, where,
                    runtime_args={CORE: args})
    settings = ComputeSettings(math_fidelity=MathFidelity.HiFi4, fp32_dest_acc_en=True,
                               unpack_to_dest_mode=unpack_to_dest_modes(unpack_to_dest) if unpack_to_dest else ())
    compute = Kernel("half_tile_op", kernel_path("half_tile_op.cpp"), KernelKind.COMPUTE, where,
                     compile_time_args=[n_out, kt], defines={f"OP_{op}": "1", **(defines or {})},
                     runtime_args={CORE: []}, compute=settings)
    writer = Kernel("copy_writer", kernel_path("copy_writer.cpp"), KernelKind.WRITER, where, compile_time_args=[16],
                    runtime_args={CORE: [BufferAddress("out"), 0, n_out]})
    return Program([reader, compute, writer], cbs, [], tensors)


def run_out(prog: Program, n: int) -> torch.Tensor:
    return half_values(run_program(prog).tensors["out"], DataType.float32, n)


def run_out8(prog: Program, n: int) -> torch.Tensor:
    return eighth_values(run_program(prog).tensors["out"], n)


def small_ints(*shape: int, seed: int) -> torch.Tensor:
    """Small integers: every product and sum below is exact in bf16 inputs and fp32 DST."""
    return torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(seed)).float()


def mm_copy_inputs(rows: int, seeds: tuple[int, int, int]) -> dict[int, tuple[torch.Tensor, DataType, int]]:
    """MM_COPY's inputs: in0 Q (bf16, `rows`-row tiles), in1 K (bf16 32x32), in2 the tile copied after the
    matmul (float32, `rows`-row tiles)."""
    q = small_ints(rows, 32, seed=seeds[0])
    k = small_ints(32, 32, seed=seeds[1])
    s = torch.randn(rows, 32, generator=torch.Generator().manual_seed(seeds[2]))
    return {0: (q, DataType.bfloat16, rows), 1: (k, DataType.bfloat16, 32), 2: (s, DataType.float32, rows)}


def test_matmul_with_a_16x32_in0_gives_the_16_rows_of_the_product():
    kt = 2
    q = small_ints(16, 32 * kt, seed=1)  # in0: kt 16x32 tiles
    k = small_ints(32, 32 * kt, seed=2)  # in1: kt 32x32 tiles, read transposed
    prog = program("MATMUL", {0: (q, DataType.bfloat16, 16), 1: (k, DataType.bfloat16, 32)}, 1, kt=kt)
    got = run_out(prog, 1)[0]
    want = sum(q[:, 32 * j:32 * j + 32] @ k[:, 32 * j:32 * j + 32].T for j in range(kt))
    assert torch.equal(got, want)


def test_copy_of_a_16x32_float32_tile_is_exact_in_both_unpack_paths():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3))
    for u2d in ((), (0,)):
        got = run_out(program("COPY", {0: (x, DataType.float32, 16)}, 2, unpack_to_dest=u2d), 2)
        want = x.reshape(16, 2, 32).permute(1, 0, 2)
        if not u2d:  # through srcA with an fp32 DST: TF32 (10 mantissa bits, truncated)
            want = (want.view(torch.int32) & ~0x1FFF).view(torch.float32)
        assert torch.equal(got, want)


def test_unary_bcast_col_of_a_16x32_tile_fills_its_16_rows():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(4))
    got = run_out(program("BCAST_COL", {0: (x, DataType.float32, 16)}, 1, unpack_to_dest=(0,)), 1)[0]
    assert torch.equal(got, x[:, :1].expand(16, 32))


def test_sfpu_op_on_faces_0_and_1_of_a_16x32_tile_runs():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(5)) / 4
    got = run_out(program("EXP_ROWS", {0: (x, DataType.float32, 16)}, 1, unpack_to_dest=(0,)), 1)[0]
    torch.testing.assert_close(got, torch.exp(x), rtol=2e-6, atol=0)


def test_sfpu_op_on_faces_a_16x32_tile_does_not_fill_is_caught():
    x = torch.zeros(16, 32)
    prog = program("EXP_ROWS", {0: (x, DataType.float32, 16)}, 1, unpack_to_dest=(0,), defines={"EXP_ALL_FACES": "1"})
    with pytest.raises(KernelError, match=r"DST tile 0 holds no data in face\(s\) 2, 3"):
        run_program(prog)


def test_copy_after_a_matmul_reprogrammed_by_its_copy_init_is_right():
    inputs = mm_copy_inputs(16, (6, 7, 8))
    got = run_out(program("MM_COPY", inputs, 1, unpack_to_dest=(2,)), 1)[0]
    assert torch.equal(got, inputs[2][0])


def test_copy_under_a_copy_init_for_a_32x32_cb_of_the_same_format_is_caught():
    """tt-metal #49266: a format reconfig does not reprogram the tile shape, so a 16x32 CB copied
    after copy_init of a 32x32 CB would be unpacked as four faces on the chip."""
    inputs = {**mm_copy_inputs(16, (6, 7, 8)), 3: (torch.zeros(32, 32), DataType.float32, 32)}
    prog = program("MM_COPY", inputs, 1, unpack_to_dest=(2, 3), defines={"WRONG_SHAPE_COPY": "1"})
    with pytest.raises(KernelError, match=r"unpacker srcA is programmed for 32x32 tiles \(4 faces\) \(by copy_init\) "
                                          r"but CB 2 holds 16x32 tiles"):
        run_program(prog)


def test_pack_to_a_16x32_cb_with_the_packer_shaped_for_32x32_tiles_is_caught():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(9))
    prog = program("COPY", {0: (x, DataType.float32, 16)}, 1, unpack_to_dest=(0,), defines={"FULL_PACKER": "1"})
    with pytest.raises(KernelError, match=r"pack_tile: the packer is programmed for 32x32 tiles \(4 faces\)"):
        run_program(prog)


def test_pack_reconfig_with_tile_dims_reprograms_the_packer_for_16x32_tiles():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(9))
    prog = program("COPY", {0: (x, DataType.float32, 16)}, 1, unpack_to_dest=(0,),
                   defines={"FULL_PACKER_TILE_RECONFIG": "1"})
    assert torch.equal(run_out(prog, 1)[0], x)


def test_half_tiles_of_block_float_formats_are_refused_at_layout():
    x = small_ints(16, 32, seed=10)
    prog = program("COPY", {0: (x, DataType.bfloat8_b, 16)}, 1)
    with pytest.raises(ValueError, match=r"CB 0: 16x32 tiles of bfloat8_b are not modelled"):
        run_program(prog)


# ---- 8x32 tiles ------------------------------------------------------------------------------------


def test_matmul_with_an_8x32_in0_gives_the_8_rows_of_the_product():
    kt = 2
    q = small_ints(8, 32 * kt, seed=11)   # in0: kt 8x32 tiles
    k = small_ints(32, 32 * kt, seed=12)  # in1: kt 32x32 tiles, read transposed
    prog = program("MATMUL", {0: (q, DataType.bfloat16, 8), 1: (k, DataType.bfloat16, 32)}, 1, kt=kt, out_rows=8)
    got = run_out8(prog, 1)[0]
    want = sum(q[:, 32 * j:32 * j + 32] @ k[:, 32 * j:32 * j + 32].T for j in range(kt))
    assert torch.equal(got, want)


@pytest.mark.parametrize("once", [False, True])
def test_copy_of_8x32_float32_tiles_is_exact_in_both_unpack_paths(once: bool):
    """With copy_init before the first tile only, the later unpacks to DST run under the whole-face X-end
    the first one left (TEN-3868): rows 0-7 of each face are still the tile's, and only they are packed."""
    x = torch.randn(8, 96, generator=torch.Generator().manual_seed(13))
    for u2d in ((), (0,)):
        prog = program("COPY", {0: (x, DataType.float32, 8)}, 3, unpack_to_dest=u2d, out_rows=8,
                       defines={"COPY_INIT_ONCE": "1"} if once else None)
        got = run_out8(prog, 3)
        want = x.reshape(8, 3, 32).permute(1, 0, 2)
        if not u2d:  # through srcA with an fp32 DST: TF32 (10 mantissa bits, truncated)
            want = (want.view(torch.int32) & ~0x1FFF).view(torch.float32)
        assert torch.equal(got, want)


def test_a_bf16_8x32_tile_copied_into_dst_leaves_rows_8_15_holding_stale_source_rows():
    """The datacopy moves 16 rows per face: rows 8-15 of faces 0-1 get srcA's stale rows. Packed into a
    16x32 CB, they are not the zeros the DST was cleared to (NaN here: the runtime's garbage)."""
    x = small_ints(8, 32, seed=14)
    prog = program("COPY", {0: (x, DataType.bfloat16, 8)}, 1)  # output CB 16: 16x32 tiles
    got = run_out(prog, 1)[0]
    assert torch.equal(got[:8], x)
    assert torch.isnan(got[8:]).all()


def test_unary_bcast_col_of_an_8x32_tile_fills_its_8_rows():
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(15))
    for u2d in ((), (0,)):
        dt = DataType.float32 if u2d else DataType.bfloat16
        xin = x if u2d else x.to(torch.bfloat16).float()
        got = run_out8(program("BCAST_COL", {0: (xin, dt, 8)}, 1, unpack_to_dest=u2d, out_rows=8), 1)[0]
        assert torch.equal(got, xin[:, :1].expand(8, 32))


def test_sfpu_op_on_the_8_rows_of_an_8x32_tile_runs():
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(16)) / 4
    prog = program("EXP_ROWS", {0: (x, DataType.float32, 8)}, 1, unpack_to_dest=(0,), out_rows=8,
                   defines={"EXP_ITERATIONS": "4"})
    torch.testing.assert_close(run_out8(prog, 1)[0], torch.exp(x), rtol=2e-6, atol=0)


def test_sfpu_op_on_rows_an_8x32_tile_does_not_fill_is_caught():
    x = torch.zeros(8, 32)
    prog = program("EXP_ROWS", {0: (x, DataType.float32, 8)}, 1, unpack_to_dest=(0,), out_rows=8)
    with pytest.raises(KernelError, match=r"DST tile 0 holds no data in face\(s\) 0 \(rows 8-15\), 1 \(rows 8-15\)"):
        run_program(prog)


def test_copy_of_an_8x32_tile_after_a_geometry_aware_reconfig_is_right():
    inputs = mm_copy_inputs(8, (17, 18, 19))
    got = run_out8(program("MM_COPY", inputs, 1, unpack_to_dest=(2,), out_rows=8), 1)[0]
    assert torch.equal(got, inputs[2][0])


def test_copy_of_an_8x32_tile_under_a_16_row_face_stride_is_caught():
    """A plain reconfig keeps srcA's face stride of in1's 32x32 tiles: on the chip copy_init(in2) would
    read face 1 of the 8x32 tile 256 datums in, past the tile."""
    inputs = mm_copy_inputs(8, (17, 18, 19))
    prog = program("MM_COPY", inputs, 1, unpack_to_dest=(2,), out_rows=8, defines={"PLAIN_RECONFIG": "1"})
    with pytest.raises(KernelError, match=r"unpacker srcA's face stride is set for 16-row faces \(by "
                                          r"compute_kernel_hw_startup\) but CB 2 holds 8x32 tiles"):
        run_program(prog)


@pytest.mark.parametrize("dtype", [DataType.float32, DataType.bfloat16])
@pytest.mark.parametrize("rows", [8, 16])
def test_the_small_tile_images_here_are_ttnns_tile_layout(rows: int, dtype: DataType):
    """ttnn's host tilize with ttnn.Tile((rows, 32)) lays tiles out as half_image / eighth_image do (the
    images these tests feed the runtime and read back from it)."""
    import numpy as np

    from ttdecode.ttnn_env import import_ttnn, ttnn_unavailable_reason

    ttnn = import_ttnn()
    assert ttnn is not None, ttnn_unavailable_reason()
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(20)).to(torch.bfloat16).float()
    t = ttnn.from_torch(x.reshape(1, 1, rows, 64), dtype=getattr(ttnn, dtype.value), layout=ttnn.TILE_LAYOUT,
                        tile=ttnn.Tile((rows, 32)))
    got = np.from_dlpack(t.host_buffer().get_shard(ttnn.MeshCoordinate(0, 0))).view(np.uint8).tobytes()
    want = eighth_image(x, dtype) if rows == 8 else half_image(x, dtype)
    assert got == want
