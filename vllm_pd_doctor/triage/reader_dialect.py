"""What a whole file is, from its first block: a log exported as CSV (Datadog, CloudWatch Logs
Insights: a header with a message column), a JSON document (CloudWatch `filter-log-events`,
Loki's query API, a Datadog JSON export: `"message": "..."` strings), a terminal paste wrapped
at a fixed width, or a page with HTML escapes. Each has a reader that turns it back into log
lines, one logical line at a time, so memory stays bounded.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from vllm_pd_doctor.triage.reader_line import PROC_LABEL, TRACEBACK, VLLM_ANY, clean

CHUNK = 1 << 22
MAX_LINE = 1 << 16
MESSAGE_COLUMNS = ("message", "msg", "log", "line", "content", "text", "textpayload")
"""Column names that hold the log line in an export (`@message` counts as `message`)."""
_HEADER_FIELD = re.compile(r"^[@\w .:-]{1,40}$")
_JSON_STRING = re.compile(
    rb'"(?:message|msg|log|line|@message|MESSAGE|textPayload)"\s*:\s*"((?:[^"\\]|\\.)*)"'
    rb'|\[\s*"\d{10,19}"\s*,\s*"((?:[^"\\]|\\.)*)"'
)
"""A log line inside a JSON document: a message-like key's string, or a Loki `[ns, line]` pair."""
_JSON_DOC = re.compile(r'\s*(?:\{\s*"|\[\s*[\[{"\]])')
"""How a JSON document (not a line of text in brackets) starts."""
_LINE_KEYS = ("message", "msg", "log", "line", "@message", "textPayload", "text")
_HTML = ("&quot;", "&gt;", "&lt;", "&#39;", "&#34;", "&amp;")


@dataclass(frozen=True)
class Dialect:
    csv: tuple[str, int] | None = None
    """(delimiter, message column) of a CSV/TSV export."""
    json_doc: bool = False
    wrap: int | None = None
    """The terminal width a paste was wrapped at."""
    html: bool = False


def sniff(head: bytes) -> Dialect:
    text = head[: 1 << 20].decode("utf-8", errors="replace")
    lines = text.split("\n")
    if len(head) >= CHUNK and len(lines) > 1:
        lines = lines[:-1]
    lines = lines[:4000]
    first = lines[0].lstrip("\ufeff").rstrip("\r") if lines else ""
    html_hits = sum(text.count(e) for e in _HTML)
    dialect_html = html_hits >= 2
    if _JSON_DOC.match(text.lstrip("\ufeff")) and not _json_line(first):
        return Dialect(json_doc=True, html=dialect_html)
    if (c := _csv_header(first)) is not None:
        return Dialect(csv=c, html=dialect_html)
    return Dialect(wrap=_wrap_width(lines), html=dialect_html)


def _json_line(line: str) -> bool:
    """A JSON-lines log: its first line is one object with the message at its top level (a
    one-line JSON document holds its events deeper)."""
    try:
        doc = json.loads(line)
    except ValueError:
        return False
    return isinstance(doc, dict) and any(isinstance(doc.get(k), str) for k in _LINE_KEYS)


def _csv_header(first: str) -> tuple[str, int] | None:
    for delim in (",", "\t", ";"):
        if delim not in first:
            continue
        cols = next(csv.reader([first], delimiter=delim), [])
        names = [c.strip().lstrip("@").lower() for c in cols]
        if len(cols) < 2 or not all(_HEADER_FIELD.match(c.strip()) for c in cols):
            continue
        for i, n in enumerate(names):
            if n in MESSAGE_COLUMNS:
                return delim, i
    return None


def _wrap_width(lines: list[str]) -> int | None:
    """A terminal paste has no line longer than the terminal and many lines exactly as long."""
    lens = [len(x.rstrip("\r")) for x in lines]
    if not lens:
        return None
    width = max(lens)
    at = lens.count(width)
    nonempty = sum(1 for x in lens if x)
    if not (60 <= width <= 400 and at >= 3 and at * 20 >= nonempty):
        return None
    # lines of one length that each start a record are a uniform log, not a wrapped one
    cont = sum(
        1
        for i in range(len(lines) - 1)
        if lens[i] == width and lines[i + 1].strip() and not _new_record(lines[i + 1], lines[i])
    )
    return width if cont * 3 >= at else None


def physical(first: bytes, stream: BinaryIO) -> Iterator[tuple[int, int, str]]:
    """(line number, byte offset, text) of every line, decoded; a line over MAX_LINE is cut."""
    lineno = 0
    offset = 0
    rest = b""
    block = first
    while block:
        buf = rest + block
        parts = buf.split(b"\n")
        rest = parts.pop()
        if len(rest) > CHUNK:
            rest = rest[:MAX_LINE]
        for p in parts:
            lineno += 1
            yield lineno, offset, p[:MAX_LINE].decode("utf-8", errors="replace")
            offset += len(p) + 1
        block = stream.read(CHUNK)
    if rest:
        yield lineno + 1, offset, rest[:MAX_LINE].decode("utf-8", errors="replace")


def _new_record(line: str, prev: str) -> bool:
    s = clean(line)
    if not s or (s[0].isspace() and not s.lstrip().startswith('File "')):
        return False
    if (
        VLLM_ANY.match(s)
        or PROC_LABEL.match(s)
        or s.startswith((TRACEBACK, "{"))
        or s.lstrip().startswith("File")
    ):
        return True
    return len(prev) >= 6 and not prev[:6].isspace() and s[:6] == clean(prev)[:6]


def unwrapped(first: bytes, stream: BinaryIO, width: int) -> Iterator[tuple[int, int, str]]:
    """Logical lines of a paste wrapped at `width`: a line exactly that long continues on the
    next one unless the next starts a record of its own."""
    pending: tuple[int, int, str] | None = None
    last_len = 0
    for lineno, off, text in physical(first, stream):
        body = text.rstrip("\r")
        if (
            pending is not None
            and last_len == width
            and len(pending[2]) < MAX_LINE
            and not _new_record(body, pending[2])
        ):
            pending = (pending[0], pending[1], pending[2] + body)
        else:
            if pending is not None:
                yield pending
            pending = (lineno, off, body)
        last_len = len(body)
    if pending is not None:
        yield pending


def csv_lines(first: bytes, stream: BinaryIO, delim: str, col: int) -> Iterator[tuple[int, int, str]]:
    """The message column of every row (a multi-line message gives one line per line). A field
    over the csv module's limit (128 KiB) is skipped, not held."""
    offsets: list[int] = [0]

    def feed() -> Iterable[str]:
        for _n, off, text in physical(first, stream):
            offsets[0] = off
            yield text + "\n"

    rows = csv.reader(feed(), delimiter=delim)
    started = 1
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error:
            started = rows.line_num + 1
            continue
        if started > 1 and col < len(row):
            for i, part in enumerate(row[col].split("\n")):
                yield started + i, offsets[0], part
        started = rows.line_num + 1


def json_doc_lines(first: bytes, stream: BinaryIO) -> Iterator[tuple[int, int, str]]:
    """Log lines held as strings in a JSON document (pretty or on one line), in order."""
    base_lines = 0
    base_off = 0
    rest = b""
    block = first
    while block:
        buf = rest + block
        end = 0
        counted_to = 0
        lines = base_lines
        for m in _JSON_STRING.finditer(buf):
            lines += buf.count(b"\n", counted_to, m.start())
            counted_to = m.start()
            raw = m.group(1) if m.group(1) is not None else m.group(2)
            try:
                value = json.loads(b'"' + raw[: MAX_LINE * 2] + b'"')
            except ValueError:
                value = raw[:MAX_LINE].decode("utf-8", errors="replace")
            for part in str(value).split("\n"):
                yield lines + 1, base_off + m.start(), part
            end = m.end()
        tail_from = max(end, len(buf) - MAX_LINE * 2)
        base_lines += buf.count(b"\n", 0, tail_from)
        base_off += tail_from
        rest = buf[tail_from:]
        block = stream.read(CHUNK)
