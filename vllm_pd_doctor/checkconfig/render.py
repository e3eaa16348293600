"""Render a CheckReport (and the rule catalogue) as a rich table, JSON or Markdown."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from vllm_pd_doctor.checkconfig.rules import RULES
from vllm_pd_doctor.checkconfig.types import CheckReport, Exposure, Finding, Severity
from vllm_pd_doctor.model import SCHEMA_VERSION

_STYLE = {Severity.error: "bold red", Severity.warning: "yellow", Severity.info: "cyan"}
_VERDICT_STYLE = {"exposed": "bold red", "not exposed": "bold green", "unknown": "bold yellow"}


def exposure_to_obj(e: Exposure) -> dict[str, Any]:
    return {
        "issue": "vllm#53514",
        "verdict": e.verdict,
        "sides": [{"role": s.role, "connector": s.connector, "verdict": s.verdict,
                   "reasons": list(s.reasons), "evidence": list(s.evidence)} for s in e.sides],
        "fixes": list(e.fixes),
        "probe": None if e.probe is None else {"ran": e.probe.ran,
                                               "reproduced": e.probe.reproduced,
                                               "detail": e.probe.detail},
    }


def finding_to_obj(f: Finding) -> dict[str, Any]:
    return {"id": f.id, "severity": f.severity.value, "title": f.title, "evidence": f.evidence,
            "fix": f.fix, "refs": list(f.refs)}


def to_obj(r: CheckReport) -> dict[str, Any]:
    i = r.inputs
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "check-config",
        "exposure": exposure_to_obj(r.exposure),
        "findings": [finding_to_obj(f) for f in r.findings],
        "summary": {s.value: sum(1 for f in r.findings if f.severity is s) for s in Severity},
        "inputs": {
            "given": i.given(),
            "prefill_cmd": i.prefill, "decode_cmd": i.decode, "config_file": i.config_file,
            "model": i.model, "model_source": i.model_source,
            "model_hybrid": r.model.hybrid if r.model else None,
            "python": i.python, "warnings": list(i.warnings),
            "not_given": [k for k, v in i.given().items() if not v],
        },
        "vllm": None if r.vllm is None else {
            "version": r.vllm.version, "path": r.vllm.path, "error": r.vllm.error,
            "side_channel_port_default": r.vllm.side_channel_port_default,
            "kv_roles": list(r.vllm.kv_roles),
            "truncation_sites": [{"connector": s.connector, "helper": s.helper,
                                  "caller": s.caller, "class": s.caller_class,
                                  "location": s.location, "before_lookup": s.before_lookup}
                                 for s in r.vllm.sites]},
        "nixl": None if r.nixl is None else {
            "dists": [{"name": n, "version": v} for n, v in r.nixl.dists],
            "module_found": r.nixl.namespace_found, "import_ok": r.nixl.import_ok,
            "import_error": r.nixl.import_error, "ucx_plugin": r.nixl.ucx_plugin,
            "vllm_requirement": r.nixl.vllm_requirement},
        "elapsed_s": round(r.elapsed_s, 4),
    }


def to_json(r: CheckReport) -> str:
    return json.dumps(to_obj(r), indent=2, sort_keys=False) + "\n"


def _inputs_lines(r: CheckReport) -> list[str]:
    i = r.inputs
    lines = [f"prefill command: {i.prefill or 'not given'}",
             f"decode command: {i.decode or 'not given'}",
             f"model: {i.model + ' (' + str(i.model_source) + ')' if i.model else 'not given'}"
             + (f", hybrid: {'yes' if r.model.hybrid else 'no'}" if r.model else ""),
             f"vLLM: {_vllm_line(r)} ({i.python})"]
    if r.nixl is not None:
        d = ", ".join(f"{n}=={v}" for n, v in r.nixl.dists) or "none"
        lines.append(f"NIXL: {d}")
    lines.append(f"probe: {'run' if i.probe else 'not run (--probe)'}")
    return lines


def _vllm_line(r: CheckReport) -> str:
    if r.vllm is None or r.vllm.path is None:
        return "not found"
    return f"{r.vllm.version or '?'} at {r.vllm.path}"


def table(r: CheckReport) -> RenderableType:
    e = r.exposure
    head = Text.assemble(("vLLM #53514 (P-side N-1 truncation): ", "bold"),
                         (e.verdict.upper(), _VERDICT_STYLE.get(e.verdict, "bold")))
    side = Table(show_header=True, header_style="bold", expand=False, box=None, padding=(0, 2))
    side.add_column("side")
    side.add_column("connector")
    side.add_column("verdict")
    side.add_column("why / where", overflow="fold")
    for s in e.sides:
        why = "; ".join(s.reasons) + ("\n" + "\n".join(s.evidence) if s.evidence else "")
        side.add_row(s.role, s.connector or "-", Text(s.verdict, _VERDICT_STYLE.get(s.verdict,
                                                                                      "")), why)
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
        t.add_row(Text(f.severity.value, _STYLE[f.severity]), f.id,
                  f"{f.title}\n{f.evidence}", f.fix, ", ".join(f.refs))
    if not r.findings:
        t.add_row("-", "-", "no findings", "", "")
    parts.append(t)
    parts.append(Text("\n".join(_inputs_lines(r)), style="dim"))
    parts.append(Text("(for people; use --format json to parse)", style="dim"))
    return Group(*parts)


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", "<br>")


def markdown(r: CheckReport) -> str:
    e = r.exposure
    out = ["# pd-doctor check-config", "",
           f"**vLLM #53514 (P-side N-1 truncation): {e.verdict}**", ""]
    if e.sides:
        out += ["| side | connector | verdict | why | where |", "|---|---|---|---|---|"]
        for s in e.sides:
            out.append(f"| {s.role} | {s.connector or '-'} | {s.verdict} | "
                       f"{_md_cell('; '.join(s.reasons))} | {_md_cell('; '.join(s.evidence))} |")
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
            out.append(f"| {f.severity.value} | `{f.id}` | {_md_cell(f.title)} | "
                       f"{_md_cell(f.evidence)} | {_md_cell(f.fix)} | {_md_cell(', '.join(f.refs))} |")
    else:
        out.append("No findings.")
    out += ["", "## Inputs", ""] + [f"- {line}" for line in _inputs_lines(r)] + [""]
    return "\n".join(out)


def rules_obj() -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION,
            "rules": [{"id": r.id, "severity": r.severity.value, "title": r.title, "fix": r.fix,
                       "refs": list(r.refs)} for r in RULES]}


def rules_table() -> RenderableType:
    t = Table(title=f"check-config rules ({len(RULES)})", show_lines=False, expand=True)
    t.add_column("id", no_wrap=True)
    t.add_column("severity", no_wrap=True)
    t.add_column("title", ratio=3, overflow="fold")
    t.add_column("fix", ratio=2, overflow="fold")
    t.add_column("refs", ratio=1, overflow="fold")
    for r in RULES:
        t.add_row(r.id, Text(r.severity.value, _STYLE[r.severity]), r.title, r.fix,
                  ", ".join(r.refs))
    return t


def rules_markdown() -> str:
    out = ["| id | severity | title | fix | refs |", "|---|---|---|---|---|"]
    for r in RULES:
        out.append(f"| `{r.id}` | {r.severity.value} | {_md_cell(r.title)} | {_md_cell(r.fix)} | "
                   f"{_md_cell(', '.join(r.refs))} |")
    return "\n".join(out) + "\n"
