"""Every file, folder and module the documents name exists in the tree, and every relative link resolves.

A document names a path in backticks: `ttdecode/ops/flash_decode/plan/placement.py`, `kernels/shared/`,
`perf/levers.py --quick` (each word of a command is looked at), or a module as `ttdecode.ttnn_env.import_ttnn()`
(the longest prefix that is a module or package, then the next name must be defined or imported there). In a
table row whose first cell names folders in backticks, a bare file or folder name of another cell
(`descriptor.py`, `src/`) is looked for in each of those folders. Names with placeholders (`<operator>`) and
paths outside the repository's own top-level folders (tt-metal's `tech_reports/...`) are not checked.
Links `[text](path#anchor)` are checked in every document: the path exists, and an anchor into a markdown file
is one of its headings (GitHub's slugs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The documents whose backticked paths are checked.
PATH_DOCS = ("README.md", "perf/README.md", "tech_report/architecture.md", "tech_report/calibration.md",
             "tech_report/perf_history.md", "tech_report/flashdecode.md", "tech_report/context_parallel.md",
             "tech_report/runtime_model.md", "ttdecode/runtime/README.md")
#: The documents whose links are checked.
LINK_DOCS = ("README.md", "perf/README.md", "ttdecode/runtime/README.md",
             *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tech_report").glob("*.md")))

#: The repository's own top-level folders: a backticked path starting with one of them is checked.
TOP_DIRS = ("kernels", "perf", "tech_report", "tests", "tools", "ttdecode")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_TICK = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_MODULE = re.compile(r"^ttdecode(?:\.[A-Za-z_]\w*)+")
_BARE = re.compile(r"^[\w.-]+(?:\.(?:py|cpp|hpp|h|txt|json|yaml|md|toml)|/)$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of a document outside its fenced code blocks."""
    blanked = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return list(enumerate(blanked.splitlines(), start=1))


def _clean(word: str) -> str:
    """A path word without a pytest id, a line suffix, an anchor, a call or trailing punctuation."""
    word = word.split("::")[0].split("#")[0]
    word = re.sub(r"\(.*$", "", word)
    word = re.sub(r":\d+$", "", word)
    return word.rstrip(".,;:)")


def _repo_path_exists(path: str) -> bool:
    target = ROOT / path
    return target.is_dir() if path.endswith("/") else target.exists()


def _module_exists(dotted: str) -> bool:
    """`ttdecode.a.b.name`: the longest prefix that is a module or package, and the next part (if any) a
    module of it or a name its source defines or imports."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:n])
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if source.is_file():
            if n == len(parts):
                return True
            return re.search(rf"\b{re.escape(parts[n])}\b", source.read_text()) is not None
    return False


def _row_folders(line: str) -> list[str]:
    """The backticked folders of a table row's first cell."""
    if not line.lstrip().startswith("|"):
        return []
    first = line.strip().strip("|").split("|")[0]
    return [m for m in _TICK.findall(first) if m.endswith("/") and m.split("/")[0] in TOP_DIRS and "<" not in m]


def missing_paths(doc: str) -> list[str]:
    """'line N: path' for each path or module `doc` names that is not in the tree."""
    missing = []
    for number, line in _prose_lines((ROOT / doc).read_text()):
        folders = _row_folders(line)
        for span in _TICK.findall(line):
            if any(c in span for c in "<>*{}"):
                continue
            for word in span.split():
                word = _clean(word)
                head = word.split("/")[0]
                if "/" in word and head in TOP_DIRS:
                    if not _repo_path_exists(word):
                        missing.append(f"line {number}: {word}")
                elif _MODULE.match(word):
                    name = _MODULE.match(word).group(0)
                    if not _module_exists(name):
                        missing.append(f"line {number}: {name}")
                elif folders and _BARE.match(word) and span not in folders:
                    if not all(_repo_path_exists(f + word) for f in folders):
                        missing.append(f"line {number}: {word} (in {', '.join(folders)})")
    return missing


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for _, line in _prose_lines(md.read_text()) if line.startswith("#")}


def broken_links(doc: str) -> list[str]:
    """'line N: link (why)' for each relative link of `doc` that does not resolve."""
    here = (ROOT / doc).parent
    broken = []
    for number, line in _prose_lines((ROOT / doc).read_text()):
        for link in _LINK.findall(line):
            if re.match(r"^[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (here / path).resolve() if path else ROOT / doc
            if not target.exists():
                broken.append(f"line {number}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"line {number}: {link} (no heading with that anchor)")
    return broken


@pytest.mark.parametrize("doc", PATH_DOCS)
def test_named_paths_exist(doc: str) -> None:
    missing = missing_paths(doc)
    assert not missing, f"{doc} names {len(missing)} path(s) or module(s) not in the tree:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("doc", LINK_DOCS)
def test_links_resolve(doc: str) -> None:
    broken = broken_links(doc)
    assert not broken, f"{doc} has {len(broken)} broken link(s):\n  " + "\n  ".join(broken)
