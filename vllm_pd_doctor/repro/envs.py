"""Provision and reuse isolated vLLM environments (uv), one VLLM_CACHE_ROOT each.

Used by the README's setup, the test setup, `pd-doctor repro --vllm`, the release matrix and the
live engine. What an environment is and where it lives is `infra/envs.py` (re-exported here, so
`envs.find`, `envs.home` ... read the same); this module creates and completes one with what
knowledge says to install (the connectors' extra packages, NIXL).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import suppress
from pathlib import Path

from vllm_pd_doctor.infra import uvinstall
from vllm_pd_doctor.infra.envs import CACHE_DIR as CACHE_DIR
from vllm_pd_doctor.infra.envs import MARKER as MARKER
from vllm_pd_doctor.infra.envs import MIN_FREE_BYTES as MIN_FREE_BYTES
from vllm_pd_doctor.infra.envs import ManagedEnv as ManagedEnv
from vllm_pd_doctor.infra.envs import _load as _load
from vllm_pd_doctor.infra.envs import _lock as _lock
from vllm_pd_doctor.infra.envs import cache_root_for_python as cache_root_for_python
from vllm_pd_doctor.infra.envs import check_room as check_room
from vllm_pd_doctor.infra.envs import default_package as default_package
from vllm_pd_doctor.infra.envs import env_name as env_name
from vllm_pd_doctor.infra.envs import envs_dir as envs_dir
from vllm_pd_doctor.infra.envs import find as find
from vllm_pd_doctor.infra.envs import free_bytes as free_bytes
from vllm_pd_doctor.infra.envs import home as home
from vllm_pd_doctor.infra.envs import list_envs as list_envs
from vllm_pd_doctor.infra.envs import remove as remove
from vllm_pd_doctor.infra.errors import CouldNotRun
from vllm_pd_doctor.infra.progress import Progress, phase, quiet
from vllm_pd_doctor.infra.uvinstall import CPU_EXCLUDES as CPU_EXCLUDES
from vllm_pd_doctor.infra.uvinstall import pip_settings as pip_settings
from vllm_pd_doctor.infra.uvinstall import uv_binary as uv_binary
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.facts.releases import PACKAGES as PACKAGES
from vllm_pd_doctor.knowledge.facts.releases import validate as validate
from vllm_pd_doctor.results.envs import EnvListing

CONNECTORS_EXTRA = "connectors"
"""Marker extra: the connectors' extra packages (`knowledge.connectors.extra_packages`) are in."""
NIXL_EXTRA = connectors.NIXL_LIBRARY
"""Marker extra: NIXL (`knowledge.connectors.NIXL_PACKAGES`) is in."""


def listing() -> EnvListing:
    return EnvListing(home=home(), envs_dir=envs_dir(), envs=tuple(list_envs()))


def _keep_log(log: Path, name: str) -> Path:
    """Move a failed install's log out of the directory that is about to be removed."""
    dest_dir = home() / "logs"
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{name}-install.log"
    with suppress(OSError):
        shutil.copyfile(log, dest)
    return dest


def ensure(
    package: str, version: str, *, nixl: bool = False, progress: Progress = quiet, timeout: float = 1800.0
) -> ManagedEnv:
    """Return the environment for package==version, creating it if it is not there yet."""
    validate(package, version)
    path = envs_dir() / env_name(package, version)
    done = _load(path)  # complete (its marker is written last): no lock needed, so a read-only
    if done is not None and CONNECTORS_EXTRA in done.extras and (not nixl or NIXL_EXTRA in done.extras):
        return done  # cache of environments works too
    with _lock(path):
        existing = _load(path)
        if existing is not None and CONNECTORS_EXTRA not in existing.extras:
            existing = _add_connector_packages(existing, progress)
        if existing is not None and (not nixl or NIXL_EXTRA in existing.extras):
            return existing
        if existing is not None:  # add NIXL to a complete environment
            with phase(progress, f"adding NIXL to {existing.name}"):
                uvinstall.install_nixl(existing.python, path, connectors.NIXL_PACKAGES)
            return _write_marker(path, package, version, (*existing.extras, NIXL_EXTRA), existing.install_s)
        if path.exists():
            progress(f"removing incomplete environment {path}")
            shutil.rmtree(path)
        check_room()  # a full disk: one clear line before uv starts, not ENOSPC half-way
        with phase(progress, f"provisioning {package} {version}"):
            return _create(path, package, version, nixl=nixl, progress=progress, timeout=timeout)


def _create(
    path: Path, package: str, version: str, *, nixl: bool, progress: Progress, timeout: float
) -> ManagedEnv:
    uv = uvinstall.uv_binary()
    t0 = time.perf_counter()
    path.mkdir(parents=True)
    log = path / "install.log"
    progress(f"creating {path} ({package}=={version}) with uv")
    uvinstall.create_venv(uv, path, log, f"creating a virtual environment for {package}=={version}")
    python = path / "bin" / "python"
    progress(f"installing {package}=={version} (about a minute with a warm uv cache)")
    try:
        uvinstall.install_release(uv, python, log, package, version, timeout)
    except CouldNotRun as exc:
        kept = _keep_log(log, env_name(package, version))
        shutil.rmtree(path, ignore_errors=True)
        exc.hint = f"full log: {kept}"
        raise
    extras: tuple[str, ...] = ()
    if _install_connector_packages(python, path, progress):
        extras = (CONNECTORS_EXTRA,)
    if nixl:
        uvinstall.install_nixl(python, path, connectors.NIXL_PACKAGES)
        extras = (*extras, NIXL_EXTRA)
    (path / CACHE_DIR).mkdir(exist_ok=True)
    env = _write_marker(path, package, version, extras, round(time.perf_counter() - t0, 1))
    progress(f"ready: {env.name} in {env.install_s:.0f} s")
    return env


def _install_connector_packages(python: Path, path: Path, progress: Progress) -> bool:
    users = ", ".join(c.label for c in connectors.all_connectors() if c.extra_packages)
    return uvinstall.install_connector_packages(python, path, progress, connectors.extra_packages(), users)


def _add_connector_packages(env: ManagedEnv, progress: Progress) -> ManagedEnv:
    with phase(progress, f"adding {', '.join(connectors.extra_packages())} to {env.name}"):
        if not _install_connector_packages(env.python, env.path, progress):
            return env
    return _write_marker(env.path, env.package, env.version, (*env.extras, CONNECTORS_EXTRA), env.install_s)


def _write_marker(
    path: Path, package: str, version: str, extras: tuple[str, ...], install_s: float | None
) -> ManagedEnv:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data = {
        "package": package,
        "version": version,
        "extras": list(extras),
        "install_s": install_s,
        "created": created,
    }
    tmp = path / (MARKER + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path / MARKER)
    return ManagedEnv(
        package=package, version=version, path=path, extras=extras, install_s=install_s, created=created
    )


def ensure_or_clean(
    package: str, version: str, *, progress: Progress = quiet, timeout: float = 1800.0
) -> ManagedEnv:
    """`ensure`, refusing when the disk is nearly full, and removing what a failed install left.

    A complete environment is returned as is; otherwise at least MIN_FREE_BYTES must be free.
    On failure nothing of the new environment stays behind (the error is re-raised).
    """
    validate(package, version)
    existing = find(package, version)
    if existing is not None:
        return existing
    check_room()
    try:
        return ensure(package, version, progress=progress, timeout=timeout)
    except BaseException:
        path = envs_dir() / env_name(package, version)
        with _lock(path):
            if path.exists() and _load(path) is None:
                shutil.rmtree(path, ignore_errors=True)
        raise
