"""`pd-doctor report` without vLLM: redaction, log excerpts, rendering (golden), bundle, CLI."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.report import bundle, collect, docs, logs
from vllm_pd_doctor.report.redact import RedactionContext, Redactor, hosts_in

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "report"

PREFIX = "(EngineCore_DP0 pid=4242) ERROR 11-30 22:31:40 [core.py:710] "
TRACEBACK = """Traceback (most recent call last):
  File "/home/alice/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 701, in run_engine_core
    engine_core.run_busy_loop()
  File "/home/alice/venv/lib/python3.11/site-packages/vllm/v1/core/sched/scheduler.py", line 967, in schedule
    assert num_new_tokens > 0
           ^^^^^^^^^^^^^^^^^^
AssertionError"""


def engine_log(traceback: str, extra: str = "") -> str:
    """A log framed like a vLLM EngineCore crash, around a given traceback."""
    head = [
        "(EngineCore_DP0 pid=4242) INFO 11-30 22:31:00 [core.py:95] Initializing a V1 LLM engine",
        "(EngineCore_DP0 pid=4242) INFO 11-30 22:31:01 [nixl_connector.py:812] NIXL compatibility "
        "check passed (hash 1234)",
        "(EngineCore_DP0 pid=4242) INFO 11-30 22:31:01 [config.py:400] Setting attention block "
        "size to 528 tokens to ensure that attention page size is >= mamba page size.",
        *[
            f"(APIServer pid=4200) INFO 11-30 22:31:{i:02d} [loggers.py:1] throughput {i}"
            for i in range(10, 30)
        ],
        "(EngineCore_DP0 pid=4242) ERROR 11-30 22:31:40 [dump_input.py:69] Dumping input data for "
        "V1 LLM engine (v0.28.0)",
        "(EngineCore_DP0 pid=4242) ERROR 11-30 22:31:40 [dump_input.py:76] Dumping scheduler "
        "output for model execution: SchedulerOutput(scheduled_new_reqs=[])",
        PREFIX + "EngineCore encountered a fatal error.",
    ]
    tb = [PREFIX + line for line in traceback.splitlines()]
    tail = [
        "(APIServer pid=4200) ERROR 11-30 22:31:41 [async_llm.py:480] AsyncLLM output_handler failed.",
        "(APIServer pid=4200) INFO 11-30 22:31:41 [launcher.py:99] Shutting down",
    ]
    return "\n".join([*head, *tb, *tail, extra]) + "\n"


# --- redaction -------------------------------------------------------------------------------


def test_redacts_secrets_home_hosts_ips_and_counts_by_kind():
    cmd = (
        "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123 vllm serve /home/alice/m --api-key s3cr3tval "
        "--host gpu-node-17.corp.example.com --kv-ip 10.1.2.3"
    )
    r = Redactor(RedactionContext(home="/home/alice", hosts=tuple(hosts_in(cmd))))
    out = r.text(cmd + " then gpu-node-17 at 10.1.2.3:5600, 127.0.0.1, ::1, fe80::1ff:fe23:4567:890a")
    for secret in (
        "hf_abcdefghijklmnopqrstuvwxyz123",
        "/home/alice",
        "s3cr3tval",
        "gpu-node-17",
        "10.1.2.3",
        "fe80::1ff",
    ):
        assert secret not in out
    assert "127.0.0.1" in out and "::1" in out and "~/m" in out
    s = r.summary()
    assert s["hf_token"] == 1 and s["secret"] == 1 and s["home"] == 1 and s["ip"] == 2
    assert s["host"] >= 2


def test_redaction_leaves_ordinary_log_text_alone():
    r = Redactor(RedactionContext(home="/home/alice"))
    text = (
        "max_num_batched_tokens=8192 token budget 256 assert num_new_tokens > 0 at 22:31:39 "
        "vllm/v1/core/sched/scheduler.py:967 Linux-6.18.44-x86_64"
    )
    assert r.text(text) == text
    assert r.summary() == {}


def test_secret_named_keys_and_env_values():
    r = Redactor(RedactionContext())
    doc = r.obj({"api_key": "xyz123", "nested": [{"password": "hunter2!"}], "n": 3})
    assert doc == {"api_key": "<secret-1>", "nested": [{"password": "<secret-2>"}], "n": 3}
    assert r.env_value("AWS_SECRET_ACCESS_KEY", "abc/def+ghi") == "<secret-3>"
    assert r.env_value("OTHER_SECRET", "xyz123") == "<secret-1>"  # same value, same placeholder
    assert r.env_value("UCX_TLS", "rc,cuda_copy") == "rc,cuda_copy"


def test_keep_hosts():
    r = Redactor(RedactionContext(hosts=("gpu-node-17",), redact_hosts=False))
    assert r.text("gpu-node-17 10.1.2.3") == "gpu-node-17 10.1.2.3"


# --- logs ------------------------------------------------------------------------------------


def test_log_excerpts_find_traceback_dump_input_and_signatures():
    found = logs.find(engine_log(TRACEBACK))
    keys = dict(found.signatures)
    assert "nixl-p-side-truncation-53514" in keys, keys  # triage's class, the report's verdict
    tb = [e for e in found.excerpts if e.kind == "traceback"]
    assert len(tb) == 1
    text = "\n".join(tb[0].lines)
    assert "EngineCore encountered a fatal error" in text
    assert "assert num_new_tokens > 0" in text and text.rstrip().endswith("AssertionError")
    assert "Shutting down" not in text
    assert any(e.kind == "dump_input" for e in found.excerpts) or "dump_input" in tb[0].reasons
    assert not any("throughput 20" in line for e in found.excerpts for line in e.lines)


def test_log_cap_marks_the_cut():
    text = "".join(f"line {i}\n" for i in range(10000))
    capped, cut = logs.cap(text, 1000)
    assert cut > 0 and len(capped) < 1200
    assert "pd-doctor cut" in capped and capped.startswith("line 0") and capped.endswith("line 9999\n")
    assert logs.cap("short", 1000) == ("short", 0)


# --- collectors that degrade ---------------------------------------------------------------


def test_missing_ucx_info_degrades(tmp_path):
    c = collect.ucx_version(None, 5, path=str(tmp_path))
    assert not c.ok and "not found" in (c.why or "")


def test_failing_and_hanging_ucx_info_degrade(tmp_path):
    exe = tmp_path / "ucx_info"
    exe.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    c = collect.ucx_version(None, 5, path=str(tmp_path))
    assert not c.ok and "code 3" in (c.why or "") and "boom" in (c.why or "")
    exe.write_text("#!/bin/sh\nsleep 30\n")
    c = collect.ucx_version(None, 0.5, path=str(tmp_path))
    assert not c.ok and "did not finish" in (c.why or "")


def test_unreadable_log_degrades(tmp_path):
    assert not collect.read_log(tmp_path).ok
    c = collect.read_log(tmp_path / "missing.log")
    assert not c.ok and "no such file" in (c.why or "")
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)  # read as a bounded stream: refused at once, never blocks on a writer
    c = collect.read_log(fifo)
    assert not c.ok and "FIFO" in (c.why or "")


def test_big_log_keeps_head_and_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(collect, "READ_LIMIT", 4000)
    big = tmp_path / "big.log"
    big.write_text("HEAD\n" + "x" * 20_000 + "\nAssertionError: assert num_new_tokens > 0\n")
    c = collect.read_log(big)
    text, size = c.value
    assert c.ok and size == big.stat().st_size and len(text) < 4200
    assert text.startswith("HEAD") and text.endswith("num_new_tokens > 0\n") and "did not read" in text


# --- launch commands: parsed by check-config only, in this process -----------------------


def test_rebuilt_command_parses_to_the_same_config():
    text = (
        "UCX_TLS=rc,tcp VLLM_NIXL_SIDE_CHANNEL_PORT=5600 python -m "
        "vllm.entrypoints.openai.api_server --model ./m --port 8100 --no-enable-prefix-caching "
        "--some-new-flag 3 --kv-transfer-config.kv_role kv_producer "
        '--kv-transfer-config \'{"kv_connector": "NixlConnector", "x": "a b"}\''
    )
    s = parse.parse_command(text, role="prefill")
    line = docs.command_line(s)
    assert line.startswith("UCX_TLS=rc,tcp VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve \\\n")
    again = parse.parse_command(line, role="prefill")
    assert (again.values, again.env, again.unknown_flags, again.argv) == (
        s.values,
        s.env,
        s.unknown_flags,
        s.argv,
    )
    assert again.kv_transfer_config == {"kv_connector": "NixlConnector", "x": "a b", "kv_role": "kv_producer"}


def test_config_yaml_fills_launch_commands_and_variables(cli, tmp_path):
    """A --config YAML in check-config's documented form (args + env mappings): the launch
    commands and the UCX/NIXL variables come from check-config's parse of it."""
    out = tmp_path / "b"
    proc = cli(
        "report",
        "--python",
        sys.executable,
        "--no-repro",
        "--quiet",
        "-o",
        str(out),
        "--config",
        str(FIXTURES / "pd_hybrid_nixl.yaml"),
    )
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    commands = md.split("#### Launch commands")[1].split("####")[0]
    assert "Not given" not in commands
    assert "Prefill:" in commands and "Decode:" in commands
    # public form: the model path is a placeholder, the port (an int flag in vLLM) is kept
    assert re.search(r"vllm serve <model-\d+> \\\n  --port 8100", commands), commands
    assert '"kv_role": "kv_producer"' in commands and '"kv_role": "kv_consumer"' in commands
    assert "none set" not in md
    for row in (
        "| `UCX_TLS` | `tcp` | prefill command |",
        "| `UCX_TLS` | `tcp` | decode command |",
        "| `UCX_NET_DEVICES` | `all` | prefill command |",
        "| `VLLM_NIXL_SIDE_CHANNEL_PORT` | `5601` | decode command |",
    ):
        assert row in md, row
    assert re.search(r"\| `VLLM_NIXL_SIDE_CHANNEL_HOST` \| `<host-\d+>` \| prefill command \|", md)
    assert "`ucx-tcp-only`" in md.split("#### Configuration check")[1]
    for planted in ("PlantedApiKey42", "gpu-node-17"):
        for f in out.rglob("*"):
            if f.is_file():
                assert planted not in f.read_text(), (f, planted)
    doc = json.loads((out / "report.json").read_text())
    assert [c["role"] for c in doc["commands"]] == ["prefill", "decode"]
    assert doc["commands"][0]["kv_transfer_config"]["kv_role"] == "kv_producer"
    assert doc["check_config"]["value"]["exposure"]["verdict"] == "unknown"  # no vLLM here
    assert doc["bundle"] == "public" and not (out / "raw").exists()
    assert (
        doc["check_config"]["value"]["command"] == "check-config" and doc["check_config"]["value"]["findings"]
    )


def test_unparsable_command_is_shown_with_check_configs_reason(cli, tmp_path):
    out = tmp_path / "b"
    proc = cli(
        "report",
        "--python",
        sys.executable,
        "--no-repro",
        "--quiet",
        "-o",
        str(out),
        "--prefill-cmd",
        "vllm serve m --kv-transfer-config '{\"kv_role\": '",
        "--decode-cmd",
        "vllm serve m --port 8200",
    )
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert "check-config could not read them: --kv-transfer-config: malformed JSON" in md
    assert "vllm serve m --port 8200" in md
    assert "could not collect: --kv-transfer-config: malformed JSON" in md


def test_report_starts_no_pd_doctor_child(monkeypatch, tmp_path):
    """check-config and the repro run through their cores in this process: every child the
    report starts is an interpreter or a tool, never pd-doctor itself."""
    started: list[list[str]] = []
    real = subprocess.Popen

    class Spy(real):  # type: ignore[misc,valid-type]
        def __init__(self, args, *a, **k):  # type: ignore[no-untyped-def]
            started.append([str(x) for x in ([args] if isinstance(args, (str, bytes)) else args)])
            super().__init__(args, *a, **k)

    monkeypatch.setattr(subprocess, "Popen", Spy)
    monkeypatch.chdir(ROOT)
    inputs = bundle.ReportInputs(
        python=sys.executable,
        config=FIXTURES / "pd_hybrid_nixl.yaml",
        repro=True,
        environ={"PATH": str(tmp_path)},
        timeout=60,
    )
    g = bundle.gather(inputs, lambda _: None)
    assert started, "the collectors start interpreters"
    for argv in started:
        assert not any(a in ("vllm_pd_doctor", "pd-doctor") or a.endswith("/pd-doctor") for a in argv), argv
    assert g.check is not None and [s.name for s in g.servers] == ["prefill", "decode"]


def test_write_zip_and_dir(tmp_path):
    files = {"report.md": "x", "raw/logs/a.log": "y"}
    z = bundle.write(tmp_path / "b.zip", files)
    with zipfile.ZipFile(z) as f:
        assert sorted(f.namelist()) == ["raw/logs/a.log", "report.md"]
    d = bundle.write(tmp_path / "b", files)
    assert (d / "raw" / "logs" / "a.log").read_text() == "y"


# --- the command, with an interpreter that has no vLLM ---------------------------------------


def test_no_vllm_python_and_unreadable_logs_degrade(cli, tmp_path):
    out = tmp_path / "bundle"
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = cli(
        "report",
        "--python",
        sys.executable,
        "-o",
        str(out),
        "--quiet",
        env={"PATH": f"{empty}{os.pathsep}{Path(sys.executable).parent}"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    md = (out / "report.md").read_text()
    assert "could not collect: no vLLM in" in md
    assert "- UCX (`ucx_info -v`): could not collect: `ucx_info` not found" in md
    assert md.count("could not collect: ") >= 5
    doc = json.loads((out / "report.json").read_text())
    assert doc["repro"]["collected"] is False
    # a missing or non-regular --log is bad input now (exit 2, issue 12): tests/test_hostile.py


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--config", "/nonexistent.yaml"], "no such file"),
        (["-o", "/proc/pd-doctor-nope/b"], "not a writable directory"),
        (["-o", "tests"], "not empty"),
        (["--python", "/nonexistent/python"], "no such file"),
    ],
)
def test_bad_input(cli, args, needle):
    proc = cli("report", *args, "--no-repro", "--quiet")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_private_bundle_is_named_so_and_lists_what_it_copies(cli, tmp_path):
    out = tmp_path / "b.zip"
    proc = cli(
        "report",
        "--python",
        sys.executable,
        "--no-repro",
        "--private",
        "-o",
        str(out),
        "--config",
        str(FIXTURES / "pd_hybrid_nixl.yaml"),
    )
    assert proc.returncode in (0, 1), proc.stderr
    written = tmp_path / "b-PRIVATE.zip"
    assert proc.stdout.strip() == str(written) and written.exists() and not out.exists()
    assert "PRIVATE bundle, not for posting" in proc.stderr and "raw/config.yaml" in proc.stderr
    with zipfile.ZipFile(written) as z:
        assert "raw/config.yaml" in z.namelist()
        assert json.loads(z.read("report.json"))["bundle"] == "private"
        raw = z.read("raw/config.yaml").decode()
    assert "PlantedApiKey42" not in raw and "gpu-node-17" not in raw  # the second line still holds
    assert "--enforce-eager" in raw  # otherwise verbatim


def test_reproduction_runs_the_scenario_triage_chose(cli, tmp_path):
    """A log with the abort race (prime-rl PR #2843's traceback): triage's next step is
    `repro --scenario abort-race`, and the report's reproduction runs that scenario."""
    from vllm_pd_doctor.report import docs

    assert docs.scenario_of("pd-doctor repro --scenario abort-race") == "abort-race"
    assert docs.scenario_of("pd-doctor repro --scenario nope") is None
    assert docs.scenario_of("pd-doctor status --prefill-url URL") is None
    out = tmp_path / "bundle"
    log = Path(__file__).resolve().parents[1] / "fixtures" / "triage" / "prime-rl-2843-abort-race.log"
    proc = cli("report", "--python", sys.executable, "-o", str(out), "--quiet", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "report.json").read_text())
    steps = [s["command"] for s in doc["reproduction"]]
    assert any(s.startswith("pd-doctor repro --vllm ") and s.endswith("--scenario abort-race") for s in steps)
    assert "--scenario abort-race" in (out / "report.md").read_text()
