"""The harness's answer (invllm/wire.py) read by the tool: the not-affected and error shapes.

The full answer is exercised against real vLLM in test_repro_vllm.py; here the shapes the tool
must turn into a result or an error, written as the TypedDicts say (no vLLM needed).
"""

from __future__ import annotations

import pytest

from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun
from vllm_pd_doctor.invllm import wire
from vllm_pd_doctor.repro import inprocess

OPTS = inprocess.ReproOptions(connectors=("nixl",))
VLLM: wire.VllmFacts = {"version": "0.28.0", "path": "/envs/x/lib/python3.11/site-packages/vllm"}


def test_not_affected_answer_is_a_typed_result() -> None:
    evidence = {
        "architecture": "Qwen3ForCausalLM",
        "model_class": "vllm.x.Qwen3ForCausalLM",
        "is_hybrid": False,
    }
    answer: wire.HarnessAnswer = {
        "schema_version": wire.SCHEMA_VERSION,
        "vllm": VLLM,
        "timings": {"total_s": 3.5},
        "not_affected": {"reason": "this model has no Mamba state", "evidence": evidence},
    }
    report = inprocess.parse_answer(answer, "/envs/x/bin/python", OPTS)
    na = report.not_affected
    assert na is not None and report.results == ()
    assert (na.architecture, na.is_hybrid, na.is_attention_free) == ("Qwen3ForCausalLM", False, None)


@pytest.mark.parametrize(
    ("error", "kind", "needle"),
    [
        (
            {"kind": "no_vllm", "stage": "import vllm", "message": "No module"},
            CouldNotRun,
            "cannot be imported",
        ),
        (
            {"kind": "internals", "stage": "build ModelConfig", "message": "ModelConfig failed: bad"},
            BadInput,
            "cannot read this config.json: bad",
        ),
        ({"kind": "internals", "stage": "build Scheduler", "message": "x"}, CouldNotRun, "build Scheduler"),
    ],
)
def test_error_answers_are_errors(error: wire.Error, kind: type[Exception], needle: str) -> None:
    answer: wire.HarnessAnswer = {"schema_version": 1, "vllm": VLLM, "error": error}
    with pytest.raises(kind, match=needle):
        inprocess.parse_answer(answer, "/envs/x/bin/python", OPTS)
