"""Every command's --help: options with real metavars (no `<bool>`, `<str>`, `<path>`) and an
example (no vLLM)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

# Renders every leaf command's help in one child (typer's rich help, 120 columns).
SCRIPT = """
import contextlib, io, json, sys
from vllm_pd_doctor import cli

root = cli.command()
out = {}

def walk(cmd, path):
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            walk(sub, path + [name])
        return
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            root.main(args=path + ["--help"], prog_name="pd-doctor", standalone_mode=False)
        except SystemExit:
            pass
    out[" ".join(path)] = buf.getvalue()

walk(root, [])
print(json.dumps(out))
"""


def _helps() -> dict[str, str]:
    env = {"COLUMNS": "120", "TERM": "dumb", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_help_has_real_metavars_and_an_example() -> None:
    helps = _helps()
    assert {"repro", "check-config", "matrix", "bisect", "envs list", "hotfix status"} <= set(helps)
    for name, text in helps.items():
        assert text.strip(), name
        options = [ln for ln in text.splitlines() if re.search(r"^\W*(\*\s+)?--", ln)]
        assert options, name
        for line in options:  # (an argument's type column is typer's own: `names... <list[str]>`)
            for generic in ("<bool>", "<str>", "<path>", "<float>", "<int>", "<list["):
                assert generic not in line, (name, line)
        if name != "report":  # the report command's help is issue 21's
            assert "Example" in text, name
