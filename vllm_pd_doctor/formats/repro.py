"""`pd-doctor repro`'s verdicts (`ReproReport`) in every format: panels and a timeline (table), one
document per connector (JSON, the keys in `REPRO_KEYS`), a section per connector with its sequence
diagram (Markdown)."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from vllm_pd_doctor.formats import mermaid
from vllm_pd_doctor.formats._common import (
    md_cell,
    render,
    yes_no,
)
from vllm_pd_doctor.knowledge.facts import advice, connectors
from vllm_pd_doctor.results.base import SCHEMA_VERSION
from vllm_pd_doctor.results.repro import (
    Assertion,
    ConnectorVerdict,
    Frame,
    NotAffected,
    ReproReport,
    Truncation,
)

# --- plain text shared by the table and Markdown


def advice_for(report: ReproReport) -> tuple[str, ...]:
    """The same advice for a repro run that reproduced #53514 (none otherwise): per connector
    that fired, and the hotfix where the prompt was truncated after the lookup."""
    fired = [r for r in report.results if r.reproduced]
    if not fired:
        return ()
    late = any(r.truncation is not None and r.truncation.hook == connectors.LATE_HOOK for r in fired)
    return advice.fixes((r.connector for r in fired), late_truncation=late, python=report.vllm.python)


def not_affected_line(report: ReproReport, na: NotAffected) -> str:
    """One line: why #53514 cannot happen with this model, with vLLM's own evidence."""
    return (
        f"not affected: {na.reason} (vLLM {report.vllm.version}: "
        f"{na.architecture} -> {na.model_class}, is_hybrid={na.is_hybrid}, "
        f"is_attention_free={na.is_attention_free}, Mamba state classmethods="
        f"{na.has_mamba_state_classmethods})"
    )


# --- table (rich, for people)


TIMELINE_KINDS = ("add_request", "hook_enter", "lookup", "truncate", "scheduled", "assertion", "finished")


def _truncation_rows(grid: Table, r: ConnectorVerdict) -> None:
    """What truncated the prompt, where, and what the hotfix did (rows of the verdict panel)."""
    t = r.truncation
    assert t is not None
    order = (
        "none"
        if t.before_lookup is None
        else (
            "before the local prefix-cache lookup"
            if t.before_lookup
            else "AFTER the local prefix-cache lookup"
        )
    )
    grid.add_row("truncated by", f"{t.hook}  ({order})")
    if t.call_site is not None:
        grid.add_row("call site", f"{t.call_site.location}  {t.call_site.code}")
    if t.statement is not None:
        grid.add_row("statement", f"{t.statement.location}  {t.statement.code}  [{t.statement.function}]")
    if r.hotfix_verdict is not None:
        grid.add_row(
            "hotfix #53514",
            r.hotfix_verdict
            + "".join(
                f"\n  {p.status} {p.class_name}.{p.hook} -> {p.helper} ({p.helper_at})"
                for p in r.hotfix or ()
                if p.applied
            ),
        )


def verdict_panel(report: ReproReport, r: ConnectorVerdict) -> Panel:
    title = f"{r.label}  ({r.kv_connector}) on vLLM {report.vllm.version}"
    if r.error is not None:
        body = Text.assemble(("COULD NOT RUN", "bold yellow"), f"\n{r.error.stage}: {r.error.message}")
        return Panel(body, title=title, border_style="yellow")
    a, t, c = r.assertion, r.truncation, r.control
    assert a is not None and t is not None and c is not None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    if r.reproduced:
        head = Text("REPRODUCED: the prefill EngineCore would die", style="bold red")
        grid.add_row(
            "assertion",
            f"{a.statement or 'assert'}  at {a.location}"
            if a.fired
            else f"on the control: {c.statement}  at {c.location}",
        )
    else:
        head = Text("NOT REPRODUCED: the trigger request was scheduled", style="bold green")
        grid.add_row(
            "assertion",
            f"another {a.kind} at {a.location}: {a.statement or a.message}" if a.fired else "did not fire",
        )
    _truncation_rows(grid, r)
    grid.add_row("prompt", f"{r.prompt_len_before} -> {r.prompt_len_after} tokens")
    grid.add_row("local prefix hit", f"{r.hit_tokens} tokens")
    grid.add_row("scheduled", f"{r.scheduled_tokens} tokens")
    ctl = "fired" if c.assertion_fired else "did not fire"
    grid.add_row(c.label, f"prompt {c.prompt_len}, hit {c.hit_tokens}, {ctl}, scheduled {c.scheduled_tokens}")
    for x in r.triggers if len(r.triggers) > 1 else ():
        grid.add_row(f"trigger {x.name}", x.summary)
    if r.config is not None:
        grid.add_row(
            "scenario",
            f"block {r.config.block_size}, mamba_cache_mode "
            f"{r.config.mamba_cache_mode}, kv_role {r.config.kv_role}",
        )
    return Panel(Group(head, grid), title=title, border_style="red" if r.reproduced else "green")


def timeline(r: ConnectorVerdict) -> Table:
    table = Table(title=f"timeline of the trigger request ({r.connector})", title_justify="left")
    for col in ("#", "ms", "event", "tokens", "detail"):
        table.add_column(col, overflow="fold")
    for e in r.events:
        if e.phase != "trigger" or e.kind not in TIMELINE_KINDS:
            continue
        d = e.detail
        tokens = d.get("num_tokens", d.get("len_after", d.get("scheduled_tokens", "")))
        if e.kind == "hook_enter":
            what, detail = f"connector.{d.get('hook')}", f"args {d.get('args')}"
        elif e.kind == "lookup":
            what = f"kv_cache_manager.{d.get('method')}"
            detail = f"local hit {d.get('hit_tokens')} tokens"
        elif e.kind == "truncate":
            what = "prompt shrank"
            st = (d.get("stack") or [{}])[-1]
            detail = (
                f"{d.get('op')} {d.get('len_before')}->{d.get('len_after')} in "
                f"{st.get('function')} ({st.get('file')}:{st.get('line')}), hook {d.get('hook')}"
            )
        elif e.kind == "assertion":
            what, detail = "AssertionError", f"{d.get('statement')} at {d.get('location')}"
        else:
            what, detail = e.kind, ""
        table.add_row(str(e.seq), f"{e.t_ms:.1f}", what, str(tokens), detail)
    return table


def repro_text(report: ReproReport, *, width: int = 110, color: bool = False) -> str:
    """The verdicts as panels, or one plain line when the model is not affected."""
    if report.not_affected is not None:
        return not_affected_line(report, report.not_affected) + "\n"
    return render(repro_table(report), width=width, color=color)


def repro_table(report: ReproReport) -> RenderableType:
    parts: list[RenderableType] = []
    if len(report.results) > 1:
        summary = Table(
            title=f"vLLM {report.vllm.version}: P-side N-1 truncation (#53514)", title_justify="left"
        )
        for col in ("connector", "fired", "hook", "before lookup", "hit", "control"):
            summary.add_column(col)
        for r in report.results:
            if r.error is not None:
                summary.add_row(r.connector, "could not run", r.error.message, "", "", "")
                continue
            assert r.assertion and r.truncation and r.control
            summary.add_row(
                r.connector,
                Text("FIRED", style="bold red") if r.assertion.fired else Text("no", style="green"),
                r.truncation.hook,
                yes_no(r.truncation.before_lookup),
                str(r.hit_tokens),
                "fired" if r.control.assertion_fired else "no",
            )
        parts.append(summary)
    for r in report.results:
        parts.append(verdict_panel(report, r))
        if r.error is None and len(report.results) == 1:
            parts.append(timeline(r))
    fixes = advice_for(report)
    if fixes:
        parts.append(Text("How to fix:\n" + "\n".join(f"  - {f}" for f in fixes)))
    return Group(*parts)


# --- JSON (documents with schema_version)


def _frame(f: Frame | None) -> dict[str, Any] | None:
    return f.to_dict() if f is not None else None


REPRO_KEYS = (
    "connector",
    "connector_label",
    "kv_connector",
    "connector_class",
    "connector_scheduler_class",
    "transfer_library",
    "reproduced",
    "error",
    "config",
    "assertion",
    "truncation",
    "prefix_cache",
    "prompt",
    "scheduled_tokens",
    "control",
    "events",
    "elapsed_s",
    "triggers",
    "verdict_notes",
    "sizing",
    "unexpected",
    "hotfix",
    "reason",
    "evidence",
)


"""The top-level keys every repro object has (besides schema_version, engine, vllm and
not_affected, and timings and notes), whatever it reports: None where it has no value."""


def _assertion_obj(a: Assertion | None) -> dict[str, Any]:
    a = a or Assertion(fired=False)
    return {
        "fired": a.fired,
        "location": a.location,
        "statement": a.statement,
        "matches_53514": a.matches_53514,
        "traceback": a.traceback,
        "kind": a.kind,
        "message": a.message,
    }


def _repro_skeleton(report: ReproReport) -> dict[str, Any]:
    """Every top-level key of a repro object, whatever it reports (ran, failed, not affected)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "engine": report.engine,
        "vllm": {"version": report.vllm.version, "path": report.vllm.path, "python": report.vllm.python},
        "not_affected": report.not_affected is not None,
        **dict.fromkeys(REPRO_KEYS),
        "reproduced": False,
    }


def _truncation_obj(t: Truncation) -> dict[str, Any]:
    return {
        "hook": t.hook,
        "before_lookup": t.before_lookup,
        "tokens_removed": t.tokens_removed,
        "operation": t.operation,
        "statement": _frame(t.statement),
        "call_site": _frame(t.call_site),
        "stack": [f.to_dict() for f in t.stack],
    }


def verdict_to_dict(report: ReproReport, r: ConnectorVerdict) -> dict[str, Any]:
    """One connector's verdict as the documented JSON object."""
    doc = _repro_skeleton(report)
    doc.update(
        {
            "connector": r.connector,
            "connector_label": r.label,
            "kv_connector": r.kv_connector,
            "connector_class": r.connector_class,
            "connector_scheduler_class": r.connector_scheduler_class,
            "transfer_library": {
                "module": r.transfer_library,
                "installed": r.transfer_library_installed,
                "needed_for_scheduler": False,
            },
            "reproduced": r.reproduced,
            "error": dataclasses.asdict(r.error) if r.error else None,
        }
    )
    if r.error is not None:
        return doc
    t, c = r.truncation, r.control
    assert t is not None and c is not None
    doc.update(
        {
            "config": dataclasses.asdict(r.config) if r.config else None,
            "assertion": _assertion_obj(r.assertion),
            "truncation": _truncation_obj(t),
            "prefix_cache": {"hit_tokens": r.hit_tokens},
            "prompt": {"len_before": r.prompt_len_before, "len_after": r.prompt_len_after},
            "scheduled_tokens": r.scheduled_tokens,
            "control": dataclasses.asdict(c),
            "events": [e.to_dict() for e in r.events],
            "elapsed_s": r.elapsed_s,
            "triggers": [
                {
                    **{k: v for k, v in dataclasses.asdict(tr).items() if k != "events"},
                    "events": [e.to_dict() for e in tr.events],
                }
                for tr in r.triggers
            ],
            "verdict_notes": list(r.notes),
            "sizing": r.sizing,
            "unexpected": dataclasses.asdict(r.unexpected) if r.unexpected else None,
        }
    )
    if r.hotfix is not None:
        doc["hotfix"] = {
            "applied": any(p.applied for p in r.hotfix),
            "verdict": r.hotfix_verdict,
            "patched": [dataclasses.asdict(p) for p in r.hotfix],
        }
    return doc


def not_affected_obj(report: ReproReport, na: NotAffected) -> dict[str, Any]:
    """The model has no Mamba state: the same keys as a verdict, the assertion cannot fire."""
    doc = _repro_skeleton(report)
    doc.update({"assertion": _assertion_obj(None), "reason": na.reason, "evidence": na.evidence})
    return doc


def repro_to_obj(report: ReproReport, *, as_list: bool) -> Any:
    if report.not_affected is not None:
        docs = [not_affected_obj(report, report.not_affected)]
        as_list = False
    else:
        docs = [verdict_to_dict(report, r) for r in report.results]
    fixes = list(advice_for(report))
    for d in docs:
        d["timings"] = report.timings
        d["notes"] = list(report.notes)
        d["advice"] = fixes
    if as_list:
        return docs
    return docs[0] if docs else {"schema_version": SCHEMA_VERSION, "results": []}


# --- Markdown


def verdict_md(report: ReproReport, r: ConnectorVerdict) -> str:
    head = f"### {r.label} (`{r.kv_connector}`) on vLLM {report.vllm.version}\n\n"
    if r.error is not None:
        return head + f"Could not run: {r.error.stage}: {r.error.message}\n"
    a, t, c = r.assertion, r.truncation, r.control
    assert a is not None and t is not None and c is not None
    if r.reproduced:
        verdict = (
            f"**Reproduced**: `{a.statement}` fired at `{a.location}`."
            if a.fired
            else f"**Reproduced** on the control: `{c.statement}` fired at `{c.location}`."
        )
    elif a.fired:
        verdict = f"**Not #53514**: another {a.kind} at `{a.location}`: `{a.statement}`."
    else:
        verdict = "**Not reproduced**: the trigger request was scheduled."
    order = (
        "n/a"
        if t.before_lookup is None
        else (
            "before the local prefix-cache lookup"
            if t.before_lookup
            else "after the local prefix-cache lookup"
        )
    )
    rows = [
        ("truncated by", f"`{t.hook}` ({order})"),
        ("call site", f"`{t.call_site.location}` `{t.call_site.code}`" if t.call_site else "-"),
        ("statement", f"`{t.statement.location}` `{t.statement.code}`" if t.statement else "-"),
        ("prompt", f"{r.prompt_len_before} -> {r.prompt_len_after} tokens"),
        ("local prefix-cache hit", f"{r.hit_tokens} tokens"),
        ("scheduled", f"{r.scheduled_tokens} tokens"),
        (
            c.label,
            f"prompt {c.prompt_len}, hit {c.hit_tokens}, {'fired' if c.assertion_fired else 'did not fire'}",
        ),
    ]
    rows += [(f"trigger `{x.name}`", x.summary) for x in r.triggers if len(r.triggers) > 1]
    table = "| | |\n|---|---|\n" + "".join(f"| {k} | {md_cell(v)} |\n" for k, v in rows)
    diagram = mermaid.fenced(r)
    return head + verdict + "\n\n" + table + (f"\n{diagram}" if diagram else "")


def repro_md(report: ReproReport) -> str:
    parts = [f"## pd-doctor repro ({report.engine} engine): vLLM {report.vllm.version}\n"]
    if report.not_affected is not None:
        return parts[0] + "\n**Not affected**: " + not_affected_line(report, report.not_affected) + "\n"
    if len(report.results) > 1:
        parts.append("| connector | fired | truncation hook | before lookup | hit |\n|---|---|---|---|---|\n")
        for r in report.results:
            if r.error is not None:
                parts.append(f"| {r.connector} | could not run | {md_cell(r.error.message)} | | |\n")
            else:
                assert r.assertion and r.truncation
                parts.append(
                    f"| {r.connector} | {'**yes**' if r.assertion.fired else 'no'} | "
                    f"`{r.truncation.hook}` | {r.truncation.before_lookup} | "
                    f"{r.hit_tokens} |\n"
                )
        parts.append("\n")
    parts.extend(verdict_md(report, r) + "\n" for r in report.results)
    for n in report.notes:
        parts.append(f"- {n}\n")
    fixes = advice_for(report)
    if fixes:
        parts.append("\n### How to fix\n\n" + "".join(f"- {f}\n" for f in fixes))
    return "".join(parts)
