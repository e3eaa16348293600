"""Read the statements that write log lines and raise errors out of Python source, by `ast` only.

For one module's text: every `logger.<level>(...)` call, every `raise X(...)` and every
`assert cond, msg`, as a `Statement` with its qualified function, line span, exception type or
level, the guarding condition (the enclosing `if` test, or the `assert` test) as source, and the
message as a template: its literal parts joined by `PLACEHOLDER` where an f-string field, a
`%`-format, a `.format` field or any non-literal part stands. Nothing is imported or executed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

PLACEHOLDER = "\x00"
"""Stands for any value inside a template."""
LEVELS = {
    "debug": "DEBUG",
    "debug_once": "DEBUG",
    "info": "INFO",
    "info_once": "INFO",
    "warning": "WARNING",
    "warning_once": "WARNING",
    "warn": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
    "fatal": "CRITICAL",
}
"""Logger methods read, and the level each writes (`exception` writes ERROR plus a traceback)."""
_LOGGER_NAME = re.compile(r"^_?(logger|log|LOGGER|_logger|init_logger\(.*\))$")
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[diouxXeEfFgGcrsa%]")
_BRACE = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
MAX_COND = 200
"""Characters of a guarding condition kept."""


@dataclass(frozen=True)
class Statement:
    """One statement that writes a line or raises."""

    kind: str
    """`log`, `raise`, `assert`, or `def` (the function itself, for frames that raise without a
    statement of their own: a KeyError from a lookup, a ValueError from an unpack)."""
    what: str
    """The level (`WARNING`) of a log call, the exception type of a raise or assert."""
    function: str
    """Qualified function (`Scheduler.schedule`), `<module>` at module level."""
    line: int
    end_line: int
    template: str | None
    """Literal parts joined by PLACEHOLDER; None when the message is not built from literals."""
    condition: str | None
    """The assert test, or the enclosing `if` test (`not (...)` in its else branch)."""
    params: tuple[str, ...] = ()
    """One name per placeholder where the source gives it (native extractor: the argument's
    name, or its conversion's type); empty for the Python extractor's templates."""


def _join(parts: list[str | None]) -> str:
    """Literal parts with None for placeholders -> one template (adjacent placeholders merge)."""
    out: list[str] = []
    for p in parts:
        if p is None:
            if not out or out[-1] != PLACEHOLDER:
                out.append(PLACEHOLDER)
        elif p:
            out.append(p)
    return "".join(out)


def _percent(text: str) -> list[str | None]:
    parts: list[str | None] = []
    pos = 0
    for m in _PERCENT.finditer(text):
        parts.append(text[pos : m.start()])
        parts.append("%" if m.group(0) == "%%" else None)
        pos = m.end()
    parts.append(text[pos:])
    return parts


def _brace(text: str) -> list[str | None]:
    parts: list[str | None] = []
    pos = 0
    for m in _BRACE.finditer(text):
        parts.append(text[pos : m.start()])
        g = m.group(0)
        parts.append(g[0] if g in ("{{", "}}") else None)
        pos = m.end()
    parts.append(text[pos:])
    return parts


def template_parts(node: ast.expr, percent: bool = False) -> list[str | None]:
    """The literal parts of a message expression (None where a value goes)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _percent(node.value) if percent else [node.value]
    if isinstance(node, ast.JoinedStr):
        out: list[str | None] = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                out.append(v.value)
            else:
                out.append(None)
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template_parts(node.left, percent) + template_parts(node.right, percent)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return template_parts(node.left, percent=True)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant | ast.JoinedStr | ast.BinOp)
    ):
        raw = template_parts(node.func.value)
        out = []
        for p in raw:
            out.extend(_brace(p) if p is not None else [None])
        return out
    return [None]


def template(node: ast.expr | None, percent: bool = False) -> str | None:
    if node is None:
        return None
    t = _join(template_parts(node, percent))
    return t if t.replace(PLACEHOLDER, "").strip() else None


def _exc_name(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_logger(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return bool(_LOGGER_NAME.match(node.id))
    if isinstance(node, ast.Attribute):
        return node.attr.lower().endswith("logger")
    return False


def _cond(text: str) -> str:
    return text if len(text) <= MAX_COND else text[: MAX_COND - 3] + "..."


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.scope: list[str] = []
        self.conds: list[str] = []
        self.out: list[Statement] = []

    def _func(self) -> str:
        return ".".join(self.scope) or "<module>"

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        if not isinstance(node, ast.ClassDef):  # the function itself: a traceback frame's home
            end = node.end_lineno or node.lineno
            self.out.append(Statement("def", "", self._func(), node.lineno, end, None, None))
        saved, self.conds = self.conds, []
        self.generic_visit(node)
        self.conds = saved
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        self.visit(node.test)
        self.conds.append(test)
        for s in node.body:
            self.visit(s)
        self.conds[-1] = f"not ({test})"
        for s in node.orelse:
            self.visit(s)
        self.conds.pop()

    def _add(
        self, node: ast.stmt | ast.expr, kind: str, what: str, tmpl: str | None, cond: str | None
    ) -> None:
        end = getattr(node, "end_lineno", None) or node.lineno
        self.out.append(
            Statement(kind, what, self._func(), node.lineno, end, tmpl, _cond(cond) if cond else None)
        )

    def visit_Raise(self, node: ast.Raise) -> None:
        name = _exc_name(node.exc)
        if name is not None:
            msg = node.exc.args[0] if isinstance(node.exc, ast.Call) and node.exc.args else None
            self._add(node, "raise", name, template(msg), self.conds[-1] if self.conds else None)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._add(node, "assert", "AssertionError", template(node.msg), ast.unparse(node.test))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in LEVELS and _is_logger(f.value) and node.args:
            percent = len(node.args) > 1
            self._add(
                node,
                "log",
                LEVELS[f.attr],
                template(node.args[0], percent),
                self.conds[-1] if self.conds else None,
            )
        self.generic_visit(node)


def statements(text: str, name: str = "<source>") -> list[Statement]:
    """Every statement of one module (empty for a module that does not parse)."""
    try:
        tree = ast.parse(text, filename=name)
    except (SyntaxError, ValueError):
        return []
    v = _Visitor()
    v.visit(tree)
    return v.out
