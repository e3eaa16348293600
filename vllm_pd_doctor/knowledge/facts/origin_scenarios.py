"""Which `pd-doctor repro --scenario` covers the code a located failure came from.

Keyed by the function of the origin (its last name, as tracebacks print it); the value is the id
of a registered repro scenario (`knowledge/facts/scenarios.py`) that drives that code path. An
unknown-cause verdict whose origin is one of these names the scenario as its next step; any other
origin gets the report and an upstream search.
"""

from __future__ import annotations

from vllm_pd_doctor.knowledge.facts import scenarios

SCENARIOS: dict[str, str] = {
    "_update_from_kv_xfer_finished": "abort-race",
    "_update_waiting_for_remote_kv": "abort-race",
    "_update_requests_with_invalid_blocks": "hybrid-load-failure",
    "_handle_invalid_blocks": "hybrid-load-failure",
    "get_num_new_matched_tokens": "n1-truncation",
    "_reap_expired_send_leases": "lease-reaper",
    "_apply_prefix_caching": "d-extra-block",
}
"""function -> scenario id (each registered: a fast test checks)."""


def scenario_for(function: str) -> scenarios.Scenario | None:
    """The scenario covering `function` (qualified or not), or None."""
    sid = SCENARIOS.get(function.rsplit(".", 1)[-1])
    return scenarios.get(sid) if sid else None
