"""`pd-doctor repro` on the in-process engine: run the harness in the target vLLM, read its answer.

The harness (vllm_pd_doctor/invllm/harness.py) builds vLLM's real Scheduler with the real
connector scheduler half and KV cache manager, and observes what they do. This module only
prepares the run, starts it in the target interpreter and turns its JSON into typed results.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.infra.errors import CouldNotRun, FieldError, literal
from vllm_pd_doctor.infra.progress import Progress, phase, quiet
from vllm_pd_doctor.invllm import wire
from vllm_pd_doctor.knowledge.models import resolve as models
from vllm_pd_doctor.repro import hotfix
from vllm_pd_doctor.repro import models as defaults
from vllm_pd_doctor.repro import request as scenario
from vllm_pd_doctor.repro.request import PLATFORMS, ReproRequest
from vllm_pd_doctor.results.repro import (
    Assertion,
    ConnectorVerdict,
    Control,
    Event,
    NotAffected,
    ReproReport,
    RunError,
    ScenarioConfig,
    TriggerRun,
    Truncation,
    VllmInstall,
)

TRIGGERS = ("same-prompt", "shared-prefix", "chunked", "preempt")
"""Trigger variants (the harness's `triggers.TRIGGERS` describes each)."""


def default_model_dir() -> Path:
    """The default model (`repro/models.py`)."""
    return defaults.hybrid()


@dataclass(frozen=True)
class ReproOptions:
    """What the user asked `pd-doctor repro` for (validated)."""

    connectors: tuple[str, ...]
    """Connector keys, or ("all",)."""
    block_size: int | None = None
    """--block-size as requested; None: the platform's default (vLLM then aligns it)."""
    prompt_len: int | None = None
    """N; default blocks x W + 1 with W the effective block size."""
    mamba_cache_mode: str | None = None
    kv_role: str = "kv_producer"
    model: Path | None = None
    timeout: float = 600.0
    blocks: int | None = None
    prefix_match_unit: int | None = None
    platform: str | None = None
    """cpu or cuda; None: the target vLLM's own platform."""
    triggers: tuple[str, ...] = ("same-prompt",)
    hotfix: bool = False
    """Apply pd-doctor's #53514 backport (invllm/hotfix.py) before building the scheduler."""

    def warnings(self) -> list[str]:
        """Nothing to warn about before the run: the harness explains N against vLLM's sizes."""
        return []


def parse_connectors(value: str) -> tuple[str, ...]:
    return scenario.parse_connector_list(value)


def parse_triggers(value: str) -> tuple[str, ...]:
    names = tuple(t.strip().lower() for t in value.split(",") if t.strip())
    if "all" in names:
        return TRIGGERS
    bad = [t for t in names if t not in TRIGGERS]
    if bad or not names:
        raise FieldError(
            "trigger",
            "{flag} {value}: unknown trigger",
            value=value,
            hint=f"use one of {', '.join(TRIGGERS)}, a comma list, or all",
        )
    return tuple(dict.fromkeys(names))


def _positive(field: str, value: int | None, hint: str) -> None:
    if value is not None and value < 1:
        raise FieldError(field, "{flag} {value}: must be a positive number", value=value, hint=hint)


def make_options(
    *,
    connector: str,
    block_size: int | None,
    prompt_len: int | None,
    mamba_cache_mode: str | scenario.MambaCacheMode | None,
    kv_role: str | scenario.KvRole,
    model: Path | str | None,
    timeout: float,
    blocks: int | None = None,
    prefix_match_unit: int | None = None,
    platform: str | scenario.Platform | None = None,
    trigger: str = "same-prompt",
    hotfix: bool = False,
) -> ReproOptions:
    """`options` for a request given field by field (the report, the matrix, tests); choices
    may be given as strings or as the `scenario` enums."""
    return options(
        ReproRequest(
            connector=connector,
            block_size=block_size,
            prompt_len=prompt_len,
            mamba_cache_mode=scenario.value(mamba_cache_mode),
            kv_role=str(scenario.value(kv_role)),
            model=None if model is None else str(model),
            timeout=timeout,
            blocks=blocks,
            prefix_match_unit=prefix_match_unit,
            platform=scenario.value(platform),
            trigger=trigger,
            hotfix=hotfix,
        )
    )


def options(req: ReproRequest) -> ReproOptions:
    """The in-process run's options, checked once (a `FieldError` naming the request's field)."""
    conns = parse_connectors(req.connector)
    scenario.check_scenario(
        block_size=req.block_size,
        prompt_len=req.prompt_len,
        kv_role=req.kv_role,
        mamba_cache_mode=req.mamba_cache_mode,
    )
    _positive("blocks", req.blocks, "use e.g. {flag} 2 (N = 2 x W + 1)")
    _positive("prefix_match_unit", req.prefix_match_unit, "use e.g. {flag} 16")
    if req.prompt_len is not None and req.blocks is not None:
        raise FieldError(("prompt_len", "blocks"), "{0} and {1} both given", hint="use one of them")
    if req.platform is not None and req.platform not in PLATFORMS:
        raise FieldError(
            "platform",
            "{flag} {value}: unknown platform",
            value=req.platform,
            hint=f"use one of {', '.join(PLATFORMS)}",
        )
    if req.timeout <= 0:
        raise FieldError("timeout", "{flag} {value}: must be positive", value=req.timeout)
    return ReproOptions(
        connectors=conns,
        block_size=req.block_size,
        prompt_len=req.prompt_len,
        mamba_cache_mode=req.mamba_cache_mode,
        kv_role=req.kv_role,
        model=model_dir(req.model),
        timeout=req.timeout,
        blocks=req.blocks,
        prefix_match_unit=req.prefix_match_unit,
        platform=req.platform,
        triggers=parse_triggers(req.trigger),
        hotfix=req.hotfix,
    )


def model_dir(model: str | None) -> Path | None:
    """The directory of `--model`'s config.json (the one resolver: a directory, a config.json, a
    bundled family name or a Hugging Face id); None: the default tiny hybrid model."""
    if model is None:
        return None
    resolved = models.resolve(model)
    _check_json(resolved.config_path)
    return resolved.directory.resolve()


def _check_json(cfg: Path) -> None:
    """vLLM decides whether the model is hybrid; here only: is it a JSON object at all."""
    from vllm_pd_doctor.infra import limits

    text = limits.read_config_text(cfg, f"--model {cfg}")  # bounded, UTF-8 or BadInput
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FieldError(
            "model", "{flag} {value}: not valid JSON (" + literal(exc) + ")", value=cfg
        ) from None
    if not isinstance(data, dict) or not data.get("architectures"):
        raise FieldError(
            "model",
            "{flag} {value}: no `architectures` list in this config.json",
            value=cfg,
            hint="give a Hugging Face style config.json (vLLM picks the model class from its architectures)",
        )


def run_inprocess(python: str, opts: ReproOptions, progress: Progress = quiet) -> ReproReport:
    """Run the harness in `python` and return its typed verdicts."""
    interp = targetrun.probe_interpreter(python)
    targetrun.require_vllm(interp)
    model = opts.model or default_model_dir()
    spec = {
        "connectors": list(opts.connectors),
        "block_size": opts.block_size,
        "prompt_len": opts.prompt_len,
        "blocks": opts.blocks,
        "prefix_match_unit": opts.prefix_match_unit,
        "platform": opts.platform,
        "triggers": list(opts.triggers),
        "mamba_cache_mode": opts.mamba_cache_mode,
        "kv_role": opts.kv_role,
        "model_dir": str(model),
        "hotfix": opts.hotfix,
    }
    with phase(
        progress,
        f"running the in-process harness in {python} (vLLM "
        f"{interp.vllm_version or '?'}); importing vLLM takes a few seconds",
    ):
        run = targetrun.run_module(
            python,
            "harness",
            ["--spec", json.dumps(spec)],
            timeout=opts.timeout,
            what="the in-process harness",
        )
    report = parse_answer(cast(wire.HarnessAnswer, run.answer), python, opts)
    progress(f"harness finished in {run.wall_s:.1f} s")
    return report


def parse_answer(answer: wire.HarnessAnswer, python: str, opts: ReproOptions) -> ReproReport:
    """The harness's answer as typed results (BadInput / CouldNotRun for a failed run)."""
    err = answer.get("error")
    vinfo = answer.get("vllm") or {"version": "?", "path": "?"}
    if err:
        _raise_for(err, opts, answer)
    na = answer.get("not_affected")
    if na:
        return ReproReport(
            engine="inprocess",
            vllm=VllmInstall(version=str(vinfo["version"]), path=str(vinfo["path"]), python=python),
            results=(),
            timings={k: float(v) for k, v in (answer.get("timings") or {}).items()},
            not_affected=NotAffected.from_answer(str(na["reason"]), dict(na["evidence"] or {})),
        )
    results = tuple(_verdict(r) for r in answer.get("results", []))
    patches = hotfix.patches_by_connector(answer.get("hotfix"))  # pd-doctor hotfix (issue 13)
    if patches is not None:
        results = tuple(dataclasses.replace(r, hotfix=patches.get(r.connector, ())) for r in results)
    report = ReproReport(
        engine="inprocess",
        vllm=VllmInstall(version=str(vinfo["version"]), path=str(vinfo["path"]), python=python),
        results=results,
        available_connectors=tuple(answer.get("available_connectors", ())),
        timings={k: float(v) for k, v in (answer.get("timings") or {}).items()},
        notes=tuple(_notes(results)),
    )
    if opts.connectors != ("all",):
        failed = [r for r in results if r.error is not None]
        if failed and len(failed) == len(results):
            e = failed[0].error
            assert e is not None
            _raise_for(
                {"kind": e.kind, "stage": e.stage, "message": e.message, "traceback": e.traceback},
                opts,
                answer,
            )
    return report


def _raise_for(err: wire.Error, opts: ReproOptions, answer: wire.HarnessAnswer) -> None:
    kind = err.get("kind")
    msg = str(err.get("message", "unknown error"))
    stage = str(err.get("stage", "?"))
    version = answer.get("vllm", {"version": "?", "path": "?"})["version"]
    accepted = answer.get("mamba_cache_modes_accepted")
    if opts.mamba_cache_mode and accepted is not None and opts.mamba_cache_mode not in accepted:
        raise FieldError(
            "mamba_cache_mode",
            "{flag} {value}: vLLM " + literal(version) + " does not accept it with prefix caching",
            value=opts.mamba_cache_mode,
            hint=literal(f"use one of: {', '.join(accepted) or 'none'}"),
        )
    if opts.prefix_match_unit and answer.get("prefix_match_unit_supported") is False:
        raise FieldError(
            "prefix_match_unit",
            "{flag} {value}: vLLM " + literal(version) + " has no "
            "prefix_match_unit (its hash granularity is the block size)",
            value=opts.prefix_match_unit,
        )
    if kind == "not_servable":  # vLLM's own rules refuse the combination: nothing to reproduce
        raise CouldNotRun(msg, hint="vLLM itself refuses this model with this connector in this release")
    if kind == "no_state_group":  # never "not fired": the KV cache would lack the state the bug needs
        raise CouldNotRun(
            msg, hint="pd-doctor could not find this model's state layers; rerun with --debug and report it"
        )
    if kind == "model_import":  # the model class's module does not import: the config is fine
        raise CouldNotRun(msg, hint=err.get("hint"), detail=err.get("traceback"))
    if kind == "model_unsupported":
        hint = err.get("hint")
        raise FieldError(
            "model",
            "{flag} {value}: " + literal(msg),
            value=opts.model or default_model_dir(),
            hint=None if hint is None else literal(hint),
        )
    if stage == "build ModelConfig":
        raise FieldError(
            "model",
            "{flag} {value}: vLLM "
            + literal(f"{version} cannot read this config.json: {msg.split(' failed: ', 1)[-1]}"),
            value=opts.model or default_model_dir(),
            hint="fix the config.json (vLLM validates it with transformers)",
        )
    if kind == "no_vllm":
        raise CouldNotRun(
            f"vLLM cannot be imported in this interpreter: {msg}",
            hint="point --python at your vLLM environment's interpreter",
        )
    if kind == "connector_missing":
        raise CouldNotRun(msg, hint="use --connector all to run every connector this vLLM has")
    raise CouldNotRun(
        f"cannot drive this vLLM's internals while trying to {stage}: {msg}",
        hint="this vLLM may be too old or too new for the in-process engine; "
        "rerun with --debug and report it",
        detail=err.get("traceback"),
    )


def _notes(results: tuple[ConnectorVerdict, ...]) -> list[str]:
    notes = [f"{r.label}: {n}" for r in results for n in r.notes]
    for r in results:
        if r.transfer_library and r.transfer_library_installed is False:
            notes.append(
                f"{r.label}: the transfer library ({r.transfer_library}) is not "
                "installed; it is not needed for the scheduler half this run drives"
            )
    return notes


def _assertion(a: wire.AssertionInfo) -> Assertion:
    return Assertion(
        fired=bool(a.get("fired")),
        location=a.get("location"),
        statement=a.get("statement"),
        matches_53514=bool(a.get("matches_53514", False)),
        traceback=a.get("traceback"),
        kind=a.get("kind"),
        message=a.get("message"),
    )


def _trigger(t: wire.TriggerRun) -> TriggerRun:
    tr = Truncation.from_observed(t.get("truncation"))
    return TriggerRun(
        name=str(t["name"]),
        description=str(t.get("description", "")),
        prompt_len=int(t["prompt_len"]),
        assertion=_assertion(t["assertion"]),
        hit_tokens=t.get("hit_tokens"),
        truncation_hook=tr.hook,
        before_lookup=tr.before_lookup,
        truncations=int(t.get("truncations") or 0),
        prompt_len_after=t["prompt"]["len_after"] if "prompt" in t else None,
        scheduled_tokens=t.get("scheduled_tokens"),
        max_num_batched_tokens=t.get("max_num_batched_tokens"),
        warmup_len=t.get("warmup_len"),
        preempted_by=t.get("preempted_by"),
        events=tuple(Event.from_dict(e) for e in t.get("events", [])),
    )


def _control(c: wire.ControlRun) -> Control:
    hit = c.get("hit_tokens")
    return Control(
        prompt_len=int(c["prompt_len"]),
        assertion_fired=bool(c["assertion_fired"]),
        hit_tokens=hit,
        scheduled_tokens=int(c.get("scheduled_tokens") or 0),
        truncation_hook=str(c.get("truncation_hook") or "none"),
        label=f"control (prompt {c['prompt_len']}, hit {hit})",
        matches_53514=bool(c.get("matches_53514", False)),
        location=c.get("assertion_location"),
        statement=c.get("assertion_statement"),
    )


def _verdict(r: wire.ConnectorResult) -> ConnectorVerdict:
    key = str(r.get("connector", "?"))
    base = ConnectorVerdict(
        connector=key, label=str(r.get("connector_label", key)), kv_connector=str(r.get("kv_connector", "?"))
    )
    if "error" in r:
        e = r["error"]
        return dataclasses.replace(
            base,
            error=RunError(
                kind=str(e.get("kind")),
                stage=str(e.get("stage")),
                message=str(e.get("message")),
                traceback=e.get("traceback"),
            ),
        )
    t = r["truncation"]
    cfg = r["config"]
    lib = r.get("transfer_library")
    return dataclasses.replace(
        base,
        connector_class=r.get("connector_class"),
        connector_scheduler_class=r.get("connector_scheduler_class"),
        transfer_library=lib["module"] if lib else None,
        transfer_library_installed=lib["installed"] if lib else None,
        config=ScenarioConfig(
            block_size=int(cfg["block_size"]),
            prompt_len=int(cfg["prompt_len"]),
            mamba_cache_mode=str(cfg["mamba_cache_mode"]),
            kv_role=str(cfg["kv_role"]),
            model=str(cfg["model_dir"]),
            requested_block_size=cfg.get("requested_block_size"),
            hash_block_size=cfg.get("hash_block_size"),
            platform=cfg.get("platform"),
            max_num_batched_tokens=cfg.get("max_num_batched_tokens"),
        ),
        assertion=_assertion(r["assertion"]),
        truncation=Truncation.from_observed(t),
        hit_tokens=r["prefix_cache"].get("hit_tokens"),
        prompt_len_before=r["prompt"].get("len_before"),
        prompt_len_after=r["prompt"].get("len_after"),
        scheduled_tokens=r.get("scheduled_tokens"),
        control=_control(r["control"]),
        events=tuple(Event.from_dict(e) for e in r.get("events", [])),
        elapsed_s=r.get("elapsed_s"),
        triggers=tuple(_trigger(x) for x in r.get("triggers", [])),
        notes=tuple(str(n) for n in r.get("notes", [])),
        sizing=dict(r.get("sizing") or {}),
    )
