"""Command line: ``python -m ttdecode {plan,reference} --preset NAME --batch B --seq S ...``,
``python -m ttdecode demo``, ``python -m ttdecode llama [--preset tiny] [--devices N]`` (see
``ttdecode.models.cli``) and ``python -m ttdecode hwcheck`` (see ``ttdecode.hwcheck``).

* ``plan`` prints the FlashDecode plan table (``ttdecode.ops.flash_decode.plan.make_plan`` + ``format_plan``) and
  exits 2 with the planner's message when the plan is refused.
* ``reference`` runs the float64 reference backend on random inputs (normal, seeded) of the
  preset's shape and prints the timing.

``--cur-pos`` is one position for every user (``8191``) or one per user (``100,200,...``, exactly B
values); without it every user is at ``S - 1``. Presets: ``ttdecode.config.PRESETS``.
Exit codes: 0 ok, 2 bad arguments or a refused plan. Errors name the flag the user typed (``--grid``,
``--seq``, ...), not the planner's parameter (`flag_message`).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Mapping, Optional, Sequence

from ttdecode.config import BOARD_GRIDS, PRESETS, WORMHOLE_GRID, SDPAProgramConfig, get_preset, host_grid_limit
from ttdecode.hwcheck.cli import add_parser as add_hwcheck_parser
from ttdecode.models.cli import add_parser as add_llama_parser

KV_DTYPES = ("bfloat16", "bfloat8_b", "bfloat4_b")

#: The planner's and the program config's parameter names -> the flags of `plan` and `reference`.
SHAPE_FLAGS = {
    "program_config.compute_with_storage_grid_size": "--grid", "compute_with_storage_grid_size": "--grid",
    "grid": "--grid", "board": "--board", "seq_len": "--seq", "batch": "--batch", "cur_pos": "--cur-pos",
    "kv_dtype": "--kv-dtype",
    "k_chunk_size": "--k-chunk-size", "max_cores_per_head_batch": "--max-cores-per-head-batch",
    "kv_pages": "--kv-pages", "chunk_cap": "--chunk-cap",
}
#: What `demo` does (``--help``; ttdecode/demo.py imports torch, so its docstring is not read here).
DEMO_DESCRIPTION = (
    "One decode step of Llama-3.1-8B's attention on an N150 (32 q / 8 KV heads, head_dim 128, the 8x8 grid, a "
    "bfloat8_b KV cache of 8K positions, five users at different positions, one skipped) on the host runtime, "
    "which runs the Metalium kernels on the CPU. Prints the plan, the accuracy against the float64 reference on "
    "the same quantized inputs, the run's DRAM and NoC counters, the same step with key-row pages, and the "
    "Wormhole cost model's estimate of both (MODEL ESTIMATES: nothing runs on a device). Exit 0 when both runs "
    "meet the accuracy thresholds, 1 otherwise. make demo runs it.")
#: Who raised the message (dropped: the command line's message starts with the command).
_SPEAKER = re.compile(r"^(?:ttdecode|SDPAProgramConfig): ")


def flag_message(message: str, flags: Mapping[str, str]) -> str:
    """`message` with each parameter name of `flags` replaced by its flag.

    A name with an underscore (``seq_len``, ``program_config.compute_with_storage_grid_size``) is
    replaced wherever it stands as a whole identifier; a plain word (``grid``, ``batch``) only where it
    names the argument: at the start before ``:`` / ``[`` / ``=``, or quoted after ``argument``.
    """
    message = _SPEAKER.sub("", message)
    for name in sorted(flags, key=len, reverse=True):
        flag, word = flags[name], re.escape(name)
        if "_" in name:
            message = re.sub(rf"(?<![\w.'-]){word}(?!\w)|(?<=')(?:program_config\.)?{word}(?=[\['])", flag, message)
        else:
            message = re.sub(rf"^{word}(?=[:\[=])|(?<=argument '){word}(?=[\['])", flag, message)
    return message


def parse_grid(text: str) -> tuple[int, int]:
    """``"8x8"`` -> (8, 8) (columns x rows)."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"--grid: expected COLUMNSxROWS such as 8x8, got {text!r}")
    return int(parts[0]), int(parts[1])


def parse_cur_pos(text: str) -> list[int]:
    """``"8191"`` -> [8191]; ``"100,200"`` -> [100, 200] (negative -1 allowed: skip the user)."""
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--cur-pos: expected an integer or a comma-separated list of integers, got {text!r}"
        ) from None


def positions_for(cur_pos: Optional[list[int]], batch: int, seq: int) -> list[int]:
    """The B positions: S-1 for all when None, one value for all, or exactly B values."""
    if cur_pos is None:
        return [seq - 1] * batch
    if len(cur_pos) == 1:
        return cur_pos * batch
    if len(cur_pos) != batch:
        raise ValueError(f"ttdecode: argument '--cur-pos': expected 1 or B={batch} positions, "
                         f"got {len(cur_pos)}")
    return cur_pos


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _shape_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", required=True, choices=sorted(PRESETS),
                   help="model shape per chip (required): heads, head dims, KV format and grid")
    p.add_argument("--batch", type=_positive, default=1, help="users B (default: 1)")
    p.add_argument("--seq", type=_positive, required=True, help="KV cache length S in positions (required)")
    p.add_argument("--cur-pos", type=parse_cur_pos, default=None,
                   help="position for every user, or B comma-separated positions, -1 skips a user "
                        "(default: S-1 for every user)")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default=None, help="KV cache format (default: the preset's)")
    p.add_argument("--k-chunk-size", type=int, default=0,
                   help="keys per chunk, a power of two multiple of 32, or 0 for dynamic chunks (default: 0)")
    p.add_argument("--max-cores-per-head-batch", type=int, default=16,
                   help="most cores that split one (user, KV head)'s sequence, 1..64 (default: 16)")
    p.add_argument("--kv-pages", choices=("tile", "key_row"), default="tile",
                   help="what a K/V DRAM page holds: a tile, or a key-tile row (bank-local pieces) "
                        "(default: tile)")
    p.add_argument("--grid", type=parse_grid, default=None, help="core grid COLUMNSxROWS such as 8x8 (default: the preset's)")
    p.add_argument("--board", choices=sorted(BOARD_GRIDS), default=None,
                   help="the board whose chip the host runtime models, which bounds --grid: 8x9 on n150 / n300 / "
                        "t3k, 8x10 on galaxy (default: $TTDECODE_BOARD, else n150)")
    p.add_argument("--chunk-cap", type=int, default=None,
                   help="largest dynamic chunk in key tiles, 8/16/32 (default: the cost model's choice)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; subcommands are in ``parser.subcommands`` for others to extend."""
    parser = argparse.ArgumentParser(prog="python -m ttdecode", description="FlashDecode for Wormhole")
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="print the work plan of one decode step",
                          description="Print the FlashDecode work plan of one decode step (cores, pieces, "
                                      "chunks, reduction rounds) without running it; exit 2 when it is refused.")
    _shape_args(plan)
    plan.add_argument("--key-row-pieces", type=int, default=None,
                      help="pieces per (user, KV head) with --kv-pages key_row (default: the cost model's choice)")
    plan.set_defaults(func=cmd_plan, flags={**SHAPE_FLAGS, "key_row_pieces": "--key-row-pieces"})
    ref = sub.add_parser("reference", help="time the float64 reference on random inputs",
                         description="Run the float64 reference backend on seeded random Q, K, V of the preset's "
                                     "shape and print the output's shape and the time per call.")
    _shape_args(ref)
    ref.add_argument("--seed", type=int, default=0, help="seed of the random Q, K, V (default: 0)")
    ref.add_argument("--repeat", type=_positive, default=1, help="timed runs (default: 1)")
    # K and V are made from --seq (their shape is all the user chose of them)
    ref.set_defaults(func=cmd_reference, flags={**SHAPE_FLAGS, "k": "--seq", "v": "--seq"})
    demo = sub.add_parser("demo", help="a Llama-3.1-8B decode step on the host runtime, checked against the reference",
                          description=DEMO_DESCRIPTION)
    demo.set_defaults(func=cmd_demo)

    add_llama_parser(sub)
    add_hwcheck_parser(sub)
    parser.subcommands = sub  # type: ignore[attr-defined]
    return parser


def _program_config(args: argparse.Namespace) -> SDPAProgramConfig:
    preset = get_preset(args.preset)
    limit, where = host_grid_limit(args.board)
    return SDPAProgramConfig(
        compute_with_storage_grid_size=args.grid or preset.grid,
        k_chunk_size=args.k_chunk_size,
        max_cores_per_head_batch=args.max_cores_per_head_batch,
        kv_pages=args.kv_pages,
        chunk_cap=args.chunk_cap,
    ).resolve_grid(limit, WORMHOLE_GRID, where)


def cmd_plan(args: argparse.Namespace) -> int:
    """Plan one step and print the table; a refused plan prints the reason and returns 2."""
    from ttdecode.core.formats import DataType
    from ttdecode.ops.flash_decode.plan import format_plan, make_plan

    preset = get_preset(args.preset)
    config = _program_config(args)
    plan = make_plan(
        batch=args.batch, num_q_heads=preset.num_heads, num_kv_heads=preset.num_kv_heads,
        seq_len=args.seq, head_dim=preset.head_dim, head_dim_v=preset.head_dim_v, mla=preset.mla,
        kv_dtype=DataType(args.kv_dtype or preset.kv_dtype),
        cur_pos=positions_for(args.cur_pos, args.batch, args.seq),
        grid=config.compute_with_storage_grid_size, k_chunk_size=config.k_chunk_size,
        max_cores_per_head_batch=config.max_cores_per_head_batch, kv_pages=config.kv_pages,
        chunk_cap=config.chunk_cap, key_row_pieces=args.key_row_pieces,
    )
    print(format_plan(plan))
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    """Run the reference backend on seeded random inputs and print the time per call."""
    import torch

    from ttdecode.api import scaled_dot_product_attention_decode

    preset = get_preset(args.preset)
    config = _program_config(args)
    kv_dtype = args.kv_dtype or preset.kv_dtype
    pos = positions_for(args.cur_pos, args.batch, args.seq)
    gen = torch.Generator().manual_seed(args.seed)
    b, nh, nkv, d, s = args.batch, preset.num_heads, preset.num_kv_heads, preset.head_dim, args.seq
    q = torch.randn(1, b, nh, d, generator=gen)
    k = torch.randn(b, nkv, s, d, generator=gen)
    v = None if preset.mla else torch.randn(b, nkv, s, d, generator=gen)  # MLA: V = k[..., :Dv]
    if kv_dtype != "bfloat16":
        from ttdecode.core.formats import DataType
        from ttdecode.core.tensor import from_torch

        k = from_torch(k, DataType(kv_dtype))
        v = None if v is None else from_torch(v, DataType(kv_dtype))
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = scaled_dot_product_attention_decode(q, k, v, cur_pos=pos, program_config=config,
                                                  head_dim_v=preset.head_dim_v, backend="reference")
        times.append(time.perf_counter() - t0)
    print(f"reference ({preset.description}): B={b} NH={nh} NKV={nkv} S={s} D={d} KV={kv_dtype}")
    print(f"output {list(out.shape)} {out.dtype}; finite: {bool(torch.isfinite(out).all())}")
    print(f"time per call: best {min(times) * 1e3:.1f} ms, mean {sum(times) / len(times) * 1e3:.1f} ms "
          f"over {len(times)} run(s)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """`make demo` (see ttdecode/demo.py)."""
    from ttdecode.demo import main as demo_main

    return demo_main()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` and run the subcommand; bad values and refused plans print to stderr, exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:  # includes plan.PlanError and config errors
        print(f"{parser.prog} {args.command}: {flag_message(str(e), getattr(args, 'flags', {}))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
