"""Reading vLLM's Scheduler class body with `ast` for the Scheduler hotfixes (stdlib only).

One parse of the scheduler's source file (the installed one, or the loaded module's), with the file's
line numbers; the helpers the fixes' planners share (hotfix_abort_race.py, hotfix_load_failure.py).
"""

from __future__ import annotations

import ast
from typing import Any

from . import hotfixes
from .hotfix_plan import _rel

CLASS = "Scheduler"


class ClassSource:
    """The `Scheduler` class body of one file, parsed (line numbers are the file's)."""

    def __init__(self, path: str, text: str) -> None:
        self.rel = _rel(path)
        tree = ast.parse(text)
        self.node = next(
            (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS),
            None,
        )
        self.methods: dict[str, ast.FunctionDef] = {}
        if self.node is not None:
            for n in self.node.body:
                if isinstance(n, ast.FunctionDef):
                    self.methods[n.name] = n

    def at(self, node: ast.AST) -> str:
        return f"{self.rel}:{getattr(node, 'lineno', '?')}"


def is_self_attr(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def self_calls(fn: ast.FunctionDef, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and is_self_attr(n.func, name)]


def params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]


def recompilable(fn: ast.FunctionDef) -> str | None:
    """Why the method's source cannot be recompiled on its own (None: it can)."""
    if fn.decorator_list:
        return f"{fn.name} is decorated"
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id in ("super", "__class__"):
            return f"{fn.name} uses {n.id}"
    return None


def entry(fix: str, src: ClassSource, fn_name: str, fn: ast.AST | None) -> dict[str, Any]:
    h = hotfixes.get(fix)
    return {
        "fix": fix,
        "label": h.label if h else "",
        "function": f"{CLASS}.{fn_name}",
        "at": src.at(fn) if fn is not None else None,
    }


def out(entry: dict[str, Any], status: str, reason: str) -> dict[str, Any]:
    entry.update(status=status, reason=reason)
    return entry
