"""What `check-config` reads from its input: the launch commands, each one's `vllm serve`
options as vLLM's parser reads them, and the servers of a deployment (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LaunchCommand:
    """One server's launch: the argv after the executable and the env assignments before it.

    A deployment (a script, a manifest, an xPyD setup) yields any number of these; `name` tells them
    apart, `role` says prefill or decode and `role_source` what that rests on.
    """

    role: str
    """prefill or decode."""
    args: tuple[str, ...]
    """Arguments of `vllm serve` (everything after `serve`, or after the api_server module)."""
    env: tuple[tuple[str, str], ...] = ()
    host: str | None = None
    """Machine the engine runs on, when the config file says so (`host:` entry)."""
    source: str = "command line"
    name: str = ""
    """Server label, unique within one input (e.g. `prefill`, `decode-1`, `pod vllm-prefill`)."""
    role_source: str = ""
    """What the role rests on: `kv_role`, `--is-prefill-worker`, `resource name`, `flag`, ..."""
    network: str | None = None
    """Network identity (which host / network namespace): `host:NAME`, `pod:NAME`,
    `container:NAME`, `loopback`; None when the input does not tell (then nothing is assumed)."""
    network_evidence: str = ""
    """What `network` rests on (side-channel host, --host, a Pod, a compose service, ...)."""
    launcher: str = ""
    """The wrapper the command was found in (`vllm serve`, `dynamo.vllm`, `docker run`, `sh -c`...)."""
    image: str | None = None
    """Container image the server runs in (`vllm/vllm-openai:v0.25.0`), when the input names one."""
    phase: int = 0
    """Servers of different phases never run at once (a script that kills and relaunches)."""
    unknowns: tuple[tuple[str, str], ...] = ()
    """Variables its command refers to whose value the input cannot tell, with where each comes
    from (a Secret, the downward API, a ConfigMap not in the files): `$(VAR)` stays as written."""


@dataclass(frozen=True)
class ServeConfig:
    """What one `vllm serve` command line sets, parsed as vLLM's argument parser would."""

    role: str
    model: str | None
    port: int | None
    host: str | None
    machine: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    data_parallel_size_local: int | None
    data_parallel_rank: int | None
    prefill_context_parallel_size: int
    block_size: int | None
    dtype: str | None
    kv_cache_dtype: str | None
    attention_backend: str | None
    speculative_config: Any
    enable_prefix_caching: bool | None
    """None: not given (vLLM's default, on)."""
    mamba_cache_mode: str | None
    async_scheduling: bool | None
    kv_transfer_config: dict[str, Any] | None
    env: dict[str, str] = field(default_factory=dict)
    unknown_flags: tuple[str, ...] = ()
    flags_release: str | None = None
    """The vLLM release whose own parser read the flags (None: no one release's; then an unknown
    flag is only noted)."""
    source: str = "command line"
    values: dict[str, Any] = field(default_factory=dict)
    """Every known flag given, by its long name without dashes prefix (e.g. block-size)."""
    argv: tuple[str, ...] = ()
    """The arguments as given (after `vllm serve`), unknown flags included."""

    @property
    def kv_connector(self) -> str | None:
        c = (self.kv_transfer_config or {}).get("kv_connector")
        return str(c) if c is not None else None

    @property
    def kv_role(self) -> str | None:
        r = (self.kv_transfer_config or {}).get("kv_role")
        return str(r) if r is not None else None

    @property
    def kv_connector_module_path(self) -> str | None:
        """`kv_connector_module_path`: the connector class comes from this module (an external
        connector), not from vLLM's built-in class of the same name."""
        p = (self.kv_transfer_config or {}).get("kv_connector_module_path")
        return str(p) if p else None

    @property
    def extra_config(self) -> dict[str, Any]:
        e = (self.kv_transfer_config or {}).get("kv_connector_extra_config")
        return e if isinstance(e, dict) else {}

    @property
    def prefix_caching_on(self) -> bool:
        if self.enable_prefix_caching is False:
            return False
        return self.mamba_cache_mode != "none"


def image_parts(image: str) -> tuple[str, str | None]:
    """`registry:5000/org/name:tag@sha256:...` -> (`registry:5000/org/name`, `tag`)."""
    ref = image.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :] or None
    return ref, None


@dataclass(frozen=True)
class Server:
    """One server of a deployment: its parsed command line and where it runs.

    A deployment has any number of these (xPyD); pair rules look at every prefill x decode pair.
    """

    name: str
    """Unique within the input (`prefill`, `decode`, `decode-1`, `pod vllm-prefill`, ...)."""
    config: ServeConfig
    network: str | None = None
    """Network identity from the input (`host:NAME`, `pod:NAME`, `container:NAME`, `loopback`);
    None when the input does not tell."""
    network_evidence: str = ""
    role_source: str = ""
    launcher: str = ""
    image: str | None = None
    """Container image (`ghcr.io/llm-d/llm-d-cuda:v0.8.1`) when the input names one."""
    phase: int = 0
    """Servers of different phases never run at once (launch, kill, relaunch on the same ports)."""

    @property
    def image_name(self) -> str | None:
        """The image without its tag (`vllm/vllm-openai`)."""
        return image_parts(self.image)[0] if self.image else None

    @property
    def image_tag(self) -> str | None:
        """The image's tag (`v0.25.0`); None when untagged or a digest."""
        return image_parts(self.image)[1] if self.image else None

    @property
    def role(self) -> str:
        return self.config.role
