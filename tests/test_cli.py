"""``python -m ttdecode``: argument parsing, the plan table, refusals, the reference timing."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ttdecode.__main__ import build_parser, main, parse_cur_pos, parse_grid, positions_for

ROOT = Path(__file__).resolve().parents[1]


def test_grid_parses_columns_x_rows() -> None:
    assert parse_grid("8x8") == (8, 8) and parse_grid("4X2") == (4, 2)
    with pytest.raises(argparse.ArgumentTypeError, match="--grid: expected COLUMNSxROWS such as 8x8, got '8by8'"):
        parse_grid("8by8")


def test_cur_pos_parses_one_or_many_positions() -> None:
    assert parse_cur_pos("8191") == [8191] and parse_cur_pos("100,-1,7") == [100, -1, 7]
    with pytest.raises(argparse.ArgumentTypeError, match="--cur-pos: expected an integer or a comma-separated list"):
        parse_cur_pos("1,a")


def test_positions_default_to_the_last_one_and_one_value_serves_every_user() -> None:
    assert positions_for(None, 3, 1024) == [1023] * 3
    assert positions_for([5], 3, 1024) == [5, 5, 5]
    assert positions_for([1, 2, 3], 3, 1024) == [1, 2, 3]
    with pytest.raises(ValueError, match=r"argument '--cur-pos': expected 1 or B=3 positions, got 2"):
        positions_for([1, 2], 3, 1024)


def test_parser_reads_every_plan_option() -> None:
    a = build_parser().parse_args(["plan", "--preset", "llama-3.1-70b-t3k", "--batch", "4", "--seq", "2048",
                                   "--cur-pos", "1,2,3,4", "--kv-dtype", "bfloat4_b", "--k-chunk-size", "128",
                                   "--max-cores-per-head-batch", "8", "--grid", "8x4"])
    assert (a.command, a.preset, a.batch, a.seq, a.cur_pos) == ("plan", "llama-3.1-70b-t3k", 4, 2048, [1, 2, 3, 4])
    assert (a.kv_dtype, a.k_chunk_size, a.max_cores_per_head_batch, a.grid) == ("bfloat4_b", 128, 8, (8, 4))


@pytest.mark.parametrize("argv", [
    ["plan", "--preset", "gpt-2", "--seq", "64"],
    ["plan", "--preset", "llama-3.1-8b-n150"],  # --seq is required
    ["plan", "--preset", "llama-3.1-8b-n150", "--seq", "0"],
    ["plan", "--preset", "llama-3.1-8b-n150", "--seq", "64", "--kv-dtype", "float16"],
])
def test_parser_refuses_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_plan_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--batch", "1", "--seq", "8192"]) == 0
    out = capsys.readouterr().out
    assert "B=1 NH=32 NKV=8 S=8192 D=128" in out and "KV=bfloat8_b" in out
    from ttdecode.ops.flash_decode.plan import make_plan  # the CLI prints the plan the planner makes (the model's split)

    plan = make_plan(batch=1, num_q_heads=32, num_kv_heads=8, seq_len=8192, head_dim=128, cur_pos=[8191])
    assert f"pieces per (user, KV head): {plan.pieces_per_work};" in out and "root" in out


def test_plan_uses_the_given_positions_and_grid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--preset", "llama-3.1-8b-t3k", "--batch", "2", "--seq", "1024", "--cur-pos", "31,1023",
                 "--grid", "4x2", "--kv-dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "grid=4x2" in out and "KV=bfloat16" in out and "cores used:" in out and "of 8" in out


def test_plan_with_key_row_pages_takes_the_models_pieces_one_bank_each(capsys: pytest.CaptureFixture[str]) -> None:
    """8 KV heads x 12 pieces already cover the grid (96 pieces, each bank's 8 on up to 8 of the 64 cores,
    plan.key_row_deal): the model takes 12 of the 60 allowed (4 tree rounds instead of 6)."""
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "32768", "--max-cores-per-head-batch", "60",
                 "--kv-pages", "key_row"]) == 0
    out = capsys.readouterr().out
    assert "pieces per (user, KV head): 12 (key-row pages" in out and "reduction rounds: 4" in out
    assert "cores used: 64 of 64" in out and "/12" in out
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "32768", "--kv-pages", "key_row",
                 "--max-cores-per-head-batch", "8"]) == 2
    assert "at least 12" in capsys.readouterr().err


def test_plan_takes_the_chunk_cap_and_key_row_pieces_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "32768", "--max-cores-per-head-batch", "60",
                 "--kv-pages", "key_row", "--key-row-pieces", "24", "--chunk-cap", "16"]) == 0
    out = capsys.readouterr().out
    assert "pieces per (user, KV head): 24 (key-row pages" in out and "dynamic, max 512 keys" in out
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "32768", "--chunk-cap", "12"]) == 2
    assert "argument '--chunk-cap'" in capsys.readouterr().err
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "32768", "--key-row-pieces", "24"]) == 2
    assert "--key-row-pieces: applies to --kv-pages='key_row' only" in capsys.readouterr().err


def test_refused_plan_exits_2_with_the_planner_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "4096", "--k-chunk-size", "4096"]) == 2
    err = capsys.readouterr().err
    assert "L1 overflow" in err and "--k-chunk-size" in err


def test_bad_config_values_exit_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "4096", "--k-chunk-size", "100"]) == 2
    assert "argument '--k-chunk-size': expected 0 (dynamic) or a power of two" in capsys.readouterr().err
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "4096", "--grid", "9x8"]) == 2
    assert "argument '--grid': expected a grid within the largest Wormhole worker grid of a n150 chip, the board " \
        "the host runtime models (TTDECODE_BOARD: one of galaxy, n150, n300, t3k): at most 8 columns x 9 rows, " \
        "got (9, 8)" in capsys.readouterr().err
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--seq", "4096", "--grid", "8x10", "--board", "galaxy"]) == 0
    assert "grid=8x10" in capsys.readouterr().out
    assert main(["plan", "--preset", "llama-3.1-8b-n150", "--batch", "2", "--seq", "64", "--cur-pos", "1,2,3"]) == 2
    assert "argument '--cur-pos': expected 1 or B=2 positions, got 3" in capsys.readouterr().err


@pytest.mark.parametrize("kv", ["bfloat16", "bfloat8_b"])
def test_reference_runs_and_prints_timing(kv: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reference", "--preset", "llama-3.1-8b-t3k", "--batch", "2", "--seq", "256", "--kv-dtype", kv,
                 "--cur-pos", "100,255", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert f"KV={kv}" in out and "output [1, 2, 4, 128] torch.bfloat16; finite: True" in out
    assert "time per call: best" in out and "over 2 run(s)" in out


def test_reference_refuses_a_position_beyond_the_cache(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reference", "--preset", "llama-3.1-8b-t3k", "--seq", "256", "--cur-pos", "256",
                 "--kv-dtype", "bfloat16"]) == 2
    assert "argument '--cur-pos[0]': expected a position in -1..255" in capsys.readouterr().err


def test_module_entry_point_runs() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "ttdecode", "plan", "--preset", "llama-3.1-8b-n150", "--seq", "1024"],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "FlashDecode plan" in r.stdout
    r = subprocess.run([sys.executable, "-m", "ttdecode", "plan", "--preset", "llama-3.1-8b-n150", "--seq", "4096",
                        "--k-chunk-size", "4096"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 2 and "L1 overflow" in r.stderr


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return {"": parser, **parser.subcommands.choices}  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_help_of_each_subcommand_states_every_option_and_its_default(command: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Every option has help text naming its default (or saying it is required), and --help prints it."""
    sub = _subparsers()[command]
    options = [a for a in sub._actions if a.option_strings and a.dest != "help"]
    for a in options:
        assert a.help, f"{command or 'ttdecode'} {a.option_strings[0]}: no help text"
        assert a.required or "default" in a.help, f"{command} {a.option_strings[0]}: help does not give the default"
    with pytest.raises(SystemExit) as e:
        main(([command] if command else []) + ["--help"])
    assert e.value.code == 0
    printed = "".join(capsys.readouterr().out.split())  # argparse wraps lines (and breaks words at hyphens)
    for a in options:
        assert a.option_strings[-1] in printed and "".join(a.help.split()) in printed, a.option_strings


def test_help_imports_no_torch() -> None:
    """`python -m ttdecode ... --help` answers at once: nothing imports torch until a command runs."""
    code = ("import sys\nfrom ttdecode.__main__ import main\n"
            "for argv in ([], ['plan'], ['reference'], ['demo'], ['llama'], ['hwcheck']):\n"
            "    try:\n        main(argv + ['--help'])\n    except SystemExit as e:\n        assert e.code == 0\n"
            "heavy = sorted(m for m in ('torch', 'numpy', 'transformers', 'ttnn') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
