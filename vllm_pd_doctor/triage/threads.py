"""The public threads that quote a log's lines (`knowledge/threads`), ranked, and the verdict a
thread whose cause is established gives on its own.

A thread's quoted line is matched by its template (`threads.match`: placeholders match any value of
their type), never by words; each entry's lookalike is a line its template must not match (tested
with the data). Ranking, best first: how sure the thread's cause is (maintainer-confirmed, fix
merged, reporter-confirmed, open), then how close the reporter's release is to the log's, then how
much literal text the template holds (a longer quote is a closer match).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

from vllm_pd_doctor.knowledge import threads as thread_index
from vllm_pd_doctor.results.triage import Evidence, ThreadMatch, Verdict
from vllm_pd_doctor.triage.reader import normalise

MAX_THREADS = 3
"""Threads shown per answer."""
ESTABLISHED = ("maintainer-confirmed", "fix-merged")
"""A thread this sure of its cause is a `likely` verdict on its own (when no class applies)."""
FOLDER: Path | None = None
"""The thread data folder (None: the packaged one); tests point it at their own entries."""
MAX_LINES = 64
"""Lines of a log matched against the threads (its located lines, first exception, last ERROR)."""


def _distance(a: str | None, b: str | None) -> int:
    """How far two releases are apart (minor versions; unknown: far)."""
    if not a or not b:
        return 99
    try:
        ka, kb = Version(a).release, Version(b).release
    except InvalidVersion:
        return 99
    if len(ka) < 2 or len(kb) < 2:
        return 99
    return abs((ka[0] * 100 + ka[1]) - (kb[0] * 100 + kb[1]))


def _literal(template: str) -> int:
    return len(thread_index._FIELD.sub("", template).strip())


MIN_FORM_LITERAL = 12
"""Literal characters a template's message form keeps (a shorter one would match too much)."""


@functools.cache
def _message_forms(template: str, quoted: str, lookalike: str = "") -> tuple[str, ...]:
    """The template, and the template read as triage reads its quoted line: the reader strips a
    program's prefix from a line (UCX's `... ucp_device.c:415  UCX  ERROR `, glog's, a logger's),
    so the evidence a log gives is its message alone; a template that kept part of that prefix
    (`UCX ERROR failed to select lane ...`) is also matched from the first word where it matches
    the quoted line's message from its start, unless that form takes the entry's lookalike (as
    the reader reads it): then the prefix was what told them apart (a logger's file name)."""
    msg = normalise(quoted, "thread", 1).msg.strip()
    fake = {lookalike, normalise(lookalike, "thread", 1).msg} if lookalike else set()
    if not msg or msg == quoted.strip():
        return (template,)
    for m in re.finditer(r"\s+", template):
        form = template[m.end() :]
        if template[: m.end()].count("{") != template[: m.end()].count("}"):
            continue  # inside a placeholder
        if _literal(form) < MIN_FORM_LITERAL:
            break
        if re.match(r"\{\w+\}", form):
            continue  # an untyped value first would take any text before the literal
        try:
            rx = thread_index.compile_template(form)
            if rx.match(msg):
                return (template, form) if not any(rx.search(x) for x in fake) else (template,)
        except thread_index.TemplateError:
            break
    return (template,)


def _match(template: str, quoted: str, text: str, lookalike: str = "") -> bool:
    for form in _message_forms(template, quoted, lookalike):
        if thread_index.match(form, text) is not None:
            return True
    return False


def nearest(
    lines: Iterable[Evidence],
    release: str | None = None,
    folder: Path | None = None,
    limit: int = MAX_THREADS,
) -> tuple[ThreadMatch, ...]:
    """The threads whose quoted lines' templates match one of `lines`, best first."""
    folder = folder or FOLDER
    try:
        known = thread_index.load(folder) if folder is not None else thread_index.load()
    except (OSError, ValueError):  # a data file being written, or a bad entry: no threads, no crash
        return ()
    if not known:
        return ()
    found: dict[str, tuple[tuple[int, int, int], ThreadMatch]] = {}
    rank = {c: i for i, c in enumerate(thread_index.CERTAINTY)}
    for ev in list(lines)[:MAX_LINES]:
        for t in known:
            for q in t.lines:
                try:
                    hit = _match(q.template, q.quoted, ev.text, q.lookalike)
                except thread_index.TemplateError:
                    continue
                if not hit:
                    continue
                key = (rank.get(t.certainty, 9), _distance(t.release, release), -_literal(q.template))
                if t.url not in found or key < found[t.url][0]:
                    fix = " ".join(x for x in (t.fix_text, f"({t.fix_ref})" if t.fix_ref else "") if x)
                    found[t.url] = (
                        key,
                        ThreadMatch(
                            t.url,
                            t.title,
                            q.quoted,
                            t.cause,
                            fix,
                            t.certainty,
                            t.release,
                            t.side,
                            t.klass,
                            ev,
                            t.packages,
                        ),
                    )
    return tuple(m for _k, m in sorted(found.values(), key=lambda x: x[0]))[:limit]


def verdict(
    matches: Sequence[ThreadMatch], package_of: Callable[[Evidence], str | None] = lambda _e: None
) -> Verdict | None:
    """A `likely` verdict from the best thread whose cause is established, is no catalogue class (a
    thread of a class is that class's evidence: when the class did not fire on the log, its rules -
    excludes, what decides - said no, and the thread does not overrule them), and whose matched
    line the origin index places in code of a package the thread names (`package_of`: a generic
    line such as `ImportError: libcudart.so.12` is written by many packages' code; the thread's
    cause is one of them)."""
    best = next(
        (
            m
            for m in matches
            if m.certainty in ESTABLISHED and not m.cls and package_of(m.evidence) in m.packages
        ),
        None,
    )
    if best is None:
        return None
    repo_num = best.url.split("github.com/", 1)[-1].replace("/issues/", "#").replace("/pull/", "#")
    side = best.side if best.side in ("prefill", "decode") else "unknown"
    return Verdict(
        cls=f"thread:{repo_num}",
        title=f"As in {repo_num}: {best.title}",
        confidence="likely",
        evidence=(best.evidence,),
        missing=("a catalogue class for this cause (none fired: the thread's cause is the answer)",),
        fix=best.fix or best.cause,
        references=(best.url,),
        next="pd-doctor report --log LOG (compare with the thread; cite it upstream)",
        side=side,  # type: ignore[arg-type]
        note=f"{best.certainty}: {best.cause}",
    )
