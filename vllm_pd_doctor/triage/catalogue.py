"""The catalogue of P/D failure classes: one `FailureClass` per cause, in one place.

Each class names the log lines that show it (`Matcher`: a literal anchor that a raw line must
hold, a regular expression over the normalised record, and where the line comes from), the lines
that mean it is a lookalike and not this cause (`excludes`), what decides it when the log alone
cannot, the fix per release, references and the pd-doctor command that verifies it. The entries
live in `entries.py`; `problems()` names what an entry lacks and a test fails on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from vllm_pd_doctor.results.triage import Confidence

CHECK = "pd-doctor check-config --prefill-cmd '...' --decode-cmd '...' (or --config FILE)"
"""The `next` command of configuration classes."""
NIXL_ENV = "pd-doctor check-config --python PYTHON (lists the NIXL packages and UCX plugin)"
"""The `next` command of NIXL/UCX packaging and transport classes."""

Role = Literal["cause", "support", "require"]
Origin = Literal["vllm", "nixl", "ucx", "mooncake", "lmcache", "zmq", "python", "vllm-ascend"]


@dataclass(frozen=True)
class Matcher:
    """One kind of log line."""

    anchor: str
    """A literal the raw line must contain (the fast prefilter; case-sensitive)."""
    pattern: str
    """Regular expression searched in the normalised message."""
    confidence: Confidence = "likely"
    """What a hit alone says (before the class's decision rules)."""
    role: Role = "cause"
    """`cause`: a hit fires the class; `support`: only strengthens it, shown as evidence;
    `require`: the class fires only when every `require` matcher hit too (same log)."""
    origin: Origin = "vllm"
    """Who prints the line; `vllm` lines are checked against vLLM's source (see `source_needle`)."""
    source_needle: str | None = None
    """Literal that vLLM's source holds for this line (tests grep the installed releases)."""
    min_count: int = 1
    """Hits needed before it counts (a line repeated for a stuck request, not a transient one)."""

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)


@dataclass(frozen=True)
class FailureClass:
    """One P/D failure cause."""

    id: str
    title: str
    matchers: tuple[Matcher, ...]
    fix: str
    references: tuple[str, ...]
    next: str
    """The pd-doctor command that verifies it."""
    side: Literal["prefill", "decode", "either"] = "either"
    """Where it shows (the side whose engine logs it)."""
    excludes: tuple[Matcher, ...] = ()
    """Lines that make a hit a lookalike: the class does not fire when one is present."""
    lookalikes: str = ""
    """What it is confused with, and what tells them apart."""
    decides: tuple[str, ...] = ()
    """Evidence that decides when the log alone cannot (listed as `missing` when absent)."""
    fix_per_release: tuple[tuple[str, str], ...] = ()
    """(release range, what to do) pairs, newest first."""
    consequence: bool = False
    """It follows the other side's death (decode errors after the prefill engine died)."""
    fatal: bool = False
    """It kills an engine (a root cause the other side's errors can point at)."""
    known_issue: str | None = None
    """Leading sentence for a known, fixed upstream issue (a maintainer's answer)."""
    extra: dict[str, str] = field(default_factory=dict)


def problems(c: FailureClass) -> list[str]:
    """What an entry lacks (a test fails on any)."""
    out = []
    if not c.matchers or not any(m.role == "cause" for m in c.matchers):
        out.append(f"{c.id}: no cause matcher")
    for m in (*c.matchers, *c.excludes):
        if m.anchor not in m.pattern.replace("\\", "") and not _anchor_ok(m):
            out.append(f"{c.id}: anchor {m.anchor!r} does not appear in pattern {m.pattern!r}")
        try:
            re.compile(m.pattern)
        except re.error as exc:
            out.append(f"{c.id}: bad pattern {m.pattern!r}: {exc}")
    for what, value in (("fix", c.fix), ("next", c.next), ("lookalikes", c.lookalikes)):
        if not value.strip():
            out.append(f"{c.id}: no {what}")
    if not c.references:
        out.append(f"{c.id}: no references")
    return out


def _anchor_ok(m: Matcher) -> bool:
    # anchors may be a plain part of an alternation or an escaped literal
    return m.anchor.lower() in m.pattern.lower().replace("\\", "")
