"""Find the lines of a vLLM log that matter for a P/D bug report (pure functions).

The failure classes come from `vllm_pd_doctor.triage` (one implementation, one catalogue): this
module only cuts excerpts around what triage names (its evidence lines), around Python
tracebacks (with the lines just before) and around vLLM's `dump_input` runs. Lines keep their
prefixes as written, with their line numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from vllm_pd_doctor.tracebacks import TB_START, strip_prefix, traceback_end
from vllm_pd_doctor.triage import TriageResult, Verdict, triage_text
from vllm_pd_doctor.triage.types import Evidence

_CONTEXT = 2
MAX_EXCERPT_LINES = 80
MAX_DUMP_LINES = 60
_DUMP = "[dump_input.py"
CONTEXT_LINES = ("NIXL compatibility check passed", "Setting attention block size to")
"""Not causes: lines a maintainer reads beside a verdict (the handshake's compatibility check
passed; vLLM aligned a hybrid model's block size), kept as excerpts with reason `context`."""


@dataclass(frozen=True)
class Excerpt:
    """A run of consecutive log lines (1-based `first_line`) and why it was kept."""

    kind: str
    """traceback, dump_input or signature (a triage verdict's evidence)."""
    reasons: tuple[str, ...]
    """Triage class ids whose evidence lies in these lines (and `dump_input`)."""
    first_line: int
    lines: tuple[str, ...]

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
    body = [strip_prefix(line) for line in raw]
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
    for a, b, kind in _merge(sorted(spans)):
        reasons = tuple(dict.fromkeys(r for k in range(a, b + 1) for r in reasons_at.get(k, ())))
        excerpts.append(Excerpt(kind=kind, reasons=reasons, first_line=a + 1, lines=tuple(raw[a : b + 1])))
    sigs = tuple((v.cls, len(v.evidence)) for v in result.verdicts)
    return LogFindings(signatures=sigs, excerpts=tuple(excerpts), verdicts=result.verdicts, result=result)


_KIND_RANK = {"traceback": 0, "dump_input": 1, "signature": 2}


def _merge(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    for a, b, kind in spans:
        if out and a <= out[-1][1] + 1:
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
        located=tuple(replace(ll, evidence=evs((ll.evidence,))[0]) for ll in r.located),
        unknown=None
        if r.unknown is None
        else replace(
            r.unknown,
            evidence=evs((r.unknown.evidence,))[0],
            search=text(r.unknown.search),
            note=opt(r.unknown.note),
        ),
    )
