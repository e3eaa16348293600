"""Text from inputs made safe to show: no terminal control sequences, no bidi overrides.

A launch config, a log line or a model name can carry ESC sequences (clear the screen, set the
window title, hide text, OSC 52 writes to the clipboard), other C0/C1 controls, a carriage return
that overwrites what was printed, or Unicode bidi overrides that reorder what a reader sees.
Every such character is shown as its escape (`\\x1b`, `\\u202e`) instead, so the text stays
readable and nothing reaches a terminal or a Markdown file that acts on it.

`text` cleans one string; `clean` cleans every string inside a result (frozen dataclasses,
tuples, lists, dicts) before it is rendered: `formats.emit` calls it, so every format and every
command is covered in one place, and the renderers' own colour codes are untouched.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from enum import Enum
from pathlib import PurePath
from typing import Any, TypeVar

T = TypeVar("T")

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but tab and newline, DEL, C1 controls, and the bidi marks and overrides."""


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def text(s: str) -> str:
    """`s` with every control character (but tab and newline) and bidi override escaped."""
    if not _UNSAFE.search(s):
        return s
    return _UNSAFE.sub(_escape, s)


def line(s: str) -> str:
    """`s` for one line of a terminal message: `text`, and newlines shown as `\\n` too."""
    return text(s).replace("\n", "\\n")


def json_text(s: str) -> str:
    """Serialised JSON with every unsafe character written as its `\\uXXXX` escape: the same
    document once parsed, nothing a terminal acts on when the file is printed."""
    if not _UNSAFE.search(s):
        return s
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", s)


def bundle_file(name: str, content: str | bytes) -> str | bytes:
    """A bundle's file as written: report Markdown and JSON made safe to print (`text`,
    `json_text`); verbatim copies under `raw/` and anything else as they are."""
    if name.startswith("raw/") or not name.endswith((".md", ".json")):
        return content
    if isinstance(content, bytes):
        try:
            decoded = content.decode("utf-8")
        except UnicodeDecodeError:
            return content
        return bundle_file(name, decoded).encode("utf-8")  # type: ignore[union-attr]
    return text(content) if name.endswith(".md") else json_text(content)


def clean(obj: T, _depth: int = 0) -> T:
    """`obj` with `text` applied to every string in it; the same object when nothing changes."""
    return _clean(obj, _depth)  # type: ignore[no-any-return]


def _clean(obj: Any, depth: int) -> Any:
    if depth > 200:
        return obj
    if isinstance(obj, str):
        return text(obj) if not isinstance(obj, Enum) else obj
    if isinstance(obj, (int, float, bool, type(None), Enum, bytes)):
        return obj
    if isinstance(obj, PurePath):
        s = str(obj)
        cleaned = text(s)
        return obj if cleaned is s else type(obj)(cleaned)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changed = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name, None)
            new = _clean(value, depth + 1)
            if new is not value:
                changed[f.name] = new
        if not changed:
            return obj
        dup = copy.copy(obj)
        for name, value in changed.items():
            object.__setattr__(dup, name, value)
        return dup
    if isinstance(obj, (tuple, list)):
        items = [_clean(v, depth + 1) for v in obj]
        if all(a is b for a, b in zip(items, obj, strict=True)):
            return obj
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a NamedTuple
            return type(obj)(*items)
        return type(obj)(items)
    if isinstance(obj, dict):
        pairs = [(_clean(k, depth + 1), _clean(v, depth + 1)) for k, v in obj.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, obj.items(), strict=True)):
            return obj
        return type(obj)(pairs) if type(obj) is dict else dict(pairs)
    return obj
