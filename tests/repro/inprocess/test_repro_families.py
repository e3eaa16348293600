"""Repro fidelity round 2 (issue 20): every state-carrying family, a CUDA deployment judged from
a CPU box, failure kinds mapped to exit codes and hints.

Configs: assets/models/ (public Hugging Face configs, sources in assets/models/SOURCE.md).
Relations only: W from `config.block_size`, N = W + 1, the hit N - 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun
from vllm_pd_doctor.invllm import triggers
from vllm_pd_doctor.repro import inprocess

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "assets" / "models"
LFM2 = ("lfm2-1.2b", "lfm2-8b-a1b")
DEFAULT_BLOCK = (*LFM2, "zamba2")  # zamba2: see FAMILIES in test_repro_fidelity.py


def _layers_from_specs(doc):
    layers = doc["sizing"]["layers"]
    assert layers["mamba"] > 0 and layers["attention"] > 0
    assert layers["kinds"]["MambaSpec"] == layers["mamba"]
    return layers


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("family", DEFAULT_BLOCK)
def test_lfm2_fires_on_buggy_release(python_buggy, repro_json, family):
    rc, doc, err = repro_json(python_buggy, "--model", str(MODELS / family))
    assert rc == 1, err
    w = doc["config"]["block_size"]
    assert doc["config"]["prompt_len"] == w + 1
    assert doc["assertion"]["matches_53514"] is True
    assert doc["truncation"]["hook"] == "get_num_new_matched_tokens"
    assert doc["prefix_cache"]["hit_tokens"] == w
    # The short-conv `conv` layers come from the layers' own specs, not from layer-type names.
    assert _layers_from_specs(doc)["from"].startswith("each layer's get_kv_cache_spec")


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("family", DEFAULT_BLOCK)
def test_lfm2_does_not_fire_on_fixed_release(python_fixed, repro_json, family):
    rc, doc, err = repro_json(python_fixed, "--model", str(MODELS / family))
    assert rc == 0, err
    assert doc["assertion"]["fired"] is False
    assert doc["truncation"]["hook"] == "on_new_request"
    assert doc["config"]["prompt_len"] == doc["config"]["block_size"] + 1
    _layers_from_specs(doc)


@pytest.mark.vllm
@pytest.mark.slow
def test_kimi_linear_judged_as_cuda_from_a_cpu_box(python_buggy, repro_json):
    """MLA + KDA: prefix caching stays on (as on CUDA); what is not vLLM's own is named."""
    rc, doc, err = repro_json(python_buggy, "--model", str(MODELS / "kimi-linear"), "--platform", "cuda")
    assert rc == 1, err
    w = doc["config"]["block_size"]
    assert doc["config"]["platform"] == "cuda"
    assert doc["config"]["prompt_len"] == w + 1
    assert doc["assertion"]["matches_53514"] is True
    kinds = doc["sizing"]["layers"]["kinds"]
    assert kinds.get("MLAAttentionSpec") and kinds.get("MambaSpec")
    assert doc["sizing"]["not_from_vllm"], "a CUDA judgement from a CPU box must say what it assumed"
    assert any("not from vLLM" in n for n in doc["notes"])


@pytest.mark.vllm
@pytest.mark.slow
def test_kimi_linear_cuda_on_fixed_release(python_fixed, repro_json):
    rc, doc, err = repro_json(python_fixed, "--model", str(MODELS / "kimi-linear"), "--platform", "cuda")
    assert rc == 0, err
    assert doc["truncation"]["hook"] == "on_new_request"


def _opts():
    return inprocess.ReproOptions(connectors=("nixl",))


def test_model_module_import_failure_is_could_not_run():
    err = {
        "kind": "model_import",
        "stage": "build ModelConfig",
        "message": "vLLM's module for Qwen3_5ForConditionalGeneration (vllm.model_executor.models.qwen3_5) "
        "cannot be imported: ModuleNotFoundError: No module named 'torchvision'",
        "hint": "install what it needs into the vLLM environment (the config.json itself is fine)",
    }
    with pytest.raises(CouldNotRun) as exc:
        inprocess._raise_for(err, _opts(), {})
    assert "torchvision" in exc.value.message
    assert "fix the config.json" not in (exc.value.hint or "")


def test_removed_class_is_bad_input_naming_the_release():
    err = {
        "kind": "model_unsupported",
        "stage": "build ModelConfig",
        "message": "this vLLM has no BambaForCausalLM: vLLM supported it until v0.23.0",
        "hint": "judge it with a release that has it, e.g. --vllm 0.23.0",
    }
    with pytest.raises(BadInput) as exc:
        inprocess._raise_for(err, _opts(), {})
    assert "0.23.0" in exc.value.message and "--vllm 0.23.0" in (exc.value.hint or "")


def test_preempt_note_explains_from_the_run():
    note = triggers.preempt_note(truncations=1, hit=64, prompt_len=128)
    assert note is not None and "64 of its 128" in note and "64 were left" in note
    assert triggers.preempt_note(truncations=2, hit=64, prompt_len=128) is None


def test_mamba_state_without_a_state_layer_is_an_error_never_not_fired():
    from vllm_pd_doctor.invllm import sizing

    facts = {"has_mamba_state": True, "model_class": "vllm.model_executor.models.x.XForCausalLM"}
    with pytest.raises(sizing.SizingError) as exc:
        sizing.check_state_group(facts, {"mamba": 0, "kinds": {"FullAttentionSpec": 6}})
    assert exc.value.stage == "find the state layers"
    sizing.check_state_group(facts, {"mamba": 10, "kinds": {"MambaSpec": 10}})
    err = {"kind": "no_state_group", "stage": exc.value.stage, "message": exc.value.message}
    with pytest.raises(CouldNotRun) as raised:
        inprocess._raise_for(err, _opts(), {})
    assert "MambaSpec" in raised.value.message
