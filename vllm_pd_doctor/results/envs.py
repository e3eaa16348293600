"""What `pd-doctor envs` answers: the provisioned environments, and what create / rm changed
(frozen dataclasses; the provisioning itself is `repro/envs.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.infra.envs import CACHE_DIR as CACHE_DIR  # the environment type is infra's
from vllm_pd_doctor.infra.envs import ManagedEnv as ManagedEnv
from vllm_pd_doctor.infra.envs import env_name as env_name
from vllm_pd_doctor.results.base import Result


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
