"""The check-config rules: each one function registered with its catalogue entry (`@rule`),
grouped by topic. `run_checks(ctx)` runs them all; `RULES` is the catalogue.

Adding a rule: write a function in the topic module, decorate it with `@rule(id=..., severity=...,
title=..., fix=..., refs=...)`, and add one triggering and one clean case to
tests/checkconfig/test_check_config_rules.py (a test fails until you do).
"""

from __future__ import annotations

from vllm_pd_doctor.checkconfig.rules import (
    compat,
    handshake,
    hybrid,
    release,
    roles,
    scenarios,
    topology,
    transport,
)
from vllm_pd_doctor.checkconfig.rules.catalog import Registered, finding, registered, rule
from vllm_pd_doctor.checkconfig.rules.context import (
    Context,
    connector_entries,
    connector_key,
    connector_names,
    uses_nixl,
)
from vllm_pd_doctor.results.checkconfig import Finding, Rule

TOPICS = (release, topology, roles, compat, handshake, hybrid, transport, scenarios)
"""Catalogue order: by topic, then as written in the module."""
_ORDER = {m.__name__: i for i, m in enumerate(TOPICS)}


def _ordered() -> tuple[Registered, ...]:
    return tuple(sorted(registered(), key=lambda r: _ORDER.get(r.check.__module__, len(_ORDER))))


RULES: tuple[Rule, ...] = tuple(r.spec for r in _ordered())
BY_ID = {r.id: r for r in RULES}


def run_checks(ctx: Context) -> tuple[Finding, ...]:
    """Every registered rule's findings, in catalogue order."""
    out: list[Finding] = []
    for r in _ordered():
        out.extend(r.check(ctx))
    return tuple(out)


__all__ = [
    "BY_ID",
    "RULES",
    "Context",
    "connector_entries",
    "connector_key",
    "connector_names",
    "finding",
    "rule",
    "run_checks",
    "uses_nixl",
]
