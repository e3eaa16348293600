"""Facts about connectors and vLLM releases are written in `vllm_pd_doctor/knowledge/` only.

Every string constant of the package outside `knowledge/` (f-string parts included) is read with
`ast` and fails the test when it is
- a connector name: exactly a registered key, a vLLM `kv_connector` name of an entry, or a
  launcher's connector name or what it maps to (`knowledge.connectors.literals()`), or
- a vLLM release: a version `0.N.M` / `0.N.x` with N >= 2 anywhere in it, prose included
  (`"upgrade to 0.29.0"`, `"e.g. 0.28.0"`): say it through `knowledge.fixes`,
  `knowledge.advisories` or `knowledge.examples`.

Not counted (they are not facts the code acts on or says):
- docstrings and attribute docstrings (any string that is a statement by itself) and comments;
- dict display keys and subscript keys (`{"nixl": ...}`, `doc["nixl"]`): field names of a
  document such as report.json, not connectors;
- the log-origin vocabulary of triage: members of a `Literal[...]` and the value of an
  `origin=` keyword (which software wrote a log line: the library, not the connector);
- `0.1.0` and `0.0.0` (pd-doctor's own version, a placeholder): vLLM's releases start at 0.2.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from vllm_pd_doctor.knowledge.facts import connectors

PACKAGE = Path(__file__).resolve().parents[2] / "vllm_pd_doctor"
KNOWLEDGE = PACKAGE / "knowledge"
RELEASE = re.compile(r"(?<![\w.])0\.([2-9]|[1-9]\d)\.(\d+|x)(?![\w])")


def _exempt_ids(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes the rules above leave out."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            out.add(id(node.value))
        elif isinstance(node, ast.Dict):
            out.update(id(k) for k in node.keys if isinstance(k, ast.Constant))
        elif isinstance(node, ast.Subscript):
            if isinstance(node.value, ast.Name) and node.value.id == "Literal":
                out.update(id(n) for n in ast.walk(node.slice) if isinstance(n, ast.Constant))
            elif isinstance(node.slice, ast.Constant):
                out.add(id(node.slice))
        elif isinstance(node, ast.keyword) and node.arg == "origin" and isinstance(node.value, ast.Constant):
            out.add(id(node.value))
    return out


def offences(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, constant) of every connector or release literal in `source`, by the rules above."""
    tree = ast.parse(source)
    exempt = _exempt_ids(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in exempt:
            continue
        if node.value in names or RELEASE.search(node.value):
            found.append((node.lineno, node.value))
    return sorted(found)


def _package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if KNOWLEDGE not in p.parents)


def test_no_connector_or_release_literal_outside_knowledge() -> None:
    names = connectors.literals()
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text[:80]!r}"
        for path in _package_files()
        for line, text in offences(path.read_text(encoding="utf-8"), names)
    ]
    assert not bad, "facts belong in vllm_pd_doctor/knowledge/:\n" + "\n".join(bad)


def test_the_names_cover_every_entry_and_alias() -> None:
    names = connectors.literals()
    for c in connectors.all_connectors():
        assert c.key in names and set(c.vllm_names) <= names
    for table in connectors.LAUNCHER_CONNECTORS.values():
        assert set(table) <= names and set(table.values()) <= names


@pytest.mark.parametrize(
    ("source", "expect"),
    [
        ('x = "nixl"', [(1, "nixl")]),
        ('f(connector="mooncake")', [(1, "mooncake")]),
        ('kv = {"kv_connector": "NixlConnector"}', [(1, "NixlConnector")]),
        ('fix = "upgrade vLLM to 0.29.0 or later"', [(1, "upgrade vLLM to 0.29.0 or later")]),
        ('x = f"e.g. {v} or 0.28.x"', [(1, " or 0.28.x")]),
        ('help = "Releases, e.g. 0.24.0..0.32.0."', [(1, "Releases, e.g. 0.24.0..0.32.0.")]),
    ],
)
def test_a_literal_is_found(source: str, expect: list[tuple[int, str]]) -> None:
    assert offences(source, connectors.literals()) == expect


@pytest.mark.parametrize(
    "source",
    [
        '"""Docstring naming nixl and 0.29.0."""',
        'class A:\n    x: int = 1\n    """Attribute docstring: fixed in 0.29.0 for "nixl"."""',
        'doc = {"nixl": info}',
        'v = doc["nixl"]',
        'Origin = Literal["vllm", "nixl", "mooncake"]',
        'M("x", r"y", origin="nixl")',
        '__version__ = "0.1.0"',
        'validate(package, "0.0.0")',
        'note = "NIXL < 0.10 has no such call"',
        'path = "nixl/pull_scheduler.py"',
        'name = "pd_doctor_live_plugin-0.0.dist-info"',
    ],
)
def test_a_lookalike_is_not(source: str) -> None:
    assert offences(source, connectors.literals()) == []
