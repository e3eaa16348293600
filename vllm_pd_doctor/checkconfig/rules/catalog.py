"""The rule registry: `@rule(...)` puts a check and its catalogue entry side by side."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_pd_doctor.results.checkconfig import Finding, Rule, Severity

if TYPE_CHECKING:
    from vllm_pd_doctor.checkconfig.rules.context import Context

Check = Callable[["Context"], Iterable[Finding]]
E, W, INFO = Severity.error, Severity.warning, Severity.info


@dataclass(frozen=True)
class Registered:
    spec: Rule
    check: Check


_REGISTRY: dict[str, Registered] = {}


def rule(
    *, id: str, severity: Severity, title: str, fix: str, refs: tuple[str, ...] = ()
) -> Callable[[Check], Check]:
    """Register `fn` as the one check of rule `id` (its catalogue entry is the arguments)."""

    def deco(fn: Check) -> Check:
        if id in _REGISTRY:
            raise ValueError(f"rule {id!r} registered twice")
        _REGISTRY[id] = Registered(Rule(id, severity, title, fix, tuple(refs)), fn)
        return fn

    return deco


def registered() -> tuple[Registered, ...]:
    return tuple(_REGISTRY.values())


def spec(rule_id: str) -> Rule:
    return _REGISTRY[rule_id].spec


def finding(
    rule_id: str, evidence: str, *, severity: Severity | None = None, fix: str | None = None
) -> Finding:
    r = spec(rule_id)
    return Finding(
        id=r.id,
        severity=severity or r.severity,
        title=r.title,
        evidence=evidence,
        fix=fix or r.fix,
        refs=r.refs,
    )
