"""Which `pd-doctor repro --scenario` covers the code a located failure came from.

Keyed by the function of the origin (its last name, as tracebacks print it); the value is the id
of a repro scenario that drives that code path. An unknown-cause verdict whose origin is one of
these names the scenario as its next step; any other origin gets the report and an upstream search.
"""

from __future__ import annotations

SCENARIOS: dict[str, str] = {
    "_update_from_kv_xfer_finished": "abort-race",
    "_update_waiting_for_remote_kv": "abort-race",
    "_update_requests_with_invalid_blocks": "kv-load-failure",
    "_handle_invalid_blocks": "kv-load-failure",
    "get_num_new_matched_tokens": "p-side-truncation",
    "update_state_after_alloc": "block-alloc-mismatch",
    "_nixl_handshake": "heterogeneous-tp",
    "_validate_remote_agent_handshake": "heterogeneous-tp",
}
"""function -> scenario id."""


def scenario_for(function: str) -> str | None:
    """The scenario covering `function` (qualified or not), or None."""
    return SCENARIOS.get(function.rsplit(".", 1)[-1])
