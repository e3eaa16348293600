"""The typed results of `repro --scenario` and `matrix --scenario` (frozen; formats read them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_pd_doctor.knowledge.facts.scenario_exposure import Remedy
from vllm_pd_doctor.results.base import Result
from vllm_pd_doctor.results.hotfix import FixState
from vllm_pd_doctor.results.repro import VllmInstall

FAILS = "fails"
HOLDS = "holds"
NOT_APPLICABLE = "not_applicable"
NOT_PRESENT = "not_present"
COULD_NOT_RUN = "could_not_run"
CONTROL_FAILED = "control_failed"
"""The control failed too: vLLM broke in a way the scenario does not isolate (no verdict)."""


@dataclass(frozen=True)
class Outcome:
    """What vLLM did in one run (the recipe or its control)."""

    failed: bool
    how: str | None = None
    """assertion, exception (raised inside vLLM) or invariant (observed broken); None: held."""
    location: str | None = None
    """vLLM's file:line of the assertion or exception."""
    function: str | None = None
    statement: str | None = None
    exception: str | None = None
    message: str | None = None
    invariant: str | None = None
    traceback: str | None = None
    observed: dict[str, Any] = field(default_factory=dict)

    @property
    def what(self) -> str:
        """One line: what broke (or `held`)."""
        if not self.failed:
            return "held"
        if self.how == "invariant":
            at = f" at {self.location} ({self.function}: `{self.statement}`)" if self.location else ""
            return f"invariant broken: {self.invariant}{at}"
        text = self.statement or self.message or self.exception or "?"
        if self.how == "exception" and self.exception:
            text = f"{self.exception}: {self.message or self.statement}"
        where = f"{self.location} ({self.function})" if self.function else self.location
        return f"{self.how} at {where}: {text}"


@dataclass(frozen=True)
class ScenarioCell:
    """One scenario x connector in one release."""

    scenario: str
    connector: str
    status: str
    """fails, holds, not_applicable, not_present, could_not_run or control_failed."""
    kv_connector: str | None = None
    recipe: Outcome | None = None
    control: Outcome | None = None
    reason: str | None = None
    notes: tuple[str, ...] = ()
    elapsed_s: float | None = None
    hotfix: FixState | None = None
    """With `--hotfix`: what the scenario's hotfix did in this vLLM (applied, not needed, refused)."""
    remedy: Remedy | None = None
    """A failing cell's remedy: the first release where it holds, the hotfix, the workaround."""

    @property
    def location(self) -> str | None:
        return self.recipe.location if self.recipe is not None and self.recipe.failed else None

    @property
    def holds_for(self) -> str | None:
        """A holding cell's limit (`holds for nixl, which reports ...; ... fails`), if the run found one."""
        if self.status != HOLDS:
            return None
        return next((n for n in self.notes if n.startswith("holds for ")), None)

    @property
    def control_words(self) -> str:
        """The control in plain words: the same run without the trigger, and what it did."""
        if self.control is None:
            return "-"
        if not self.control.failed:
            return "without the trigger it ran clean"
        return f"without the trigger it failed too: {self.control.what}"


@dataclass(frozen=True)
class ScenarioReport(Result):
    """`repro --scenario`: every scenario x connector asked, in one vLLM."""

    vllm: VllmInstall
    scenarios: tuple[str, ...]
    cells: tuple[ScenarioCell, ...]
    model: str
    available_connectors: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    engine: str = "inprocess"
    """inprocess (the real Scheduler in one process) or live (a real P/D pair, `repro/live/scenarios.py`)."""
    notes: tuple[str, ...] = ()
    """Live: where the engines wrote (logs, traces, run directory)."""
    hotfix: bool = False
    """The run applied each scenario's hotfix first (`repro --scenario X --hotfix`)."""

    @property
    def failed(self) -> bool:
        return any(c.status == FAILS for c in self.cells)

    @property
    def any_ran(self) -> bool:
        return any(c.status in (FAILS, HOLDS) for c in self.cells)

    def cell(self, scenario: str, connector: str) -> ScenarioCell | None:
        return next((c for c in self.cells if c.scenario == scenario and c.connector == connector), None)


@dataclass(frozen=True)
class ScenarioRow:
    """One release of `matrix --scenario`: its report, or why it has none."""

    release: str
    report: ScenarioReport | None = None
    reason: str | None = None
    run_s: float | None = None


@dataclass(frozen=True)
class ScenarioMatrix(Result):
    """`matrix --scenario`: scenario x release x connector."""

    package: str
    scenarios: tuple[str, ...]
    connectors: tuple[str, ...]
    rows: tuple[ScenarioRow, ...]
    wall_s: float

    @property
    def failed(self) -> bool:
        return any(r.report is not None and r.report.failed for r in self.rows)

    @property
    def any_ran(self) -> bool:
        return any(r.report is not None and r.report.any_ran for r in self.rows)


@dataclass(frozen=True)
class ScenarioCatalogue(Result):
    """`repro --list-scenarios`: the registry (knowledge/facts/scenarios.py) as a result."""

    ids: tuple[str, ...]


@dataclass(frozen=True)
class ScenarioBisect(Result):
    """`bisect --scenario`: the neighbouring releases where the scenario's verdict changes."""

    package: str
    scenario: str
    connector: str
    outcome: str
    """changed, no_change or endpoint_failed (as `matrix.BisectResult.outcome`)."""
    before: str | None
    after: str | None
    steps: tuple[tuple[str, str], ...]
    """(release, fails | holds | untested) in the order tested."""
    locations: dict[str, str | None] = field(default_factory=dict)
    """vLLM's file:line of the failure, per tested release."""
    wall_s: float = 0.0
