"""`pd-doctor matrix` and `bisect` (`MatrixReport`, `BisectReport`) in every format."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from vllm_pd_doctor.formats._common import (
    CONNECTOR_PREFIX,
    md_cell,
    short_location,
)
from vllm_pd_doctor.results.base import SCHEMA_VERSION
from vllm_pd_doctor.results.matrix import (
    FIRED,
    NOT_FIRED,
    NOT_PRESENT,
    NOT_PROVISIONED,
    NOT_PUBLISHED,
    NOT_RUN,
    BisectReport,
    MatrixCell,
    MatrixReport,
    ReleaseRow,
)

# --- plain text shared by the table and Markdown


ROW_LABEL = {
    NOT_PUBLISHED: "not a published release",
    NOT_PROVISIONED: "could not provision",
    NOT_RUN: "could not run",
}


def cell_text(c: MatrixCell | None, *, short: bool = False) -> str:
    """One line per matrix cell: `FIRED: get_num_new_matched_tokens @ file:line`."""
    if c is None or c.status == NOT_PRESENT:
        return "not present"
    if c.status in (FIRED, NOT_FIRED):
        head = "FIRED" if c.status == FIRED else "not fired"
        loc = c.call_site.location if c.call_site else ""
        where = f" @ {short_location(loc) if short else loc}" if loc else ""
        return f"{head}: {c.hook or 'none'}{where}"
    return f"not runnable: {c.reason or '?'}"


def row_reason(r: ReleaseRow) -> str:
    """Why a matrix row has no cells."""
    return f"{ROW_LABEL.get(r.status, r.status)}: {r.reason or '?'}"


def bisect_lines(b: BisectReport) -> list[str]:
    """The bisection, step by step, then its answer."""
    res = b.result
    lines = [
        f"bisect {b.package} on {b.connector} firing: good {b.good}, bad {b.bad}; "
        f"{len(res.candidates)} release(s) in range"
        + (" (only those with a cached environment are tested)" if b.only_cached else "")
    ]
    for s in res.steps:
        if s.verdict is None and s.row is not None and s.row.cached is False and b.only_cached:
            lines.append(f"  skipped {s.release}: {s.row.reason}")
            continue
        v = "could not test" if s.verdict is None else ("FIRED" if s.verdict else "not fired")
        why = f" ({s.row.reason})" if s.verdict is None and s.row and s.row.reason else ""
        lines.append(f"  tested {s.release}: {v}{why}")
    if res.endpoint_failed:
        lines.append(f"no answer: endpoint {res.endpoint_failed} could not be tested")
    elif res.same_verdict:
        lines.append(f"no change: {res.before} and {res.after} give the same verdict")
    else:
        for label, rel in (
            ("last with the old verdict", res.before),
            ("first with the new verdict", res.after),
        ):
            row = b.rows.get(rel or "")
            cell = row.cell(b.connector) if row else None
            lines.append(f"{label}: {rel}  {cell_text(cell)}")
        if res.untested_between:
            lines.append(
                "releases between them that were not tested: "
                + ", ".join(res.untested_between)
                + " (the change is in one of them or at "
                + f"{res.after})"
            )
    lines.append(f"environments created: {', '.join(b.provisioned) or 'none'}; wall {b.wall_s:.1f} s")
    return lines


# --- table (rich, for people)


def matrix_table(m: MatrixReport) -> RenderableType:
    t = Table(title=f"{m.package}: P-side N-1 truncation (#53514), release x connector", title_justify="left")
    t.add_column("release", no_wrap=True)
    for key in m.connectors:
        t.add_column(key, overflow="fold")
    for r in m.rows:
        if r.status != "ran":
            t.add_row(
                r.release,
                Text(row_reason(r), style="yellow"),
                *([""] * (len(m.connectors) - 1)),
                end_section=True,
            )
            continue
        cells: list[Text] = []
        for key in m.connectors:
            c = r.cell(key)
            style = {FIRED: "bold red", NOT_FIRED: "green"}.get(c.status if c else "", "dim")
            cells.append(Text(cell_text(c, short=True), style=style))
        t.add_row(r.release, *cells)
    foot = Text(
        f"call sites under {CONNECTOR_PREFIX}; "
        f"wall {m.wall_s:.1f} s; repro total {m.repro_s_total:.1f} s; "
        f"releases from {m.releases_source or 'the command line'}",
        style="dim",
    )
    return Group(t, foot)


def bisect_text(b: BisectReport) -> str:
    return "\n".join(bisect_lines(b)) + "\n"


# --- JSON (documents with schema_version)


def _cell_obj(c: MatrixCell) -> dict[str, Any]:
    return {
        "connector": c.connector,
        "status": c.status,
        "hook": c.hook,
        "call_site": c.call_site.to_dict() if c.call_site else None,
        "assertion_location": c.assertion_location,
        "reason": c.reason,
    }


def row_obj(r: ReleaseRow) -> dict[str, Any]:
    return {
        "release": r.release,
        "status": r.status,
        "reason": r.reason,
        "vllm_version": r.vllm_version,
        "python": r.python,
        "cached": r.cached,
        "provision_s": r.provision_s,
        "repro_s": r.repro_s,
        "fired": r.fired,
        "cells": {c.connector: _cell_obj(c) for c in r.cells},
    }


def matrix_obj(m: MatrixReport) -> dict[str, Any]:
    """`pd-doctor matrix --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "matrix",
        "package": m.package,
        "connectors": list(m.connectors),
        "releases_source": m.releases_source,
        "fired": m.fired,
        "jobs": m.jobs,
        "timings": {"wall_s": m.wall_s, "repro_s_total": round(m.repro_s_total, 2)},
        "rows": [row_obj(r) for r in m.rows],
    }


def bisect_obj(b: BisectReport) -> dict[str, Any]:
    """`pd-doctor bisect --format json`; `outcome`: changed, no_change or endpoint_failed."""
    res = b.result
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "bisect",
        "package": b.package,
        "connector": b.connector,
        "good": b.good,
        "bad": b.bad,
        "only_cached": b.only_cached,
        "releases_source": b.releases_source,
        "outcome": res.outcome,
        "candidates": list(res.candidates),
        "before": _side(b, res.before),
        "after": _side(b, res.after),
        "untested_between": list(res.untested_between),
        "same_verdict": res.same_verdict,
        "endpoint_failed": res.endpoint_failed,
        "steps": [
            {"release": s.release, "fired": s.verdict, "reason": s.row.reason if s.row else None}
            for s in res.steps
        ],
        "provisioned": list(b.provisioned),
        "timings": {"wall_s": b.wall_s},
    }


def _side(b: BisectReport, release: str | None) -> dict[str, Any] | None:
    if release is None:
        return None
    row = b.rows.get(release)
    cell = row.cell(b.connector) if row else None
    return {
        "release": release,
        "fired": cell.status == FIRED if cell else None,
        "cell": _cell_obj(cell) if cell else None,
    }


# --- Markdown


def matrix_md(m: MatrixReport) -> str:
    head = "| release | " + " | ".join(m.connectors) + " |\n|---|" + "---|" * len(m.connectors) + "\n"
    body = ""
    for r in m.rows:
        if r.status != "ran":
            body += f"| {r.release} | {md_cell(row_reason(r))} |" + " |" * (len(m.connectors) - 1) + "\n"
            continue
        cells = []
        for key in m.connectors:
            c = r.cell(key)
            text = cell_text(c)
            if c is not None and c.call_site is not None:
                text = text.replace(c.call_site.location, f"`{c.call_site.location}`")
            cells.append(md_cell(text))
        body += f"| {r.release} | " + " | ".join(cells) + " |\n"
    return (
        f"## vLLM #53514 (P-side N-1 truncation): {m.package} release matrix\n\n"
        f"In-process repro (real Scheduler + connector scheduler half, hybrid model, block 16, "
        f"N = 33) per release. `FIRED`: `assert num_new_tokens > 0` fired; the hook that "
        f"truncated the prompt and its call site follow.\n\n" + head + body
    )


def bisect_md(b: BisectReport) -> str:
    return f"## pd-doctor bisect: {b.package}, {b.connector}\n\n" + "".join(
        f"- {md_cell(line.strip())}\n" for line in bisect_lines(b)
    )
