"""The running decode's release + model against the `repro --scenario` failures (beside #53514's).

Read from knowledge/scenario_exposure (real `repro --scenario all` runs per release), for a decode
engine whose NIXL side channel answered (the connector these runs are keyed by); the model's kind
from its config.json as `compare` reads it. Exposure is not a failure seen: a healthy engine on an
affected release gets an info finding, a hybrid model on a release whose load-failure path crashes a
warning.
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_pd_doctor.knowledge import exposure as kx
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.knowledge.facts.scenarios import PREFILL, Scenario
from vllm_pd_doctor.results.status import Evidence, Finding
from vllm_pd_doctor.status.compare import _hybrid
from vllm_pd_doctor.status.window import Window


def scenario_exposure(d: Window) -> Iterable[Finding]:
    """One finding per scenario this engine's release + model is exposed to (or one when unknown);
    each scenario on the side it kills (PREFILL_SIDE on a prefill, the others on a decode)."""
    version = d.after.version
    if not version or d.handshake is None:
        return
    rel = sx.base(version)
    model = d.after.model_root or (d.after.models[0] if d.after.models else None)
    if rel not in sx.releases():
        if d.role != "decode":
            return
        yield Finding(
            id="scenario-exposure-unknown",
            severity="info",
            title=f"vLLM {rel} was not among the releases pd-doctor's scenarios ran on",
            evidence=(Evidence(d.label, "/version", version),),
            triage_class=None,
            fix=f"run them on it: pd-doctor repro --vllm {rel} --scenario all",
            next=f"pd-doctor repro --vllm {rel} --scenario all",
        )
        return
    hybrid = _hybrid(d.after.model_root)
    for adv in known.exposure_rules():  # one loop over the registry's entries
        if (adv.side == PREFILL) != (d.role == "prefill") or not adv.engine_decides:
            continue
        # the engine answered on its NIXL side channel: the pull connector (status does not tell push);
        # the decision check-config makes for the same facts (knowledge/exposure.py)
        dec = kx.scenario(adv.id, rel, connectors.DEFAULT_KEY, None if hybrid is None else bool(hybrid))
        if dec.run is None or not (dec.verdict == kx.EXPOSED or dec.only_model_unknown):
            continue
        yield _finding(d, dec.run, adv, version, model, hybrid)


def _finding(
    d: Window, x: sx.ScenarioExposure, adv: Scenario, version: str, model: str | None, hybrid: object
) -> Finding:
    ev = [
        Evidence(d.label, "/version", version),
        Evidence(d.label, "scenario run", f"{x.scenario} {x.reason} ({x.source})"),
    ]
    severity, suffix = ("warning" if adv.side == PREFILL else "info"), ""
    if adv.hybrid_only:
        ev.append(Evidence(d.label, "/v1/models", f"{model}: {hybrid or 'config.json not readable here'}"))
        severity = "warning" if hybrid else "info"
        suffix = "" if hybrid else " if the model is hybrid"
    if adv.condition:
        suffix += f" ({adv.condition})"
    fix = sx.remedy(x.scenario, x.connector, x.release).advice(adv.fix)
    return Finding(
        id=f"exposed-{x.scenario}",
        severity=severity,
        title=f"the {d.role}'s vLLM {x.release} is exposed to the {x.scenario} scenario{suffix}",
        evidence=tuple(ev),
        triage_class=adv.triage_class,
        fix=fix,
        next=f"{x.next_step} --vllm {x.release}",
        references=adv.upstream_refs,
    )
