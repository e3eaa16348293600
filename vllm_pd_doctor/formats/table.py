"""Rich rendering for people (not for parsing: use --format json)."""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from vllm_pd_doctor.model import ConnectorVerdict, ReproReport

TIMELINE_KINDS = ("add_request", "hook_enter", "lookup", "truncate", "scheduled", "assertion",
                  "finished")


def render(renderable: RenderableType, *, width: int = 110, color: bool = False) -> str:
    """Render to a string (formatters are pure functions returning text)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color,
                      highlight=False, soft_wrap=False)
    console.print(renderable)
    return buf.getvalue()


def _yes_no(v: bool | None) -> str:
    return "?" if v is None else ("yes" if v else "no")


def verdict_panel(report: ReproReport, r: ConnectorVerdict) -> Panel:
    title = f"{r.label}  ({r.kv_connector}) on vLLM {report.vllm.version}"
    if r.error is not None:
        body = Text.assemble(("COULD NOT RUN", "bold yellow"),
                             f"\n{r.error.stage}: {r.error.message}")
        return Panel(body, title=title, border_style="yellow")
    a, t, c = r.assertion, r.truncation, r.control
    assert a is not None and t is not None and c is not None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    if r.reproduced:
        head = Text("REPRODUCED: the prefill EngineCore would die", style="bold red")
        grid.add_row("assertion", f"{a.statement or 'assert'}  at {a.location}" if a.fired else
                     f"on the control: {c.statement}  at {c.location}")
    else:
        head = Text("NOT REPRODUCED: the trigger request was scheduled", style="bold green")
        grid.add_row("assertion", f"another {a.kind} at {a.location}: {a.statement or a.message}"
                     if a.fired else "did not fire")
    order = "none" if t.before_lookup is None else (
        "before the local prefix-cache lookup" if t.before_lookup
        else "AFTER the local prefix-cache lookup")
    grid.add_row("truncated by", f"{t.hook}  ({order})")
    if t.call_site is not None:
        grid.add_row("call site", f"{t.call_site.location}  {t.call_site.code}")
    if t.statement is not None:
        grid.add_row("statement", f"{t.statement.location}  {t.statement.code}  [{t.statement.function}]")
    grid.add_row("prompt", f"{r.prompt_len_before} -> {r.prompt_len_after} tokens")
    grid.add_row("local prefix hit", f"{r.hit_tokens} tokens")
    grid.add_row("scheduled", f"{r.scheduled_tokens} tokens")
    ctl = "fired" if c.assertion_fired else "did not fire"
    grid.add_row(c.label,
                 f"prompt {c.prompt_len}, hit {c.hit_tokens}, {ctl}, scheduled {c.scheduled_tokens}")
    for x in r.triggers if len(r.triggers) > 1 else ():
        grid.add_row(f"trigger {x.name}", x.summary)
    if r.config is not None:
        grid.add_row("scenario", f"block {r.config.block_size}, mamba_cache_mode "
                                 f"{r.config.mamba_cache_mode}, kv_role {r.config.kv_role}")
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
            detail = f"{d.get('op')} {d.get('len_before')}->{d.get('len_after')} in " \
                     f"{st.get('function')} ({st.get('file')}:{st.get('line')}), hook {d.get('hook')}"
        elif e.kind == "assertion":
            what, detail = "AssertionError", f"{d.get('statement')} at {d.get('location')}"
        else:
            what, detail = e.kind, ""
        table.add_row(str(e.seq), f"{e.t_ms:.1f}", what, str(tokens), detail)
    return table


def repro_table(report: ReproReport) -> RenderableType:
    parts: list[RenderableType] = []
    if len(report.results) > 1:
        summary = Table(title=f"vLLM {report.vllm.version}: P-side N-1 truncation (#53514)",
                        title_justify="left")
        for col in ("connector", "fired", "hook", "before lookup", "hit", "control"):
            summary.add_column(col)
        for r in report.results:
            if r.error is not None:
                summary.add_row(r.connector, "could not run", r.error.message, "", "", "")
                continue
            assert r.assertion and r.truncation and r.control
            summary.add_row(r.connector,
                            Text("FIRED", style="bold red") if r.assertion.fired else
                            Text("no", style="green"),
                            r.truncation.hook, _yes_no(r.truncation.before_lookup),
                            str(r.hit_tokens),
                            "fired" if r.control.assertion_fired else "no")
        parts.append(summary)
    for r in report.results:
        parts.append(verdict_panel(report, r))
        if r.error is None and len(report.results) == 1:
            parts.append(timeline(r))
    return Group(*parts)
