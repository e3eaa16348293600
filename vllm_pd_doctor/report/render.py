"""The report's typed content and its two renderings, Markdown and JSON (pure functions).

Everything in a `ReportDoc` is already redacted; rendering adds no data of its own, so the
same input always gives the same bytes (the golden-file test relies on it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from vllm_pd_doctor.model import SCHEMA_VERSION
from vllm_pd_doctor.report.redact import KIND_LABELS

BUG_TEMPLATE_URL = "https://github.com/vllm-project/vllm/issues/new?template=400-bug-report.yml"


@dataclass(frozen=True)
class Section:
    """A collected value (already rendered to plain data), or why it could not be collected."""

    ok: bool
    value: Any = None
    why: str | None = None


@dataclass(frozen=True)
class CommandDoc:
    """One launch command as check-config parsed it (from a command line or a --config file)."""

    role: str
    command: str
    """The command rebuilt from the parsed arguments (env assignments, `vllm serve`, argv), or
    the text as given when check-config could not parse it (see `ReportDoc.commands_error`)."""
    name: str = ""
    """The server's name in the input (`prefill`, `decode-1`, `pod vllm-prefill`, ...)."""
    env: tuple[tuple[str, str], ...] = ()
    kv_transfer_config: Any = None
    source: str = "command line"
    machine: str | None = None


@dataclass(frozen=True)
class ReproDoc:
    vllm_version: str
    connector: str
    reproduced: bool
    ran: bool
    verdict: str
    facts: tuple[tuple[str, str], ...]
    timeline: tuple[str, ...]
    traceback: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class FindingDoc:
    id: str
    severity: str
    title: str
    evidence: str = ""
    fix: str = ""
    refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class SideDoc:
    """#53514 exposure of one engine, from check-config's `SideExposure`."""

    role: str
    connector: str | None
    verdict: str
    reasons: tuple[str, ...] = ()
    server: str = ""
    """The server's name (`prefill`, `decode-1`, ...)."""
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExposureDoc:
    """check-config's `Exposure`: the verdict, per side, the fixes and the probe's detail."""

    verdict: str
    sides: tuple[SideDoc, ...] = ()
    fixes: tuple[str, ...] = ()
    probe: str | None = None


@dataclass(frozen=True)
class CheckDoc:
    """check-config's `CheckReport`, as the report shows it."""

    exposure: ExposureDoc
    findings: tuple[FindingDoc, ...]
    has_error: bool
    """check-config's own verdict: exposed, or an error-level finding (its exit 1)."""
    warnings: tuple[str, ...] = ()
    """What check-config could not check (unknown flags, an unreadable model config)."""


@dataclass(frozen=True)
class ExcerptDoc:
    kind: str
    reasons: tuple[str, ...]
    first_line: int
    last_line: int
    text: str


@dataclass(frozen=True)
class LogDoc:
    name: str
    """The name in the bundle (raw/logs/<name>)."""
    given_as: str
    ok: bool
    why: str | None = None
    size_bytes: int = 0
    cut_chars: int = 0
    signatures: tuple[tuple[str, int, str], ...] = ()
    """(key, lines holding it, what it means)."""
    excerpts: tuple[ExcerptDoc, ...] = ()


@dataclass(frozen=True)
class CollectorDoc:
    name: str
    ok: bool
    why: str | None
    elapsed_s: float


@dataclass(frozen=True)
class VerdictDoc:
    """A triage verdict on the logs (vllm_pd_doctor.triage), as the report shows it first."""

    cls: str
    title: str
    confidence: str
    log: str
    evidence: tuple[tuple[int, str], ...]
    """(line, text) in that log (already redacted)."""
    fix: str
    next: str
    missing: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class ReportDoc:
    title: str
    pd_doctor_version: str
    created: str
    interpreter: Section
    """value: {"interpreter", "python", "vllm_version", "vllm_path"}."""
    collect_env: Section
    """value: the collector's text."""
    nixl: Section
    """value: {"dists": [{"name", "version"}], "plugins": [{"name", "path"}]}."""
    ucx: Section
    """value: `ucx_info -v` text."""
    env_vars: tuple[tuple[str, str, str], ...]
    """(name, value, where: environment / prefill command / decode command)."""
    commands: tuple[CommandDoc, ...]
    config_file: str | None
    repro: Section
    """value: ReproDoc."""
    check_config: Section
    """value: CheckDoc."""
    reproduction: tuple[tuple[str, str], ...]
    """(what it is, shell command)."""
    logs: tuple[LogDoc, ...]
    redactions: tuple[tuple[str, int], ...]
    redact_hosts: bool
    collectors: tuple[CollectorDoc, ...]
    files: tuple[str, ...]
    exit_code: int
    commands_error: str | None = None
    """Why check-config could not parse the launch commands (None: it did, or none given)."""
    verdicts: tuple[VerdictDoc, ...] = ()
    """Triage's verdicts on the logs, best first (shown at the top)."""


def _cnc(why: str | None) -> str:
    return f"could not collect: {why or 'unknown reason'}"


def _fence(text: str, lang: str = "text") -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def _cell(v: object) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _json_compact(v: Any) -> str:
    return json.dumps(v, indent=2, sort_keys=True, default=str) if not isinstance(v, str) else v


def _environment_md(doc: ReportDoc) -> list[str]:
    p: list[str] = ["### Your current environment\n\n"]
    p.append("<details>\n<summary>The output of <code>python collect_env.py</code></summary>\n\n")
    if doc.collect_env.ok:
        p.append(_fence(str(doc.collect_env.value)))
    else:
        p.append(f"{_cnc(doc.collect_env.why)}\n")
    p.append("\n</details>\n\n")
    p.append("<details>\n<summary>P/D additions (pd-doctor): NIXL, UCX, environment variables</summary>\n\n")
    it = doc.interpreter
    if it.ok:
        v = it.value
        p.append(
            f"- Interpreter: `{v.get('interpreter')}` (Python {v.get('python')}), vLLM "
            f"{v.get('vllm_version') or 'not installed'}\n"
        )
    else:
        p.append(f"- Interpreter: {_cnc(it.why)}\n")
    if doc.nixl.ok:
        dists = doc.nixl.value.get("dists", [])
        nixl = [d for d in dists if "nixl" in d["name"].lower() or "ucx" in d["name"].lower()]
        other = [d for d in dists if d not in nixl]
        p.append(
            "- NIXL / UCX distributions: "
            + (", ".join(f"`{d['name']}=={d['version']}`" for d in nixl) or "none installed")
            + "\n"
        )
        if other:
            p.append(
                "- Related distributions: "
                + ", ".join(f"`{d['name']}=={d['version']}`" for d in other)
                + "\n"
            )
        plugins = doc.nixl.value.get("plugins", [])
        p.append("- NIXL plugins found: " + (", ".join(f"`{x['name']}`" for x in plugins) or "none") + "\n")
    else:
        p.append(f"- NIXL / UCX distributions: {_cnc(doc.nixl.why)}\n")
    if doc.ucx.ok:
        first = str(doc.ucx.value).strip().splitlines()
        p.append(f"- UCX (`ucx_info -v`): `{first[0] if first else ''}`\n")
    else:
        p.append(f"- UCX (`ucx_info -v`): {_cnc(doc.ucx.why)}\n")
    if doc.env_vars:
        p.append("\nUCX / NIXL / KV layout variables:\n\n| variable | value | set in |\n|---|---|---|\n")
        p.extend(f"| `{n}` | `{_cell(v)}` | {w} |\n" for n, v, w in doc.env_vars)
    else:
        p.append("- UCX / NIXL / KV layout variables: none set\n")
    p.append("\n</details>\n\n")
    return p


def _repro_md(doc: ReportDoc) -> list[str]:
    p = ["#### pd-doctor repro of vLLM #53514 (P-side N-1 truncation)\n\n"]
    if not doc.repro.ok:
        p.append(f"{_cnc(doc.repro.why)}\n\n")
        return p
    r: ReproDoc = doc.repro.value
    p.append(f"{r.verdict}\n\n")
    if r.facts:
        p.append("| | |\n|---|---|\n")
        p.extend(f"| {k} | {_cell(v)} |\n" for k, v in r.facts)
        p.append("\n")
    if r.timeline:
        p.append("<details>\n<summary>Timeline (inside vLLM's scheduler)</summary>\n\n")
        p.append(_fence("\n".join(r.timeline)))
        p.append("\n</details>\n\n")
    if r.traceback:
        p.append("<details>\n<summary>Traceback of the assertion (repro)</summary>\n\n")
        p.append(_fence(r.traceback, "python"))
        p.append("\n</details>\n\n")
    if r.note:
        p.append(f"Note: {r.note}\n\n")
    return p


def _check_md(doc: ReportDoc) -> list[str]:
    p = ["#### Configuration check (pd-doctor check-config)\n\n"]
    if not doc.check_config.ok:
        p.append(f"{_cnc(doc.check_config.why)}\n\n")
        return p
    c: CheckDoc = doc.check_config.value
    exp = c.exposure
    p.append(f"Exposure to #53514: **{exp.verdict}**\n\n")
    for side in exp.sides:
        p.append(
            f"- {side.server or side.role} ({side.connector or '-'}): **{side.verdict}**"
            + (f"; {'; '.join(side.reasons)}" if side.reasons else "")
            + "\n"
        )
    if exp.sides:
        p.append("\n")
    if exp.fixes:
        p.append("Fixes: " + "; ".join(exp.fixes) + "\n\n")
    if exp.probe:
        p.append(f"Probe: {exp.probe}\n\n")
    if not c.findings:
        p.append("No findings.\n\n")
    for f in c.findings:
        p.append(f"- **{f.severity}** `{f.id}`: {f.title}\n")
        if f.evidence:
            p.append(f"  - evidence: {f.evidence}\n")
        if f.fix:
            p.append(f"  - fix: {f.fix}\n")
        if f.refs:
            p.append(f"  - refs: {', '.join(f.refs)}\n")
    if c.warnings:
        p.append("\nNot checked: " + "; ".join(c.warnings) + "\n")
    p.append("\n")
    return p


def _commands_md(doc: ReportDoc) -> list[str]:
    p = ["#### Launch commands\n\n"]
    if doc.config_file:
        p.append(f"From `{doc.config_file}` (attached as raw/config).\n\n")
    if doc.commands_error:
        p.append(f"check-config could not read them: {doc.commands_error}\n\n")
    if not doc.commands:
        if not doc.config_file:
            p.append("Not given (use --prefill-cmd/--decode-cmd or --config).\n\n")
        return p
    for c in doc.commands:
        on = f" (on `{c.machine}`)" if c.machine else ""
        who = c.role.capitalize() if c.name in ("", c.role) else f"{c.name} ({c.role})"
        p.append(f"{who}{on}:\n\n")
        p.append(_fence(c.command, "bash"))
        if c.kv_transfer_config is None:
            p.append(f"\nkv-transfer-config ({c.role}): not set on this command line\n\n")
        else:
            p.append(f"\nkv-transfer-config ({c.role}):\n\n")
            p.append(_fence(_json_compact(c.kv_transfer_config), "json"))
            p.append("\n")
    return p


def _logs_md(doc: ReportDoc) -> list[str]:
    p = ["#### Log excerpts\n\n"]
    if not doc.logs:
        p.append("No logs given (use --log FILE).\n\n")
        return p
    for lg in doc.logs:
        if not lg.ok:
            p.append(f"- `{lg.given_as}`: {_cnc(lg.why)}\n\n")
            continue
        cut = f", capped: {lg.cut_chars} characters cut" if lg.cut_chars else ""
        p.append(f"**`{lg.given_as}`** ({lg.size_bytes} bytes, attached as `raw/logs/{lg.name}`{cut})\n\n")
        if lg.signatures:
            p.extend(f"- `{k}` x{n}: {m}\n" for k, n, m in lg.signatures)
            p.append("\n")
        else:
            p.append("No known P/D failure signature in this log.\n\n")
        for e in lg.excerpts:
            why = ", ".join(e.reasons) if e.reasons else e.kind
            # no "kind: value" here: free-text secret rules read `signature: x` as a secret
            p.append(f"Lines {e.first_line}-{e.last_line} ({e.kind} excerpt; {why}):\n\n")
            p.append(_fence(e.text))
            p.append("\n")
    return p


def _verdicts_md(doc: ReportDoc) -> list[str]:
    """Triage's verdicts on the logs: the first thing a maintainer reads."""
    if not doc.verdicts:
        return []
    p = []
    for n, v in enumerate(doc.verdicts[:3], 1):
        p.append(f"**pd-doctor verdict {n} ({v.confidence}):** {v.title} (`{v.cls}`, from `{v.log}`)\n\n")
        if v.note:
            p.append(f"{v.note}\n\n")
        p.append(f"Fix: {v.fix} Next: `{v.next}`.\n\n")
        if v.evidence:
            p.append(_fence("\n".join(f"{line}: {text}" for line, text in v.evidence)))
            p.append("\n")
    return p


def render_markdown(doc: ReportDoc) -> str:
    """The report, laid out for vLLM's bug template."""
    p: list[str] = [
        f"<!-- pd-doctor {doc.pd_doctor_version} report, {doc.created}. Paste from "
        f"'Your current environment' into {BUG_TEMPLATE_URL} -->\n\n",
        f"**Suggested title:** {doc.title}\n\n",
    ]
    p.extend(_verdicts_md(doc))
    p.extend(_environment_md(doc))
    p.append("### 🐛 Describe the bug\n\n")
    p.extend(_repro_md(doc))
    p.extend(_commands_md(doc))
    p.extend(_check_md(doc))
    p.append("#### Minimal reproduction\n\n")
    for what, cmd in doc.reproduction:
        p.append(f"{what}:\n\n")
        p.append(_fence(cmd, "bash"))
        p.append("\n")
    p.extend(_logs_md(doc))
    p.append("#### About this report\n\n")
    if doc.redactions:
        p.append(
            "Redacted before writing: "
            + ", ".join(f"{n} {KIND_LABELS.get(k, k)}" for k, n in doc.redactions)
            + "."
        )
    else:
        p.append("Redacted before writing: nothing found to redact.")
    if not doc.redact_hosts:
        p.append(" Host names and IP addresses were kept (--no-redact-hosts).")
    p.append("\n\n")
    failed = [c for c in doc.collectors if not c.ok]
    if failed:
        p.append(
            "Collectors that could not collect: " + "; ".join(f"{c.name} ({c.why})" for c in failed) + ".\n\n"
        )
    p.append("Files in this bundle: " + ", ".join(f"`{f}`" for f in doc.files) + ".\n")
    return "".join(p)


def _section_obj(s: Section) -> dict[str, Any]:
    if not s.ok:
        return {"collected": False, "why": s.why}
    v = s.value
    if hasattr(v, "__dataclass_fields__"):
        v = asdict(v)
    return {"collected": True, "value": v}


def to_obj(doc: ReportDoc) -> dict[str, Any]:
    """The report as the documented JSON object (`schema_version` 1)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "pd-doctor-report",
        "title": doc.title,
        "verdicts": [asdict(v) for v in doc.verdicts],
        "pd_doctor_version": doc.pd_doctor_version,
        "created": doc.created,
        "exit_code": doc.exit_code,
        "environment": {
            "interpreter": _section_obj(doc.interpreter),
            "collect_env": _section_obj(doc.collect_env),
            "nixl": _section_obj(doc.nixl),
            "ucx": _section_obj(doc.ucx),
            "env_vars": [{"name": n, "value": v, "set_in": w} for n, v, w in doc.env_vars],
        },
        "commands": [asdict(c) for c in doc.commands],
        "commands_error": doc.commands_error,
        "config_file": doc.config_file,
        "repro": _section_obj(doc.repro),
        "check_config": _section_obj(doc.check_config),
        "reproduction": [{"what": w, "command": c} for w, c in doc.reproduction],
        "logs": [asdict(lg) for lg in doc.logs],
        "redactions": {k: n for k, n in doc.redactions},
        "redact_hosts": doc.redact_hosts,
        "collectors": [asdict(c) for c in doc.collectors],
        "files": list(doc.files),
    }


def render_json(doc: ReportDoc) -> str:
    return json.dumps(to_obj(doc), indent=2, default=str) + "\n"
