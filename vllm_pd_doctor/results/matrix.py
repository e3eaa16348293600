"""What `pd-doctor matrix` and `bisect` answer: one row per release, one cell per connector, and
where the verdict changes between two releases (frozen dataclasses; the runs are `repro/matrix.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_pd_doctor.results.base import Result
from vllm_pd_doctor.results.repro import Frame

# Cell states
FIRED = "fired"
NOT_FIRED = "not_fired"
NOT_PRESENT = "not_present"
NOT_RUNNABLE = "not_runnable"

# Row states
RAN = "ran"
NOT_PUBLISHED = "not_published"
NOT_PROVISIONED = "could_not_provision"
NOT_RUN = "could_not_run"


@dataclass(frozen=True)
class MatrixCell:
    """One release x connector."""

    connector: str
    status: str
    """fired, not_fired, not_present or not_runnable."""
    hook: str | None = None
    """The hook that truncated the P-side prompt (None when nothing ran)."""
    call_site: Frame | None = None
    """Where that hook called the truncation helper (vLLM file:line)."""
    assertion_location: str | None = None
    reason: str | None = None
    """Why the connector is not runnable."""


@dataclass(frozen=True)
class ReleaseRow:
    """One release: its cells, or why it has none."""

    release: str
    status: str
    """ran, not_published, could_not_provision or could_not_run."""
    cells: tuple[MatrixCell, ...] = ()
    reason: str | None = None
    vllm_version: str | None = None
    python: str | None = None
    cached: bool | None = None
    """The environment already existed before this run."""
    provision_s: float | None = None
    repro_s: float | None = None

    def cell(self, connector: str) -> MatrixCell | None:
        return next((c for c in self.cells if c.connector == connector), None)

    @property
    def fired(self) -> bool:
        return any(c.status == FIRED for c in self.cells)


@dataclass(frozen=True)
class MatrixReport(Result):
    package: str
    rows: tuple[ReleaseRow, ...]
    connectors: tuple[str, ...]
    releases_source: str | None
    wall_s: float
    jobs: int

    @property
    def fired(self) -> bool:
        return any(r.fired for r in self.rows)

    @property
    def any_ran(self) -> bool:
        return any(r.status == RAN for r in self.rows)

    @property
    def repro_s_total(self) -> float:
        return sum(r.repro_s or 0.0 for r in self.rows)


@dataclass(frozen=True)
class BisectStep:
    release: str
    verdict: bool | None
    """True: the connector fired; None: the release could not be tested."""
    row: ReleaseRow | None = None


@dataclass(frozen=True)
class BisectResult:
    """Where the verdict changes between two releases (pure result of `bisect_releases`)."""

    candidates: tuple[str, ...]
    """The releases searched, oldest first (endpoints included)."""
    steps: tuple[BisectStep, ...]
    before: str | None
    """The newest tested release with the older endpoint's verdict."""
    after: str | None
    """The oldest tested release with the newer endpoint's verdict (the first change)."""
    untested_between: tuple[str, ...] = ()
    """Candidates between `before` and `after` that could not be tested."""
    same_verdict: bool = False
    """Both endpoints give the same verdict: there is no change to find."""
    endpoint_failed: str | None = None
    """An endpoint that could not be tested (no answer then)."""

    @property
    def outcome(self) -> str:
        """changed (the change is located), no_change (both ends agree) or endpoint_failed."""
        if self.endpoint_failed:
            return "endpoint_failed"
        return "no_change" if self.same_verdict else "changed"


@dataclass(frozen=True)
class BisectReport(Result):
    package: str
    connector: str
    good: str
    bad: str
    only_cached: bool
    result: BisectResult
    provisioned: tuple[str, ...]
    """Releases whose environment this run had to create."""
    releases_source: str | None
    wall_s: float
    rows: dict[str, ReleaseRow] = field(default_factory=dict)
