"""The catalogue of P/D failure classes: one `FailureClass` per cause, in one place.

Each class names the log lines that show it (`Matcher`: a literal anchor that a raw line must
hold, a regular expression over the normalised record, and where the line comes from), the lines
that mean it is a lookalike and not this cause (`excludes`), what decides it when the log alone
cannot, the fix per release, references and the pd-doctor command that verifies it. The entries
live in `entries.py`; `problems()` names what an entry lacks and a test fails on it.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from vllm_pd_doctor.knowledge import origins as origin_index
from vllm_pd_doctor.results.triage import Confidence

CHECK = "pd-doctor check-config --prefill-cmd '...' --decode-cmd '...' (or --config FILE)"
"""The `next` command of configuration classes."""
NIXL_ENV = "pd-doctor check-config --python PYTHON (lists the NIXL packages and UCX plugin)"
"""The `next` command of NIXL/UCX packaging and transport classes."""

Role = Literal["cause", "support", "require"]
Origin = Literal["vllm", "nixl", "ucx", "mooncake", "lmcache", "zmq", "python", "vllm-ascend"]


_OPS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Code:
    """A statement of vLLM's source, across releases: the file and function that hold it and,
    to tell it from the function's other statements, its kind, exception/level, condition or
    message words. A line located there (`triage/locate.py`) hits, whatever its wording."""

    file: str
    """Relative to the package, or its tail (`v1/core/kv_cache_utils.py`); a folder ending in `/`
    (`distributed/kv_transfer/kv_connector/v1/nixl/`) for code that moved between its files."""
    function: str
    """Qualified (`Scheduler.schedule`) or its last name (`schedule`); `a|b` for a renamed one."""
    what: str | None = None
    """Exception type of a raise/assert, or a log call's level."""
    kind: str | None = None
    """`log`, `raise` or `assert`."""
    condition: str | None = None
    """Text the guarding condition (or the assert test) holds."""
    words: str | None = None
    """Text the message template holds (for a function with several messages of one kind)."""
    values: tuple[tuple[str, str, float], ...] = ()
    """Tests of the line's values, all must hold: (placeholder, op, number), the placeholder named
    by its source expression's last name (`count`) or its type (`count`, `seconds`), op one of
    `==`, `!=`, `<`, `<=`, `>`, `>=`. A line whose values cannot be read does not hit."""
    package: str | None = None
    """The origin index's package that holds the statement (`libnixl`, `ucx`, `mooncake`: their
    C/C++ lines are keyed to their code as vLLM's are); None: any package whose file fits."""

    def fits(self, o: origin_index.Origin) -> bool:
        if self.package and o.package != self.package:
            return False
        if self.file.endswith("/"):
            folder = self.file[:-1]
            # a package split out of one module (`v1/nixl/` from 0.1x's `v1/nixl_connector.py`)
            before_split = o.file.startswith(folder) and "/" not in o.file[len(folder) :]
            if not (o.file.startswith(self.file) or f"/{self.file}" in f"/{o.file}" or before_split):
                return False
        elif not (o.file == self.file or o.file.endswith("/" + self.file)):
            return False
        if not any(o.function == f or o.function.endswith("." + f) for f in self.function.split("|")):
            return False
        if (self.what and o.what != self.what) or (self.kind and o.kind != self.kind):
            return False
        if self.condition and self.condition not in (o.condition or ""):
            return False
        return not (self.words and self.words not in (o.template or ""))

    def values_hold(self, values: tuple[tuple[str, str, str], ...]) -> bool:
        """Every test of `values` holds on the line's (name, type, text) values."""
        for name, op, num in self.values:
            got = next(
                (v for n, t, v in values if n == name or n.endswith("." + name)),
                next((v for _n, t, v in values if t == name), None),
            )
            try:
                x = float(got) if got is not None else None
            except ValueError:
                x = None
            if x is None or not _OPS[op](x, num):
                return False
        return True

    def __str__(self) -> str:
        what = f" {self.kind or ''} {self.what or ''}".rstrip()
        cond = f" if {self.condition}" if self.condition else ""
        return f"{self.file}:{self.function}{what}{cond}"


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
    code: Code | None = None
    """The statement that writes the line: a line located there hits too, in any release's words.
    A matcher with only `code` has an empty anchor and pattern."""

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


def C(
    file: str,
    function: str,
    confidence: Confidence = "likely",
    role: Role = "cause",
    values: tuple[tuple[str, str, float], ...] = (),
    min_count: int = 1,
    **where: str,
) -> Matcher:
    """A matcher keyed to code only (see `Code`)."""
    return Matcher(
        "", "", confidence, role, min_count=min_count, code=Code(file, function, values=values, **where)
    )


def problems(c: FailureClass) -> list[str]:
    """What an entry lacks (a test fails on any)."""
    out = []
    if not c.matchers or not any(m.role == "cause" for m in c.matchers):
        out.append(f"{c.id}: no cause matcher")
    for m in (*c.matchers, *c.excludes):
        if not m.anchor and m.code is None:
            out.append(f"{c.id}: a matcher with neither anchor nor code")
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
