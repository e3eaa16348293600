"""Run a shell script symbolically: variables, exports, functions, loops and `eval` are followed,
nothing is executed. Every command that starts a vLLM server (through any wrapper) is recorded.

What cannot be known from the file stays as its own text (`${PORT}`, `$(hostname -i)`), for the
argument parser to name with a `--set VAR=value` hint. `if` conditions are evaluated when they can
be (`[[ -n "$X" ]]`, `[ "$A" == b ]`); otherwise the first branch is taken. `while` bodies are not
run (wait loops, argument parsing); `for` loops run at most `MAX_ITER` times.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from vllm_pd_doctor.checkconfig.parse.shellexpand import Scope, expand
from vllm_pd_doctor.checkconfig.parse.shellparse import (
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
from vllm_pd_doctor.checkconfig.parse.shellwords import ShellSyntaxError, tokenize
from vllm_pd_doctor.checkconfig.parse.wrappers import Found, Script, unwrap

MAX_ITER = 16
MAX_STEPS = 20000
MAX_DEPTH = 40
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=(.*)$", re.S)
_DECL = {"export", "declare", "typeset", "local", "readonly"}
_QUIET = {
    "cd",
    "pushd",
    "popd",
    "true",
    ":",
    "sleep",
    "wait",
    "trap",
    "shopt",
    "source",
    ".",
    "read",
    "exit",
    "return",
    "kill",
    "pkill",
    "ulimit",
    "umask",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "touch",
    "chmod",
    "ln",
    "mapfile",
    "readarray",
    "break",
    "continue",
    "alias",
    "ray",
    "__pdd_role",
    "__pdd_comment",
    "unset",
    "shift",
    "set",
    "eval",
    "wait_for_server",
    "curl",
    "tail",
}
_PROXY_FLAGS = {
    "--prefiller-ports": "prefill",
    "--prefiller-port": "prefill",
    "--prefill-ports": "prefill",
    "--decoder-ports": "decode",
    "--decoder-port": "decode",
    "--decode-ports": "decode",
    "--prefill": "prefill",
    "--decode": "decode",
    "--prefiller-hosts": "",
    "--decoder-hosts": "",
}


class _Stop(Exception):
    """Step or depth limit reached: keep what was found so far."""


@dataclass
class _Ctx:
    env: dict[str, str] = field(default_factory=dict)
    launcher: str = ""
    network: str | None = None
    network_evidence: str = ""


class Interp:
    """One script's symbolic run; `found` holds the servers, `proxy_roles` port -> role hints."""

    def __init__(self, variables: Mapping[str, str]) -> None:
        named = {k: v for k, v in variables.items() if not k.isdigit()}
        self.sc = Scope(vars=named, command_subst=self._subst)
        nums = sorted((int(k), v) for k, v in variables.items() if k.isdigit() and int(k) > 0)
        if nums:
            self.sc.positional = [dict(nums).get(i, "") for i in range(1, nums[-1][0] + 1)]
        self.exported: set[str] = set(named)
        self.allexport = False
        self.funcs: dict[str, list[Node]] = {}
        self.found: list[Found] = []
        self.proxy_roles: dict[str, str] = {}
        self.role_hint: str | None = None
        self.comment_hint: str | None = None
        self.steps = 0
        self.depth = 0
        self.capture: list[list[str]] = []
        self.cap_ok: list[bool] = []
        self.ctx: list[_Ctx] = [_Ctx()]
        self.raw: list[str] = []

    # --- entry points ----------------------------------------------------------------------

    def run_text(self, text: str) -> None:
        """Run script text; raises ShellSyntaxError for text that cannot be split."""
        nodes = parse_script(text)
        try:
            self._list(nodes)
        except _Stop:
            pass

    # --- execution -------------------------------------------------------------------------

    def _list(self, nodes: list[Node]) -> bool | None:
        st: bool | None = True
        for n in nodes:
            st = self._node(n)
        return st

    def _node(self, n: Node) -> bool | None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _Stop
        if isinstance(n, Simple):
            return self._simple(n)
        if isinstance(n, AndOr):
            st = self._node(n.parts[0])
            for join, part in zip(n.joins, n.parts[1:], strict=False):
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
            return True
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
        value = expand(val, self.sc, split=False)[0]
        if idx is not None:
            arr = self.sc.arrays.setdefault(name, [])
            arr.append(value)
            return None
        if plus:
            if name in self.sc.arrays:
                self.sc.arrays[name].append(value)
                return None
            value = (self.sc.vars.get(name) or "") + value
        self.sc.vars[name] = value
        if export or self.allexport:
            self.exported.add(name)
        return name, value

    def _simple(self, n: Simple) -> bool | None:
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
            argv = [f for w in words[k:] for f in expand(w, self.sc)]
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
            return _test(argv)
        if cmd in self.funcs:
            return self._call(cmd, argv[1:])
        if cmd == "false":
            return False
        if cmd in ("echo", "printf", "seq", "basename", "dirname"):
            if self.capture:
                self.capture[-1].append(_output(argv))
            return True
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
            k2 = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 1
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
        if cmd == "__pdd_comment":
            self.comment_hint = argv[1] if len(argv) > 1 else None
            return True
        if cmd == "__pdd_role":
            self.role_hint = argv[1] if len(argv) > 1 and argv[1] != "-" else None
            return True
        if self.capture:
            if cmd not in _QUIET:
                self.cap_ok[-1] = False
            return True
        self._proxy_hints(argv)
        if cmd in _QUIET:
            return True
        return self._launch(argv, prefix, " ".join(words))

    def _launch(self, argv: list[str], prefix: dict[str, str], raw: str) -> bool | None:
        env = {k: v for k, v in self.sc.vars.items() if k in self.exported or self.allexport}
        ctx = self.ctx[-1]
        env = {**ctx.env, **env, **prefix}
        got = unwrap(
            argv, env, launcher=ctx.launcher, network=ctx.network, network_evidence=ctx.network_evidence
        )
        if isinstance(got, Script):
            self.ctx.append(_Ctx(got.env, got.launcher, got.network, got.network_evidence))
            saved = self.sc.positional
            self.sc.positional = got.positional
            try:
                self._nested(got.text)
            finally:
                self.sc.positional = saved
                self.ctx.pop()
            return None
        if isinstance(got, Found):
            got.raw = " ".join([*self.raw, raw])
            if self.role_hint:
                got.role, got.role_source = self.role_hint, "label in the file"
                self.role_hint = None
            elif self.comment_hint:
                got.notes.append("comment-role:" + self.comment_hint)
            self.comment_hint = None
            self.found.append(got)
            return True
        return None

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

    def _proxy_hints(self, argv: list[str]) -> None:
        role = ""
        for a in argv[1:]:
            name, eq, val = a.partition("=")
            if name in _PROXY_FLAGS:
                role = _PROXY_FLAGS[name]
                if eq and role:
                    self._proxy_value(val, role)
                continue
            if a.startswith("-"):
                role = ""
                continue
            if role:
                self._proxy_value(a, role)

    def _proxy_value(self, val: str, role: str) -> None:
        for m in re.finditer(r"(?::|^|,)(\d{2,5})\b", val):
            self.proxy_roles.setdefault(m.group(1), role)


def _output(argv: list[str]) -> str:
    cmd, args = argv[0], argv[1:]
    if cmd == "echo":
        nl = "\n"
        while args and args[0] in ("-n", "-e", "-E", "-ne", "-en"):
            if "n" in args[0]:
                nl = ""
            args = args[1:]
        return " ".join(args) + nl
    if cmd == "printf":
        if not args:
            return ""
        fmt = args[0].replace("\\n", "\n").replace("\\t", "\t")
        vals = args[1:]
        k = 0

        def sub(m: re.Match[str]) -> str:
            nonlocal k
            if m.group(0) == "%%":
                return "%"
            v = vals[k] if k < len(vals) else ""
            k += 1
            return v

        return re.sub(r"%%|%[-0-9.]*[sdqif]", sub, fmt)
    if cmd == "seq":
        nums = [int(a) for a in args if re.fullmatch(r"-?\d+", a)]
        if len(nums) == 1:
            lo, step, hi = 1, 1, nums[0]
        elif len(nums) == 2:
            lo, step, hi = nums[0], 1, nums[1]
        elif len(nums) == 3:
            lo, step, hi = nums
        else:
            return ""
        if step == 0:
            return ""
        return "".join(f"{x}\n" for x in list(range(lo, hi + (1 if step > 0 else -1), step))[:64])
    if cmd == "basename":
        return (args[0].rstrip("/").rsplit("/", 1)[-1] if args else "") + "\n"
    if cmd == "dirname":
        return (args[0].rstrip("/").rsplit("/", 1)[0] if args and "/" in args[0] else ".") + "\n"
    return ""


def _test(argv: list[str]) -> bool | None:
    args = argv[1:]
    if args and args[-1] in ("]", "]]"):
        args = args[:-1]
    if any("${" in a or "$(" in a for a in args):
        return None
    for op in ("||", "&&"):
        if op in args:
            k = args.index(op)
            a, b = _test(["[", *args[:k]]), _test(["[", *args[k + 1 :]])
            if op == "&&":
                return False if a is False or b is False else (None if None in (a, b) else True)
            return True if a is True or b is True else (None if None in (a, b) else False)
    neg = False
    while args and args[0] == "!":
        neg, args = not neg, args[1:]
    r = _test1(args)
    return (not r) if (neg and r is not None) else r


def _test1(a: list[str]) -> bool | None:
    if len(a) == 1:
        return a[0] != ""
    if len(a) == 2:
        if a[0] == "-n":
            return a[1] != ""
        if a[0] == "-z":
            return a[1] == ""
        return None
    if len(a) == 3:
        x, op, y = a
        if op in ("==", "="):
            return fnmatch.fnmatchcase(x, y)
        if op == "!=":
            return not fnmatch.fnmatchcase(x, y)
        if op == "=~":
            try:
                return re.search(y, x) is not None
            except re.error:
                return None
        if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            try:
                i, j = int(x), int(y)
            except ValueError:
                return None
            return {"-eq": i == j, "-ne": i != j, "-lt": i < j, "-le": i <= j, "-gt": i > j, "-ge": i >= j}[
                op
            ]
    return None
