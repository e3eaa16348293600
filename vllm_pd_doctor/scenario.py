"""What both repro engines share: the choices of their options and the checks of the scenario.

`inprocess.make_options` and `live.from_repro_options` each build their engine's validated
options type once; the checks both need (block size, prompt length, KV role, Mamba cache mode,
connector list) live here, so the two engines reject the same input with the same words.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TypedDict

from vllm_pd_doctor.errors import BadInput
from vllm_pd_doctor.knowledge import connectors


class KvRole(str, Enum):
    """`--kv-role`: the role in vLLM's kv-transfer-config the scenario runs as."""

    kv_producer = "kv_producer"
    kv_consumer = "kv_consumer"
    kv_both = "kv_both"


class MambaCacheMode(str, Enum):
    """`--mamba-cache-mode`: vLLM's mamba_cache_mode (it rewrites none/all with prefix caching)."""

    none = "none"
    align = "align"
    all = "all"


class Platform(str, Enum):
    """`--platform` (in-process): size the KV cache as this platform would."""

    cpu = "cpu"
    cuda = "cuda"


class Device(str, Enum):
    """`--device` (live): where the engines pd-doctor starts run."""

    cpu = "cpu"
    cuda = "cuda"


class ScenarioArgs(TypedDict):
    """The options both engines take (keyword arguments of `inprocess.make_options` and
    `live.from_repro_options`), as the repro command hands them on."""

    connector: str
    block_size: int | None
    prompt_len: int | None
    mamba_cache_mode: str | MambaCacheMode | None
    kv_role: str | KvRole
    model: Path | None
    timeout: float
    hotfix: bool


KV_ROLES = tuple(r.value for r in KvRole)
MAMBA_CACHE_MODES = ("align", "all", "none")
PLATFORMS = tuple(p.value for p in Platform)
DEVICES = tuple(d.value for d in Device)


def value(choice: str | Enum | None) -> str | None:
    """An option's plain string (typer hands enums, the core's other callers strings)."""
    return choice.value if isinstance(choice, Enum) else choice


def connector_help() -> str:
    """`--connector`'s help, from the registry."""
    keys = ", ".join(connectors.connector_keys())
    return f"{keys}, a comma list, or all (every one this vLLM has)."


def parse_connector_list(text: str) -> tuple[str, ...]:
    """`--connector`: registry keys in the order given, or ("all",)."""
    known = connectors.connector_keys()
    keys = tuple(dict.fromkeys(k.strip().lower() for k in text.split(",") if k.strip()))
    if not keys:
        raise BadInput("--connector: empty", hint=f"use one of {', '.join(known)}, all")
    for k in keys:
        if k != "all" and k not in known:
            raise BadInput(
                f"--connector {k}: unknown connector", hint=f"use one of {', '.join(known)}, or all"
            )
    return ("all",) if "all" in keys else keys


def check_scenario(
    *,
    block_size: int | None,
    prompt_len: int | None,
    kv_role: str,
    mamba_cache_mode: str | None,
) -> None:
    """The checks every engine makes of the scenario it is asked for (BadInput on a bad one)."""
    if block_size is not None and block_size < 1:
        raise BadInput(
            f"--block-size {block_size}: must be a positive number of tokens",
            hint="use e.g. --block-size 16, or omit it for the platform's default",
        )
    if prompt_len is not None and prompt_len < 2:
        raise BadInput(
            f"--prompt-len {prompt_len}: must be at least 2 (the prefill side keeps "
            "N-1 tokens, and at least one of them must be cached)",
            hint="omit it for the default W + 1 (W: the effective block size)",
        )
    if kv_role not in KV_ROLES:
        raise BadInput(f"--kv-role {kv_role}: unknown role", hint=f"use one of {', '.join(KV_ROLES)}")
    if mamba_cache_mode is not None and mamba_cache_mode not in MAMBA_CACHE_MODES:
        raise BadInput(
            f"--mamba-cache-mode {mamba_cache_mode}: unknown mode",
            hint=f"use one of {', '.join(MAMBA_CACHE_MODES)}",
        )
