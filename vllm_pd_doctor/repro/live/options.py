"""What the user asked `repro --engine live` for (validated), and which connectors it can serve.

`from_request` is the one adapter from the repro command's `ReproRequest` to `LiveOptions`: every
check of a live option happens there, so the engine code trusts what it is given.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor.infra.errors import BadInput, FieldError, literal
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.models import resolve as models
from vllm_pd_doctor.knowledge.models.resolve import families as families
from vllm_pd_doctor.repro import request as scenario
from vllm_pd_doctor.repro.request import DEVICES, ReproRequest

CONFIRM_FLAG = "--i-understand-this-may-kill-prefill"
MAX_MODEL_LEN = 1024
"""`--max-model-len` of the engines pd-doctor starts (the trigger needs N + 1 tokens)."""


def live_connectors() -> tuple[connectors.Connector, ...]:
    """The registry's connectors the live engine can start a P/D pair with (`live=True`)."""
    return tuple(c for c in connectors.all_connectors() if c.live)


@dataclass(frozen=True)
class LiveOptions:
    """A live run: a local P/D pair pd-doctor starts, or the user's endpoints (`prefill_url`)."""

    connector: str = connectors.DEFAULT_KEY
    """Registry key of the connector the pair runs (one with `live=True`)."""
    prompt_len: int | None = None
    """N; None: W + 1, with W the effective block size read from the prefill engine."""
    mamba_cache_mode: str | None = None
    """Passed to the engines; None: align."""
    model: Path | None = None
    """The user's model directory (weights, or a family's config.json alone: a tiny model of that
    family is made); None: the tiny hybrid model, made on first use."""
    block_size: int | None = None
    """Passed to the engines (local); remote: W when /metrics does not say (it wins)."""
    prefill_url: str | None = None
    decode_url: str | None = None
    confirm_remote: bool = False
    run_dir: Path | None = None
    prefill_port: int | None = None
    decode_port: int | None = None
    device: str | None = None
    """cpu or cuda; None: cuda for a CUDA vLLM build with a visible GPU, else cpu."""
    timeout: float = 600.0
    hotfix: bool = False
    """Start the engines with PD_DOCTOR_HOTFIX=53514 (pd-doctor's plugin applies the backport)."""
    """Seconds for the whole run (the engines' start-up gets at most `startup_timeout`)."""
    startup_timeout: float = 420.0

    @property
    def remote(self) -> bool:
        return self.prefill_url is not None

    @property
    def entry(self) -> connectors.Connector:
        """The registry entry of `connector`."""
        c = connectors.get(self.connector)
        if c is None or not c.live:
            raise FieldError(
                "connector",
                "{flag} {value}: the live engine cannot serve it",
                value=self.connector,
                hint=_live_hint(),
            )
        return c

    @property
    def effective_mamba_cache_mode(self) -> str:
        return self.mamba_cache_mode or "align"


def is_loopback(url: str) -> bool:
    host = urllib.parse.urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _live_hint() -> str:
    return "use --connector " + " or ".join(c.key for c in live_connectors())


def parse_connector(value: str) -> str:
    """The one registry key a live run serves, from `--connector` (a key, a list, or all)."""
    keys = scenario.parse_connector_list(value)
    served = live_connectors()
    if "all" in keys:
        keys = tuple(c.key for c in served)
    if not served or any(k not in {c.key for c in served} for k in keys):
        labels = ", ".join(c.label for c in served) or "no"
        raise FieldError(
            "engine",
            "{flag} {value} supports the " + literal(labels) + " connector only",
            value="live",
            hint=_live_hint(),
        )
    if len(keys) > 1:
        raise FieldError(
            "engine",
            "{flag} {value} runs one connector at a time",
            value="live",
            hint=f"give one of {', '.join(keys)}",
        )
    return keys[0]


def live_model(model: Path | str) -> Path:
    """The directory `--model` names, through the one resolver (`knowledge.models`): a model
    directory (weights, or a config.json alone: a tiny model of that family is made), a
    config.json, a bundled family name, or a Hugging Face id (its config.json from the HF cache or
    the Hub: a tiny model of that family, unless the cache holds its weights too)."""
    try:
        found = models.resolve(str(model))
    except models.ModelNotResolved as exc:
        if models.looks_like_hf_id(str(model)):
            raise
        raise BadInput(f"{exc.message} (no config.json there)", hint=_model_hint()) from None
    if found.config_path.name != "config.json":
        raise BadInput(
            f"--model {model}: no config.json there",
            hint=_model_hint(),
        )
    return found.directory


def _model_hint() -> str:
    return (
        "give a local Hugging Face model directory (config + weights, or a config.json alone for a "
        f"tiny random-weight model of its family), a bundled family ({', '.join(families())}), or a "
        "Hugging Face id"
    )


def _check_local(
    prompt_len: int | None, prefill_port: int | None, decode_port: int | None, device: str | None
) -> None:
    """The checks of a pair pd-doctor starts itself (its ports, device and max model length)."""
    if prompt_len is not None and prompt_len + 1 > MAX_MODEL_LEN:
        raise FieldError(
            "prompt_len",
            "{flag} {value}: longer than the live engines' max model "
            f"length {MAX_MODEL_LEN} allows (N + 1 tokens)",
            value=prompt_len,
            hint="use a shorter prompt",
        )
    for field, port in (("prefill_port", prefill_port), ("decode_port", decode_port)):
        if port is not None and not 0 < port < 65536:
            raise FieldError(field, "{flag} {value}: not a TCP port", value=port)
    if device not in (None, *DEVICES):
        raise FieldError("device", "{flag} {value}: use cpu or cuda", value=device)


def from_repro_options(
    *,
    connector: str,
    block_size: int | None,
    prompt_len: int | None,
    mamba_cache_mode: str | scenario.MambaCacheMode | None,
    kv_role: str | scenario.KvRole,
    model: Path | str | None,
    prefill_url: str | None,
    decode_url: str | None,
    confirm_remote: bool,
    run_dir: Path | None,
    prefill_port: int | None,
    decode_port: int | None,
    device: str | scenario.Device | None,
    timeout: float,
    hotfix: bool = False,
) -> LiveOptions:
    """`from_request` for a request given field by field (tests); choices may be strings or the
    `scenario` enums."""
    return from_request(
        ReproRequest(
            engine="live",
            connector=connector,
            block_size=block_size,
            prompt_len=prompt_len,
            mamba_cache_mode=scenario.value(mamba_cache_mode),
            kv_role=str(scenario.value(kv_role)),
            model=None if model is None else str(model),
            prefill_url=prefill_url,
            decode_url=decode_url,
            confirm_remote=confirm_remote,
            run_dir=run_dir,
            prefill_port=prefill_port,
            decode_port=decode_port,
            device=scenario.value(device),
            timeout=timeout,
            hotfix=hotfix,
        )
    )


def from_request(req: ReproRequest) -> LiveOptions:
    """The request, checked, as a live run's options (a `FieldError` / BadInput on a bad one).

    `kv_role` is checked like the in-process engine checks it; the live pair is always a
    producer (P) and a consumer (D).
    """
    key = parse_connector(req.connector)
    if req.decode_url and not req.prefill_url:
        raise FieldError(("decode_url", "prefill_url"), "{0} needs {1}")
    if req.prefill_url and (req.prefill_port or req.decode_port or req.model or req.device):
        raise FieldError(
            ("prefill_url", "model", "device"),
            "{0} probes existing engines: {1}, {2} and the port options do not apply",
        )
    scenario.check_scenario(
        block_size=req.block_size,
        prompt_len=req.prompt_len,
        kv_role=req.kv_role,
        mamba_cache_mode=req.mamba_cache_mode,
    )
    if not req.prefill_url:
        _check_local(req.prompt_len, req.prefill_port, req.decode_port, req.device)
    return LiveOptions(
        connector=key,
        prompt_len=req.prompt_len,
        mamba_cache_mode=req.mamba_cache_mode,
        model=live_model(req.model) if req.model is not None else None,
        block_size=req.block_size,
        prefill_url=req.prefill_url,
        decode_url=req.decode_url,
        confirm_remote=req.confirm_remote,
        run_dir=req.run_dir.expanduser() if req.run_dir else None,
        prefill_port=req.prefill_port,
        decode_port=req.decode_port,
        device=req.device,
        timeout=req.timeout,
        hotfix=req.hotfix,
    )
