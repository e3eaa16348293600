"""What both repro engines share: the request (`ReproRequest`), the choices of its options and
the checks of the scenario.

The repro command turns its options into one frozen `ReproRequest`; `inprocess.options` and
`live.from_request` each check it once into their engine's options type. The checks both need
(block size, prompt length, KV role, Mamba cache mode, connector list) live here, so the two
engines refuse the same input the same way: a `FieldError` naming the request's field, which the
command words with its flag.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path

from vllm_pd_doctor.infra.errors import FieldError
from vllm_pd_doctor.knowledge.facts import connectors


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


@dataclass(frozen=True)
class ReproRequest:
    """What `pd-doctor repro` was asked for, on either engine, as plain values (not yet checked:
    `inprocess.options` and `live.from_request` check it, each once). Its field names are the
    words the cores' `FieldError`s use; the repro command declares one option per field."""

    engine: str = "inprocess"
    """inprocess or live."""
    scenario: str = "n1-truncation"
    """The P/D failure scenario to reproduce (today: vLLM #53514's N-1 truncation)."""
    connector: str = connectors.DEFAULT_KEY
    """Registry keys, a comma list, or all."""
    block_size: int | None = None
    prompt_len: int | None = None
    mamba_cache_mode: str | None = None
    kv_role: str = "kv_producer"
    model: str | None = None
    """As given: a directory, a config.json, a bundled family name or a Hugging Face id
    (`knowledge.models.resolve`)."""
    timeout: float = 600.0
    hotfix: bool = False
    # in-process engine only
    blocks: int | None = None
    prefix_match_unit: int | None = None
    platform: str | None = None
    trigger: str = "same-prompt"
    # live engine only
    prefill_url: str | None = None
    decode_url: str | None = None
    confirm_remote: bool = False
    run_dir: Path | None = None
    prefill_port: int | None = None
    decode_port: int | None = None
    device: str | None = None

    def given_of(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Which of the fields `names` differ from their defaults (options of the other engine)."""
        default = ReproRequest()
        return tuple(n for n in names if getattr(self, n) != getattr(default, n))


INPROCESS_ONLY = ("blocks", "prefix_match_unit", "platform", "trigger")
"""`ReproRequest` fields only the in-process engine takes."""
LIVE_ONLY = (
    "prefill_url",
    "decode_url",
    "confirm_remote",
    "run_dir",
    "prefill_port",
    "decode_port",
    "device",
)
"""`ReproRequest` fields only the live engine takes."""
REQUEST_FIELDS = tuple(f.name for f in fields(ReproRequest))


KV_ROLES = tuple(r.value for r in KvRole)
MAMBA_CACHE_MODES = ("align", "all", "none")
PLATFORMS = tuple(p.value for p in Platform)
DEVICES = tuple(d.value for d in Device)


def value(choice: str | Enum | None) -> str | None:
    """An option's plain string (typer hands enums, the core's other callers strings)."""
    return str(choice.value) if isinstance(choice, Enum) else choice


def connector_help() -> str:
    """`--connector`'s help, from the registry."""
    keys = ", ".join(connectors.connector_keys())
    return f"{keys}, a comma list, or all (every one this vLLM has)."


def parse_connector_list(text: str) -> tuple[str, ...]:
    """`--connector`: registry keys in the order given, or ("all",)."""
    known = connectors.connector_keys()
    keys = tuple(dict.fromkeys(k.strip().lower() for k in text.split(",") if k.strip()))
    if not keys:
        raise FieldError("connector", "{flag}: empty", hint=f"use one of {', '.join(known)}, all")
    for k in keys:
        if k != "all" and k not in known:
            raise FieldError(
                "connector",
                "{flag} {value}: unknown connector",
                value=k,
                hint=f"use one of {', '.join(known)}, or all",
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
        raise FieldError(
            "block_size",
            "{flag} {value}: must be a positive number of tokens",
            value=block_size,
            hint="use e.g. {flag} 16, or omit it for the platform's default",
        )
    if prompt_len is not None and prompt_len < 2:
        raise FieldError(
            "prompt_len",
            "{flag} {value}: must be at least 2 (the prefill side keeps "
            "N-1 tokens, and at least one of them must be cached)",
            value=prompt_len,
            hint="omit it for the default W + 1 (W: the effective block size)",
        )
    if kv_role not in KV_ROLES:
        raise FieldError(
            "kv_role", "{flag} {value}: unknown role", value=kv_role, hint=f"use one of {', '.join(KV_ROLES)}"
        )
    if mamba_cache_mode is not None and mamba_cache_mode not in MAMBA_CACHE_MODES:
        raise FieldError(
            "mamba_cache_mode",
            "{flag} {value}: unknown mode",
            value=mamba_cache_mode,
            hint=f"use one of {', '.join(MAMBA_CACHE_MODES)}",
        )
