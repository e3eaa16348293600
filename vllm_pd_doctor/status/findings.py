"""What the metrics of one window say: each finding with its evidence, triage class, fix, next command.

Every check reads deltas over the window (counters) or both scrapes (gauges), only on the side
that exposes the metric; a metric the release does not define is named "not exposed", never 0.
Thresholds are upstream's, named where they are used (llm-d's Prometheus alert rules:
llm-d/llm-d docs/monitoring/prometheus-alerting-rules.yaml).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vllm_pd_doctor.knowledge.facts import metrics as m
from vllm_pd_doctor.results.status import Evidence, Finding
from vllm_pd_doctor.status.window import Window

LLMD = "llm-d/llm-d docs/monitoring/prometheus-alerting-rules.yaml"
NIXL_DOC = "vLLM docs/features/nixl_connector_usage.md, Metrics Reference"
KV_HIGH = 0.90
"""llm-d: `kv_cache_usage_perc > 0.90` for 10 m, warning."""
KV_CRITICAL_DECODE = 0.95
"""llm-d: decode `kv_cache_usage_perc > 0.95` for 5 m, critical."""
WAITING_HIGH = 100
"""llm-d: prefill `num_requests_waiting > 100` for 5 m."""
RUNNING_RATIO = 3.0
"""llm-d: running(prefill) / running(decode) > 3 for 10 m."""
PREEMPT_RATE = 1.0
"""llm-d: preemptions > 1/s."""
PINNED_USAGE = 0.10
"""Prefill KV usage above this with nothing running or waiting in both scrapes: blocks held for a decode."""

Check = Callable[[list[Window], list[Window]], Iterable[Finding]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def evaluate(prefill: list[Window], decode: list[Window]) -> list[Finding]:
    out: list[Finding] = []
    for fn in CHECKS:
        out.extend(fn(prefill, decode))
    return out


def _pos(x: float | None) -> bool:
    return x is not None and x > 0


@check
def not_disaggregating(prefill: list[Window], decode: list[Window]) -> Iterable[Finding]:
    """Class G: D's prompts grow, none of their tokens came over the KV transfer."""
    for d in decode:
        grew = d.delta(m.PROMPT_TOKENS)
        if not _pos(grew):
            continue
        ext = d.delta(m.PROMPT_BY_SOURCE, source="external_kv_transfer")
        if ext is None and d.exposes(m.PROMPT_BY_SOURCE) is not False:
            ext = 0.0 if d.now(m.PROMPT_BY_SOURCE, "counter") is not None else None
        hits = d.delta(m.EXT_HITS)
        if ext is None and hits is None:
            continue
        if _pos(ext) or (ext is None and _pos(hits)):
            continue
        ev = [
            d.ev(m.PROMPT_TOKENS),
            d.ev(m.PROMPT_BY_SOURCE, source="external_kv_transfer"),
            d.ev(m.EXT_HITS),
        ]
        ev += [p.ev(m.PROMPT_TOKENS) for p in prefill]
        if not any(name.startswith("vllm:nixl_") for name in _names(d)):
            ev.append(
                Evidence(d.label, "vllm:nixl_*", "no NIXL metric at all: no NIXL connector on this engine")
            )
        yield Finding(
            id="not-disaggregating",
            severity="error",
            title="decode computes every prompt itself: no prompt token came over the KV transfer",
            evidence=tuple(ev),
            triage_class="no-kv-connector",
            fix="start the decode engine with --kv-transfer-config (kv_role kv_consumer) and route every "
            "request through the prefill engine first (the proxy must pass the prefill's kv_transfer_params)",
            next="pd-doctor check-config --prefill-cmd '...' --decode-cmd '...'",
            references=("kserve/kserve#5987", "modelplaneai/modelplane#175", "llm-d/llm-d#1189"),
        )


def _names(w: Window) -> set[str]:
    return {n for n, _ in w.after.samples}


@check
def failed_transfers(prefill: list[Window], decode: list[Window]) -> Iterable[Finding]:
    for w in [*prefill, *decode]:
        for name, fid in (
            (m.FAILED, "nixl-failed-transfers"),
            (m.MOONCAKE_FAILED, "mooncake-failed-transfers"),
        ):
            d = w.delta(name)
            if not _pos(d):
                continue
            ev = [w.ev(name)]
            if name == m.FAILED:
                ev.append(w.ev(m.FAILED_NOTIF))
            yield Finding(
                id=fid,
                severity="error",
                title=f"{d:g} failed KV transfer(s) on the {w.role} engine in {w.interval:.1f} s",
                evidence=tuple(ev),
                triage_class="nixl-transfer-failed" if name == m.FAILED else "mooncake-transfer-failed",
                fix="read the engine's log around now (`pd-doctor triage`); failed notifications are already "
                "counted in the failed transfers (do not add them)",
                next=f"pd-doctor triage --{w.role}-log {w.role}.log",
                references=(NIXL_DOC,),
            )


@check
def lease_expiry(prefill: list[Window], decode: list[Window]) -> Iterable[Finding]:
    """Class D: P released blocks a decode had not read yet, in this window (a total from before
    the window is context, in `notes`, never this finding)."""
    for p in prefill:
        after = p.delta(m.AFTER_EXPIRY)
        expired = p.delta(m.EXPIRED)
        if not (_pos(after) or _pos(expired)):
            continue
        silent = _pos(after)
        readers = [d for d in decode if not any(n.startswith("vllm:nixl_") for n in _names(d))]
        ev = [p.ev(m.EXPIRED), p.ev(m.AFTER_EXPIRY)]
        ev += [Evidence(d.label, "vllm:nixl_*", "no NIXL metric: this decode never reads") for d in readers]
        fix = (
            "raise kv_lease_duration in the prefill's kv_connector_extra_config above the decode's "
            "longest wait (vLLM's default 30 s), or find why the decode is slow to read"
        )
        if readers:
            fix = (
                "start the decode with --kv-transfer-config (kv_role kv_consumer): a decode without a KV "
                "connector never reads, so every lease the prefill grants for it expires; " + fix
            )
        yield Finding(
            id="kv-lease-expired",
            severity="error",
            title=(
                f"{after:g} notification(s) after lease expiry in {p.interval:.1f} s: a decode read blocks "
                "the prefill had already released; HTTP 200 responses may carry wrong output"
                if silent
                else f"{expired:g} prefill KV lease(s) expired in {p.interval:.1f} s before the decode "
                "read them"
            ),
            evidence=tuple(ev),
            triage_class="kv-lease-expired",
            fix=fix,
            next="pd-doctor triage --prefill-log p.log --decode-log d.log",
            references=("aws-samples/aws-do-eks#84", NIXL_DOC),
        )


def history(windows: list[Window]) -> list[str]:
    """Counters that rose before this window and not in it: context, never a finding."""
    out = []
    for w in windows:
        for name, what in (
            (m.EXPIRED, "expired KV leases"),
            (m.AFTER_EXPIRY, "notifications after lease expiry"),
            (m.FAILED, "failed NIXL transfers"),
            (m.MOONCAKE_FAILED, "failed Mooncake transfers"),
        ):
            total, moved = w.now(name, "counter"), w.delta(name)
            if _pos(total) and not _pos(moved):
                out.append(f"{w.label}: {total:g} {what} since the engine started, none in this window")
    return out


@check
def stuck_fetches(prefill: list[Window], decode: list[Window]) -> Iterable[Finding]:
    """Classes D/E: requests waiting for remote KV across both scrapes while nothing moves."""
    for d in decode:
        stuck = []
        for stage in ("waiting_to_start", "in_progress"):
            ab = d.both(m.FETCH_STAGE, stage=stage)
            if ab is not None and ab[0] > 0 and ab[1] > 0:
                stuck.append(stage)
        if not stuck:
            continue
        moved = d.delta(m.XFER_TIME, "histogram")
        if _pos(moved):
            continue
        yield Finding(
            id="kv-fetch-stuck",
            severity="error",
            title=f"decode requests stuck fetching remote KV ({', '.join(stuck)}) with no transfer in "
            f"{d.interval:.1f} s",
            evidence=(*(d.gauge_ev(m.FETCH_STAGE, stage=s) for s in stuck), d.ev(m.XFER_TIME, "histogram")),
            triage_class="requests-stranded-waiting-for-kv",
            fix="check the prefill engine these requests point at (alive? side channel reachable?); a dead "
            "prefill strands its requests until the lease or the timeout",
            next="pd-doctor triage --decode-log d.log",
            references=("vllm-project/vllm#58222",),
        )


@check
def pinned_prefill_blocks(prefill: list[Window], decode: list[Window]) -> Iterable[Finding]:
    for p in prefill:
        usage = p.both(m.KV_USAGE)
        busy = [p.both(m.RUNNING), p.both(m.WAITING)]
        if usage is None or any(b is None for b in busy):
            continue
        if min(usage) <= PINNED_USAGE or any(max(b) > 0 for b in busy if b is not None):
            continue
        yield Finding(
            id="prefill-blocks-pinned",
            severity="warning",
            title=f"prefill KV cache {usage[1]:.0%} used with nothing running or waiting: blocks held for a "
            "decode that has not read them",
            evidence=(p.gauge_ev(m.KV_USAGE), p.gauge_ev(m.RUNNING), p.gauge_ev(m.WAITING)),
            triage_class="requests-stranded-waiting-for-kv",
            fix="a decode died or stopped reading; the blocks return at lease expiry (kv_lease_duration)",
            next="pd-doctor status --watch (does it drain within the lease?)",
            references=("vLLM PR #58004 (pinned-request gauges)",),
        )


@check
def preemptions_with_remote_kv(prefill: list[Window], decode: list[Window]) -> Iterable[Finding]:
    for d in decode:
        pre = d.delta(m.PREEMPTIONS)
        if not _pos(pre) or not _pos(d.delta(m.PROMPT_BY_SOURCE, source="external_kv_transfer")):
            continue
        yield Finding(
            id="preemptions-with-remote-kv",
            severity="warning",
            title=f"{pre:g} preemption(s) on the decode engine while it loads remote KV",
            evidence=(d.ev(m.PREEMPTIONS), d.ev(m.PROMPT_BY_SOURCE, source="external_kv_transfer")),
            triage_class=None,
            fix="give the decode engine more KV cache (or fewer concurrent requests): a preempted request "
            "with remote KV recomputes or re-fetches it",
            next="pd-doctor repro --trigger preempt",
            references=("vLLM PR #48141", "vLLM #49674"),
        )


@check
def saturation(prefill: list[Window], decode: list[Window]) -> Iterable[Finding]:
    """llm-d's alert thresholds, on one snapshot (its rules also need them to hold for minutes)."""
    for w in [*prefill, *decode]:
        usage = w.now(m.KV_USAGE)
        limit = KV_CRITICAL_DECODE if w.role == "decode" else KV_HIGH
        if usage is not None and usage > KV_HIGH:
            yield _sat(w, f"KV cache {usage:.0%} used (llm-d: > {limit:.0%})", [w.gauge_ev(m.KV_USAGE)])
        pre = w.delta(m.PREEMPTIONS)
        if pre is not None and w.interval > 0 and pre / w.interval > PREEMPT_RATE:
            yield _sat(
                w,
                f"{pre / w.interval:.1f} preemptions/s (llm-d: > {PREEMPT_RATE:g}/s)",
                [w.ev(m.PREEMPTIONS)],
            )
    for p in prefill:
        wait = p.now(m.WAITING)
        if wait is not None and wait > WAITING_HIGH:
            yield _sat(p, f"{wait:g} requests waiting (llm-d: > {WAITING_HIGH})", [p.gauge_ev(m.WAITING)])
    run_p = sum(p.now(m.RUNNING) or 0 for p in prefill)
    run_d = sum(d.now(m.RUNNING) or 0 for d in decode)
    if prefill and decode and run_d > 0 and run_p / run_d > RUNNING_RATIO:
        ev = [p.gauge_ev(m.RUNNING) for p in prefill] + [d.gauge_ev(m.RUNNING) for d in decode]
        yield _sat(
            prefill[0], f"running prefill/decode = {run_p / run_d:.1f} (llm-d: > {RUNNING_RATIO:g})", ev
        )


def _sat(w: Window, what: str, ev: list[Evidence]) -> Finding:
    return Finding(
        id="saturation",
        severity="warning",
        title=f"{w.role} engine saturated: {what}",
        evidence=tuple(ev),
        triage_class=None,
        fix="add capacity on this side or lower its load; llm-d's rules fire when it holds for minutes",
        next="pd-doctor status --watch",
        references=(LLMD,),
    )


@check
def unhealthy(prefill: list[Window], decode: list[Window]) -> Iterable[Finding]:
    """/health not 200 while /metrics answers: the API server is up, its engine core is not."""
    for w in [*prefill, *decode]:
        if w.after.health is None or w.after.health == 200:
            continue
        yield Finding(
            id="engine-unhealthy",
            severity="error",
            title=f"the {w.role} engine's /health answers HTTP {w.after.health}: its engine core is "
            "dead or stuck",
            evidence=(Evidence(w.label, "/health", f"HTTP {w.after.health}"),),
            triage_class=None,
            fix="read the engine's log for the fatal error (EngineDeadError and what came before it)",
            next=f"pd-doctor triage --{w.role}-log {w.role}.log",
        )
