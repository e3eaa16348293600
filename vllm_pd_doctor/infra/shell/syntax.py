"""Shell text -> a small command tree (simple commands, pipelines, if/for/while/case, functions).

Built on `words.tokenize` (shlex quoting rules plus `$(...)`, `${...}`, arrays, heredocs).
Not bashlex: bashlex 0.18 rejects what vLLM's own P/D scripts hold (`[[ ]]`, `$(( ))`, arrays,
`case`, C-style `for`, `$(...)` nested in quotes) and drops the double quotes inside
`'{"kv_role": ...}'` from its words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_pd_doctor.infra.shell.words import Tok, is_redirect, tokenize


@dataclass
class Simple:
    words: list[str]
    bg: bool = False
    heredoc: str | None = None
    """The body of its `<<` heredoc as the tokenizer gives it (first character: quoting)."""
    writes: list[tuple[str, str]] = field(default_factory=list)
    """Its output redirections: (`>` or `>>`, the target word as written)."""


@dataclass
class AndOr:
    """Commands joined by `&&`, `||`, `|` (the joiner before each one after the first)."""

    parts: list[Node]
    joins: list[str]


@dataclass
class If:
    branches: list[tuple[list[Node], list[Node]]]
    orelse: list[Node] = field(default_factory=list)


@dataclass
class For:
    var: str | None
    """None: a C-style `for (( ))` loop (its body runs once)."""
    words: list[str] | None
    body: list[Node]


@dataclass
class While:
    cond: list[Node]
    body: list[Node]


@dataclass
class Case:
    word: str
    arms: list[tuple[list[str], list[Node]]]


@dataclass
class Func:
    name: str
    body: list[Node]


@dataclass
class Group:
    body: list[Node]


Node = Simple | AndOr | If | For | While | Case | Func | Group


class _Parser:
    def __init__(self, toks: list[Tok]) -> None:
        self.t = toks
        self.i = 0

    def peek(self, k: int = 0) -> Tok | None:
        j = self.i + k
        return self.t[j] if j < len(self.t) else None

    def word_is(self, *words: str) -> bool:
        t = self.peek()
        return t is not None and t.kind == "w" and t.text in words

    def op_is(self, *ops: str) -> bool:
        t = self.peek()
        return t is not None and t.kind == "op" and t.text in ops

    def skip_seps(self) -> None:
        while (t := self.peek()) is not None and (t.kind == "nl" or (t.kind == "op" and t.text == ";")):
            self.i += 1

    def expect_word(self, w: str) -> None:
        self.skip_seps()
        if self.word_is(w):
            self.i += 1

    def parse_list(self, stops: frozenset[str]) -> list[Node]:
        nodes: list[Node] = []
        while True:
            self.skip_seps()
            t = self.peek()
            if t is None or (t.text in stops and t.kind in ("w", "op")):
                return nodes
            start = self.i
            node = self.parse_andor(stops)
            if node is not None:
                nodes.append(node)
            if self.i == start:
                self.i += 1  # a stray token: skip it, never loop

    def parse_andor(self, stops: frozenset[str]) -> Node | None:
        first = self.parse_command(stops)
        parts: list[Node] = [first] if first is not None else []
        joins: list[str] = []
        while self.op_is("&&", "||", "|", "|&"):
            joins.append(self.t[self.i].text)
            self.i += 1
            while self.peek() is not None and self.peek().kind == "nl":  # type: ignore[union-attr]
                self.i += 1
            nxt = self.parse_command(stops)
            if nxt is not None:
                parts.append(nxt)
            else:
                joins.pop()
        bg = False
        if self.op_is("&"):
            self.i += 1
            bg = True
        if not parts:
            return None
        if bg:
            for p in parts:
                if isinstance(p, Simple):
                    p.bg = True
        if len(parts) == 1:
            return parts[0]
        return AndOr(parts, joins[: len(parts) - 1])

    def parse_command(self, stops: frozenset[str]) -> Node | None:
        t = self.peek()
        if t is None:
            return None
        if t.kind == "w":
            kw = t.text
            if kw == "if":
                return self._if()
            if kw == "for":
                return self._for()
            if kw in ("while", "until"):
                self.i += 1
                cond = self.parse_list(frozenset({"do"}))
                self.expect_word("do")
                body = self.parse_list(frozenset({"done"}))
                self.expect_word("done")
                return While(cond, body)
            if kw == "case":
                return self._case()
            if kw == "function":
                self.i += 1
                name = self.peek()
                self.i += 1
                if self.op_is("("):
                    self.i += 2
                return self._func_body(name.text if name else "f")
            if kw == "{":
                self.i += 1
                body = self.parse_list(frozenset({"}"}))
                self.expect_word("}")
                return Group(body)
            if kw == "[[":
                test: list[str] = []
                while (x := self.peek()) is not None and not (x.kind == "w" and x.text == "]]"):
                    if x.kind == "nl":
                        break
                    test.append(x.text)
                    self.i += 1
                self.i += 1
                return Simple([*test, "]]"])
        if t.kind == "op" and t.text == "(":
            self.i += 1
            if self.op_is("("):  # (( arithmetic command )): skipped, status unknown
                depth = 1
                while (x := self.peek()) is not None and depth > 0 and x.kind != "nl":
                    if x.kind == "op" and x.text in ("(", ")"):
                        depth += 1 if x.text == "(" else -1
                    self.i += 1
                return Simple(["(("])
            body = self.parse_list(frozenset({")"}))
            if self.op_is(")"):
                self.i += 1
            return Group(body)
        words: list[str] = []
        heredoc: str | None = None
        writes: list[tuple[str, str]] = []
        while (x := self.peek()) is not None:
            if x.kind == "w":
                if not words and x.text in stops:
                    break
                words.append(x.text)
                self.i += 1
            elif x.kind == "op" and is_redirect(x.text):
                self.i += 1
                if (y := self.peek()) is not None and y.kind in ("w", "hd"):
                    self.i += 1
                    if y.kind == "hd":
                        heredoc = y.text
                    elif x.text == "<<<":
                        words.extend(["<<<", y.text])
                    elif x.text in (">", ">|", "&>", ">>", "&>>"):
                        writes.append((">>" if x.text.endswith(">>") else ">", y.text))
            else:
                break
        if (
            len(words) == 1
            and self.op_is("(")
            and (y := self.peek(1)) is not None
            and y.kind == "op"
            and y.text == ")"
        ):
            self.i += 2
            return self._func_body(words[0])
        return Simple(words, heredoc=heredoc, writes=writes) if words else None

    def _func_body(self, name: str) -> Func:
        self.skip_seps()
        body = self.parse_command(frozenset())
        return Func(name, [body] if body is not None else [])

    def _if(self) -> If:
        self.i += 1
        branches: list[tuple[list[Node], list[Node]]] = []
        orelse: list[Node] = []
        while True:
            cond = self.parse_list(frozenset({"then"}))
            self.expect_word("then")
            body = self.parse_list(frozenset({"elif", "else", "fi"}))
            branches.append((cond, body))
            if self.word_is("elif"):
                self.i += 1
                continue
            if self.word_is("else"):
                self.i += 1
                orelse = self.parse_list(frozenset({"fi"}))
            self.expect_word("fi")
            return If(branches, orelse)

    def _for(self) -> For:
        self.i += 1
        if self.op_is("("):
            while (x := self.peek()) is not None and not (x.kind == "w" and x.text == "do"):
                self.i += 1
            self.i += 1
            body = self.parse_list(frozenset({"done"}))
            self.expect_word("done")
            return For(None, None, body)
        var = self.peek()
        self.i += 1
        words: list[str] | None = None
        if self.word_is("in"):
            self.i += 1
            words = []
            while (x := self.peek()) is not None and x.kind == "w":
                words.append(x.text)
                self.i += 1
        self.expect_word("do")
        body = self.parse_list(frozenset({"done"}))
        self.expect_word("done")
        return For(var.text if var else "_", words, body)

    def _case(self) -> Case:
        self.i += 1
        w = self.peek()
        self.i += 1
        self.expect_word("in")
        arms: list[tuple[list[str], list[Node]]] = []
        while True:
            self.skip_seps()
            if self.peek() is None or self.word_is("esac"):
                self.i += 1
                return Case(w.text if w else "", arms)
            if self.op_is("("):
                self.i += 1
            pats: list[str] = []
            while (x := self.peek()) is not None and not (x.kind == "op" and x.text == ")"):
                if x.kind == "w":
                    pats.append(x.text)
                self.i += 1
            self.i += 1
            body = self.parse_list(frozenset({";;", ";&", "esac"}))
            if self.op_is(";;", ";&"):
                self.i += 1
            arms.append((pats, body))


def parse_script(text: str) -> list[Node]:
    """Shell text -> command tree. Raises ShellSyntaxError (unterminated quotes)."""
    return _Parser(tokenize(text)).parse_list(frozenset())
