"""The JIT path is strict where it matters: deliberately broken copies of our FlashDecode compute
kernel (its compute.cpp or a header it includes) each fail to compile on the mock (with clang's
message), while tt-metal's own sdpa_flash_decode.cpp (compiled in place from the wheel, made strict
for this test) passes for the three TRISC builds. Each case in its own process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ttdecode.core.paths import kernels_dir
from ttdecode.testing.dry_run import jit_records

HERE = Path(__file__).resolve().parent

#: name -> (compute.cpp or a header it includes, under kernels/; a text in it; its broken replacement)
MUTATIONS = {
    "wrong_template_argument": ("flash_decode/online_softmax.hpp", "sfpu_reduce_init<PoolType::MAX, stat_format>()",
                                "sfpu_reduce_init<ReduceDim::REDUCE_ROW, stat_format>()"),
    "missing_include": ("shared/sfpu_rows.hpp", '#include "api/compute/eltwise_unary/recip.h"\n', ""),
    "wrong_argument_count": ("flash_decode/online_softmax.hpp", "matmul_tiles(cb_probs, cb_ones, j, 0, n);",
                             "matmul_tiles(cb_probs, cb_ones, j, 0);"),
    "misspelled_llk_call": ("shared/sfpu_rows.hpp", "calculate_reciprocal, (APPROX, DST_ACCUM_MODE, steps)",
                            "calculate_reciprocl, (APPROX, DST_ACCUM_MODE, steps)"),
    "sfpu_macro_dropped_parameter": ("shared/sfpu_rows.hpp",
                                     "(APPROX, MUL_UNARY, steps, DST_ACCUM_MODE), idst, mode, bits)));",
                                     "(APPROX, MUL_UNARY, steps, DST_ACCUM_MODE), idst, mode)));"),
}

CHILD = """
import sys
sys.path.insert(0, {here!r})
from pathlib import Path
from ttdecode.testing.dry_run import dry_run, emit
import mock_programs as P
program, _ = P.flash_decode_program("gqa_d64")
for k in program.kernels:
    if k.kind.value == "compute":
        k.source = Path({source!r})
emit(dry_run(program, launches=1))
"""


def test_unbroken_copy_of_our_kernels_compiles(run_mock, tmp_path: Path) -> None:
    """The control of the mutation tests: the same copy, unchanged, is accepted."""
    tree = tmp_path / "kernels"
    shutil.copytree(kernels_dir(), tree, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    src = tree / "flash_decode" / "compute.cpp"
    # its own JIT cache: a build logged only here must not turn into a cache hit of another test
    r = run_mock(CHILD.format(here=str(HERE), source=str(src)), timeout=300, jit_log=str(tmp_path / "jit.log"),
                 cache=tmp_path / "cache")
    assert r.returncode == 0 and r.result is not None, r.describe()
    assert r.result["accepted"], r.result["error"]


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_broken_copy_of_our_compute_kernel_fails_to_compile(run_mock, mock_run, tmp_path: Path, name: str) -> None:
    tree = tmp_path / "kernels"
    shutil.copytree(kernels_dir(), tree, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    src = tree / "flash_decode" / "compute.cpp"
    where, old, new = MUTATIONS[name]
    target = tree / where
    text = target.read_text()
    assert text.count(old) == 1, f"mutation {name}: {old!r} no longer occurs exactly once in {where}"
    target.write_text(text.replace(old, new))
    log = tmp_path / "jit.log"
    r = run_mock(CHILD.format(here=str(HERE), source=str(src)), timeout=300, jit_log=str(log),
                 cache=tmp_path / "cache")
    assert r.returncode == 0 and r.result is not None, r.describe()
    assert not r.result["accepted"], f"mutation {name} was accepted by the JIT"
    failed = [rec for rec in jit_records(log) if rec.get("result") == "error"
              and str(src) in (rec.get("kernels") or [])]
    assert failed, f"mutation {name}: no failed compile of {src} in the JIT log; error: {r.result['error']}"
    assert all("error:" in rec.get("stderr", "") for rec in failed)
    # tt-metal's exception carries the compiler's message
    assert "error:" in r.result["error"] and "compute.cpp" in r.result["error"]


SDPA = """
import torch, ttnn
from ttdecode.testing.mock import open_mock_device
from ttdecode.testing.dry_run import emit
d = open_mock_device()
b, nh, nkv, s, dh = 1, 8, 1, 256, 64
q = ttnn.from_torch(torch.zeros(1, b, nh, dh), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=d)
k = ttnn.from_torch(torch.zeros(b, nkv, s, dh), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=d)
v = ttnn.from_torch(torch.zeros(b, nkv, s, dh), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=d)
pc = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=0, k_chunk_size=128)
out = ttnn.transformer.scaled_dot_product_attention_decode(q, k, v, cur_pos=[100], scale=0.125, program_config=pc)
emit({{"shape": list(out.shape)}})
ttnn.close_device(d)
"""


def test_tt_metal_sdpa_flash_decode_compute_kernel_compiles_strictly_in_place(run_mock, tmp_path: Path) -> None:
    from ttdecode.testing.mock import wheel_dir

    kdir = wheel_dir() / "ttnn/cpp/ttnn/operations/transformer/sdpa_decode/device/kernels"
    assert (kdir / "compute" / "sdpa_flash_decode.cpp").is_file()
    log = tmp_path / "jit.log"
    import os
    os.environ["TTDECODE_JIT_STRICT"] = str(kdir)
    try:
        r = run_mock(SDPA.format(), timeout=300, jit_log=str(log), cache=tmp_path / "cache")
    finally:
        del os.environ["TTDECODE_JIT_STRICT"]
    assert r.returncode == 0 and r.result is not None, r.describe()
    recs = [rec for rec in jit_records(log) if rec.get("step") == "compile"
            and any(k.endswith("sdpa_flash_decode.cpp") for k in rec.get("kernels") or [])]
    assert sorted((rec["processor"], rec["result"], rec["strict"]) for rec in recs) == [
        ("trisc0", "ir+stub", True), ("trisc1", "ir+stub", True), ("trisc2", "ir+stub", True)], recs
