"""16x32 tiles (two faces, rows 0-15) in the host runtime: what the chip does with them, and the
geometry hazards it has.

Expected values come from the documented behaviour, computed here independently: a 16x32 tile is
faces 0 and 1 of a 32x32 tile (rows 0-15; in memory the first half of the tile's image for float32
and bfloat16); a matmul with a 16x32 in0 gives the 16 rows of in0 x in1; copy_tile and unary_bcast
fill faces 0-1 of the DST tile. The unpackers and the packer are programmed for a tile shape by the
op inits (and compute_kernel_hw_startup), not by data-format reconfigs (tt-metal issue #49266).
"""

from __future__ import annotations

import pytest
import torch

from programs import crs, kernel_path
from ttdecode.formats import DataType, pack_tiles, tile_size, unpack_tiles
from ttdecode.program import (BufferAddress, CircularBuffer, ComputeSettings, CoreCoord, DramTensor, Kernel,
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


def program(op: str, inputs: dict[int, tuple[torch.Tensor, DataType, int]], n_out: int, kt: int = 1,
            defines: dict[str, str] | None = None, unpack_to_dest: tuple[int, ...] = ()) -> Program:
    """inputs: CB -> (values [rows, 32 n], format, tile rows). Output CB 16: float32 16x32 tiles."""
    where = crs([CORE])
    tensors, cbs, args = [], [], [len(inputs)]
    for cb, (x, dt, rows) in sorted(inputs.items()):
        n = x.shape[1] // 32 * (x.shape[0] // rows)
        data = half_image(x, dt) if rows == 16 else pack_tiles(x, dt)
        page = tile_size(dt) * rows // 32
        tensors.append(DramTensor(f"in{cb}", dt, page, n, tuple(x.shape), data=data))
        cbs.append(CircularBuffer(cb, where, dt, page, max(2, kt), tile_rows=rows))
        args += [BufferAddress(f"in{cb}"), cb, n]
    f32 = DataType.float32
    cbs.append(CircularBuffer(16, where, f32, tile_size(f32) // 2, 2, tile_rows=16))
    cbs.append(CircularBuffer(17, where, f32, tile_size(f32), 1))
    tensors.append(DramTensor("out", f32, tile_size(f32) // 2, n_out, (16, 32 * n_out), is_output=True))
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


def small_ints(*shape: int, seed: int) -> torch.Tensor:
    """Small integers: every product and sum below is exact in bf16 inputs and fp32 DST."""
    return torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(seed)).float()


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
    q = small_ints(16, 32, seed=6)
    k = small_ints(32, 32, seed=7)
    s = torch.randn(16, 32, generator=torch.Generator().manual_seed(8))
    inputs = {0: (q, DataType.bfloat16, 16), 1: (k, DataType.bfloat16, 32), 2: (s, DataType.float32, 16)}
    got = run_out(program("MM_COPY", inputs, 1, unpack_to_dest=(2,)), 1)[0]
    assert torch.equal(got, s)


def test_copy_under_a_copy_init_for_a_32x32_cb_of_the_same_format_is_caught():
    """tt-metal #49266: a format reconfig does not reprogram the tile shape, so a 16x32 CB copied
    after copy_init of a 32x32 CB would be unpacked as four faces on the chip."""
    q = small_ints(16, 32, seed=6)
    k = small_ints(32, 32, seed=7)
    s = torch.randn(16, 32, generator=torch.Generator().manual_seed(8))
    inputs = {0: (q, DataType.bfloat16, 16), 1: (k, DataType.bfloat16, 32), 2: (s, DataType.float32, 16),
              3: (torch.zeros(32, 32), DataType.float32, 32)}
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
