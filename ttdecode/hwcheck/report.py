"""The hardware check's report: assembled from the worker's entries, checked against its JSON Schema
(``report.json.schema`` beside this module) and summarised in markdown a user can attach to an issue.

`validate(report)` uses the ``jsonschema`` package when it is installed (the ``test`` extra) and otherwise
the subset of JSON Schema the schema file uses (type, required, properties, additionalProperties, items,
enum, const, anyOf, $ref, minItems, maxItems), so a report is checked either way.
"""

from __future__ import annotations

import datetime
import json
import platform
from pathlib import Path
from typing import Any, Iterator, Union

from ttdecode.accuracy import THRESHOLDS

__all__ = ["SCHEMA_PATH", "SCHEMA_ID", "schema", "validate", "assemble", "summarize", "markdown", "load_report"]

SCHEMA_PATH = Path(__file__).resolve().parent / "report.json.schema"
SCHEMA_ID = "ttdecode-hwcheck-report-1"
_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float),
          "boolean": bool, "null": type(None)}


def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def _is(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def _errors(value: Any, sch: dict[str, Any], root: dict[str, Any], where: str) -> Iterator[str]:
    """The subset validator (module doc): one message per violation, naming the JSON path."""
    if "$ref" in sch:
        sch = root["definitions"][sch["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in sch:
        if not any(not list(_errors(value, s, root, where)) for s in sch["anyOf"]):
            yield f"{where}: {value!r:.80} matches none of anyOf"
        return
    types = sch.get("type")
    if types is not None and not any(_is(value, t) for t in ([types] if isinstance(types, str) else types)):
        yield f"{where}: expected {types}, got {type(value).__name__}"
        return
    if "const" in sch and value != sch["const"]:
        yield f"{where}: expected {sch['const']!r}, got {value!r:.80}"
    if "enum" in sch and value not in sch["enum"]:
        yield f"{where}: expected one of {sch['enum']}, got {value!r:.80}"
    if isinstance(value, dict):
        yield from _object_errors(value, sch, root, where)
    if isinstance(value, list):
        if len(value) < sch.get("minItems", 0) or len(value) > sch.get("maxItems", len(value)):
            yield f"{where}: {len(value)} items, outside [{sch.get('minItems', 0)}, {sch.get('maxItems')}]"
        if "items" in sch:
            for i, item in enumerate(value):
                yield from _errors(item, sch["items"], root, f"{where}[{i}]")


def _object_errors(value: dict, sch: dict[str, Any], root: dict[str, Any], where: str) -> Iterator[str]:
    for key in sch.get("required", []):
        if key not in value:
            yield f"{where}: missing {key!r}"
    props = sch.get("properties", {})
    extra = sch.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            yield from _errors(item, props[key], root, f"{where}.{key}")
        elif extra is False:
            yield f"{where}: unexpected property {key!r}"
        elif isinstance(extra, dict):
            yield from _errors(item, extra, root, f"{where}.{key}")


def validate(report: dict[str, Any]) -> list[str]:
    """The report's violations of the schema (empty: valid)."""
    sch = schema()
    try:
        import jsonschema  # noqa: PLC0415 - an optional package (the test extra)
    except ImportError:
        return list(_errors(report, sch, sch, "$"))
    return [f"$.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
            for e in jsonschema.Draft202012Validator(sch).iter_errors(report)]


def _counts(report: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in report["programs"] + report["timing"] + ([report["readme_loop"]] if report["readme_loop"] else []):
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    return counts


def assemble(run: dict[str, Any], selection: dict[str, Any], guard: dict[str, Any], version: str) -> dict[str, Any]:
    """The report (``report.json.schema``) from `runner.run_worker`'s result."""
    hang = run["hang"]
    programs = list(run["entries"]["programs"])
    timing = list(run["entries"]["timing"])
    for n in run["not_run"]:
        target = programs if n["section"] == "programs" else timing
        if n["section"] != "readme_loop":
            target.append({"name": n["name"], "status": "not run"})
    crash = run.get("crash")
    stopped = None
    if hang:
        # the configuration it hung in: a program's parameters, a timing point's label
        stopped = {"name": hang["name"], "status": "hang", "error": f"no answer within {hang['seconds']:.0f} s (watchdog)",
                   **({"config": hang["config"]} if isinstance(hang["config"], dict) else {"label": str(hang["config"])})}
    elif crash:
        stopped = {"name": crash["name"], "status": "error", "error": crash["error"]}
    where = (hang or crash or {}).get("section")
    if stopped and where in ("programs", "timing"):
        (programs if where == "programs" else timing).append(stopped)
    loop = (run["entries"]["readme_loop"] or [None])[0]
    if loop is None and selection.get("readme_loop"):
        loop = stopped if where == "readme_loop" else {"name": "readme_loop", "status": "not run"}
    device = run["device"] or {"mock": selection.get("mock"), "arch": "unknown (the device did not open)",
                               "grid": [0, 0], "devices": 0, "ttnn_version": "unknown"}
    report = {
        "schema": SCHEMA_ID, "ttdecode_version": version,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "system": {**device, "host": platform.node()},
        "thresholds": {"max_rel_l2": THRESHOLDS.max_rel_l2, "min_pcc": THRESHOLDS.min_pcc,
                       "max_lse_abs": THRESHOLDS.max_lse_abs},
        "guard": guard, "selection": selection, "programs": programs, "timing": timing, "readme_loop": loop,
        "hang": hang, "not_run": run["not_run"], "worker_exit": run["exit"], "stderr_tail": run["stderr_tail"],
    }
    report["summary"] = summarize(report)
    return report


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The report's summary: the count of each status, and ok (no hang in this run nor in a run it resumed,
    the worker exited 0, every entry pass or mock, or refused: a mesh kind on a system without the chips)."""
    counts = _counts(report)
    hangs = report["hang"] or (report.get("resumed") or {}).get("hangs")
    ok = not hangs and report.get("worker_exit", 0) == 0 and set(counts) <= {"pass", "mock", "refused"}
    return {"ok": ok, "counts": counts}


def _fig(x: Any, fmt: str) -> str:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return format(x, fmt)
    return "–" if x is None else str(x)


def _worst(metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The largest rel L2 and the smallest PCC over a call's outputs (an LSE has neither)."""
    rel = [m["rel_l2"] for m in metrics.values() if "rel_l2" in m]
    pcc = [m["pcc"] for m in metrics.values() if "pcc" in m]
    nums = all(isinstance(x, (int, float)) for x in rel + pcc)
    return {"rel_l2": (max(rel) if nums else rel[0]) if rel else None,
            "pcc": (min(pcc) if nums else pcc[0]) if pcc else None}


def _program_row(e: dict[str, Any]) -> str:
    calls = e.get("calls") or []
    last = _worst(calls[-1]["metrics"]) if calls else {}
    first = _worst(calls[0]["metrics"]) if calls else {}
    theirs = e.get("ttnn_op") or {}
    t_out = _worst(theirs.get("metrics") or {})
    paths = "/".join(c["path"] for c in calls) or "–"
    note = e.get("verdict") or e.get("error") or ""
    return (f"| `{e['name']}` | {e['status']} | {_fig(first.get('rel_l2'), '.2e')} | {_fig(last.get('rel_l2'), '.2e')} "
            f"| {_fig(last.get('pcc'), '.6f')} | {paths} | {_fig(t_out.get('rel_l2'), '.2e')} | {note[:160]} |")


def markdown(report: dict[str, Any]) -> str:
    """A summary to paste into an issue: the system, the verdict, one row a program, one row a timing point."""
    s, summ = report["system"], report["summary"]
    where = f"mock {s['mock']} (computes nothing)" if s["mock"] else f"{s['arch']}, {s['devices']} device(s)"
    out = [f"## ttdecode hwcheck: {'OK' if summ['ok'] else 'PROBLEMS'}", "",
           f"ttdecode {report['ttdecode_version']}, ttnn {s['ttnn_version']}, {where}, grid {s['grid'][0]}x{s['grid'][1]}; "
           f"{report['created']}. Counts: " + ", ".join(f"{k} {v}" for k, v in sorted(summ["counts"].items())) + ".",
           f"Bar: rel L2 <= {report['thresholds']['max_rel_l2']:.0e}, PCC >= {report['thresholds']['min_pcc']}, "
           f"LSE within {report['thresholds']['max_lse_abs']:.0e} of the float64 reference."]
    if report["worker_exit"] not in (0, "killed"):
        tail = "\n".join(report["stderr_tail"].strip().splitlines()[-12:])
        out += ["", f"**The worker process exited with {report['worker_exit']}**; the end of its stderr:", "",
                "```", tail, "```"]
    if report["hang"]:
        h = report["hang"]
        out += ["", f"**HANG** in {h['section']} `{h['name']}` ({h['config']}): no answer in {h['seconds']:.0f} s. "
                "Reset the board (`tt-smi -r`), then `python -m ttdecode hwcheck --resume` this report to run the rest."]
    resumed = report.get("resumed")
    if resumed:
        out += ["", f"Resumed from `{resumed['from']}` ({len(resumed['kept'])} items taken over)."]
        out += [f"Earlier **HANG** in {h['section']} `{h['name']}` ({h['config']}): no answer in {h['seconds']:.0f} s."
                for h in resumed["hangs"]]
    out += ["", "Worst output of each call (rel L2: largest, PCC: smallest); paths: each call's descriptor (full: per-core "
            "args sent; lean: held back, the cached program's used).", "",
            "| program | status | rel L2 call 1 | rel L2 last call | PCC last call | paths | ttnn's op rel L2 | verdict |",
            "|---|---|---:|---:|---:|---|---:|---|"]
    out += [_program_row(e) for e in report["programs"]]
    out += ["", "| timing point | ours us/call | ttnn us/call | ours profiler us | ttnn profiler us | note |",
            "|---|---:|---:|---:|---:|---|"]
    for t in report["timing"]:
        o, n = t.get("ours") or {}, t.get("ttnn") or {}
        note = t.get("invented") or o.get("error") or n.get("error") or t.get("error") or ""
        out.append(f"| `{t['name']}` | {_fig(o.get('us_per_call'), '.2f')} | {_fig(n.get('us_per_call'), '.2f')} | "
                   f"{_fig(o.get('profiler_us'), '.2f')} | {_fig(n.get('profiler_us'), '.2f')} | {note[:160]} |")
    loop = report["readme_loop"]
    if loop:
        took = loop.get("seconds")
        out += ["", f"README traced loop: {loop['status']}" + (f", {took:.3f} s" if isinstance(took, float) else
                                                              f" ({loop.get('note') or loop.get('error') or took})")]
    return "\n".join(out) + "\n"


def load_report(path: Union[str, Path]) -> dict[str, Any]:
    """Read a report and check it against the schema (ValueError listing the first violations)."""
    report = json.loads(Path(path).read_text())
    problems = validate(report)
    if problems:
        raise ValueError(f"{path}: not a hwcheck report ({SCHEMA_ID}): " + "; ".join(problems[:5]))
    return report
