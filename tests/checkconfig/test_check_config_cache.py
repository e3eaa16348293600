"""What check-config reads from an installed vLLM is cached, and read again when it changes."""

from __future__ import annotations

import os
from pathlib import Path

from vllm_pd_doctor.knowledge.readers import inspect_vllm, source_cache
from vllm_pd_doctor.results.checkconfig import SourceFact, TruncationSite, VllmSource


def _fake_vllm(root: Path) -> Path:
    v = root / "vllm"
    nixl = v / "distributed" / "kv_transfer" / "kv_connector" / "v1" / "nixl"
    nixl.mkdir(parents=True)
    (v / "envs.py").write_text('x = os.getenv("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600")\n')
    (nixl / "base_worker.py").write_text(
        "class W:\n    def _build_mamba_remote(self, meta, tp_ratio):\n        pass\n"
    )
    (nixl / "pull_scheduler.py").write_text(
        "class S:\n    def get_num_new_matched_tokens(self, r):\n"
        "        self._truncate_mamba_request_for_prefill(r)\n"
        "    def _truncate_mamba_request_for_prefill(self, r):\n        pass\n"
    )
    return v


def test_read_source_cached_until_a_file_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("PD_DOCTOR_HOME", str(tmp_path / "home"))
    v = _fake_vllm(tmp_path)
    first = inspect_vllm.read_source("py", str(v), "9.9.9")
    assert first.side_channel_port_default == 5600
    assert first.mamba_hetero_tp is not None and first.mamba_hetero_tp.supported
    assert [s.caller for s in first.sites] == ["get_num_new_matched_tokens"]
    assert (tmp_path / "home" / "check-config" / "vllm-source.json").is_file()
    calls = []

    def read() -> VllmSource:
        calls.append(1)
        return first

    stamp = source_cache.stamp(v, ("envs.py",), inspect_vllm.CONNECTOR_DIRS)
    again = source_cache.cached("other-py", v, "9.9.9", stamp, read)
    assert calls == [] and again.python == "other-py" and again.sites == first.sites
    sched = v / "distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py"
    sched.write_text(sched.read_text().replace("get_num_new_matched_tokens", "on_new_request"))
    os.utime(sched, ns=(1, 10**18))
    fixed = inspect_vllm.read_source("py", str(v), "9.9.9")
    assert [s.caller for s in fixed.sites] == ["on_new_request"]


def test_cache_round_trip_keeps_every_type(tmp_path, monkeypatch):
    monkeypatch.setenv("PD_DOCTOR_HOME", str(tmp_path))
    src = VllmSource(
        python="py",
        version="1",
        path="/v",
        connectors=("A",),
        kv_roles=("r",),
        sites=(TruncationSite("nixl", "h", "c", None, "f.py", 3),),
        mamba_hetero_tp=SourceFact(False, "w.py:1", "no"),
        attention_backend_env=True,
    )
    source_cache.cached("py", Path("/v"), "1", [1, 2, 3], lambda: src)
    got = source_cache.cached("py", Path("/v"), "1", [1, 2, 3], lambda: VllmSource("x", None, None))
    assert got == src
