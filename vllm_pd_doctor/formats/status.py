"""`pd-doctor status` in every format: table (rich), JSON (schema_version 1), Markdown."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from vllm_pd_doctor.results.status import StatusReport

if TYPE_CHECKING:
    from rich.console import RenderableType

SCHEMA_VERSION = 1
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def status_obj(r: StatusReport) -> dict[str, Any]:
    """`pd-doctor status --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "healthy": r.errors == 0,
        "interval_s": r.interval_s,
        "elapsed_s": r.elapsed_s,
        "engines": [asdict(e) | {"key_values": dict(e.key_values)} for e in r.engines],
        "comparisons": [asdict(c) for c in r.comparisons],
        "findings": [asdict(f) for f in r.findings],
        "notes": list(r.notes),
    }


def _verdict(r: StatusReport) -> str:
    if not r.findings:
        return "healthy: no finding"
    counts = {s: sum(1 for f in r.findings if f.severity == s) for s in ("error", "warning", "info")}
    if not counts["error"] and not counts["warning"]:
        return f"healthy: {counts['info']} info (exposure, nothing seen failing)"
    return ("UNHEALTHY: " if r.errors else "no error: ") + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n
    )


def status_table(r: StatusReport) -> RenderableType:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [
        Text(f"{_verdict(r)}  (window {r.interval_s:g} s, took {r.elapsed_s:.1f} s)", style="bold")
    ]
    eng = Table(title="engines", title_justify="left")
    for col in ("role", "url", "health", "vLLM", "model", "block", "side channel", "figures"):
        eng.add_column(col)
    for e in r.engines:
        hs = e.handshake
        side = "-" if hs is None else (f"{hs.address}: {hs.error}" if hs.error else f"{hs.address} ok")
        eng.add_row(
            e.role,
            e.url,
            str(e.health) if e.health is not None else "-",
            e.version or "-",
            e.model or "-",
            str(e.block_size) if e.block_size else "-",
            side,
            "\n".join(f"{k}: {v}" for k, v in e.key_values),
        )
    parts.append(eng)
    if r.comparisons:
        cmp = Table(title="prefill vs decode (side channel, /version)", title_justify="left")
        for col in ("field", "prefill", "decode", ""):
            cmp.add_column(col)
        for c in r.comparisons:
            cmp.add_row(
                c.field, c.prefill, c.decode, "same" if c.same else Text("DIFFERENT", style="bold red")
            )
        parts.append(cmp)
    for n, f in enumerate(r.findings, 1):
        body = Text()
        body.append(f.severity, style=STYLE.get(f.severity, ""))
        body.append(f"  ({f.id}; triage class: {f.triage_class or '-'})\n")
        for ev in f.evidence:
            body.append(f"  {ev.engine}  {ev.metric}: ", style="dim")
            body.append(f"{ev.value}\n")
        body.append("fix: ", style="bold")
        body.append(f"{f.fix}\n")
        body.append("next: ", style="bold")
        body.append(f.next)
        if f.references:
            body.append("\nrefs: " + ", ".join(f.references), style="dim")
        parts.append(Panel(body, title=f"{n}. {f.title}", title_align="left"))
    for e in r.engines:
        if e.not_exposed:
            parts.append(
                Text(
                    f"{e.role} {e.url}: not exposed by {e.metrics_from}: {', '.join(e.not_exposed)}",
                    style="dim",
                )
            )
    for note in r.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


def _c(v: object) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def status_md(r: StatusReport) -> str:
    out = [
        f"## pd-doctor status: {_verdict(r)}",
        "",
        f"Window {r.interval_s:g} s, took {r.elapsed_s:.1f} s.",
        "",
    ]
    out += ["| role | url | health | vLLM | model | block | side channel |", "|---|---|---|---|---|---|---|"]
    for e in r.engines:
        hs = e.handshake
        side = "-" if hs is None else (f"{hs.address}: {hs.error}" if hs.error else f"{hs.address} ok")
        health = e.health if e.health is not None else "-"
        out.append(
            f"| {e.role} | {_c(e.url)} | {health} | {_c(e.version or '-')} | "
            f"{_c(e.model or '-')} | {e.block_size or '-'} | {_c(side)} |"
        )
    if r.comparisons:
        out += ["", "| field | prefill | decode | |", "|---|---|---|---|"]
        out += [
            f"| {_c(c.field)} | {_c(c.prefill)} | {_c(c.decode)} | {'same' if c.same else '**different**'} |"
            for c in r.comparisons
        ]
    for n, f in enumerate(r.findings, 1):
        out += [
            "",
            f"### {n}. {f.title}",
            "",
            f"**{f.severity}** (`{f.id}`; triage class `{f.triage_class or '-'}`)",
            "",
        ]
        out += [f"- {_c(ev.engine)} `{ev.metric}`: {_c(ev.value)}" for ev in f.evidence]
        out += ["", f"**Fix:** {f.fix}", "", f"**Next:** `{f.next}`"]
        if f.references:
            out += ["", "References: " + ", ".join(f.references)]
    for e in r.engines:
        if e.not_exposed:
            out += ["", f"{e.role} {e.url}: not exposed by {e.metrics_from}: {', '.join(e.not_exposed)}"]
    out += [f"\n_note: {n}_" for n in r.notes]
    return "\n".join(out) + "\n"
