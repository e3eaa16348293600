"""Put the pieces together: inputs -> CheckReport. Never imports vLLM (unless --probe runs the
in-process repro in the target interpreter, in its own process)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from vllm_pd_doctor.checkconfig import parse, rules
from vllm_pd_doctor.checkconfig.exposure import exposure as compute_exposure
from vllm_pd_doctor.checkconfig.exposure import probe_candidates
from vllm_pd_doctor.checkconfig.parse.loader import launch_from_command
from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.infra.errors import BadInput, PdDoctorError
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.models import resolve as models
from vllm_pd_doctor.knowledge.models.info import load_model
from vllm_pd_doctor.knowledge.readers import inspect_vllm, nixl_info
from vllm_pd_doctor.knowledge.readers.serve_flags import BUILTIN, FlagTable
from vllm_pd_doctor.results.checkconfig import (
    CheckReport,
    Exposure,
    Inputs,
    ModelInfo,
    ModelProblem,
    NixlInfo,
    ProbeResult,
    VllmSource,
)
from vllm_pd_doctor.results.launch import LaunchCommand, Server


def server_from(
    cmd: LaunchCommand, name: str | None = None, *, table: FlagTable = BUILTIN, what: str | None = None
) -> Server:
    """A parsed server, keeping where the parser says it runs."""
    if what is None:
        cfg = parse.parse_launch(cmd, table=table)
    else:
        cfg = parse.parse_args(
            list(cmd.args),
            dict(cmd.env),
            role=cmd.role,
            what=what,
            machine=cmd.host,
            source=cmd.source,
            table=table,
        )
    return Server(
        name=name or cmd.name or cmd.role,
        config=cfg,
        network=cmd.network,
        network_evidence=cmd.network_evidence,
        role_source=cmd.role_source,
        launcher=cmd.launcher,
        image=cmd.image,
        phase=cmd.phase,
    )


NON_ENGINE = "not checked as a P/D engine: "


def _server_or_why(cmd: LaunchCommand, name: str, table: FlagTable) -> Server:
    """server_from, naming where a `$(VAR)` the input cannot tell comes from when it is refused."""
    try:
        return server_from(cmd, name, table=table)
    except BadInput as exc:
        hit = [(v, o) for v, o in cmd.unknowns if f"$({v})" in exc.message]
        if not hit:
            raise
        var, origin = hit[0]
        raise BadInput(
            f"{exc.message.split(': the value comes from')[0]}: $({var}) comes from {origin}, "
            "which the files do not hold",
            hint=f"give its value: --set {var}=VALUE",
        ) from None


def _unique(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        cand, i = n, 1
        while cand in out:
            cand, i = f"{n}-{i}", i + 1
        out.append(cand)
    return out


def gather_servers(
    prefill_cmd: str | None,
    decode_cmd: str | None,
    config: Path | None,
    variables: Mapping[str, str] | None = None,
    python: str | None = None,
    notes: list[str] | None = None,
) -> tuple[tuple[Server, ...], dict[str, str]]:
    """Parse every server of the deployment (any number: xPyD); returns them and the text each
    came from. A --prefill-cmd / --decode-cmd replaces the config file's server of that name.
    `notes` (when given) receives the processes that start no engine and the values the input
    cannot tell, one line each."""
    variables = variables or {}
    table = parse.for_python(python)
    others: list[str] = []
    launches = list(parse.load_config_file(config, variables=variables, others=others)) if config else []
    names = _unique([c.name or c.role for c in launches])
    servers = [_server_or_why(c, n, table) for c, n in zip(launches, names, strict=True)]
    if notes is not None:
        notes.extend(NON_ENGINE + o for o in others)
        notes.extend(
            f"{n}: $({var}) comes from {origin}: its value is not known here, left as written "
            f"(--set {var}=VALUE gives it)"
            for c, n in zip(launches, names, strict=True)
            for var, origin in c.unknowns
        )
    given = {s.name: f"{config} ({s.name})" for s in servers}
    for role, text in (("prefill", prefill_cmd), ("decode", decode_cmd)):
        if text is None:
            continue
        what = f"--{role}-cmd"
        launch = launch_from_command(text, what=what, role=role, variables=variables)
        servers = [s for s in servers if s.name != role]
        servers.append(server_from(launch, role, table=table, what=what))
        given[role] = what
    order = {"prefill": 0, "decode": 1}
    servers.sort(key=lambda s: order.get(s.role, 2))
    return tuple(servers), given


def resolve_model(
    model: Path | None, servers: tuple[Server, ...], warn: Callable[[str], None]
) -> tuple[ModelInfo | None, str | None, ModelProblem | None]:
    """--model, else the first server model found offline (dir, config.json, HF cache)."""
    if model is not None:
        found = models.resolve(str(model), what="--model")
        info = replace(load_model(found.config_path), resolved_from=found.described)
        return info, "--model" + (f" ({found.described})" if found.hf_id else ""), None
    problem: ModelProblem | None = None
    seen: set[str] = set()
    for s in servers:
        name = s.config.model
        if not name or name in seen:
            continue
        seen.add(name)
        try:
            found = models.resolve(name, what=f"{s.name} model", bundled=False)
            info = replace(
                load_model(found.config_path, what=f"{s.name} model"), resolved_from=found.described
            )
            return info, f"{s.name} command" + (f" ({found.described})" if found.hf_id else ""), None
        except models.ModelNotResolved as exc:
            hint = exc.hint or ""
            if "--model" not in hint:
                hint = (hint + "; " if hint else "") + (
                    "or pass --model DIR holding a copy of its config.json"
                )
            problem = problem or ModelProblem(given=name, message=exc.message, hint=hint)
        except BadInput as exc:
            warn(f"{s.name} model {name}: {exc.message}; hybrid or not is unknown")
            problem = problem or ModelProblem(
                given=name, message=exc.message, hint=exc.hint or "pass --model DIR"
            )
    return None, None, problem


def check(
    *,
    prefill_cmd: str | None = None,
    decode_cmd: str | None = None,
    config: Path | None = None,
    model: Path | None = None,
    python: str | None = None,
    probe: bool = False,
    import_nixl: bool = True,
    release_env: str | None = None,
    variables: Mapping[str, str] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    warn: Callable[[str], None] = lambda _: None,
) -> CheckReport:
    t0 = time.perf_counter()
    notes: list[str] = []
    servers, given = gather_servers(prefill_cmd, decode_cmd, config, variables, python, notes)
    non_engines = tuple(n.removeprefix(NON_ENGINE) for n in notes if n.startswith(NON_ENGINE))
    warnings: list[str] = []

    def _warn(msg: str) -> None:
        warnings.append(msg)
        warn(msg)

    for n in notes:
        _warn(n)

    for s in servers:
        if s.config.unknown_flags:
            _warn(f"{s.name}: unknown flag(s) {', '.join(s.config.unknown_flags)} (not checked)")
    minfo, msource, mproblem = resolve_model(model, servers, _warn)
    if mproblem is not None:
        _warn(f"{mproblem.message}; hybrid or not is unknown ({mproblem.hint})")
    interp = targetrun.resolve_python(python)
    facts = nixl_info.probe(interp, import_nixl=import_nixl)
    vsrc = inspect_vllm.read_source(interp, facts.vllm_path, facts.vllm_version)
    if vsrc.path is None and python is None:
        vsrc = _release_from_images(vsrc, servers, _warn)
    if minfo is not None and vsrc.path is not None and vsrc.error is None:
        minfo = _registry_family(minfo, interp, vsrc, progress, _warn)
    nixl = _deployment_nixl(facts.nixl, release_env, _warn)
    ctx = rules.Context(servers=servers, model=minfo, vllm=vsrc, nixl=nixl, model_problem=mproblem)
    static = compute_exposure(ctx)
    probe_result = _probe(ctx, static, interp, progress) if probe else None
    ctx = replace(ctx, exposure=compute_exposure(ctx, probe_result) if probe_result else static)
    assert ctx.exposure is not None
    findings = list(rules.run_checks(ctx))
    findings.sort(key=lambda f: (f.severity.rank, 0 if f.id.startswith("n1-") else 1))

    inputs = _inputs(servers, given, config, minfo, msource, interp, vsrc, nixl, probe, warnings, variables)
    inputs = replace(inputs, non_engines=non_engines)
    return CheckReport(
        inputs=inputs,
        exposure=ctx.exposure,
        findings=tuple(findings),
        vllm=vsrc,
        nixl=nixl,
        model=minfo,
        elapsed_s=time.perf_counter() - t0,
        servers=servers,
    )


def _deployment_nixl(
    nixl: NixlInfo | None, release_env: str | None, warn: Callable[[str], None]
) -> NixlInfo | None:
    """The NIXL packages the deployment's interpreter has; none for pd-doctor's own environment."""
    if release_env is None:
        return nixl
    warn(
        f"checked against pd-doctor's own vLLM {release_env} environment (--vllm); "
        "the deployment's NIXL packages are not checked"
    )
    return None


def _inputs(
    servers: tuple[Server, ...],
    given: Mapping[str, str],
    config: Path | None,
    minfo: ModelInfo | None,
    msource: str | None,
    interp: str,
    vsrc: VllmSource,
    nixl: NixlInfo | None,
    probe: bool,
    warnings: list[str],
    variables: Mapping[str, str] | None,
) -> Inputs:
    """What check-config read (and what it was not given), for the report's inputs section."""

    def joined(role: str) -> str | None:
        got = [given[s.name] for s in servers if s.role == role and s.name in given]
        return ", ".join(got) if got else None

    return Inputs(
        prefill=joined("prefill"),
        decode=joined("decode"),
        config_file=str(config) if config is not None else None,
        model=minfo.path if minfo else None,
        model_source=msource,
        python=interp,
        vllm_found=vsrc.path is not None,
        nixl_checked=nixl is not None and nixl.error is None,
        probe=probe,
        warnings=tuple(warnings),
        servers=tuple(
            f"{s.name} ({s.role}" + (f", from {s.role_source}" if s.role_source else "") + ")"
            for s in servers
        ),
        variables=tuple(sorted((variables or {}).items())),
    )


def _release_from_images(
    vsrc: VllmSource, servers: tuple[Server, ...], warn: Callable[[str], None]
) -> VllmSource:
    """No vLLM to read: the release the container images name (tag), as a fact without code."""
    from vllm_pd_doctor.knowledge.readers import image_release

    named = image_release.vllm_versions(servers)
    if len(named) != 1:
        return vsrc
    version, names = next(iter(named.items()))
    warn(
        f"vLLM {version} from the image tag of {', '.join(names)}; its code is not read "
        f"(give --vllm {version}: pd-doctor then reads that release)"
    )
    return replace(
        vsrc,
        version=version,
        error=f"vLLM {version} named by the image tag of {', '.join(names)}, its code not read "
        f"(give --vllm {version}, or --python of the deployment's environment)",
    )


def _registry_family(
    minfo: ModelInfo,
    python: str,
    vsrc: VllmSource,
    progress: Callable[[str], None],
    warn: Callable[[str], None],
) -> ModelInfo:
    """The model family from the installed vLLM's registry (a child of `python`; cached)."""
    from vllm_pd_doctor.knowledge.models import family as model_family

    progress(
        f"model family: asking vLLM {vsrc.version or '?'}'s model registry (cached after the first time)"
    )
    answer = model_family.ask(python, vsrc, Path(minfo.path))
    info, note = model_family.apply(minfo, answer, vsrc.version)
    if note:
        warn(f"{note}; hybrid or not from config.json: {minfo.hybrid_evidence}")
    return info


def _probe(ctx: rules.Context, static: Exposure, python: str, progress: Callable[[str], None]) -> ProbeResult:
    """The in-process repro with the settings of the sides it can decide (their connector, block
    size, mamba_cache_mode, the deployment's model); not run when the deployment itself rules
    every side out (no producer, no truncating connector, prefix caching off, not hybrid)."""
    from vllm_pd_doctor.repro import inprocess

    cands = probe_candidates(static.sides)
    if not cands:
        return ProbeResult(
            ran=False,
            reproduced=None,
            detail="not run: the deployment itself rules out every side (see why per side)",
        )
    keys = list(dict.fromkeys(x.connector for x in cands if x.connector)) or [connectors.DEFAULT_KEY]
    by_name = {s.name: s for s in ctx.servers}
    first = by_name.get(cands[0].server)
    p = first.config if first is not None else (ctx.prefills[0].config if ctx.prefills else None)
    model_dir = None
    if ctx.model is not None and ctx.model.hybrid:
        model_dir = Path(ctx.model.path).resolve().parent
    try:
        opts = inprocess.make_options(
            connector=",".join(keys),
            block_size=(p.block_size if p and p.block_size else 16),
            prompt_len=None,
            mamba_cache_mode=p.mamba_cache_mode if p else None,
            kv_role="kv_producer",
            model=model_dir,
            timeout=600.0,
        )
        report = inprocess.run_inprocess(python, opts, progress)
    except PdDoctorError as exc:
        return ProbeResult(ran=False, reproduced=None, detail=f"probe could not run: {exc.message}")
    parts = []
    for r in report.results:
        if r.error is not None:
            parts.append(f"{r.connector}: could not run ({r.error.message})")
        else:
            where = r.assertion.location if r.assertion and r.assertion.location else ""
            hook = r.truncation.hook if r.truncation else "?"
            parts.append(
                f"{r.connector}: {'REPRODUCED' if r.reproduced else 'not reproduced'}"
                f" (truncated by {hook}{', assert at ' + where if where else ''})"
            )
    ran = tuple((r.connector, bool(r.reproduced)) for r in report.results if r.error is None)
    return ProbeResult(
        ran=report.any_ran,
        reproduced=report.reproduced if report.any_ran else None,
        detail="; ".join(parts),
        per_connector=ran,
    )


__all__ = ["VllmSource", "check"]
