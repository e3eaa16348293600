"""Exposure of the deployment's release + connector + model to the `repro --scenario` failures.

Read from knowledge/scenario_exposure (real `repro --scenario all` runs per release, never a version
list); each finding names the run that showed it and `pd-doctor repro --scenario X` as the next step.
The decode side (or any kv_consumer / kv_both connector) is the engine these scenarios kill.

With --probe (check-config runs the user's vLLM anyway), the scenarios run in that vLLM once, with
the deployment's model when it is hybrid, and the observed run wins over the recorded data, as the
#53514 probe wins over the source reading.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

from vllm_pd_doctor.checkconfig.rules.catalog import INFO, E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.context import Context, connector_entries, connector_key, label
from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx
from vllm_pd_doctor.knowledge.facts.scenario_advice import ADVICE
from vllm_pd_doctor.results.checkconfig import Finding
from vllm_pd_doctor.results.launch import Server

CONSUMING = ("kv_consumer", "kv_both")
PRODUCING = ("kv_producer", "kv_both")
RUN = ("abort-race", "hybrid-load-failure", "lease-reaper", "d-extra-block", "notify-only-failure")
"""The scenarios these rules report (n1-truncation has its own rules and probe)."""


@functools.cache
def _run(python: str, model_dir: str | None, connectors: tuple[str, ...]) -> tuple[sx.CellLike, ...]:
    """The scenarios run in the user's vLLM (one child, once per check); () when they could not run."""
    from vllm_pd_doctor.infra.errors import PdDoctorError
    from vllm_pd_doctor.repro.scenarios import run as srun

    try:
        report = srun.run_scenarios(
            python, RUN, connectors=connectors, model=Path(model_dir) if model_dir else None
        )
    except PdDoctorError:
        return ()
    return report.cells


def observed(ctx: Context) -> tuple[sx.CellLike, ...]:
    """The observed scenario cells when --probe was asked (the exposure carries a probe result)."""
    if ctx.exposure is None or ctx.exposure.probe is None or ctx.vllm is None:
        return ()
    keys = tuple(sorted({k for p in (False, True) for _, k in _sides(ctx, p)}))
    if not keys:
        return ()
    model = str(Path(ctx.model.path).resolve().parent) if ctx.model is not None and ctx.model.hybrid else None
    return _run(ctx.vllm.python, model, keys)


def _sides(ctx: Context, producing: bool = False) -> Iterator[tuple[Server, str]]:
    """(server, connector key) for every receiving (or, `producing`, sending) connector."""
    roles, side = (PRODUCING, "prefill") if producing else (CONSUMING, "decode")
    for s in ctx.servers:
        for e in connector_entries(s.config):
            key = connector_key(e.name)
            role = e.kv_role or s.config.kv_role
            if key is not None and (role in roles or (role is None and s.role == side)):
                yield s, key


def _exposed(
    ctx: Context, scenario: str, producing: bool = False
) -> list[tuple[Server, sx.ScenarioExposure]]:
    if ctx.vllm is None or not ctx.vllm.version:
        return []
    out = []
    seen = observed(ctx)
    for s, key in _sides(ctx, producing):
        x = sx.exposure(scenario, ctx.vllm.version, key, ctx.hybrid, observed=seen)
        if x.verdict == sx.EXPOSED:
            out.append((s, x))
    return out


def _evidence(ctx: Context, hits: list[tuple[Server, sx.ScenarioExposure]]) -> str:
    first = hits[0][1]
    who = ", ".join(dict.fromkeys(f"{label(s)}/{x.connector}" for s, x in hits))
    where = f"--python {ctx.vllm.python}" if ctx.vllm and first.source.startswith("observed") else ""
    nxt = f"{first.next_step} {where or '--vllm ' + first.release}"
    return f"{who}: {first.scenario} {first.reason} ({first.source}); next: {nxt}"


@rule(
    id="scenario-abort-race",
    severity=W,
    title="An aborted request whose KV receive and send finish in one step kills the decode EngineCore "
    "(`assert req_id in self.requests`)",
    fix=ADVICE["abort-race"].fix,
    refs=("vllm#46240", "vllm#48615", "vllm PR #56089", "vllm PR #46304"),
)
def abort_race(ctx: Context) -> Iterator[Finding]:
    hits = _exposed(ctx, "abort-race")
    if hits:
        yield finding("scenario-abort-race", _evidence(ctx, hits))


@rule(
    id="scenario-hybrid-load-failure",
    severity=E,
    title="A failed KV load for a hybrid model kills the decode EngineCore (`too many values to unpack` "
    "in _update_requests_with_invalid_blocks)",
    fix=ADVICE["hybrid-load-failure"].fix,
    refs=("vllm#45474", "vllm PR #50388"),
)
def hybrid_load_failure(ctx: Context) -> Iterator[Finding]:
    if ctx.hybrid is False:
        return
    hits = _exposed(ctx, "hybrid-load-failure")
    if not hits:
        return
    later = hits[0][1].holds_from
    fix = (
        (
            f"upgrade vLLM to {later} or later (the first release in pd-doctor's runs where it "
            "holds; PR #50388), or carry the backport: pd-doctor hotfix install, then "
            "PD_DOCTOR_HOTFIX=hybrid-load-failure on the decode"
        )
        if later
        else None
    )
    ev = _evidence(ctx, hits)
    if ctx.hybrid is None:
        yield finding("scenario-hybrid-load-failure", ev + " (if the model is hybrid)", severity=W, fix=fix)
    else:
        yield finding("scenario-hybrid-load-failure", ev, fix=fix)


@rule(
    id="scenario-lease-reaper",
    severity=W,
    title="Expired KV leases stay held behind a heartbeated one on the prefill (NIXL reaper stops at "
    "the first live lease)",
    fix=ADVICE["lease-reaper"].fix,
    refs=("vllm#58222", "vllm PR #50789"),
)
def lease_reaper(ctx: Context) -> Iterator[Finding]:
    hits = _exposed(ctx, "lease-reaper", producing=True)
    if hits:
        later = hits[0][1].holds_from
        fix = f"upgrade vLLM to {later} or later (the first release in pd-doctor's runs where it holds)"
        yield finding("scenario-lease-reaper", _evidence(ctx, hits), fix=fix if later else None)


@rule(
    id="scenario-d-extra-block",
    severity=INFO,
    title="A proxy that appends the prefill's first token to a block-multiple prompt kills the decode "
    "worker (D allocates one block more than P sent)",
    fix=ADVICE["d-extra-block"].fix,
    refs=("vllm PR #50558",),
)
def d_extra_block(ctx: Context) -> Iterator[Finding]:
    hits = _exposed(ctx, "d-extra-block")
    if hits:
        yield finding(
            "scenario-d-extra-block", _evidence(ctx, hits) + f" ({ADVICE['d-extra-block'].condition})"
        )


@rule(
    id="scenario-notify-only-failure",
    severity=W,
    title="A failed NIXL handshake for a decode request aborted before it was scheduled kills the decode "
    "EngineCore (`assert req_id in self.requests`, hybrid models)",
    fix=ADVICE["notify-only-failure"].fix,
    refs=("vllm PR #57570",),
)
def notify_only_failure(ctx: Context) -> Iterator[Finding]:
    if ctx.hybrid is False:
        return
    hits = _exposed(ctx, "notify-only-failure")
    if not hits:
        return
    later = hits[0][1].holds_from
    fix = (
        f"upgrade vLLM to {later} or later (the first release in pd-doctor's runs where it holds; PR #57570)"
    )
    ev = _evidence(ctx, hits) + f" ({ADVICE['notify-only-failure'].condition})"
    unsure = ctx.hybrid is None
    yield finding(
        "scenario-notify-only-failure",
        ev + (" (if the model is hybrid)" if unsure else ""),
        severity=INFO if unsure else W,
        fix=fix if later else None,
    )


@rule(
    id="scenario-exposure-unknown",
    severity=INFO,
    title="This vLLM release was not among the releases pd-doctor's scenarios ran on",
    fix="run the scenarios on it: pd-doctor repro --python YOUR_VLLM_PYTHON --scenario all",
)
def exposure_unknown(ctx: Context) -> Iterator[Finding]:
    if ctx.vllm is None or not ctx.vllm.version or not any(True for _ in _sides(ctx)):
        return
    rel = sx.base(ctx.vllm.version)
    if rel in sx.releases() or observed(ctx):
        return
    yield finding(
        "scenario-exposure-unknown",
        f"vLLM {rel}: exposure to {', '.join(sx.scenarios())} is unknown (release not run; "
        f"the data has {', '.join(sx.releases())})",
        fix=f"pd-doctor repro --python {ctx.vllm.python} --scenario all",
    )
