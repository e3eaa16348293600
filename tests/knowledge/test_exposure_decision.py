"""knowledge/exposure: the one exposure decision check-config and status both make (fast tier)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from vllm_pd_doctor.checkconfig import rules
from vllm_pd_doctor.checkconfig.exposure import exposure
from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.deployment.parse.loader import launch_from_command
from vllm_pd_doctor.knowledge import exposure as kx
from vllm_pd_doctor.knowledge.models.info import load_model, model_from_config
from vllm_pd_doctor.results.checkconfig import Verdict, VllmSource
from vllm_pd_doctor.results.launch import Server
from vllm_pd_doctor.status import compare, record

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
DSV2 = ROOT / "exposure" / "deepseek-v2-lite"  # deepseek-ai/DeepSeek-V2-Lite's config (SOURCE.md)
HYBRID = ROOT / "check_config" / "models" / "granite-hybrid"
VENDOR = (
    '{"kv_connector":"NixlConnector","kv_connector_module_path":"vendor_pkg.conn","kv_role":"kv_producer"}'
)
NIXL_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
VERDICT = {Verdict.exposed: kx.EXPOSED, Verdict.not_exposed: kx.NOT_EXPOSED, Verdict.unknown: kx.UNKNOWN}


def _check_config(ktc: str, model_dir: Path, version: str | None) -> str:
    launch = launch_from_command(
        f"vllm serve M --port 8100 --enable-prefix-caching --kv-transfer-config '{ktc}'",
        what="--prefill-cmd",
        role="prefill",
    )
    s = Server(name="prefill", config=parse.parse_launch(launch))
    vllm = VllmSource(python="py", version=version, path=None, sites=()) if version else None
    c = rules.Context(servers=(s,), model=load_model(model_dir), vllm=vllm, nixl=None)
    return VERDICT[exposure(c).sides[0].verdict]


def _status(connector: str | None, model_dir: Path, version: str | None) -> str:
    """status's decision from a running prefill's facts: connector (None: a vendor plugin, nothing
    NIXL seen), prefix caching on, the model's config.json, no release source here."""
    doc = json.loads((model_dir / "config.json").read_text())
    info = model_from_config(doc, str(model_dir / "config.json"))
    dec = kx.scenario(
        kx.N1,
        version,
        connector,
        info.hybrid,
        extra=(
            kx.Fact(kx.CONNECTOR, None if connector is None else True, "as seen"),
            kx.Fact(kx.PRODUCER, True, "prefill"),
            kx.Fact(kx.PREFIX_CACHING, True, "on"),
        ),
    )
    return dec.verdict


def test_vendor_connector_with_a_pure_attention_model_is_not_exposed_in_both() -> None:
    assert _check_config(VENDOR, DSV2, "0.28.0") == kx.NOT_EXPOSED
    assert _status(None, DSV2, "0.28.0") == kx.NOT_EXPOSED
    c = _check_config(VENDOR, DSV2, None)
    assert c == _status(None, DSV2, None) == kx.NOT_EXPOSED  # the model alone decides
    # the lookalike: the same vendor connector with a hybrid model stays unknown in both
    assert _check_config(VENDOR, HYBRID, "0.28.0") == _status(None, HYBRID, "0.28.0") == kx.UNKNOWN


def test_recorded_runs_decide_the_release_when_its_source_is_not_here() -> None:
    # 0.28.0's recorded n1-truncation run fails for nixl, 0.32.0's holds; 0.30.1 was never run
    for version, want in (("0.28.0", kx.EXPOSED), ("0.32.0", kx.NOT_EXPOSED), ("0.30.1", kx.UNKNOWN)):
        assert _check_config(NIXL_P, HYBRID, version) == _status("nixl", HYBRID, version) == want, version
    assert _check_config(NIXL_P, DSV2, "0.28.0") == _status("nixl", DSV2, "0.28.0") == kx.NOT_EXPOSED


def test_status_decides_a_replayed_028_prefill_without_its_source(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(compare, "_local_vllm", lambda version, python: None)
    wins, _, _ = record.replay(ROOT / "status" / "b-version-block-mismatch")
    p = next(w for w in wins if w.role == "prefill")
    dec = compare.decision_53514(p, None)
    assert dec is not None and dec.verdict == kx.EXPOSED
    rel = next(f for f in dec.facts if f.topic == kx.RELEASE)
    assert rel.decided_by == kx.RECORDED and "0.28.0" in rel.reason
    assert [f.id for f in compare.exposure_53514(p, None)] == ["exposed-53514"]
    # the same engine serving a pure-attention model: no finding at all (not "not decided")
    dense = replace(p, after=replace(p.after, model_root=str(DSV2)))  # type: ignore[type-var]
    assert list(compare.exposure_53514(dense, None)) == []
