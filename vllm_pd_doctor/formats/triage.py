"""`pd-doctor triage`'s verdicts and its failure catalogue (`TriageResult`, `FailureCatalogue`) in
every format."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from vllm_pd_doctor.results.base import SCHEMA_VERSION
from vllm_pd_doctor.results.triage import SCHEMA_VERSION as TRIAGE_SCHEMA
from vllm_pd_doctor.results.triage import FailureCatalogue, Located, ThreadMatch, TriageResult, UnknownCause

# --- table (rich, for people)


def triage_table(r: TriageResult) -> RenderableType:
    """`pd-doctor triage` for people: one panel per verdict, best first."""
    parts: list[RenderableType] = []
    for w in r.warnings:
        parts.append(Text(f"note: {w}", style="yellow"))
    if r.unknown is not None:
        parts.append(_unknown_panel(r.unknown))
    if not r.verdicts:
        t = Text("No known cause. ", style="bold")
        if r.informative:
            t.append("The most informative lines:\n")
        elif r.unknown is not None:
            t.append("No exception and no ERROR line; where the line comes from is above.")
        else:
            t.append("No exception and no ERROR line.")
        for e in r.informative:
            t.append(f"  {e.file}:{e.line}: {e.text}\n")
        parts.append(t)
    style = {"decisive": "bold red", "likely": "red", "possible": "yellow"}
    for n, v in enumerate(r.verdicts, 1):
        body = Text()
        body.append(f"{v.confidence}", style=style.get(v.confidence, ""))
        body.append(f"  ({v.cls}, {v.side} side)\n")
        if v.note:
            body.append(f"{v.note}\n", style="italic")
        for e in v.evidence:
            body.append(f"  {e.file}:{e.line}: ", style="dim")
            body.append(f"{e.text}\n")
        body.append("fix: ", style="bold")
        body.append(f"{v.fix}\n")
        if v.missing:
            body.append("missing: ", style="bold")
            body.append("; ".join(v.missing) + "\n")
        body.append("next: ", style="bold")
        body.append(f"{v.next}\n")
        body.append("refs: " + ", ".join(v.references), style="dim")
        parts.append(Panel(body, title=f"{n}. {v.title}", title_align="left"))
    for th in r.threads:
        line = f"thread quoting a line of the log: {th.url} ({th.certainty}): {th.cause}"
        parts.append(Text(line, style="dim"))
    inputs = Table(title="inputs", title_justify="left")
    for col in ("log", "side", "lines", "vLLM", "architecture", "kv_role", "connector"):
        inputs.add_column(col)
    for i in r.inputs:
        f = i.facts
        inputs.add_row(
            i.file,
            i.side,
            str(i.lines),
            f.vllm_version or "-",
            f.architecture or "-",
            f.kv_role or "-",
            f.connector or "-",
        )
    parts.append(inputs)
    return Group(*parts)


def _unknown_panel(u: UnknownCause) -> RenderableType:
    body = Text()
    body.append(u.confidence, style="yellow")
    body.append(f"  ({u.side} side)\n")
    if u.side_from:
        body.append(f"side as in {u.side_from}\n", style="italic")
    body.append(f"  {u.evidence.file}:{u.evidence.line}: ", style="dim")
    body.append(f"{u.evidence.text}\n")
    o = u.origin
    if o is not None:
        what = o.exception or o.level or ""
        line = f" line {o.line}" + (f" of {o.release}" if o.release else "") if o.line else ""
        body.append("origin: ", style="bold")
        body.append(f"{o.package}/{o.file}:{o.function} ({o.kind} {what}{line}, by {o.how})\n")
        if o.condition:
            body.append("condition: ", style="bold")
            body.append(f"{o.condition}\n")
        body.append("releases: ", style="bold")
        change = f"; {o.change} in {o.changed_in}" if o.changed_in else "; still in the newest indexed"
        body.append(f"{o.releases}{change}\n")
        for line in _details(o):
            body.append(line + "\n")
    for t in u.threads:
        body.append("thread: ", style="bold")
        body.append(f"{t.url} ({t.certainty}{', ' + t.release if t.release else ''}): {t.cause}\n")
        if t.fix:
            body.append(f"  fix: {t.fix}\n")
    body.append("next: ", style="bold")
    body.append(f"{u.next}\n")
    body.append(f"search upstream: {u.search}", style="dim")
    return Panel(body, title="Where it came from (no known class)", title_align="left")


def _details(o: Located) -> list[str]:
    """The values a line gave and what the next release changed there, as text lines."""
    out = [f"same message also: {a}" for a in o.also]
    if o.values:
        out.append("values: " + ", ".join(f"{v.name}={v.text} ({v.type})" for v in o.values))
    nc = o.next_change
    if nc is not None:
        where = f" to {nc.moved_to}" if nc.moved_to else ""
        out.append(f"next change: {nc.kind}{where} in {nc.release}")
        if nc.diff:
            out.extend("  " + ln for ln in nc.diff.splitlines())
    return out


def catalogue_table(c: FailureCatalogue) -> RenderableType:
    """`pd-doctor triage --list`: the failure classes."""
    table = Table(title="pd-doctor triage: failure classes", title_justify="left")
    for col in ("class", "title", "side", "references"):
        table.add_column(col)
    for x in c.classes:
        table.add_row(x.id, x.title, x.side, ", ".join(x.references))
    return table


# --- JSON (documents with schema_version)


def triage_obj(r: TriageResult) -> dict[str, Any]:
    """`pd-doctor triage --format json` (a `results.triage.TriageResult`)."""

    def ev(e: Any) -> dict[str, Any] | None:
        return None if e is None else {"file": e.file, "line": e.line, "text": e.text}

    return {
        "schema_version": TRIAGE_SCHEMA,
        "verdicts": [
            {
                "class": v.cls,
                "title": v.title,
                "confidence": v.confidence,
                "side": v.side,
                "evidence": [ev(e) for e in v.evidence],
                "missing": list(v.missing),
                "fix": v.fix,
                "references": list(v.references),
                "next": v.next,
                "note": v.note,
            }
            for v in r.verdicts
        ],
        "no_known_cause": not r.verdicts,
        "informative": [ev(e) for e in r.informative],
        "inputs": [
            {
                "file": i.file,
                "side": i.side,
                "lines": i.lines,
                "bytes": i.bytes,
                "facts": {
                    "vllm_version": i.facts.vllm_version,
                    "architecture": i.facts.architecture,
                    "kv_role": i.facts.kv_role,
                    "connector": i.facts.connector,
                    "prefix_caching": i.facts.prefix_caching,
                    "hybrid": i.facts.hybrid,
                },
                "first_exception": ev(i.first_exception),
                "last_error": ev(i.last_error),
            }
            for i in r.inputs
        ],
        "release": r.release,
        "warnings": list(r.warnings),
        "unknown": unknown_obj(r.unknown),
        "located": [{"evidence": ev(ll.evidence), "origin": located_obj(ll.origin)} for ll in r.located],
        "threads": [thread_obj(t) for t in r.threads],
    }


def located_obj(o: Located | None) -> dict[str, Any] | None:
    """One origin (`vllm_pd_doctor.results.triage.Located`) as JSON."""
    if o is None:
        return None
    return {
        "package": o.package,
        "file": o.file,
        "function": o.function,
        "kind": o.kind,
        "exception": o.exception,
        "level": o.level,
        "condition": o.condition,
        "template": o.template,
        "line": o.line,
        "release": o.release,
        "releases": o.releases,
        "changed_in": o.changed_in,
        "change": o.change,
        "how": o.how,
        "exact": o.exact,
        "values": [{"name": v.name, "type": v.type, "text": v.text} for v in o.values],
        "also": list(o.also),
        "next_change": None
        if o.next_change is None
        else {
            "release": o.next_change.release,
            "kind": o.next_change.kind,
            "diff": o.next_change.diff,
            "moved_to": o.next_change.moved_to,
        },
    }


def thread_obj(t: ThreadMatch) -> dict[str, Any]:
    """One public thread that quotes the same line."""
    return {
        "url": t.url,
        "title": t.title,
        "quoted": t.quoted,
        "cause": t.cause,
        "fix": t.fix,
        "certainty": t.certainty,
        "release": t.release,
        "side": t.side,
        "class": t.cls,
        "evidence": {"file": t.evidence.file, "line": t.evidence.line, "text": t.evidence.text},
    }


def unknown_obj(u: UnknownCause | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {
        "confidence": u.confidence,
        "evidence": {"file": u.evidence.file, "line": u.evidence.line, "text": u.evidence.text},
        "origin": located_obj(u.origin),
        "side": u.side,
        "next": u.next,
        "search": u.search,
        "note": u.note,
        "threads": [thread_obj(t) for t in u.threads],
        "side_from": u.side_from,
    }


def catalogue_obj(c: FailureCatalogue) -> dict[str, Any]:
    """`pd-doctor triage --list --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "classes": [
            {
                "id": x.id,
                "title": x.title,
                "side": x.side,
                "fix": x.fix,
                "references": list(x.references),
                "next": x.next,
            }
            for x in c.classes
        ],
    }


# --- Markdown


def triage_md(r: TriageResult) -> str:
    """`pd-doctor triage --format markdown`: the verdicts as an issue comment."""
    out = ["## pd-doctor triage\n\n"]
    for w in r.warnings:
        out.append(f"> **note:** {w}\n\n")
    if r.unknown is not None:
        out.append(_unknown_md(r.unknown))
    if not r.verdicts:
        out.append("**No known cause.** The most informative lines:\n\n")
        out.extend(f"- `{e.file}:{e.line}`: `{e.text}`\n" for e in r.informative)
        if not r.informative:
            out.append("- (no exception and no ERROR line in the logs)\n")
    for n, v in enumerate(r.verdicts, 1):
        out.append(f"### {n}. {v.title}\n\n")
        out.append(f"- class: `{v.cls}`, confidence: **{v.confidence}**, side: {v.side}\n")
        if v.note:
            out.append(f"- {v.note}\n")
        out.append(f"- fix: {v.fix}\n")
        out.append(f"- next: `{v.next}`\n")
        if v.missing:
            out.append("- missing to decide: " + "; ".join(v.missing) + "\n")
        out.append("- references: " + ", ".join(v.references) + "\n\n")
        if v.evidence:
            out.append("```text\n")
            out.extend(f"{e.file}:{e.line}: {e.text}\n" for e in v.evidence)
            out.append("```\n\n")
    for t in r.threads:
        rel = f", {t.release}" if t.release else ""
        link = f"[{t.title}]({t.url})"
        out.append(f"- thread quoting a line of the log: {link} ({t.certainty}{rel}): {t.cause}\n")
    if r.threads:
        out.append("\n")
    out.append("Inputs: " + ", ".join(f"`{i.file}` ({i.side}, {i.lines} lines)" for i in r.inputs) + "\n")
    return "".join(out)


def _unknown_md(u: UnknownCause) -> str:
    out = [f"**No known class** (confidence: `{u.confidence}`, side: {u.side}).\n\n"]
    out.append(f"- line: `{u.evidence.file}:{u.evidence.line}`: `{u.evidence.text}`\n")
    if u.side_from:
        out.append(f"- side as in {u.side_from}\n")
    o = u.origin
    if o is not None:
        what = o.exception or o.level or ""
        line = f" line {o.line}" + (f" of {o.release}" if o.release else "") if o.line else ""
        out.append(
            f"- origin: `{o.package}/{o.file}:{o.function}` ({o.kind} {what}{line}, located by {o.how})\n"
        )
        if o.condition:
            out.append(f"- condition: `{o.condition}`\n")
        change = f"; {o.change} in {o.changed_in}" if o.changed_in else "; still in the newest indexed"
        out.append(f"- releases: {o.releases}{change}\n")
        out.extend(f"- same message also: `{a}`\n" for a in o.also)
        if o.values:
            out.append("- values: " + ", ".join(f"`{v.name}`={v.text} ({v.type})" for v in o.values) + "\n")
        nc = o.next_change
        if nc is not None:
            where = f" to `{nc.moved_to}`" if nc.moved_to else ""
            out.append(f"- next change: {nc.kind}{where} in {nc.release}\n")
            if nc.diff:
                out.append(f"\n```diff\n{nc.diff}\n```\n\n")
    for t in u.threads:
        rel = f", {t.release}" if t.release else ""
        fix = f" Fix: {t.fix}" if t.fix else ""
        out.append(f"- thread: [{t.title}]({t.url}) ({t.certainty}{rel}): {t.cause}{fix}\n")
    out.append(f"- next: `{u.next}`\n- search upstream: `{u.search}`\n\n")
    return "".join(out)


def catalogue_md(c: FailureCatalogue) -> str:
    """`pd-doctor triage --list --format markdown`."""
    rows = "".join(
        f"| `{x.id}` | {x.title.replace('|', '/')} | {x.side} | {', '.join(x.references)} |\n"
        for x in c.classes
    )
    return "| class | title | side | references |\n|---|---|---|---|\n" + rows
