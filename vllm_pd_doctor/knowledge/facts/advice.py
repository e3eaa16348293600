"""What to do about #53514, worded in one place: the upgrade target, the workaround, the hotfix.

check-config's exposure, repro's verdict (formats/repro.py) and the report all take their advice from
`fixes`, so the three give the same advice for the same finding. The upgrade wording comes from
`knowledge.fixes` (the connector registry's `fixed_in`); the hotfix wording here too (`hotfix`),
without loading the hotfix installer.
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.facts import fixes as n1
from vllm_pd_doctor.knowledge.facts.hotfix_env import ENV_SETTING

WORKAROUND = (
    "or pass --no-enable-prefix-caching to the prefill engine only; trade-off: "
    "every prefill recomputes the whole prompt (no prefix reuse on P), and for "
    "hybrid models mamba_cache_mode becomes none"
)
"""The workaround that needs no upgrade: no prefix-cache hit on P, so no N-1 hit."""


upgrade = n1.upgrade
"""The upgrade advice for one connector key (the registry's first fixed release)."""


def hotfix(python: str | None) -> str:
    """The alternative to upgrading, with the exact commands (for check-config and report)."""
    py = python or "/path/to/vllm-env/bin/python"
    return (
        f"if upgrading is not possible yet: pd-doctor's opt-in runtime backport of the fix "
        f"(truncates in on_new_request through the release's own helper). Verify it on this "
        f"release: `pd-doctor repro --python {py} --hotfix`; install it into the engines' "
        f"environment: `pd-doctor hotfix install --python {py}`; enable it by starting the "
        f"prefill engine with `{ENV_SETTING}` in its environment (it logs one line naming "
        f"what it patched); check: `pd-doctor hotfix status --python {py}`; remove: "
        f"`pd-doctor hotfix uninstall --python {py}`"
    )


def fixes(keys: Iterable[str], *, late_truncation: bool, python: str | None) -> tuple[str, ...]:
    """The advice for an exposed (or reproduced) deployment: the upgrade per connector key
    (`connectors.DEFAULT_KEY` when none is known), the workaround, and, where the release truncates
    after the lookup, the hotfix with its commands for `python`."""
    known = sorted({k for k in keys if connectors.get(k) is not None})
    out = [upgrade(k) for k in known or [connectors.DEFAULT_KEY]]
    out.append(WORKAROUND)
    if late_truncation:
        out.append(hotfix(python))
    return tuple(out)
