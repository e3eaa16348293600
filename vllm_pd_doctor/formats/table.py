"""Rich rendering for people (not for parsing: use --format json).

One function per result type returns a rich renderable (or plain text); `render` turns it into
a string.
"""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from vllm_pd_doctor import advice, hotfix
from vllm_pd_doctor.checkconfig.types import CheckReport, RuleCatalogue, Severity
from vllm_pd_doctor.envs import EnvListing
from vllm_pd_doctor.formats._text import (
    CONNECTOR_PREFIX,
    bisect_lines,
    cell_text,
    check_inputs_lines,
    hotfix_status_lines,
    not_affected_line,
    row_reason,
)
from vllm_pd_doctor.matrix import FIRED, NOT_FIRED, BisectReport, MatrixReport
from vllm_pd_doctor.results import ConnectorVerdict, ReproReport

TIMELINE_KINDS = ("add_request", "hook_enter", "lookup", "truncate", "scheduled", "assertion", "finished")


def render(renderable: RenderableType, *, width: int = 110, color: bool = False) -> str:
    """Render to a string (formatters are pure functions returning text)."""
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        soft_wrap=False,
        markup=False,
    )
    console.print(renderable)
    return buf.getvalue()


def _yes_no(v: bool | None) -> str:
    return "?" if v is None else ("yes" if v else "no")


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
                _yes_no(r.truncation.before_lookup),
                str(r.hit_tokens),
                "fired" if r.control.assertion_fired else "no",
            )
        parts.append(summary)
    for r in report.results:
        parts.append(verdict_panel(report, r))
        if r.error is None and len(report.results) == 1:
            parts.append(timeline(r))
    fixes = advice.for_repro(report)
    if fixes:
        parts.append(Text("How to fix:\n" + "\n".join(f"  - {f}" for f in fixes)))
    return Group(*parts)


# --- check-config -----------------------------------------------------------------------------

_SEVERITY_STYLE = {Severity.error: "bold red", Severity.warning: "yellow", Severity.info: "cyan"}
_VERDICT_STYLE = {"exposed": "bold red", "not exposed": "bold green", "unknown": "bold yellow"}


def check_table(r: CheckReport) -> RenderableType:
    e = r.exposure
    head = Text.assemble(
        ("vLLM #53514 (P-side N-1 truncation): ", "bold"),
        (e.verdict.upper(), _VERDICT_STYLE.get(e.verdict, "bold")),
    )
    side = Table(show_header=True, header_style="bold", expand=False, box=None, padding=(0, 2))
    side.add_column("side")
    side.add_column("connector")
    side.add_column("verdict")
    side.add_column("why / where", overflow="fold")
    for s in e.sides:
        why = "; ".join(s.reasons) + ("\n" + "\n".join(s.evidence) if s.evidence else "")
        side.add_row(s.role, s.connector or "-", Text(s.verdict, _VERDICT_STYLE.get(s.verdict, "")), why)
    parts: list[RenderableType] = [head]
    if e.sides:
        parts.append(side)
    if e.probe is not None:
        parts.append(Text(f"probe: {e.probe.detail}"))
    for fx in e.fixes:
        parts.append(Text(f"fix: {fx}"))
    t = Table(title="findings", show_lines=True, expand=True)
    t.add_column("severity", no_wrap=True)
    t.add_column("id", no_wrap=True)
    t.add_column("finding / evidence", ratio=3, overflow="fold")
    t.add_column("fix", ratio=2, overflow="fold")
    t.add_column("refs", ratio=1, overflow="fold")
    for f in r.findings:
        t.add_row(
            Text(f.severity.value, _SEVERITY_STYLE[f.severity]),
            f.id,
            Text(f"{f.title}\n{f.evidence}"),
            Text(f.fix),
            Text(", ".join(f.refs)),
        )
    if not r.findings:
        t.add_row("-", "-", "no findings", "", "")
    parts.append(t)
    parts.append(Text("\n".join(check_inputs_lines(r)), style="dim"))
    parts.append(Text("(for people; use --format json to parse)", style="dim"))
    return Group(*parts)


def rules_table(c: RuleCatalogue) -> RenderableType:
    t = Table(title=f"check-config rules ({len(c.rules)})", show_lines=False, expand=True)
    t.add_column("id", no_wrap=True)
    t.add_column("severity", no_wrap=True)
    t.add_column("title", ratio=3, overflow="fold")
    t.add_column("fix", ratio=2, overflow="fold")
    t.add_column("refs", ratio=1, overflow="fold")
    for r in c.rules:
        t.add_row(
            r.id,
            Text(r.severity.value, _SEVERITY_STYLE[r.severity]),
            Text(r.title),
            Text(r.fix),
            Text(", ".join(r.refs)),
        )
    return t


# --- matrix and bisect ------------------------------------------------------------------------


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


# --- envs -------------------------------------------------------------------------------------


def envs_table(e: EnvListing) -> RenderableType:
    table = Table(title=f"environments in {e.envs_dir}", title_justify="left")
    for col in ("name", "package", "version", "extras", "installed in", "python"):
        table.add_column(col)
    for m in e.envs:
        table.add_row(
            m.name,
            m.package,
            m.version,
            ",".join(m.extras) or "-",
            f"{m.install_s:.0f} s" if m.install_s else "?",
            str(m.python),
        )
    return table


# --- hotfix -----------------------------------------------------------------------------------


def hotfix_status_table(st: hotfix.Status) -> RenderableType:
    table = Table(title=f"pd-doctor hotfix #{hotfix.ISSUE}", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for k, v in hotfix_status_lines(st):
        table.add_row(k, v)
    return table


# --- triage (H16) -----------------------------------------------------------------------------

from vllm_pd_doctor.triage.types import FailureCatalogue, TriageResult, UnknownCause  # noqa: E402


def triage_table(r: TriageResult) -> RenderableType:
    """`pd-doctor triage` for people: one panel per verdict, best first."""
    parts: list[RenderableType] = []
    for w in r.warnings:
        parts.append(Text(f"note: {w}", style="yellow"))
    if r.unknown is not None:
        parts.append(_unknown_panel(r.unknown))
    if not r.verdicts:
        t = Text("No known cause. ", style="bold")
        t.append("The most informative lines:\n" if r.informative else "No exception and no ERROR line.")
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
    body.append("next: ", style="bold")
    body.append(f"{u.next}\n")
    body.append(f"search upstream: {u.search}", style="dim")
    return Panel(body, title="Where it came from (no known class)", title_align="left")


def catalogue_table(c: FailureCatalogue) -> RenderableType:
    """`pd-doctor triage --list`: the failure classes."""
    table = Table(title="pd-doctor triage: failure classes", title_justify="left")
    for col in ("class", "title", "side", "references"):
        table.add_column(col)
    for x in c.classes:
        table.add_row(x.id, x.title, x.side, ", ".join(x.references))
    return table
