"""What `pd-doctor hotfix` answers: where the opt-in #53514 backport stands in one environment, and
what install / uninstall changed (frozen dataclasses; the installer is `repro/hotfix.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.knowledge.facts.hotfix_env import ENV as ENV  # re-exported: the formats word them
from vllm_pd_doctor.knowledge.facts.hotfix_env import ENV_SETTING as ENV_SETTING
from vllm_pd_doctor.knowledge.facts.hotfix_env import ISSUE as ISSUE
from vllm_pd_doctor.results.base import Result
from vllm_pd_doctor.results.repro import HotfixPatch

DIST = "pd-doctor-hotfix"
"""The distribution `hotfix install` writes into an environment's site-packages."""
APPLIED = ("patched", "already patched")
"""Statuses of a class the hotfix changed (now or before)."""


@dataclass(frozen=True)
class FixState:
    """One Scheduler fix of the plugin (knowledge/facts/hotfixes.py) on one vLLM: what it would do there
    (`hotfix status`) or did (`repro --scenario X --hotfix`), read from the installed source."""

    fix: str
    """Its name in PD_DOCTOR_HOTFIX (`abort-race`; `53514` for #53514's connector patch)."""
    status: str
    """patch (planned), patched, already patched, not needed or refused."""
    reason: str
    label: str = ""
    """`not merged upstream` for a fix upstream has not merged; else empty."""
    function: str | None = None
    """The vLLM function it changes (`Scheduler._update_from_kv_xfer_finished`)."""
    at: str | None = None
    """That function's file:line."""
    sites: tuple[str, ...] = ()
    """The file:line of each statement it changes."""
    enabled: bool | None = None
    """PD_DOCTOR_HOTFIX names it where `hotfix status` was asked (None: not asked)."""

    @property
    def applied(self) -> bool:
        return self.status in APPLIED

    @property
    def word(self) -> str:
        """applied, not needed, refused (or patch: planned)."""
        return "applied" if self.applied else self.status

    @property
    def title(self) -> str:
        return f"{self.fix} ({self.label})" if self.label else self.fix


@dataclass(frozen=True)
class Installed:
    """The pd-doctor-hotfix distribution found in an environment."""

    dist_info: Path
    version: str
    files: tuple[Path, ...]
    """Every file RECORD lists (absolute)."""
    current: bool
    """The installed module files are byte-identical to this pd-doctor's."""


@dataclass(frozen=True)
class Status(Result):
    """Where the hotfix stands for one environment."""

    python: str
    site_packages: str
    installed: Installed | None
    other_plugins: tuple[str, ...]
    """Other `vllm.general_plugins` entry points that apply it too (pd-doctor's own plugin)."""
    enabled: bool
    """PD_DOCTOR_HOTFIX=53514 in the environment `status` was asked from."""
    vllm_version: str | None
    plan: tuple[HotfixPatch, ...]
    """What the plugin would do to each connector class of that release (observed there)."""
    plan_error: str | None = None
    fixes: tuple[FixState, ...] = ()
    """The Scheduler fixes (hybrid-load-failure, abort-race) on that release."""
    available: tuple[str, ...] = ()
    """Every fix PD_DOCTOR_HOTFIX can name, with its label (`abort-race (not merged upstream)`)."""

    @property
    def needed(self) -> bool | None:
        """True: some connector truncates late and would be patched; None: could not tell."""
        if self.plan_error is not None or not self.plan:
            return None
        return any(p.status in ("patch", *APPLIED) for p in self.plan)


@dataclass(frozen=True)
class Change(Result):
    """What install / uninstall did."""

    action: str
    """install or uninstall."""
    python: str
    site_packages: str
    files: tuple[str, ...]
    """Paths written (install) or removed (uninstall), relative to site-packages."""
    available: tuple[str, ...] = ()
    """Install: every fix PD_DOCTOR_HOTFIX can name, with its label."""
