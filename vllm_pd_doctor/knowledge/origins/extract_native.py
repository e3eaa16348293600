"""Read the statements that write log lines and raise errors out of C, C++ and Go source, with a
small tokenizer (no compiler): the native half of the origin index (NIXL's core and plugins,
UCX, Mooncake, llm-d's routing sidecar).

One pass masks comments, string contents and preprocessor lines (same length, so offsets stay
line-true); braces give the blocks (function, `if`, `else`); a regex per statement family finds
the calls, whose arguments are split at depth 0 and read back from the original text:

- C++ streams: `NIXL_ERROR << "backend '" << type << "' not found"` (NIXL; `NIXL_ERROR_FUNC`
  writes `<function>: ` first), `LOG(ERROR) << ...` (glog: Mooncake), `throw X("..." + s)`.
- C printf: `ucs_error/ucs_warn/ucs_fatal("fmt", args)` (UCX), `fprintf(stderr, "...FATAL...")`.
- Go: `logger.Error(err, "msg", kv...)`, `logger.Info("msg")` (logr/klog), `klog.Errorf`,
  `fmt.Errorf("...%w", err)`, `errors.New("...")`.

Each yields a `Statement` as the Python extractor does (file, function where recoverable, kind,
level or error type, template with PLACEHOLDER, condition), plus `params`: one name per
placeholder, the argument's own name where it is a plain identifier or field (`err`, `type`,
`title` of `criteria->title`), else the conversion's type (`int`, `text`, `hex`, `float`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass

from vllm_pd_doctor.knowledge.origins.extract import MAX_COND, PLACEHOLDER, Statement

_C_KEYWORDS = frozenset(
    "if for while switch catch return sizeof do else defined decltype static_assert alignof throw "  # noqa: SIM905
    "new delete typeof __attribute__ alignas noexcept operator".split()
)
_CLASSY = re.compile(r"^\s*(?:template\s*<.*>\s*)?(?:class|struct|namespace|enum|union|extern)\b", re.S)
_CLASS = re.compile(
    r"^\s*(?:template\s*<.*>\s*)?(?:class|struct)\s+(?:\w+\s+)*?([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)"
    r"\s*(?:final\s*)?(?::(?!:)[^{]*)?$",
    re.S,
)
_NAME_PAREN = re.compile(r"(~?[A-Za-z_]\w*(?:\s*::\s*~?[A-Za-z_]\w*)*)\s*\(")
_AFTER_PARAMS = re.compile(
    r"^\s*(?:(?:const|noexcept(?:\s*\([^)]*\))?|override|final|mutable|volatile|&&?|throw\s*\(\s*\))\s*)*"
    r"(?:->[^{;]*)?(?::.*)?$",
    re.S,
)
_IF = re.compile(r"^\s*(?:else\s+)?if\s*(?:constexpr\s*)?\(", re.S)
_ELSE = re.compile(r"^\s*else\s*$")
_GO_FUNC = re.compile(r"^\s*func\s*(?:\(\s*\w*\s*\*?\s*(\w+)(?:\[[^\]]*\])?\s*\)\s*)?(\w+)\s*[\[(]", re.S)
_CASE = re.compile(r"^[ \t]*(?:case\s+([^\n]+?)|(default))[ \t]*:(?!:)", re.M)
_GO_TOP_FUNC = re.compile(r"^func\b(?![\s\S]*^func\b)", re.M)
_GO_IF = re.compile(r"^\s*(?:else\s+)?if\s+(.*)$", re.S)
_SIMPLE_ARG = re.compile(r"^&?\*?[A-Za-z_]\w*(?:(?:->|\.|::)[A-Za-z_]\w*)*(?:\(\))?$")
_PRINTF = re.compile(
    r"%(?:\d+\$)?[-#0 +']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|z|j|t|q)?([diouxXeEfFgGcspaAvwqTm%])"
)
"""A printf conversion (C, and Go's verbs: `%v`, `%w`, `%q`, `%T`; glibc's `%m`: errno's text, no
argument)."""
_TYPES = {"d": "int", "i": "int", "u": "int", "o": "int", "x": "hex", "X": "hex", "p": "hex", "c": "char"}
_TYPES.update({k: "float" for k in "eEfFgGaA"})
_C_ESC = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "0": "", "a": "", "e": ""}

_GLOG_STREAM = re.compile(r"\bLOG\s*\(\s*(ERROR|WARNING|FATAL)\s*\)\s*<<")
"""glog's own stream (Mooncake). `LOG(INFO)` is left out: routine (Mooncake logs every connection)."""
_GLOG_LEVEL = {"ERROR": "ERROR", "WARNING": "WARNING", "FATAL": "CRITICAL", "INFO": "INFO"}
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Z][A-Z0-9_]*)[ \t]+(.+?)[ \t]*$", re.M)
_CPP_THROW = re.compile(r"\bthrow\s+((?:[A-Za-z_]\w*::)*[A-Za-z_]\w*)\s*[({]")
_C_PRINTF = re.compile(r"\b(?:(ucs_error|ucs_warn|ucs_fatal|ucs_log)\s*\(|(fprintf)\s*\(\s*stderr\s*,)")
_UCS_LEVEL = {"FATAL": "CRITICAL", "ERROR": "ERROR", "WARN": "WARNING"}
_GO_LOG = re.compile(r"([\w)\]]+)\.(Error|Info|Warning|ErrorS|InfoS|Errorf|Warningf|Fatalf|Fatal)\s*\(")
_GO_ERR = re.compile(r"\b(fmt\.Errorf|errors\.New)\s*\(")
_LEVEL = {
    "ucs_error": "ERROR",
    "ucs_warn": "WARNING",
    "ucs_fatal": "CRITICAL",
}


@dataclass(frozen=True)
class _Block:
    start: int
    end: int
    kind: str
    """`func`, `if`, `else` or `other`."""
    text: str | None
    """The function's name, or the condition."""


@dataclass
class _Source:
    """One file: the original text, its masked twin, string spans and blocks."""

    text: str
    code: str
    """The text with comments and preprocessor lines blanked (strings kept)."""
    masked: str
    """`code` with string contents blanked too."""
    strings: list[tuple[int, int]]
    """(start, end) of every string literal, quotes included, in order."""
    newlines: list[int]
    blocks: list[_Block]

    def line(self, pos: int) -> int:
        return bisect.bisect_right(self.newlines, pos) + 1

    def literal(self, a: int, b: int) -> str | None:
        """The value of `text[a:b]` when it is only string literals (adjacent ones joined)."""
        i = bisect.bisect_left(self.strings, (a, 0))
        out = []
        pos = a
        while i < len(self.strings) and self.strings[i][0] < b:
            s, e = self.strings[i]
            if self.masked[pos:s].strip():
                return None
            out.append(_unquote(self.text[s:e]))
            pos = e
            i += 1
        if not out or self.masked[pos:b].strip():
            return None
        return "".join(out)

    def scope(self, pos: int) -> tuple[str, str | None]:
        """(function, condition) around `pos`: the innermost function block, and the innermost
        `if`/`else` block inside it (or a brace-less `if` just before the statement)."""
        func = "<file>"
        cond = None
        cls: str | None = None
        inner = 0
        for b in self.blocks:
            if b.start > pos:
                break
            if b.end < pos:
                continue
            inner = b.start
            if b.kind == "class":
                cls = b.text
            elif b.kind == "func":
                name = b.text or func
                func, cond = (f"{cls}::{name}" if cls and "::" not in name else name), None
            elif b.kind in ("if", "else"):
                cond = b.text
        # a `switch` branch is the closer test (a case of a nested block closed before does not count)
        closed = [(b.start, b.end) for b in self.blocks if inner < b.start and b.end < pos]
        cases = [
            m for m in _CASE.finditer(self.code, inner, pos) if not any(a < m.start() < e for a, e in closed)
        ]
        if cases:
            cond = _squash(f"case {cases[-1].group(1)}") if cases[-1].group(1) else cond
        head = _statement_head(self.masked, pos)
        if (m := _IF.match(head)) and (test := _balanced(self.code, pos - len(head) + m.end() - 1)):
            cond = _squash(test)
        return func, cond


def _unquote(lit: str) -> str:
    if lit.startswith("`"):
        return lit[1:-1]
    body = lit[lit.index('"') + 1 : -1] if '"' in lit else lit[1:-1]
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n == "x":
                j = i + 2
                while j < len(body) and body[j] in "0123456789abcdefABCDEF":
                    j += 1
                i = j
                continue
            out.append(_C_ESC.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _mask(text: str, go: bool) -> tuple[str, str, list[tuple[int, int]]]:
    """(code, masked, strings): comments and (C) preprocessor lines blanked in both, string and
    char contents in `masked` too; newlines kept."""
    out = list(text)
    code = list(text)
    strings: list[tuple[int, int]] = []
    n = len(text)
    i = 0
    line_start = True

    def blank(a: int, b: int, both: bool = True) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
                if both:
                    code[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and not go and c == "#":
            j = i
            while True:
                e = text.find("\n", j)
                if e < 0:
                    e = n
                    break
                if text[e - 1] != "\\":
                    break
                j = e + 1
            blank(i, e)
            i = e
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            e = text.find("\n", i)
            e = n if e < 0 else e
            blank(i, e)
            i = e
        elif text.startswith("/*", i):
            e = text.find("*/", i + 2)
            e = n if e < 0 else e + 2
            blank(i, e)
            i = e
        elif c == '"' or (c == "'" and not go) or (c in "'`" and go):
            if c == "`":
                e = text.find("`", i + 1)
                e = n if e < 0 else e + 1
            else:
                j = i + 1
                while j < n and text[j] != c and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                e = min(j + 1, n)
            if c != "'":
                strings.append((i, e))
            blank(i + 1, e - 1, both=False)
            i = e
        else:
            i += 1
    return "".join(code), "".join(out), strings


def _statement_head(masked: str, pos: int) -> str:  # C: a brace-less `if (c) stmt;`
    """The text from the last `;`, `{` or `}` before `pos` up to it."""
    k = max(masked.rfind(";", 0, pos), masked.rfind("{", 0, pos), masked.rfind("}", 0, pos))
    return masked[k + 1 : pos]


def _balanced(text: str, open_at: int) -> str | None:
    """The inside of the parenthesis opening at `open_at` (in `text`), or None."""
    if open_at < 0 or open_at >= len(text) or text[open_at] != "(":
        return None
    depth = 0
    for k in range(open_at, min(len(text), open_at + 4000)):
        if text[k] == "(":
            depth += 1
        elif text[k] == ")":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : k]
    return None


def _squash(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= MAX_COND else s[: MAX_COND - 3] + "..."


def _c_block(header: str, code_header: str, in_func: bool) -> tuple[str, str | None]:
    if m := _IF.match(header):
        inner = _balanced(code_header, m.end() - 1)
        return "if", _squash(inner) if inner is not None else None
    if _ELSE.match(header):
        return "else", None
    if not in_func and (c := _CLASS.match(header)):
        return "class", c.group(1)
    if in_func or _CLASSY.match(header) or "=" in header.split("(", 1)[0]:
        return "other", None
    m = _NAME_PAREN.search(header)
    if m is None or m.group(1).split("::")[-1].strip() in _C_KEYWORDS:
        return "other", None
    inner = _balanced(header, m.end() - 1)
    if inner is None:
        return "other", None
    rest = header[m.end() + len(inner) + 1 :]
    if not _AFTER_PARAMS.match(rest):
        return "other", None
    name = re.sub(r"\s+", "", m.group(1))
    if re.fullmatch(
        r"[A-Z][A-Z0-9_]*", name
    ):  # UCX's UCS_PROFILE_FUNC(ret_t, name, ...), UCS_CLASS_INIT_FUNC(t)
        args = [" ".join(a.split()) for a in inner.split(",")]
        named = next((a for a in args if re.fullmatch(r"[a-z_]\w*", a) and not a.endswith("_t")), None)
        return "func", named or f"{name}({args[0]})"
    return "func", name


def _go_block(header: str, in_func: bool) -> tuple[str, str | None]:
    """Go has no `;` between statements: an `if`/`else` header is its last line, a function's
    starts at `func` in column 0."""
    if not in_func and (f := _GO_TOP_FUNC.search(header)):
        header = header[f.start() :]
    else:
        header = header.rstrip().rsplit("\n", 1)[-1]
    if m := _GO_IF.match(header):
        cond = m.group(1)
        depth = 0
        cut = 0
        for k, ch in enumerate(cond):  # `if err := f(); err != nil`: the test after the last `;`
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == ";" and depth == 0:
                cut = k + 1
        return "if", _squash(cond[cut:])
    if _ELSE.match(header):
        return "else", None
    if not in_func and (m := _GO_FUNC.match(header)):
        return "func", f"{m.group(1)}.{m.group(2)}" if m.group(1) else m.group(2)
    return "other", None


def _blocks(code: str, masked: str, go: bool) -> list[_Block]:
    out: list[_Block] = []
    stack: list[tuple[int, str, str | None]] = []
    last_if: dict[int, str | None] = {}
    boundary = 0
    for m in re.finditer(r"[{};]", masked):
        ch = m.start()
        c = masked[ch]
        if c == ";":
            if not go:  # Go's `;` only separates an `if`/`for` header's parts
                boundary = ch + 1
            continue
        if c == "{":
            header = masked[boundary:ch]
            in_func = any(k == "func" for _s, k, _t in stack)
            if go:
                kind, what = _go_block(header, in_func)
                if kind == "if":
                    what = _go_block(code[boundary:ch], in_func)[1]
            else:
                kind, what = _c_block(header, code[boundary:ch], in_func)
            if kind == "else":
                prev = last_if.get(len(stack))
                what = f"not ({prev})" if prev else None
            stack.append((ch, kind, what))
        else:
            if stack:
                start, kind, what = stack.pop()
                out.append(_Block(start, ch, kind, what))
                if kind == "if":
                    last_if[len(stack)] = what
                elif kind != "else":
                    last_if.pop(len(stack), None)
        boundary = ch + 1
    out.sort(key=lambda b: b.start)
    return out


def _split(masked: str, a: int, b: int, sep: str) -> list[tuple[int, int]]:
    """Spans of `masked[a:b]` split at `sep` outside brackets."""
    out = []
    depth = 0
    start = a
    k = a
    while k < b:
        ch = masked[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and masked.startswith(sep, k):
            out.append((start, k))
            k += len(sep)
            start = k
            continue
        k += 1
    out.append((start, b))
    return out


def _call_end(masked: str, open_at: int) -> int:
    """The position of the parenthesis closing the one at `open_at` (or the text's end)."""
    depth = 0
    for k in range(open_at, len(masked)):
        ch = masked[k]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return k
    return len(masked)


def _stmt_end(masked: str, pos: int) -> int:
    depth = 0
    for k in range(pos, len(masked)):
        ch = masked[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return k
        elif ch == ";" and depth == 0:
            return k
    return len(masked)


def _arg_name(expr: str) -> str | None:
    e = " ".join(expr.split())
    if not _SIMPLE_ARG.match(e):
        return None
    return re.split(r"->|\.|::", e.lstrip("&*"))[-1]


def _format(fmt: str, args: list[str], go: bool) -> tuple[str, tuple[str, ...]] | None:
    """A printf format and its arguments -> (template, placeholder names)."""
    parts: list[str | None] = []
    names: list[str] = []
    pos = 0
    ai = 0
    for m in _PRINTF.finditer(fmt):
        parts.append(fmt[pos : m.start()])
        conv = m.group(1)
        if conv == "%":
            parts.append("%")
        elif conv == "m":
            parts.append(None)
            names.append("errno")
        else:
            parts.append(None)
            arg = args[ai] if ai < len(args) else None
            ai += 1 + m.group(0).count("*")
            name = _arg_name(arg) if arg is not None and conv in "svwqdiuxXp" else None
            names.append(name or _TYPES.get(conv, "text"))
        pos = m.end()
    parts.append(fmt[pos:])
    return _template(parts, names)


def _template(parts: list[str | None], names: list[str]) -> tuple[str, tuple[str, ...]] | None:
    out: list[str] = []
    kept: list[str] = []
    ni = 0
    for p in parts:
        if p is None:
            name = names[ni] if ni < len(names) else "text"
            ni += 1
            if out and out[-1] == PLACEHOLDER:
                kept[-1] = f"{kept[-1]}+{name}"
                continue
            out.append(PLACEHOLDER)
            kept.append(name)
        elif p:
            out.append(p)
    t = "".join(out)
    return (t, tuple(kept)) if t.replace(PLACEHOLDER, "").strip() else None


def _c_format(src: _Source, a: int, b: int) -> tuple[str, list[str | None]] | None:
    """A C format argument: string literals, printf macros (`"%" PRIx64`) and format macros
    (`UCT_IB_IFACE_FMT`: a value of unknown arity) -> (format text, None where a macro stood)."""
    i = bisect.bisect_left(src.strings, (a, 0))
    pos = a
    pieces: list[str | None] = []
    while pos < b:
        gap_end = src.strings[i][0] if i < len(src.strings) and src.strings[i][0] < b else b
        for word in src.masked[pos:gap_end].split():
            if re.fullmatch(r"PRI[diouxX]\w*", word):
                pieces.append("l" + word[3])
            elif re.fullmatch(r"[A-Z_][A-Z0-9_]*", word):
                pieces.append(None)
            else:
                return None
        if gap_end >= b:
            break
        s, e = src.strings[i]
        pieces.append(_unquote(src.text[s:e]))
        pos = e
        i += 1
    if not any(p for p in pieces):
        return None
    return "".join(p if p is not None else "\x01" for p in pieces), pieces


def _printf_stmt(src: _Source, name: str, m: re.Match[str], rel: str) -> Statement | None:
    open_at = src.masked.index("(", m.start())
    close = _call_end(src.masked, open_at)
    spans = _split(src.masked, open_at + 1, close, ",")
    level = _LEVEL.get(name)
    if name == "ucs_log":  # ucs_log(level, fmt, ...): a level chosen at run time is indexed as ERROR
        lv = re.fullmatch(r"\s*UCS_LOG_LEVEL_(\w+)\s*", src.masked[spans[0][0] : spans[0][1]])
        level = _UCS_LEVEL.get(lv.group(1)) if lv else "ERROR"
        if level is None:
            return None  # DIAG, INFO, DEBUG ...
    if name.startswith("fprintf") or name == "ucs_log":
        spans = spans[1:]
    if not spans:
        return None
    got = _c_format(src, *spans[0])
    if got is None:
        return None
    fmt, pieces = got
    args = [src.text[a:b].strip() for a, b in spans[1:]]
    if None in pieces:  # a format macro: its arity is unknown, so arguments are typed only
        args = []
    if level is None:  # fprintf(stderr): only lines that say their severity
        level = next((lv for w, lv in _STDERR_LEVELS if w in fmt), None)
        if level is None:
            return None
    pieces_fmt = fmt.replace("\x01", "%s")
    tm = _format(pieces_fmt, args, go=False)
    return _stmt(src, rel, m.start(), close, "log", level, tm)


_STDERR_LEVELS = (("FATAL", "CRITICAL"), ("ERROR", "ERROR"), ("Error", "ERROR"), ("WARN", "WARNING"))


@dataclass(frozen=True)
class Macro:
    """A logging macro read from a project's header: `#define NIXL_ERROR LOG(ERROR)`,
    `#define NIXL_ERROR_FUNC NIXL_ERROR << __FUNCTION__ << ": "` (a level, and what it streams first)."""

    level: str
    head: tuple[str, ...] = ()
    """Stream operands the macro writes before the call's own (`__FUNCTION__`, `": "`)."""


def stream_macros(text: str, known: dict[str, Macro] | None = None) -> dict[str, Macro]:
    """The logging macros a header defines on top of glog's `LOG(LEVEL)` (or of macros in `known`,
    e.g. another header's): `X LOG(L)`, `X Y.WithPerror()`, `X Y << a << b`. `VLOG`/`DVLOG`
    (debug) are not log lines of the index."""
    out = dict(known or {})
    for name, body in _DEFINE.findall(text):
        body = body.split("//", 1)[0].strip()
        if m := re.fullmatch(r"LOG\s*\(\s*(ERROR|WARNING|FATAL|INFO)\s*\)", body):
            out[name] = Macro(_GLOG_LEVEL[m.group(1)])
        elif (m := re.fullmatch(r"([A-Z][A-Z0-9_]*)(?:\.WithPerror\(\))?((?:\s*<<\s*[^<]+)*)", body)) and (
            base := out.get(m.group(1))
        ):
            extra = tuple(x.strip() for x in m.group(2).split("<<") if x.strip())
            out[name] = Macro(base.level, base.head + extra)
    return out


def _stream_stmt(src: _Source, m: re.Match[str], rel: str, macro: Macro) -> Statement | None:
    end = _stmt_end(src.masked, m.end())
    parts: list[str | None] = []
    names: list[str] = []
    func = src.scope(m.start())[0]
    for head in macro.head:
        if head in ("__FUNCTION__", "__func__"):
            parts.append(func.split("::")[-1])
        elif head.startswith('"') and head.endswith('"'):
            parts.append(_unquote(head))
        else:
            parts.append(None)
            names.append(_arg_name(head) or "text")
    for a, b in _split(src.masked, m.end(), end, "<<"):
        expr = src.text[a:b].strip()
        if not expr or expr in ("std::endl", "std::flush", "endl"):
            continue
        lit = src.literal(a, b)
        if lit is not None:
            parts.append(lit)
        elif expr in ("__FUNCTION__", "__func__", "__PRETTY_FUNCTION__"):
            parts.append(func.split("::")[-1])
        else:
            parts.append(None)
            names.append(_arg_name(expr) or "text")
    return _stmt(src, rel, m.start(), end, "log", macro.level, _template(parts, names))


def _concat(src: _Source, a: int, b: int) -> tuple[str, tuple[str, ...]] | None:
    """`"text " + std::to_string(x) + s` (C++) -> template and names."""
    parts: list[str | None] = []
    names: list[str] = []
    for x, y in _split(src.masked, a, b, "+"):
        lit = src.literal(x, y)
        expr = src.text[x:y].strip()
        inner = re.fullmatch(r"(?:std::)?string\s*\((.*)\)", expr, re.S)
        if lit is not None:
            parts.append(lit)
        elif inner and (lit2 := src.literal(x + expr.index("(") + 1, y - 1)) is not None:
            parts.append(lit2)
        else:
            parts.append(None)
            names.append(_arg_name(expr) or "text")
    return _template(parts, names)


def _throw_stmt(src: _Source, m: re.Match[str], rel: str) -> Statement | None:
    open_at = m.end() - 1
    if src.masked[open_at] == "{":
        return None
    close = _call_end(src.masked, open_at)
    spans = _split(src.masked, open_at + 1, close, ",")
    tm = _concat(src, *spans[0]) if spans and spans[0][1] > spans[0][0] else None
    return _stmt(src, rel, m.start(), close, "raise", m.group(1).split("::")[-1], tm)


def _go_stmt(src: _Source, m: re.Match[str], rel: str) -> Statement | None:
    recv, method = m.group(1), m.group(2)  # recv: the last name before the call
    before = src.masked[max(0, m.start() - 60) : m.start() + len(recv)]
    if "log" not in before.lower() or re.search(r"\bV\s*\(\s*\d+\s*\)\s*$", before):
        return None  # not a logger, or a verbosity-gated (debug) line
    open_at = m.end() - 1
    close = _call_end(src.masked, open_at)
    spans = _split(src.masked, open_at + 1, close, ",")
    fmt_span, rest = spans[0], spans[1:]
    formatted = method.endswith("f")
    lit = src.literal(*fmt_span)
    if lit is None and method in ("Error", "ErrorS") and len(spans) >= 2:
        fmt_span, rest = spans[1], spans[2:]  # logr: Error(err, "msg", kv...)
        lit = src.literal(*fmt_span)
    if lit is None:
        return None
    level = {"E": "ERROR", "I": "INFO", "W": "WARNING", "F": "CRITICAL"}[method[0]]
    args = [src.text[a:b].strip() for a, b in rest]
    tm = _format(lit, args, go=True) if formatted else _template([lit], [])
    return _stmt(src, rel, m.start(), close, "log", level, tm)


def _go_err_stmt(src: _Source, m: re.Match[str], rel: str) -> Statement | None:
    open_at = m.end() - 1
    close = _call_end(src.masked, open_at)
    spans = _split(src.masked, open_at + 1, close, ",")
    lit = src.literal(*spans[0])
    if lit is None:
        return None
    args = [src.text[a:b].strip() for a, b in spans[1:]]
    tm = _format(lit, args, go=True) if m.group(1) == "fmt.Errorf" else _template([lit], [])
    return _stmt(src, rel, m.start(), close, "raise", "error", tm)


def _stmt(
    src: _Source, rel: str, a: int, b: int, kind: str, what: str, tm: tuple[str, tuple[str, ...]] | None
) -> Statement:
    func, cond = src.scope(a)
    tmpl, names = tm if tm is not None else (None, ())
    return Statement(kind, what, func, src.line(a), src.line(b), tmpl, cond, names)


_GO_EMPTY_TYPE = re.compile(r"\b(interface|struct)(\s*\{\s*\})")
"""`map[string]interface{}` in a Go signature: braces that open no block."""


def _blank_empty_types(s: str) -> str:
    return _GO_EMPTY_TYPE.sub(lambda m: m.group(1) + re.sub(r"[^\n]", " ", m.group(2)), s)


def source(text: str, go: bool) -> _Source:
    code, masked, strings = _mask(text, go)
    if go:
        code, masked = _blank_empty_types(code), _blank_empty_types(masked)
    newlines = [i for i, c in enumerate(text) if c == "\n"]
    return _Source(text, code, masked, strings, newlines, _blocks(code, masked, go))


def statements(text: str, name: str, macros: dict[str, Macro] | None = None) -> list[Statement]:
    """Every log/raise statement of one C, C++ or Go file (by its name's suffix); `macros`: the
    project's logging macros (`stream_macros` of its headers), besides glog's `LOG(LEVEL)`."""
    go = name.endswith(".go")
    src = source(text, go)
    out: list[Statement] = []
    for s in _found(src, name, go, stream_macros(text, macros)):
        if s is not None:
            out.append(s)
    return out


def _found(src: _Source, rel: str, go: bool, macros: dict[str, Macro]) -> Iterator[Statement | None]:
    if go:
        for m in _GO_LOG.finditer(src.masked):
            yield _go_stmt(src, m, rel)
        for m in _GO_ERR.finditer(src.masked):
            yield _go_err_stmt(src, m, rel)
        return
    for m in _GLOG_STREAM.finditer(src.masked):
        yield _stream_stmt(src, m, rel, Macro(_GLOG_LEVEL[m.group(1)]))
    if macros:
        names = "|".join(sorted(map(re.escape, macros), key=len, reverse=True))
        for m in re.finditer(rf"\b({names})\s*<<", src.masked):
            yield _stream_stmt(src, m, rel, macros[m.group(1)])
    for m in _C_PRINTF.finditer(src.masked):
        yield _printf_stmt(src, m.group(1) or m.group(2), m, rel)
    for m in _CPP_THROW.finditer(src.masked):
        yield _throw_stmt(src, m, rel)


SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".go")
"""The files this extractor reads."""
