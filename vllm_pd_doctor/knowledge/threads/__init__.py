"""The index of public P/D threads: issues and pull requests whose reports quote a failure line,
with the cause established there, the fix and how sure that is (issue 32 item 5).

Data: one JSON object a line in `data/*.jsonl` beside this file (one file per group of projects, so
several people can grow it at once), every entry read in its thread before it was written down:

    {"url": "https://github.com/vllm-project/vllm/issues/21583",
     "repo": "vllm-project/vllm", "number": 21583, "kind": "issue",       # issue | pr | discussion
     "title": "...", "opened": "2025-07-25",                                # YYYY-MM-DD
     "release": "0.10.0",                                                   # what the reporter ran, or null
     "packages": ["vllm", "nixl"],                                          # whose code wrote the lines
     "lines": [{"quoted": "<the line as the thread quotes it>",
                "template": "<the same line with its values as {name} or {name:type}>",
                "lookalike": "<a real-looking line that must NOT match the template>"}],
     "cause": "<the cause as established in the thread, one or two sentences>",
     "fix": {"kind": "pr|release|config|workaround|none", "ref": "PR #21602 | 0.10.2 | ...",
             "text": "<what to do, in a user's words>"},
     "certainty": "maintainer-confirmed|fix-merged|reporter-confirmed|open",
     "side": "prefill|decode|both|proxy|unknown",
     "class": "<pd-doctor triage class id, or null>"}

Templates: literal text with placeholders `{name}` (any text, shortest match) or `{name:type}`;
types: int, float (also ints), hex, id (no spaces), host (name, IPv4, IPv6), port, path, word, text.
Whitespace runs match any whitespace run; matching is a search (a line may carry any prefix).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data")

TYPES: dict[str, str] = {
    "int": r"-?\d+",
    "float": r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?",
    "hex": r"(?:0x)?[0-9a-fA-F]+",
    "id": r"\S+?",
    "host": r"[A-Za-z0-9_.\-]+|\[?[0-9a-fA-F:]+\]?",
    "port": r"\d{1,5}",
    "path": r"[^\s:'\"]+",
    "word": r"\w+",
    "text": r".+?",
}
CERTAINTY = ("maintainer-confirmed", "fix-merged", "reporter-confirmed", "open")
"""Strongest first."""
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([a-z]+))?\}")
_SPACE = re.compile(r"\s+")


class TemplateError(ValueError):
    """A template that does not compile (unknown type, a name used twice)."""


@functools.lru_cache(maxsize=4096)
def compile_template(template: str) -> re.Pattern[str]:
    """The regular expression of a thread template (see the module docstring)."""
    out: list[str] = []
    pos = 0
    seen: set[str] = set()
    for m in _FIELD.finditer(template):
        out.append(_literal(template[pos : m.start()]))
        name, kind = m.group(1), m.group(2) or "text"
        if kind not in TYPES:
            raise TemplateError(f"unknown placeholder type {kind!r} in {template!r}")
        if name in seen:
            raise TemplateError(f"placeholder {name!r} used twice in {template!r}")
        seen.add(name)
        out.append(f"(?P<{name}>{TYPES[kind]})")
        pos = m.end()
    out.append(_literal(template[pos:]))
    return re.compile("".join(out))


def _literal(text: str) -> str:
    return r"\s+".join(re.escape(part) for part in _SPACE.split(text))


def match(template: str, line: str) -> dict[str, str] | None:
    """The placeholders' values when `line` holds the template, else None."""
    m = compile_template(template).search(line)
    return None if m is None else {k: v for k, v in m.groupdict().items() if v is not None}


@dataclass(frozen=True)
class QuotedLine:
    quoted: str
    template: str
    lookalike: str


@dataclass(frozen=True)
class Thread:
    """One public thread and what it established."""

    url: str
    repo: str
    number: int
    kind: str
    title: str
    opened: str | None
    release: str | None
    packages: tuple[str, ...]
    lines: tuple[QuotedLine, ...]
    cause: str
    fix_kind: str
    fix_ref: str | None
    fix_text: str
    certainty: str
    side: str
    klass: str | None


def _thread(doc: dict[str, Any]) -> Thread:
    fix = doc.get("fix") or {}
    return Thread(
        url=doc["url"],
        repo=doc["repo"],
        number=int(doc["number"]),
        kind=doc.get("kind", "issue"),
        title=doc.get("title", ""),
        opened=doc.get("opened"),
        release=doc.get("release"),
        packages=tuple(doc.get("packages") or ()),
        lines=tuple(QuotedLine(x["quoted"], x["template"], x["lookalike"]) for x in doc["lines"]),
        cause=doc.get("cause", ""),
        fix_kind=fix.get("kind", "none"),
        fix_ref=fix.get("ref"),
        fix_text=fix.get("text", ""),
        certainty=doc.get("certainty", "open"),
        side=doc.get("side", "unknown"),
        klass=doc.get("class"),
    )


@functools.cache
def load(folder: Path = DATA) -> tuple[Thread, ...]:
    """Every thread of every data file, in file order."""
    out: list[Thread] = []
    for path in sorted(folder.glob("*.jsonl")):
        for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if raw.strip():
                try:
                    out.append(_thread(json.loads(raw)))
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{path.name}:{n}: not a thread entry ({exc})") from None
    return tuple(out)
