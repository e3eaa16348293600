"""Markdown for issue comments and bug reports: one `*_md` function per result type."""

from __future__ import annotations

from vllm_pd_doctor import advice, hotfix
from vllm_pd_doctor.checkconfig.types import CheckReport, RuleCatalogue
from vllm_pd_doctor.envs import EnvListing
from vllm_pd_doctor.formats import mermaid
from vllm_pd_doctor.formats._text import (
    bisect_lines,
    cell_text,
    check_inputs_lines,
    hotfix_change_text,
    hotfix_status_lines,
    not_affected_line,
    row_reason,
)
from vllm_pd_doctor.matrix import BisectReport, MatrixReport
from vllm_pd_doctor.results import ConnectorVerdict, EnvChange, ReproReport


def _cell(v: object) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _cell_br(v: object) -> str:
    """A table cell whose line breaks stay visible."""
    return str(v).replace("|", "\\|").replace("\n", "<br>")


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
    table = "| | |\n|---|---|\n" + "".join(f"| {k} | {_cell(v)} |\n" for k, v in rows)
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
                parts.append(f"| {r.connector} | could not run | {_cell(r.error.message)} | | |\n")
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
    fixes = advice.for_repro(report)
    if fixes:
        parts.append("\n### How to fix\n\n" + "".join(f"- {f}\n" for f in fixes))
    return "".join(parts)


# --- check-config -----------------------------------------------------------------------------


def check_md(r: CheckReport) -> str:
    e = r.exposure
    out = ["# pd-doctor check-config", "", f"**vLLM #53514 (P-side N-1 truncation): {e.verdict}**", ""]
    if e.sides:
        out += ["| side | connector | verdict | why | where |", "|---|---|---|---|---|"]
        for s in e.sides:
            out.append(
                f"| {s.role} | {s.connector or '-'} | {s.verdict} | "
                f"{_cell_br('; '.join(s.reasons))} | {_cell_br('; '.join(s.evidence))} |"
            )
        out.append("")
    if e.probe is not None:
        out += [f"Probe: {e.probe.detail}", ""]
    for fx in e.fixes:
        out.append(f"- Fix: {fx}")
    if e.fixes:
        out.append("")
    out += ["## Findings", ""]
    if r.findings:
        out += ["| severity | id | finding | evidence | fix | refs |", "|---|---|---|---|---|---|"]
        for f in r.findings:
            out.append(
                f"| {f.severity.value} | `{f.id}` | {_cell_br(f.title)} | "
                f"{_cell_br(f.evidence)} | {_cell_br(f.fix)} | {_cell_br(', '.join(f.refs))} |"
            )
    else:
        out.append("No findings.")
    out += ["", "## Inputs", ""] + [f"- {line}" for line in check_inputs_lines(r)] + [""]
    return "\n".join(out)


def rules_md(c: RuleCatalogue) -> str:
    out = ["| id | severity | title | fix | refs |", "|---|---|---|---|---|"]
    for r in c.rules:
        out.append(
            f"| `{r.id}` | {r.severity.value} | {_cell_br(r.title)} | {_cell_br(r.fix)} | "
            f"{_cell_br(', '.join(r.refs))} |"
        )
    return "\n".join(out) + "\n"


# --- matrix and bisect ------------------------------------------------------------------------


def matrix_md(m: MatrixReport) -> str:
    head = "| release | " + " | ".join(m.connectors) + " |\n|---|" + "---|" * len(m.connectors) + "\n"
    body = ""
    for r in m.rows:
        if r.status != "ran":
            body += f"| {r.release} | {_cell(row_reason(r))} |" + " |" * (len(m.connectors) - 1) + "\n"
            continue
        cells = []
        for key in m.connectors:
            c = r.cell(key)
            text = cell_text(c)
            if c is not None and c.call_site is not None:
                text = text.replace(c.call_site.location, f"`{c.call_site.location}`")
            cells.append(_cell(text))
        body += f"| {r.release} | " + " | ".join(cells) + " |\n"
    return (
        f"## vLLM #53514 (P-side N-1 truncation): {m.package} release matrix\n\n"
        f"In-process repro (real Scheduler + connector scheduler half, hybrid model, block 16, "
        f"N = 33) per release. `FIRED`: `assert num_new_tokens > 0` fired; the hook that "
        f"truncated the prompt and its call site follow.\n\n" + head + body
    )


def bisect_md(b: BisectReport) -> str:
    return f"## pd-doctor bisect: {b.package}, {b.connector}\n\n" + "".join(
        f"- {_cell(line.strip())}\n" for line in bisect_lines(b)
    )


# --- envs -------------------------------------------------------------------------------------


def envs_md(e: EnvListing) -> str:
    rows = "".join(
        f"| {m.name} | {m.package} | {m.version} | {','.join(m.extras) or '-'} | "
        f"{f'{m.install_s:.0f} s' if m.install_s else '?'} | `{m.python}` |\n"
        for m in e.envs
    )
    return (
        f"## pd-doctor environments in `{e.envs_dir}`\n\n"
        "| name | package | version | extras | installed in | python |\n"
        "|---|---|---|---|---|---|\n" + rows
    )


# --- hotfix -----------------------------------------------------------------------------------


def hotfix_status_md(st: hotfix.Status) -> str:
    return "\n".join(f"- **{k}**: {v}" for k, v in hotfix_status_lines(st)) + "\n"


def hotfix_change_md(c: hotfix.Change) -> str:
    head = hotfix_change_text(c).splitlines()[0]
    return head + "\n\n" + "".join(f"- `{f}`\n" for f in c.files)


def env_change_md(c: EnvChange) -> str:
    done = "ready" if c.action == "create" else "removed"
    return f"## pd-doctor environments {done}\n\n" + "".join(f"- `{p}`\n" for p in c.paths)


# --- triage (H16) -----------------------------------------------------------------------------

from vllm_pd_doctor.triage.types import FailureCatalogue, TriageResult, UnknownCause  # noqa: E402


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
    out.append("Inputs: " + ", ".join(f"`{i.file}` ({i.side}, {i.lines} lines)" for i in r.inputs) + "\n")
    return "".join(out)


def _unknown_md(u: UnknownCause) -> str:
    out = [f"**No known class** (confidence: `{u.confidence}`, side: {u.side}).\n\n"]
    out.append(f"- line: `{u.evidence.file}:{u.evidence.line}`: `{u.evidence.text}`\n")
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
    out.append(f"- next: `{u.next}`\n- search upstream: `{u.search}`\n\n")
    return "".join(out)


def catalogue_md(c: FailureCatalogue) -> str:
    """`pd-doctor triage --list --format markdown`."""
    rows = "".join(
        f"| `{x.id}` | {x.title.replace('|', '/')} | {x.side} | {', '.join(x.references)} |\n"
        for x in c.classes
    )
    return "| class | title | side | references |\n|---|---|---|---|\n" + rows
