"""Read logs as people have them, streaming, and normalise the lines that matter.

Inputs: a path, `-` (stdin) or a `.gz`; plain vLLM logs and the same lines behind whatever a
collector or a paste put in front of them: `kubectl logs` with `--timestamps` / `--prefix`, stern
(pod and container), Loki/Grafana text exports (timestamp, labels, line), journald
(`Mon DD HH:MM:SS host unit[pid]: `), docker compose (`service-1  | `), Ray and vLLM process
labels, Slurm `srun --label` (`0: `), Markdown quotes and fences, HTML escapes, ANSI colours,
CRLF; JSON lines; CSV/TSV exports with a message column (Datadog, CloudWatch Logs Insights) and
JSON documents (CloudWatch `filter-log-events`, Loki's query API); terminal pastes wrapped at a
fixed width. The record is found where it starts (`reader_line`), the file's kind from its first
block (`reader_dialect`). Memory stays bounded: the text is read in chunks, literals (the
catalogue's and the fact extractors' anchors) pick the lines worth normalising, and only those
become `Record`s.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from vllm_pd_doctor.triage.reader_dialect import csv_lines, json_doc_lines, sniff, unwrapped
from vllm_pd_doctor.triage.reader_line import (
    MAX_PREFIX,
    PROC,
    PrefixLearner,
    clean,
    outer_prefix,
    procs,
    record_start,
)

CHUNK = 1 << 22
"""Bytes read at a time (4 MiB): the most a pathological single line can make us hold is this
plus the line itself, capped at MAX_LINE."""
MAX_LINE = 1 << 16
"""A line longer than this is cut (its start is what carries the message)."""

_K8S_PREFIX = re.compile(r"^\[pod/([^/\]\s]+)/([^\]\s]+)\]\s")
_ISO_TS = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+")
_COMPOSE = re.compile(r"^([A-Za-z0-9][\w.-]*)\s+\|\s")
_PROC = re.compile(r"^" + PROC + r"[ \t]?")
"""A process label and its one separator (a raw frame or statement behind it keeps its indent)."""
_VLLM_NOTS = re.compile(r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\[([^\]]*)\]\s?")
_NIXL_PY = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d) NIXL (\w+)\s+(\S+:\d+)\s")
_LMCACHE = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d),\d+\] LMCache (\w+): ")
_GLOG = re.compile(r"^([EWIF])(?:\d{4}|\d{8}) (\d\d:\d\d:\d\d)\.\d+\s+\d+ ([\w.]+:\d+)\]\s")
_UCX = re.compile(
    r"^\[(\d{9,11})\.\d+\]\s+\[[^\]]*\]\s+([\w.-]+:\d+)\s+UCX\s+(ERROR|WARN|FATAL|DIAG|INFO|PRINT|DEBUG|TRACE\w*)\s+"
)
"""UCX's logger (src/ucs/debug/log.c): `[1750835683.514002] [TENCENT64:1392 :0]   select.c:649  UCX  ERROR
no active messages transport to ...` (openucx/ucx#10738): epoch time, [host:pid:thread], file:line, level."""
_UCX_FATAL = re.compile(r"^\[[^\]\s:]+:\d+\] FATAL: ")
"""UCX's load-time CPU check (src/ucs/sys/init.c) prints `[<host>:<pid>] FATAL: UCX library was compiled
with avx but CPU does not support it.` (ai-dynamo/nixl#2119) straight to stderr: the bracket is part of
its format, so the line is kept whole."""
_UCX_LEVEL = {"WARN": "WARNING", "FATAL": "CRITICAL"}
_BRACKET_TS = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d)\]\s")
_JSON_FIELD = re.compile(
    r'^\s*"(?:message|msg|log|line|@message|MESSAGE|textPayload)"\s*:\s*("(?:[^"\\]|\\.)*")'
)
"""One line of a pretty-printed JSON export: `"message": "..."`."""
_SRC_LIKE = re.compile(r"^[\w./-]+\.\w+:\d+$")
_GO_FRAME = re.compile(r"\n\t\S*?([\w.-]+\.go:\d+)")
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
    tag: str | None = None
    """The program's own tag the reader stripped with its prefix (UCX's `UCX  ERROR`): catalogue
    patterns that name it (`UCX\\s+ERROR ...`) see it before the message, as in a bare paste."""


def side_of(name: str | None) -> str | None:
    if not name:
        return None
    low = name.lower()
    for word, side in _SIDE_WORDS:
        if word in low:
            return side
    return None


def normalise(raw: str, file: str, line: int) -> Record:
    """Strip every prefix from one line: the record is found where it starts."""
    s = clean(raw)
    ts: str | None = None
    level: str | None = None
    src: str | None = None
    if s.startswith("{"):
        s, level, ts, src = _json_line(s)
        s = clean(s)
    elif s.lstrip().startswith('"') and (j := _JSON_FIELD.match(s)):
        s = _json_string(j.group(1))
    start, m = record_start(s)
    if m is not None:
        prefix = s[:start]
        s = s[m.end() :]
        if len(s) > MAX_LINE:
            s = s[:MAX_LINE]
        return Record(
            file=file,
            line=line,
            msg=s,
            level=m.group(1),
            ts=m.group(2),
            src=m.group(3),
            proc=procs(prefix) if prefix else None,
            side=side_of(outer_prefix(prefix)) if prefix else None,
        )
    return _headerless(s, file, line, level, ts, src)


def _headerless(
    s: str, file: str, line: int, level: str | None, ts: str | None, src: str | None = None
) -> Record:
    """A line with no vLLM header: known wrappers, then the other writers' formats, then a
    traceback after an unknown prefix."""
    proc: str | None = None
    side: str | None = None
    tag: str | None = None
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
        proc = m.group(1) or m.group(2)
        s = s[m.end() :]
    if m := _VLLM_NOTS.match(s):
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
    elif s.startswith("[") and (m := _UCX.match(s)):
        level, src = _UCX_LEVEL.get(m.group(3), m.group(3)), m.group(2)
        tag = f"UCX  {m.group(3)}"
        ts = ts or time.strftime("%m-%d %H:%M:%S", time.gmtime(int(m.group(1))))
        s = s[m.end() :]
    elif s.startswith("[") and _UCX_FATAL.match(s):
        level = "CRITICAL"
    elif m := _BRACKET_TS.match(s):
        ts = f"{m.group(2)}-{m.group(3)} {m.group(4)}"
        s = s[m.end() :]
    else:
        start, _ = record_start(s)
        if 0 < start <= MAX_PREFIX:
            prefix, s = s[:start], s[start:]
            proc = procs(prefix) or proc
            side = side or side_of(outer_prefix(prefix))
    if s.startswith('File "'):
        s = "  " + s  # a frame keeps its indentation (an ERROR line is never a frame)
    if len(s) > MAX_LINE:
        s = s[:MAX_LINE]
    return Record(file=file, line=line, msg=s, level=level, ts=ts, src=src, proc=proc, side=side, tag=tag)


def _json_string(value: str) -> str:
    try:
        out = json.loads(value)
    except ValueError:
        return value[1:-1]
    return str(out).split("\n", 1)[0] if isinstance(out, str) else value


_MESSAGE_KEYS = ("message", "msg", "log", "line", "@message", "textPayload", "text")


def _json_line(s: str) -> tuple[str, str | None, str | None, str | None]:
    try:
        doc = json.loads(s)
    except ValueError:
        return s, None, None, None
    if not isinstance(doc, dict):
        return s, None, None, None
    msg = next(
        (
            doc[k]
            for k in ("message", "msg", "log", "line", "@message", "textPayload", "text")
            if isinstance(doc.get(k), str)
        ),
        None,
    )
    if msg is None:
        return s, None, None, None
    level = next((str(doc[k]).upper() for k in ("level", "levelname", "severity") if doc.get(k)), None)
    ts = None
    for k in ("time", "timestamp", "asctime", "ts", "@timestamp"):
        v = doc.get(k)
        if isinstance(v, str) and (m := re.match(r"\d{4}-(\d\d)-(\d\d)[T ](\d\d:\d\d:\d\d)", v)):
            ts = f"{m.group(1)}-{m.group(2)} {m.group(3)}"
            break
    text = msg.rstrip("\n")
    return text, level, ts, _json_src(doc)


def _json_src(doc: dict[str, object]) -> str | None:
    """Where a structured Go logger wrote the line: zap's `caller` (`proxy/proxy.go:148`), else the
    first frame of its `stacktrace` (llm-d/llm-d#633: `/workspace/pkg/sidecar/proxy/proxy_helpers.go:117`,
    kept as `proxy_helpers.go:117`)."""
    caller = doc.get("caller")
    if isinstance(caller, str) and _SRC_LIKE.match(caller):
        return caller
    trace = doc.get("stacktrace")
    if isinstance(trace, str) and (m := _GO_FRAME.search(trace)):
        return m.group(1)
    return None


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
    every: bool = False,
) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for every line that holds a trigger (`every`: every line, for
    a paste of a few lines), in order; the last item
    is (total lines, "") so the caller learns the count. The first `head_bytes` are searched
    with `head_triggers` (more literals) instead. A plain log is searched as bytes (no decoding
    of the lines that do not matter; each trigger is one `bytes.find` pass, at memory speed);
    an export or a wrapped paste (`reader_dialect.sniff`) is turned back into log lines first.
    Every line handed over has lost the medium's escapes and, when it is a continuation line
    (a frame or statement printed without a record of its own), the collector prefix the file's
    records showed (`PrefixLearner`)."""
    first = stream.read(CHUNK)
    dialect = sniff(first)
    learner = PrefixLearner()
    if dialect.html:
        triggers = _escaped(triggers)
        head_triggers = _escaped(head_triggers)
    if every:
        triggers = head_triggers = (b"",)
    if dialect.json_doc or dialect.csv or dialect.wrap:
        if dialect.json_doc:
            logical = json_doc_lines(first, stream)
        elif dialect.csv:
            logical = csv_lines(first, stream, *dialect.csv)
        else:
            logical = unwrapped(first, stream, dialect.wrap or 0)
        yield from _logical(logical, learner, triggers, head_triggers, head_bytes)
        return
    if every:
        n = 0
        for n, raw in enumerate((first + stream.read()).split(b"\n"), 1):
            line = raw.decode("utf-8", errors="replace")[:MAX_LINE]
            if line.strip():
                yield n, learner.feed(clean(line))
        yield max(n - 1, 0) if first.endswith(b"\n") else n, ""
        return
    for lineno, line in _plain(first, stream, triggers, head_triggers, head_bytes):
        yield lineno, (learner.feed(clean(line)) if line else line)


def _escaped(triggers: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """The triggers as an HTML page writes them (`File &quot;`) as well."""
    extra = [t.replace(b'"', e) for t in triggers if b'"' in t for e in (b"&quot;", b"&#34;")]
    return triggers + tuple(extra)


def _logical(
    lines: Iterator[tuple[int, int, str]],
    learner: PrefixLearner,
    triggers: tuple[bytes, ...],
    head_triggers: tuple[bytes, ...],
    head_bytes: int,
) -> Iterator[tuple[int, str]]:
    tail = tuple(t.decode("utf-8", errors="replace") for t in triggers)
    head = tuple(t.decode("utf-8", errors="replace") for t in head_triggers) or tail
    last = 0
    after_frame = False
    for lineno, offset, text in lines:
        last = max(last, lineno)
        words = head if offset < head_bytes else tail
        if text and (after_frame or any(w in text for w in words)):
            yield lineno, learner.feed(clean(text))
        after_frame = 'File "' in text or "File &quot;" in text
    yield last, ""


def _plain(
    first: bytes,
    stream: BinaryIO,
    triggers: tuple[bytes, ...],
    head_triggers: tuple[bytes, ...],
    head_bytes: int,
) -> Iterator[tuple[int, str]]:
    base = 0  # lines before the current buffer
    seen = 0  # bytes before the current buffer
    rest = b""
    block = first
    while block:
        buf = rest + block if rest else block
        block = stream.read(CHUNK)
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
    """The lines of `buf[:end]` that hold a trigger; a traceback frame brings the line after it
    (the statement that raised, which holds no trigger of its own)."""
    spans: dict[int, int] = {}
    find, rfind = buf.find, buf.rfind
    for t in triggers:
        follow = t.startswith(b"File ")
        i = find(t, 0, end)
        while i >= 0:
            start = rfind(b"\n", 0, i) + 1
            stop = find(b"\n", i, end)
            if stop < 0:
                stop = end
            spans[start] = stop
            if follow and stop + 1 < end:
                after = find(b"\n", stop + 1, end)
                spans[stop + 1] = end if after < 0 else after
            i = find(t, stop, end)
    counted = 0
    counted_to = 0
    for start in sorted(spans):
        counted += buf.count(b"\n", counted_to, start)
        counted_to = start
        line = buf[start : min(spans[start], start + MAX_LINE)]
        yield base + counted + 1, line.decode("utf-8", errors="replace")
