"""The result of `pd-doctor status`: engines as read, side-channel comparisons, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_pd_doctor.results.base import Result

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Evidence:
    """One observation behind a finding."""

    engine: str
    """The engine's role and URL (prefill http://..., decode http://...)."""
    metric: str
    """The metric (as vLLM names it), or `side channel` / `/version`."""
    value: str
    """What was seen: `+0 over 2.0 s (since start: 384)`, a label, a hash."""


@dataclass(frozen=True)
class Finding:
    """Something wrong (or worth knowing) about the running deployment."""

    id: str
    severity: str
    """error, warning or info (an error makes the exit code 1)."""
    title: str
    evidence: tuple[Evidence, ...]
    triage_class: str | None
    """The `pd-doctor triage` class this corresponds to (`triage --list`)."""
    fix: str
    next: str
    """The next pd-doctor command to run."""
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class HandshakeView:
    """An engine's NIXL handshake metadata, as its side channel served it."""

    address: str
    compatibility_hash: str | None
    metadata: dict[str, Any]
    fields: tuple[str, ...]
    error: str | None = None
    """Why the side channel could not be read (then the rest is empty)."""


@dataclass(frozen=True)
class EngineStatus:
    """One engine as read: health, release, model, what its release exposes."""

    role: str
    url: str
    health: int | None
    version: str | None
    model: str | None
    block_size: int | None
    """From `vllm:cache_config_info` (the effective size, not the flag)."""
    metrics_from: str | None
    """Where the list of metrics this release exposes came from (index release or --python)."""
    not_exposed: tuple[str, ...]
    """Metrics status reads that this release does not define (not zero: absent)."""
    handshake: HandshakeView | None
    key_values: tuple[tuple[str, str], ...] = ()
    """Figures shown in the table: metric -> `value (delta)`."""
    down: str | None = None
    """Did not answer: `hung` (no answer within the timeout), `dead` (nothing listens), `not-vllm`,
    `refused` (401/403); None: it answered both readings and was judged."""
    error: str | None = None
    """What the failed reading said (with `down`)."""


@dataclass(frozen=True)
class Comparison:
    """One handshake field of prefill vs decode."""

    field: str
    prefill: str
    decode: str
    same: bool | None
    """None: unknown (one side's value could not be read, e.g. its side channel did not answer)."""


@dataclass(frozen=True)
class StatusReport(Result):
    """What `pd-doctor status` saw in one window of `interval_s`."""

    engines: tuple[EngineStatus, ...]
    comparisons: tuple[Comparison, ...]
    findings: tuple[Finding, ...]
    interval_s: float
    elapsed_s: float
    notes: tuple[str, ...] = field(default=())
    window_s: float = 0.0
    """The window measured between the two readings (the longest engine's; --interval asked for)."""
    traffic: bool | None = None
    """Whether any engine took or finished a request in the window (None: no metric tells)."""

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @property
    def unanswered(self) -> int:
        """Engines that did not answer (hung, dead, not vLLM): exit code 3."""
        return sum(1 for e in self.engines if e.down)
