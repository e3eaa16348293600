"""status: the running decode's exposure to the scenarios, from recorded real engines (fast tier)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from vllm_pd_doctor.status import record
from vllm_pd_doctor.status.scenarios import scenario_exposure

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "status"


def _windows(case: str) -> dict[str, object]:
    wins, _, _ = record.replay(FIX / case)
    return {w.role: w for w in wins}


def test_healthy_032_decode_is_exposed_to_the_open_abort_race_only():
    d = _windows("a-healthy-traffic")["decode"]
    got = {f.id: f for f in scenario_exposure(d)}  # type: ignore[arg-type]
    assert set(got) == {"exposed-abort-race"}
    f = got["exposed-abort-race"]
    assert f.severity == "info" and f.next.startswith("pd-doctor repro --scenario abort-race")
    assert f.triage_class == "kv-xfer-finished-for-freed-request"
    assert any("scheduler.py:" in e.value for e in f.evidence)


def test_hybrid_model_on_028_is_exposed_to_hybrid_load_failure_with_the_upgrade():
    # the 0.28.0 engine of the mixed-release case, read as a decode (same /version, model, side channel)
    p = _windows("b-version-block-mismatch")["prefill"]
    as_decode = replace(p, role="decode")  # type: ignore[type-var]
    got = {f.id: f for f in scenario_exposure(as_decode)}  # type: ignore[arg-type]
    f = got["exposed-hybrid-load-failure"]
    assert f.severity in ("warning", "info")
    # the remedy: the first release where the recorded runs hold, and the hotfix with its verification
    assert "upgrade vLLM to 0.30.0 or later" in f.fix and "--scenario hybrid-load-failure --hotfix" in f.fix
    assert f.next.startswith("pd-doctor repro --scenario hybrid-load-failure")
    # the notification-only handshake failure (PR #57570) fails on the same release, hybrid model
    n = got["exposed-notify-only-failure"]
    assert n.severity == "warning" and "vllm-project/vllm PR #57570" in n.references
    assert n.next.startswith("pd-doctor repro --scenario notify-only-failure")
    # its 0.32.0 decode holds (both)
    d = _windows("b-version-block-mismatch")["decode"]
    held = {x.id for x in scenario_exposure(d)}  # type: ignore[arg-type]
    assert not {"exposed-hybrid-load-failure", "exposed-notify-only-failure"} & held


def test_every_registry_entry_but_53514s_has_an_exposure_rule():
    from vllm_pd_doctor.knowledge.facts import scenarios

    assert {s.id for s in scenarios.exposure_rules()} == set(scenarios.ids()) - {scenarios.DEFAULT}
    for a in scenarios.exposure_rules():
        assert a.fix and a.side in (scenarios.DECODE, scenarios.PREFILL)
        assert any("#" in r for r in a.upstream_refs), a.id


def test_decode_without_a_side_channel_or_unknown_release():
    d = _windows("b-decode-without-connector")["decode"]
    assert list(scenario_exposure(d)) == []  # type: ignore[arg-type]
    d = _windows("a-healthy-idle")["decode"]
    other = replace(d, after=replace(d.after, version="0.30.1"))  # type: ignore[type-var, attr-defined]
    assert [f.id for f in scenario_exposure(other)] == ["scenario-exposure-unknown"]  # type: ignore[arg-type]


def test_prefill_on_028_is_exposed_to_the_lease_reaper_and_032_is_not():
    p = _windows("b-version-block-mismatch")["prefill"]
    got = {f.id: f for f in scenario_exposure(p)}  # type: ignore[arg-type]
    assert set(got) == {"exposed-lease-reaper"}
    lease = got["exposed-lease-reaper"]
    assert lease.severity == "warning" and "upgrade vLLM to 0.31.0 or later" in lease.fix
    p32 = _windows("a-healthy-traffic")["prefill"]
    assert list(scenario_exposure(p32)) == []  # type: ignore[arg-type]
