"""The C++ tile codec (ttdecode/runtime/src/tile_formats.hpp) against the Python one, byte for byte.

A small harness is compiled with g++ -std=c++17 into a temp dir; it packs row-major float tiles
or unpacks tile images read from a file, and the results are compared with ttdecode.core.formats.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from ttdecode.core import formats as F
from ttdecode.core.formats import DataType

HEADER_DIR = Path(__file__).resolve().parents[1] / "ttdecode" / "runtime" / "src"
CXX = shutil.which("g++")

HARNESS = r"""
#include "tile_formats.hpp"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace ttdecode::formats;

// usage: harness pack|unpack FMT NTILES IN OUT   |   harness size FMT   |   harness index R C
int main(int argc, char** argv) {
    if (argc < 3) return 2;
    const std::string mode = argv[1];
    if (mode == "index") {
        std::printf("%u\n", tile_order_index(std::atoi(argv[2]), std::atoi(argv[3])));
        return 0;
    }
    const unsigned f = static_cast<unsigned>(std::atoi(argv[2]));
    if (!is_valid_format(f)) {
        try { (void)tile_size_bytes(static_cast<DataFormat>(f)); } catch (const std::invalid_argument& e) {
            std::printf("%s\n", e.what());
            return 3;
        }
        return 4;
    }
    const DataFormat fmt = static_cast<DataFormat>(f);
    if (mode == "size") { std::printf("%u\n", tile_size_bytes(fmt)); return 0; }
    const size_t ntiles = std::strtoul(argv[3], nullptr, 10);
    const size_t tsize = tile_size_bytes(fmt);
    const bool pack = mode == "pack";
    const size_t in_bytes = ntiles * (pack ? kTileValues * 4 : tsize);
    const size_t out_bytes = ntiles * (pack ? tsize : kTileValues * 4);
    std::vector<uint8_t> in(in_bytes), out(out_bytes, 0xA5);
    FILE* fi = std::fopen(argv[4], "rb");
    if (!fi || std::fread(in.data(), 1, in_bytes, fi) != in_bytes) return 5;
    std::fclose(fi);
    for (size_t t = 0; t < ntiles; ++t) {
        if (pack) {
            float vals[kTileValues];
            std::memcpy(vals, in.data() + t * kTileValues * 4, sizeof vals);
            pack_tile(fmt, vals, out.data() + t * tsize);
        } else {
            float vals[kTileValues];
            unpack_tile(fmt, in.data() + t * tsize, vals);
            std::memcpy(out.data() + t * kTileValues * 4, vals, sizeof vals);
        }
    }
    FILE* fo = std::fopen(argv[5], "wb");
    if (!fo || std::fwrite(out.data(), 1, out_bytes, fo) != out_bytes) return 6;
    std::fclose(fo);
    return 0;
}
"""

pytestmark = pytest.mark.skipif(CXX is None, reason="g++ is not on PATH: the C++ tile codec cannot be compiled")

ALL = list(DataType)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tile_formats_cpp")
    src = d / "harness.cpp"
    src.write_text(HARNESS)
    exe = d / "harness"
    cmd = [CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Wpedantic", "-Wconversion", "-Wshadow", "-Werror",
           f"-I{HEADER_DIR}", str(src), "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"compile failed:\n{res.stderr}"
    return exe


def run(harness: Path, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(harness), *map(str, args)], capture_output=True, text=True, timeout=60)


def cpp_pack(harness: Path, tmp_path: Path, tiles: np.ndarray, dtype: DataType) -> bytes:
    """tiles: float32[N, 32, 32] row-major -> C++ tile images."""
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(np.ascontiguousarray(tiles, dtype=np.float32).tobytes())
    res = run(harness, "pack", F.format_id(dtype), tiles.shape[0], src, dst)
    assert res.returncode == 0, res.stdout + res.stderr
    return dst.read_bytes()


def cpp_unpack(harness: Path, tmp_path: Path, data: bytes, ntiles: int, dtype: DataType) -> np.ndarray:
    """C++ tile images -> float32[N, 32, 32] row-major."""
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(data)
    res = run(harness, "unpack", F.format_id(dtype), ntiles, src, dst)
    assert res.returncode == 0, res.stdout + res.stderr
    return np.frombuffer(dst.read_bytes(), dtype=np.float32).reshape(ntiles, 32, 32)


def mixed_tiles(ntiles: int, seed: int) -> np.ndarray:
    """Random tiles: N(0,1) with outliers, random bit patterns (NaN, inf, denormals), narrow
    exponent bands, zeros and exact rounding ties."""
    rng = np.random.default_rng(seed)
    parts = []
    x = rng.standard_normal((ntiles, 32, 32)).astype(np.float32)
    x[rng.random(x.shape) < 0.001] *= 10
    parts.append(x)
    parts.append(rng.integers(0, 2**32, size=(ntiles, 32, 32), dtype=np.uint64).astype(np.uint32).view(np.float32))
    e = np.clip(rng.integers(0, 256, size=(ntiles, 32, 1)) + rng.integers(-3, 1, size=(ntiles, 32, 32)), 0, 255)
    b = (rng.integers(0, 2, size=e.shape).astype(np.uint32) << 31) | (e.astype(np.uint32) << 23)
    b |= rng.integers(0, 1 << 23, size=e.shape).astype(np.uint32)
    parts.append(b.view(np.float32))
    ties = (rng.integers(0, 1 << 12, size=(ntiles, 32, 32)) / 1024.0 + 1).astype(np.float32)
    ties[:, ::3, :] = 0.0
    parts.append(ties)
    return np.concatenate(parts)


def test_cpp_tile_sizes_and_enum_numbering(harness: Path) -> None:
    assert [F.format_id(d) for d in ALL] == [0, 1, 2, 3]
    for dtype in ALL:
        assert run(harness, "size", F.format_id(dtype)).stdout.strip() == str(F.tile_size(dtype))
    res = run(harness, "size", 7)
    assert res.returncode == 3 and "unknown DataFormat 7" in res.stdout


def test_cpp_tile_order_index_matches_python_tilize(harness: Path) -> None:
    order = F.tilize(torch.arange(1024).reshape(32, 32))[0]  # order[i] = row-major index at tile position i
    for r, c in [(0, 0), (0, 17), (15, 15), (16, 3), (20, 30), (31, 31)]:
        assert int(run(harness, "index", r, c).stdout) == int((order == 32 * r + c).nonzero()[0, 0])


@pytest.mark.parametrize("dtype", ALL, ids=[d.value for d in ALL])
def test_cpp_pack_matches_python_bytes(harness: Path, tmp_path: Path, dtype: DataType) -> None:
    tiles = mixed_tiles(8, seed=ALL.index(dtype))
    expected = F.pack_tiles(torch.from_numpy(tiles.copy()), dtype)
    ours = cpp_pack(harness, tmp_path, tiles, dtype)
    assert len(ours) == len(expected)
    diff = np.flatnonzero(np.frombuffer(ours, np.uint8) != np.frombuffer(expected, np.uint8))
    assert diff.size == 0, f"{diff.size} bytes differ, first at {diff[:8].tolist()}"


@pytest.mark.parametrize("dtype", ALL, ids=[d.value for d in ALL])
def test_cpp_unpack_matches_python_on_arbitrary_bytes(harness: Path, tmp_path: Path, dtype: DataType) -> None:
    ntiles = 64
    data = np.random.default_rng(100 + ALL.index(dtype)).integers(0, 256, size=ntiles * F.tile_size(dtype), dtype=np.uint8)
    if dtype is DataType.bfloat8_b:  # also every (exponent, code) pair: 256 x 256 values = 64 tiles
        img = data.reshape(ntiles, -1)
        img[:, :64] = np.arange(256, dtype=np.uint8).repeat(16).reshape(ntiles, 64)
        img[:, 64:] = np.tile(np.arange(256, dtype=np.uint8), 256).reshape(ntiles, 1024)
    expected = F.unpack_tiles(data.tobytes(), dtype, (ntiles, 32, 32)).numpy()
    ours = cpp_unpack(harness, tmp_path, data.tobytes(), ntiles, dtype)
    assert np.array_equal(ours.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("dtype", ALL, ids=[d.value for d in ALL])
def test_cpp_round_trip_equals_python_quantize(harness: Path, tmp_path: Path, dtype: DataType) -> None:
    tiles = mixed_tiles(4, seed=200 + ALL.index(dtype))
    back = cpp_unpack(harness, tmp_path, cpp_pack(harness, tmp_path, tiles, dtype), tiles.shape[0], dtype)
    expected = F.quantize(torch.from_numpy(tiles.copy()), dtype).numpy()
    assert np.array_equal(back.view(np.uint32), expected.view(np.uint32))
