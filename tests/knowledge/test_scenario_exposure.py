"""knowledge/scenario_exposure: answers read from the data generated from real scenario runs."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("rso", ROOT / "scripts" / "record_scenario_outcomes.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_data_is_what_the_generator_makes_from_the_recorded_runs():
    gen = _generator()
    built = gen.build(sorted((ROOT / "tests" / "fixtures" / "recorded").glob("scenarios-*-all.json")))
    assert json.loads(sx.DATA.read_text()) == json.loads(json.dumps(built))
    assert {"0.28.0", "0.32.0"} <= set(sx.releases())


def test_fails_where_the_run_failed_with_vllms_location():
    x = sx.exposure("hybrid-load-failure", "0.28.0+cpu", "nixl", hybrid=True)
    assert x.verdict == sx.EXPOSED
    assert x.location is not None and x.location.startswith("vllm/v1/core/sched/scheduler.py:")
    assert x.holds_from == "0.30.0"  # the first recorded release whose run holds (PR #50388)
    assert x.next_step == "pd-doctor repro --scenario hybrid-load-failure"
    assert "recorded run of vLLM 0.28.0" in x.source


def test_holds_where_the_fix_is():
    assert sx.exposure("hybrid-load-failure", "0.32.0", "nixl", hybrid=True).verdict == sx.NOT_EXPOSED
    assert sx.exposure("n1-truncation", "0.32.0", "nixl-push", hybrid=True).verdict == sx.NOT_EXPOSED


def test_open_upstream_fails_on_every_release_run():
    for r in sx.releases():
        assert sx.exposure("abort-race", r, "nixl").verdict == sx.EXPOSED, r
        assert sx.exposure("abort-race", r, "nixl").holds_from is None


def test_not_applicable_is_not_exposed_with_its_own_why():
    x = sx.exposure("hybrid-load-failure", "0.32.0", "moriio")
    assert x.verdict == sx.NOT_EXPOSED and "not applicable" in x.reason
    assert "abort" not in x.reason  # the load failure's reason, not the abort race's sentence
    # MoRIIO runs the abort race in its default (WRITE) mode on a dense model: the race is reachable
    assert sx.exposure("abort-race", "0.32.0", "moriio").verdict == sx.EXPOSED


def test_unknown_release_connector_and_model_kind():
    x = sx.exposure("abort-race", "0.26.0", "nixl")
    assert x.verdict == sx.UNKNOWN and "release 0.26.0 not run" in x.reason
    assert sx.exposure("abort-race", "0.28.0", "lmcache").verdict == sx.UNKNOWN
    # the model matters for this one and the runs used a hybrid model: dense is not decided
    dense = sx.exposure("hybrid-load-failure", "0.28.0", "nixl", hybrid=False)
    assert dense.verdict == sx.UNKNOWN and "hybrid model" in dense.reason
    # the model does not matter for the abort race
    assert sx.exposure("abort-race", "0.28.0", "nixl", hybrid=True).verdict == sx.EXPOSED


@dataclass(frozen=True)
class _Cell:
    scenario: str
    connector: str
    status: str
    location: str | None = None


def test_an_observed_run_wins_over_the_data():
    held = sx.exposure("abort-race", "0.28.0", "nixl", observed=[_Cell("abort-race", "nixl", "holds")])
    assert held.verdict == sx.NOT_EXPOSED and held.source == "observed run of this vLLM"
    seen = [_Cell("hybrid-load-failure", "nixl", "fails", "vllm/x.py:1")]
    x = sx.exposure("hybrid-load-failure", "0.40.0", "nixl", hybrid=True, observed=seen)
    assert x.verdict == sx.EXPOSED and x.location == "vllm/x.py:1"


def test_the_recorded_runs_cover_every_release_from_the_oldest_to_the_newest():
    rels = sx.releases()
    assert rels[0] == "0.27.1" and rels[-1] == "0.33.0"
    minors = [sx.version_key(r)[1] for r in rels]
    assert minors == list(range(minors[0], minors[-1] + 1)), rels  # no minor release skipped


def test_first_release_where_each_scenario_holds_comes_from_the_runs():
    """Read from the runs, per connector: n1-truncation 0.29.0, hybrid-load-failure and
    notify-only-failure 0.30.0, lease-reaper 0.31.0 (pull and push), none for the open ones."""
    old = sx.releases()[0]
    assert sx.holds_from("n1-truncation", "nixl", old) == "0.29.0"
    assert sx.holds_from("hybrid-load-failure", "mooncake", old) == "0.30.0"
    assert sx.holds_from("notify-only-failure", "nixl", old) == "0.30.0"
    for conn in ("nixl", "nixl-push"):
        assert sx.holds_from("lease-reaper", conn, old) == "0.31.0"
        assert sx.holds_from("d-extra-block", conn, old) is None
    assert sx.holds_from("abort-race", "moriio", old) is None


def test_every_failing_cell_of_every_run_has_a_location():
    for rel, scen in sx.table().items():
        for sid, conns in scen.items():
            for conn, status in conns.items():
                if status == "fails":
                    x = sx.exposure(sid, rel, conn)
                    assert x.location and x.location.startswith("vllm/"), (rel, sid, conn, x.reason)


def test_remedy_upgrade_names_the_first_release_where_the_runs_hold():
    r = sx.remedy("hybrid-load-failure", "nixl", "0.28.0")
    assert r.holds_from == "0.30.0" and "upgrade" in r.kinds
    assert r.upgrade.startswith("upgrade vLLM to 0.30.0 or later")
    assert sx.remedy("lease-reaper", "nixl-push", "0.29.0").holds_from == "0.31.0"


def test_remedy_hotfix_carries_the_command_that_verifies_it():
    r = sx.remedy("abort-race", "nixl", "0.32.0")
    assert r.holds_from is None and "upgrade" not in r.kinds and "no upgrade helps yet" in r.upgrade
    assert r.hotfix == "abort-race" and r.hotfix_label == "not merged upstream"
    assert r.hotfix_verify == "pd-doctor repro --python PYTHON --scenario abort-race --hotfix"
    assert r.hotfix_enable == "PD_DOCTOR_HOTFIX=abort-race on the decode"
    line = next(x for x in r.lines("/env/bin/python") if x.startswith("hotfix"))
    assert "pd-doctor hotfix install --python /env/bin/python" in line and "--hotfix" in line
    assert sx.remedy("lease-reaper", "nixl", "0.28.0").hotfix is None  # no hotfix for that one
    newest = sx.remedy("abort-race", "nixl", sx.releases()[-1])
    assert "no release newer than" in newest.upgrade  # not "no release holds": none newer was run


def test_remedy_workaround_where_one_exists():
    r = sx.remedy("d-extra-block", "nixl", "0.33.0")
    assert r.kinds == ("workaround",) and "proxy" in r.workaround
    assert "workaround" in sx.remedy("n1-truncation", "nixl", "0.28.0").kinds  # prefix caching off on P
    assert "workaround" not in sx.remedy("hybrid-load-failure", "nixl", "0.28.0").kinds
