"""cli.COMMANDS, the `{name: module}` table subcommands come from: complete both ways, and a run
imports only its own command module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vllm_pd_doctor import cli

COMMANDS_DIR = Path(cli.__file__).resolve().parent / "commands"


def test_every_command_module_is_in_the_table_and_registers_its_names() -> None:
    modules = {p.stem for p in COMMANDS_DIR.glob("*.py") if not p.stem.startswith("_")}
    assert set(cli.COMMANDS.values()) == modules
    root = cli.command()
    assert list(root.commands) == list(cli.COMMANDS)
    for name in cli.COMMANDS:
        assert root.commands[name].name == name


def test_a_run_imports_only_its_command_module() -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from vllm_pd_doctor import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    cli._dispatch(['envs', 'list', '--help'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('vllm_pd_doctor.commands.'))))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout.splitlines()[-1]))
    assert "vllm_pd_doctor.commands.envs" in loaded
    assert not loaded & {f"vllm_pd_doctor.commands.{m}" for m in cli.COMMANDS.values() if m != "envs"}
