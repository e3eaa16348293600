"""The one exposure decision: is this release + connector + model exposed to #53514 or a scenario?

check-config (from a launch) and status (from running engines) gather different facts but decide
with this module, so the same facts give the same verdict. Each fact is a condition the failure
needs: `holds` True (it does), False (it does not: that alone rules exposure out) or None (not
known). The release's own behaviour is read, in this order, from its source (the NIXL connector's
truncation site, read with `ast` by the caller), else pd-doctor's recorded runs of that release
(`scenario_outcomes.json`, an observed run of the user's vLLM first), else it stays unknown; the
model and connector facts decide on their own when they rule exposure out: a model without state
(no mamba/linear-attention layer) is not exposed to a failure that needs one, whatever the
connector (a vendor plugin included). Stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx
from vllm_pd_doctor.knowledge.facts import scenarios as known

EXPOSED, NOT_EXPOSED, UNKNOWN = sx.EXPOSED, sx.NOT_EXPOSED, sx.UNKNOWN
N1 = "n1-truncation"
"""#53514's scenario id (knowledge/facts/scenarios.py DEFAULT)."""

CONNECTOR, PRODUCER, MODEL, PREFIX_CACHING, RELEASE = (
    "connector",
    "producer",
    "model",
    "prefix_caching",
    "release",
)
SOURCE, RECORDED, OBSERVED = "release source", "recorded run", "observed run"


@dataclass(frozen=True)
class Fact:
    """One condition the failure needs, as known."""

    topic: str
    """connector, producer, model, prefix_caching or release."""
    holds: bool | None
    reason: str
    decided_by: str = ""
    """For the release: `release source`, `recorded run` or `observed run` (empty: not known)."""


@dataclass(frozen=True)
class Decision:
    verdict: str
    """exposed, not_exposed or unknown."""
    facts: tuple[Fact, ...]
    run: sx.ScenarioExposure | None = None
    """The recorded (or observed) run behind the release fact, when it came from one."""

    @property
    def deciding(self) -> tuple[Fact, ...]:
        """The facts that decided: those ruling it out (not exposed), those not known (unknown),
        every fact (exposed)."""
        if self.verdict == NOT_EXPOSED:
            return tuple(f for f in self.facts if f.holds is False)
        if self.verdict == UNKNOWN:
            return tuple(f for f in self.facts if f.holds is None)
        return self.facts

    @property
    def only_model_unknown(self) -> bool:
        """Unknown only because the model's kind could not be read (exposed if it is hybrid)."""
        return self.verdict == UNKNOWN and {f.topic for f in self.deciding} == {MODEL}


def decide(facts: Iterable[Fact], run: sx.ScenarioExposure | None = None) -> Decision:
    """Any fact that does not hold rules exposure out; else any unknown leaves it unknown."""
    fs = tuple(facts)
    if any(f.holds is False for f in fs):
        return Decision(NOT_EXPOSED, fs, run)
    if any(f.holds is None for f in fs):
        return Decision(UNKNOWN, fs, run)
    return Decision(EXPOSED, fs, run)


def needs_state(scenario: str) -> bool:
    """Only a model with state layers (several KV cache groups) can hit it."""
    return scenario == N1 or (known.get(scenario) is not None and known.SCENARIOS[scenario].hybrid_only)


def model_fact(hybrid: bool | None, evidence: str = "") -> Fact:
    if hybrid is None:
        return Fact(MODEL, None, "model hybrid or not: unknown" + (f" ({evidence})" if evidence else ""))
    if hybrid:
        return Fact(MODEL, True, "model is hybrid" + (f" ({evidence})" if evidence else ""))
    return Fact(MODEL, False, "model has no state layer (pure attention): nothing to truncate for")


def release_fact(
    scenario: str,
    release: str | None,
    connector: str | None,
    *,
    late: bool | None = None,
    source_detail: str = "",
    observed: Iterable[sx.CellLike] = (),
) -> tuple[Fact, sx.ScenarioExposure | None]:
    """The release's behaviour: its source (`late`, #53514 only) > an observed run > pd-doctor's
    recorded runs of that release (for `connector`, pd-doctor's key) > unknown."""
    if late is not None:
        return Fact(RELEASE, late, source_detail, SOURCE), None
    if not release:
        return Fact(RELEASE, None, "vLLM release: not known"), None
    if connector is None:
        return Fact(RELEASE, None, f"vLLM {release}: the connector's behaviour is not known"), None
    # the model kind is its own fact: the runs are asked about the release (hybrid=None)
    x = sx.exposure(scenario, release, connector, None, observed=observed)
    by = OBSERVED if x.source.startswith("observed") else RECORDED
    holds = {EXPOSED: True, NOT_EXPOSED: False}.get(x.verdict)
    text = f"vLLM {x.release} + {connector}: {x.reason}" + (f" ({x.source})" if x.source else "")
    return Fact(RELEASE, holds, text, by if holds is not None else ""), x


def scenario(
    scenario_id: str,
    release: str | None,
    connector: str | None,
    hybrid: bool | None,
    *,
    hybrid_evidence: str = "",
    extra: Sequence[Fact] = (),
    late: bool | None = None,
    source_detail: str = "",
    observed: Iterable[sx.CellLike] = (),
) -> Decision:
    """Exposure of a release + connector (pd-doctor's key; None: not known, e.g. a vendor plugin)
    + model kind to a scenario (#53514 is `N1`), with the deployment's own `extra` facts
    (producer, prefix caching) where the caller has them."""
    facts = list(extra)
    if needs_state(scenario_id):
        facts.append(model_fact(hybrid, hybrid_evidence))
    rel, run = release_fact(
        scenario_id, release, connector, late=late, source_detail=source_detail, observed=observed
    )
    facts.append(rel)
    return decide(facts, run)
