"""What a newcomer meets on a fresh clone: the llama extra, errors that name the flags typed, help
texts without markup or internal references, the Makefile's comment, float64 inputs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from ttdecode.__main__ import SHAPE_FLAGS, build_parser, flag_message, main
from ttdecode.models.cli import LLAMA_EXTRA, LLAMA_FLAGS

ROOT = Path(__file__).resolve().parents[1]

try:
    import tomllib
except ModuleNotFoundError:  # python 3.10
    tomllib = pytest.importorskip("tomli")


# ---- the llama extra ----------------------------------------------------------------------------


def test_the_llama_extra_holds_transformers_and_the_test_extra_takes_it() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["llama"] == ["transformers==4.57.1", "safetensors>=0.4"]
    assert [p.split(">")[0].split("=")[0] for p in extras["llama"]] == list(LLAMA_EXTRA)
    assert "ttdecode[llama]" in extras["test"]
    pip_line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if "pip install" in line
                    and "-e " in line)
    installed = set(re.search(r"-e '\.\[([a-z,]+)\]'", pip_line).group(1).split(","))
    assert {"ttnn", "plots", "llama", "test"} <= installed, pip_line


@pytest.mark.parametrize("missing", LLAMA_EXTRA)
def test_llama_without_its_extra_says_what_to_install_and_exits_2(
        missing: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A wheel install without the llama extra: one line naming the extra, no traceback."""
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` fails; find_spec finds nothing
    assert main(["llama"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert f"needs {missing}" in lines[0] and "pip install 'ttdecode[llama]'" in lines[0]
    assert "Traceback" not in captured.err


# ---- errors name the flag the user typed ---------------------------------------------------------


def test_a_grid_beyond_wormhole_names_grid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "4096", "--grid", "9x12"]) == 2
    err = capsys.readouterr().err
    assert "python -m ttdecode plan: argument '--grid': expected a grid within the largest Wormhole worker grid" \
        in err and "got (9, 12)" in err
    assert "program_config" not in err and "compute_with_storage_grid_size" not in err
    assert main(["reference", "--preset", "llama-3.1-8b-t3k", "--seq", "256", "--grid", "9x12"]) == 2
    err = capsys.readouterr().err
    assert "reference: argument '--grid'" in err and "compute_with_storage_grid_size" not in err


def test_a_bad_seq_names_seq(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "100"]) == 2
    err = capsys.readouterr().err
    assert "python -m ttdecode plan: --seq: expected a multiple of 32, got 100" in err and "seq_len" not in err
    assert main(["reference", "--preset", "llama-3.1-8b-t3k", "--seq", "250", "--kv-dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err
    assert "reference: argument '--seq': expected a sequence length" in err and "argument 'k'" not in err
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "64", "--cur-pos", "64"]) == 2
    assert "--cur-pos[0]: expected -1..63 (--seq=64), got 64" in capsys.readouterr().err


def test_other_planner_names_become_their_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "4096", "--k-chunk-size", "4096"]) == 2
    err = capsys.readouterr().err
    assert "L1 overflow" in err and "--k-chunk-size=1024" in err and "k_chunk_size" not in err
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "4096", "--key-row-pieces", "24"]) == 2
    assert "--key-row-pieces: applies to --kv-pages='key_row' only" in capsys.readouterr().err


def test_flag_message_rewrites_plain_words_only_where_they_name_the_argument() -> None:
    assert flag_message("grid: expected (columns, rows), got (0, 8); the grid is 8x8", SHAPE_FLAGS) == \
        "--grid: expected (columns, rows), got (0, 8); the grid is 8x8"
    assert flag_message("SDPAProgramConfig: argument 'max_cores_per_head_batch': expected 1..64, got 0",
                        SHAPE_FLAGS) == "argument '--max-cores-per-head-batch': expected 1..64, got 0"
    assert flag_message("batch: per batch of users", SHAPE_FLAGS) == "--batch: per batch of users"
    assert flag_message("cur_pos_tensor: a device tensor", SHAPE_FLAGS) == "cur_pos_tensor: a device tensor"
    assert flag_message("devices: expected a divisor of the model's 2 KV heads (each device owns whole KV head "
                        "groups) on 3 devices, got 3", LLAMA_FLAGS).startswith("--devices: expected a divisor")
    assert flag_message("devices: on 3 devices", LLAMA_FLAGS) == "--devices: on 3 devices"


# ---- help texts -----------------------------------------------------------------------------------


def _help(argv: list[str], capsys: pytest.CaptureFixture[str], run=main) -> str:
    with pytest.raises(SystemExit) as e:
        run(argv + ["--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def test_demo_help_says_what_the_demo_does(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_help(["demo"], capsys).split())
    assert "Llama-3.1-8B" in text and "float64 reference" in text and "MODEL ESTIMATES" in text


@pytest.mark.parametrize("command", ["", "plan", "reference", "demo", "llama"])
def test_help_is_plain_text_without_internal_references(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help([command] if command else [], capsys)
    assert "``" not in text and ":func:" not in text and "`" not in text, text
    assert not re.search(r"(?i)issue \d", text), text


def test_mock_cli_offers_every_system_and_explains_every_argument(capsys: pytest.CaptureFixture[str]) -> None:
    from ttdecode.testing import mock

    for command in ("env", "run", "check"):
        text = _help([command], capsys, run=mock.main)
        assert "{galaxy,galaxy32,n150,n300,t3k}" in text and "--system" in text, text
        assert not re.search(r"(?i)issue \d", text)
    for command, sub in mock.build_parser().subcommands.choices.items():
        for a in sub._actions:
            assert a.help, f"mock {command} {a.dest}: no help text"
        system = next(a for a in sub._actions if a.dest == "system")
        assert set(system.choices) == set(mock.SYSTEMS)


def test_subcommand_parsers_carry_a_description() -> None:
    subs = build_parser().subcommands.choices  # type: ignore[attr-defined]
    for name in ("plan", "reference", "demo", "llama"):
        assert subs[name].description, name


def test_the_makefile_comment_gives_no_test_count() -> None:
    comments = [line for line in (ROOT / "Makefile").read_text().splitlines() if line.lstrip().startswith("#")]
    assert not [c for c in comments if re.search(r"\d+ (tests|items)|~\d", c)], comments


# ---- float64 inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["reference", "host"])
def test_float64_inputs_are_taken_like_float32_ones(backend: str) -> None:
    """A torch float64 Q/K/V is stored as bfloat16 like a float32 one (the kernels' format), so the
    reference computes on the same values as the host runtime."""
    import ttdecode

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((1, 2, 8, 64), (2, 2, 64, 64),
                                                                             (2, 2, 64, 64)))
    got = ttdecode.scaled_dot_product_attention_decode(q, k, v, cur_pos=[40, 63], backend=backend)
    same = ttdecode.scaled_dot_product_attention_decode(q.float(), k.float(), v.float(), cur_pos=[40, 63],
                                                        backend=backend)
    assert got.dtype == torch.bfloat16 and torch.equal(got, same)
