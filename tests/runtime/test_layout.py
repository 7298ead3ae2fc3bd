"""The modelled machine uses Wormhole's real L1 map, NoC coordinates and DRAM page interleaving."""

from pathlib import Path

import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.core.program_description import CoreCoord, KernelKind
from ttdecode.runtime import L1_UNRESERVED_BASE, noc_coord, run_program
from ttdecode.runtime import layout

from programs import copy_program, grid


def _wheel_mem_map_end():
    # Locate the wheel without importing ttnn: an import here, before ttdecode.ttnn_env has set the
    # mock cluster, would leave ttnn without chips for every later test of the session.
    import importlib.util
    spec = importlib.util.find_spec("ttnn")
    if spec is None or spec.origin is None:
        return None
    hdr = Path(spec.origin).parent / "tt_metal/hw/inc/internal/tt-1xx/wormhole/dev_mem_map.h"
    return hdr if hdr.exists() else None


def test_unreserved_l1_base_follows_the_wormhole_memory_map():
    assert L1_UNRESERVED_BASE == 0x19D60
    assert L1_UNRESERVED_BASE == ((layout.MEM_MAP_END + 69 * 1024 - 1) | 31) + 1


def test_mem_map_end_matches_the_installed_ttnn_header():
    import subprocess
    import tempfile

    from ttdecode.runtime import build

    hdr = _wheel_mem_map_end()
    if hdr is None:
        pytest.skip("ttnn wheel headers not available")
    cxx, _ = build.compiler()
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "m.cpp"
        src.write_text('#include <cstdio>\n#define MaxDMProcessorsPerCoreType 2\n#include "dev_mem_map.h"\n'
                       'int main() { std::printf("%d", (int)MEM_MAP_END); }\n')
        subprocess.run([cxx, "-I", str(hdr.parent), str(src), "-o", str(Path(d) / "m")], check=True)
        out = subprocess.run([str(Path(d) / "m")], capture_output=True, text=True, check=True).stdout
    assert int(out) == layout.MEM_MAP_END


def test_noc_coordinates_are_wormhole_translated_worker_coordinates():
    assert noc_coord(CoreCoord(0, 0)) == (18, 18)
    assert noc_coord(CoreCoord(7, 7)) == (25, 25)
    with pytest.raises(ValueError):
        noc_coord(CoreCoord(8, 0))


def test_pages_are_read_round_robin_over_the_twelve_banks():
    x = torch.randn(32, 24 * 32)  # 24 tiles on one core: two pages per bank
    res = run_program(copy_program(x, DataType.bfloat8_b, grid(1, 1)))
    reader = res.counters.kernel(CoreCoord(0, 0), KernelKind.READER)
    writer = res.counters.kernel(CoreCoord(0, 0), KernelKind.WRITER)
    assert reader.dram_read_bytes == (2 * 1088,) * 12
    assert writer.dram_write_bytes == (2 * 1088,) * 12
    assert [e[1] for e in reader.event_list() if e[0] == "read_dram"] == [i % 12 for i in range(24)]
    assert reader.tiles == {} and reader.cb_calls == 48
