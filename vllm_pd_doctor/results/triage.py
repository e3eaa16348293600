"""The typed results of `pd-doctor triage` (frozen dataclasses; rendering lives in formats/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from vllm_pd_doctor.results.base import Result

Confidence = Literal["decisive", "likely", "possible"]
CONFIDENCE_RANK: dict[str, int] = {"decisive": 0, "likely": 1, "possible": 2}
Side = Literal["prefill", "decode", "unknown"]

SCHEMA_VERSION = 2
"""Of `pd-doctor triage --format json`: 2 added each origin's `values` and `next_change`, the unknown
answer's `threads`, and verdicts from a public thread (`class` `thread:<repo>#<n>`)."""


@dataclass(frozen=True)
class Evidence:
    """One log line that supports a verdict."""

    file: str
    """The input as given (`-` for stdin)."""
    line: int
    """1-based line number in that input."""
    text: str
    """The line, normalised (prefixes, ANSI and timestamps stripped), capped in length."""


@dataclass(frozen=True)
class LogFacts:
    """Facts a log states about the deployment that wrote it (None: not stated)."""

    vllm_version: str | None = None
    architecture: str | None = None
    kv_role: str | None = None
    connector: str | None = None
    prefix_caching: bool | None = None
    hybrid: bool | None = None
    """The log shows a hybrid (Mamba/SSM + attention) KV cache, or a hybrid architecture."""
    hybrid_evidence: str | None = None
    engine_ids: tuple[str, ...] = ()
    """KV connector engine ids the log announces as its own (correlates the other side's
    `remote_engine_id`)."""


@dataclass(frozen=True)
class Located:
    """The statement of vLLM (or NIXL, LMCache) that wrote or raised a log line (origin index)."""

    package: str
    file: str
    """Relative to the package (`v1/core/sched/scheduler.py`)."""
    function: str
    kind: str
    """`log`, `raise` or `assert`."""
    exception: str | None
    level: str | None
    condition: str | None
    """The assert test or the enclosing `if` test, as source."""
    template: str | None
    """The message as the source builds it (`...` where a value goes)."""
    line: int | None
    release: str | None
    """The release `line` is in (the log's own when `exact`)."""
    releases: str
    """The indexed releases that hold the statement (`0.20.2 (or older) - 0.28.0`)."""
    changed_in: str | None
    """The first indexed release after them (None: the newest indexed still has it)."""
    change: str | None
    """`changed` or `removed` in `changed_in`."""
    how: str
    """`logger` ([file:line] of the log), `frame` (the traceback's file/line), `statement` (the
    frame's source line), `function` (the frame's function) or `template` (the message)."""
    exact: bool
    """The log's own release was read at the line it names."""
    values: tuple[Value, ...] = ()
    """The template's placeholders as the line fills them (named by the source's expressions)."""
    next_change: NextChange | None = None
    """What the first indexed release after the log's (or after `releases`) did to the function."""
    also: tuple[str, ...] = ()
    """For a line located by its message: the other places that write the same message
    (`file:function (first - last)`, oldest first; code that moved between releases)."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.function}"


@dataclass(frozen=True)
class Value:
    """One value of a log line, read at its template's placeholder."""

    name: str
    """The source expression that gives it (`count`, `len(self._reqs_to_send)`, `remote_port`)."""
    type: str
    """`count`, `int`, `float`, `seconds`, `host`, `port`, `rank`, `id`, `path` or `text`."""
    text: str

    @property
    def number(self) -> float | None:
        try:
            return float(self.text)
        except ValueError:
            return None


@dataclass(frozen=True)
class NextChange:
    """The first indexed release after the user's where the statement's function changed."""

    release: str
    kind: str
    """`changed` (see `diff`), `removed`, or `moved` (to `moved_to`)."""
    diff: str | None = None
    """A short unified diff of the function between the two releases (from their sources)."""
    moved_to: str | None = None


@dataclass(frozen=True)
class ThreadMatch:
    """A public thread that quotes the same line, and how it ended."""

    url: str
    title: str
    quoted: str
    """The line as the thread quotes it."""
    cause: str
    fix: str
    certainty: str
    """`maintainer-confirmed`, `fix-merged`, `reporter-confirmed` or `open`."""
    release: str | None
    side: str
    cls: str | None
    """The triage class the thread's cause is, if any."""
    evidence: Evidence
    """Our line that matched its template."""
    packages: tuple[str, ...] = ()
    """Whose code wrote the thread's lines (`vllm`, `nixl`, `mooncake`...)."""


@dataclass(frozen=True)
class LocatedLine:
    """A log line and the statement that wrote it."""

    evidence: Evidence
    origin: Located


@dataclass(frozen=True)
class UnknownCause:
    """With no known class: where the failure came from and what to do next."""

    evidence: Evidence
    """The first exception (else the last ERROR) of the log."""
    origin: Located | None
    side: Side
    next: str
    """`pd-doctor repro --scenario ...` where a scenario covers that code, else the report."""
    search: str
    """What to search upstream (issues and PRs) for."""
    note: str | None = None
    confidence: str = "unknown-cause"
    threads: tuple[ThreadMatch, ...] = ()
    """Public threads that quote the same line (best first)."""
    side_from: str | None = None
    """Where `side` comes from when the log does not say it: the thread (URL) that quotes the line."""


@dataclass(frozen=True)
class InputSummary:
    """One log read."""

    file: str
    side: Side
    lines: int
    bytes: int
    facts: LogFacts
    first_exception: Evidence | None = None
    last_error: Evidence | None = None


@dataclass(frozen=True)
class Verdict:
    """A named cause of the failure, with what supports it and what would decide it."""

    cls: str
    """Catalogue id of the failure class."""
    title: str
    confidence: Confidence
    evidence: tuple[Evidence, ...]
    missing: tuple[str, ...]
    """What would make the verdict decisive (or rule it out)."""
    fix: str
    references: tuple[str, ...]
    next: str
    """The pd-doctor command that verifies it."""
    side: Side = "unknown"
    note: str | None = None
    """Correlation and release notes (e.g. "follows the prefill engine's death at 12:00:03")."""


@dataclass(frozen=True)
class ClassInfo:
    """One failure class of the catalogue, as `pd-doctor triage --list` shows it."""

    id: str
    title: str
    side: str
    fix: str
    references: tuple[str, ...]
    next: str


@dataclass(frozen=True)
class FailureCatalogue(Result):
    """`pd-doctor triage --list`: every failure class."""

    classes: tuple[ClassInfo, ...]


@dataclass(frozen=True)
class TriageResult(Result):
    """Everything `pd-doctor triage` found, best verdict first."""

    verdicts: tuple[Verdict, ...]
    inputs: tuple[InputSummary, ...]
    informative: tuple[Evidence, ...] = ()
    """With no known cause: the most informative lines (first exception, last ERROR)."""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    release: str | None = None
    """The vLLM release examined with --python, if any."""
    unknown: UnknownCause | None = None
    """With no verdict: the origin of the failure (`confidence: unknown-cause`)."""
    located: tuple[LocatedLine, ...] = ()
    """ERROR lines, exceptions and warnings of the logs with the statement that wrote each."""
    threads: tuple[ThreadMatch, ...] = ()
    """The public threads that quote the log's lines (the verdicts' evidence, the located lines,
    first exception, last ERROR, a paste's lines), best first: beside a verdict, or when nothing
    could be placed (no `unknown`); with an `unknown` answer they are its `threads`."""

    @property
    def found(self) -> bool:
        return bool(self.verdicts)
