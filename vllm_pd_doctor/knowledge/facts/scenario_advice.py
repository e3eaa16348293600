"""What an operator does about each `repro --scenario` failure: one place for the side it kills, the
fix, the triage class whose next step it is, and when it bites beyond release + connector + model.

check-config's scenario rules and status's exposure findings both read this (stdlib only). Which
releases fail comes from scenario_exposure (real runs), never from here; the references are the
scenario registry's (knowledge/facts/scenarios.py). n1-truncation (#53514) has its own rules and advice.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_pd_doctor.knowledge.facts import scenarios as known

DECODE, PREFILL = "decode", "prefill"


@dataclass(frozen=True)
class Advice:
    scenario: str
    side: str
    """The engine the failure kills (DECODE or PREFILL)."""
    fix: str
    """The operator's fix or workaround, one line."""
    triage_class: str | None
    """The triage class (triage/entries_2026.py) whose next step is this scenario, if any."""
    hybrid_only: bool = False
    """Only a hybrid (several KV cache groups) model is exposed."""
    condition: str = ""
    """When it bites beyond release + connector + model (shown beside the evidence)."""
    engine_decides: bool = True
    """The engines' own release + model decide exposure (False: a client or proxy does, which a
    running engine's metrics do not show; status leaves it to check-config's wording)."""

    @property
    def references(self) -> tuple[str, ...]:
        """The scenario's threads and fixes as `vllm-project/vllm#N` / `vllm-project/vllm PR #N`."""
        s = known.SCENARIOS[self.scenario]
        out = []
        for r in s.references:
            num = r.url.rstrip("/").rsplit("/", 1)[-1]
            if r.kind == "thread" and "/issues/" in r.url:
                out.append(f"vllm-project/vllm#{num}")
            elif r.kind in ("thread", "fix") and "/pull/" in r.url:
                out.append(f"vllm-project/vllm PR #{num}")
        return tuple(dict.fromkeys(out))


ADVICE: dict[str, Advice] = {
    a.scenario: a
    for a in (
        Advice(
            "abort-race",
            DECODE,
            "no upstream fix is merged (vllm PRs #56089 and #46304 open): carry a scheduler patch that skips "
            "finished-transfer ids of already-freed requests (pd-doctor hotfix install, then "
            "PD_DOCTOR_HOTFIX=abort-race on the decode, verified by repro --scenario abort-race --hotfix; or "
            "prime-rl PR #2843); "
            "keep client aborts and timeouts away from requests still waiting for KV; on data-parallel "
            "decode expect one rank's death to take the pool down (sync_dp_state)",
            "kv-xfer-finished-for-freed-request",
        ),
        Advice(
            "hybrid-load-failure",
            DECODE,
            "upgrade vLLM to a release with PR #50388, or carry its backport (pd-doctor hotfix install, "
            "then PD_DOCTOR_HOTFIX=hybrid-load-failure on the decode); kv_load_failure_policy does not "
            "avoid it (both policies run the unpack)",
            "hybrid-kv-load-failure-crash",
            hybrid_only=True,
        ),
        Advice(
            "lease-reaper",
            PREFILL,
            "upgrade vLLM to a release whose NIXL worker reaps every expired lease "
            "(_reap_expired_send_leases); until then prefill KV blocks of abandoned requests stay pinned "
            "while any older lease is heartbeated",
            "kv-lease-expired",
        ),
        Advice(
            "d-extra-block",
            DECODE,
            "no fix is merged upstream (PR #50558 closed): have the proxy send decode the prompt the "
            "prefill computed (the first token as the request's first output, not appended to the prompt)",
            "decode-more-blocks-than-prefill",
            condition="only with a proxy that appends the prefill's first token to the prompt",
            engine_decides=False,
        ),
        Advice(
            "notify-only-failure",
            DECODE,
            "upgrade vLLM to a release with PR #57570 (the NIXL worker drops a notification-only entry "
            "whose handshake failed); until then keep the prefill's side channel reachable from every "
            "decode, since a decode request aborted before it was scheduled then kills the decode "
            "EngineCore (`assert req_id in self.requests`)",
            "kv-xfer-finished-for-freed-request",
            hybrid_only=True,
            condition="when a handshake with the prefill fails for a request aborted before it was scheduled",
        ),
    )
}
"""Every scenario but n1-truncation (a fast test asserts the two registries agree)."""


def get(scenario: str) -> Advice | None:
    return ADVICE.get(scenario)
