"""The README is a front door (at most ~150 lines) and docs/ is the manual: every generated page is
the one scripts/gen_docs.py writes from the registries, and every relative link resolves (to a file,
and to a heading of it where the link names one)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs", mod)
    spec.loader.exec_module(mod)
    return mod


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def test_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert text.index("make demo") < text.index("make test") < 2000, "the two commands come first"


def test_generated_pages_are_current() -> None:
    assert _gen().stale() == [], "docs/ is stale: run scripts/gen_docs.py"


def test_the_generator_notices_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _gen()
    for name, text in gen.pages().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(gen, "DOCS", tmp_path)
    assert gen.stale() == []
    (tmp_path / "scenarios.md").write_text("edited by hand\n", encoding="utf-8")
    (tmp_path / "json" / "gone-Result.md").write_text("x\n", encoding="utf-8")
    assert set(gen.stale()) == {"scenarios.md", "json/gone-Result.md"}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_resolve(page: Path) -> None:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.relative_to(ROOT)}: link to missing {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.relative_to(ROOT)}: no heading #{anchor} in {path}"
