"""Counting log lines of tt-metal's logger and ttnn's loguru logger in a captured output.

Both loggers may colour their lines with ANSI escapes (seen in CI, not on a terminal here), so the escapes are
removed before a line is matched: a test that looks for "no log line" must not pass because the lines are coloured.
"""

from __future__ import annotations

import re

#: An ANSI SGR escape (colour, bold, reset), as tt-metal's logger writes them.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")

#: A line of tt-metal's logger (``2026-.. | info | Device | Opening ...``) or ttnn's loguru logger (``| DEBUG |``).
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d .*\| *(trace|debug|info|warning|DEBUG|INFO|WARNING) *\|", re.M)


def plain(text: str) -> str:
    """``text`` without ANSI colour escapes."""
    return ANSI_ESCAPE.sub("", text)


def log_lines(text: str) -> list[str]:
    """The log levels of every logger line in ``text`` (coloured or not), in order."""
    return LOG_LINE.findall(plain(text))
