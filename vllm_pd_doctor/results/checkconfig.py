"""What `check-config` answers: what it read about the target (the model's config.json, the
installed vLLM's source, the NIXL packages), the #53514 exposure, the rules' findings, the report
(frozen dataclasses; rendered by `formats/`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from vllm_pd_doctor.knowledge.readers.facts import ConvLayoutOverride as ConvLayoutOverride
from vllm_pd_doctor.knowledge.readers.facts import ModelInfo as ModelInfo
from vllm_pd_doctor.knowledge.readers.facts import NixlInfo as NixlInfo
from vllm_pd_doctor.knowledge.readers.facts import SourceFact as SourceFact
from vllm_pd_doctor.knowledge.readers.facts import TruncationSite as TruncationSite
from vllm_pd_doctor.knowledge.readers.facts import VllmSource as VllmSource
from vllm_pd_doctor.results.base import Result
from vllm_pd_doctor.results.launch import Server

# --- what was read about the target: the readers' facts (knowledge/readers/facts.py), re-exported for formats


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
    non_engines: tuple[str, ...] = ()
    """Processes of the input that start no vLLM engine (a frontend, a router, a sidecar, an init
    container, a pipeline stage without a KV connector), as `name: what it runs`: never checked."""

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
