"""The report's content and its two renderings, Markdown and JSON (pure functions).

Everything in a `ReportDoc` is already public (`facts.Public`). The repro's `ReproReport` and
check-config's `CheckReport` are the typed results the commands return, made public with
`dataclasses.replace`, and rendered by the very formatters the commands use (`formats.emit`):
report.json's `repro` and `check_config` are what `repro --format json` / `check-config --format
json` print. The triage verdict has its place at the top of both files.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from vllm_pd_doctor.formats import OutputFormat, emit, to_dict
from vllm_pd_doctor.results.base import SCHEMA_VERSION

BUG_TEMPLATE_URL = "https://github.com/vllm-project/vllm/issues/new?template=400-bug-report.yml"


@dataclass(frozen=True)
class Section:
    """A collected value (a typed result, or plain data), or why it could not be collected."""

    ok: bool
    value: Any = None
    why: str | None = None


@dataclass(frozen=True)
class CommandDoc:
    """One launch command as check-config parsed it, public form (values of flags not known
    to be safe are placeholders)."""

    role: str
    command: str
    name: str = ""
    env: tuple[tuple[str, str], ...] = ()
    kv_transfer_config: Any = None
    source: str = "command line"
    machine: str | None = None


@dataclass(frozen=True)
class ExcerptDoc:
    kind: str
    reasons: tuple[str, ...]
    first_line: int
    last_line: int
    text: str
    origin: str | None = None
    """Where the code raised or logged it (the log's innermost frame, or its logger location), and
    the statement triage located for it (`triage: ...`)."""


@dataclass(frozen=True)
class LogDoc:
    name: str
    """The log's name in the bundle (raw/logs/<name> in a private bundle)."""
    given_as: str
    ok: bool
    why: str | None = None
    size_bytes: int = 0
    cut_chars: int = 0
    signatures: tuple[tuple[str, int, str], ...] = ()
    """(key, lines holding it, what it means)."""
    excerpts: tuple[ExcerptDoc, ...] = ()
    excerpts_omitted: int = 0
    """Excerpts left out (over the bundle's per-log excerpt budget)."""
    identities: tuple[tuple[str, str], ...] = ()
    """(what, placeholder): the NIXL compatibility hashes and engine ids the log names."""


@dataclass(frozen=True)
class CollectorDoc:
    name: str
    ok: bool
    why: str | None
    elapsed_s: float


@dataclass(frozen=True)
class ReportDoc:
    title: str
    pd_doctor_version: str
    created: str
    triage: Section
    """value: `pd-doctor triage`'s typed result over the logs (public form), first in both files;
    rendered by its formatters like repro and check-config."""
    interpreter: Section
    """value: {"python", "vllm_version"}."""
    collect_env: Section
    """value: vLLM's collector output, public form."""
    nixl: Section
    """value: {"dists": [{"name", "version"}], "plugins": [names]}."""
    ucx: Section
    env_vars: tuple[tuple[str, str, str], ...]
    """(name, value, where: environment / prefill command / decode command)."""
    commands: tuple[CommandDoc, ...]
    config_file: str | None
    repro: Section
    """value: the repro's `ReproReport`, public."""
    check_config: Section
    """value: check-config's `CheckReport`, public."""
    reproduction: tuple[tuple[str, str], ...]
    """(what it is, shell command)."""
    logs: tuple[LogDoc, ...]
    placeholders: tuple[tuple[str, int], ...]
    """Distinct values replaced, by kind (`<host-1>`, `<value-3>` ...)."""
    redact_hosts: bool
    collectors: tuple[CollectorDoc, ...]
    files: tuple[str, ...]
    exit_code: int
    private: bool = False
    """A private bundle: verbatim copies (second-line redaction only) under raw/."""
    commands_error: str | None = None
    status: Section | None = None
    """value: `status.public.snapshot` of the running engines (--prefill-url/--decode-url)."""


def _cnc(why: str | None) -> str:
    return f"could not collect: {why or 'unknown reason'}"


def _fence(text: str, lang: str = "text") -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def _cell(v: object) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _demote(md: str, levels: int = 3) -> str:
    """A command's Markdown under the report's headings (`# x` -> `#### x`)."""
    return re.sub(r"(?m)^(#{1,6}) ", lambda m: "#" * min(6, len(m.group(1)) + levels) + " ", md)


def _triage_md(doc: ReportDoc) -> list[str]:
    p = ["### Verdict\n\n"]
    t = doc.triage
    if t.ok and t.value is not None:  # triage's typed result, through its own formatter
        p.append(_demote(emit(t.value, OutputFormat.markdown)).rstrip() + "\n\n")
    else:
        p.append(f"Triage of the logs: {t.why or 'not run'}.\n\n")
    return p


def _environment_md(doc: ReportDoc) -> list[str]:
    p: list[str] = ["### Your current environment\n\n"]
    p.append("<details>\n<summary>The output of <code>python collect_env.py</code></summary>\n\n")
    p.append(_fence(str(doc.collect_env.value)) if doc.collect_env.ok else f"{_cnc(doc.collect_env.why)}\n")
    p.append("\n</details>\n\n")
    p.append("<details>\n<summary>P/D additions (pd-doctor): NIXL, UCX, environment variables</summary>\n\n")
    it = doc.interpreter
    if it.ok:
        v = it.value
        p.append(f"- Python {v.get('python')}, vLLM {v.get('vllm_version') or 'not installed'}\n")
    else:
        p.append(f"- Interpreter: {_cnc(it.why)}\n")
    if doc.nixl.ok:
        dists = doc.nixl.value.get("dists", [])
        p.append(
            "- NIXL / UCX / related distributions: "
            + (", ".join(f"`{d['name']}=={d['version']}`" for d in dists) or "none installed")
            + "\n"
        )
        plugins = doc.nixl.value.get("plugins", [])
        p.append("- NIXL plugins found: " + (", ".join(f"`{x}`" for x in plugins) or "none") + "\n")
    else:
        p.append(f"- NIXL / UCX distributions: {_cnc(doc.nixl.why)}\n")
    p.append(f"- UCX (`ucx_info -v`): {f'`{doc.ucx.value}`' if doc.ucx.ok else _cnc(doc.ucx.why)}\n")
    if doc.env_vars:
        p.append("\nUCX / NIXL / KV layout variables:\n\n| variable | value | set in |\n|---|---|---|\n")
        p.extend(f"| `{n}` | `{_cell(v)}` | {w} |\n" for n, v, w in doc.env_vars)
    else:
        p.append("- UCX / NIXL / KV layout variables: none set\n")
    p.append("\n</details>\n\n")
    return p


def _result_md(title: str, s: Section) -> list[str]:
    p = [f"#### {title}\n\n"]
    if not s.ok:
        return [*p, f"{_cnc(s.why)}\n\n"]
    return [*p, _demote(emit(s.value, OutputFormat.markdown)).rstrip() + "\n\n"]


def _commands_md(doc: ReportDoc) -> list[str]:
    p = ["#### Launch commands\n\n"]
    if doc.config_file:
        p.append(f"From `{doc.config_file}`.\n\n")
    if doc.commands_error:
        p.append(f"check-config could not read them: {doc.commands_error}\n\n")
    if not doc.commands and not doc.config_file:
        p.append("Not given (use --prefill-cmd/--decode-cmd or --config).\n\n")
    for c in doc.commands:
        on = f" (on `{c.machine}`)" if c.machine else ""
        who = c.role.capitalize() if c.name in ("", c.role) else f"{c.name} ({c.role})"
        p.append(f"{who}{on}:\n\n")
        p.append(_fence(c.command, "bash"))
        if c.kv_transfer_config is not None:
            p.append(f"\nkv-transfer-config ({c.role}):\n\n")
            p.append(_fence(json.dumps(c.kv_transfer_config, indent=2, sort_keys=True), "json"))
        p.append("\n")
    return p


def _identities_md(doc: ReportDoc) -> list[str]:
    """The logs' NIXL compatibility hashes and engine ids side by side: the values are
    placeholders, equal only where the values are equal (P's hash against D's)."""
    rows = [(lg.given_as, what, ph) for lg in doc.logs for what, ph in lg.identities]
    if not rows:
        return []
    p = [
        "#### Handshake identities\n\n",
        "Placeholders stand for the values: the same value has the same placeholder in every log.\n\n",
        "| log | what | value |\n|---|---|---|\n",
    ]
    p.extend(f"| `{g}` | {w} | `{v}` |\n" for g, w, v in rows)
    hashes = {v for _, w, v in rows if w.startswith("compatibility hash")}
    if len(hashes) > 1:
        p.append(f"\nThe logs name {len(hashes)} different compatibility hashes.\n")
    elif hashes:
        p.append("\nEvery log names the same compatibility hash.\n")
    return [*p, "\n"]


def _logs_md(doc: ReportDoc) -> list[str]:
    p = [*_identities_md(doc), "#### Log excerpts\n\n"]
    if not doc.logs:
        return [*p, "No logs given (use --log FILE).\n\n"]
    for lg in doc.logs:
        if not lg.ok:
            p.append(f"- `{lg.given_as}`: {_cnc(lg.why)}\n\n")
            continue
        where = f", attached as `raw/logs/{lg.name}`" if doc.private else ""
        p.append(f"**`{lg.given_as}`** ({lg.size_bytes} bytes{where})\n\n")
        if lg.signatures:
            p.extend(f"- `{k}` x{n}: {m}\n" for k, n, m in lg.signatures)
            p.append("\n")
        else:
            p.append("No known P/D failure signature in this log.\n\n")
        for e in lg.excerpts:
            why = ", ".join(e.reasons) if e.reasons else e.kind
            origin = f"; origin `{e.origin}`" if e.origin else ""
            p.append(f"Lines {e.first_line}-{e.last_line} ({e.kind} excerpt; {why}{origin}):\n\n")
            p.append(_fence(e.text))
            p.append("\n")
        if lg.excerpts_omitted:
            p.append(f"{lg.excerpts_omitted} more excerpts left out (over the per-log excerpt budget).\n\n")
    return p


def _about_md(doc: ReportDoc) -> list[str]:
    p = ["#### About this report\n\n"]
    if doc.private:
        p.append(
            "**PRIVATE bundle**: raw/ holds verbatim copies of the inputs (secrets, hosts and "
            "addresses redacted). Do not post it publicly; post the public bundle instead.\n\n"
        )
    else:
        p.append(
            "Public bundle: built from facts of known-safe kinds only (versions, flag names, "
            "values of non-secret flags, model architecture, verdicts, vLLM frames); every other "
            "value is a placeholder (the same value has the same placeholder throughout).\n\n"
        )
    if doc.placeholders:
        p.append("Values replaced: " + ", ".join(f"{n} {k}" for k, n in doc.placeholders) + ".")
    else:
        p.append("Values replaced: none.")
    if not doc.redact_hosts:
        p.append(" Host names and IP addresses were kept (--no-redact-hosts).")
    p.append("\n\n")
    failed = [c for c in doc.collectors if not c.ok]
    if failed:
        p.append(
            "Collectors that could not collect: " + "; ".join(f"{c.name} ({c.why})" for c in failed) + ".\n\n"
        )
    p.append("Files in this bundle: " + ", ".join(f"`{f}`" for f in doc.files) + ".\n")
    return p


def render_markdown(doc: ReportDoc) -> str:
    """The report, laid out for vLLM's bug template, the verdict first."""
    p: list[str] = [
        f"<!-- pd-doctor {doc.pd_doctor_version} report, {doc.created}. Paste from "
        f"'Your current environment' into {BUG_TEMPLATE_URL} -->\n\n",
        f"**Suggested title:** {doc.title}\n\n",
    ]
    p.extend(_triage_md(doc))
    p.extend(_environment_md(doc))
    p.append("### 🐛 Describe the bug\n\n")
    p.extend(_result_md("pd-doctor repro of vLLM #53514 (P-side N-1 truncation)", doc.repro))
    p.extend(_commands_md(doc))
    p.extend(_result_md("Configuration check (pd-doctor check-config)", doc.check_config))
    p.extend(_status_md(doc))
    p.append("#### Minimal reproduction\n\n")
    for what, cmd in doc.reproduction:
        p.append(f"{what}:\n\n")
        p.append(_fence(cmd, "bash"))
        p.append("\n")
    p.extend(_logs_md(doc))
    p.extend(_about_md(doc))
    return "".join(p)


def _status_md(doc: ReportDoc) -> list[str]:
    s = doc.status
    if s is None:
        return []
    out = ["#### Running deployment (pd-doctor status)\n\n"]
    if not s.ok or not isinstance(s.value, dict):
        return [*out, f"{_cnc(s.why)}\n\n"]
    v = s.value
    engines = ", ".join(f"{e.get('role')} vLLM {e.get('vllm_version') or '?'}" for e in v.get("engines", []))
    out.append(
        f"{'healthy' if v.get('healthy') else 'UNHEALTHY'} ({engines}; window {v.get('interval_s')} s)\n\n"
    )
    for f in v.get("findings", []):
        out.append(f"- **{f.get('severity')}** `{f.get('id')}`: {f.get('fix')} (next: `{f.get('next')}`)\n")
    return [*out, "\n"]


def result_obj(s: Section) -> dict[str, Any]:
    """A command's result as that command prints it with --format json."""
    if not s.ok:
        return {"collected": False, "why": s.why}
    return {"collected": True, "value": to_dict(s.value)}


def _section_obj(s: Section) -> dict[str, Any]:
    return {"collected": True, "value": s.value} if s.ok else {"collected": False, "why": s.why}


def to_obj(doc: ReportDoc) -> dict[str, Any]:
    """The report as the documented JSON object (`schema_version` 1), the verdict first."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "pd-doctor-report",
        "bundle": "private" if doc.private else "public",
        "triage": result_obj(doc.triage),
        "title": doc.title,
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
        "repro": result_obj(doc.repro),
        "check_config": result_obj(doc.check_config),
        "reproduction": [{"what": w, "command": c} for w, c in doc.reproduction],
        **({"status": _section_obj(doc.status)} if doc.status is not None else {}),
        "logs": [asdict(lg) for lg in doc.logs],
        "placeholders": dict(doc.placeholders),
        "redact_hosts": doc.redact_hosts,
        "collectors": [asdict(c) for c in doc.collectors],
        "files": list(doc.files),
    }


def render_json(doc: ReportDoc) -> str:
    return json.dumps(to_obj(doc), indent=2, default=str) + "\n"
