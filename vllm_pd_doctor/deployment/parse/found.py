"""What the readers of every format hand on: one vLLM server found (becomes a LaunchCommand)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Found:
    """One vLLM server found in a command (internal; becomes a LaunchCommand)."""

    args: list[str]
    env: dict[str, str]
    launcher: str
    role: str | None = None
    role_source: str = ""
    network: str | None = None
    network_evidence: str = ""
    name: str = ""
    raw: str = ""
    notes: list[str] = field(default_factory=list)
    image: str | None = None
    """Container image (`vllm/vllm-openai:v0.25.0`) when the input names one."""
    phase: int = 0
    """Which phase of a script started it (a kill between launches starts the next one)."""


@dataclass
class Script:
    """`sh -c TEXT`: the text to run as a script, with the wrappers' env and network so far."""

    text: str
    positional: list[str]
    env: dict[str, str]
    launcher: str
    network: str | None = None
    network_evidence: str = ""
    image: str | None = None
