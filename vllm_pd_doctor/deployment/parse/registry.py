"""What a deployment format is: a name, a `sniff` (is this input mine?) and a `read` (its servers).

`parse.formats.FORMATS` lists every format in the order the loader tries them; the first whose
`sniff` holds and whose `read` answers (a list, even an empty one) decides. `read` returns None to
hand the input on to the next format, and raises `BadInput` for an input that is its format but
broken. An input is one `Source`: its text, where it came from, and its structured documents
(JSON or YAML), parsed once and shared by every format that looks at them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from vllm_pd_doctor.deployment.parse import bounded
from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.infra.errors import BadInput

_YAML_START = re.compile(
    r"^(---\s*$|apiVersion\s*:|kind\s*:|services\s*:|roles\s*:"
    r"|(prefill|decode)\s*:\s*($|[|>]|\{|\[))"
)


@dataclass(frozen=True)
class Source:
    """One input as the formats see it (line ends already normalised)."""

    text: str
    label: str
    suffix: str = ""
    variables: Mapping[str, str] = field(default_factory=dict)
    base: Path | None = None
    given_docs: tuple[Any, ...] | None = None
    """Documents taken from elsewhere (a Markdown page's yaml blocks) instead of `text`."""
    others: list[str] = field(default_factory=list)
    """Processes the formats found that start no vLLM engine (a frontend, a router, a sidecar, an
    init container), each as `name: what it runs`: shown, never checked."""

    @property
    def is_json(self) -> bool:
        return self.given_docs is None and (
            self.suffix == ".json" or self.text.lstrip().startswith(("{", "["))
        )

    @property
    def is_yaml_file(self) -> bool:
        return self.given_docs is None and self.suffix in (".yaml", ".yml")

    @cached_property
    def docs(self) -> list[Any]:
        """The JSON or YAML documents of the input; [] when it is not one (or holds no mapping or
        list). Invalid JSON, or invalid YAML in a .yaml file, is a BadInput."""
        if self.given_docs is not None:
            return list(self.given_docs)
        if self.is_json:
            return [bounded.load_json(self.text, self.label)]
        if not (self.is_yaml_file or looks_like_yaml(self.text)):
            return []
        try:
            docs = bounded.load_yaml_all(self.text, self.label)
        except BadInput:
            if self.is_yaml_file:
                raise
            return []  # text that only starts like YAML (a Justfile): read it as shell
        return docs if any(isinstance(d, (dict, list)) for d in docs) else []

    def kinds(self) -> set[str]:
        return {str(d.get("kind", "")) for d in self.docs if isinstance(d, dict)}

    def single(self) -> dict[str, Any] | None:
        """The one mapping of a one-document input (under `roles:` when it has one), else None."""
        docs = [d for d in self.docs if d is not None]
        if len(docs) != 1 or not isinstance(docs[0], dict):
            return None
        d = docs[0]
        return d["roles"] if isinstance(d.get("roles"), dict) else d


@dataclass(frozen=True)
class DeploymentFormat:
    """One kind of input pd-doctor reads (`name` as the corpus's `format:` names it)."""

    name: str
    sniff: Callable[[Source], bool]
    read: Callable[[Source], list[Found] | None]


def walk(src: Source, formats: Sequence[DeploymentFormat]) -> tuple[DeploymentFormat, list[Found]] | None:
    """The first format that sniffs and reads `src`, with what it read; None when none does."""
    for fmt in formats:
        if fmt.sniff(src):
            got = fmt.read(src)
            if got is not None:
                return fmt, got
    return None


def looks_like_yaml(text: str) -> bool:
    """The first line that is not blank or a comment starts like one of the YAML formats."""
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return bool(_YAML_START.match(s))
    return False
