"""Published security advisories that kill a vLLM engine on P/D traffic, and NIXL releases known
to crash: each advisory with its public id, its reference and the releases it affects.

check-config's `vllm-advisory` and `nixl-known-bad-version` rules read them; the upgrade wording
(`safe_release`) is computed from the entries, so adding an advisory is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from vllm_pd_doctor.knowledge.facts.connectors import release_version


@dataclass(frozen=True)
class Advisory:
    """A security advisory that kills the engine on P/D traffic."""

    id: str
    """Its public id (`CVE-...`)."""
    what: str
    affected_through: str
    """Last affected release (inclusive) when `inclusive`, else first unaffected release."""
    inclusive: bool
    reference: str = ""
    """Where it is published (a URL)."""

    def affects(self, version: Version) -> bool:
        """`version` (a `release_version`) is affected."""
        limit = release_version(self.affected_through)
        if limit is None:
            return False
        return version <= limit if self.inclusive else version < limit


def cve(id: str, what: str, affected_through: str, inclusive: bool) -> Advisory:
    """An advisory published as a CVE record (its reference is the record's page)."""
    return Advisory(id, what, affected_through, inclusive, f"https://www.cve.org/CVERecord?id={id}")


ADVISORIES: tuple[Advisory, ...] = (
    cve("CVE-2026-94622", "incomplete kv_transfer_params kill the engine", "0.29.0", True),
    cve("CVE-2026-94623", "multi-prompt assert kills the engine", "0.29.0", True),
    cve("CVE-2026-114051", "P/D request kills the engine", "0.31.0", False),
)

BAD_NIXL: dict[str, str] = {"1.0.1": "SIGSEGV at exit", "1.3.1": "known crash"}
"""NIXL releases known to crash (version -> what happens)."""


def _key(v: str) -> Version:
    return release_version(v) or Version("0")


def safe_release(advisories: tuple[Advisory, ...] = ADVISORIES) -> str | None:
    """The first release no advisory affects, where the entries name it: the highest
    first-unaffected bound, when it is above every inclusive one (None otherwise)."""
    bounds = [a.affected_through for a in advisories if not a.inclusive]
    if not bounds:
        return None
    best = max(bounds, key=_key)
    if any(_key(a.affected_through) >= _key(best) for a in advisories if a.inclusive):
        return None
    return best


def upgrade_advice(advisories: tuple[Advisory, ...] = ADVISORIES) -> str:
    """`upgrade vLLM to X or later`, X the first release no advisory affects."""
    safe = safe_release(advisories)
    if safe is not None:
        return f"upgrade vLLM to {safe} or later"
    last = max((a.affected_through for a in advisories), key=_key)
    return f"upgrade vLLM to a release after {last}"


def problems() -> list[str]:
    """What the entries lack (a test asserts this is empty)."""
    out: list[str] = []
    for a in ADVISORIES:
        if not (a.id and a.what and a.reference) or release_version(a.affected_through) is None:
            out.append(f"advisory {a.id!r}: incomplete")
    for v, what in BAD_NIXL.items():
        if release_version(v) is None or not what:
            out.append(f"bad NIXL entry {v!r}: incomplete")
    return out
