"""Assemble the bug-report bundle: run the collectors, redact, render, write a dir or a zip."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from vllm_pd_doctor import __version__, safeio
from vllm_pd_doctor.checkconfig.types import CheckReport, Server
from vllm_pd_doctor.formats import json as fjson
from vllm_pd_doctor.report import collect, docs, logs, render
from vllm_pd_doctor.report.collect import Collected, ReproRun
from vllm_pd_doctor.report.redact import RedactionContext, Redactor, hosts_in, secret_values

LOG_CAP = 2_000_000
"""Characters of each log kept in raw/logs/ (the cut is marked)."""


@dataclass(frozen=True)
class ReportInputs:
    python: str
    prefill_cmd: str | None = None
    decode_cmd: str | None = None
    config: Path | None = None
    model: Path | None = None
    logs: tuple[Path, ...] = ()
    repro: bool = True
    redact_hosts: bool = True
    timeout: float = 300.0
    log_cap: int = LOG_CAP
    environ: Mapping[str, str] = field(default_factory=dict)
    home: str | None = None
    redact_extra: tuple[str, ...] = ()
    """--redact-extra: site-specific regular expressions to redact everywhere."""


@dataclass(frozen=True)
class Gathered:
    """What the collectors returned, unredacted (never written as is)."""

    interpreter: Collected
    collect_env: Collected
    nixl: Collected
    ucx: Collected
    check_config: Collected
    """value: check-config's `CheckReport` (its `servers` are the parsed launch commands)."""
    repro: Collected
    """value: a `collect.ReproRun`."""
    logs: tuple[tuple[Path, Collected], ...]
    config_text: Collected | None
    """value: (text, size) of the --config file, attached as raw/config."""

    @property
    def check(self) -> CheckReport | None:
        return self.check_config.value if self.check_config.ok else None

    @property
    def servers(self) -> tuple[Server, ...]:
        return self.check.servers if self.check is not None else ()


def _given(inputs: ReportInputs) -> tuple[tuple[str, str], ...]:
    return tuple(
        (role, text)
        for role, text in (("prefill", inputs.prefill_cmd), ("decode", inputs.decode_cmd))
        if text
    )


def gather(inputs: ReportInputs, progress: Callable[[str], None]) -> Gathered:
    """Run every collector, concurrently, each with its own timeout."""
    try:
        return _gather(inputs, progress)
    except BaseException:
        collect.stop_all_children()
        raise


def _gather(inputs: ReportInputs, progress: Callable[[str], None]) -> Gathered:
    t = inputs.timeout
    pool = ThreadPoolExecutor(max_workers=6)
    try:
        interp_f = pool.submit(collect.probe, inputs.python, min(t, 60.0))
        nixl_f = pool.submit(collect.nixl_info, inputs.python, min(t, 60.0))
        ucx_f = pool.submit(collect.ucx_version, inputs.python, min(t, 20.0), inputs.environ.get("PATH", ""))
        check_f = None
        if inputs.config is not None or _given(inputs):
            progress("checking the launch commands (check-config)")
            check_f = pool.submit(
                collect.check_config,
                python=inputs.python,
                prefill_cmd=inputs.prefill_cmd,
                decode_cmd=inputs.decode_cmd,
                config=inputs.config,
                model=inputs.model,
                progress=progress,
            )
        interp = interp_f.result()
        has_vllm = bool(interp.ok and interp.value.get("vllm_path"))
        progress("running vLLM's environment collector (python -m vllm.collect_env)")
        env_f = pool.submit(collect.vllm_collect_env, inputs.python, has_vllm, t)
        repro_c: Collected
        if not inputs.repro:
            repro_c = Collected.fail("skipped (--no-repro)")
        elif not interp.ok:
            repro_c = Collected.fail(interp.why or "the interpreter did not answer")
        elif not has_vllm:
            repro_c = Collected.fail(f"no vLLM in {inputs.python}: the repro needs it")
        else:
            repro_c = collect.repro(inputs.python, inputs.model, t, progress)
        logs_c = tuple((p, collect.read_log(p)) for p in inputs.logs)
        cfg = None
        if inputs.config is not None:
            cfg = collect.read_log(inputs.config, f"--config {inputs.config}")
        check_c = (
            check_f.result()
            if check_f is not None
            else Collected.fail("no launch commands given (use --prefill-cmd/--decode-cmd or --config)")
        )
        return Gathered(
            interpreter=interp,
            collect_env=env_f.result(),
            nixl=nixl_f.result(),
            ucx=ucx_f.result(),
            check_config=check_c,
            repro=repro_c,
            logs=logs_c,
            config_text=cfg,
        )
    finally:
        # on Ctrl-C do not wait here for the children: gather() stops them by PID
        pool.shutdown(wait=False, cancel_futures=True)


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
    texts = [text for _, text in _given(inputs)]
    for srv in g.servers:
        texts.append(docs.command_line(srv.config))
        texts += [f"--host {h}" for h in (srv.config.host, srv.config.machine) if h]
        if srv.network and srv.network.startswith("host:"):
            texts.append(f"--host {srv.network.partition(':')[2]}")
    if g.config_text is not None and g.config_text.ok:
        texts.append(g.config_text.value[0])
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
    g: Gathered, red: Redactor, cap: int, files: dict[str, str]
) -> tuple[tuple[render.LogDoc, ...], set[str], list[render.VerdictDoc], str | None]:
    log_docs: list[render.LogDoc] = []
    used: set[str] = set()
    sigs: set[str] = set()
    verdicts: list[render.VerdictDoc] = []
    log_version: str | None = None
    for path, got in g.logs:
        name = _safe_name(red.file_name(path.name), used)  # no host or user in an entry name
        given = red.text(str(path))
        if not got.ok:
            log_docs.append(render.LogDoc(name=name, given_as=given, ok=False, why=red.text(got.why or "?")))
            continue
        raw, size = got.value
        # the whole text first: a multi-line secret (a key block) is seen whole, never cut
        # by an excerpt or by the cap
        text = red.text(raw)
        found = logs.find(text, name)
        sigs |= {v.cls for v in found.verdicts if v.confidence != "possible"}  # title-worthy
        verdicts.extend(_verdict_docs(found, name))
        if found.result is not None and log_version is None:
            log_version = next(
                (i.facts.vllm_version for i in found.result.inputs if i.facts.vllm_version), None
            )
        capped, cut = logs.cap(text, cap)
        files[f"raw/logs/{name}"] = capped
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
                        text="\n".join(e.lines),
                    )
                    for e in found.excerpts
                ),
            )
        )
    order = {"decisive": 0, "likely": 1, "possible": 2}
    verdicts.sort(key=lambda v: order.get(v.confidence, 3))
    return tuple(log_docs), sigs, verdicts, log_version


def _verdict_docs(found: logs.LogFindings, name: str) -> list[render.VerdictDoc]:
    return [
        render.VerdictDoc(
            cls=v.cls,
            title=v.title,
            confidence=v.confidence,
            log=name,
            evidence=tuple((e.line, e.text) for e in v.evidence),
            fix=v.fix,
            next=v.next,
            missing=v.missing,
            references=v.references,
            note=v.note,
        )
        for v in found.verdicts
    ]


def build(
    inputs: ReportInputs, g: Gathered, *, created: str | None = None
) -> tuple[render.ReportDoc, dict[str, str]]:
    """The redacted report and the bundle's files (name -> text)."""
    check = g.check
    # values of secret-named variables and flags (--api-key), redacted wherever they appear
    secrets = set(secret_values(inputs.environ))
    for srv in g.servers:
        s = srv.config
        secrets.update(secret_values(s.env))
        secrets.update(secret_values({k: v for k, v in s.values.items() if isinstance(v, str)}))
    red = Redactor(
        RedactionContext(
            home=inputs.home,
            hosts=_known_hosts(inputs, g),
            redact_hosts=inputs.redact_hosts,
            secrets=tuple(sorted(secrets)),
            extra=inputs.redact_extra,
        )
    )
    files: dict[str, str] = {}

    def sec(c: Collected) -> render.Section:
        if not c.ok:
            return render.Section(ok=False, why=red.text(c.why or "unknown reason"))
        return render.Section(ok=True, value=red.obj(c.value))

    # environment, and the launch commands as check-config parsed them
    env_vars: list[tuple[str, str, str]] = [
        (k, red.env_value(k, v), "environment") for k, v in collect.interesting_env(inputs.environ).items()
    ]
    for srv in g.servers:
        env_vars += [
            (k, red.env_value(k, v), f"{red.text(srv.name)} command")
            for k, v in collect.interesting_env(srv.config.env).items()
        ]
    commands_error = None
    if check is not None:
        commands = docs.command_docs(g.servers, red)
    else:
        commands = docs.given_commands(_given(inputs), red)
        if inputs.config is not None or commands:
            commands_error = red.text(g.check_config.why or "?")
    if g.collect_env.ok:
        files["raw/collect_env.txt"] = red.text(str(g.collect_env.value))

    # repro
    repro_doc: render.ReproDoc | None = None
    if g.repro.ok:
        run: ReproRun = g.repro.value
        repro_doc = docs.repro_doc(run.report, run.note, red)
        files["raw/repro.json"] = fjson.dumps(red.obj(fjson.repro_to_obj(run.report, as_list=False)))
        repro_sec = render.Section(ok=True, value=repro_doc)
    else:
        repro_sec = render.Section(ok=False, why=red.text(g.repro.why or "?"))

    # check-config
    if check is not None:
        files["raw/check-config.json"] = fjson.dumps(red.obj(fjson.check_obj(check)))
        check_sec = render.Section(ok=True, value=docs.check_doc(check, red))
    else:
        check_sec = render.Section(ok=False, why=red.text(g.check_config.why or "?"))
    config_name = None
    if g.config_text is not None:
        config_name = red.text(str(inputs.config))
        if g.config_text.ok:
            suffix = inputs.config.suffix if inputs.config else ""
            suffix = suffix if suffix[1:].isalnum() and suffix.isascii() else ""  # .yaml, .sh ...
            files["raw/config" + suffix] = red.text(g.config_text.value[0])

    log_docs, sigs, verdicts, log_version = _logs(g, red, inputs.log_cap, files)
    version = g.interpreter.value.get("vllm_version") if g.interpreter.ok else None
    top = verdicts[0].title if verdicts else None
    title = red.text(docs.title(log_version or version, repro_doc, check, sigs, top))
    fired = bool(repro_doc and repro_doc.reproduced) or bool(check and check.has_error)
    collectors = tuple(
        render.CollectorDoc(
            name=n, ok=c.ok, why=red.text(c.why) if c.why else None, elapsed_s=round(c.elapsed_s, 2)
        )
        for n, c in (
            ("interpreter", g.interpreter),
            ("vllm collect_env", g.collect_env),
            ("nixl packages", g.nixl),
            ("ucx_info", g.ucx),
            ("check-config", g.check_config),
            ("repro", g.repro),
            *((f"log {red.text(str(p))}", c) for p, c in g.logs),
        )
    )
    env_sec = (
        render.Section(ok=True, value=files["raw/collect_env.txt"])
        if g.collect_env.ok
        else render.Section(ok=False, why=red.text(g.collect_env.why or "?"))
    )
    names = sorted(["report.md", "report.json", *files])
    doc = render.ReportDoc(
        title=title,
        pd_doctor_version=__version__,
        created=created or time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        interpreter=sec(g.interpreter),
        collect_env=env_sec,
        nixl=sec(g.nixl),
        ucx=sec(g.ucx),
        env_vars=tuple(env_vars),
        commands=commands,
        config_file=config_name,
        repro=repro_sec,
        check_config=check_sec,
        reproduction=docs.reproduction(version, commands),
        logs=log_docs,
        redactions=(),
        redact_hosts=inputs.redact_hosts,
        collectors=collectors,
        files=tuple(names),
        exit_code=1 if fired else 0,
        commands_error=commands_error,
        verdicts=tuple(verdicts),
    )
    doc = dataclasses.replace(doc, redactions=tuple(red.summary().items()))
    # everything in doc is already redacted, value by value: report.json is written as is (a
    # text pass over JSON could only break it); report.md gets a last pass over its own prose
    files["report.md"] = red.text(render.render_markdown(doc))
    files["report.json"] = render.render_json(doc)
    return doc, files


# --- writing -------------------------------------------------------------------------------


def write(dest: Path, files: Mapping[str, str], *, force: bool = False) -> Path:
    """Write the bundle to a directory, or a .zip file when dest ends in .zip (`safeio`:
    atomically, never through a symlink, never over an existing output unless `force`)."""
    return safeio.write_bundle(dest, files, force=force)
