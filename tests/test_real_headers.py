"""The host runtime's API against the REAL tt-metal headers of the ttnn 0.81.1 wheel: every API function
the runtime implements has the real signature (tools/check_signatures.py).

The kernels themselves are compiled against the real headers by tt-metal's own JIT on the mock Wormhole
(tests/mock/: every program the package builds, dataflow and compute kernels, the JIT's exact flags).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import check_signatures as sig

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tools" / "fixtures"


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
