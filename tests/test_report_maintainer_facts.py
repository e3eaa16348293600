"""The public bundle keeps what a maintainer needs (issue 28 item 6, issue 24 item 7) while what
identifies the user stays out, including names that appear only in FILE names.

Planted facts: the public model id (in the Hub cache, tests/fixtures/hf-cache), vLLM versions,
frames (installed and from a source checkout), logger locations, kv-transfer-config, TP,
timestamps (vLLM's and ISO), exception lines, the EngineDeadError traceback of a log triage does
not recognise (kubectl/stern `pod container` prefix, as in vLLM issue threads), and the NIXL
compatibility hashes (equality across P and D shown by placeholders). Planted identifiers: a host
named only in a log's file name, a cluster named only in the config's file name. The log lines
follow vLLM 0.32.0's formats (base_worker.py's hash-mismatch RuntimeError, async_llm.py's
EngineDeadError); every planted value is our own invention.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from vllm_pd_doctor.report import bundle

ROOT = Path(__file__).resolve().parents[1]
HF_CACHE = ROOT / "tests" / "fixtures" / "hf-cache"

HOST_ONLY_IN_FILE_NAME = "acmeplantgpu07"
CLUSTER_ONLY_IN_FILE_NAME = "prodplantcluster9"
HASH_P = "3f2a9c1b4d5e6f708192a3b4c5d6e7f80112233445566778899aabbccddeeff0"
HASH_D = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
ENGINE_P = "7c9e6679-7425-40de-944b-e07fc1f90ae7"

KTC_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
KTC_D = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
SCRIPT = f"""#!/bin/bash
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve Qwen/Qwen3-0.6B --port 8100 --tensor-parallel-size 2 \\
  --kv-transfer-config '{KTC_P}' &
VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve Qwen/Qwen3-0.6B --port 8200 --tensor-parallel-size 2 \\
  --kv-transfer-config '{KTC_D}' &
wait
"""


def prefill_log() -> str:
    pre = "(EngineCore_DP0 pid=311) "
    return "\n".join(
        [
            "2026-11-30T22:58:10.120Z INFO 11-30 22:58:10 [api_server.py:1] vLLM API server version 0.32.0",
            f"{pre}INFO 11-30 22:58:11 [core.py:95] Initializing a V1 LLM engine (v0.32.0) with config: "
            "model='Qwen/Qwen3-0.6B', dtype=torch.bfloat16, tensor_parallel_size=2",
            f"{pre}INFO 11-30 22:58:12 [base_worker.py:516] Initializing NIXL worker {ENGINE_P}",
            f"{pre}DEBUG 11-30 22:58:12 [metadata.py:205] NIXL compatibility hash: {HASH_P} "
            "(model=Qwen/Qwen3-0.6B, dtype=torch.bfloat16, num_kv_heads=8, cache_dtype=auto, "
            "attn_backend=FLASH_ATTN)",
            f"{pre}WARNING 11-30 22:58:12 [hooks.py:12] a hook warned",
        ]
    )


def decode_log() -> str:
    pod = "ms-pd-decode-6c8f9 vllm "
    api = pod + "(APIServer pid=1) ERROR 10-27 22:25:30 [serving_chat.py:1100] "
    core = pod + "(EngineCore_DP0 pid=296) ERROR 10-27 22:25:30 [core.py:710] "
    return "\n".join(
        [
            pod + "(APIServer pid=1) INFO 10-27 22:25:01 [api_server.py:1] vLLM API server version 0.32.0",
            core + "EngineCore encountered a fatal error.",
            core + "Traceback (most recent call last):",
            core + '  File "/app/src/vllm/vllm/v1/engine/core.py", line 701, in run_engine_core',
            core + "    engine_core.run_busy_loop()",
            core + '  File "/app/src/vllm/vllm/distributed/kv_transfer/kv_connector/v1/nixl/'
            'base_worker.py", line 1080, in _nixl_handshake',
            core + "    raise RuntimeError(",
            core + f"RuntimeError: NIXL compatibility hash mismatch. Local: {HASH_D}, Remote: {HASH_P}. "
            "Prefill and decode instances have incompatible configurations.",
            api + "Error in chat completion stream generator.",
            api + "Traceback (most recent call last):",
            api + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py", line 387, '
            "in generate",
            api + "    out = q.get_nowait() or await q.get()",
            api + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
            "See stack trace (above) for the root cause.",
        ]
    )


FACTS = (
    "Qwen/Qwen3-0.6B",  # a public Hub id (in the Hub cache): kept as written
    "0.32.0",
    "--tensor-parallel-size 2",
    "NixlConnector",
    "kv_producer",
    "kv_consumer",
    "2026-11-30T22:58:10.120Z",  # an ISO timestamp
    "11-30 22:58:12",  # vLLM's own
    "10-27 22:25:30",
    "hooks.py:12",  # a logger location
    "base_worker.py:516",
    "<src>/vllm/v1/engine/core.py",  # a frame from a source checkout, from the package on
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py",
    "<dist-packages>/vllm/v1/engine/async_llm.py",
    "line 387",
    "RuntimeError: NIXL compatibility hash mismatch",
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue",
    "Error in chat completion stream generator",
    "async_llm.py:387 in generate (vllm.v1.engine.exceptions.EngineDeadError)",  # the origin beside it
    "base_worker.py:1080 in _nixl_handshake (RuntimeError)",
)


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_CACHE))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    p = tmp_path / f"prefill-{HOST_ONLY_IN_FILE_NAME}.log"
    d = tmp_path / "decode.log"
    cfg = tmp_path / f"pd-{CLUSTER_ONLY_IN_FILE_NAME}.sh"
    p.write_text(prefill_log() + "\n", encoding="utf-8")
    d.write_text(decode_log() + "\n", encoding="utf-8")
    cfg.write_text(SCRIPT, encoding="utf-8")
    inputs = bundle.ReportInputs(
        python=sys.executable, config=cfg, logs=(p, d), repro=False, timeout=60, environ={}, home="/home/x"
    )
    g = bundle.gather(inputs, lambda _: None)
    _, out = bundle.build(inputs, g, created="2026-01-01 00:00:00 UTC")
    return out


def test_no_maintainer_fact_is_lost(files: dict[str, str]) -> None:
    both = files["report.md"] + files["report.json"]
    assert [f for f in FACTS if f not in both] == []


def test_names_only_in_file_names_never_show(files: dict[str, str]) -> None:
    for name, text in files.items():
        for planted in (HOST_ONLY_IN_FILE_NAME, CLUSTER_ONLY_IN_FILE_NAME, "/home/x", "/app/src"):
            assert planted not in name and planted not in text, (planted, name)
    assert "prefill-<name-1>.log" in files["report.md"]  # the known word kept, the rest a placeholder


def test_hash_equality_across_p_and_d_is_shown_by_placeholders(files: dict[str, str]) -> None:
    doc = json.loads(files["report.json"])
    ids = {(lg["given_as"].split(" ")[1], w): ph for lg in doc["logs"] for w, ph in lg["identities"]}
    p_hash, d_local, d_remote = (
        ids[("1", "compatibility hash")],
        ids[("2", "compatibility hash (local)")],
        ids[("2", "compatibility hash (remote)")],
    )
    assert re.fullmatch(r"<[a-z]+-\d+>", p_hash), ids
    assert p_hash == d_remote != d_local  # P's own hash is the one D received; D's differs
    assert HASH_P not in files["report.md"] and HASH_D not in files["report.md"]
    assert (
        "Handshake identities" in files["report.md"]
        and "2 different compatibility hashes" in files["report.md"]
    )
    assert p_hash in files["report.md"].split("#### Log excerpts")[1]  # the same placeholder in the excerpt


def test_unrecognised_log_keeps_its_tracebacks_and_error_lines(files: dict[str, str]) -> None:
    doc = json.loads(files["report.json"])
    decode = next(lg for lg in doc["logs"] if lg["given_as"].startswith("log 2"))
    kinds = [e["kind"] for e in decode["excerpts"]]
    assert kinds.count("traceback") >= 1
    text = "\n".join(e["text"] for e in decode["excerpts"])
    assert text.count("Traceback (most recent call last)") == 2
    assert all(e["origin"] for e in decode["excerpts"])
