"""Kernel libraries are cached by content: a second run compiles nothing; a changed input rebuilds."""

import subprocess

import pytest
import torch

from ttdecode.core.formats import DataType
from ttdecode.runtime import build, run_program

from programs import copy_program, grid


@pytest.mark.slow
def test_second_run_reuses_compiled_kernels_and_a_new_define_rebuilds(tmp_path, monkeypatch):
    monkeypatch.setenv("TTDECODE_CACHE", str(tmp_path))
    runner, _ = build.build_runner()  # built into the fresh cache (not a kernel)
    prog = copy_program(torch.randn(32, 64), DataType.bfloat16, grid(2, 1))
    run_program(prog)
    libs = sorted((tmp_path / "runtime" / "kernels").glob("*.so"))
    assert len(libs) == 2  # reader and writer

    calls = []
    real = build._run_compiler
    monkeypatch.setattr(build, "_run_compiler", lambda *a, **k: (calls.append(a[1]), real(*a, **k)))
    res = run_program(prog)
    assert calls == []
    assert res.tensors["y"] == prog.tensor("x").data
    assert sorted((tmp_path / "runtime" / "kernels").glob("*.so")) == libs

    prog.kernels[0].compile_time_args = [0]
    prog.kernels[0].defines["UNUSED_FLAG"] = "1"
    run_program(prog)
    assert len(calls) == 1 and "copy_reader" in calls[0]


def test_runner_fast_unpack_matches_the_formats_reference_bit_for_bit():
    runner, _ = build.build_runner()
    p = subprocess.run([str(runner), "--self-test"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "mismatches: 0" in p.stdout


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    try:
        build.compiler()
    except build.CompilerNotFound as e:
        assert "$CXX='/nonexistent/c++'" in str(e)
    else:
        raise AssertionError("expected CompilerNotFound")


def test_a_header_in_the_parent_kernels_directory_is_part_of_a_nested_kernels_cache_key(tmp_path):
    # kernels/combine/reader.cpp includes ../common.hpp: editing that header must rebuild it
    (tmp_path / "kernels" / "combine").mkdir(parents=True)
    header = tmp_path / "kernels" / "common.hpp"
    header.write_text("constexpr int x = 1;\n")
    source = tmp_path / "kernels" / "combine" / "reader.cpp"
    source.write_text('#include "../common.hpp"\nvoid kernel_main() {}\n')
    kb = build.KernelBuild(source=source, compile_time_args=(), defines=(), config_header="", label="reader")
    assert build.source_tree(source) == tmp_path / "kernels"

    def key() -> str:
        root = build.source_tree(source)
        trees = {root: build._tree_digest(root, (".cpp", ".hpp")), build.INCLUDE_DIR: b""}
        return kb.key("v", trees)

    before = key()
    header.write_text("constexpr int x = 2;  // changed\n")
    assert key() != before
