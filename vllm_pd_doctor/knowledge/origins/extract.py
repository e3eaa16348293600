"""Read the statements that write log lines and raise errors out of Python source, by `ast` only.

For one module's text: every `logger.<level>(...)` call, every `raise X(...)` and every
`assert cond, msg`, as a `Statement` with its qualified function, line span, exception type or
level, the guarding condition (the enclosing `if` test, or the `assert` test) as source, and the
message as a template: its literal parts joined by `PLACEHOLDER` where an f-string field, a
`%`-format, a `.format` field or any non-literal part stands, and each placeholder's name and type
(`names`: the argument expression as source, `len(...)` and `%d` give `int`). Nothing is imported or
executed.
"""

from __future__ import annotations

import ast
import re
import textwrap
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
MAX_NAME = 60
"""Characters of a placeholder's expression kept as its name."""


@dataclass(frozen=True)
class Hole:
    """Where a value goes in a template: the expression that gives it (source) and its type."""

    name: str
    type: str
    """`int`, `float`, `count`, `seconds`, `host`, `port`, `rank`, `id`, `path` or `text`."""


_CONV_TYPE = {"d": "int", "i": "int", "u": "int", "f": "float", "F": "float", "e": "float", "g": "float"}
_NAME_TYPES = (
    (re.compile(r"(^|_)(num|n|count|size)(_|$)|^num"), "count"),
    (re.compile(r"(^|_)(port)s?($|_)"), "port"),
    (re.compile(r"(^|_)(host|hostname|ip|addr|address)($|_)"), "host"),
    (re.compile(r"(^|_)rank($|_)|^tp_rank|^dp_rank"), "rank"),
    (re.compile(r"(^|_)(seconds|secs|timeout|duration|elapsed|lease|ttl)($|_)|_s$"), "seconds"),
    (re.compile(r"(^|_)(path|dir|file|filename)($|_)"), "path"),
    (re.compile(r"(^|_)(id|ids|uuid|engine_id|req_id|request_id)($|_)"), "id"),
)
"""A placeholder's type from the last name of its expression (`self.side_channel_port` -> port);
the format's own conversion (`%d`, `{x:.2f}`) comes first."""


def hole_type(expr: str, conv: str | None = None) -> str:
    """The type of a placeholder given by `expr` (source) with the format conversion `conv`."""
    low = expr.lower()
    if low.startswith("len("):
        by_name: str | None = "count"
    else:
        tail = re.sub(r"[^\w]+$", "", re.sub(r"\(.*$", "", low)).rsplit(".", 1)[-1]
        by_name = next((t for rx, t in _NAME_TYPES if rx.search(tail)), None)
    if conv and conv[-1:] in _CONV_TYPE:
        kind = _CONV_TYPE[conv[-1]]
        if kind == "int" and by_name in ("count", "port", "rank", "seconds"):
            return by_name
        if kind == "float" and by_name == "seconds":
            return "seconds"
        return kind
    return by_name or "text"


def _hole(node: ast.expr | None, conv: str | None = None) -> Hole:
    if node is None:
        return Hole("?", hole_type("", conv))
    src = ast.unparse(node)
    if len(src) > MAX_NAME:
        src = src[: MAX_NAME - 3] + "..."
    return Hole(src, hole_type(src, conv))


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
    holes: tuple[Hole, ...] = ()
    """The template's placeholders, in order."""
    body: str | None = None
    """A `def`'s source, dedented (what `build` diffs between releases)."""
    shape: str | None = None
    """A `def`'s syntax tree without positions, comments or formatting (`ast.dump`): two releases
    changed the function only where these differ."""


Part = str | Hole


def _join(parts: list[Part]) -> tuple[str, tuple[Hole, ...]]:
    """Literal parts with a Hole for each placeholder -> one template and its holes (adjacent
    placeholders merge into one, named by the first)."""
    out: list[str] = []
    holes: list[Hole] = []
    for p in parts:
        if isinstance(p, Hole):
            if not out or out[-1] != PLACEHOLDER:
                out.append(PLACEHOLDER)
                holes.append(p)
        elif p:
            out.append(p)
    return "".join(out), tuple(holes)


def _percent(text: str, args: list[ast.expr] | None = None) -> list[Part]:
    """A %-format's parts; `args` are the argument expressions that fill it (in order)."""
    parts: list[Part] = []
    pos = 0
    k = 0
    for m in _PERCENT.finditer(text):
        parts.append(text[pos : m.start()])
        if m.group(0) == "%%":
            parts.append("%")
        else:
            parts.append(_hole(args[k] if args and k < len(args) else None, m.group(0)))
            k += 1
        pos = m.end()
    parts.append(text[pos:])
    return parts


def _brace(
    text: str, args: list[ast.expr] | None = None, kw: dict[str, ast.expr] | None = None
) -> list[Part]:
    parts: list[Part] = []
    pos = 0
    k = 0
    for m in _BRACE.finditer(text):
        parts.append(text[pos : m.start()])
        g = m.group(0)
        if g in ("{{", "}}"):
            parts.append(g[0])
        else:
            field, _, spec = g[1:-1].partition(":")
            field = field.split("!", 1)[0]
            node = (kw or {}).get(field)
            if node is None and args:
                node = (
                    args[int(field)]
                    if field.isdigit() and int(field) < len(args)
                    else (args[k] if not field and k < len(args) else None)
                )
            parts.append(
                _hole(node, spec or None) if node is not None else Hole(field or "?", hole_type(field, spec))
            )
            k += 1
        pos = m.end()
    parts.append(text[pos:])
    return parts


def _fstring_hole(v: ast.FormattedValue) -> Hole:
    spec = None
    if isinstance(v.format_spec, ast.JoinedStr):
        spec = "".join(str(c.value) for c in v.format_spec.values if isinstance(c, ast.Constant))
    return _hole(v.value, spec or None)


def template_parts(node: ast.expr, percent: bool = False, args: list[ast.expr] | None = None) -> list[Part]:
    """The literal parts of a message expression (a Hole where a value goes); `args`: the values
    of a %-format (a logger call's further arguments)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _percent(node.value, args) if percent else [node.value]
    if isinstance(node, ast.JoinedStr):
        out: list[Part] = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                out.append(v.value)
            else:
                out.append(_fstring_hole(v) if isinstance(v, ast.FormattedValue) else _hole(v))
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template_parts(node.left, percent, args) + template_parts(node.right, percent, args)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        right = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        return template_parts(node.left, percent=True, args=list(right))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant | ast.JoinedStr | ast.BinOp)
    ):
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        out = []
        for p in template_parts(node.func.value):
            out.extend(_brace(p, list(node.args), kw) if isinstance(p, str) else [p])
        return out
    return [_hole(node)]


def template(
    node: ast.expr | None, percent: bool = False, args: list[ast.expr] | None = None
) -> tuple[str | None, tuple[Hole, ...]]:
    """The template of a message expression and its placeholders (None, () when it has no
    literal text)."""
    if node is None:
        return None, ()
    t, holes = _join(template_parts(node, percent, args))
    return (t, holes) if t.replace(PLACEHOLDER, "").strip() else (None, ())


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
    def __init__(self, lines: list[str] | None = None) -> None:
        self.lines = lines or []
        self.scope: list[str] = []
        self.conds: list[str] = []
        self.out: list[Statement] = []

    def _func(self) -> str:
        return ".".join(self.scope) or "<module>"

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        if not isinstance(node, ast.ClassDef):  # the function itself: a traceback frame's home
            end = node.end_lineno or node.lineno
            body = shape = None
            if self.lines:
                body = textwrap.dedent("".join(self.lines[node.lineno - 1 : end]))
                shape = ast.dump(node)
            self.out.append(
                Statement("def", "", self._func(), node.lineno, end, None, None, body=body, shape=shape)
            )
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
        self,
        node: ast.stmt | ast.expr,
        kind: str,
        what: str,
        tmpl: tuple[str | None, tuple[Hole, ...]],
        cond: str | None,
    ) -> None:
        end = getattr(node, "end_lineno", None) or node.lineno
        t, holes = tmpl
        c = _cond(cond) if cond else None
        self.out.append(Statement(kind, what, self._func(), node.lineno, end, t, c, holes=holes))

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
            tmpl = template(node.args[0], percent, list(node.args[1:]))
            self._add(node, "log", LEVELS[f.attr], tmpl, self.conds[-1] if self.conds else None)
        self.generic_visit(node)


def statements(text: str, name: str = "<source>", bodies: bool = False) -> list[Statement]:
    """Every statement of one module (empty for a module that does not parse); `bodies`: keep each
    function's source."""
    try:
        tree = ast.parse(text, filename=name)
    except (SyntaxError, ValueError):
        return []
    v = _Visitor(text.splitlines(keepends=True) if bodies else None)
    v.visit(tree)
    return v.out
