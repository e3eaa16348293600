"""Put the pieces together: inputs -> CheckReport. Never imports vLLM (unless --probe runs the
in-process repro in the target interpreter, in its own process)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from vllm_pd_doctor import targetrun
from vllm_pd_doctor.checkconfig import inspect_vllm, nixl_info, parse, rules
from vllm_pd_doctor.checkconfig.model_info import load_model
from vllm_pd_doctor.checkconfig.types import (
    CheckReport,
    Inputs,
    ModelInfo,
    NixlInfo,
    ProbeResult,
    ServeConfig,
    VllmSource,
)
from vllm_pd_doctor.errors import BadInput, PdDoctorError


def gather_sides(prefill_cmd: str | None, decode_cmd: str | None, config: Path | None,
                 variables: Mapping[str, str] | None = None, python: str | None = None
                 ) -> tuple[dict[str, ServeConfig], dict[str, str]]:
    """Parse the commands; returns the parsed sides and the text each came from.

    A config file may start any number of servers: the first prefill and the first decode are
    paired here (the rest are parsed, so their errors still show)."""
    sides: dict[str, ServeConfig] = {}
    given: dict[str, str] = {}
    table = parse.for_python(python)
    if config is not None:
        for launch in parse.load_config_file(config, variables=variables or {}):
            s = parse.parse_launch(launch, table=table)
            if launch.role not in sides:
                sides[launch.role] = s
                given[launch.role] = f"{config} ({launch.name or launch.role})"
    for role, text in (("prefill", prefill_cmd), ("decode", decode_cmd)):
        if text is None:
            continue
        sides[role] = parse.parse_command(text, role=role, variables=variables, table=table)
        given[role] = "--" + role + "-cmd"
    return {r: sides[r] for r in parse.ROLES if r in sides}, given


def resolve_model(model: Path | None, sides: dict[str, ServeConfig],
                  warn: Callable[[str], None]) -> tuple[ModelInfo | None, str | None]:
    if model is not None:
        return load_model(model), "--model"
    for role, s in sides.items():
        if not s.model:
            continue
        p = Path(s.model).expanduser()
        try:
            cand = p / "config.json" if p.is_dir() else p
            if cand.is_file() and cand.name.endswith(".json"):
                return load_model(p, what=f"{role} model"), f"{role} command"
        except OSError:
            continue
        except BadInput as exc:
            warn(f"{role} model {s.model}: {exc.message}; hybrid or not is unknown")
            continue
    return None, None


def check(*, prefill_cmd: str | None = None, decode_cmd: str | None = None,
          config: Path | None = None, model: Path | None = None, python: str | None = None,
          probe: bool = False, import_nixl: bool = True,
          variables: Mapping[str, str] | None = None,
          progress: Callable[[str], None] = lambda _: None,
          warn: Callable[[str], None] = lambda _: None) -> CheckReport:
    t0 = time.perf_counter()
    sides, given = gather_sides(prefill_cmd, decode_cmd, config, variables, python)
    warnings: list[str] = []

    def _warn(msg: str) -> None:
        warnings.append(msg)
        warn(msg)

    for role, s in sides.items():
        if s.unknown_flags:
            _warn(f"{role}: unknown flag(s) {', '.join(s.unknown_flags)} (not checked)")
    minfo, msource = resolve_model(model, sides, _warn)
    interp = targetrun.resolve_python(python)
    facts = nixl_info.probe(interp, import_nixl=import_nixl)
    vsrc = inspect_vllm.read_source(interp, facts.vllm_path, facts.vllm_version)
    nixl: NixlInfo | None = facts.nixl
    ctx = rules.Context(sides=sides, model=minfo, vllm=vsrc, nixl=nixl)
    probe_result = _probe(ctx, interp, progress) if probe else None
    exposure = rules.exposure(ctx, probe_result)
    findings = list(rules.run_checks(ctx))
    if exposure.verdict == "exposed":
        ev = "; ".join(f"{x.role}/{x.connector}: " + ", ".join(x.evidence or x.reasons)
                       for x in exposure.sides if x.verdict == "exposed")
        findings.insert(0, rules.finding("n1-truncation", ev, fix=" ".join(exposure.fixes)))
    elif exposure.verdict == "unknown" and sides:
        ev = "; ".join(f"{x.role}/{x.connector}: " + ", ".join(
            r for r in x.reasons if "unknown" in r or "not found" in r or "give" in r)
            for x in exposure.sides if x.verdict == "unknown")
        findings.insert(0, rules.finding("n1-truncation-unknown", ev))
    findings.sort(key=lambda f: (f.severity.rank, 0 if f.id.startswith("n1-") else 1))
    inputs = Inputs(
        prefill=given.get("prefill"), decode=given.get("decode"),
        config_file=str(config) if config is not None else None,
        model=minfo.path if minfo else None, model_source=msource, python=interp,
        vllm_found=vsrc.path is not None, nixl_checked=nixl is not None and nixl.error is None,
        probe=probe, warnings=tuple(warnings))
    return CheckReport(inputs=inputs, exposure=exposure, findings=tuple(findings), vllm=vsrc,
                       nixl=nixl, model=minfo, elapsed_s=time.perf_counter() - t0)


def _probe(ctx: rules.Context, python: str, progress: Callable[[str], None]) -> ProbeResult:
    from vllm_pd_doctor import inprocess

    keys: list[str] = []
    for s in ctx.sides.values():
        if s.kv_role in ("kv_producer", "kv_both"):
            for n in rules.connector_names(s):
                k = rules.connector_key(n)
                if k and k not in keys:
                    keys.append(k)
    keys = keys or ["nixl"]
    p = ctx.sides.get("prefill")
    model_dir = None
    if ctx.model is not None and ctx.model.hybrid:
        model_dir = Path(ctx.model.path).resolve().parent
    try:
        opts = inprocess.make_options(connector=",".join(keys),
                                      block_size=(p.block_size if p and p.block_size else 16),
                                      prompt_len=None, mamba_cache_mode=None,
                                      kv_role="kv_producer", model=model_dir, timeout=600.0)
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
            parts.append(f"{r.connector}: {'REPRODUCED' if r.reproduced else 'not reproduced'}"
                         f" (truncated by {hook}{', assert at ' + where if where else ''})")
    return ProbeResult(ran=report.any_ran, reproduced=report.reproduced if report.any_ran else None,
                       detail="; ".join(parts))


__all__ = ["VllmSource", "check"]
