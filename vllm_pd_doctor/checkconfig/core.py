"""Put the pieces together: inputs -> CheckReport. Never imports vLLM (unless --probe runs the
in-process repro in the target interpreter, in its own process)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from vllm_pd_doctor.checkconfig import rules
from vllm_pd_doctor.checkconfig.exposure import exposure as compute_exposure
from vllm_pd_doctor.checkconfig.exposure import probe_candidates
from vllm_pd_doctor.deployment.model import resolve_model
from vllm_pd_doctor.deployment.reader import NON_ENGINE, gather_servers
from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.infra.errors import PdDoctorError
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.readers import inspect_vllm, nixl_info
from vllm_pd_doctor.results.checkconfig import (
    CheckReport,
    Exposure,
    Inputs,
    ModelInfo,
    NixlInfo,
    ProbeResult,
    VllmSource,
)
from vllm_pd_doctor.results.launch import Server


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
