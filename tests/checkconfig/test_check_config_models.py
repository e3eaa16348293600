"""Model families from config.json's structure, and model ids through huggingface_hub (fast tier).

The Hub is a tiny HTTP server on 127.0.0.1 serving the real config files of
tests/fixtures/check_config/models at the Hub's URL layout (`/{org}/{name}/resolve/{rev}/config.json`),
reached through `HF_ENDPOINT`; the offline case uses the cache in tests/fixtures/hf-cache.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from vllm_pd_doctor.checkconfig import core
from vllm_pd_doctor.knowledge.models import resolve as hfmodel
from vllm_pd_doctor.knowledge.models.info import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures"
MODELS = FIX / "check_config" / "models"
KTC_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'

FAMILIES = {
    "granite-hybrid": True,
    "nemotron-h": True,
    "qwen3-next": True,
    "kimi-k3": True,
    "kimi-linear-48b": True,
    "jamba-v0.1": True,
    "lfm2-1.2b": True,
    "mamba-codestral-7b": True,
    "minimax-text-01": True,
    "qwen3-dense": False,
    "gpt-oss-20b": False,
    "gemma3-text": False,
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_from_structure(name: str) -> None:
    m = load_model(MODELS / name)
    assert m.hybrid is FAMILIES[name], m.hybrid_evidence
    assert m.source == "config.json structure"


def test_kimi_k3_nested_text_config() -> None:
    """vLLM #53706: the state layers are in text_config.linear_attn_config, the name says nothing."""
    m = load_model(MODELS / "kimi-k3")
    assert m.hybrid and m.hybrid_evidence.startswith("text_config:")
    assert "kda_layers" in m.hybrid_evidence
    assert m.architectures[0] == "KimiK3ForConditionalGeneration"


def test_nemotron3_pattern_with_moe_layers(tmp_path: Path) -> None:
    """Nemotron 3's `hybrid_override_pattern` also has E (MLP) and O (MoE) layers."""
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["NemotronHForCausalLM"], "hybrid_override_pattern": "MEMOM*EMO"})
    )
    assert load_model(tmp_path).hybrid is True


def test_name_alone_decides_nothing(tmp_path: Path) -> None:
    """A hybrid-sounding name without state layers is not hybrid; a plain name with them is."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text(
        json.dumps({"architectures": ["MambaLikeNameForCausalLM"], "model_type": "mamba_like"})
    )
    assert load_model(tmp_path / "a").hybrid is False
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(
        json.dumps({"architectures": ["PlainForCausalLM"], "layer_types": ["mamba", "attention"]})
    )
    assert load_model(tmp_path / "b").hybrid is True


# --- the Hub, served locally ------------------------------------------------------------------

REPOS = {"moonshotai/Kimi-K3": "kimi-k3", "Qwen/Qwen3-0.6B": "qwen3-dense", "gated/model": None}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class _Hub(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, body: bool) -> None:
        type(self).hits.append(f"{self.command} {self.path}")
        parts = self.path.split("?")[0].strip("/").split("/")
        repo = "/".join(parts[:2])
        if len(parts) != 5 or parts[2] != "resolve" or repo not in REPOS:
            self.send_response(401)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("X-Error-Message", "Repository not found")
            self.end_headers()
            return
        if REPOS[repo] is None:
            self.send_response(403)
            self.send_header("X-Error-Code", "GatedRepo")
            self.send_header("X-Error-Message", "Access to model gated/model is restricted.")
            self.end_headers()
            return
        data = (MODELS / str(REPOS[repo]) / "config.json").read_bytes()
        if parts[4] != "config.json":
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self) -> None:
        self._answer(False)

    def do_GET(self) -> None:
        self._answer(True)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _Hub.hits = []
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def test_hub_download_then_cache(hub: str) -> None:
    r = hfmodel.resolve("moonshotai/Kimi-K3")
    assert r.source == "hub" and r.endpoint == hub and hub in r.described
    assert json.loads(r.config_path.read_text()) == json.loads(
        (MODELS / "kimi-k3" / "config.json").read_text()
    )
    assert any("config.json" in h for h in _Hub.hits)
    n = len(_Hub.hits)
    again = hfmodel.resolve("moonshotai/Kimi-K3")
    assert again.source == "hf-cache" and len(_Hub.hits) == n  # the second time: no request


def test_hub_errors_are_one_line(hub: str) -> None:
    with pytest.raises(hfmodel.ModelNotResolved, match="no such model") as e:
        hfmodel.resolve("nobody/nothing")
    assert "HF_TOKEN" in (e.value.hint or "")
    with pytest.raises(hfmodel.ModelNotResolved, match="gated") as e:
        hfmodel.resolve("gated/model")
    assert "HF_TOKEN" in (e.value.hint or "")


def test_unreachable_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(hfmodel.ModelNotResolved, match="could not be fetched") as e:
        hfmodel.resolve("moonshotai/Kimi-K3")
    assert "HF_HUB_OFFLINE" in (e.value.hint or "")


def test_offline_uses_the_cache_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_CACHE", str(FIX / "hf-cache"))
    r = hfmodel.resolve("ibm-granite/granite-4.0-h-tiny")
    assert r.source == "hf-cache" and "HF_HUB_OFFLINE" in r.described
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(hfmodel.ModelNotResolved, match="HF_HUB_OFFLINE is set"):
        hfmodel.resolve("moonshotai/Kimi-K3")


def test_check_config_resolves_the_id_through_the_hub(hub: str) -> None:
    """vLLM #53706's setup named by id: the model is hybrid, and the report says where it came from."""
    r = core.check(
        prefill_cmd=f"vllm serve moonshotai/Kimi-K3 --enable-prefix-caching --kv-transfer-config '{KTC_P}'",
        import_nixl=False,
    )
    assert r.model is not None and r.model.hybrid
    assert r.inputs.model_source is not None and hub in r.inputs.model_source
    assert r.model.resolved_from is not None and "downloaded" in r.model.resolved_from
