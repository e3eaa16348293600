"""Read Python tracebacks out of a vLLM log (pure functions, no vLLM import).

Neutral ground for the live engine (what killed the prefill engine) and the report (which log
lines to excerpt). vLLM prefixes lines from its engine process (`(EngineCore_DP0 pid=123) `) and
its logger (`ERROR 11-30 22:31:39 [core.py:711] `); both are stripped before matching.
"""

from __future__ import annotations

import re

_PREFIX = re.compile(
    r"^(?:\x1b\[[0-9;]*m)*(?:\((?:[A-Za-z0-9_]+)(?: pid=\d+)?\)\s*)?"
    r"(?:(?:\x1b\[[0-9;]*m)*(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?:\x1b\[[0-9;]*m)*\s+"
    r"\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s?)?"
)

TB_START = "Traceback (most recent call last):"
_EXC_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b")
_CHAINED = ("During handling", "The above exception")


def strip_prefix(line: str) -> str:
    """A log line without vLLM's process and logger prefixes."""
    return _PREFIX.sub("", line, count=1)


def traceback_end(body: list[str], start: int) -> int:
    """Index of the last line of the traceback that starts at `start` (prefixes stripped)."""
    i = start + 1
    n = len(body)
    last = start
    while i < n:
        s = body[i]
        if not s.strip():
            i += 1
            continue
        if s.startswith((" ", "\t")) or s.startswith((*_CHAINED, TB_START)):
            last = i
            i += 1
            continue
        if _EXC_LINE.match(s) or s.startswith("AssertionError"):
            last = i
            # chained exceptions continue after a blank line with "During handling ..."
            j = i + 1
            while j < n and not body[j].strip():
                j += 1
            if j < n and body[j].startswith(_CHAINED):
                i = j
                continue
            break
        break
    return last


def tracebacks(text: str) -> tuple[tuple[str, ...], ...]:
    """Each traceback of a log, prefixes stripped, from its first line to its exception line."""
    body = [strip_prefix(line) for line in text.splitlines()]
    out: list[tuple[str, ...]] = []
    i = 0
    while i < len(body):
        if body[i].lstrip().startswith(TB_START):
            end = traceback_end(body, i)
            out.append(tuple(body[i : end + 1]))
            i = end + 1
        else:
            i += 1
    return tuple(out)
