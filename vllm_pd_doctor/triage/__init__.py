"""`pd-doctor triage`: name the cause of a P/D failure from its logs.

Data flow: log files -> `reader` (streaming, normalised records of the lines that matter) ->
`scan` (catalogue hits from `entries`, facts, first exception, last ERROR; bounded state) ->
`decide` (decision rules with the release/model/connector, correlation of both sides, order)
-> `TriageResult` (types.py) -> formats/*.

The report calls `triage_text()` (one log as text) or `triage()` (files) and puts the first
verdict at the top of report.md / report.json.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge import origins
from vllm_pd_doctor.results.triage import Evidence, InputSummary, TriageResult, Verdict
from vllm_pd_doctor.triage import threads as thread_match
from vllm_pd_doctor.triage.decide import Context, Release, finish, raw_verdicts, release_note, unknown_cause
from vllm_pd_doctor.triage.reader import open_binary
from vllm_pd_doctor.triage.scan import FileScan, scan

__all__ = [
    "Context",
    "LogInput",
    "Release",
    "TriageResult",
    "Verdict",
    "check_inputs",
    "release_from_python",
    "triage",
    "triage_text",
    "triage_texts",
]


@dataclass(frozen=True)
class LogInput:
    path: str
    """A file, a `.gz`, or `-` for stdin."""
    side: str | None = None
    """prefill/decode when the user said so (--prefill-log / --decode-log)."""


def check_inputs(inputs: Sequence[LogInput]) -> None:
    """`BadInput` for no log, stdin twice, a missing path or one that is not a regular file."""
    if not inputs:
        raise BadInput("no log given", hint="pd-doctor triage LOG... (or - for stdin)")
    if sum(1 for i in inputs if i.path == "-") > 1:
        raise BadInput("stdin (-) given more than once")
    for item in inputs:
        if item.path == "-":
            continue
        p = Path(item.path)
        if not p.exists():
            raise BadInput(f"{item.path}: no such file", hint="give the log file, a .gz, or - for stdin")
        if not p.is_file():
            raise BadInput(f"{item.path}: not a regular file")


def triage(inputs: Sequence[LogInput], ctx: Context | None = None) -> TriageResult:
    """Read every log once and name the cause; `BadInput` for a log that cannot be read."""
    check_inputs(inputs)
    ctx = ctx or Context()
    index, release = _index(ctx)
    scans = []
    for item in inputs:
        try:
            stream, size = open_binary(item.path)
            with stream:
                scans.append(scan(stream, item.path, item.side, size, index, release))
        except (OSError, EOFError) as exc:
            raise BadInput(f"{item.path}: cannot be read ({exc})") from None
    return _result(scans, ctx)


def _index(ctx: Context) -> tuple[origins.OriginIndex, str | None]:
    """The origin index (with --python's installed release added) and that release."""
    rel = ctx.release
    if rel is None or not rel.version:
        return origins.load(), None
    if rel.path:
        return origins.with_installed(rel.path, rel.version), rel.version
    return origins.load(), rel.version


def triage_text(
    text: str, name: str = "log", side: str | None = None, ctx: Context | None = None
) -> TriageResult:
    """Triage one log held in memory (what the report calls)."""
    data = text.encode("utf-8", errors="replace")
    ctx = ctx or Context()
    index, release = _index(ctx)
    fs = scan(io.BytesIO(data), name, side, len(data), index, release)
    return _result([fs], ctx)


def triage_texts(items: Sequence[tuple[str, str]], ctx: Context | None = None) -> TriageResult:
    """Triage logs held in memory, (name, text) each, on one timeline (what the report calls)."""
    ctx = ctx or Context()
    index, release = _index(ctx)
    scans = []
    for name, text in items:
        data = text.encode("utf-8", errors="replace")
        scans.append(scan(io.BytesIO(data), name, None, len(data), index, release))
    return _result(scans, ctx)


def _result(scans: list[FileScan], ctx: Context) -> TriageResult:
    facts = [fs.facts() for fs in scans]
    verdicts, notes = finish(raw_verdicts(scans), facts, ctx)
    warnings = list(notes)
    rel = ctx.release
    if rel is not None and rel.version:
        for fs, f in zip(scans, facts, strict=True):
            if f.vllm_version and f.vllm_version.split("+")[0] != rel.version.split("+")[0]:
                warnings.append(
                    f"{fs.file} was written by vLLM {f.vllm_version}, but --python has vLLM {rel.version}: "
                    "the release decision reads the latter"
                )
    inputs = tuple(
        InputSummary(
            file=fs.file,
            side=fs.file_side or "unknown",  # type: ignore[arg-type]
            lines=fs.lines,
            bytes=fs.bytes,
            facts=f,
            first_exception=fs.first_exception,
            last_error=fs.last_error,
        )
        for fs, f in zip(scans, facts, strict=True)
    )
    informative: tuple[Evidence, ...] = ()
    unknown = None
    quoted = [e for v in verdicts for e in v.evidence]
    quoted += [ll.evidence for fs in scans for ll in fs.located]
    quoted += [e for fs in scans for e in (fs.first_exception, fs.last_error, *fs.kept) if e is not None]
    log_release = next((f.vllm_version for f in facts if f.vllm_version), rel.version if rel else None)
    matches = thread_match.nearest(dict.fromkeys(quoted), log_release)
    beside = tuple(matches) if verdicts else ()
    if not verdicts:
        unknown = unknown_cause(scans, matches)
        where = {(ll.evidence.file, ll.evidence.line): ll.origin.package for fs in scans for ll in fs.located}
        if (tv := thread_match.verdict(matches, lambda e: where.get((e.file, e.line)))) is not None:
            verdicts = [tv]
        if unknown is None:  # no line to place (a pasted native stack): the threads stand alone
            beside = tuple(matches)
    warnings.extend(n for fs in scans if fs.located and (n := release_note(fs)))
    if not verdicts:
        seen: list[Evidence] = []
        for fs in scans:
            for e in (fs.first_exception, fs.last_error):
                if e is not None and e not in seen:
                    seen.append(e)
        informative = tuple(seen)
    return TriageResult(
        verdicts=tuple(verdicts),
        inputs=inputs,
        informative=informative,
        warnings=tuple(dict.fromkeys(warnings)),
        release=rel.version if rel else None,
        unknown=unknown,
        located=tuple(ll for fs in scans for ll in fs.located),
        threads=beside,
    )


def release_from_python(python: str | None) -> Release:
    """Read the release's P-side truncation call sites from its source (never imports vLLM)."""
    from vllm_pd_doctor.infra import targetrun
    from vllm_pd_doctor.infra.errors import CouldNotRun
    from vllm_pd_doctor.knowledge.facts import connectors
    from vllm_pd_doctor.knowledge.facts.connectors import EARLY_HOOK, LATE_HOOK
    from vllm_pd_doctor.knowledge.readers import inspect_vllm, nixl_info

    interp = targetrun.resolve_python(python)
    facts = nixl_info.probe(interp, import_nixl=False)
    if facts.vllm_path is None:
        raise CouldNotRun(f"no vLLM installed in {interp}", hint="give --python of the engine's environment")
    src = inspect_vllm.read_source(interp, facts.vllm_path, facts.vllm_version)
    sites = [s for s in src.sites if s.connector in connectors.late_source_words()]
    late = [s for s in sites if s.caller == LATE_HOOK]
    early = [s for s in sites if s.caller == EARLY_HOOK]
    truncates_late: bool | None = True if late else (False if early else None)
    where = ", ".join(s.location for s in (late or early)[:3])
    sched = Path(facts.vllm_path) / "v1/core/sched/scheduler.py"
    try:
        has_assert: bool | None = "assert num_new_tokens > 0" in sched.read_text(encoding="utf-8")
    except OSError:
        has_assert = None
    return Release(
        version=facts.vllm_version,
        truncates_late=truncates_late,
        where=where,
        has_assert=has_assert,
        path=str(facts.vllm_path),
    )
