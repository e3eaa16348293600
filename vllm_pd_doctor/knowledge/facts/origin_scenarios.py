"""Which `pd-doctor repro --scenario` covers the code a located failure came from.

Keyed by the function of the origin (its last name, as tracebacks print it); the value is the id
of a registered repro scenario that drives that code path, derived from each registry entry's
`origins` (`knowledge/facts/scenarios.py`). An unknown-cause verdict whose origin is one of these names
the scenario as its next step; any other origin gets the report and an upstream search.
"""

from __future__ import annotations

from vllm_pd_doctor.knowledge.facts import scenarios

SCENARIOS: dict[str, str] = {f: s.id for s in scenarios.SCENARIOS.values() for f in s.origins}
"""function -> scenario id (from the registry's `origins`)."""


def scenario_for(function: str) -> scenarios.Scenario | None:
    """The scenario covering `function` (qualified or not), or None."""
    sid = SCENARIOS.get(function.rsplit(".", 1)[-1])
    return scenarios.get(sid) if sid else None
