"""Markdown for issue comments and bug reports."""

from __future__ import annotations

from vllm_pd_doctor.formats import mermaid
from vllm_pd_doctor.model import ConnectorVerdict, ReproReport


def _cell(v: object) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def verdict_md(report: ReproReport, r: ConnectorVerdict) -> str:
    head = f"### {r.label} (`{r.kv_connector}`) on vLLM {report.vllm.version}\n\n"
    if r.error is not None:
        return head + f"Could not run: {r.error.stage}: {r.error.message}\n"
    a, t, c = r.assertion, r.truncation, r.control
    assert a is not None and t is not None and c is not None
    if r.reproduced:
        verdict = (f"**Reproduced**: `{a.statement}` fired at `{a.location}`." if a.fired else
                   f"**Reproduced** on the control: `{c.statement}` fired at `{c.location}`.")
    elif a.fired:
        verdict = f"**Not #53514**: another {a.kind} at `{a.location}`: `{a.statement}`."
    else:
        verdict = "**Not reproduced**: the trigger request was scheduled."
    order = "n/a" if t.before_lookup is None else (
        "before the local prefix-cache lookup" if t.before_lookup else
        "after the local prefix-cache lookup")
    rows = [
        ("truncated by", f"`{t.hook}` ({order})"),
        ("call site", f"`{t.call_site.location}` `{t.call_site.code}`" if t.call_site else "-"),
        ("statement", f"`{t.statement.location}` `{t.statement.code}`" if t.statement else "-"),
        ("prompt", f"{r.prompt_len_before} -> {r.prompt_len_after} tokens"),
        ("local prefix-cache hit", f"{r.hit_tokens} tokens"),
        ("scheduled", f"{r.scheduled_tokens} tokens"),
        (c.label, f"prompt {c.prompt_len}, hit {c.hit_tokens}, "
                              f"{'fired' if c.assertion_fired else 'did not fire'}"),
    ]
    rows += [(f"trigger `{x.name}`", x.summary) for x in r.triggers if len(r.triggers) > 1]
    table = "| | |\n|---|---|\n" + "".join(f"| {k} | {_cell(v)} |\n" for k, v in rows)
    diagram = mermaid.fenced(r)
    return head + verdict + "\n\n" + table + (f"\n{diagram}" if diagram else "")


def repro_md(report: ReproReport) -> str:
    parts = [f"## pd-doctor repro ({report.engine} engine): vLLM {report.vllm.version}\n"]
    if len(report.results) > 1:
        parts.append("| connector | fired | truncation hook | before lookup | hit |\n"
                     "|---|---|---|---|---|\n")
        for r in report.results:
            if r.error is not None:
                parts.append(f"| {r.connector} | could not run | {_cell(r.error.message)} | | |\n")
            else:
                assert r.assertion and r.truncation
                parts.append(f"| {r.connector} | {'**yes**' if r.assertion.fired else 'no'} | "
                             f"`{r.truncation.hook}` | {r.truncation.before_lookup} | "
                             f"{r.hit_tokens} |\n")
        parts.append("\n")
    parts.extend(verdict_md(report, r) + "\n" for r in report.results)
    for n in report.notes:
        parts.append(f"- {n}\n")
    return "".join(parts)
