#!/usr/bin/env python3
"""Compare the Metalium API our host runtime implements with the real declarations in the ttnn wheel.

For every name in `ttdecode/runtime/include/IMPLEMENTED_API.txt` (one per line, `#` comments) this
finds the namespace-scope function declarations of that name in our headers
(`ttdecode/runtime/include/**`) and in the real ones (`<ttnn>/tt_metal/hw/inc/{api,internal/dataflow}/**`),
normalises them (comments, whitespace, parameter names, `inline` / `ALWI` / `FORCE_INLINE` / `static` /
`constexpr` / attributes, top-level `const` of by-value parameters, `std::` on fixed-width ints,
template parameter names) and compares namespace, return type, template parameters and parameter types.
Each of our overloads must equal one real declaration (all `#if` branches of the real headers count);
default arguments are compared too and reported as their own kind of mismatch.

It works on the header text (a small C++ declaration scanner), not on a compiler AST: the compute API
headers cannot be compiled without the SFPI toolchain, and the scanner treats both sides alike.
Names that are not functions in the real headers (structs such as `InterleavedAddrGenFast`, variables
such as `noc_index`) are listed as not compared.

Usage: check_signatures.py [--ours DIR] [--api-list FILE] [--real DIR ...]; exit 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

REPO = Path(__file__).resolve().parent.parent
OUR_INCLUDE = REPO / "ttdecode" / "runtime" / "include"
API_LIST = OUR_INCLUDE / "IMPLEMENTED_API.txt"
#: Real header roots inside the ttnn package directory: (directory, recursive?). Only Wormhole's
#: arch headers are scanned, so another arch's variant cannot mask a mismatch.
REAL_ROOTS = (
    ("tt_metal/hw/inc/api", True),
    ("tt_metal/hw/inc/internal/dataflow", True),
    ("tt_metal/hw/inc/internal", False),
    ("tt_metal/hw/inc/internal/tt-1xx", False),
    ("tt_metal/hw/inc/internal/tt-1xx/wormhole", True),
)
HEADER_SUFFIXES = (".h", ".hpp")

#: Words in a declaration's prefix that do not change its type.
SPECIFIERS = {
    "inline", "static", "constexpr", "consteval", "extern", "ALWI", "FORCE_INLINE", "NOINLINE",
    "__attribute__", "virtual", "explicit", "__always_inline", "ALWAYS_INLINE",
}
#: Macros that expand to type attributes and vanish from the type.
TYPE_ATTRIBUTES = {"tt_l1_ptr", "tt_reg_ptr", "__restrict__", "__restrict"}
#: Spellings of one type.
TYPE_ALIASES = {
    "std::uint8_t": "uint8_t", "std::uint16_t": "uint16_t", "std::uint32_t": "uint32_t",
    "std::uint64_t": "uint64_t", "std::int8_t": "int8_t", "std::int16_t": "int16_t",
    "std::int32_t": "int32_t", "std::int64_t": "int64_t", "std::size_t": "size_t",
    "std::uintptr_t": "uintptr_t", "unsigned int": "uint32_t", "unsigned": "uint32_t",
    "uint": "uint32_t", "signed int": "int32_t",
}
_KEYWORDS_NOT_DECL = {"return", "if", "while", "for", "switch", "sizeof", "decltype", "static_assert",
                      "alignof", "noexcept", "case", "else", "do", "new", "delete", "throw", "co_return"}


@dataclass(frozen=True)
class Declaration:
    """One normalised function declaration."""

    name: str
    namespace: str
    template: tuple[str, ...]  # normalised template parameters ("bool", "uint32_t=NOC_MAX_BURST_SIZE+1", ...)
    returns: str
    params: tuple[str, ...]  # normalised parameter types
    defaults: tuple[str | None, ...]  # normalised default argument per parameter (None: none)
    text: str  # the declaration as written (whitespace collapsed)
    where: str  # file:line

    def key(self) -> tuple:
        """What must be equal for two declarations to have the same signature (defaults aside)."""
        return (self.namespace, tuple(t.split("=", 1)[0] for t in self.template), self.returns, self.params)


@dataclass
class Finding:
    """One API name and what the comparison found."""

    name: str
    status: str  # "ok", "mismatch", "default-args", "missing-ours", "missing-real", "not-a-function"
    ours: list[Declaration] = field(default_factory=list)
    real: list[Declaration] = field(default_factory=list)
    detail: str = ""

    def report(self) -> str:
        lines = [f"[{self.status}] {self.name}" + (f": {self.detail}" if self.detail else "")]
        if self.status in ("mismatch", "default-args"):
            for d in self.ours:
                lines.append(f"    ours: {_qualified(d)}    ({d.where})")
            for d in self.real:
                lines.append(f"    real: {_qualified(d)}    ({d.where})")
        return "\n".join(lines)


def _qualified(d: Declaration) -> str:
    return (f"[namespace {d.namespace}] " if d.namespace else "") + d.text


# ---- scanning -----------------------------------------------------------------------------------


_COMMENT_OR_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)


def strip_comments(text: str) -> str:
    """Remove // and /* */ comments, keeping string literals and line numbers."""

    def repl(m: re.Match) -> str:
        s = m.group(0)
        return s if s[0] in "\"'" else "\n" * s.count("\n")

    return _COMMENT_OR_STRING.sub(repl, text)


def blank_preprocessor(text: str) -> str:
    """Replace preprocessor lines (with continuations) by blank lines; keeps offsets' line numbers."""
    lines = text.split("\n")
    out, cont = [], False
    for line in lines:
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def _match_close(text: str, i: int, open_c: str, close_c: str) -> int:
    """Index of the bracket closing the one at text[i], or -1."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside (), <>, [], {}."""
    parts, depth, cur = [], 0, []
    for c in text:
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def _scopes(code: str) -> list[tuple[int, int, str | None]]:
    """Brace blocks as (open, close, namespace name; "" for extern "C"; None for other blocks), sorted."""
    blocks, stack = [], []
    boundary = 0  # just after the last ; { or }
    ns_head = re.compile(r'\bnamespace\s*([A-Za-z_][\w:]*)?\s*$|\bextern\s*"C(?:\+\+)?"\s*$')
    for i, c in enumerate(code):
        if c == "{":
            m = ns_head.search(code, boundary, i)
            kind = None if not m else (m.group(1) or "") if m.group(0).startswith("namespace") else ""
            stack.append((i, kind))
            boundary = i + 1
        elif c == "}":
            if stack:
                start, kind = stack.pop()
                blocks.append((start, i, kind))
            boundary = i + 1
        elif c == ";":
            boundary = i + 1
    return sorted(blocks)


def _enclosing(blocks: list[tuple[int, int, str | None]], pos: int) -> tuple[bool, str]:
    """(at namespace scope?, namespace path) of offset `pos`."""
    names = []
    for start, end, kind in blocks:
        if start > pos:
            break
        if start < pos < end:
            if kind is None:
                return False, ""
            if kind:
                names.append(kind)
    return True, "::".join(names)


def normalise_type(t: str, tparams: dict[str, str]) -> str:
    """A type with spacing, aliases, attribute macros and template-parameter names normalised."""
    t = re.sub(r"\[\[.*?\]\]", " ", t)
    t = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", t)
    words = re.findall(r"[A-Za-z_][\w]*(?:::[A-Za-z_]\w*)*|::|[&*<>,()\[\]]|\d+\w*|\S", t)
    words = [w for w in words if w not in TYPE_ATTRIBUTES and w not in ("typename", "class", "struct")]
    words = [tparams.get(w, w) for w in words]
    s = " ".join(words)
    for alias, canon in sorted(TYPE_ALIASES.items(), key=lambda kv: -len(kv[0])):
        s = re.sub(rf"(?<![\w:]){re.escape(alias)}(?![\w])", canon, s)
    s = re.sub(r"\s*([&*<>,()\[\]])\s*", r"\1", s)
    # `T const` -> `const T` for a leading simple type
    s = re.sub(r"^([\w:]+(?:<[^<>]*>)?) const\b", r"const \1", s)
    return s.strip()


def _strip_top_const(t: str) -> str:
    """Top-level const of a by-value parameter is not part of the function type."""
    if t.endswith("*const"):
        return t[: -len("const")]
    if "*" not in t and "&" not in t and t.startswith("const "):
        return t[len("const "):]
    return t


def _parse_template(head: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """Normalised template parameters and the renaming of their names to T0, T1, ..."""
    m = re.search(r"\btemplate\s*<", head)
    if not m:
        return (), {}
    lt = head.index("<", m.start())
    gt = _match_close(head, lt, "<", ">")
    inner = head[lt + 1 : gt]
    names: dict[str, str] = {}
    parts = _split_top(inner)
    parsed = []
    for i, p in enumerate(parts):
        p = p.strip()
        default = None
        if "=" in p:
            p, default = (x.strip() for x in p.split("=", 1))
        tokens = p.split()
        if len(tokens) >= 2 and re.fullmatch(r"[A-Za-z_]\w*", tokens[-1]) and tokens[-1] != "...":
            names[tokens[-1]] = f"T{i}"
            kind = " ".join(tokens[:-1])
        else:
            kind = p
        parsed.append((kind, default))
    out = []
    for kind, default in parsed:
        k = "typename" if kind in ("typename", "class") else normalise_type(kind, {})
        out.append(k + ("" if default is None else "=" + normalise_type(default, names)))
    return tuple(out), names


_BUILTIN_WORDS = {"int", "char", "short", "long", "float", "double", "bool", "void", "unsigned", "signed", "auto"}
_CV_WORDS = {"const", "volatile", *TYPE_ATTRIBUTES}


def _split_param(p: str, tparams: dict[str, str]) -> tuple[str, str | None]:
    """(normalised type, normalised default or None) of one parameter; the parameter name is dropped."""
    default = None
    parts = _split_top(p, "=")
    if len(parts) > 1:
        p, default = parts[0], "=".join(parts[1:]).strip()
    p = re.sub(r"\[\[.*?\]\]", " ", p).strip()
    array = ""
    m = re.search(r"((?:\[[^\]]*\])+)$", p)
    if m:
        p, array = p[: m.start()].rstrip(), "*"
    m = re.search(r"([A-Za-z_]\w*)$", p)
    if m and m.group(1) not in _BUILTIN_WORDS and m.group(1) not in TYPE_ALIASES:
        before = p[: m.start()]
        rest = [w for w in re.findall(r"[A-Za-z_][\w:]*|[^\s\w]", before) if w not in _CV_WORDS]
        if rest and not before.rstrip().endswith("::"):
            p = before
    t = _strip_top_const(normalise_type(p + array, tparams))
    d = None if default is None else normalise_type(default, tparams)
    return t, d


def scan_declarations(path: Path, wanted: set[str]) -> list[Declaration]:
    """Namespace-scope function declarations (and definitions) of the `wanted` names in one file."""
    raw = path.read_text(errors="replace")
    if not any(w in raw for w in wanted):
        return []
    code = blank_preprocessor(strip_comments(raw))
    blocks = _scopes(code)
    found = []
    pattern = re.compile(r"(?<![\w.:>~])(" + "|".join(re.escape(w) for w in sorted(wanted)) + r")\s*\(")
    for m in pattern.finditer(code):
        name = m.group(1)
        at_ns, ns = _enclosing(blocks, m.start())
        if not at_ns:
            continue
        start = max(code.rfind(";", 0, m.start()), code.rfind("}", 0, m.start()), code.rfind("{", 0, m.start())) + 1
        prefix = code[start : m.start()]
        # keep what follows the last access specifier / label
        prefix = re.split(r"\b(?:public|private|protected)\s*:", prefix)[-1]
        close = _match_close(code, m.end() - 1, "(", ")")
        if close < 0:
            continue
        after = code[close + 1 : close + 200].lstrip()
        if not re.match(r"(const\b|noexcept\b|->|\{|;|override\b|__attribute__|\[\[)", after):
            continue
        template, tnames = _parse_template(prefix)
        head = prefix
        if template:
            lt = head.index("<", re.search(r"\btemplate\s*<", head).start())
            head = head[_match_close(head, lt, "<", ">") + 1 :]
        head = re.sub(r"\[\[.*?\]\]", " ", head)
        head = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", head)
        words = [w for w in head.split() if w not in SPECIFIERS]
        if not words or words[-1] in _KEYWORDS_NOT_DECL or any(w in _KEYWORDS_NOT_DECL for w in words):
            continue
        if any(c in " ".join(words) for c in "=;(){}") or words[-1] in ("operator", "new"):
            continue
        returns = normalise_type(" ".join(words), tnames)
        inner = code[m.end() : close].strip()
        params_raw = [] if inner in ("", "void") else _split_top(inner)
        params = [_split_param(p, tnames) for p in params_raw]
        text = " ".join((prefix + code[m.start() : close + 1]).split())
        line = code.count("\n", 0, m.start()) + 1
        found.append(
            Declaration(
                name=name,
                namespace=ns,
                template=template,
                returns=returns,
                params=tuple(t for t, _ in params),
                defaults=tuple(d for _, d in params),
                text=text,
                where=f"{path}:{line}",
            )
        )
    return found


def _non_function_kind(paths: Iterable[Path], name: str) -> str | None:
    """'struct'/'class'/'variable'/'macro' if `name` is declared as such in the files, else None."""
    for path in paths:
        code = strip_comments(path.read_text(errors="replace"))
        if re.search(rf"#\s*define\s+{re.escape(name)}\b", code):
            return "macro"
        code = blank_preprocessor(code)
        if re.search(rf"\b(struct|class)\s+{re.escape(name)}\b", code):
            return "struct/class"
        if re.search(rf"\b[\w:]+\s*(?:\*\s*)?{re.escape(name)}\s*(\[[^\]]*\])*\s*(=|;)", code):
            return "variable"
    return None


def headers_under(roots: Sequence[Path | tuple[Path, bool]]) -> list[Path]:
    """Every .h / .hpp file under the roots (a root is a dir, recursive, or (dir, recursive?)), sorted."""
    out: list[Path] = []
    for root in roots:
        path, recursive = root if isinstance(root, tuple) else (root, True)
        if not path.is_dir():
            raise FileNotFoundError(f"header root {path} is not a directory")
        files = path.rglob("*") if recursive else path.glob("*")
        out += [p for p in sorted(files) if p.is_file() and p.suffix in HEADER_SUFFIXES]
    return out


def read_api_list(path: Path) -> list[str]:
    """Names of IMPLEMENTED_API.txt: one per line, blank lines and `#` comments ignored."""
    if not path.is_file():
        raise FileNotFoundError(f"api list: {path} does not exist (one implemented API name per line)")
    names = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name = re.sub(r"<.*>$", "", line).strip()  # "get_arg_val<T>" -> "get_arg_val"
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ValueError(f"{path}:{i}: expected one API name per line, got {line!r}")
        names.append(name)
    return names


def real_roots_default() -> list[tuple[Path, bool]]:
    """The real header roots of the installed ttnn wheel (found without importing ttnn)."""
    spec = importlib.util.find_spec("ttnn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the ttnn==0.81.1 wheel is not installed in this Python environment")
    base = Path(list(spec.submodule_search_locations)[0])
    return [(base / r, recursive) for r, recursive in REAL_ROOTS]


def compare(names: Sequence[str], our_headers: Sequence[Path], real_headers: Sequence[Path]) -> list[Finding]:
    """One Finding per name."""
    wanted = set(names)
    ours: dict[str, list[Declaration]] = {n: [] for n in names}
    real: dict[str, list[Declaration]] = {n: [] for n in names}
    for p in our_headers:
        for d in scan_declarations(p, wanted):
            ours[d.name].append(d)
    for p in real_headers:
        for d in scan_declarations(p, wanted):
            real[d.name].append(d)
    findings = []
    for name in names:
        o, r = ours[name], real[name]
        if not r:
            kind = _non_function_kind(real_headers, name)
            if kind:
                findings.append(Finding(name, "not-a-function", o, r, f"a {kind} in the real headers; not compared"))
            else:
                findings.append(Finding(name, "missing-real", o, r, "no declaration in the real headers"))
            continue
        if not o:
            kind = _non_function_kind(our_headers, name)
            if kind and _non_function_kind(real_headers, name) == kind:
                findings.append(Finding(name, "not-a-function", o, r, f"a {kind} in both; not compared"))
            else:
                findings.append(Finding(name, "missing-ours", o, r, "declared in the real headers, not in ours"))
            continue
        bad, defaults = [], []
        for d in o:
            same = [x for x in r if x.key() == d.key()]
            if not same:
                bad.append(d)
            elif not any(x.defaults == d.defaults and x.template == d.template for x in same):
                defaults.append((d, same))
        if bad:
            closest = [x for x in r if len(x.params) == len(bad[0].params)] or r
            findings.append(Finding(name, "mismatch", bad, closest, "no real declaration has this signature"))
        elif defaults:
            d, same = defaults[0]
            findings.append(Finding(name, "default-args", [d], same, "same types, different default arguments"))
        else:
            findings.append(Finding(name, "ok", o, r))
    return findings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", type=Path, default=OUR_INCLUDE)
    parser.add_argument("--api-list", type=Path, default=None)
    parser.add_argument("--real", type=Path, action="append", default=None)
    parser.add_argument("-v", "--verbose", action="store_true", help="list the names that match too")
    args = parser.parse_args(argv)
    api_list = args.api_list or args.ours / "IMPLEMENTED_API.txt"
    names = read_api_list(api_list)
    findings = compare(names, headers_under([args.ours]), headers_under(args.real or real_roots_default()))
    bad = [f for f in findings if f.status not in ("ok", "not-a-function")]
    for f in findings:
        if f.status != "ok" or args.verbose:
            print(f.report())
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.status] = counts.get(f.status, 0) + 1
    print("summary: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
