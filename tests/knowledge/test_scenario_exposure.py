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
    assert x.holds_from == "0.32.0"
    assert x.next_step == "pd-doctor repro --scenario hybrid-load-failure"
    assert "recorded run of vLLM 0.28.0" in x.source


def test_holds_where_the_fix_is():
    assert sx.exposure("hybrid-load-failure", "0.32.0", "nixl", hybrid=True).verdict == sx.NOT_EXPOSED
    assert sx.exposure("n1-truncation", "0.32.0", "nixl-push", hybrid=True).verdict == sx.NOT_EXPOSED


def test_open_upstream_fails_on_every_release_run():
    for r in sx.releases():
        assert sx.exposure("abort-race", r, "nixl").verdict == sx.EXPOSED, r
        assert sx.exposure("abort-race", r, "nixl").holds_from is None


def test_not_applicable_is_not_exposed_with_why():
    x = sx.exposure("abort-race", "0.32.0", "moriio")
    assert x.verdict == sx.NOT_EXPOSED and "not applicable" in x.reason


def test_unknown_release_connector_and_model_kind():
    x = sx.exposure("abort-race", "0.30.0", "nixl")
    assert x.verdict == sx.UNKNOWN and "release 0.30.0 not run" in x.reason
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
