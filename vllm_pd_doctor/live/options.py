"""What the user asked `repro --engine live` for (validated), and which connectors it can serve.

`from_repro_options` is the one adapter from the repro command's options to `LiveOptions`: every
check of a live option happens there, so the engine code trusts what it is given.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from vllm_pd_doctor import scenario
from vllm_pd_doctor.errors import BadInput
from vllm_pd_doctor.inprocess import repro_dir
from vllm_pd_doctor.knowledge import connectors
from vllm_pd_doctor.scenario import DEVICES

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
            raise BadInput(
                f"--connector {self.connector}: the live engine cannot serve it", hint=_live_hint()
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
        raise BadInput(f"--engine live supports the {labels} connector only", hint=_live_hint())
    if len(keys) > 1:
        raise BadInput("--engine live runs one connector at a time", hint=f"give one of {', '.join(keys)}")
    return keys[0]


def families() -> tuple[str, ...]:
    """The family config directories bundled under repro/models/ (names `--model` takes)."""
    root = repro_dir() / "models"
    return tuple(sorted(d.name for d in root.iterdir() if (d / "config.json").is_file()))


def live_model(model: Path) -> Path:
    """The directory `--model` names: a model directory (weights, or a config.json alone: a tiny
    model of that family is made), a config.json, or a family name under repro/models/."""
    given = model.expanduser()
    if given.is_file() and given.name == "config.json":
        given = given.parent
    if not given.exists() and len(given.parts) == 1:
        bundled = repro_dir() / "models" / given.name
        if (bundled / "config.json").is_file():
            return bundled
    if not (given / "config.json").is_file():
        raise BadInput(
            f"--model {model}: no config.json there",
            hint="give a local Hugging Face model directory (config + weights, or a config.json alone "
            f"for a tiny random-weight model of its family), or a bundled family: {', '.join(families())}",
        )
    return given


def _check_local(
    prompt_len: int | None, prefill_port: int | None, decode_port: int | None, device: str | None
) -> None:
    """The checks of a pair pd-doctor starts itself (its ports, device and max model length)."""
    if prompt_len is not None and prompt_len + 1 > MAX_MODEL_LEN:
        raise BadInput(
            f"--prompt-len {prompt_len}: longer than the live engines' max model "
            f"length {MAX_MODEL_LEN} allows (N + 1 tokens)",
            hint="use a shorter prompt",
        )
    for flag, port in (("--prefill-port", prefill_port), ("--decode-port", decode_port)):
        if port is not None and not 0 < port < 65536:
            raise BadInput(f"{flag} {port}: not a TCP port")
    if device not in (None, *DEVICES):
        raise BadInput(f"--device {device}: use cpu or cuda")


def from_repro_options(
    *,
    connector: str,
    block_size: int | None,
    prompt_len: int | None,
    mamba_cache_mode: str | scenario.MambaCacheMode | None,
    kv_role: str | scenario.KvRole,
    model: Path | None,
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
    """The repro command's options, checked, as a live run's (BadInput on a bad one).

    `kv_role` is checked like the in-process engine checks it; the live pair is always a
    producer (P) and a consumer (D).
    """
    key = parse_connector(connector)
    if decode_url and not prefill_url:
        raise BadInput("--decode-url needs --prefill-url")
    if prefill_url and (prefill_port or decode_port or model or device):
        raise BadInput(
            "--prefill-url probes existing engines: --model, --device and the port options do not apply"
        )
    kv_role, mamba_cache_mode, device = (
        str(scenario.value(kv_role)),
        scenario.value(mamba_cache_mode),
        scenario.value(device),
    )
    scenario.check_scenario(
        block_size=block_size, prompt_len=prompt_len, kv_role=kv_role, mamba_cache_mode=mamba_cache_mode
    )
    if not prefill_url:
        _check_local(prompt_len, prefill_port, decode_port, device)
    if model is not None:
        model = live_model(model)
    return LiveOptions(
        connector=key,
        prompt_len=prompt_len,
        mamba_cache_mode=mamba_cache_mode,
        model=model,
        block_size=block_size,
        prefill_url=prefill_url,
        decode_url=decode_url,
        confirm_remote=confirm_remote,
        run_dir=run_dir.expanduser() if run_dir else None,
        prefill_port=prefill_port,
        decode_port=decode_port,
        device=device,
        timeout=timeout,
        hotfix=hotfix,
    )
