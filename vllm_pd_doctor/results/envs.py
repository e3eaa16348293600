"""What `pd-doctor envs` answers: the provisioned environments, and what create / rm changed
(frozen dataclasses; the provisioning itself is `infra/envs.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.results.base import Result

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


@dataclass(frozen=True)
class EnvListing(Result):
    """`pd-doctor envs list`: the complete environments under `home`."""

    home: Path
    envs_dir: Path
    envs: tuple[ManagedEnv, ...]


@dataclass(frozen=True)
class EnvChange(Result):
    """`envs create` / `envs rm`: the interpreters made ready, or the directories removed."""

    action: str
    """create or rm."""
    paths: tuple[str, ...]
