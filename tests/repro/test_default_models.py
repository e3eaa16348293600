"""The default models are named in one place (repro/models.py; the dense one by the scenario registry),
and what they name is bundled."""

from __future__ import annotations

import ast
from pathlib import Path

from vllm_pd_doctor.repro import inprocess
from vllm_pd_doctor.repro import models as defaults

PACKAGE = Path(__file__).resolve().parents[2] / "vllm_pd_doctor"


def _literals(name: str) -> set[str]:
    """Modules of the package whose code (not a docstring or comment) holds the string `name`."""
    out = set()
    for p in PACKAGE.rglob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
        }
        if any(isinstance(n, ast.Constant) and n.value == name and id(n) not in docs for n in ast.walk(tree)):
            out.add(p.relative_to(PACKAGE).as_posix())
    return out


def test_each_default_model_is_spelled_once() -> None:
    assert _literals(defaults.HYBRID) == {"repro/models.py"}
    assert _literals(defaults.DENSE) == {"knowledge/facts/scenarios.py"}


def test_the_defaults_are_bundled_and_the_engines_use_them() -> None:
    assert (defaults.hybrid() / "config.json").is_file()
    assert (defaults.dense() / "config.json").is_file()
    assert (defaults.scripts_dir() / "make_tiny_model.py").is_file()
    assert inprocess.default_model_dir() == defaults.hybrid()
