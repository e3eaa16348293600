"""Find the lines of a vLLM log that matter for a P/D bug report (pure functions).

The failure classes come from `vllm_pd_doctor.triage` (one implementation, one catalogue): this
module only cuts excerpts around what triage names (its evidence lines), around Python
tracebacks (with the lines just before) and around vLLM's `dump_input` runs. Lines keep their
prefixes as written, with their line numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from vllm_pd_doctor.infra.tracebacks import TB_START, strip_prefix, traceback_end
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.results.triage import Evidence, Located
from vllm_pd_doctor.triage import TriageResult, Verdict, triage_text
from vllm_pd_doctor.triage.reader import normalise

_CONTEXT = 2
MAX_EXCERPT_LINES = 80
MAX_DUMP_LINES = 60
_DUMP = "[dump_input.py"
CONTEXT_LINES = (
    "NIXL compatibility check passed",
    "Setting attention block size to",
    "NIXL compatibility hash",
    "Initializing NIXL worker",
    "vLLM API server version",
    "Initializing a V1 LLM engine",
)
"""Not causes: lines a maintainer reads beside a verdict (the handshake's compatibility check
passed or its hash; vLLM aligned a hybrid model's block size; the release and the engine's
config), kept as excerpts with reason `context`."""


@dataclass(frozen=True)
class Excerpt:
    """A run of consecutive log lines (1-based `first_line`) and why it was kept."""

    kind: str
    """traceback, dump_input or signature (a triage verdict's evidence)."""
    reasons: tuple[str, ...]
    """Triage class ids whose evidence lies in these lines (and `dump_input`)."""
    first_line: int
    lines: tuple[str, ...]
    origin: str | None = None
    """Where the code raised or logged it: a traceback's innermost vLLM (else innermost) frame
    with the exception, an ERROR record's logger location (`core.py:710`); then the statement
    triage's origin index located for a line of it (`triage: vllm/...:function (raise ...)`)."""

    @property
    def last_line(self) -> int:
        return self.first_line + len(self.lines) - 1


@dataclass(frozen=True)
class LogFindings:
    """What one log says: triage's verdicts, and the excerpts that show them."""

    signatures: tuple[tuple[str, int], ...]
    """(triage class id, evidence lines), best verdict first."""
    excerpts: tuple[Excerpt, ...]
    verdicts: tuple[Verdict, ...] = ()
    result: TriageResult | None = None

    @property
    def found(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.signatures)


def find(text: str, name: str = "log") -> LogFindings:
    """Triage a log and excerpt it: tracebacks (with the lines just before), dump_input runs,
    and every verdict's evidence lines with a little context."""
    result = triage_text(text, name)
    raw = text.splitlines()
    body, srcs = _bodies(raw, name)
    reasons_at: dict[int, list[str]] = {}
    for v in result.verdicts:
        for e in v.evidence:
            reasons_at.setdefault(e.line - 1, []).append(v.cls)
    for i, line in enumerate(raw):
        if _DUMP in line:
            reasons_at.setdefault(i, []).append("dump_input")
        elif any(c in line for c in CONTEXT_LINES):
            reasons_at.setdefault(i, []).append("context")
    spans: list[tuple[int, int, str]] = []
    i = 0
    while i < len(body):
        if body[i].lstrip().startswith(TB_START):
            end = traceback_end(body, i)
            spans.append((max(0, i - 3), min(end, i + MAX_EXCERPT_LINES), "traceback"))
            i = end + 1
            continue
        i += 1
    i = 0
    while i < len(body):
        if "dump_input" in reasons_at.get(i, ()):
            j = i
            while j + 1 < len(body) and "dump_input" in reasons_at.get(j + 1, ()):
                j += 1
            spans.append((i, min(j, i + MAX_DUMP_LINES - 1), "dump_input"))
            i = j + 1
            continue
        i += 1
    spans += _error_spans(body, srcs, spans)
    covered = bytearray(len(body))  # linear: a list of spans scanned per line was quadratic
    for a, b, _ in spans:
        covered[a : b + 1] = b"\x01" * (b + 1 - a)
    last = -1  # signature spans come in line order: only the last one can cover the next line
    for idx in sorted(reasons_at):
        if idx >= len(raw) or covered[idx] or idx <= last:
            continue
        a, b = max(0, idx - _CONTEXT), min(len(body) - 1, idx + _CONTEXT)
        spans.append((a, b, "signature"))
        last = b
    excerpts = []
    located = {ll.evidence.line: ll.origin for ll in result.located}  # 1-based, bounded per log
    for a, b, kind in _merge(sorted(spans)):
        reasons = tuple(dict.fromkeys(r for k in range(a, b + 1) for r in reasons_at.get(k, ())))
        here = [o for ln, o in sorted(located.items()) if a < ln <= b + 1]
        origin = with_located(origin_of(kind, body[a : b + 1], srcs[a : b + 1]), here)
        excerpts.append(
            Excerpt(kind=kind, reasons=reasons, first_line=a + 1, lines=tuple(raw[a : b + 1]), origin=origin)
        )
    sigs = tuple((v.cls, len(v.evidence)) for v in result.verdicts)
    return LogFindings(signatures=sigs, excerpts=tuple(excerpts), verdicts=result.verdicts, result=result)


_KIND_RANK = {"traceback": 0, "dump_input": 1, "error": 2, "signature": 3}
NORMALISE_MAX_LINES = 400_000
"""Up to this many lines every line is read with triage's reader (any prefix: kubectl/stern,
compose, Ray, journald); beyond, vLLM's own prefixes only (bounded time)."""
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)(?:, in (\S+))?')
_EXC = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception|Exit|Interrupt|Failure))(?::|$)")
MAX_ERROR_SPANS = 200
_LEVELS = ("WARNING", "ERROR", "CRITICAL")
_RECORD = re.compile(
    r"(?:\([A-Za-z0-9_]+ pid=\d+\)\s*)*\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\[([^\]]*)\]\s?"
)
"""vLLM's record (`(EngineCore_DP0 pid=1) ERROR 10-27 22:25:30 [core.py:710] `) wherever it starts:
behind a prefix triage's reader does not know (stern's `pod container `, a paste's quote)."""


def _bodies(raw: list[str], name: str) -> tuple[list[str], list[str | None]]:
    """Each line without its prefixes, and its logger location (`core.py:710`) and level."""
    if len(raw) > NORMALISE_MAX_LINES:
        return [strip_prefix(x) for x in raw], [None] * len(raw)
    body: list[str] = []
    srcs: list[str | None] = []
    for i, line in enumerate(raw, 1):
        r = normalise(line, name, i)
        msg, level, src = r.msg, r.level, r.src
        if level is None and (m := _RECORD.search(line)):  # any other prefix before vLLM's record
            msg, level, src = line[m.end() :], m.group(1), m.group(2)
        body.append(msg)
        srcs.append(f"{level or ''}|{src or ''}")
    return body, srcs


def _error_spans(
    body: list[str], srcs: list[str | None], taken: list[tuple[int, int, str]]
) -> list[tuple[int, int, str]]:
    """Every WARNING/ERROR/CRITICAL record and exception line outside the spans already taken,
    with two lines of context either side (an unrecognised failure keeps what a maintainer
    reads; the bundle's excerpt budget bounds them)."""
    covered = bytearray(len(body))
    for a, b, _ in taken:
        covered[a : b + 1] = b"\x01" * (b + 1 - a)
    out: list[tuple[int, int, str]] = []
    last = -1
    for i, msg in enumerate(body):
        level = (srcs[i] or "|").split("|")[0]
        if covered[i] or i <= last or not (level in _LEVELS or _EXC.match(msg)):
            continue
        a, b = max(0, i - _CONTEXT), min(len(body) - 1, i + _CONTEXT)
        while covered[a]:  # context never reaches into a traceback (it stays its own excerpt)
            a += 1
        while covered[b]:
            b -= 1
        out.append((a, b, "error"))
        last = b
        if len(out) >= MAX_ERROR_SPANS:
            break
    return out


def _short(path: str) -> str:
    """A frame's file from its package on (`vllm/v1/core/sched/scheduler.py`)."""
    parts = path.replace("\\", "/").split("/")
    for root in ("vllm", *connectors.TRANSFER_PACKAGES, "torch"):
        if root in parts[:-1]:
            i = len(parts) - 1 - parts[::-1].index(root)
            return "/".join(parts[i:])
    return path  # anyone else's file: the public form decides (a placeholder unless a safe path)


def _tb_origin(body: list[str]) -> str | None:
    """One traceback's innermost vLLM frame (else innermost frame) and its exception."""
    frames = [m for m in (_FRAME.match(x) for x in body) if m]
    if not frames:
        return None
    exc = next((m.group(1) for m in (_EXC.match(x) for x in body) if m), None)
    vllm = [f for f in frames if _short(f.group(1)).startswith("vllm/")]
    f = (vllm or frames)[-1]
    where = f"{_short(f.group(1))}:{f.group(2)}" + (f" in {f.group(3)}" if f.group(3) else "")
    return where + (f" ({exc})" if exc else "")


def origin_of(kind: str, body: list[str], srcs: list[str | None]) -> str | None:
    """Where an excerpt's failure came from in the code, as the log itself says it: a
    traceback's innermost vLLM frame (else its innermost frame) and the exception; an ERROR
    record's logger location."""
    starts = [i for i, x in enumerate(body) if x.lstrip().startswith(TB_START)]
    if starts:
        parts = [body[a:b] for a, b in zip(starts, [*starts[1:], len(body)], strict=True)]
        got = [o for o in (_tb_origin(x) for x in parts) if o]
        if got:
            return "; ".join(dict.fromkeys(got))
    exc = next((m.group(1) for m in (_EXC.match(x) for x in reversed(body)) if m), None)
    if kind in ("error", "signature", "traceback"):
        for s in srcs:
            level, _, src = (s or "|").partition("|")
            if src and level in ("ERROR", "CRITICAL", "WARNING"):
                return f"{src} (logger location)" + (f" ({exc})" if exc else "")
    return exc


def with_located(origin: str | None, here: Sequence[Located]) -> str | None:
    """The log's own origin of an excerpt and beside it triage's: the statement its origin index
    located for the excerpt's raise/assert line (else its first located line)."""
    o = next((x for x in here if x.kind != "log"), here[0] if here else None)
    if o is None:
        return origin
    what = o.exception or o.level or ""
    tri = f"triage: {o.package}/{o.where} ({o.kind} {what}".rstrip() + f"; {o.releases})"
    return f"{origin}; {tri}" if origin else tri


def _merge(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    for a, b, kind in spans:
        if out and (a <= out[-1][1] or (a == out[-1][1] + 1 and "error" not in (kind, out[-1][2]))):
            pa, pb, pk = out[-1]
            k = pk if _KIND_RANK[pk] <= _KIND_RANK[kind] else kind
            out[-1] = (pa, max(pb, b), k)
        else:
            out.append((a, b, kind))
    return out


def signature_meaning(key: str) -> str:
    """The title of a triage class (what the report prints beside its id)."""
    from vllm_pd_doctor.triage.entries import CLASSES

    for c in CLASSES:
        if c.id == key:
            return c.title
    return key


def cap(text: str, limit: int) -> tuple[str, int]:
    """At most `limit` characters: the first quarter and the last three quarters, the cut
    marked in place. Returns the text and how many characters were cut."""
    if len(text) <= limit:
        return text, 0
    head = limit // 4
    tail = limit - head
    cut = len(text) - head - tail
    marker = f"\n[... pd-doctor cut {cut} characters here (log capped at {limit}) ...]\n"
    return text[:head] + marker + text[len(text) - tail :], cut


def public_triage(r: TriageResult, text: Callable[[str], str]) -> TriageResult:
    """Triage's result with every string that came from the logs through `text` (the public
    bundle's redaction); the catalogue's own words (class, title, fix, references, next,
    missing) are pd-doctor's and stay as written."""

    def ev(e: Evidence | None) -> Evidence | None:
        return None if e is None else replace(e, file=text(e.file), text=text(e.text))

    def evs(es: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
        return tuple(replace(e, file=text(e.file), text=text(e.text)) for e in es)

    def opt(v: str | None) -> str | None:
        return text(v) if v else v

    def origin(o: Located) -> Located:  # the values a line gave (ids, hosts) are the log's
        return replace(o, values=tuple(replace(v, text=text(v.text)) for v in o.values))

    return replace(
        r,
        verdicts=tuple(
            replace(v, evidence=evs(v.evidence), note=text(v.note) if v.note else None) for v in r.verdicts
        ),
        inputs=tuple(
            replace(
                i,
                file=text(i.file),
                facts=replace(
                    i.facts,
                    vllm_version=opt(i.facts.vllm_version),
                    architecture=opt(i.facts.architecture),
                    kv_role=opt(i.facts.kv_role),
                    connector=opt(i.facts.connector),
                    hybrid_evidence=opt(i.facts.hybrid_evidence),
                    engine_ids=tuple(text(x) for x in i.facts.engine_ids),
                ),
                first_exception=ev(i.first_exception),
                last_error=ev(i.last_error),
            )
            for i in r.inputs
        ),
        informative=evs(r.informative),
        warnings=tuple(text(w) for w in r.warnings),
        release=text(r.release) if r.release else None,
        # the origins are vLLM's source (public); the lines and the search built from one are the log's
        located=tuple(
            replace(ll, evidence=evs((ll.evidence,))[0], origin=origin(ll.origin)) for ll in r.located
        ),
        unknown=None
        if r.unknown is None
        else replace(
            r.unknown,
            evidence=evs((r.unknown.evidence,))[0],
            origin=origin(r.unknown.origin) if r.unknown.origin else None,
            search=text(r.unknown.search),
            note=opt(r.unknown.note),
            threads=tuple(replace(t, evidence=evs((t.evidence,))[0]) for t in r.unknown.threads),
        ),
        threads=tuple(replace(t, evidence=evs((t.evidence,))[0]) for t in r.threads),
    )


_IDENTITIES = (
    ("compatibility hash", re.compile(r"compatibility hash:?\s+([0-9a-fA-F]{16,})")),
    ("compatibility hash (local)", re.compile(r"\bLocal:\s*([0-9a-fA-F]{16,})")),
    ("compatibility hash (remote)", re.compile(r"\bRemote:\s*([0-9a-fA-F]{16,})")),
    ("engine id", re.compile(r"Initializing NIXL worker\s+([0-9a-fA-F][0-9a-fA-F-]{7,})")),
    ("engine id", re.compile(r"\bengine_id['\"]?\s*[=:]\s*['\"]?([0-9a-fA-F][0-9a-fA-F-]{7,})")),
    ("remote engine id", re.compile(r"remote_engine_id['\"]?\s*[=:]\s*['\"]?([0-9a-fA-F][0-9a-fA-F-]{7,})")),
)
MAX_IDENTITIES = 8


def identities(text: str) -> tuple[tuple[str, str], ...]:
    """The NIXL compatibility hashes and engine ids a log names ((what, value), first seen
    first, at most MAX_IDENTITIES): the public bundle shows each as its placeholder beside the
    other logs' (same value, same placeholder: P's hash against D's)."""
    out: dict[tuple[str, str], None] = {}
    for line in text.splitlines():
        if "ash" not in line and "ngine" not in line and "emote" not in line:
            continue
        for what, rx in _IDENTITIES:
            for m in rx.finditer(line):
                out.setdefault((what, m.group(1)), None)
                if len(out) >= MAX_IDENTITIES:
                    return tuple(out)
    return tuple(out)
