"""Table, JSON and Markdown of the scenario results (pure functions; `formats.formatters` maps them)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.knowledge.facts.scenario_exposure import Remedy
from vllm_pd_doctor.results.hotfix import FixState
from vllm_pd_doctor.results.scenarios import (
    FAILS,
    HOLDS,
    Outcome,
    ScenarioBisect,
    ScenarioCatalogue,
    ScenarioCell,
    ScenarioMatrix,
    ScenarioReport,
)

SCHEMA_VERSION = 1
STYLE = {FAILS: "bold red", HOLDS: "green"}
WORD = {
    FAILS: "FAILS",
    HOLDS: "holds",
    "not_applicable": "not applicable",
    "not_present": "not present",
    "could_not_run": "could not run",
    "control_failed": "control failed",
}


def cell_text(c: ScenarioCell | None, *, long: bool = False) -> str:
    if c is None:
        return "-"
    word = WORD.get(c.status, c.status)
    if c.status == FAILS and c.recipe is not None:
        where = c.recipe.location or (c.recipe.invariant or "")
        return f"{word}: {c.recipe.what}" if long else f"{word} {where}; {remedy_short(c.remedy)}"
    if c.status == HOLDS and c.holds_for:
        return f"{word} ({c.holds_for})" if long else f"{word} (this connector's path only: see the report)"
    if c.status == HOLDS or not c.reason:
        return word
    return f"{word}: {c.reason}" if long else word


def remedy_short(r: Remedy | None) -> str:
    """`holds from 0.30.0; hotfix hybrid-load-failure`: a matrix cell's remedy in a few words."""
    if r is None:
        return "-"
    parts = [f"holds from {r.holds_from}" if r.holds_from else f"no release holds (through {r.newest_run})"]
    if r.hotfix:
        parts.append(f"hotfix {r.hotfix}")
    if r.workaround:
        parts.append("workaround")
    return ", ".join(parts)


def remedy_text(c: ScenarioCell, python: str = "PYTHON") -> str:
    """A failing cell's remedy, one line per kind; `-` for any other cell."""
    if c.remedy is None:
        return "-"
    return "\n".join(c.remedy.lines(python))


def hotfix_text(f: FixState | None, *, long: bool = False) -> str:
    """`abort-race (not merged upstream): applied`; with `long`, the reason of a fix not applied."""
    if f is None:
        return "- (no hotfix for this scenario)" if long else "-"
    text = f"{f.title}: {f.word}"
    if long and not f.applied and f.reason:
        text += f": {f.reason}"
    return text


# --- table -------------------------------------------------------------------------------------


def _engine_words(r: ScenarioReport) -> str:
    return "real Scheduler" if r.engine == "inprocess" else "a real P/D pair, the client triggering it"


def report_table(r: ScenarioReport) -> RenderableType:
    title = (
        f"P/D scenarios on vLLM {r.vllm.version} ({_engine_words(r)}{', with hotfixes' if r.hotfix else ''})"
    )
    t = Table(title=title, title_justify="left")
    cols = ("scenario", "connector", "verdict", "what vLLM did", "what to do", "control run")
    for col in (*cols, "hotfix") if r.hotfix else cols:
        t.add_column(col, overflow="fold")
    for c in r.cells:
        row: list[str | Text] = [
            c.scenario,
            c.connector,
            Text(WORD.get(c.status, c.status), style=STYLE.get(c.status, "yellow")),
            _what(c, r.engine != "inprocess"),
            remedy_text(c, r.vllm.python),
            c.control_words,
        ]
        if r.hotfix:
            row.append(hotfix_text(c.hotfix))
        t.add_row(*row)
    if r.engine != "inprocess":
        return Group(t, *_live_lines(r))
    foot = Text(
        f"model {r.model}; import {r.timings.get('import_s', 0):.1f} s, total "
        f"{r.timings.get('total_s', 0):.1f} s; next: pd-doctor repro --scenario ID --format markdown",
        style="dim",
    )
    return Group(t, foot)


def _live_lines(r: ScenarioReport) -> list[Text]:
    """A live run's notes: per scenario (attempts, the window, the shape), then where things are."""
    out = [Text(f"{c.scenario}: {n}") for c in r.cells for n in c.notes]
    out += [Text(n, style="dim") for n in r.notes]
    healthy = r.timings.get("engines_healthy_s")
    started = f"engines healthy {healthy:.1f} s, " if healthy is not None else ""
    out.append(Text(f"model {r.model}; {started}total {r.timings.get('total_s', 0):.1f} s", style="dim"))
    return out


def _what(c: ScenarioCell, live: bool = False) -> str:
    """What vLLM did; a live run that survived says what it survived (its reason)."""
    if c.recipe is None:
        return c.reason or "-"
    if live and not c.recipe.failed and c.reason:
        return c.reason
    if c.holds_for:
        return c.holds_for
    return c.recipe.what


def matrix_table(m: ScenarioMatrix) -> RenderableType:
    t = Table(title=f"{m.package}: P/D scenarios, release x connector", title_justify="left")
    t.add_column("scenario", no_wrap=True)
    t.add_column("release", no_wrap=True)
    for key in m.connectors:
        t.add_column(key, overflow="fold")
    for sid in m.scenarios:
        for row in m.rows:
            if row.report is None:
                t.add_row(sid, row.release, Text(row.reason or "?", style="yellow"))
                continue
            cells = [row.report.cell(sid, k) for k in m.connectors]
            texts = [Text(cell_text(c), style=STYLE.get(c.status if c else "", "dim")) for c in cells]
            t.add_row(sid, row.release, *texts)
        t.add_section()
    return Group(t, Text(f"wall {m.wall_s:.1f} s", style="dim"))


def history_text(sid: str) -> str:
    """`nixl: fails 0.27.1-0.29.0, holds from 0.30.0`: per connector, from the recorded runs."""
    out = []
    for h in sx.history(sid):
        if not h.fails_in and not h.holds_in:
            out.append(f"{h.connector}: not applicable")
            continue
        if not h.fails_in:
            na = f" (not applicable in {', '.join(h.not_applicable_in)})" if h.not_applicable_in else ""
            out.append(f"{h.connector}: holds from {h.holds_in[0]}{na}")
            continue
        span = f"{h.fails_in[0]}-{h.fails_in[-1]}" if len(h.fails_in) > 1 else h.fails_in[0]
        later = f"holds from {h.holds_from}" if h.holds_from else "no run holds"
        out.append(f"{h.connector}: fails {span}, {later}")
    return "; ".join(out)


def catalogue_table(cat: ScenarioCatalogue) -> RenderableType:
    t = Table(title="scenarios (pd-doctor repro --scenario ID)", title_justify="left")
    for col in ("id", "what", "fails in / holds from (recorded runs)", "references", "model matters"):
        t.add_column(col, overflow="fold")
    for s in (known.SCENARIOS[i] for i in cat.ids):
        refs = ", ".join(f"{r.ref}{' (' + r.status + ')' if r.status else ''}" for r in s.references)
        t.add_row(s.id, s.title, history_text(s.id), refs, "yes" if s.model_matters else "no")
    return Group(t, Text(f"recorded runs: {', '.join(sx.releases())}", style="dim"))


# --- JSON --------------------------------------------------------------------------------------


def hotfix_obj(f: FixState | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "fix": f.fix,
        "status": f.status,
        "applied": f.applied,
        "label": f.label or None,
        "reason": f.reason,
        "function": f.function,
        "at": f.at,
        "sites": list(f.sites),
    }


def outcome_obj(o: Outcome | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {
        "failed": o.failed,
        "how": o.how,
        "location": o.location,
        "function": o.function,
        "statement": o.statement,
        "exception": o.exception,
        "message": o.message,
        "invariant": o.invariant,
        "observed": o.observed,
    }


def remedy_obj(r: Remedy | None, python: str = "PYTHON") -> dict[str, Any] | None:
    if r is None:
        return None

    def sub(x: str | None) -> str | None:
        return x.replace("PYTHON", python) if x else x

    return {
        "kinds": list(r.kinds),
        "holds_from": r.holds_from,
        "newest_run": r.newest_run,
        "upgrade": r.upgrade,
        "hotfix": None
        if r.hotfix is None
        else {
            "name": r.hotfix,
            "label": r.hotfix_label or None,
            "install": sub(r.hotfix_install),
            "enable": r.hotfix_enable,
            "verify": sub(r.hotfix_verify),
        },
        "workaround": r.workaround or None,
        "upstream": list(r.upstream),
    }


def cell_obj(c: ScenarioCell, python: str = "PYTHON") -> dict[str, Any]:
    s = known.get(c.scenario)
    return {
        "scenario": c.scenario,
        "connector": c.connector,
        "kv_connector": c.kv_connector,
        "status": c.status,
        "location": c.location,
        "recipe": outcome_obj(c.recipe),
        "control": outcome_obj(c.control),
        "reason": c.reason,
        "notes": list(c.notes),
        "elapsed_s": c.elapsed_s,
        "references": [r.ref for r in s.references] if s else [],
        "hotfix": hotfix_obj(c.hotfix),
        "remedy": remedy_obj(c.remedy, python),
        "holds_for": c.holds_for,
        "control_words": c.control_words,
    }


def report_obj(r: ScenarioReport) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "scenarios",
        "engine": r.engine,
        "vllm": {"version": r.vllm.version, "path": r.vllm.path, "python": r.vllm.python},
        "scenarios": list(r.scenarios),
        "model": r.model,
        "failed": r.failed,
        "hotfix": r.hotfix,
        "available_connectors": list(r.available_connectors),
        "timings": r.timings,
        "results": [cell_obj(c, r.vllm.python) for c in r.cells],
        "notes": list(r.notes),
    }


def matrix_obj(m: ScenarioMatrix) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "scenario_matrix",
        "package": m.package,
        "scenarios": list(m.scenarios),
        "connectors": list(m.connectors),
        "failed": m.failed,
        "wall_s": m.wall_s,
        "rows": [
            {
                "release": row.release,
                "reason": row.reason,
                "run_s": row.run_s,
                "report": report_obj(row.report) if row.report is not None else None,
            }
            for row in m.rows
        ],
    }


def catalogue_obj(cat: ScenarioCatalogue) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "scenario_catalogue",
        "scenarios": [
            {
                "id": s.id,
                "title": s.title,
                "summary": s.summary,
                "control": s.control,
                "connectors": list(s.connectors),
                "kv_role": s.kv_role,
                "model_matters": s.model_matters,
                "live": s.live or None,
                "fixed_upstream": s.fixed_upstream,
                "next_step": s.next_step,
                "side": s.side,
                "workaround": s.workaround or None,
                "triage_class": s.triage_class,
                "runs": {
                    h.connector: {
                        "fails_in": list(h.fails_in),
                        "holds_in": list(h.holds_in),
                        "not_applicable_in": list(h.not_applicable_in),
                        "holds_from": h.holds_from,
                    }
                    for h in sx.history(s.id)
                },
                "references": [
                    {"kind": r.kind, "ref": r.ref, "url": r.url, "status": r.status} for r in s.references
                ],
            }
            for s in (known.SCENARIOS[i] for i in cat.ids)
        ],
    }


# --- Markdown ----------------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report_md(r: ScenarioReport) -> str:
    out = [f"## P/D scenarios on vLLM {r.vllm.version}{' (with hotfixes)' if r.hotfix else ''}\n"]
    live = r.engine != "inprocess"
    if live:
        out.append(f"Engine: {_engine_words(r)}; model `{r.model}`.\n")
    head = "| connector | verdict | what vLLM did | what to do | control run |" + (
        " hotfix |" if r.hotfix else ""
    )
    rule = "|---|---|---|---|---|" + ("---|" if r.hotfix else "")
    for sid in r.scenarios:
        s = known.SCENARIOS[sid]
        refs = ", ".join(f"[{x.ref}]({x.url})" for x in s.references)
        out.append(f"### `{sid}`: {s.title}\n\n{s.summary}\n\nControl: {s.control}\n\nReferences: {refs}\n")
        out.append(f"{head}\n{rule}")
        for c in (c for c in r.cells if c.scenario == sid):
            todo = "<br>".join(_md(x) for x in remedy_text(c, r.vllm.python).split("\n"))
            line = (
                f"| {c.connector} | {WORD.get(c.status, c.status)} | {_md(_what(c, live))} | {todo} "
                f"| {_md(c.control_words)} |"
            )
            out.append(line + (f" {_md(hotfix_text(c.hotfix, long=True))} |" if r.hotfix else ""))
        notes = [n for c in r.cells if c.scenario == sid for n in c.notes] if live else []
        out += ["", *(f"- {_md(n)}" for n in notes)] if notes else []
        out.append("")
    return "\n".join(out) + "\n"


def matrix_md(m: ScenarioMatrix) -> str:
    head = "| scenario | release | " + " | ".join(m.connectors) + " |\n|---|---|" + "---|" * len(m.connectors)
    lines = [f"## P/D scenarios: {m.package} release matrix\n", head]
    for sid in m.scenarios:
        for row in m.rows:
            if row.report is None:
                lines.append(f"| {sid} | {row.release} | {_md(row.reason or '?')} |")
                continue
            cells = [_md(cell_text(row.report.cell(sid, k))) for k in m.connectors]
            lines.append(f"| {sid} | {row.release} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def catalogue_md(cat: ScenarioCatalogue) -> str:
    lines = [
        "## P/D scenarios (`pd-doctor repro --scenario ID`)\n",
        f"Fails in / holds from: pd-doctor's recorded runs ({', '.join(sx.releases())}).\n",
        "| id | what | fails in / holds from | references |",
        "|---|---|---|---|",
    ]
    for s in (known.SCENARIOS[i] for i in cat.ids):
        refs = ", ".join(f"[{r.ref}]({r.url})" for r in s.references)
        lines.append(f"| `{s.id}` | {_md(s.title)} | {_md(history_text(s.id))} | {refs} |")
    return "\n".join(lines) + "\n"


def _steps(b: ScenarioBisect) -> list[str]:
    return [f"{rel}: {v}" + (f" ({b.locations[rel]})" if b.locations.get(rel) else "") for rel, v in b.steps]


def bisect_text(b: ScenarioBisect) -> str:
    head = f"bisect {b.scenario} on {b.connector} ({b.package}): {b.outcome}"
    if b.outcome == "changed":
        head += f": the verdict changes between {b.before} and {b.after}"
    return "\n".join([head, *("  " + x for x in _steps(b))]) + "\n"


def bisect_obj(b: ScenarioBisect) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "scenario_bisect",
        "package": b.package,
        "scenario": b.scenario,
        "connector": b.connector,
        "outcome": b.outcome,
        "before": b.before,
        "after": b.after,
        "steps": [{"release": r, "verdict": v, "location": b.locations.get(r)} for r, v in b.steps],
        "wall_s": b.wall_s,
    }


def bisect_md(b: ScenarioBisect) -> str:
    return (
        f"## bisect `{b.scenario}` ({b.connector})\n\n"
        + "\n".join("- " + x for x in _steps(b))
        + (
            f"\n\nOutcome: {b.outcome}"
            + (f", between {b.before} and {b.after}" if b.outcome == "changed" else "")
            + "\n"
        )
    )
