"""``python -m ttdecode hwcheck``: the hardware check's command line (`add_parser`, `cmd_hwcheck`)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ttdecode.hwcheck.kinds import CALLS, KINDS, TIMING_POINTS, select
from ttdecode.ttnn_env import has_tenstorrent_device

__all__ = ["DESCRIPTION", "add_parser", "cmd_hwcheck", "plan_of"]

DESCRIPTION = (
    "The first run on a Wormhole (N150, N300, T3K: device 0): every program kind ttdecode builds, run three "
    "times each against the float64 reference (the project's accuracy bar) and against ttnn's own op on the same "
    "inputs; our device time and ttnn's at the calibration points (a traced loop, and tt-metal's device "
    "profiler with --profiler); the README's traced decode loop. Every program runs under tt-metal's operation "
    "timeout and a watchdog that names the program and configuration when it fires. Writes a JSON report "
    "(schema: ttdecode/hwcheck/report.json.schema) and a markdown summary to attach to an issue. "
    "--mock SYSTEM runs the same on the mock Wormhole (no chip; every figure 'mock: not computed'). "
    "Exit 0 when every program passes, 1 otherwise, 2 on bad arguments.")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``hwcheck`` to a subparsers object."""
    p = sub.add_parser("hwcheck", help="check every program on a Wormhole (or the mock) and write a report",
                       description=DESCRIPTION)
    p.add_argument("--mock", nargs="?", const="n150", choices=("n150", "n300", "t3k"), default=None,
                   help="run on the mock Wormhole SYSTEM instead of a chip (default: a chip; SYSTEM n150 when not named)")
    p.add_argument("--quick", action="store_true", help="a few program kinds and the first timing point only (default: all of both)")
    p.add_argument("--only", nargs="+", metavar="KIND", help=f"these program kinds only, no timing (default: all {len(KINDS)})")
    p.add_argument("--no-timing", action="store_true", help="skip the timing points (default: timed)")
    p.add_argument("--timing", nargs="+", metavar="POINT", choices=[t.name for t in TIMING_POINTS],
                   help="these timing points only (default: all; --quick: the first; --only: none)")
    p.add_argument("--replays", type=int, default=200, help="trace replays per timing point (default: 200)")
    p.add_argument("--calls", type=int, default=CALLS, help=f"calls per program, at least 3 (default: {CALLS})")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="watchdog seconds per program, JIT build included (default: 900)")
    p.add_argument("--op-timeout", type=int, default=60,
                   help="tt-metal's operation timeout in seconds (TT_METAL_OPERATION_TIMEOUT_SECONDS; default: 60)")
    p.add_argument("--watcher", nargs="?", type=int, const=10, default=0, metavar="SECONDS",
                   help="run tt-metal's watcher, polling every SECONDS (default: off; SECONDS 10 when not given)")
    p.add_argument("--profiler", action="store_true",
                   help="tt-metal's device profiler: DEVICE KERNEL DURATION beside the traced times (default: off)")
    p.add_argument("--resume", type=Path, default=None, metavar="REPORT",
                   help="continue the check REPORT recorded (after a hang: reset the board first): its selection, "
                        "skipping every item it recorded; one report of both runs (default: a new check)")
    p.add_argument("--out", type=Path, default=Path("hwcheck_report.json"), help="the JSON report (default: hwcheck_report.json)")
    p.add_argument("--md", type=Path, default=None, help="the markdown summary (default: the report's path, .md)")
    p.set_defaults(func=cmd_hwcheck, flags={})
    return p


def plan_of(args: argparse.Namespace) -> dict[str, Any]:
    """The worker's plan from the arguments (ValueError naming a bad flag)."""
    if args.calls < 3:
        raise ValueError(f"hwcheck: argument '--calls': expected at least 3 (the third call is checked), got {args.calls}")
    if args.replays < 1:
        raise ValueError(f"hwcheck: argument '--replays': expected a positive count, got {args.replays}")
    kinds = [k.name for k in select(args.quick, args.only)]
    if args.timing:
        timing = [t.name for t in TIMING_POINTS if t.name in args.timing]
    else:
        timing = [] if args.no_timing or args.only else [t.name for t in TIMING_POINTS if t.quick or not args.quick]
    return {"mock": args.mock, "kinds": kinds, "timing": timing, "readme_loop": not args.only,
            "replays": args.replays, "calls": args.calls}


def resumed_selection(previous: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The selection of the check `previous` (a report) recorded, to continue on the same system (ValueError
    when this run's --mock differs from the report's)."""
    plan = dict(previous["selection"])
    if plan.get("mock") != args.mock:
        def system(m: Any) -> str:
            return f"the mock {m}" if m else "a device"
        raise ValueError(f"hwcheck: argument '--resume': {args.resume} ran on {system(plan.get('mock'))}, this run "
                         f"is on {system(args.mock)}; resume on the same system")
    return plan


def package_version() -> str:
    """The installed distribution's version, and the checkout's commit when run from a git checkout."""
    try:
        version = importlib.metadata.version("ttdecode")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    repo = Path(__file__).resolve().parents[2]
    if (repo / ".git").exists():
        rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        if rev.returncode == 0:
            version += f" (checkout {rev.stdout.strip()})"
    return version


def cmd_hwcheck(args: argparse.Namespace) -> int:
    """Run the check (the worker under the watchdog), write the report and its summary; 0 when all passed."""
    # torch and the operators load here, not for `python -m ttdecode --help`
    from ttdecode.hwcheck.report import assemble, load_report, markdown, validate
    from ttdecode.hwcheck.resume import merge_resumed, recorded, resume_plan
    from ttdecode.hwcheck.runner import Guard, run_worker

    if args.mock is None and not has_tenstorrent_device():
        raise ValueError("hwcheck: no Tenstorrent device found (no /dev/tenstorrent*); run on a Wormhole, or "
                         "pass --mock to run the check on the mock Wormhole")
    previous = load_report(args.resume) if args.resume else None
    plan = resumed_selection(previous, args) if previous else plan_of(args)
    todo = resume_plan(plan, previous) if previous else plan
    guard = Guard(item_seconds=args.timeout, operation_seconds=args.op_timeout, watcher=args.watcher,
                  profiler=args.profiler)
    where = f"the mock {args.mock}" if args.mock else "device 0"
    print(f"hwcheck on {where}: {len(todo['kinds'])} programs, {len(todo['timing'])} timing points"
          + (f" (resuming {args.resume}: {len(recorded(previous))} items recorded there)" if previous else ""), flush=True)
    run = run_worker(todo, guard, log=sys.stdout)
    report = assemble(run, todo, guard.to_json(), package_version())
    if previous:
        report = merge_resumed(report, previous, plan, str(args.resume))
    problems = validate(report)
    if problems:
        raise AssertionError("hwcheck: the report does not match its schema: " + "; ".join(problems[:5]))
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    md = args.md or args.out.with_suffix(".md")
    summary = markdown(report)
    md.write_text(summary)
    print(summary)
    print(f"wrote {args.out} and {md}: attach both to an issue")
    return 0 if report["summary"]["ok"] else 1
