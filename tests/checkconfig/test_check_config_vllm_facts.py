"""What check-config reads from a real vLLM 0.28.0 (`-m vllm`): its config decisions (ast, no
import) and the model family from its model registry (one child of the target interpreter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_pd_doctor.checkconfig import core
from vllm_pd_doctor.knowledge.readers import inspect_config, inspect_vllm, nixl_info
from vllm_pd_doctor.results.checkconfig import Severity, Verdict

pytestmark = pytest.mark.vllm

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "check_config" / "models"


def _vllm_dir(python: str) -> Path:
    facts = nixl_info.probe(python, import_nixl=False)
    assert facts.vllm_path is not None
    return Path(facts.vllm_path)


def test_config_decisions_read_from_0_28(python_buggy: str) -> None:
    v = _vllm_dir(python_buggy)
    rewrite = inspect_config.mamba_prefix_rewrite(v)
    assert rewrite is not None and "'align'" in rewrite.detail
    assert rewrite.location.startswith("vllm/model_executor/models/config.py:")
    got = inspect_config.kv_transfer_fields(v)
    assert got is not None
    fields, forbids, _where = got
    assert {"kv_connector", "kv_role", "kv_connector_module_path"} <= set(fields)
    assert "kv_encoder_mode" not in fields and forbids is True
    assert inspect_config.conv_layout_default(v) == "SD"
    asserted = inspect_config.conv_layout_assert(inspect_vllm._nixl_worker_trees(v))
    assert asserted is not None and "DS" in asserted.detail


def test_kimi_k3_through_the_registry_of_0_28(python_buggy: str) -> None:
    """vLLM #53706: Kimi-K3 on 0.28.0 is exposed; the family comes from vLLM's own registry; the
    unknown kv-transfer-config key and the missing DS layout are errors, as vLLM would refuse."""
    ktc = '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_encoder_mode":"x"}'
    cmd = f"vllm serve K3 --enable-prefix-caching --mamba-cache-mode none --kv-transfer-config '{ktc}'"
    r = core.check(
        prefill_cmd=cmd,
        model=MODELS / "kimi-k3",
        python=python_buggy,
        import_nixl=False,
    )
    assert r.model is not None and r.model.hybrid
    assert r.model.source.startswith("vLLM 0.28.0 model registry"), r.model
    assert "KimiK3ForConditionalGeneration" in r.model.hybrid_evidence
    assert r.exposure.verdict is Verdict.exposed
    sev = {f.id: f.severity for f in r.findings}
    # kv_encoder_mode is no misspelling: a field of the vLLM branch vLLM's own EPD benchmark ships
    # with (issue 28), so a warning that 0.28.0 refuses it; a misspelt field is an error
    assert sev.get("kv-transfer-config-key") is Severity.warning
    assert sev.get("ssm-conv-state-layout") is Severity.error
    typo = core.check(
        prefill_cmd=cmd.replace('"kv_encoder_mode":"x"', '"kv_rol":"kv_producer"'),
        model=MODELS / "kimi-k3",
        python=python_buggy,
        import_nixl=False,
    )
    assert {f.id: f.severity for f in typo.findings}.get("kv-transfer-config-key") is Severity.error


def test_frontend_flags_of_0_32_are_known(python_fixed: str) -> None:
    """0.31+ define --host/--port/--api-key in entrypoints/launchers/cli_args.py: found by content."""
    from vllm_pd_doctor.knowledge.readers.serve_flags import _read_source

    table = _read_source(str(_vllm_dir(python_fixed)))
    for flag in ("host", "port", "api-key", "kv-transfer-config", "enable-prefix-caching"):
        assert table.known(flag), flag
    assert not table.known("no-such-flag-at-all")


def test_probe_and_verdict_agree_on_mamba_none(python_buggy: str) -> None:
    """The issue's case: --enable-prefix-caching --mamba-cache-mode none on 0.28.0 is exposed, and
    the probe (run with that mamba mode) reproduces it: never "not exposed" beside "reproduced"."""
    ktc = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
    tiny = Path(__file__).resolve().parents[2] / "assets" / "models" / "tiny-hybrid"
    r = core.check(
        prefill_cmd=f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve {tiny} --enable-prefix-caching "
        f"--mamba-cache-mode none --kv-transfer-config '{ktc}'",
        python=python_buggy,
        probe=True,
        import_nixl=False,
    )
    assert r.exposure.probe is not None and r.exposure.probe.reproduced is True, r.exposure.probe
    assert r.exposure.verdict is Verdict.exposed
