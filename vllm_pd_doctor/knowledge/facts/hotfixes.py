"""The fixes `pd-doctor hotfix` can carry into a vLLM environment, one entry each (stdlib only).

An engine enables them by name: `PD_DOCTOR_HOTFIX=53514,hybrid-load-failure,abort-race` (a comma
list; `53514` alone is the original setting). Each fix is verified by its scenario
(`pd-doctor repro --scenario ID --hotfix`, or the default `repro --hotfix` for #53514) on every
release it installs on. A fix whose upstream change is not merged is labelled so wherever it is
shown (`NOT_MERGED`).

Shipped into the target package under this name (`targetrun.SHIPPED_KNOWLEDGE`), so that the
installed plugin words its log line from the same entries: no imports beyond the stdlib.
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_MERGED = "not merged upstream"
"""The label of a fix whose upstream change is still open."""


@dataclass(frozen=True)
class Hotfix:
    """One fix the plugin can apply."""

    name: str
    """What PD_DOCTOR_HOTFIX names to enable it."""
    scenario: str
    """The `repro --scenario` id that verifies it (knowledge/facts/scenarios.py)."""
    what: str
    """What the change does to the installed code, in one line."""
    upstream: tuple[str, ...]
    """The upstream thread or PRs whose change it follows (`vllm#NNNNN`)."""
    merged: bool
    """The upstream change is merged (in a later release)."""
    scheduler: bool = True
    """A change to vLLM's Scheduler (invllm/hotfix_scheduler.py); False: #53514's connector patch."""

    @property
    def label(self) -> str:
        """`not merged upstream`, or empty."""
        return "" if self.merged else NOT_MERGED

    @property
    def title(self) -> str:
        """`abort-race (not merged upstream)`: the name with its label."""
        return f"{self.name} ({self.label})" if self.label else self.name

    @property
    def upstream_words(self) -> str:
        """`PR #46304, PR #56089 (not merged upstream)` or `PR #50388 (merged)`."""
        if self.scheduler:
            refs = ", ".join("PR #" + r.rsplit("#", 1)[-1] for r in self.upstream)
        else:
            refs = ", ".join(self.upstream)
        return f"{refs} ({'merged' if self.merged else NOT_MERGED})"


HOTFIXES: tuple[Hotfix, ...] = (
    Hotfix(
        "53514",
        "n1-truncation",
        "truncate P-side hybrid/Mamba prompts in on_new_request, before the prefix-cache lookup, "
        "through the release's own helper",
        ("vllm#53514",),
        merged=True,
        scheduler=False,
    ),
    Hotfix(
        "hybrid-load-failure",
        "hybrid-load-failure",
        "a failed KV load of a request with several KV cache groups recomputes that request in full "
        "instead of unpacking one group (`too many values to unpack` in "
        "Scheduler._update_requests_with_invalid_blocks)",
        ("vllm#50388",),
        merged=True,
    ),
    Hotfix(
        "abort-race",
        "abort-race",
        "a KV transfer reported finished for a request the scheduler already freed is skipped instead "
        "of failing `assert req_id in self.requests` in Scheduler._update_from_kv_xfer_finished",
        ("vllm#46304", "vllm#56089"),
        merged=False,
    ),
)

_BY_NAME = {h.name: h for h in HOTFIXES}


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def get(name: str) -> Hotfix | None:
    return _BY_NAME.get(name.strip().lower())


def for_scenario(scenario_id: str) -> Hotfix | None:
    """The fix a scenario verifies (None: that scenario has no hotfix)."""
    return next((h for h in HOTFIXES if h.scenario == scenario_id), None)


def parse(value: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """PD_DOCTOR_HOTFIX's value -> (known fix names, unknown words), each in the order given."""
    words = [w.strip().lower() for w in (value or "").split(",") if w.strip()]
    known = tuple(dict.fromkeys(w for w in words if w in _BY_NAME))
    unknown = tuple(dict.fromkeys(w for w in words if w not in _BY_NAME))
    return known, unknown


def setting(*fix_names: str) -> str:
    """`PD_DOCTOR_HOTFIX=a,b`: the setting that enables those fixes (all of them by default)."""
    return "PD_DOCTOR_HOTFIX=" + ",".join(fix_names or names())
