"""Bad input: one clear line, the documented exit code, no traceback (no vLLM needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["repro", "--python", "/nonexistent/python"], 2, "no such file"),
        (["repro", "--python", "/bin/true"], 2, "not a Python interpreter"),
        (["repro", "--prompt-len", "1"], 2, "--prompt-len 1"),
        (["repro", "--block-size", "0"], 2, "--block-size 0"),
        (["repro", "--connector", "lmcache"], 2, "unknown connector"),
        (["repro", "--kv-role", "kv_sideways"], 2, "--kv-role"),
        (["repro", "--model", "/nonexistent"], 2, "no such file or directory"),
        (["repro", "--trigger", "sideways"], 2, "--trigger sideways"),
        (["repro", "--platform", "tpu"], 2, "--platform"),
        (["repro", "--prompt-len", "9", "--blocks", "2"], 2, "--blocks both given"),
        (["repro", "--python", sys.executable], 3, "no vLLM"),
        (["report", "--vllm", "0.28.0", "--python", sys.executable, "--no-repro"], 2, "--vllm both given"),
        (["hotfix", "status", "--vllm", "0.28.0", "--python", sys.executable], 2, "--vllm both given"),
        (["check-config", "--vllm", "0.28.0", "--python", sys.executable], 2, "--vllm both given"),
    ],
)
def test_bad_input(cli, args, code, needle):
    proc = cli(*args, "--quiet")
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("error:") == 1


def test_non_executable_python(cli, tmp_path):
    f = tmp_path / "python"
    f.write_text("not a program\n")
    f.chmod(0o644)
    proc = cli("repro", "--python", str(f), "--quiet")
    assert proc.returncode == 2
    assert "--python" in proc.stderr and "Traceback" not in proc.stderr


def test_shell_script_is_not_python(cli, tmp_path):
    f = tmp_path / "python"
    f.write_text("#!/bin/sh\necho hello\n")
    f.chmod(0o755)
    proc = cli("repro", "--python", str(f), "--quiet")
    assert proc.returncode == 2
    assert "not a Python interpreter" in proc.stderr


def test_debug_shows_traceback(cli):
    proc = cli("repro", "--python", "/nonexistent/python", "--debug")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr


def test_help_without_vllm_importable(cli):
    # This interpreter has no vllm or torch; --help must work and import neither.
    code = (
        "import sys, vllm_pd_doctor.cli as c\n"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    proc = cli("--help")
    assert proc.returncode == 0
    assert "repro" in proc.stdout
    proc = cli("repro", "--help")
    assert proc.returncode == 0
    assert "Exit codes" in proc.stdout
