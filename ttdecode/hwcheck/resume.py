"""Resuming a hardware check (``python -m ttdecode hwcheck --resume REPORT``): after a hang (the board reset) or a
crash, the next run takes the earlier report's selection, skips every item the report recorded (a result,
an error, the hang itself) and runs the rest; the two reports become one.

The merged report keeps the earlier entries in the selection's order, the hung item's entry (status
``hang``, its configuration) among them, and under ``resumed`` the report it continued, every hang met so
far (section, name, configuration, seconds) and the items taken over; its summary counts both runs, so a
check with a hang anywhere is not ``ok``.
"""

from __future__ import annotations

from typing import Any

from ttdecode.hwcheck.report import summarize

__all__ = ["recorded", "resume_plan", "merge_resumed"]

_SECTIONS = ("programs", "timing")


def recorded(previous: dict[str, Any]) -> set[tuple[str, str]]:
    """(section, name) of every item the report recorded: any entry but ``not run``."""
    done = {(s, e["name"]) for s in _SECTIONS for e in previous[s] if e["status"] != "not run"}
    loop = previous.get("readme_loop")
    if loop and loop["status"] != "not run":
        done.add(("readme_loop", "readme_loop"))
    return done


def resume_plan(plan: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """The worker's plan without the items `previous` recorded."""
    done = recorded(previous)
    return {**plan, "kinds": [n for n in plan["kinds"] if ("programs", n) not in done],
            "timing": [n for n in plan["timing"] if ("timing", n) not in done],
            "readme_loop": bool(plan.get("readme_loop")) and ("readme_loop", "readme_loop") not in done}


def merge_resumed(report: dict[str, Any], previous: dict[str, Any], plan: dict[str, Any], source: str
                  ) -> dict[str, Any]:
    """One report of both runs: `report` (this run's, of resume_plan(plan, previous)) with the items
    `previous` (the report read from `source`) recorded, in the order of `plan` (the whole selection)."""
    done = recorded(previous)
    merged = dict(report, selection=plan)
    order = {"programs": plan["kinds"], "timing": plan["timing"]}
    for s in _SECTIONS:
        entries = {e["name"]: e for e in report[s]}
        entries.update({e["name"]: e for e in previous[s] if (s, e["name"]) in done})
        rank = {n: i for i, n in enumerate(order[s])}
        merged[s] = sorted(entries.values(), key=lambda e: rank.get(e["name"], len(rank)))
    if ("readme_loop", "readme_loop") in done:
        merged["readme_loop"] = previous["readme_loop"]
    before = previous.get("resumed") or {"hangs": [], "kept": []}
    hangs = before["hangs"] + ([previous["hang"]] if previous["hang"] else [])
    merged["resumed"] = {"from": source, "hangs": hangs,
                         "kept": sorted(set(before["kept"]) | {n for _, n in done})}
    merged["summary"] = summarize(merged)
    return merged
