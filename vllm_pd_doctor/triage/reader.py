"""Read logs as people have them, streaming, and normalise the lines that matter.

Inputs: a path, `-` (stdin) or a `.gz`; plain vLLM logs, `kubectl logs` with or without
`--timestamps` / `--prefix`, docker compose prefixes (`prefill-1  | `), Ray and vLLM process
prefixes (`(EngineCore_DP0 pid=123) `, `(Worker_TP1 pid=9) `, nested ones), JSON-lines logs,
ANSI colours, CRLF. Memory stays bounded: the text is read in chunks, a single regular
expression of anchors (the literals the catalogue and the fact extractors need) picks the lines
worth normalising, and only those become `Record`s.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 22
"""Bytes read at a time (4 MiB): the most a pathological single line can make us hold is this
plus the line itself, capped at MAX_LINE."""
MAX_LINE = 1 << 16
"""A line longer than this is cut (its start is what carries the message)."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_K8S_PREFIX = re.compile(r"^\[pod/([^/\]\s]+)/([^\]\s]+)\]\s")
_ISO_TS = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+")
_COMPOSE = re.compile(r"^([A-Za-z0-9][\w.-]*)\s+\|\s")
_PROC = re.compile(r"^\(([A-Za-z]\w*(?: pid=\d+)?|pid=\d+)(?:, ip=[\d.]+)?\)\s*")
_VLLM = re.compile(
    r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+\[([^\]]*)\]\s?"
)
_VLLM_OLD = re.compile(
    r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(\d\d-\d\d \d\d:\d\d:\d\d)\s+([\w.]+:\d+)\]\s?"
)
_VLLM_NOTS = re.compile(r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\[([^\]]*)\]\s?")
_NIXL_PY = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d) NIXL (\w+)\s+(\S+:\d+)\s")
_LMCACHE = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d),\d+\] LMCache (\w+): ")
_GLOG = re.compile(r"^([EWIF])(?:\d{4}|\d{8}) (\d\d:\d\d:\d\d)\.\d+\s+\d+ ([\w.]+:\d+)\]\s")
_BRACKET_TS = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d)\]\s")
_GLOG_LEVEL = {"E": "ERROR", "W": "WARNING", "I": "INFO", "F": "CRITICAL"}
_SIDE_WORDS = (("prefill", "prefill"), ("producer", "prefill"), ("decode", "decode"), ("consumer", "decode"))


@dataclass(frozen=True, slots=True)
class Record:
    """One normalised log line."""

    file: str
    line: int
    msg: str
    """The message, all prefixes stripped."""
    level: str | None = None
    ts: str | None = None
    """`MM-DD HH:MM:SS` (sortable within a year; vLLM's own format)."""
    src: str | None = None
    """Logger location (`worker.py:1263`) when the line says it."""
    proc: str | None = None
    """Process label (`Worker_TP0`, `EngineCore_DP0`), pod or compose service."""
    side: str | None = None
    """prefill/decode when a prefix names it (pod or service name)."""


def side_of(name: str | None) -> str | None:
    if not name:
        return None
    low = name.lower()
    for word, side in _SIDE_WORDS:
        if word in low:
            return side
    return None


def normalise(raw: str, file: str, line: int) -> Record:
    """Strip every known prefix from one line."""
    s = raw.rstrip("\r\n")
    if "\x1b" in s:
        s = _ANSI.sub("", s)
    ts: str | None = None
    level: str | None = None
    src: str | None = None
    proc: str | None = None
    side: str | None = None
    if s.startswith("{"):
        s, level, ts = _json_line(s)
    for _ in range(4):  # outer wrappers in any order: compose, kubectl --prefix, --timestamps
        m = _COMPOSE.match(s) or _K8S_PREFIX.match(s)
        if m:
            proc = m.group(1)
            side = side or side_of(m.group(0))
            s = s[m.end() :]
            continue
        m = _ISO_TS.match(s)
        if m and not _NIXL_PY.match(s):
            ts = ts or f"{m.group(2)}-{m.group(3)} {m.group(4)}"
            s = s[m.end() :]
            continue
        break
    while True:
        m = _PROC.match(s)
        if not m:
            break
        proc = m.group(1).split(" ")[0]
        s = s[m.end() :]
    m = _VLLM.match(s) or _VLLM_OLD.match(s)
    if m:
        level, ts, src = m.group(1), m.group(2), m.group(3)
        s = s[m.end() :]
    elif m := _VLLM_NOTS.match(s):
        level, src = m.group(1), m.group(2)
        s = s[m.end() :]
    elif m := (_NIXL_PY.match(s) or _LMCACHE.match(s)):
        level, ts = m.group(5), f"{m.group(2)}-{m.group(3)} {m.group(4)}"
        if m.re is _NIXL_PY:
            src = m.group(6)
        s = s[m.end() :]
    elif m := _GLOG.match(s):
        level, src = _GLOG_LEVEL[m.group(1)], m.group(3)
        s = s[m.end() :]
    elif m := _BRACKET_TS.match(s):
        ts = f"{m.group(2)}-{m.group(3)} {m.group(4)}"
        s = s[m.end() :]
    if len(s) > MAX_LINE:
        s = s[:MAX_LINE]
    return Record(file=file, line=line, msg=s, level=level, ts=ts, src=src, proc=proc, side=side)


def _json_line(s: str) -> tuple[str, str | None, str | None]:
    try:
        doc = json.loads(s)
    except ValueError:
        return s, None, None
    if not isinstance(doc, dict):
        return s, None, None
    msg = next((doc[k] for k in ("message", "msg", "log", "text") if isinstance(doc.get(k), str)), None)
    if msg is None:
        return s, None, None
    level = next((str(doc[k]).upper() for k in ("level", "levelname", "severity") if doc.get(k)), None)
    ts = None
    for k in ("time", "timestamp", "asctime", "ts", "@timestamp"):
        v = doc.get(k)
        if isinstance(v, str) and (m := re.match(r"\d{4}-(\d\d)-(\d\d)[T ](\d\d:\d\d:\d\d)", v)):
            ts = f"{m.group(1)}-{m.group(2)} {m.group(3)}"
            break
    text = msg.rstrip("\n")
    if level and not re.match(r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s", text):
        return text, level, ts
    return text, level, ts


def open_binary(path: str) -> tuple[BinaryIO, int | None]:
    """The input as a binary stream (stdin for `-`, gunzipped for gzip magic) and its size."""
    if path == "-":
        stream: BinaryIO = sys.stdin.buffer
        size = None
    else:
        p = Path(path)
        stream = p.open("rb")
        size = p.stat().st_size
    head = stream.peek(2)[:2] if hasattr(stream, "peek") else b""
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=stream, mode="rb"), size  # type: ignore[return-value]
    return stream, size


def candidate_lines(
    stream: BinaryIO,
    triggers: tuple[bytes, ...],
    head_triggers: tuple[bytes, ...] = (),
    head_bytes: int = 0,
) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for every line that holds a trigger, in order; the last item
    is (total lines, "") so the caller learns the count. Works on bytes (no decoding of the lines
    that do not matter); each trigger is found with `bytes.find`, which runs at memory speed.
    The first `head_bytes` are searched with `head_triggers` (more literals) instead."""
    base = 0  # lines before the current buffer
    seen = 0  # bytes before the current buffer
    rest = b""
    while True:
        block = stream.read(CHUNK)
        if not block:
            break
        buf = rest + block if rest else block
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            rest = buf[:MAX_LINE] if len(buf) > CHUNK else buf  # an enormous line: keep its start
            continue
        rest = buf[cut:]
        if len(rest) > CHUNK:
            rest = rest[:MAX_LINE]
        yield from _scan(buf, cut, base, head_triggers if seen < head_bytes and head_triggers else triggers)
        base += buf.count(b"\n", 0, cut)
        seen += cut
    if rest:
        yield from _scan(
            rest + b"\n",
            len(rest) + 1,
            base,
            head_triggers if seen < head_bytes and head_triggers else triggers,
        )
        base += 1
    yield base, ""


def _scan(buf: bytes, end: int, base: int, triggers: tuple[bytes, ...]) -> Iterator[tuple[int, str]]:
    spans: dict[int, int] = {}
    find, rfind = buf.find, buf.rfind
    for t in triggers:
        i = find(t, 0, end)
        while i >= 0:
            start = rfind(b"\n", 0, i) + 1
            stop = find(b"\n", i, end)
            if stop < 0:
                stop = end
            spans[start] = stop
            i = find(t, stop, end)
    counted = 0
    counted_to = 0
    for start in sorted(spans):
        counted += buf.count(b"\n", counted_to, start)
        counted_to = start
        line = buf[start : min(spans[start], start + MAX_LINE)]
        yield base + counted + 1, line.decode("utf-8", errors="replace")
