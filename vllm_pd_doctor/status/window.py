"""One engine over the scrape window: its two scrapes, its release's metric list, its handshake."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_pd_doctor.knowledge.facts import metrics as m
from vllm_pd_doctor.knowledge.facts.metrics import ReleaseMetrics
from vllm_pd_doctor.results.status import Evidence
from vllm_pd_doctor.status import scrape
from vllm_pd_doctor.status.scrape import Scrape
from vllm_pd_doctor.status.sidechannel import Handshake

WIRE_SUFFIX = {"counter": "_total", "histogram": "_count", "gauge": ""}


@dataclass
class Window:
    role: str
    """prefill or decode."""
    before: Scrape
    after: Scrape
    release: ReleaseMetrics | None
    handshake: Handshake | None = None
    side_address: str | None = None
    side_error: str | None = None
    side_frames: tuple[bytes, ...] = ()
    """The side channel's raw reply (kept for recording fixtures)."""

    @property
    def down(self) -> str | None:
        """hung, dead, not-vllm or refused: the engine did not answer a reading (None: it did)."""
        return self.before.down or self.after.down or ("dead" if self.after.error else None)

    @property
    def label(self) -> str:
        return f"{self.role} {self.after.url}"

    @property
    def interval(self) -> float:
        return max(self.after.at - self.before.at, 0.0)

    def exposes(self, name: str) -> bool | None:
        """Whether this engine's release defines `name` (None: the release is not known)."""
        if self.release is not None:
            return self.release.exposes(name)
        return None

    def wire(self, name: str, kind: str) -> str:
        return name + WIRE_SUFFIX[kind]

    def now(self, name: str, kind: str = "gauge", **labels: str) -> float | None:
        return scrape.total(self.after, self.wire(name, kind), **labels)

    def both(self, name: str, kind: str = "gauge", **labels: str) -> tuple[float, float] | None:
        a = scrape.total(self.before, self.wire(name, kind), **labels)
        b = scrape.total(self.after, self.wire(name, kind), **labels)
        return None if a is None or b is None else (a, b)

    def delta(self, name: str, kind: str = "counter", **labels: str) -> float | None:
        """after - before of a counter (or a histogram's count); None when not exposed now.
        A counter that went down (the engine restarted) counts from zero."""
        ab = self.both(name, kind, **labels)
        if ab is None:
            return None
        return ab[1] - ab[0] if ab[1] >= ab[0] else ab[1]

    def ev(self, name: str, kind: str = "counter", **labels: str) -> Evidence:
        """The evidence line of a counter: delta over the window and the total."""
        ab = self.both(name, kind, **labels)
        lab = "".join(f'{{{k}="{v}"}}' for k, v in labels.items())
        metric = self.wire(name, kind) + lab
        if ab is None:
            return Evidence(self.label, metric, self.absent(name))
        d = ab[1] - ab[0] if ab[1] >= ab[0] else ab[1]
        return Evidence(self.label, metric, f"{d:+g} over {self.interval:.1f} s (since start: {ab[1]:g})")

    def gauge_ev(self, name: str, **labels: str) -> Evidence:
        ab = self.both(name, "gauge", **labels)
        lab = "".join(f'{{{k}="{v}"}}' for k, v in labels.items())
        if ab is None:
            return Evidence(self.label, name + lab, self.absent(name))
        return Evidence(self.label, name + lab, f"{ab[0]:g} then {ab[1]:g} ({self.interval:.1f} s apart)")

    def traffic(self) -> bool | None:
        """Whether this engine took or finished a request in the window (None: no metric to tell)."""
        seen = [self.delta(m.PROMPT_TOKENS), self.delta(m.SUCCESS), self.delta(m.XFER_TIME, "histogram")]
        running = self.both(m.RUNNING)
        if running is not None:
            seen.append(max(running))
        known = [x for x in seen if x is not None]
        return any(x > 0 for x in known) if known else None

    def absent(self, name: str) -> str:
        ex = self.exposes(name)
        if ex is False and self.release is not None:
            return f"not exposed by vLLM {self.release.version}"
        return "not present in /metrics"
