"""What `check-config` answers: what it read about the target (the model's config.json, the
installed vLLM's source, the NIXL packages), the #53514 exposure, the rules' findings, the report
(frozen dataclasses; rendered by `formats/`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from vllm_pd_doctor.results.base import Result
from vllm_pd_doctor.results.launch import Server

# --- what was read about the target


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


# --- what check-config decided


class Severity(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


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
