"""Exposure of the deployment's release + connector + model to the `repro --scenario` failures.

Read from knowledge/scenario_exposure (real `repro --scenario all` runs per release, never a version
list); each finding names the run that showed it, `pd-doctor repro --scenario X` as the next step,
and the remedy (the first release where the runs hold, the hotfix, the workaround). One rule per
scenario registry entry (`knowledge/facts/scenarios.py`), made in one loop: the entry's side picks the
connectors (decode: kv_consumer / kv_both; prefill: kv_producer / kv_both).

With --probe (check-config runs the user's vLLM anyway), the scenarios run in that vLLM once, with
the deployment's model when it is hybrid, and the observed run wins over the recorded data, as the
#53514 probe wins over the source reading.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

from vllm_pd_doctor.checkconfig.rules.catalog import INFO, Check, E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.context import Context, connector_entries, connector_key, label
from vllm_pd_doctor.knowledge import exposure as kx
from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.results.checkconfig import Finding, Severity
from vllm_pd_doctor.results.launch import Server

CONSUMING = ("kv_consumer", "kv_both")
PRODUCING = ("kv_producer", "kv_both")
RUN = tuple(s.id for s in known.exposure_rules())
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
        # the decision status makes for the same facts (knowledge/exposure.py)
        dec = kx.scenario(scenario, ctx.vllm.version, key, ctx.hybrid, observed=seen)
        if dec.run is not None and (dec.verdict == kx.EXPOSED or dec.only_model_unknown):
            out.append((s, dec.run))
    return out


def _evidence(ctx: Context, hits: list[tuple[Server, sx.ScenarioExposure]]) -> str:
    first = hits[0][1]
    who = ", ".join(dict.fromkeys(f"{label(s)}/{x.connector}" for s, x in hits))
    where = f"--python {ctx.vllm.python}" if ctx.vllm and first.source.startswith("observed") else ""
    nxt = f"{first.next_step} {where or '--vllm ' + first.release}"
    return f"{who}: {first.scenario} {first.reason} ({first.source}); next: {nxt}"


STEP_DOWN = {E: W, W: INFO, INFO: INFO}
"""A hybrid-only scenario's severity when the model's kind is not known."""


def _fix(ctx: Context, s: known.Scenario, x: sx.ScenarioExposure) -> str:
    """The remedy of the first exposed side, every kind that exists (upgrade target from the runs)."""
    python = ctx.vllm.python if ctx.vllm is not None else "PYTHON"
    return sx.remedy(s.id, x.connector, x.release).advice(s.fix, python)


def _check(s: known.Scenario) -> Check:
    """The exposure check of one registry entry: its side's connectors on this release (and model)."""
    severity = Severity(s.severity)

    def check(ctx: Context) -> Iterator[Finding]:
        if s.hybrid_only and ctx.hybrid is False:
            return
        hits = _exposed(ctx, s.id, producing=s.side == known.PREFILL)
        if not hits:
            return
        ev = _evidence(ctx, hits) + (f" ({s.condition})" if s.condition else "")
        unsure = s.hybrid_only and ctx.hybrid is None
        yield finding(
            s.rule_id,
            ev + (" (if the model is hybrid)" if unsure else ""),
            severity=STEP_DOWN[severity] if unsure else severity,
            fix=_fix(ctx, s, hits[0][1]),
        )

    check.__name__ = s.module
    return check


for _s in known.exposure_rules():  # one rule per registry entry (#53514's own are in release/hybrid)
    rule(id=_s.rule_id, severity=Severity(_s.severity), title=_s.rule_title, fix=_s.fix, refs=_s.short_refs)(
        _check(_s)
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
