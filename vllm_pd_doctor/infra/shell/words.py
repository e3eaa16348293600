"""Shell words: a quote-aware tokenizer (shlex's quoting rules, plus `$(...)`, `${...}`, arrays
and heredocs).

The tokenizer keeps each word as written (quotes included), so the expander (`expand`) can tell
`'$X'` from `"$X"` from `$X`. What the file cannot tell expands to its own text (`${NAME}`,
`$(cmd)`); `unresolved_names` finds those again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OPS = (
    "&&",
    "||",
    ";;",
    ";&",
    "|&",
    "&>>",
    "&>",
    "<<<",
    "<<-",
    "<<",
    ">>",
    ">&",
    "<&",
    ">|",
    "|",
    "&",
    ";",
    "(",
    ")",
    ">",
    "<",
)
_REDIRECTS = frozenset({"&>>", "&>", "<<<", "<<-", "<<", ">>", ">&", "<&", ">|", ">", "<"})
_ARRAY_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=$")
PLACEHOLDER_WORD = re.compile(r"<[A-Za-z][\w .:/-]*[\w.]>(?=[\s\"';|&)/]|$)")
"""`<model-path>`, `<your model>`, `<path_to_your_model>/Qwen2.5`: written where a value goes, never
a redirection (`<in >out` does not match: no blank before the `>`, and a blank, `/` or the end
after it)."""
UNRESOLVED_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\((.*?)\)")


class ShellSyntaxError(ValueError):
    """The text cannot be split into shell words (an unterminated quote, ...)."""


@dataclass(frozen=True)
class Tok:
    kind: str
    """w (a word, raw), op (an operator or redirect), nl (end of line), hd (a heredoc's body, after
    `<<`/`<<-`: its first character `'` when the delimiter was quoted (no expansion), else `"`)."""
    text: str


def balanced_end(s: str, i: int, open_: str, close: str) -> int:
    """Index after the `close` matching the `open_` at s[i - 1]; quotes inside are honoured."""
    depth = 1
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "'" and open_ != "{":
            j = s.find("'", i + 1)
            if j < 0:
                raise ShellSyntaxError("unterminated single quote")
            i = j + 1
            continue
        if c == '"':
            i = dquote_end(s, i + 1)
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellSyntaxError(f"no closing {close!r}")


def dquote_end(s: str, i: int) -> int:
    """Index after the `"` closing a double-quoted string that starts at s[i]."""
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        if c == "$" and i + 1 < n and s[i + 1] in "({":
            i = balanced_end(s, i + 2, s[i + 1], ")" if s[i + 1] == "(" else "}")
            continue
        if c == "`":
            j = s.find("`", i + 1)
            if j < 0:
                raise ShellSyntaxError("unterminated backquote")
            i = j + 1
            continue
        i += 1
    raise ShellSyntaxError("no closing quotation")


def tokenize(text: str) -> list[Tok]:
    """Split shell text into raw words, operators and line ends; a heredoc's body is the token
    after its `<<` (kind hd), read from the lines after the command.
    A quote left open is reported with its line, column and the text around it."""
    at = [0]
    try:
        return _tokenize(text, at)
    except ShellSyntaxError as exc:
        i = at[0]
        line = text.count("\n", 0, i) + 1
        col = i - (text.rfind("\n", 0, i) + 1) + 1
        near = text[i : i + 40].split("\n", 1)[0]
        raise ShellSyntaxError(f"{exc}: the one opened at line {line}, column {col}: {near!r}") from None


def _tokenize(text: str, at: list[int]) -> list[Tok]:
    toks: list[Tok] = []
    s = text
    n = len(s)
    i = 0
    word: list[str] = []
    heredocs: list[tuple[int, str, bool, bool]] = []
    """(token index, delimiter, quoted, strip leading tabs) of the heredocs of this line."""

    def flush() -> None:
        if word:
            toks.append(Tok("w", "".join(word)))
            word.clear()

    while i < n:
        c = s[i]
        at[0] = i
        if c == "\\" and i + 1 < n and s[i + 1] == "\n":
            i += 2
            continue
        if c == "\\" and s.startswith("\\\r\n", i):
            i += 3
            continue
        if c in " \t\r":
            flush()
            i += 1
            continue
        if c == "\n":
            flush()
            toks.append(Tok("nl", "\n"))
            i += 1
            for idx, delim, quoted, tabs in heredocs:
                body, i = _heredoc(s, i, delim, tabs)
                toks[idx] = Tok("hd", ("'" if quoted else '"') + body)
            heredocs.clear()
            continue
        if c == "#" and not word:
            j = s.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "\\":
            word.append(s[i : i + 2])
            i += 2
            continue
        if c == "'":
            j = s.find("'", i + 1)
            if j < 0:
                raise ShellSyntaxError("no closing quotation")
            word.append(s[i : j + 1])
            i = j + 1
            continue
        if c == '"':
            j = dquote_end(s, i + 1)
            word.append(s[i:j])
            i = j
            continue
        if c == "$" and i + 1 < n and s[i + 1] in "({":
            j = balanced_end(s, i + 2, s[i + 1], ")" if s[i + 1] == "(" else "}")
            word.append(s[i:j])
            i = j
            continue
        if c == "`":
            j = s.find("`", i + 1)
            if j < 0:
                raise ShellSyntaxError("unterminated backquote")
            word.append(s[i : j + 1])
            i = j + 1
            continue
        if c == "(" and word and _ARRAY_ASSIGN.match("".join(word)):
            j = balanced_end(s, i + 1, "(", ")")
            word.append(s[i:j])
            i = j
            continue
        if c == "<" and (m := PLACEHOLDER_WORD.match(s, i)):
            word.append(m.group(0))  # `<model-path>`: a placeholder someone forgot, not a redirection
            i = m.end()
            continue
        if c in "<>" and word and "".join(word).isdigit():
            word.clear()  # fd number of a redirect (2>&1, 1>log)
        if c in "&|;()<>":
            flush()
            op = next(o for o in OPS if s.startswith(o, i))
            i += len(op)
            if op in (">&", "<&"):
                m = re.match(r"\d+|-", s[i:])
                if m:
                    i += m.end()
                    toks.append(Tok("op", op))
                    continue
            toks.append(Tok("op", op))
            if op in ("<<", "<<-"):
                m = re.match(r"\s*(['\"]?)\\?([^\s'\";&|<>]+)\1", s[i:])
                if m:
                    quoted = bool(m.group(1)) or m.group(0).lstrip().startswith("\\")
                    heredocs.append((len(toks), m.group(2), quoted, op == "<<-"))
                    i += m.end()
                    toks.append(Tok("w", m.group(2)))
            continue
        word.append(c)
        i += 1
    flush()
    return toks


def _heredoc(s: str, i: int, delim: str, tabs: bool) -> tuple[str, int]:
    """(the body of a heredoc starting at s[i], where the text after its delimiter line starts)."""
    lines: list[str] = []
    while i < len(s):
        j = s.find("\n", i)
        line = s[i:] if j < 0 else s[i:j]
        i = len(s) if j < 0 else j + 1
        if line.strip() == delim:
            break
        lines.append(line.lstrip("\t") if tabs else line)
    return "".join(x + "\n" for x in lines), i


def is_redirect(op: str) -> bool:
    return op in _REDIRECTS


def unresolved_names(value: str) -> list[str]:
    """Variables (`${NAME}`) and command substitutions (`$(cmd)`) left in an expanded value."""
    out: list[str] = []
    for m in UNRESOLVED_RE.finditer(value):
        out.append(m.group(1) if m.group(1) else f"$({m.group(2)})")
    return out
