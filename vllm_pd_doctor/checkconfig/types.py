"""Typed inputs and results of `check-config` (frozen dataclasses), one import for all of them.

They live by what they describe: `launch.py` (the input: launch commands, `vllm serve` options,
servers), `facts.py` (what was read about the target: model, vLLM source, NIXL), `results.py`
(exposure, findings, the report).
"""

from __future__ import annotations

from vllm_pd_doctor.checkconfig.launch import LaunchCommand, ServeConfig, Server, image_parts
from vllm_pd_doctor.checkconfig.results import (
    CheckReport,
    Exposure,
    Finding,
    Inputs,
    ModelProblem,
    ProbeResult,
    Reason,
    ReasonKind,
    Rule,
    RuleCatalogue,
    Severity,
    SideExposure,
    Verdict,
)
from vllm_pd_doctor.knowledge.facts import (
    ConvLayoutOverride,
    ModelInfo,
    NixlInfo,
    SourceFact,
    TruncationSite,
    VllmSource,
)

__all__ = [
    "CheckReport",
    "ConvLayoutOverride",
    "Exposure",
    "Finding",
    "Inputs",
    "LaunchCommand",
    "ModelInfo",
    "ModelProblem",
    "NixlInfo",
    "ProbeResult",
    "Reason",
    "ReasonKind",
    "Rule",
    "RuleCatalogue",
    "ServeConfig",
    "Server",
    "Severity",
    "SideExposure",
    "SourceFact",
    "TruncationSite",
    "Verdict",
    "VllmSource",
    "image_parts",
]
