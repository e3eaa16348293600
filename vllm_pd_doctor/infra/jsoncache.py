"""A small JSON file of cached facts (key -> value): read leniently, written atomically, capped."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def load(path: Path) -> dict[str, Any]:
    """The cache's entries; an absent or unreadable file is an empty cache."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def save(path: Path, cache: dict[str, Any], *, keep: int) -> None:
    """Write the newest `keep` entries through a temp file and a rename; failures are ignored
    (a cache that cannot be written only costs time)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(list(cache.items())[-keep:])), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass
