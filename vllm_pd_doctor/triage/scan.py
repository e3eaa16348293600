"""One pass over one log: catalogue hits, facts, first exception and last ERROR (bounded state)."""

from __future__ import annotations

import functools
import io
import re
from dataclasses import dataclass, field
from typing import BinaryIO

from vllm_pd_doctor.knowledge import origins as origin_index
from vllm_pd_doctor.knowledge.origins import Origin, OriginIndex
from vllm_pd_doctor.results.triage import Evidence, LocatedLine, LogFacts
from vllm_pd_doctor.triage.catalogue import Code
from vllm_pd_doctor.triage.entries import CLASSES
from vllm_pd_doctor.triage.locate import Locator, located
from vllm_pd_doctor.triage.reader import Record, candidate_lines, normalise, side_of

MAX_EVIDENCE = 3
"""Evidence lines kept per matcher (the first ones)."""
MAX_TEXT = 400
"""Characters of a line kept as evidence."""
MAX_KEPT = 32
"""Lines of a paste kept for matching public threads."""
MAX_LOCATED = 64
"""Located lines kept per log (exceptions first: they are kept past this, up to twice)."""

_FACT_ANCHORS = (
    "Resolved architecture",
    "version",
    "kv_role",
    "kv_connector",
    "prefix_caching",
    "prefix-caching",
    "Creating v1 connector",
    "Setting attention block size",
    "mamba_cache_mode",
    "Traceback",
    "ERROR",
    "CRITICAL",
    "Error",
    "Exception",
    "Exit",
    "Failure",
)
_EXC_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure)|AssertionError)\b(?::|$)"
)
_VERSION = (
    re.compile(r"vLLM API server version v?(\d[\w.+]*)"),
    re.compile(r"Initializing a V1 LLM engine \(v?(\d[\w.+]*)\)"),
    re.compile(r"^version v?(\d[\w.+]*)$"),
    re.compile(r"\bvLLM version:?\s+v?(\d[\w.+]*)"),
)
_ARCH = re.compile(r"Resolved architecture: (\w+)")
_ROLE = re.compile(r"kv_role['\"]?\s*[:=]\s*['\"]?(kv_\w+)")
_CONNECTOR = (
    re.compile(r"kv_connector['\"]?\s*[:=]\s*['\"](\w+)"),
    re.compile(r"Creating v1 connector with name: (\w+)"),
)
_ENGINE_ID = re.compile(r"(?:and engine_id: |Initializing NIXL worker )([\w-]{8,})")
MAX_ENGINE_IDS = 16
_PREFIX = re.compile(r"enable_prefix_caching['\"]?\s*[:=]\s*(True|False|true|false)")
_HYBRID_LINES = (
    "Setting attention block size to",
    "Hybrid KV cache manager is disabled for this hybrid model",
    "mamba_cache_mode",
)


TRIGGERS = (
    "RROR",
    "rror",
    "ailed",
    "xception",
    "assert",
    'File "',
    "NIXL",
    "UCX",
    "WAITING_FOR_REMOTE_KVS",
    "getXferTelemetry",
    "no KVConnector found",
    "Hybrid KV cache manager is disabled",
    "Releasing expired KV blocks",
    "Skipping KV post-processing",
    "hybrid kv cache manager",
    "get_block_ids(req_id)",
    ".cpp:",
    ".go:",
)
"""Literals that pick the lines worth normalising past the head of a log: every line a catalogue
class fires on holds one (ERROR lines, exceptions, assertions, frames, NIXL and UCX lines, and
the few WARNING/DEBUG lines of the catalogue by their own words; a test checks every real
fixture's evidence). Few, because each costs one `bytes.find` pass over the text; not `WARN`,
which would make every routine warning a candidate. `.cpp:` and `.go:`: the `file:line]` of a glog
(NIXL's C++, Mooncake) or klog (llm-d's Go sidecar) line, whose error message may hold none of the
words (`createBackend: unsupported backend 'UCX'`); of those lines only the E/W/F ones go on
(`NATIVE_ALERT`)."""
NATIVE_ALERT = re.compile(r"\b[EWF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.-]+\.(?:go|cpp|cc):\d+\]")
"""A glog/klog ERROR, WARNING or FATAL header (`E0709 10:50:42.153947   75821 proxy.go:148] `, from
llm-d/llm-d-routing-sidecar PR #40; `E0421 11:56:59.775353  709103 nixl_agent.cpp:322] `, from
ai-dynamo/nixl#1561)."""
HEAD_BYTES = 8 << 20
"""The head of each log (startup: version, architecture, kv_role ...) is read with every anchor."""
PASTE_BYTES = 64 << 10
"""An input this small (a pasted line or excerpt, a line given on the command line) has every line
looked up, whatever it holds: no trigger picks them."""


class _Chained(io.RawIOBase):
    """The bytes already read from a stream, then the rest of it."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._head:
            out, self._head = (
                (self._head, b"")
                if n < 0 or n >= len(self._head)
                else (
                    self._head[:n],
                    self._head[n:],
                )
            )
            return out
        return self._rest.read(n)


@functools.cache
def triggers() -> tuple[bytes, ...]:
    return tuple(t.encode() for t in TRIGGERS)


@functools.cache
def head_triggers() -> tuple[bytes, ...]:
    """Every catalogue and fact anchor not already covered by TRIGGERS, plus TRIGGERS."""
    words = {m.anchor for c in CLASSES for m in (*c.matchers, *c.excludes) if m.anchor} | set(_FACT_ANCHORS)
    extra = {w for w in words if not any(t in w for t in TRIGGERS)}
    minimal = {w for w in extra if not any(o != w and o in w for o in extra)}
    return triggers() + tuple(t.encode() for t in sorted(minimal))


@dataclass
class Hit:
    count: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    first_ts: str | None = None
    sides: set[str] = field(default_factory=set)


@dataclass
class FileScan:
    """What one log holds, in bounded memory."""

    file: str
    side: str | None
    hits: dict[tuple[str, int], Hit] = field(default_factory=dict)
    """(class id, matcher index) -> hit; excludes use negative indexes (-1 - i)."""
    lines: int = 0
    bytes: int = 0
    version: str | None = None
    architecture: str | None = None
    kv_role: str | None = None
    connector: str | None = None
    prefix_caching: bool | None = None
    hybrid_evidence: str | None = None
    engine_ids: list[str] = field(default_factory=list)
    first_exception: Evidence | None = None
    last_error: Evidence | None = None
    last_ts: str | None = None
    locator: Locator | None = None
    located: list[LocatedLine] = field(default_factory=list)
    release_hint: str | None = None
    """--python's release (the log's own version, when it states one, comes first)."""
    last_frame: Evidence | None = None
    """The last traceback frame in vLLM's code (a traceback cut before its exception line ends there)."""
    paste: bool = False
    """A small input (a pasted excerpt): every line was read."""
    kept: list[Evidence] = field(default_factory=list)
    """In a paste, its lines (up to MAX_KEPT): what public threads are matched against."""

    def facts(self) -> LogFacts:
        # hybrid only from what the engine logged about its own KV cache (Mamba page alignment,
        # HMA turned off "for this hybrid model", mamba_cache_mode): an architecture name alone
        # does not say it (--model reads the config's structure, --python vLLM's registry)
        evidence = self.hybrid_evidence
        hybrid: bool | None = True if evidence else None
        return LogFacts(
            vllm_version=self.version,
            architecture=self.architecture,
            kv_role=self.kv_role,
            connector=self.connector,
            prefix_caching=self.prefix_caching,
            hybrid=hybrid,
            hybrid_evidence=evidence,
            engine_ids=tuple(self.engine_ids),
        )

    @property
    def file_side(self) -> str | None:
        if self.side:
            return self.side
        if self.kv_role == "kv_producer":
            return "prefill"
        if self.kv_role == "kv_consumer":
            return "decode"
        return side_of(self.file.rsplit("/", 1)[-1])


def evidence(r: Record) -> Evidence:
    text = r.msg if len(r.msg) <= MAX_TEXT else r.msg[:MAX_TEXT] + " ..."
    return Evidence(file=r.file, line=r.line, text=text)


def scan(
    stream: BinaryIO,
    file: str,
    side: str | None = None,
    size: int | None = None,
    index: OriginIndex | None = None,
    release: str | None = None,
) -> FileScan:
    """Read one log to its end; `index` locates its lines (default: the packaged origin index),
    in the log's release, else `release` (--python's)."""
    fs = FileScan(file=file, side=side, bytes=size or 0, release_hint=release)
    fs.locator = Locator(index if index is not None else origin_index.load(), release)
    head = stream.read(PASTE_BYTES + 1)
    paste = len(head) <= PASTE_BYTES
    src: BinaryIO = io.BytesIO(head) if paste else _Chained(head, stream)  # type: ignore[assignment]
    fs.paste = paste
    worth = _worth()
    for lineno, raw in candidate_lines(src, triggers(), head_triggers(), HEAD_BYTES, every=paste):
        if not raw:
            fs.lines = lineno
            continue
        if paste or any(w in raw for w in worth) or NATIVE_ALERT.search(raw):  # a routine WARNING stops here
            _record(fs, normalise(raw, file, lineno))
    return fs


@functools.cache
def _worth() -> tuple[str, ...]:
    """A candidate line is normalised only when it holds one of these: an anchor of the
    catalogue or of the facts, or an error word (first exception, last ERROR)."""
    words = {m.anchor for c in CLASSES for m in (*c.matchers, *c.excludes) if m.anchor} | set(_FACT_ANCHORS)
    words |= {"RROR", "rror", "xception", "CRITICAL", 'File "'}
    return tuple(sorted((w for w in words if not any(o != w and o in w for o in words)), key=len))


@functools.cache
def _flat() -> tuple[tuple[str, re.Pattern[str], tuple[str, int]], ...]:
    """(anchor, regex, hit key) for every matcher and exclude of the catalogue."""
    out = []
    for c in CLASSES:
        out += [(m.anchor, m.regex, (c.id, i)) for i, m in enumerate(c.matchers) if m.anchor]
        out += [(m.anchor, m.regex, (c.id, -1 - i)) for i, m in enumerate(c.excludes) if m.anchor]
    return tuple(out)


@functools.cache
def _code_keys(index: OriginIndex) -> dict[int, tuple[tuple[str, int], ...]]:
    """id(origin) -> hit keys of the matchers and excludes keyed to that statement (built once)."""
    coded = []
    for c in CLASSES:
        coded += [(m.code, (c.id, i)) for i, m in enumerate(c.matchers) if m.code]
        coded += [(m.code, (c.id, -1 - i)) for i, m in enumerate(c.excludes) if m.code]
    out: dict[int, tuple[tuple[str, int], ...]] = {}
    for o in index.origins:
        keys = tuple(k for code, k in coded if code.fits(o))
        if keys:
            out[id(o)] = keys
    return out


@functools.cache
def _value_tests() -> dict[tuple[str, int], Code]:
    """Hit key -> the code matcher that also tests the line's values."""
    out: dict[tuple[str, int], Code] = {}
    for c in CLASSES:
        out.update({(c.id, i): m.code for i, m in enumerate(c.matchers) if m.code and m.code.values})
        out.update({(c.id, -1 - i): m.code for i, m in enumerate(c.excludes) if m.code and m.code.values})
    return out


def _hit(fs: FileScan, key: tuple[str, int], r: Record) -> None:
    hit = fs.hits.get(key)
    if hit is None:
        hit = fs.hits[key] = Hit(first_ts=r.ts)
    hit.count += 1
    if len(hit.evidence) < MAX_EVIDENCE:
        hit.evidence.append(evidence(r))
    hit.sides.add(r.side or fs.side or "")


def _locate(fs: FileScan, r: Record) -> Origin | None:
    loc = fs.locator
    if loc is None:
        return None
    loc.release = fs.version or fs.release_hint
    before = loc.indexed_frame
    got = loc.locate(r)
    if loc.indexed_frame is not None and loc.indexed_frame is not before:
        fs.last_frame = evidence(r)
    if got is None:
        return None
    o, how, exact = got
    is_exc = how != "logger" and o.kind != "log"
    if len(fs.located) < MAX_LOCATED or (is_exc and len(fs.located) < 2 * MAX_LOCATED):
        fs.located.append(LocatedLine(evidence(r), located(loc.index, o, how, exact, loc.release, loc.text)))
    return o


def _record(fs: FileScan, r: Record) -> None:
    msg = r.msg
    if fs.paste and len(fs.kept) < MAX_KEPT and msg.strip():
        fs.kept.append(evidence(r))
    if r.ts:
        fs.last_ts = r.ts
    text = f"{r.tag} {msg}" if r.tag else msg
    keys = {key for anchor, rx, key in _flat() if anchor in text and rx.search(text)}
    o = _locate(fs, r)
    if o is not None and fs.locator is not None:
        coded = _code_keys(fs.locator.index).get(id(o), ())
        tests = _value_tests()
        if any(k in tests for k in coded):  # a class that tests the line's values: read them
            vals = fs.locator.index.values(o, fs.locator.text)
            coded = tuple(k for k in coded if k not in tests or tests[k].values_hold(vals))
        keys.update(coded)
    for key in sorted(keys):
        _hit(fs, key, r)
    _facts(fs, msg)
    stripped = msg.lstrip()
    if _EXC_LINE.match(stripped) and fs.first_exception is None:
        fs.first_exception = evidence(r)
    if (r.level in ("ERROR", "CRITICAL") or msg.startswith(("ERROR", "CRITICAL"))) and not msg.startswith(
        (" ", "\t", "Traceback", "^")
    ):
        fs.last_error = evidence(r)


def _facts(fs: FileScan, msg: str) -> None:
    if fs.version is None and ("version" in msg or "V1 LLM engine" in msg):
        for rx in _VERSION:
            if m := rx.search(msg):
                fs.version = fs.version or m.group(1).rstrip(".,)")
                break
    if fs.architecture is None and (m := _ARCH.search(msg)):
        fs.architecture = m.group(1)
    if fs.kv_role is None and "kv_role" in msg and (m := _ROLE.search(msg)):
        fs.kv_role = m.group(1)
    if fs.connector is None and ("kv_connector" in msg or "Creating v1 connector" in msg):
        for rx in _CONNECTOR:
            if m := rx.search(msg):
                fs.connector = m.group(1)
                break
    if fs.prefix_caching is None and "prefix" in msg:
        if m := _PREFIX.search(msg):
            fs.prefix_caching = m.group(1).lower() == "true"
        elif "--no-enable-prefix-caching" in msg:
            fs.prefix_caching = False
    m = _ENGINE_ID.search(msg) if ("engine_id" in msg or "NIXL worker" in msg) else None
    if m and m.group(1) not in fs.engine_ids and len(fs.engine_ids) < MAX_ENGINE_IDS:
        fs.engine_ids.append(m.group(1))
    if fs.hybrid_evidence is None:
        for needle in _HYBRID_LINES:
            if needle in msg:
                fs.hybrid_evidence = msg[:200]
                break
