"""check-config --probe: the scenarios run in the user's vLLM and the observed run wins (vllm tier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check_config"


@pytest.mark.slow
def test_probe_runs_the_scenarios_on_buggy(cli, python_buggy):
    proc = cli(
        "check-config",
        "--python",
        python_buggy,
        "--format",
        "json",
        "--config",
        str(FIX / "accuracy_test_hybrid.yaml"),
        "--probe",
    )
    doc = json.loads(proc.stdout)
    got = {f["id"]: f for f in doc["findings"]}
    hlf = got["scenario-hybrid-load-failure"]
    assert "observed run of this vLLM" in hlf["evidence"], hlf
    assert "scheduler.py:" in hlf["evidence"] and "repro --scenario hybrid-load-failure" in hlf["evidence"]
    assert "observed run of this vLLM" in got["scenario-abort-race"]["evidence"]
