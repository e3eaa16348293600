"""Assemble the bug-report bundle: run the collectors, redact, render, write a dir or a zip."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vllm_pd_doctor import __version__
from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.infra import safeio
from vllm_pd_doctor.report import collect, docs, facts, identity, logs, render, standalone
from vllm_pd_doctor.report.collect import Collected, ReproRun
from vllm_pd_doctor.report.facts import Public
from vllm_pd_doctor.report.gather import Gathered as Gathered
from vllm_pd_doctor.report.gather import ReportInputs as ReportInputs
from vllm_pd_doctor.report.gather import gather as gather
from vllm_pd_doctor.report.gather import given
from vllm_pd_doctor.report.redact import RedactionContext, Redactor, hosts_in, is_secret_name, secret_values
from vllm_pd_doctor.results.checkconfig import CheckReport

HOST_SCAN = 100_000
"""Characters at each end of a log searched for host names given by context (start-up lines
name the hosts; the crash is at the end)."""

MAX_LOG_HOSTS = 200
"""Host names taken from the logs into the redactor's known hosts (one regular expression of
them all: its compile time grows with their number). `SafeText` replaces unknown words anyway."""

EXCERPT_CHARS = 200_000
"""Characters of excerpts kept per log (redacted one by one; the rest are counted as left out)."""


# --- turning what was gathered into the (redacted) report --------------------------------------


def _known_hosts(inputs: ReportInputs, g: Gathered) -> tuple[str, ...]:
    hosts: set[str] = set()
    for h in (socket.gethostname(), inputs.environ.get("HOSTNAME", "")):
        if h:
            hosts.add(h)
    try:
        hosts.add(socket.getfqdn())
    except OSError:
        pass
    texts = [text for _, text in given(inputs)]
    for srv in g.servers:
        texts.append(docs.command_line(srv.config))
        texts += [f"--host {h}" for h in (srv.config.host, srv.config.machine) if h]
        if srv.network and srv.network.startswith("host:"):
            texts.append(f"--host {srv.network.partition(':')[2]}")
    if g.config_text is not None and g.config_text.ok:
        texts.append(g.config_text.value[0])
    from_logs: set[str] = set()
    for _, got in g.logs:  # a host named in a log's start-up or crash, redacted everywhere
        if got.ok:
            log = got.value[0]
            for part in [log] if len(log) <= 2 * HOST_SCAN else [log[:HOST_SCAN], log[-HOST_SCAN:]]:
                from_logs |= hosts_in(part)
    hosts.update(sorted(from_logs)[:MAX_LOG_HOSTS])
    texts += [
        f"{k}={v}"
        for k, v in inputs.environ.items()
        if any(w in k.upper() for w in ("HOST", "ADDR", "_IP", "MASTER", "NODE"))
    ]
    for text in texts:
        hosts |= hosts_in(text)
    return tuple(sorted(hosts))


def _safe_name(name: str, used: set[str]) -> str:
    """A file name safe in a zip / a directory, unique among `used` (give it redacted)."""
    base = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".") or "log"
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{n}-{base}"
    used.add(name)
    return name


def _logs(
    g: Gathered, pub: Public, cap: int, files: dict[str, str], private: bool
) -> tuple[tuple[render.LogDoc, ...], set[str]]:
    """Per log: its signatures and excerpts, public form; in a private bundle also its copy
    (second-line redaction only) under raw/logs/."""
    log_docs: list[render.LogDoc] = []
    used: set[str] = set()
    sigs: set[str] = set()
    red = pub.red
    for i, (path, got) in enumerate(g.logs, 1):
        name = _safe_name(red.file_name(pub.renamed(path.name)), used) if private else f"log-{i}"
        given = (
            pub.text(str(path))
            if private
            else f"log {i} ({pub.safe.rename.get(path.name) or pub.text(path.name)})"
        )
        if not got.ok:
            log_docs.append(render.LogDoc(name=name, given_as=given, ok=False, why=pub.text(got.why or "?")))
            continue
        raw, size = got.value
        # triage reads the log as written; only what the bundle includes is redacted (the
        # excerpts, with their real line numbers; a key block cut by an excerpt is still caught
        # by the redactor's body-line rule), so the cost is the excerpts', not the log's
        found = logs.find(raw)
        sigs |= {v.cls for v in found.verdicts if v.confidence != "possible"}  # title-worthy
        kept, omitted = _budget(found.excerpts, EXCERPT_CHARS)
        cut = 0
        if private:
            capped, cut = logs.cap(raw, cap)
            files[f"raw/logs/{name}"] = red.text(capped)
        log_docs.append(
            render.LogDoc(
                name=name,
                given_as=given,
                ok=True,
                size_bytes=size,
                cut_chars=cut,
                signatures=tuple((k, n, logs.signature_meaning(k)) for k, n in found.signatures),
                excerpts=tuple(
                    render.ExcerptDoc(
                        kind=e.kind,
                        reasons=e.reasons,
                        first_line=e.first_line,
                        last_line=e.last_line,
                        text=pub.text("\n".join(e.lines)),
                        origin=pub.text(e.origin) if e.origin else None,
                    )
                    for e in kept
                ),
                excerpts_omitted=omitted,
                identities=tuple((w, pub.text(v)) for w, v in logs.identities(raw)),
            )
        )
    return tuple(log_docs), sigs


def _budget(excerpts: tuple[logs.Excerpt, ...], limit: int) -> tuple[tuple[logs.Excerpt, ...], int]:
    """At most `limit` characters of excerpts (each is redacted: this bounds the cost): those
    holding a triage verdict's evidence first, then the others from both ends of the log
    inward (the first failure and the last crash). Returns them in line order, and how many
    were left out."""

    def size(e: logs.Excerpt) -> int:
        return sum(len(x) + 1 for x in e.lines)

    rest = [e for e in excerpts if not (set(e.reasons) - {"dump_input", "context"})]
    order = [e for e in excerpts if set(e.reasons) - {"dump_input", "context"}]
    while rest:
        order.append(rest.pop(0))
        if rest:
            order.append(rest.pop())
    kept: list[logs.Excerpt] = []
    used = 0
    for e in order:
        n = size(e)
        if used + n > limit and kept:
            continue
        kept.append(e)
        used += n
    kept.sort(key=lambda e: e.first_line)
    return tuple(kept), len(excerpts) - len(kept)


def _redactor(inputs: ReportInputs, g: Gathered) -> Redactor:
    # values of secret-named variables and flags (--api-key), redacted wherever they appear
    secrets = set(secret_values(inputs.environ))
    for srv in g.servers:
        s = srv.config
        secrets.update(secret_values(s.env))
        secrets.update(secret_values({k: v for k, v in s.values.items() if isinstance(v, str)}))
        for k, v in s.values.items():
            if isinstance(v, (list, tuple)) and is_secret_name(k):
                secrets.update(x for x in v if isinstance(x, str) and len(x) >= 4)
    return Redactor(
        RedactionContext(
            home=inputs.home,
            hosts=_known_hosts(inputs, g),
            redact_hosts=inputs.redact_hosts,
            secrets=tuple(sorted(secrets)),
            extra=inputs.redact_extra,
        )
    )


def _environment(inputs: ReportInputs, g: Gathered, pub: Public) -> dict[str, Any]:
    """The environment sections, public form: versions, package names, variable values."""
    it = g.interpreter
    interp = (
        render.Section(
            ok=True, value={"python": it.value.get("python"), "vllm_version": it.value.get("vllm_version")}
        )
        if it.ok
        else render.Section(ok=False, why=pub.text(it.why or "?"))
    )
    if g.nixl.ok:
        v = g.nixl.value
        nixl = render.Section(
            ok=True,
            value={
                "dists": [
                    {"name": pub.text(d["name"]), "version": pub.text(d["version"])}
                    for d in v.get("dists", [])
                ],
                "plugins": [pub.text(p["name"]) for p in v.get("plugins", [])],
            },
        )
    else:
        nixl = render.Section(ok=False, why=pub.text(g.nixl.why or "?"))
    ucx = (
        render.Section(ok=True, value=pub.text((str(g.ucx.value).strip().splitlines() or [""])[0]))
        if g.ucx.ok
        else render.Section(ok=False, why=pub.text(g.ucx.why or "?"))
    )
    cenv = (
        render.Section(ok=True, value=pub.text(str(g.collect_env.value)))
        if g.collect_env.ok
        else render.Section(ok=False, why=pub.text(g.collect_env.why or "?"))
    )
    env_vars = [
        (k, pub.named(k, v), "environment") for k, v in collect.interesting_env(inputs.environ).items()
    ]
    for srv in g.servers:
        env_vars += [
            (k, pub.named(k, v), f"{pub.text(srv.name)} command")
            for k, v in collect.interesting_env(srv.config.env).items()
        ]
    return {"interpreter": interp, "nixl": nixl, "ucx": ucx, "collect_env": cenv, "env_vars": tuple(env_vars)}


def _private_files(inputs: ReportInputs, g: Gathered, pub: Public, files: dict[str, str]) -> None:
    """Verbatim copies (second-line redaction only, the inputs' file names in their public
    form): the private bundle's raw/."""
    red, rn = pub.red, pub.renamed
    if g.collect_env.ok:
        files["raw/collect_env.txt"] = red.text(str(g.collect_env.value))
    if g.repro.ok:
        files["raw/repro.json"] = red.json_text(rn(emit(g.repro.value.report, OutputFormat.json)))
    if g.check is not None:
        files["raw/check-config.json"] = red.json_text(rn(emit(g.check, OutputFormat.json)))
    if g.config_text is not None and g.config_text.ok:
        suffix = inputs.config.suffix if inputs.config else ""
        suffix = suffix if suffix[1:].isalnum() and suffix.isascii() else ""  # .yaml, .sh ...
        files["raw/config" + suffix] = red.text(g.config_text.value[0])


def _triage_next(g: Gathered) -> str | None:
    """The next command of triage's best verdict over the logs, if any."""
    tri = g.triage.value if g.triage.ok else None
    return tri.verdicts[0].next if tri is not None and tri.verdicts else None


def _status_section(inputs: ReportInputs, g: Gathered, pub: Public) -> render.Section | None:
    """The status snapshot (already public by construction: safe kinds only), when engines were given."""
    if not (inputs.prefill_urls or inputs.decode_urls):
        return None
    if g.status.ok:
        return render.Section(ok=True, value=g.status.value)
    return render.Section(ok=False, why=pub.text(g.status.why or "?"))


def _section(c: Collected, pub: Public, typed: Callable[[Any], Any]) -> render.Section:
    """A collector's typed result (public form), or why there is none."""
    if c.ok:
        return render.Section(ok=True, value=pub.typed(typed(c.value)))
    return render.Section(ok=False, why=pub.text(c.why or "?"))


def _collectors(g: Gathered, pub: Public) -> tuple[render.CollectorDoc, ...]:
    return tuple(
        render.CollectorDoc(
            name=n, ok=c.ok, why=pub.text(c.why) if c.why else None, elapsed_s=round(c.elapsed_s, 2)
        )
        for n, c in (
            ("interpreter", g.interpreter),
            ("vllm collect_env", g.collect_env),
            ("nixl packages", g.nixl),
            ("ucx_info", g.ucx),
            ("check-config", g.check_config),
            ("repro", g.repro),
            *((f"log {i}", c) for i, (_, c) in enumerate(g.logs, 1)),
        )
    )


def _commands(
    inputs: ReportInputs, g: Gathered, pub: Public
) -> tuple[tuple[render.CommandDoc, ...], str | None]:
    """The launch commands as the report shows them, and why they could not be checked (if so)."""
    if g.check is not None:
        return docs.command_docs(g.servers, pub), None
    commands = docs.given_commands(given(inputs), pub)
    if inputs.config is not None or commands:
        return commands, pub.text(g.check_config.why or "?")
    return commands, None


def _title(
    g: Gathered,
    pub: Public,
    version: str | None,
    run: ReproRun | None,
    check: CheckReport | None,
    sigs: set[str],
) -> str:
    """The report's title: the triage's top verdict, on the log's release (else the interpreter's)."""
    tri = g.triage.value if g.triage.ok else None
    top = pub.text(tri.verdicts[0].title) if tri is not None and tri.verdicts else None
    log_version = (
        next((i.facts.vllm_version for i in tri.inputs if i.facts.vllm_version), None) if tri else None
    )
    on = pub.text(log_version) if log_version else version  # the log's release names the title
    return docs.title(on, run.report if run else None, check, sigs, top)


def build(
    inputs: ReportInputs, g: Gathered, *, created: str | None = None
) -> tuple[render.ReportDoc, dict[str, str]]:
    """The report and the bundle's files (name -> text): public by construction; with
    `inputs.private` also verbatim copies (second-line redaction) under raw/."""
    check = g.check
    red = _redactor(inputs, g)
    red_version = g.interpreter.value.get("vllm_version") if g.interpreter.ok else None
    vllm_dir = g.interpreter.value.get("vllm_path") if g.interpreter.ok else None
    pub = Public(red, facts.safe_flags(vllm_dir))
    identity.prepare(pub.safe, inputs, g)
    version = pub.text(str(red_version)) if red_version else None
    files: dict[str, str] = {}
    env = _environment(inputs, g, pub)
    commands, commands_error = _commands(inputs, g, pub)
    run: ReproRun | None = g.repro.value if g.repro.ok else None
    repro_sec = _section(g.repro, pub, lambda v: v.report)
    check_sec = _section(g.check_config, pub, lambda v: v)
    config_name = _config_name(inputs, g, pub)
    log_docs, sigs = _logs(g, pub, inputs.log_cap, files, inputs.private)
    if inputs.private:
        _private_files(inputs, g, pub, files)
    files.update(standalone.files(inputs.model, run.options if run else None, version, pub))
    title = _title(g, pub, version, run, check_sec.value if check else None, sigs)
    fired = docs.fired(run.report if run else None) or bool(check and check.has_error)
    doc = render.ReportDoc(
        title=title,
        pd_doctor_version=__version__,
        created=created or time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        triage=_triage_section(g, pub),
        commands=commands,
        config_file=config_name,
        repro=repro_sec,
        check_config=check_sec,
        reproduction=docs.reproduction(
            version,
            commands,
            any(f.startswith("repro/") for f in files),
            docs.scenario_of(_triage_next(g)),
        ),
        logs=log_docs,
        placeholders=(),
        redact_hosts=inputs.redact_hosts,
        collectors=_collectors(g, pub),
        files=tuple(sorted(["report.md", "report.json", *files])),
        exit_code=1 if fired else 0,
        private=inputs.private,
        commands_error=commands_error,
        status=_status_section(inputs, g, pub),
        **env,
    )
    # rendering adds no data of its own, so the placeholders are all known once the doc is built
    doc = dataclasses.replace(doc, placeholders=tuple(red.ph.counts().items()))
    files["report.md"] = render.render_markdown(doc)
    files["report.json"] = render.render_json(doc)
    return doc, files


def _config_name(inputs: ReportInputs, g: Gathered, pub: Public) -> str | None:
    """The config file's name as the public bundle writes it (None: no config was read)."""
    if g.config_text is None or not inputs.config:
        return None
    return pub.safe.rename.get(inputs.config.name) or pub.text(inputs.config.name)


def _triage_section(g: Gathered, pub: Public) -> render.Section:
    """Triage's verdict: the catalogue's words as written, the logs' words public (report/logs.py)."""
    if g.triage.ok:
        return render.Section(ok=True, value=logs.public_triage(g.triage.value, pub.text))
    return _section(g.triage, pub, lambda v: v)


# --- writing -------------------------------------------------------------------------------


def write(dest: Path, files: Mapping[str, str], *, force: bool = False) -> Path:
    """Write the bundle to a directory, or a .zip file when dest ends in .zip (`safeio`:
    atomically, never through a symlink, never over an existing output unless `force`)."""
    return safeio.write_bundle(dest, files, force=force)
