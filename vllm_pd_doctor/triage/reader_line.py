"""One line as people paste it: what wraps the log record, and where the record starts.

A vLLM log line is `[outer prefix][process labels]LEVEL MM-DD HH:MM:SS [file:line] message`; a
Python traceback is `Traceback (most recent call last):`, `  File "...", line N, in f`, the
statement, `ExcType: message`. Whatever a collector put in front (kubectl/stern pod and container,
Loki labels, journald `host unit[pid]:`, compose `service-1  | `, Slurm `0: `, a Markdown quote)
is found by where the record or the traceback starts, not by a list of collectors. The prefix a
file uses is learned from its records (`PrefixLearner`) so that continuation lines which carry the
same prefix but no record (frames and statements printed raw) lose exactly that prefix.
"""

from __future__ import annotations

import html
import re

LEVELS = r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
VLLM_ANY = re.compile(LEVELS + r"\s+(\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+\[([^\]]*)\]\s?")
"""vLLM's record header (`ERROR 10-27 22:25:30 [core.py:1098] `), wherever it starts."""
VLLM_OLD_ANY = re.compile(LEVELS + r"\s+(\d\d-\d\d \d\d:\d\d:\d\d)\s+([\w./-]+\.py:\d+)\]\s?")
"""Releases before 0.8 wrote `ERROR 10-27 22:25:30 core.py:1098] ` (no opening bracket)."""
TRACEBACK = "Traceback (most recent call last):"
FRAME = re.compile(r'File "[^"]+", line \d+')
PROC = r"\((?:([A-Za-z]\w*)(?: pid=\d+)?|(pid=\d+))(?:, ip=[\d.]+)?\)"
"""One process label: `(EngineCore_DP0 pid=296)`, `(APIServer)`, Ray's `(pid=9, ip=10.0.0.1)`; group 1
the process name, group 2 a bare pid. The one definition the readers build theirs from."""
PROCS_TAIL = re.compile(r"(?:" + PROC + r"\s*)+$")
"""Process labels (`(APIServer pid=1) (EngineCore_DP0 pid=296) `, Ray's `(pid=9, ip=..)`) at the
end of a prefix: they belong to the record, not to the collector's prefix."""
PROC_LABEL = re.compile(PROC)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_ENTITY = re.compile(r"&(?:#\d{1,6}|#x[0-9A-Fa-f]{1,6}|[A-Za-z]{2,8});")
_QUOTE = re.compile(r"^[ \t]{0,3}(?:>[ \t]?)+")
_FENCE = re.compile(r"^[ \t]{0,3}(?:```+|~~~+)[\w+-]*[ \t]*")
_WORD = re.compile(r"[^\s\[\](){}<>|\"',;=]+")
_SPACE = re.compile(r"[ \t]+")
MAX_PREFIX = 240
"""A 'prefix' longer than this is message text, not a collector's wrapper."""


def clean(s: str) -> str:
    """Undo what the medium did to a line: CR, ANSI colours, HTML escapes, Markdown quotes and
    fences. Cheap for a line that has none of them."""
    s = s.rstrip("\r\n")
    if "\x1b" in s:
        s = _ANSI.sub("", s)
    if "&" in s and _ENTITY.search(s):
        s = html.unescape(s)
    if s[:1] in (">", " ") and (m := _QUOTE.match(s)) and ">" in m.group(0):
        s = s[m.end() :]
    if s[:1] in ("`", "~", " ") and (m := _FENCE.match(s)):
        s = s[m.end() :]
    return s


def record_start(s: str) -> tuple[int, re.Match[str] | None]:
    """Where the vLLM record (its header match) or the traceback structure starts in the line;
    (-1, None) when neither is in it."""
    m = VLLM_ANY.search(s) if ("[" in s and "-" in s) else None
    if m is None and "]" in s:
        m = VLLM_OLD_ANY.search(s)
    if m is not None:
        return m.start(), m
    i = s.find(TRACEBACK)
    if i >= 0:
        return i, None
    if 'File "' in s and (f := FRAME.search(s)):
        return f.start(), None
    return -1, None


def outer_prefix(prefix: str) -> str:
    """A prefix without the process labels at its end (what the collector added)."""
    m = PROCS_TAIL.search(prefix)
    return prefix[: m.start()] if m else prefix


def procs(prefix: str) -> str | None:
    """The innermost process label in a prefix (`EngineCore_DP0`), or None."""
    found: list[tuple[str, str]] = PROC_LABEL.findall(prefix)
    if not found:
        return None
    a, b = found[-1]
    return a or b


def template(prefix: str) -> re.Pattern[str] | None:
    """The shape of a collector prefix as a regex: each word (pod name, timestamp, label value,
    pid) matches any word, whitespace runs match any run, punctuation stays literal. The
    trailing separator matches one blank, so a frame's own indentation survives."""
    body = prefix.rstrip(" \t")
    if not body or len(prefix) > MAX_PREFIX:
        return None
    out = []
    pos = 0
    for m in _WORD.finditer(body):
        out.append(_literal(body[pos : m.start()]))
        out.append(r"[^\s\[\](){}<>|\"',;=]+")
        pos = m.end()
    out.append(_literal(body[pos:]))
    sep = r"[ \t]" if len(prefix) > len(body) else ""
    return re.compile("".join(out) + sep)


def _literal(text: str) -> str:
    """Punctuation between words, literally; whitespace runs as any run."""
    return r"[ \t]+".join(re.escape(p) for p in _SPACE.split(text))


class PrefixLearner:
    """The collector prefix of one file, learned from the lines where a record or a traceback
    starts after it; strips it from continuation lines (no record of their own)."""

    LEARN = 32
    """Lines learned from (the prefix is the most common shape among them)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._shapes: dict[str, re.Pattern[str] | None] = {}
        self._seen = 0
        self.current: re.Pattern[str] | None = None

    def feed(self, s: str) -> str:
        """The line with the learned prefix stripped when it is a continuation line; a line with
        its own record is returned as is (the record is found wherever it starts)."""
        if s[:1] == "{":
            return s
        start, m = record_start(s)
        if start >= 0:
            if self._seen < self.LEARN:
                self._learn(s[:start], header=m is not None)
            return s
        rx = self.current
        if rx is not None and (pm := rx.match(s)) and pm.end() < len(s):
            return s[pm.end() :]
        return s

    def _learn(self, prefix: str, header: bool) -> None:
        self._seen += 1
        outer = outer_prefix(prefix) if header else outer_prefix(prefix.rstrip(" \t") + " ")
        if not outer.strip():
            outer = ""
        key = _SPACE.sub(" ", _WORD.sub("w", outer))
        self._counts[key] = self._counts.get(key, 0) + 1
        if key not in self._shapes:
            self._shapes[key] = template(outer) if outer else None
        best = max(self._counts, key=lambda k: self._counts[k])
        self.current = self._shapes[best]
