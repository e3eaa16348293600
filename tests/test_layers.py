"""Every top-level module of the package has its layer in pyproject.toml's import-linter
contract (so `make lint` checks its imports: a module left out of the list is not checked)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent


def test_every_top_level_module_has_a_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    layered = {name.strip() for layer in contract["layers"] for name in layer.replace("|", ":").split(":")}
    package = ROOT / "vllm_pd_doctor"
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in package.glob("*/__init__.py")}
    assert modules | packages <= layered, sorted((modules | packages) - layered)
