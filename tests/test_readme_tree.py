"""README "Where things live" names files that exist (placeholders such as NAME match any)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "vllm_pd_doctor"


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Where things live")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _paths() -> list[str]:
    """Every backticked file or folder path in the section (`x.py`, `dir/x.py`, `dir/`)."""
    found = re.findall(r"`([\w./*-]+(?:\.py|/))`", _section())
    return sorted(set(found))


def _exists(path: str) -> bool:
    pattern = re.sub(r"\*+", "*", re.sub(r"[A-Z]+(?=[\w*]*\.py$)", "*", path))  # NAME.py, test_NAME*.py
    for base in (PKG, ROOT, PKG / "formats", PKG / "target"):
        if "*" in pattern:
            if list(base.glob(pattern)):
                return True
        elif (base / pattern).exists():
            return True
    return False


def test_where_things_live_names_real_files() -> None:
    paths = _paths()
    assert len(paths) > 10, paths  # the section still names files
    missing = [p for p in paths if not _exists(p)]
    assert not missing, f"README 'Where things live' names files that do not exist: {missing}"
