"""Typed inputs and results of `check-config` (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from vllm_pd_doctor.model import Result


class Severity(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


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


@dataclass(frozen=True)
class ModelInfo:
    """What config.json says about the model."""

    path: str
    architectures: tuple[str, ...]
    model_type: str | None
    hybrid: bool
    hybrid_evidence: str
    torch_dtype: str | None = None
    source: str = "config.json structure"
    """What decided `hybrid`: `config.json structure`, or `vLLM X model registry` (the installed
    vLLM's model class interfaces, read in a child of the target interpreter)."""
    resolved_from: str | None = None
    """Where config.json came from: directory, file, hf-cache (offline), hub (downloaded)."""


@dataclass(frozen=True)
class TruncationSite:
    """A call of a P-side truncation helper found in the installed vLLM's source."""

    connector: str
    """Our key: nixl, nixl-push, mooncake, moriio, or the package directory name."""
    helper: str
    caller: str
    caller_class: str | None
    file: str
    """Relative to the vllm package's parent directory."""
    line: int

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def before_lookup(self) -> bool | None:
        if self.caller == "on_new_request":
            return True
        if self.caller == "get_num_new_matched_tokens":
            return False
        return None


@dataclass(frozen=True)
class VllmSource:
    """The installed vLLM, read from its files (never imported)."""

    python: str
    version: str | None
    path: str | None
    sites: tuple[TruncationSite, ...] = ()
    connectors: tuple[str, ...] = ()
    """Connector names registered in kv_connector/factory.py."""
    side_channel_port_default: int | None = None
    """Default of VLLM_NIXL_SIDE_CHANNEL_PORT read from vllm/envs.py."""
    kv_roles: tuple[str, ...] = ()
    """kv_role values config/kv_transfer.py accepts."""
    cpu_conv_layout_override: ConvLayoutOverride | None = None
    """Where platforms/cpu.py replaces an explicit VLLM_SSM_CONV_STATE_LAYOUT (None: it does not)."""
    mamba_hetero_tp: SourceFact | None = None
    """Whether the NIXL worker transfers Mamba state between different TP sizes (None: not read)."""
    mamba_hetero_block: SourceFact | None = None
    """The NIXL worker transfers Mamba models between different block sizes and refuses prefix
    caching with it (detail: the message it raises); None: not found."""
    p_tp_above_d_tp: SourceFact | None = None
    """Whether the NIXL worker reads from a prefill with more TP ranks than decode."""
    attention_backend_env: bool | None = None
    """vllm/envs.py still reads VLLM_ATTENTION_BACKEND (None: not read)."""
    mamba_prefix_rewrite: SourceFact | None = None
    """Where prefix caching turns mamba_cache_mode "none" into another mode (None: it does not)."""
    kv_transfer_fields: tuple[str, ...] = ()
    """KVTransferConfig's fields (empty: not read)."""
    kv_transfer_forbids_extra: bool | None = None
    """KVTransferConfig rejects other keys (vLLM's `@config`: pydantic `extra="forbid"`)."""
    kv_transfer_location: str | None = None
    conv_layout_assert: SourceFact | None = None
    """Where the NIXL worker asserts the DS conv-state layout for Mamba state (None: it does not)."""
    conv_layout_default: str | None = None
    """The conv-state layout when VLLM_SSM_CONV_STATE_LAYOUT is unset (`SD` on 0.28.0)."""
    cpu_selects_ds: SourceFact | None = None
    """The CPU platform sets DS itself (0.32.0, for NIXL when the variable is unset)."""
    error: str | None = None


@dataclass(frozen=True)
class SourceFact:
    """A yes/no fact read from the installed vLLM's source, with where it was read."""

    supported: bool
    location: str
    """file:line (relative to the vllm package's parent)."""
    detail: str


@dataclass(frozen=True)
class ConvLayoutOverride:
    """An assignment of VLLM_SSM_CONV_STATE_LAYOUT in vLLM's CPU platform not guarded by
    `not in os.environ`: it overwrites what the user set."""

    file: str
    line: int
    value: str
    condition: str | None
    """The enclosing `if` test (source text), e.g. `torch.cpu._is_amx_tile_supported()`."""


@dataclass(frozen=True)
class NixlInfo:
    """NIXL packages in the target interpreter (read from package metadata)."""

    dists: tuple[tuple[str, str], ...] = ()
    namespace_found: bool = False
    """`nixl` is findable as a module (importlib.util.find_spec)."""
    import_ok: bool | None = None
    """Whether `import nixl` worked in a child process (None: not tried)."""
    import_error: str | None = None
    ucx_plugin: bool | None = None
    """A UCX backend plugin file is among the dists' files (None: no dist to look in)."""
    plugin_files: tuple[str, ...] = ()
    vllm_requirement: str | None = None
    error: str | None = None


class Verdict(str, Enum):
    """Exposure to vLLM #53514."""

    exposed = "exposed"
    not_exposed = "not exposed"
    unknown = "unknown"

    def __str__(self) -> str:
        return self.value


class ReasonKind(str, Enum):
    """What one exposure reason is about (so callers never search the text)."""

    no_connector = "no-connector"
    connector_not_truncating = "connector-not-truncating"
    producer = "producer"
    not_producer = "not-producer"
    hybrid = "hybrid"
    not_hybrid = "not-hybrid"
    unknown_model = "unknown-model"
    prefix_caching = "prefix-caching"
    no_prefix_caching = "no-prefix-caching"
    late_truncation = "late-truncation"
    early_truncation = "early-truncation"
    unknown_order = "unknown-order"
    no_truncation = "no-truncation"
    unknown_vllm = "unknown-vllm"
    external_connector = "external-connector"

    def __str__(self) -> str:
        return self.value

    @property
    def unknown(self) -> bool:
        """This reason leaves the verdict undecided."""
        return self in (
            ReasonKind.unknown_model,
            ReasonKind.unknown_vllm,
            ReasonKind.unknown_order,
            ReasonKind.external_connector,
        )


@dataclass(frozen=True)
class Reason:
    kind: ReasonKind
    text: str
    fix: str | None = None
    """For unknown kinds: the input that would decide it (e.g. the model resolver's hint)."""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class SideExposure:
    """#53514 exposure of one engine (one server and connector)."""

    role: str
    connector: str | None
    verdict: Verdict
    why: tuple[Reason, ...]
    evidence: tuple[str, ...] = ()
    server: str = ""

    @property
    def reasons(self) -> tuple[str, ...]:
        """The reasons as text (what the formats render)."""
        return tuple(r.text for r in self.why)


@dataclass(frozen=True)
class ProbeResult:
    ran: bool
    reproduced: bool | None
    detail: str
    per_connector: tuple[tuple[str, bool], ...] = ()
    """(connector key, reproduced) for each connector the probe ran."""


@dataclass(frozen=True)
class Exposure:
    verdict: Verdict
    sides: tuple[SideExposure, ...]
    fixes: tuple[str, ...]
    probe: ProbeResult | None = None


@dataclass(frozen=True)
class ModelProblem:
    """The model named in the commands could not be read (offline resolver's message + hint)."""

    given: str
    message: str
    hint: str


@dataclass(frozen=True)
class Rule:
    """One entry of the catalogue."""

    id: str
    severity: Severity
    title: str
    fix: str
    refs: tuple[str, ...]


@dataclass(frozen=True)
class RuleCatalogue(Result):
    """The rules check-config knows (`--list-rules`)."""

    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    title: str
    evidence: str
    fix: str
    refs: tuple[str, ...]


@dataclass(frozen=True)
class Inputs:
    prefill: str | None
    decode: str | None
    config_file: str | None
    model: str | None
    model_source: str | None
    python: str
    vllm_found: bool
    nixl_checked: bool
    probe: bool
    warnings: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    """Every server checked, as `name (role, from role_source)`."""
    variables: tuple[tuple[str, str], ...] = ()
    """--set VAR=value given for what the input cannot tell."""

    def given(self) -> dict[str, bool]:
        return {
            "prefill_cmd": self.prefill is not None,
            "decode_cmd": self.decode is not None,
            "config_file": self.config_file is not None,
            "model": self.model is not None,
            "installed_vllm": self.vllm_found,
            "nixl": self.nixl_checked,
            "probe": self.probe,
        }


@dataclass(frozen=True)
class CheckReport(Result):
    inputs: Inputs
    exposure: Exposure
    findings: tuple[Finding, ...]
    vllm: VllmSource | None
    nixl: NixlInfo | None
    model: ModelInfo | None
    elapsed_s: float = 0.0
    servers: tuple[Server, ...] = ()

    @property
    def has_error(self) -> bool:
        return self.exposure.verdict is Verdict.exposed or any(
            f.severity is Severity.error for f in self.findings
        )
