"""Verdicts of the in-process repro against real vLLM releases (no mocks of vLLM).

No machine's numbers: the effective block size W (config.block_size) depends on the CPU (AMX or not)
and the release, so every length is derived from it: N = W + 1, a hit of N - 1 = W tokens.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CONNECTORS = ("nixl", "nixl-push", "mooncake")


@pytest.fixture(scope="module")
def buggy_all(python_buggy, repro_json):
    # The platform's default block size (16 on CPU): the same child as test_hotfix_vllm's run.
    return repro_json(python_buggy, "--connector", "all")


@pytest.fixture(scope="module")
def fixed_all(python_fixed, repro_json):
    return repro_json(python_fixed, "--connector", "all")


def _w(d):
    """The effective block size vLLM's own sizing gave (the prompt is N = W + 1)."""
    w = d["config"]["block_size"]
    assert isinstance(w, int) and w >= 16 and w % 16 == 0, d["config"]
    assert d["config"]["prompt_len"] == w + 1
    return w


def _by_connector(doc):
    assert isinstance(doc, list), doc
    return {d["connector"]: d for d in doc}


def test_buggy_release_fires_exit_1(buggy_all):
    rc, doc, err = buggy_all
    assert rc == 1, err
    assert {"nixl", "nixl-push", "mooncake"} <= set(_by_connector(doc))


@pytest.mark.parametrize("connector", CONNECTORS)
def test_buggy_truncates_after_lookup_and_asserts(buggy_all, connector):
    d = _by_connector(buggy_all[1])[connector]
    assert d["schema_version"] == 1
    assert d["vllm"]["version"].startswith("0.28.0")
    assert d["assertion"]["fired"] is True
    assert d["assertion"]["matches_53514"] is True
    assert d["assertion"]["location"] == "vllm/v1/core/sched/scheduler.py:967"
    assert d["truncation"]["hook"] == "get_num_new_matched_tokens"
    assert d["truncation"]["before_lookup"] is False
    w = _w(d)
    assert d["prefix_cache"]["hit_tokens"] == w  # N - 1
    assert d["prompt"] == {"len_before": w + 1, "len_after": w}
    assert d["control"]["assertion_fired"] is False
    assert d["control"]["scheduled_tokens"] >= 1
    assert any(e["kind"] == "assertion" for e in d["events"])


@pytest.mark.parametrize("connector", CONNECTORS)
def test_fixed_truncates_in_on_new_request(fixed_all, connector):
    d = _by_connector(fixed_all[1])[connector]
    assert d["vllm"]["version"].startswith("0.32.0")
    assert d["assertion"]["fired"] is False
    assert d["assertion"]["location"] is None
    assert d["truncation"]["hook"] == "on_new_request"
    assert d["truncation"]["before_lookup"] is True
    w = _w(d)
    assert d["prompt"] == {"len_before": w + 1, "len_after": w}
    assert d["scheduled_tokens"] > 0
    assert d["control"]["assertion_fired"] is False
    call_site = d["truncation"]["call_site"]
    assert call_site["function"] == "on_new_request"
    assert call_site["file"].startswith("vllm/distributed/kv_transfer/kv_connector/v1/")


def test_fixed_release_exit_0(fixed_all):
    rc, _doc, err = fixed_all
    assert rc == 0, err


def test_buggy_call_site_names_the_scheduler_file(buggy_all):
    d = _by_connector(buggy_all[1])
    assert d["nixl"]["truncation"]["call_site"]["file"].endswith("nixl/pull_scheduler.py")
    assert d["nixl-push"]["truncation"]["call_site"]["file"].endswith("nixl/push_scheduler.py")
    assert d["mooncake"]["truncation"]["call_site"]["file"].endswith("mooncake/mooncake_connector.py")


def test_single_connector_json_is_an_object(python_buggy, repro_json):
    rc, doc, err = repro_json(python_buggy, "--block-size", "16")
    assert rc == 1, err
    assert isinstance(doc, dict)
    for key in (
        "schema_version",
        "vllm",
        "connector",
        "assertion",
        "truncation",
        "prefix_cache",
        "prompt",
        "control",
        "events",
    ):
        assert key in doc
    assert doc["connector"] == "nixl"
    lib = doc["transfer_library"]
    assert lib["module"] == "nixl" and lib["needed_for_scheduler"] is False
    # When NIXL is absent the output says it was not needed (on stderr, as a note).
    assert isinstance(lib["installed"], bool)
    assert lib["installed"] or "not needed for the scheduler half" in err


def test_unaligned_prompt_cannot_fire_and_says_why(python_buggy, repro_json):
    # W and the hash granularity h from the aligned run (shared, cached); then N = W + 2.
    _rc, aligned, _err = repro_json(python_buggy, "--block-size", "16")
    w, h = _w(aligned), aligned["config"]["hash_block_size"]
    rc, doc, err = repro_json(python_buggy, "--block-size", "16", "--prompt-len", str(w + 2))
    assert rc == 0, err
    assert doc["assertion"]["fired"] is False
    assert (w + 1) % h != 0  # N - 1 = W + 1 is off the granularity
    lower = (w + 1) // h * h + 1
    assert f"not a multiple of the prefix-cache hash granularity {h}" in err
    assert f"N = {lower} or {lower + h} would" in err


def test_table_output_names_the_assert(python_buggy, cli):
    proc = cli("repro", "--python", python_buggy, "--block-size", "16", "--quiet")
    assert proc.returncode == 1, proc.stderr
    assert "REPRODUCED" in proc.stdout
    assert "scheduler.py:967" in proc.stdout
    assert "get_num_new_matched_tokens" in proc.stdout


def test_connector_missing_is_exit_3_one_line(python_buggy, cli):
    proc = cli("repro", "--python", python_buggy, "--connector", "moriio", "--quiet")
    # 0.28.0's MoRIIO lacks the hybrid KV cache manager: vLLM itself would not start the model.
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "MoRIIOConnector" in proc.stderr


def test_rejected_mamba_cache_mode_is_bad_input(python_fixed, cli):
    proc = cli("repro", "--python", python_fixed, "--mamba-cache-mode", "all", "--quiet")
    assert proc.returncode == 2, proc.stderr
    assert "--mamba-cache-mode all" in proc.stderr
    assert "Traceback" not in proc.stderr
