"""`pd-doctor`'s start-up stays light: `import vllm_pd_doctor.cli` (and building the command, as
--help and every run do) imports no core machinery, and a plain check-config run does not import
pydantic through typer's option coercion. Each check runs in a fresh interpreter (no vLLM)."""

from __future__ import annotations

import json
import subprocess
import sys

# Imported where used (commands, cores), never at `import vllm_pd_doctor.cli`.
LAZY = (
    "vllm",
    "torch",
    "psutil",
    "yaml",
    "rich",
    "markdown_it",
    "pydantic",
    "huggingface_hub",
    "httpx",
    "detect_secrets",
    "packaging",
    "vllm_pd_doctor.checkconfig",
    "vllm_pd_doctor.repro.hotfix",
    "vllm_pd_doctor.infra.envs",
    "vllm_pd_doctor.repro.matrix",
    "vllm_pd_doctor.repro.inprocess",
    "vllm_pd_doctor.results",
    "vllm_pd_doctor.report",
    "vllm_pd_doctor.triage",
    "vllm_pd_doctor.infra.tracebacks",
)


def _loaded(code: str) -> set[str]:
    """The LAZY modules (or their submodules) loaded after running `code` in a child."""
    script = (
        "import json, sys\n"
        f"{code}\n"
        f"lazy = {LAZY!r}\n"
        "print(json.dumps(sorted({l for l in lazy for m in list(sys.modules) "
        "if m == l or m.startswith(l + '.')})))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "HF_HUB_OFFLINE": "1", "TERM": "dumb"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def test_import_cli_and_build_the_command_is_light() -> None:
    assert _loaded("from vllm_pd_doctor import cli\ncli.command()") == set()


def test_check_config_run_skips_pydantic() -> None:
    """Parsing the options of a real run (str options, an enum, absent ones) needs no pydantic."""
    code = (
        "import contextlib, io\n"
        "from vllm_pd_doctor import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    cli.main(['check-config', '--list-rules', '--format', 'json', '--quiet'])\n"
    )
    assert "pydantic" not in _loaded(code)
