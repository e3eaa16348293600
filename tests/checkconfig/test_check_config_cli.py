"""`pd-doctor check-config` end to end in a subprocess: formats, exit codes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "check_config"
HYB = str(FIX / "models" / "granite-hybrid")
KTC_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
KTC_D = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
P = f"VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve {HYB} --port 8100 --kv-transfer-config '{KTC_P}'"
D = f"VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve {HYB} --port 8200 --kv-transfer-config '{KTC_D}'"


def test_list_rules(cli):
    proc = cli("check-config", "--list-rules", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and len(doc["rules"]) >= 15
    assert all({"id", "severity", "title", "fix", "refs"} <= set(r) for r in doc["rules"])
    table = cli("check-config", "--list-rules")
    assert table.returncode == 0 and "side-channel-port-collision" in table.stdout
    md = cli("check-config", "--list-rules", "-f", "markdown")
    assert md.stdout.startswith("| id | severity |")


def test_json_without_vllm_says_what_was_missing(cli):
    # The dev interpreter has no vLLM: the verdict is unknown, not an error; exit 0.
    proc = cli("check-config", "--prefill-cmd", P, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1
    assert doc["exposure"]["verdict"] == "unknown"
    assert doc["inputs"]["given"]["prefill_cmd"] is True
    assert doc["inputs"]["given"]["decode_cmd"] is False
    assert doc["inputs"]["given"]["installed_vllm"] is False
    assert set(doc["inputs"]["not_given"]) >= {"decode_cmd", "installed_vllm"}
    assert doc["inputs"]["model_source"] == "prefill command"
    assert doc["findings"][0]["id"] == "n1-truncation-unknown"


def test_markdown_and_table(cli):
    md = cli("check-config", "--prefill-cmd", P, "--decode-cmd", D.replace("5601", "5600"), "-f", "markdown")
    assert md.returncode == 1, md.stderr
    assert md.stdout.startswith("# pd-doctor check-config")
    assert "`side-channel-port-collision`" in md.stdout
    t = cli("check-config", "--prefill-cmd", P, "--decode-cmd", D.replace("5601", "5600"))
    assert t.returncode == 1
    assert "vLLM #53514" in t.stdout.splitlines()[0]
    assert "side-channel-port-collision" in t.stdout


def test_unknown_flag_warns_and_goes_on(cli):
    proc = cli("check-config", "--prefill-cmd", P + " --frobnicate 2", "-f", "json")
    assert proc.returncode == 0
    assert "--frobnicate" in proc.stderr
    assert "unknown-flag" in [f["id"] for f in json.loads(proc.stdout)["findings"]]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--prefill-cmd", "vllm serve M --kv-transfer-config '{\"kv_role\": kv_both}'"],
            "--kv-transfer-config: malformed JSON at line 1 column 13 (position 12)",
        ),
        (["--prefill-cmd", ""], "--prefill-cmd: empty command"),
        (["--decode-cmd", "VLLM_X=1"], "--decode-cmd: empty command"),
        (["--model", "/nonexistent/model"], "--model /nonexistent/model: no such file"),
        (["--config", str(FIX / "binary.bin")], "neither text nor YAML/JSON"),
        (["--config", str(FIX / "not_a_config.txt")], "no launch command found"),
        (["--config", str(FIX / "broken.yaml")], "malformed YAML"),
        (["--python", "/nonexistent/python"], "no such file"),
    ],
)
def test_bad_input(cli, args, needle):
    proc = cli("check-config", *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert needle in proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("error:") == 1


def test_does_not_import_vllm_or_torch():
    code = (
        "import sys\n"
        "from vllm_pd_doctor.checkconfig import core\n"
        f"r = core.check(prefill_cmd={P!r}, decode_cmd={D!r})\n"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules\n"
        "print(r.exposure.verdict)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "unknown"


def test_help(cli):
    proc = cli("check-config", "--help")
    assert proc.returncode == 0
    assert "Exit codes" in proc.stdout and "--prefill-cmd" in proc.stdout
