"""Run a shell script symbolically: variables, exports, functions, loops and `eval` are followed,
nothing is executed. Every command that is not a shell builtin goes to `Interp.external`, which a
subclass overrides (check-config's records each vLLM server it starts); the default records argv.

What cannot be known from the file stays as its own text (`${PORT}`, `$(hostname -i)`), for the
argument parser to name with a `--set VAR=value` hint. `if` conditions are evaluated when they can
be (`[[ -n "$X" ]]`, `[ "$A" == b ]`); otherwise the first branch is taken. `while` bodies are not
run (wait loops, argument parsing); `for` loops run at most `MAX_ITER` times.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Mapping

from vllm_pd_doctor.infra.shell.builtins import QUIET, output, test
from vllm_pd_doctor.infra.shell.expand import Scope, expand, expand_dquoted
from vllm_pd_doctor.infra.shell.syntax import (
    AndOr,
    Case,
    For,
    Func,
    Group,
    If,
    Node,
    Simple,
    While,
    parse_script,
)
from vllm_pd_doctor.infra.shell.words import ShellSyntaxError, tokenize

MAX_ITER = 16
MAX_STEPS = 20000
MAX_DEPTH = 40
MAX_VALUE = 256 * 1024
"""Longest variable value (characters): `A=$A$A` repeated doubles it every line; also per file."""
MAX_FILES = 64
"""Most files one script may write (`cat > F <<EOF`)."""
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=(.*)$", re.S)
_BARE_VAR = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")
_DECL = {"export", "declare", "typeset", "local", "readonly"}


class _Stop(Exception):
    """Depth limit reached: keep what was found so far."""


class LimitReached(Exception):
    """A bound of the symbolic run (steps, value size, servers): the input is reported, not read."""


class Interp:
    """One script's symbolic run; `ran` holds the external commands (argv, expanded) it reached."""

    def __init__(self, variables: Mapping[str, str], pinned: Collection[str] = ()) -> None:
        named = {k: v for k, v in variables.items() if not (k.isascii() and k.isdigit())}
        self.pinned = frozenset(pinned)
        """Variables given with --set: the script's own assignments do not change them."""
        self.called: set[str] = set()
        self.sc = Scope(vars=named, command_subst=self._subst)
        nums = sorted((int(k), v) for k, v in variables.items() if k.isascii() and k.isdigit() and int(k) > 0)
        if nums:
            self.sc.positional = [dict(nums).get(i, "") for i in range(1, nums[-1][0] + 1)]
        self.exported: set[str] = set(named)
        self.allexport = False
        self.funcs: dict[str, list[Node]] = {}
        self.ran: list[list[str]] = []
        self.files: dict[str, str] = {}
        """What the script wrote to files (`cat > F <<EOF`, `tee F`, `echo ... >> F`), by path."""
        self.stdin: str | None = None
        """The standard input of the command `external` is called for (a heredoc, a pipe)."""
        self._pipe_in: str | None = None
        self._last_out: str | None = None
        self.steps = 0
        self.depth = 0
        self.capture: list[list[str]] = []
        self.cap_ok: list[bool] = []
        self.raw: list[str] = []
        """Names of the functions being called (outermost first)."""

    # --- entry points ----------------------------------------------------------------------

    def run_text(self, text: str) -> None:
        """Run script text; raises ShellSyntaxError for text that cannot be split."""
        nodes = parse_script(text)
        try:
            self._list(nodes)
        except _Stop:
            pass

    def run_uncalled(self) -> None:
        """Run the bodies of the functions the script defines and never calls (pasted text)."""
        try:
            for name in [n for n in self.funcs if n not in self.called]:
                self._call(name, [])
        except _Stop:
            pass

    def external(self, argv: list[str], prefix: dict[str, str], raw: str) -> bool | None:
        """A command that is not a builtin (argv expanded, `prefix` its `VAR=value` words, `raw`
        as written): its status, None when it cannot be known. Subclasses decide what it does."""
        if argv[0] not in QUIET:
            self.ran.append(argv)
        return True if argv[0] in QUIET else None

    def reached(self) -> int:
        """How many commands of interest the run has reached (a `while` body that reaches one more
        runs once: a restart loop)."""
        return len(self.ran)

    def exported_env(self) -> dict[str, str]:
        """The variables a command started now would get in its environment."""
        return {k: v for k, v in self.sc.vars.items() if k in self.exported or self.allexport}

    # --- execution -------------------------------------------------------------------------

    def _list(self, nodes: list[Node]) -> bool | None:
        st: bool | None = True
        for n in nodes:
            st = self._node(n)
        return st

    def _node(self, n: Node) -> bool | None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise LimitReached(f"the symbolic run stopped after {MAX_STEPS} steps")
        if isinstance(n, Simple):
            return self._simple(n)
        if isinstance(n, AndOr):
            st = self._node(n.parts[0])
            for join, part in zip(n.joins, n.parts[1:], strict=False):
                if join in ("|", "|&"):
                    self._pipe_in, self._last_out = self._last_out, None
                    st = self._node(part)
                    self._pipe_in = None
                    continue
                if join == "&&" and st is False:
                    continue
                if join == "||" and st is not False:
                    continue
                st = self._node(part)
            return st
        if isinstance(n, If):
            for cond, body in n.branches:
                st = self._list(cond)
                if st is False:
                    continue
                return self._list(body)
            return self._list(n.orelse)
        if isinstance(n, For):
            if n.var is None:
                return self._list(n.body)
            words = (
                [w for raw in n.words for w in expand(raw, self.sc)]
                if n.words is not None
                else list(self.sc.positional)
            )
            for w in words[:MAX_ITER]:
                self.sc.vars[n.var] = w
                self._list(n.body)
            return True
        if isinstance(n, While):
            return self._while(n)
        if isinstance(n, Case):
            word = expand(n.word, self.sc, split=False)[0]
            for pats, body in n.arms:
                if any(fnmatch.fnmatchcase(word, expand(p, self.sc, split=False)[0]) for p in pats):
                    return self._list(body)
            return True
        if isinstance(n, Func):
            self.funcs[n.name] = n.body
            return True
        if isinstance(n, Group):
            return self._list(n.body)
        return None

    def _while(self, n: While) -> bool | None:
        """While the condition holds (argument parsing: `while [[ $# -gt 0 ]]; do ... shift`), at
        most MAX_ITER times; once when it cannot be known (a wait loop) or when the body starts a
        command of interest (a restart loop, `while true; do vllm serve ...; done`, keeps one)."""
        before = self.reached()
        for _ in range(MAX_ITER):
            cond = self._list(n.cond)
            if cond is False:
                break
            self._list(n.body)
            if cond is None or self.reached() > before:
                break
        return True

    def _assign(self, raw: str, *, export: bool = False) -> tuple[str, str] | None:
        m = _ASSIGN.match(raw)
        if not m:
            return None
        name, idx, plus, val = m.group(1), m.group(2), m.group(3), m.group(4)
        if val.startswith("(") and val.endswith(")") and idx is None:
            items = [w for t in tokenize(val[1:-1]) if t.kind == "w" for w in expand(t.text, self.sc)]
            self.sc.arrays[name] = (self.sc.arrays.get(name, []) if plus else []) + items
            self.sc.vars.pop(name, None)
            return None
        if name in self.pinned:
            return None  # --set wins over the script's own assignment
        value = expand(val, self.sc, split=False)[0]
        if len(value) > MAX_VALUE:
            raise LimitReached(f"${name} grows past {MAX_VALUE // 1024} KiB")
        if idx is not None:
            arr = self.sc.arrays.setdefault(name, [])
            arr.append(value)
            return None
        if plus:
            if name in self.sc.arrays:
                self.sc.arrays[name].append(value)
                return None
            value = (self.sc.vars.get(name) or "") + value
            if len(value) > MAX_VALUE:
                raise LimitReached(f"${name} grows past {MAX_VALUE // 1024} KiB")
        self.sc.vars[name] = value
        if export or self.allexport:
            self.exported.add(name)
        return name, value

    def _simple(self, n: Simple) -> bool | None:
        self._last_out = None
        words = n.words
        here: str | None = None
        if "<<<" in words:
            j = words.index("<<<")
            here = words[j + 1] if j + 1 < len(words) else ""
            words = words[:j] + words[j + 2 :]
        k = 0
        while k < len(words) and _ASSIGN.match(words[k]):
            k += 1
        if words[k : k + 1] == ["[["]:
            argv = [expand(w, self.sc, split=False)[0] for w in words[k:]]
        else:
            argv = self._fields(words[k:])
        if not argv:
            for a in words[:k]:
                self._assign(a)
            return True
        prefix: dict[str, str] = {}
        for a in words[:k]:
            m = _ASSIGN.match(a)
            if m:
                prefix[m.group(1)] = expand(m.group(4), self.sc, split=False)[0]
        cmd = argv[0]
        if cmd in _DECL:
            for raw in words[k + 1 :]:
                if _ASSIGN.match(raw):
                    self._assign(raw, export=cmd == "export" or "-x" in argv)
                elif cmd == "export" and not raw.startswith("-"):
                    self.exported.add(expand(raw, self.sc, split=False)[0])
            return True
        if cmd in ("[", "[[", "test"):
            return test(argv)
        if cmd in self.funcs:
            return self._call(cmd, argv[1:])
        if cmd == "false":
            return False
        if cmd in ("echo", "printf", "seq", "basename", "dirname", "cat", "tee"):
            return self._output(n, argv)
        if cmd == "eval":
            self._nested(" ".join(argv[1:]))
            return True
        if cmd == "set":
            if "-a" in argv or ("-o" in argv and "allexport" in argv):
                self.allexport = True
            if "--" in argv:
                self.sc.positional = argv[argv.index("--") + 1 :]
            return True
        if cmd == "shift":
            k2 = int(argv[1]) if len(argv) > 1 and argv[1].isascii() and argv[1].isdigit() else 1
            self.sc.positional = self.sc.positional[k2:]
            return True
        if cmd == "unset":
            for v in argv[1:]:
                self.sc.vars.pop(v, None)
                self.sc.arrays.pop(v, None)
            return True
        if cmd == "read":
            self._read(argv, prefix, here)
            return True
        if self.capture:
            if cmd not in QUIET:
                self.cap_ok[-1] = False
            return True
        self.stdin = self._stdin(n)
        try:
            return self.external(argv, prefix, " ".join(words))
        finally:
            self.stdin = None

    def _fields(self, words: list[str]) -> list[str]:
        """The command's fields; a bare `$NAME` that expands to nothing stays `${NAME}` where
        `keep_empty` says its absence would shift the arguments (a flag's missing value)."""
        out: list[str] = []
        for w in words:
            fields = expand(w, self.sc)
            m = _BARE_VAR.fullmatch(w) if not fields else None
            if m and self.keep_empty(out):
                fields = ["${" + (m.group(1) or m.group(2)) + "}"]
            out.extend(fields)
        return out

    def keep_empty(self, before: list[str]) -> bool:
        """Whether an empty variable after the fields `before` is kept as its name (default: no,
        as bash drops it)."""
        return False

    def _stdin(self, n: Simple) -> str | None:
        """The command's standard input: its heredoc (expanded unless the delimiter was quoted),
        else what the command before `|` wrote."""
        if n.heredoc is not None:
            body = n.heredoc[1:]
            return body if n.heredoc.startswith("'") else expand_dquoted(body, self.sc)
        got, self._pipe_in = self._pipe_in, None
        return got

    def _output(self, n: Simple, argv: list[str]) -> bool:
        """echo, printf, seq, basename, dirname, cat and tee: their output goes to the files they
        write, to the command substitution being captured, or to the next command of a pipe."""
        stdin = self._stdin(n)
        names = [a for a in argv[1:] if not a.startswith("-")]
        out: str | None
        if argv[0] == "cat":
            parts = [self.files.get(f) for f in names] if names else [stdin]
            out = None if any(p is None for p in parts) else "".join(p or "" for p in parts)
        elif argv[0] == "tee":
            out = stdin
            for f in names:
                self._write(f, out, append="-a" in argv or "--append" in argv)
        else:
            out = output(argv)
        for op, target in n.writes:
            self._write(expand(target, self.sc, split=False)[0], out, append=op == ">>")
        if n.writes:
            return True
        if self.capture:
            if out is None:
                self.cap_ok[-1] = False
            else:
                self.capture[-1].append(out)
        else:
            self._last_out = out
        return True

    def _write(self, path: str, text: str | None, *, append: bool) -> None:
        if text is None:  # what the file holds is not known
            self.files.pop(path, None)
            return
        value = (self.files.get(path, "") if append else "") + text
        if len(value) > MAX_VALUE or (path not in self.files and len(self.files) >= MAX_FILES):
            raise LimitReached(
                f"the files the script writes grow past {MAX_VALUE // 1024} KiB or {MAX_FILES}"
            )
        self.files[path] = value

    def _read(self, argv: list[str], prefix: dict[str, str], here: str | None) -> None:
        """`read -a NAME <<< "$X"` (split on IFS) and `read NAME <<< ...`; else nothing."""
        if here is None:
            return
        text = expand(here, self.sc, split=False)[0]
        ifs = prefix.get("IFS", self.sc.vars.get("IFS", " \t\n"))
        names = [a for a in argv[1:] if not a.startswith("-")]
        if not names:
            return
        parts = [p for p in re.split("[" + re.escape(ifs) + "]", text) if p != ""] if ifs else [text]
        if any("a" in a for a in argv[1:] if a.startswith("-")):
            self.sc.arrays[names[-1]] = parts
            self.sc.vars.pop(names[-1], None)
        else:
            self.sc.vars[names[0]] = text

    def _nested(self, text: str) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Stop
        try:
            nodes = parse_script(text)
        except ShellSyntaxError:
            return
        finally:
            self.depth -= 1
        self.depth += 1
        try:
            self._list(nodes)
        finally:
            self.depth -= 1

    def _call(self, name: str, args: list[str]) -> bool | None:
        self.called.add(name)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Stop
        saved = self.sc.positional
        self.sc.positional = args
        self.raw.append(name)
        try:
            return self._list(self.funcs[name])
        finally:
            self.sc.positional = saved
            self.raw.pop()
            self.depth -= 1

    def _subst(self, text: str) -> str | None:
        if self.depth > MAX_DEPTH or self.steps > MAX_STEPS:
            return None
        self.capture.append([])
        self.cap_ok.append(True)
        try:
            self._nested(text)
        except _Stop:
            self.cap_ok[-1] = False
        out = self.capture.pop()
        ok = self.cap_ok.pop()
        return "".join(out) if ok else None
