"""`pd-doctor status` in every format: table (rich), JSON (schema_version 1), Markdown."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from vllm_pd_doctor.results.status import EngineStatus, StatusReport

if TYPE_CHECKING:
    from rich.console import RenderableType

SCHEMA_VERSION = 1
STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def status_obj(r: StatusReport) -> dict[str, Any]:
    """`pd-doctor status --format json` (metric names in full)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "healthy": r.errors == 0,
        "answered": r.unanswered == 0,
        "interval_s": r.interval_s,
        "window_s": r.window_s,
        "traffic": r.traffic,
        "elapsed_s": r.elapsed_s,
        "engines": [asdict(e) | {"key_values": dict(e.key_values)} for e in r.engines],
        "comparisons": [asdict(c) for c in r.comparisons],
        "findings": [asdict(f) for f in r.findings],
        "notes": list(r.notes),
    }


def short(metric: str) -> str:
    """A metric's label for the table: `vllm:nixl_num_failed_transfers_total` -> `nixl failed
    transfers`, `...{source="external_kv_transfer"}` -> `... [external_kv_transfer]`. Derived from
    the name, so two metrics never share a label; JSON and Markdown keep the full names."""
    name, brace, labels = metric.partition("{")
    name = name.removeprefix("vllm:")
    for suffix in ("_total", "_count", "_seconds", "_perc"):
        name = name.removesuffix(suffix)
    words = [w for w in name.split("_") if w != "num"]
    out = " ".join(words)
    if brace:
        vals = [kv.partition("=")[2].strip('"') for kv in labels.rstrip("}").split(",") if kv]
        out += f" [{','.join(vals)}]"
    return out


def _verdict(r: StatusReport) -> str:
    if not r.findings:
        return "healthy: no finding"
    counts = {s: sum(1 for f in r.findings if f.severity == s) for s in ("error", "warning", "info")}
    if not counts["error"] and not counts["warning"]:
        return f"healthy: {counts['info']} info (exposure, nothing seen failing)"
    head = "UNHEALTHY: " if r.errors else "no error: "
    if r.unanswered:
        head = f"UNHEALTHY ({r.unanswered} engine(s) did not answer): "
    return head + ", ".join(f"{n} {s}" for s, n in counts.items() if n)


def _side(e: EngineStatus) -> str:
    hs = e.handshake
    if hs is None:
        return "-"
    return f"{hs.address}: {hs.error}" if hs.error else f"{hs.address} answered"


def _same(same: bool | None) -> str:
    return "unknown" if same is None else "same" if same else "DIFFERENT"


def _header(r: StatusReport) -> str:
    window = f"window {r.window_s:.1f} s" if r.window_s else "no window"
    traffic = "" if r.traffic is not False else ", no traffic"
    return f"{_verdict(r)}  ({window}{traffic}; took {r.elapsed_s:.1f} s)"


def status_table(r: StatusReport) -> RenderableType:
    """Readable from 80 columns: one column per engine, short metric labels (full names in JSON)."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [Text(_header(r), style="bold")]
    eng = Table(title="engines", title_justify="left")
    eng.add_column("")
    roles = [e.role for e in r.engines]
    for i, e in enumerate(r.engines):
        eng.add_column(e.role if roles.count(e.role) == 1 else f"{e.role} {i + 1}", overflow="fold")
    rows: list[tuple[str, list[str]]] = [
        ("url", [e.url for e in r.engines]),
        ("answered", [f"no: {e.down} ({e.error})" if e.down else "yes" for e in r.engines]),
        ("health", [str(e.health) if e.health is not None else "-" for e in r.engines]),
        ("vLLM", [e.version or "-" for e in r.engines]),
        ("model", [e.model or "-" for e in r.engines]),
        ("block size", [str(e.block_size) if e.block_size else "-" for e in r.engines]),
        ("side channel", [_side(e) for e in r.engines]),
    ]
    labels = list(dict.fromkeys(k for e in r.engines for k, _ in e.key_values))
    for k in labels:
        rows.append((short(k), [dict(e.key_values).get(k, "-") for e in r.engines]))
    for label, vals in rows:
        eng.add_row(label, *vals)
    parts.append(eng)
    if r.comparisons:
        cmp = Table(title="prefill vs decode (side channel, /version)", title_justify="left")
        for col in ("field", "prefill", "decode", ""):
            cmp.add_column(col, overflow="fold")
        style = {"DIFFERENT": "bold red", "unknown": "yellow"}
        for c in r.comparisons:
            word = _same(c.same)
            cmp.add_row(c.field, c.prefill, c.decode, Text(word, style=style.get(word, "")))
        parts.append(cmp)
    for n, f in enumerate(r.findings, 1):
        body = Text()
        body.append(f.severity, style=STYLE.get(f.severity, ""))
        body.append(f"  ({f.id}; triage class: {f.triage_class or '-'})\n")
        for ev in f.evidence:
            body.append(f"  {ev.engine}  {short(ev.metric)}: ", style="dim")
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
                    f"{e.role} {e.url}: not exposed by {e.metrics_from}: "
                    + ", ".join(short(x) for x in e.not_exposed),
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
        f"Window {r.window_s:.1f} s"
        + (", no traffic" if r.traffic is False else "")
        + f", took {r.elapsed_s:.1f} s.",
        "",
    ]
    out += [
        "| role | url | answered | health | vLLM | model | block | side channel |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in r.engines:
        health = e.health if e.health is not None else "-"
        answered = f"no: {e.down}" if e.down else "yes"
        out.append(
            f"| {e.role} | {_c(e.url)} | {answered} | {health} | {_c(e.version or '-')} | "
            f"{_c(e.model or '-')} | {e.block_size or '-'} | {_c(_side(e))} |"
        )
    if r.comparisons:
        out += ["", "| field | prefill | decode | |", "|---|---|---|---|"]
        for c in r.comparisons:
            word = "**different**" if c.same is False else _same(c.same)
            out.append(f"| {_c(c.field)} | {_c(c.prefill)} | {_c(c.decode)} | {word} |")
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
