"""The kernels and the host runtime's API against the REAL tt-metal headers of the ttnn 0.81.1 wheel.

1. Every dataflow kernel the project ships compiles with clang-19 for riscv32 the way the device JIT
   compiles it (tools/compile_real.py). Missing clang-19 is a failure with the install instruction
   (`apt-get install -y clang-19 g++-riscv64-linux-gnu`), never a skip.
2. Every API function the runtime implements has the real signature (tools/check_signatures.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import check_signatures as sig
from tools import compile_real as cr

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "kernels"
FIXTURES = REPO / "tools" / "fixtures"


def _is_dataflow(path: Path) -> bool:
    text = path.read_text(errors="replace")
    return "api/dataflow/dataflow_api.h" in text and "api/compute/" not in text


def dataflow_kernels() -> list[tuple[Path, str | None]]:
    """(source, kind) of every shipped dataflow kernel and of the tools/ fixtures.

    kernels/*.cpp whose name says reader or writer; kernels/tests/**.cpp that include the dataflow API
    and no compute API (kind from the name, else None = compile as both).
    """
    found: list[tuple[Path, str | None]] = []
    for p in sorted((KERNELS / "flash_decode").glob("*.cpp")):
        name = p.name.lower()
        if "reader" in name or "writer" in name:
            found.append((p, cr.kind_of(p)))
    for p in sorted((KERNELS / "tests").rglob("*.cpp")) if (KERNELS / "tests").is_dir() else []:
        if _is_dataflow(p):
            kinds = [k for k in cr.KIND_SETTINGS if k in p.name.lower()]
            found.append((p, kinds[0] if len(kinds) == 1 else None))
    found += [(p, cr.kind_of(p)) for p in sorted(FIXTURES.glob("dataflow_*_fixture.cpp"))]
    return found


def _id(item: tuple[Path, str | None]) -> str:
    return str(item[0].relative_to(REPO))


def _toolchain_or_fail() -> None:
    try:
        cr.find_clang()
        cr.find_riscv_cxx_includes()
        cr.find_wheel()
    except cr.ToolchainMissing as exc:
        pytest.fail(f"the real-header compile check cannot run: {exc}")


def test_clang19_riscv_headers_and_the_wheel_are_installed() -> None:
    _toolchain_or_fail()


def test_the_fixture_kernels_are_discovered() -> None:
    names = {p.name for p, _ in dataflow_kernels()}
    assert {"dataflow_reader_fixture.cpp", "dataflow_writer_fixture.cpp"} <= names


@pytest.mark.parametrize("item", dataflow_kernels(), ids=_id)
def test_dataflow_kernel_compiles_against_the_real_headers(item: tuple[Path, str | None]) -> None:
    _toolchain_or_fail()
    source, kind = item
    ct_args, defines = cr.check_settings(source)
    named = cr.check_named_args(source)
    for k in [kind] if kind else sorted(cr.KIND_SETTINGS):
        res = cr.compile_kernel(source, k, ct_args, defines, named_compile_time_args=named or None)
        assert res.ok, res.summary()


def _kernel(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text('#include <stdint.h>\n#include "api/dataflow/dataflow_api.h"\n' + body)
    return p


def test_compile_time_args_reach_get_compile_time_arg_val() -> None:
    _toolchain_or_fail()
    src = FIXTURES / "dataflow_reader_fixture.cpp"
    assert cr.compile_kernel(src, "reader", [3, 4]).ok
    short = cr.compile_kernel(src, "reader", [3])
    assert not short.ok and "Index out of range" in short.diagnostics


def test_compile_time_arg_values_are_the_ones_given(tmp_path: Path) -> None:
    _toolchain_or_fail()
    src = _kernel(tmp_path, "r_reader.cpp", "void kernel_main() { static_assert(get_compile_time_arg_val(1) == 77); }\n")
    assert cr.compile_kernel(src, "reader", [0, 77]).ok
    assert not cr.compile_kernel(src, "reader", [0, 76]).ok


def test_defines_reach_the_kernel(tmp_path: Path) -> None:
    _toolchain_or_fail()
    src = _kernel(tmp_path, "d_writer.cpp", "#if NEEDED != 5\n#error NEEDED must be 5\n#endif\nvoid kernel_main() {}\n")
    assert cr.compile_kernel(src, "writer", [], {"NEEDED": "5"}).ok
    res = cr.compile_kernel(src, "writer", [], {"NEEDED": "4"})
    assert not res.ok and "NEEDED must be 5" in res.diagnostics


def test_reader_is_built_for_ncrisc_on_noc1_and_writer_for_brisc_on_noc0(tmp_path: Path) -> None:
    _toolchain_or_fail()
    src = _kernel(tmp_path, "n.cpp", "void kernel_main() { static_assert(noc_index == 1); }\n")
    reader = cr.compile_kernel(src, "reader")
    assert reader.ok, reader.summary()
    assert any(a.endswith("ncrisck.cc") for a in reader.command)
    writer = cr.compile_kernel(src, "writer")
    assert not writer.ok and any(a.endswith("brisck.cc") for a in writer.command)


def test_a_wrong_api_call_fails_to_compile(tmp_path: Path) -> None:
    _toolchain_or_fail()
    src = _kernel(tmp_path, "bad_reader.cpp", "void kernel_main() { noc_async_read(1u); }\n")
    res = cr.compile_kernel(src)
    assert not res.ok and "noc_async_read" in res.diagnostics


def test_cb_formats_feed_get_tile_size(tmp_path: Path) -> None:
    _toolchain_or_fail()
    src = _kernel(tmp_path, "t_reader.cpp", "void kernel_main() { static_assert(get_tile_size(3) == 1088); }\n")
    assert cr.compile_kernel(src, cb_formats={3: "bfloat8_b"}).ok
    assert not cr.compile_kernel(src).ok  # unnamed CBs are bfloat16 (2048 B)


def test_program_kernels_compile_with_their_own_args() -> None:
    _toolchain_or_fail()
    from ttdecode.formats import DataType
    from ttdecode.program import CircularBuffer, CoreCoord, CoreRangeSet, Kernel, KernelKind, Program

    cores = CoreRangeSet.of([CoreCoord(0, 0)])
    kernels = [
        Kernel("r", FIXTURES / "dataflow_reader_fixture.cpp", KernelKind.READER, cores, [0, 2], {"FIXTURE_EXTRA_READ": "1"}),
        Kernel("w", FIXTURES / "dataflow_writer_fixture.cpp", KernelKind.WRITER, cores, [1]),
    ]
    cbs = [CircularBuffer(0, cores, DataType.bfloat8_b, 1088, 2)]
    results = cr.compile_program_kernels(Program(kernels, cbs, [], []))
    assert [r.ok for r in results] == [True, True], "\n".join(r.summary() for r in results)
    assert "-DFIXTURE_EXTRA_READ=1" in results[0].command
    assert "-DKERNEL_COMPILE_TIME_ARGS=0,2" in results[0].command


def test_missing_clang_fails_with_the_install_instruction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLANG", raising=False)
    monkeypatch.setattr(cr.shutil, "which", lambda name: None)
    with pytest.raises(cr.ToolchainMissing, match=r"apt-get install -y clang-19 g\+\+-riscv64-linux-gnu"):
        cr.find_clang()


def test_missing_riscv_headers_fail_with_the_install_instruction(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cr, "RISCV_CXX_ROOT", tmp_path / "nowhere")
    with pytest.raises(cr.ToolchainMissing, match=r"apt-get install -y g\+\+-riscv64-linux-gnu"):
        cr.find_riscv_cxx_includes()


# ---- signatures ------------------------------------------------------------------------------------


def _write(dir_: Path, name: str, text: str) -> Path:
    dir_.mkdir(parents=True, exist_ok=True)
    p = dir_ / name
    p.write_text(text)
    return p


REAL_FAKE = """
#pragma once
// fake real header
namespace ckernel {
template <bool approx = false, int iters = 8>
ALWI void exp_tile(uint32_t idst, int vector_mode = (int)VectorMode::RC) { body(idst); }
ALWI void add_tiles(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst) {}
}
FORCE_INLINE void cb_wait_front(int32_t operand, int32_t num_pages) { wait(operand); cb_pop_front(1, 2); }
template <typename T>
FORCE_INLINE T get_arg_val(int arg_idx) { return T(); }
struct InterleavedAddrGenFast { uint32_t x; uint64_t get_noc_addr(const uint32_t id) const; };
uint64_t get_noc_addr(uint32_t noc_x, uint32_t noc_y, uint32_t addr, uint8_t noc = noc_index);
uint64_t get_noc_addr(uint32_t addr, uint8_t noc = noc_index);
void noc_semaphore_wait(volatile tt_l1_ptr uint32_t* sem_addr, uint32_t val);
"""


def _check(tmp_path: Path, ours_text: str, names: list[str]) -> dict[str, sig.Finding]:
    real = _write(tmp_path / "real", "api.h", REAL_FAKE)
    ours = _write(tmp_path / "ours", "api.h", ours_text)
    return {f.name: f for f in sig.compare(names, [ours], [real])}


def test_signatures_equal_up_to_names_attributes_and_spelling_are_ok(tmp_path: Path) -> None:
    ours = """
namespace ckernel {
template <bool APPROX = false, int N = 8>
inline void exp_tile(std::uint32_t dst, int mode = (int)VectorMode::RC);
}
inline void cb_wait_front(const std::int32_t cb, const int32_t n) {}
template <class U> inline U get_arg_val(int i);
std::uint64_t get_noc_addr(std::uint32_t a, uint8_t n = noc_index);
void noc_semaphore_wait(volatile uint32_t* s, uint32_t v);
"""
    got = _check(tmp_path, ours, ["exp_tile", "cb_wait_front", "get_arg_val", "get_noc_addr", "noc_semaphore_wait"])
    assert {n: f.status for n, f in got.items()} == dict.fromkeys(got, "ok")


def test_a_different_parameter_type_is_reported_with_both_declarations(tmp_path: Path) -> None:
    got = _check(tmp_path, "void cb_wait_front(uint32_t operand, int32_t num_pages);\n", ["cb_wait_front"])
    f = got["cb_wait_front"]
    assert f.status == "mismatch"
    text = f.report()
    assert "ours: void cb_wait_front(uint32_t operand, int32_t num_pages)" in text
    assert "real: FORCE_INLINE void cb_wait_front(int32_t operand, int32_t num_pages)" in text


def test_a_different_return_type_template_or_arity_is_a_mismatch(tmp_path: Path) -> None:
    ours = """
namespace ckernel {
template <bool approx = false> ALWI void exp_tile(uint32_t idst, int vector_mode = 0);
ALWI uint32_t add_tiles(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t e);
}
template <typename T> T get_arg_val(uint32_t i);
uint64_t get_noc_addr(uint32_t addr);
"""
    got = _check(tmp_path, ours, ["exp_tile", "add_tiles", "get_arg_val", "get_noc_addr"])
    assert {n: f.status for n, f in got.items()} == dict.fromkeys(got, "mismatch")


def test_the_namespace_is_part_of_the_signature(tmp_path: Path) -> None:
    got = _check(tmp_path, "void add_tiles(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t e);\n", ["add_tiles"])
    assert got["add_tiles"].status == "mismatch"
    assert "[namespace ckernel]" in got["add_tiles"].report()


def test_a_different_default_argument_is_reported_as_such(tmp_path: Path) -> None:
    got = _check(tmp_path, "uint64_t get_noc_addr(uint32_t addr, uint8_t noc = 0);\n", ["get_noc_addr"])
    assert got["get_noc_addr"].status == "default-args"


def test_missing_declarations_and_non_functions_are_named(tmp_path: Path) -> None:
    got = _check(tmp_path, "void only_ours(int);\n", ["only_ours", "add_tiles", "InterleavedAddrGenFast"])
    assert got["only_ours"].status == "missing-real"
    assert got["add_tiles"].status == "missing-ours"
    assert got["InterleavedAddrGenFast"].status == "not-a-function"


def test_calls_and_member_functions_are_not_taken_for_declarations(tmp_path: Path) -> None:
    real = _write(tmp_path / "real", "api.h", REAL_FAKE)
    decls = sig.scan_declarations(real, {"cb_pop_front", "get_noc_addr", "body"})
    assert [d.params for d in decls] == [("uint32_t", "uint32_t", "uint32_t", "uint8_t"), ("uint32_t", "uint8_t")]


def test_api_list_reads_names_and_rejects_garbage(tmp_path: Path) -> None:
    p = _write(tmp_path, "IMPLEMENTED_API.txt", "# c\nget_arg_val<T>\n\ncb_push_back  # x\n")
    assert sig.read_api_list(p) == ["get_arg_val", "cb_push_back"]
    _write(tmp_path, "IMPLEMENTED_API.txt", "void f(int)\n")
    with pytest.raises(ValueError, match=r"IMPLEMENTED_API.txt:1: expected one API name per line"):
        sig.read_api_list(p)


def test_fixture_declarations_match_the_real_wheel() -> None:
    names = sig.read_api_list(FIXTURES / "signatures" / "IMPLEMENTED_API.txt")
    ours = sig.headers_under([FIXTURES / "signatures"])
    findings = sig.compare(names, ours, sig.headers_under(sig.real_roots_default()))
    assert [f.status for f in findings] == ["ok"] * len(names), "\n".join(f.report() for f in findings)


def test_a_wrong_fixture_declaration_is_caught_against_the_real_wheel(tmp_path: Path) -> None:
    ours = _write(tmp_path, "x.h", "void noc_async_read_barrier(uint32_t noc = noc_index);\n")
    (f,) = sig.compare(["noc_async_read_barrier"], [ours], sig.headers_under(sig.real_roots_default()))
    assert f.status == "mismatch"
    assert re.search(r"real: .*void noc_async_read_barrier\(uint8_t noc = noc_index\)", f.report())


def test_runtime_api_matches_the_real_headers() -> None:
    """Every function in ttdecode/runtime/include/IMPLEMENTED_API.txt has the real 0.81.1 signature."""
    api_list = sig.API_LIST
    assert api_list.is_file(), (
        f"{api_list} is missing: the host runtime must list the API it implements, one name per line"
    )
    names = sig.read_api_list(api_list)
    findings = sig.compare(names, sig.headers_under([sig.OUR_INCLUDE]), sig.headers_under(sig.real_roots_default()))
    bad = [f for f in findings if f.status not in ("ok", "not-a-function")]
    assert not bad, "\n".join(f.report() for f in bad)
