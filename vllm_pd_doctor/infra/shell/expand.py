"""Word expansion (bash rules, nothing executed): quotes, `$VAR`, `${VAR:-default}` and the other
parameter forms, arrays, `$(( ))` arithmetic, and command substitution through a hook.

What the file cannot tell expands to its own text (`${NAME}`, `$(cmd)`) and is recorded in
`Scope.unresolved`.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from vllm_pd_doctor.infra.shell.words import UNRESOLVED_RE, balanced_end, dquote_end

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Scope:
    """What the expander may ask: variables, arrays, positionals, and the interpreter hooks."""

    vars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    positional: list[str] = field(default_factory=list)
    command_subst: Callable[[str], str | None] = lambda _: None
    unresolved: set[str] = field(default_factory=set)

    def get(self, name: str) -> str | None:
        if name.isascii() and name.isdigit():
            k = int(name)
            if k == 0:
                return "script"
            return self.positional[k - 1] if k <= len(self.positional) else ""
        if name == "#":
            return str(len(self.positional))
        if name in ("@", "*"):
            return " ".join(self.positional)
        if name in self.vars:
            return self.vars[name]
        if name in self.arrays:
            a = self.arrays[name]
            return a[0] if a else ""
        return None


class _Fields:
    """Fields being built: bash's word splitting of unquoted expansions."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.cur: list[str] = []
        self.has = False

    def lit(self, text: str) -> None:
        self.cur.append(text)
        self.has = True

    def split(self, text: str) -> None:
        parts = text.split()
        if not parts:
            return
        if text[:1].isspace():
            self.end()
        for k, p in enumerate(parts):
            if k:
                self.end()
            self.lit(p)
        if text[-1:].isspace():
            self.end()

    def end(self) -> None:
        if self.has:
            self.out.append("".join(self.cur))
        self.cur, self.has = [], False

    def fields(self) -> list[str]:
        self.end()
        return self.out


def expand(raw: str, sc: Scope, *, split: bool = True) -> list[str]:
    """Expand one raw word into its fields (`split=False`: exactly one string, no splitting)."""
    f = _Fields()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "'":
            j = raw.find("'", i + 1)
            j = n if j < 0 else j
            f.lit(raw[i + 1 : j])
            i = j + 1
        elif c == "$" and raw.startswith("$'", i):
            j = raw.find("'", i + 2)
            j = n if j < 0 else j
            f.lit(raw[i + 2 : j].replace("\\n", "\n").replace("\\t", "\t").replace("\\'", "'"))
            i = j + 1
        elif c == '"':
            j = dquote_end(raw, i + 1) if i + 1 <= n else n
            inner = raw[i + 1 : j - 1]
            arr = re.fullmatch(r"\$\{(!?)([A-Za-z_]\w*)\[[@*]\]\}", inner)
            if arr and arr.group(2) in sc.arrays:
                items = sc.arrays[arr.group(2)]
                if arr.group(1):
                    items = [str(k) for k in range(len(items))]
                for k, it in enumerate(items):
                    if k:
                        f.end()
                    f.lit(it)
                if not items:
                    f.end()
            elif inner in ("$@",):
                for k, it in enumerate(sc.positional):
                    if k:
                        f.end()
                    f.lit(it)
            else:
                f.lit(expand_dquoted(inner, sc))
            i = j
        elif c == "\\":
            f.lit(raw[i + 1 : i + 2])
            i += 2
        elif c == "$" or c == "`":
            val, j = _dollar(raw, i, sc)
            if val is None:
                f.lit(raw[i:j])
            elif UNRESOLVED_RE.fullmatch(val) or val.startswith("$(("):
                f.lit(val)  # what the file cannot tell stays one piece, named
            elif split:
                f.split(val)
            else:
                f.lit(val)
            i = j
        else:
            f.lit(c)
            i += 1
    out = f.fields()
    return out if split else ["".join(out)] if out else [""]


def expand_dquoted(s: str, sc: Scope) -> str:
    """Expand the inside of a double-quoted string (also here-strings, default words)."""
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] in '$`"\\\n':
            out.append("" if s[i + 1] == "\n" else s[i + 1])
            i += 2
        elif c in "$`":
            val, j = _dollar(s, i, sc)
            out.append(s[i:j] if val is None else val)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _dollar(s: str, i: int, sc: Scope) -> tuple[str | None, int]:
    """Expand the `$...` or backquote at s[i]; (value or None to keep the text, end index)."""
    n = len(s)
    if s[i] == "`":
        j = s.find("`", i + 1)
        j = n - 1 if j < 0 else j
        return _subst(s[i + 1 : j], sc), j + 1
    if i + 1 >= n:
        return "$", i + 1
    nx = s[i + 1]
    if s.startswith("$((", i):
        j = balanced_end(s, i + 2, "(", ")")
        expr = s[i + 3 : j - 2] if s[j - 2 : j] == "))" else s[i + 3 : j - 1]
        num = arith(expr, sc)
        if num is None:
            sc.unresolved.add(f"$(({expr}))")
            return f"$(({expr}))", j
        return str(num), j
    if nx == "(":
        j = balanced_end(s, i + 2, "(", ")")
        return _subst(s[i + 2 : j - 1], sc), j
    if nx == "{":
        j = balanced_end(s, i + 2, "{", "}")
        return _brace(s[i + 2 : j - 1], sc), j
    m = _NAME.match(s, i + 1)
    if m:
        v = sc.get(m.group(0))
        if v is None:
            sc.unresolved.add(m.group(0))
            return "${" + m.group(0) + "}", m.end()
        return v, m.end()
    if (nx.isascii() and nx.isdigit()) or nx in "#@*?$!-":
        v = sc.get(nx)
        return (v if v is not None else ""), i + 2
    return "$", i + 1


def _subst(cmd: str, sc: Scope) -> str | None:
    v = sc.command_subst(cmd)
    if v is None:
        sc.unresolved.add(f"$({cmd.strip()})")
        return f"$({cmd.strip()})"
    return v.rstrip("\n")


def _brace(body: str, sc: Scope) -> str | None:
    if body.startswith("#") and len(body) > 1:
        name = body[1:].split("[")[0]
        if name in sc.arrays and body.endswith(("[@]", "[*]")):
            return str(len(sc.arrays[name]))
        v = sc.get(name)
        return str(len(v or ""))
    if body.startswith("!"):
        m = re.fullmatch(r"!([A-Za-z_]\w*)\[[@*]\]", body)
        if m and m.group(1) in sc.arrays:
            return " ".join(str(k) for k in range(len(sc.arrays[m.group(1)])))
        return None
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#?$!])(\[([^\]]*)\])?", body)
    if not m:
        return None
    name, idx, rest = m.group(1), m.group(3), body[m.end() :]
    if idx is not None and name in sc.arrays:
        arr = sc.arrays[name]
        if idx in ("@", "*"):
            val: str | None = " ".join(arr)
        else:
            k = arith(idx, sc)
            val = arr[k] if isinstance(k, int) and -len(arr) <= k < len(arr) else ""
    else:
        val = sc.get(name)
    op = re.match(r":?[-=+?]|%%?|##?|//?|\^\^?|,,?|:", rest)
    if not op:
        if val is None:
            sc.unresolved.add(name)
            return "${" + name + "}"
        return val
    word = rest[op.end() :]
    o = op.group(0)
    if o in (":-", "-", ":=", "="):
        empty = val is None or (o.startswith(":") and val == "")
        if not empty:
            return val
        d = expand(word, sc, split=False)[0]
        if o.endswith("="):
            sc.vars[name] = d
        return d
    if o in (":+", "+"):
        return expand(word, sc, split=False)[0] if val else ""
    if val is None:
        sc.unresolved.add(name)
        return "${" + name + "}"
    if o in (":?", "?"):
        return val
    if o in ("%", "%%"):
        return re.sub(_glob_re(expand_dquoted(word, sc), greedy=o == "%%") + "$", "", val, count=1)
    if o in ("#", "##"):
        return re.sub("^" + _glob_re(expand_dquoted(word, sc), greedy=o == "##"), "", val, count=1)
    if o in ("/", "//"):
        pat, _, rep = word.partition("/")
        return val.replace(expand_dquoted(pat, sc), expand_dquoted(rep, sc), -1 if o == "//" else 1)
    if o == "^^":
        return val.upper()
    if o == ",,":
        return val.lower()
    return val


def _glob_re(pat: str, *, greedy: bool) -> str:
    star = ".*" if greedy else ".*?"
    return "".join(star if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pat)


_ARITH_OPS: dict[type, Callable[..., int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def arith(expr: str, sc: Scope) -> int | None:
    """Evaluate a `$(( ))` expression: integers, + - * / %, parentheses, variables."""
    text = expand_dquoted(expr.strip(), sc)  # ${X:-0}, $X, $(cmd) as bash does first
    text = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", lambda m: m.group(1) or m.group(2), text)
    if "$" in text:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int | None:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            v = sc.get(node.id)
            try:
                return int(v) if v not in (None, "") else (0 if v == "" else None)
            except ValueError:
                return None
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            a, b = ev(node.left), ev(node.right)
            if a is None or b is None or (isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0):
                return None
            return _ARITH_OPS[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _ARITH_OPS:
            a = ev(node.operand)
            return None if a is None else _ARITH_OPS[type(node.op)](a)
        return None

    try:
        return ev(tree)
    except (RecursionError, OverflowError, ValueError):
        return None
