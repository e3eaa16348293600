"""`pd-doctor check-config`'s report and its rule catalogue (`CheckReport`, `RuleCatalogue`) in
every format."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich only where a table is built: check-config --format json never loads it
    from rich.console import RenderableType

from vllm_pd_doctor.formats._common import (
    md_cell_br,
)
from vllm_pd_doctor.results.base import SCHEMA_VERSION
from vllm_pd_doctor.results.checkconfig import (
    CheckReport,
    Exposure,
    Finding,
    RuleCatalogue,
    Severity,
    VllmSource,
)

# --- plain text shared by the table and Markdown


def check_inputs_lines(r: CheckReport) -> list[str]:
    """What check-config read (and what it was not given)."""
    i = r.inputs
    lines = [
        f"prefill command: {i.prefill or 'not given'}",
        f"decode command: {i.decode or 'not given'}",
        f"model: {i.model + ' (' + str(i.model_source) + ')' if i.model else 'not given'}"
        + (f", hybrid: {'yes' if r.model.hybrid else 'no'}" if r.model else ""),
        f"vLLM: {_vllm_line(r)} ({i.python})",
    ]
    lines += [f"not an engine (not checked): {n}" for n in i.non_engines]
    if r.nixl is not None:
        d = ", ".join(f"{n}=={v}" for n, v in r.nixl.dists) or "none"
        lines.append(f"NIXL: {d}")
    lines.append(f"probe: {'run' if i.probe else 'not run (--probe)'}")
    return lines


def _vllm_line(r: CheckReport) -> str:
    if r.vllm is None or r.vllm.path is None:
        return "not found"
    return f"{r.vllm.version or '?'} at {r.vllm.path}"


# --- table (rich, for people)


_SEVERITY_STYLE = {Severity.error: "bold red", Severity.warning: "yellow", Severity.info: "cyan"}


_VERDICT_STYLE = {"exposed": "bold red", "not exposed": "bold green", "unknown": "bold yellow"}


def check_table(r: CheckReport) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

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
    from rich.table import Table
    from rich.text import Text

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


# --- JSON (documents with schema_version)


def exposure_obj(e: Exposure) -> dict[str, Any]:
    return {
        "issue": "vllm#53514",
        "verdict": e.verdict,
        "sides": [
            {
                "role": s.role,
                "server": s.server,
                "connector": s.connector,
                "verdict": s.verdict,
                "reasons": list(s.reasons),
                "reason_kinds": [r.kind.value for r in s.why],
                "evidence": list(s.evidence),
            }
            for s in e.sides
        ],
        "fixes": list(e.fixes),
        "probe": None
        if e.probe is None
        else {"ran": e.probe.ran, "reproduced": e.probe.reproduced, "detail": e.probe.detail},
    }


def finding_obj(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id,
        "severity": f.severity.value,
        "title": f.title,
        "evidence": f.evidence,
        "fix": f.fix,
        "refs": list(f.refs),
    }


def vllm_source_obj(v: VllmSource) -> dict[str, Any]:
    """What check-config read from the installed vLLM's source."""
    return {
        "version": v.version,
        "path": v.path,
        "error": v.error,
        "side_channel_port_default": v.side_channel_port_default,
        "kv_roles": list(v.kv_roles),
        "truncation_sites": [
            {
                "connector": s.connector,
                "helper": s.helper,
                "caller": s.caller,
                "class": s.caller_class,
                "location": s.location,
                "before_lookup": s.before_lookup,
            }
            for s in v.sites
        ],
    }


def check_obj(r: CheckReport) -> dict[str, Any]:
    """`pd-doctor check-config --format json`."""
    i = r.inputs
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "check-config",
        "exposure": exposure_obj(r.exposure),
        "findings": [finding_obj(f) for f in r.findings],
        "summary": {s.value: sum(1 for f in r.findings if f.severity is s) for s in Severity},
        "inputs": {
            "given": i.given(),
            "prefill_cmd": i.prefill,
            "decode_cmd": i.decode,
            "config_file": i.config_file,
            "model": i.model,
            "model_source": i.model_source,
            "model_hybrid": r.model.hybrid if r.model else None,
            "python": i.python,
            "warnings": list(i.warnings),
            "not_given": [k for k, v in i.given().items() if not v],
            "variables": dict(i.variables),
            "non_engines": list(i.non_engines),
        },
        "servers": [
            {
                "name": sv.name,
                "role": sv.config.role,
                "role_source": sv.role_source,
                "launcher": sv.launcher,
                "network": sv.network,
                "network_evidence": sv.network_evidence,
                "model": sv.config.model,
                "kv_connector": sv.config.kv_connector,
                "kv_role": sv.config.kv_role,
            }
            for sv in r.servers
        ],
        "vllm": None if r.vllm is None else vllm_source_obj(r.vllm),
        "nixl": None
        if r.nixl is None
        else {
            "dists": [{"name": n, "version": v} for n, v in r.nixl.dists],
            "module_found": r.nixl.namespace_found,
            "import_ok": r.nixl.import_ok,
            "import_error": r.nixl.import_error,
            "ucx_plugin": r.nixl.ucx_plugin,
            "vllm_requirement": r.nixl.vllm_requirement,
        },
        "elapsed_s": round(r.elapsed_s, 4),
    }


def rules_obj(c: RuleCatalogue) -> dict[str, Any]:
    """`pd-doctor check-config --list-rules --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "rules": [
            {"id": r.id, "severity": r.severity.value, "title": r.title, "fix": r.fix, "refs": list(r.refs)}
            for r in c.rules
        ],
    }


# --- Markdown


def check_md(r: CheckReport) -> str:
    e = r.exposure
    out = ["# pd-doctor check-config", "", f"**vLLM #53514 (P-side N-1 truncation): {e.verdict}**", ""]
    if e.sides:
        out += ["| side | connector | verdict | why | where |", "|---|---|---|---|---|"]
        for s in e.sides:
            out.append(
                f"| {s.role} | {s.connector or '-'} | {s.verdict} | "
                f"{md_cell_br('; '.join(s.reasons))} | {md_cell_br('; '.join(s.evidence))} |"
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
                f"| {f.severity.value} | `{f.id}` | {md_cell_br(f.title)} | "
                f"{md_cell_br(f.evidence)} | {md_cell_br(f.fix)} | {md_cell_br(', '.join(f.refs))} |"
            )
    else:
        out.append("No findings.")
    out += ["", "## Inputs", ""] + [f"- {line}" for line in check_inputs_lines(r)] + [""]
    return "\n".join(out)


def rules_md(c: RuleCatalogue) -> str:
    out = ["| id | severity | title | fix | refs |", "|---|---|---|---|---|"]
    for r in c.rules:
        out.append(
            f"| `{r.id}` | {r.severity.value} | {md_cell_br(r.title)} | {md_cell_br(r.fix)} | "
            f"{md_cell_br(', '.join(r.refs))} |"
        )
    return "\n".join(out) + "\n"
