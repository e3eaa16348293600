"""The package tree of docs/contributing.md is the one scripts/readme_tree.py generates from the module
docstrings: every module and package listed, no stale name, every summary current."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_tree", ROOT / "scripts" / "readme_tree.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("readme_tree", mod)
    spec.loader.exec_module(mod)
    return mod


def test_readme_tree_is_the_generated_one() -> None:
    tree = _script()
    block = tree.current((ROOT / "docs" / "contributing.md").read_text(encoding="utf-8"))
    assert block is not None, "docs/contributing.md lost the package tree's markers"
    assert block == tree.block(), "docs/contributing.md's package tree is stale: run scripts/readme_tree.py"


def test_every_module_has_a_line_and_a_summary() -> None:
    tree = _script()
    listed = {name.strip().rstrip("/") for name, _ in tree.entries(tree.PACKAGE)}
    files = {p.name for p in tree.PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    packages = {p.parent.name for p in tree.PACKAGE.rglob("__init__.py") if p.parent != tree.PACKAGE}
    assert files | packages <= listed
    assert all(text for _, text in tree.entries(tree.PACKAGE)), "a module without a docstring"
