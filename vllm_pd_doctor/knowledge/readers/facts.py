"""What the readers of knowledge/ return about a target: the model's config.json, the installed
vLLM's source and the NIXL packages (frozen dataclasses; check-config, triage, report and hotfix
read them)."""

from __future__ import annotations

from dataclasses import dataclass


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
