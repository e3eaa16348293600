"""The P/D failure scenarios `pd-doctor repro --scenario` runs on vLLM's real scheduler (stdlib only).

One entry per scenario holds everything pd-doctor says about it: its stable id, what it reproduces,
its upstream references (the thread, the fix, the upstream test that shows the shape), which
connectors and models it concerns, and what an operator does about it (the side it kills, the fix,
the configuration workaround, the triage class whose next step it is, when it bites beyond release +
connector + model, the vLLM functions a located failure of it comes from). check-config and status
derive their exposure rules from these entries in one loop each; triage's origin map too.

The recipe itself is one module in the target package, `vllm_pd_doctor/invllm/scenarios/<id with
_>.py`, found by id; it runs in the target interpreter and its verdict is what vLLM itself does
there (an assertion or exception with vLLM's file:line, or an invariant observed broken), never a
version check. Which releases fail and the first release where a scenario holds come from the
recorded runs (`scenario_outcomes.json`, `scenario_exposure`), never from here: no release number
is written in an entry. The `status` of an upstream fix only words the advice.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_CONNECTORS = ("nixl", "nixl-push", "mooncake", "moriio")
DEFAULT = "n1-truncation"
DECODE, PREFILL = "decode", "prefill"
ERROR, WARNING, INFO = "error", "warning", "info"
DENSE_MODEL = "qwen3-dense"
"""The bundled family a scenario runs on when the model does not matter (every connector serves
it; the live engine makes a tiny random-weight model of it)."""


@dataclass(frozen=True)
class Reference:
    """One upstream reference: an issue/thread, a fix PR, or an upstream test."""

    kind: str
    """thread, fix or test."""
    ref: str
    """`vllm#46240`, `vllm#56089`, or the upstream test's name."""
    url: str
    status: str = ""
    """For a fix: merged / open (as of the thread's last reading)."""


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    summary: str
    """What the recipe does and what vLLM does on a release that has the bug."""
    control: str
    """What the control run does (it must never fail)."""
    references: tuple[Reference, ...]
    connectors: tuple[str, ...] = ALL_CONNECTORS
    """pd-doctor connector keys whose scheduler half the scenario runs through."""
    kv_role: str = "kv_consumer"
    """The engine role the recipe runs as."""
    model_matters: bool = False
    """The user's --model decides it (hybrid vs dense); else the bundled tiny model is used."""
    fixed_upstream: bool = False
    """An upstream fix is merged (advice wording only)."""
    live: str = ""
    """What a client does on a real P/D pair to trigger it (`repro --engine live --scenario`);
    empty: not client-triggerable (a fake clock, a failed handshake or load: in-process only)."""
    # --- what an operator does about it (check-config, status, repro's remedy) ---
    side: str = DECODE
    """The engine the failure kills (DECODE or PREFILL)."""
    rule_title: str = ""
    """The exposure finding's title (check-config `scenario-ID`, status `exposed-ID`)."""
    severity: str = WARNING
    """The exposure finding's severity where the model kind is known to be affected."""
    fix: str = ""
    """What to do, one line, no release number (the first release where it holds is the runs')."""
    workaround: str = ""
    """A configuration workaround that avoids it on an affected release (empty: none)."""
    triage_class: str | None = None
    """The triage class (triage/entries_2026.py) whose next step is this scenario, if any."""
    hybrid_only: bool = False
    """Only a hybrid (several KV cache groups) model is exposed."""
    condition: str = ""
    """When it bites beyond release + connector + model (shown beside the evidence)."""
    engine_decides: bool = True
    """The engines' own release + model decide exposure (False: a client or proxy does, which a
    running engine's metrics do not show; status leaves it to check-config)."""
    origins: tuple[str, ...] = ()
    """vLLM functions (last name, as tracebacks print it) whose located failure this scenario
    reproduces: triage names it as the next step of an unknown-cause failure there."""
    own_rules: bool = False
    """check-config and status have their own rules for it (#53514): no generated exposure rule."""

    @property
    def module(self) -> str:
        """The target module holding the recipe (`vllm_pd_doctor/invllm/scenarios/<module>.py`)."""
        return self.id.replace("-", "_")

    @property
    def next_step(self) -> str:
        """The command that reproduces it (triage's next step)."""
        return f"pd-doctor repro --scenario {self.id}"

    @property
    def rule_id(self) -> str:
        """check-config's exposure rule for it."""
        return f"scenario-{self.id}"

    @property
    def fix_refs(self) -> tuple[str, ...]:
        """`PR #50388 (merged)`: the fix references with their status."""
        return tuple(
            f"PR #{r.ref.rsplit('#', 1)[-1]} ({r.status})" for r in self.references if r.kind == "fix"
        )

    @property
    def upstream_refs(self) -> tuple[str, ...]:
        """The threads and fixes as `vllm-project/vllm#N` / `vllm-project/vllm PR #N`."""
        out = []
        for r in self.references:
            num = r.url.rstrip("/").rsplit("/", 1)[-1]
            if r.kind == "thread" and "/issues/" in r.url:
                out.append(f"vllm-project/vllm#{num}")
            elif r.kind in ("thread", "fix") and "/pull/" in r.url:
                out.append(f"vllm-project/vllm PR #{num}")
        return tuple(dict.fromkeys(out))

    @property
    def short_refs(self) -> tuple[str, ...]:
        """`vllm#46240`, `vllm PR #56089`: check-config's reference words."""
        out = []
        for r in self.references:
            num = r.url.rstrip("/").rsplit("/", 1)[-1]
            if r.kind in ("thread", "fix"):
                out.append(f"vllm#{num}" if "/issues/" in r.url else f"vllm PR #{num}")
        return tuple(dict.fromkeys(out))


def live_ids() -> tuple[str, ...]:
    """The scenarios a client can trigger on a real pair (`repro --engine live --scenario`)."""
    return tuple(s.id for s in _SCENARIOS if s.live)


def _gh(kind: str, number: int, status: str = "") -> Reference:
    what = "issues" if kind == "thread" else "pull"
    return Reference(kind, f"vllm#{number}", f"https://github.com/vllm-project/vllm/{what}/{number}", status)


def _test(path: str, name: str) -> Reference:
    return Reference("test", name, f"https://github.com/vllm-project/vllm/blob/main/{path}")


_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        id="n1-truncation",
        title="P-side N-1 truncation after the prefix-cache lookup (hybrid models)",
        summary="A P-side request (do_remote_decode) whose first N-1 tokens are cached: the connector "
        "truncates the prompt to N-1 after the local lookup, nothing is left to compute and "
        "`assert num_new_tokens > 0` in Scheduler.schedule kills the prefill EngineCore.",
        control="The same prompt one token longer (its hit stays below N-1).",
        references=(
            _gh("thread", 53514),
            _gh("fix", 53523, "merged"),
            _test("tests/v1/kv_connector/unit/test_nixl_connector_hma.py", "test_mamba_n1_p_side_truncation"),
        ),
        kv_role="kv_producer",
        model_matters=True,
        fixed_upstream=True,
        side=PREFILL,
        rule_title="The prefill side truncates hybrid prompts after the prefix-cache lookup "
        "(`assert num_new_tokens > 0` kills the prefill EngineCore)",
        severity=ERROR,
        fix="upgrade vLLM to a release whose connector truncates in on_new_request, before the "
        "prefix-cache lookup, or carry the backport",
        workaround="disable prefix caching on the prefill engine (--no-enable-prefix-caching)",
        triage_class="nixl-p-side-truncation-53514",
        hybrid_only=True,
        origins=("get_num_new_matched_tokens",),
        own_rules=True,
    ),
    Scenario(
        id="abort-race",
        title="Aborted request whose KV receive and send finish in the same step",
        summary="A D-side request waiting for remote KV is aborted (its blocks are kept for the "
        "transfer); one step's KVConnectorOutput then lists it in finished_recving and finished_sending. "
        "The first loop frees the request, the second hits `assert req_id in self.requests` in "
        "Scheduler._update_from_kv_xfer_finished and EngineCore dies.",
        control="The same aborted request with only finished_recving in the step.",
        references=(
            _gh("thread", 46240),
            _gh("thread", 48615),
            _gh("fix", 56089, "open"),
            _gh("fix", 46304, "open"),
            _test("tests/v1/core/test_scheduler.py", "test_abort_request_finished_recving"),
            Reference(
                "test",
                "test_aborted_request_both_kv_xfers_same_step",
                "https://github.com/vllm-project/vllm/pull/46304",
            ),
        ),
        live="close the connection of a D request while its KV transfer is in flight (a race: "
        "repeated a bounded number of times)",
        rule_title="An aborted request whose KV receive and send finish in one step kills the decode "
        "EngineCore (`assert req_id in self.requests`)",
        fix="no upstream fix is merged (vllm PRs #56089 and #46304 open): carry a scheduler patch that "
        "skips finished-transfer ids of already-freed requests (pd-doctor's hotfix, or prime-rl PR "
        "#2843); keep client aborts and timeouts away from requests still waiting for KV; on "
        "data-parallel decode expect one rank's death to take the pool down (sync_dp_state)",
        triage_class="kv-xfer-finished-for-freed-request",
        origins=("_update_from_kv_xfer_finished", "_update_waiting_for_remote_kv"),
    ),
    Scenario(
        id="hybrid-load-failure",
        title="Failed KV load for a hybrid model kills EngineCore",
        summary="A D-side request of a model with several KV cache groups waits for remote KV and the "
        "load fails, reported through the channel the release's KVConnectorOutput offers "
        "(failed_recving where it exists, else invalid_block_ids). Releases whose invalid-block path "
        "unpacks one group raise `ValueError: too many values to unpack` in "
        "Scheduler._update_requests_with_invalid_blocks; the fixed ones fail or recompute the request.",
        control="The same request whose load succeeds (finished_recving only).",
        references=(
            _gh("thread", 45474),
            _gh("thread", 50687),
            _gh("fix", 50388, "merged"),
            _test(
                "tests/v1/kv_connector/unit/test_kv_load_failure_recovery.py",
                "test_block_level_load_failure_fails_closed_with_multiple_groups",
            ),
        ),
        model_matters=True,
        fixed_upstream=True,
        rule_title="A failed KV load for a hybrid model kills the decode EngineCore (`too many values "
        "to unpack` in _update_requests_with_invalid_blocks)",
        severity=ERROR,
        fix="upgrade vLLM to a release with PR #50388 (then use a connector that reports a failed load "
        "per request, failed_recving: a block-level report meets a RuntimeError there), or carry its "
        "backport; kv_load_failure_policy does not avoid it (both policies run the unpack)",
        triage_class="hybrid-kv-load-failure-crash",
        hybrid_only=True,
        origins=("_update_requests_with_invalid_blocks", "_handle_invalid_blocks"),
    ),
    Scenario(
        id="lease-reaper",
        title="Expired KV leases stranded behind a heartbeated head entry (P side, NIXL worker)",
        summary="P holds three finished prefills' blocks under 30 s leases, granted in order; D heartbeats "
        "the first. Past the other two leases' expiry, the NIXL worker's get_finished must report them "
        "finished_sending. Releases whose reaper walks the lease dict from its head and stops at the "
        "first live entry (`if now < expires: break` in get_finished) leave them held for as long as "
        "the head is heartbeated; releases with _reap_expired_send_leases scan every lease. vLLM's own "
        "worker code (pull and push) runs with a fake clock and a NIXL agent stand-in (the worker's "
        "__init__ needs the NIXL library).",
        control="The same three leases with no heartbeat: every lease expires and all are reclaimed.",
        references=(
            _gh("thread", 58222),
            _gh("fix", 50789, "open"),
            _test(
                "tests/v1/kv_connector/unit/test_nixl_heartbeat.py",
                "test_reaper_reclaims_expired_leases_behind_heartbeated_head",
            ),
        ),
        connectors=("nixl", "nixl-push"),
        kv_role="kv_producer",
        side=PREFILL,
        rule_title="Expired KV leases stay held behind a heartbeated one on the prefill (the NIXL "
        "reaper stops at the first live lease)",
        fix="upgrade vLLM to a release whose NIXL worker reaps every expired lease "
        "(_reap_expired_send_leases); until then prefill KV blocks of abandoned requests stay pinned "
        "while any older lease is heartbeated",
        triage_class="kv-lease-expired",
        origins=("_reap_expired_send_leases",),
    ),
    Scenario(
        id="d-extra-block",
        title="D allocates one block more than P sent when a proxy appends the first token",
        summary="P prefills an N-token prompt, N an exact block multiple; the proxy hands D the prompt "
        "plus P's first token. D's connector asks for all N+1 tokens from P and the scheduler allocates "
        "N/bs + 1 blocks for the transfer while P sent N/bs. The NIXL worker's _apply_prefix_caching, "
        "called on those block lists as the pull worker calls it, asserts `num_local_blocks <= "
        "len(remote_group)` (`num_decode_blocks <= len(prefill_group)` in later releases) and the D worker "
        "dies; a push worker that trims inline instead never writes the extra block.",
        control="The proxy hands D the same N-token prompt P computed.",
        references=(
            Reference(
                "thread",
                "vllm#50558 (closed unmerged: no release has a fix)",
                "https://github.com/vllm-project/vllm/pull/50558",
            ),
            _test("tests/v1/kv_connector/unit/test_nixl_connector.py", "test_apply_prefix_caching_*"),
        ),
        connectors=("nixl", "nixl-push"),
        live="act as the proxy: append P's first token to an N = k x W prompt sent to D",
        rule_title="A proxy that appends the prefill's first token to a block-multiple prompt kills the "
        "decode worker (D allocates one block more than P sent)",
        severity=INFO,
        fix="no fix is merged upstream (PR #50558 closed)",
        workaround="have the proxy send decode the prompt the prefill computed (the first token as the "
        "request's first output, not appended to the prompt)",
        triage_class="decode-more-blocks-than-prefill",
        condition="only with a proxy that appends the prefill's first token to the prompt",
        engine_decides=False,
        origins=("_apply_prefix_caching",),
    ),
    Scenario(
        id="notify-only-failure",
        title="Failed handshake of a notification-only D request reported for a removed request",
        summary="A D-side request aborted before it was scheduled leaves the NIXL scheduler half a "
        "notification-only entry (no local blocks) so its worker tells P to free the blocks; the "
        "worker's background handshake with P fails. For a hybrid KV cache layout (the worker's "
        "_is_hma_required), releases whose start_load_kv records every entry in _recving_metadata "
        "report it in finished_recving and the scheduler, which "
        "already removed the request, hits `assert req_id in self.requests` in "
        "Scheduler._update_from_kv_xfer_finished; releases that record only `meta.awaiting_kvs or "
        "any(meta.local_block_ids)` drop it. vLLM's own worker start_load_kv/get_finished run "
        "with a handshake executor stand-in whose future fails (the worker's __init__ needs NIXL).",
        control="A normal remote-read request, still waiting for its KV, whose handshake fails the same "
        "way: the failed receive is reported for a request the scheduler has.",
        references=(
            Reference(
                "thread",
                "vllm#57570 (the fix PR's description)",
                "https://github.com/vllm-project/vllm/pull/57570",
            ),
            _gh("fix", 57570, "merged"),
            _test(
                "tests/v1/kv_connector/unit/test_nixl_connector.py",
                "test_nixl_connector.py handshake-failure tests (PR #57570's test name not confirmed)",
            ),
        ),
        connectors=("nixl",),
        model_matters=True,
        fixed_upstream=True,
        rule_title="A failed NIXL handshake for a decode request aborted before it was scheduled kills "
        "the decode EngineCore (`assert req_id in self.requests`, hybrid models)",
        fix="upgrade vLLM to a release with PR #57570 (the NIXL worker drops a notification-only entry "
        "whose handshake failed)",
        workaround="keep the prefill's side channel (VLLM_NIXL_SIDE_CHANNEL_PORT) reachable from every "
        "decode, so the notification handshake of an aborted request cannot fail",
        triage_class="kv-xfer-finished-for-freed-request",
        hybrid_only=True,
        condition="when a handshake with the prefill fails for a request aborted before it was scheduled",
    ),
)

SCENARIOS: dict[str, Scenario] = {s.id: s for s in _SCENARIOS}

NOT_YET: dict[str, str] = {
    "preempt-final-step": "PR #48141, replaced by PR #50297 (`requires_kv_delivery`): every release "
    "pd-doctor installs (0.27.1+) already has the fix (the scheduler reads requires_kv_delivery), so no "
    "installed release can show it failing",
    "hybrid-group-divergence": "vllm#46453 / PR #48425: every installed release (0.27.1+) already has "
    "the fix (KVCacheManager.get_computed_blocks_for_connector falls back to the reconciled boundary "
    "when a group hits deeper than full attention), so no installed release can show it failing",
}
"""Ids reserved for scenarios not (yet) reproduced, with why: `--scenario` names the reason."""


def ids() -> tuple[str, ...]:
    return tuple(SCENARIOS)


def get(scenario_id: str) -> Scenario | None:
    return SCENARIOS.get(scenario_id)


def problems() -> list[str]:
    """What registered entries lack (a fast test asserts this is empty)."""
    out: list[str] = []
    for s in _SCENARIOS:
        kinds = {r.kind for r in s.references}
        for need in ("thread", "test"):
            if need not in kinds:
                out.append(f"scenario {s.id!r}: no {need} reference")
        if not (s.title and s.summary and s.control):
            out.append(f"scenario {s.id!r}: title, summary or control is empty")
        for r in s.references:
            if not r.url.startswith("https://github.com/vllm-project/vllm/"):
                out.append(f"scenario {s.id!r}: reference {r.ref} has no upstream URL")
            if r.kind == "fix" and r.status not in ("merged", "open"):
                out.append(f"scenario {s.id!r}: fix {r.ref} has no status")
        if s.fixed_upstream != any(r.kind == "fix" and r.status == "merged" for r in s.references):
            out.append(f"scenario {s.id!r}: fixed_upstream disagrees with its fix references")
        if not s.connectors:
            out.append(f"scenario {s.id!r}: no connectors")
        if not (s.fix and s.rule_title) or s.side not in (DECODE, PREFILL):
            out.append(f"scenario {s.id!r}: no fix, rule title or side")
        if s.severity not in (ERROR, WARNING, INFO):
            out.append(f"scenario {s.id!r}: severity {s.severity!r}")
        if any(ch.isdigit() and "." in w for w in (s.summary + s.fix).split() for ch in w[:1]):
            out.append(f"scenario {s.id!r}: a release number written by hand (the runs say which fail)")
    return out


def exposure_rules() -> tuple[Scenario, ...]:
    """The scenarios check-config and status derive an exposure rule from (all but #53514's)."""
    return tuple(s for s in _SCENARIOS if not s.own_rules)
