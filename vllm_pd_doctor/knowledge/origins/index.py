"""The origin index as the tool reads it: every statement that writes a log line or raises, per
release, and the lookups triage needs (by logger/frame location, by function, by message).

Matcher structures are built once per index: templates are keyed by their longest literal word,
so matching a message costs one `re.findall` of its words and a few `str.find`s (a regular
expression per template would be too slow over a 1 GB log).
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from packaging.version import InvalidVersion, Version

from vllm_pd_doctor.knowledge.origins.extract import PLACEHOLDER

MIN_LITERAL = 16
"""Literal characters a template needs before a message match counts (`Error: %s` does not)."""
MIN_SAME_FILE = 8
"""... or, whole, when the line names the template's file (UCX's `select.c:649 ... no %s transport
to %s: %s` holds 15)."""
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")


@dataclass(frozen=True)
class Origin:
    """One statement (deduplicated across releases)."""

    package: str
    file: str
    """Relative to the package (`v1/core/sched/scheduler.py`)."""
    function: str
    kind: str
    """`log`, `raise` or `assert` (`frame`: a traceback frame in an indexed function that raised
    without a statement of its own)."""
    what: str
    """Level of a log call, exception type of a raise/assert."""
    template: str | None
    condition: str | None
    spans: tuple[tuple[str, int, int], ...]
    """(release, first line, last line) for every release that holds the statement, oldest first."""
    holes: tuple[tuple[str, str], ...] = ()
    """(name, type) of each placeholder of the template, in order: the expression that gives the
    value in the source (`len(self._reqs)`, `req_id`) and its type (`count`, `id`, `host`, `port`,
    `rank`, `seconds`, `int`, `float`, `path`, `text`)."""

    @property
    def releases(self) -> tuple[str, ...]:
        return tuple(r for r, _a, _b in self.spans)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.function}"

    def line_in(self, release: str | None) -> int | None:
        return next((a for r, a, _b in self.spans if r == release), None)

    @property
    def text(self) -> str | None:
        """The template for people: placeholders shown as `{name}` (the expression or argument that
        gives the value) where the source names them, else `...`."""
        if not self.template:
            return None
        parts = self.template.split(PLACEHOLDER)
        names = [n for n, _t in self.holes]
        if len(names) != len(parts) - 1 or not all(names):
            return self.template.replace(PLACEHOLDER, "...")
        return "".join(
            p + (f"{{{n}}}" if i < len(names) else "")
            for i, (p, n) in enumerate(zip(parts, [*names, ""], strict=True))
        )


@dataclass(frozen=True)
class Lifetime:
    """Where a statement lives in the indexed releases."""

    first: str
    last: str
    changed_in: str | None
    """The first indexed release after `last` (None when `last` is the newest indexed)."""
    change: str | None
    """`changed` (its function still raises/logs, differently) or `removed` (no such statement)."""
    since_oldest: bool
    """`first` is the oldest indexed release (it may be older still)."""


_NATIVE_TYPES = {"int": "int", "hex": "int", "errno": "int", "float": "float"}


def _hole(h: Any) -> tuple[str, str]:
    """A placeholder as the data file stores it: `[name, type]` (Python sources) or a bare name
    (native sources: the argument's name, or its conversion's type)."""
    if isinstance(h, str):
        return h, _NATIVE_TYPES.get(h, "text")
    return str(h[0]), str(h[1])


def _squeeze(text: str) -> str:
    return "".join(text.split())


def _before(rels: tuple[str, ...], release: str, default: int) -> int:
    """The index of the last of `rels` not newer than `release` (a dev build `0.10.2rc2.dev5+g1`
    counts as its base `0.10.2`'s predecessor); `default` for a string that is no version."""
    try:
        v = Version(release)
        return sum(1 for r in rels if Version(r) <= v) - 1
    except InvalidVersion:
        return default


@dataclass(frozen=True)
class Change:
    """What the next indexed release did to a statement's function."""

    release: str
    kind: str
    """`changed` (its source differs: `diff`), `removed` (gone) or `moved` (to `moved_to`)."""
    diff: str | None
    moved_to: str | None


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? ")


def nearest_hunk(diff: str, at: int | None) -> str:
    """The hunk of a stored diff whose old side holds line `at` of the function (else the nearest
    one), and how many others there are; the whole diff when `at` is unknown or it has one hunk."""
    hunks: list[list[str]] = []
    tail: list[str] = []
    for ln in diff.splitlines():
        if ln.startswith("@@"):
            hunks.append([ln])
        elif ln.startswith("... (") and ln.endswith("more hunks)"):
            tail.append(ln)
        elif hunks:
            hunks[-1].append(ln)
    if at is None or len(hunks) <= 1:
        return diff

    def distance(h: list[str]) -> int:
        m = _HUNK.match(h[0])
        if m is None:
            return 1 << 30
        a, n = int(m.group(1)), int(m.group(2) or 1)
        return 0 if a <= at < a + max(n, 1) else min(abs(at - a), abs(at - (a + n)))

    best = min(hunks, key=distance)
    others = len(hunks) - 1
    return "\n".join([*best, f"... ({others} other hunk{'s' if others > 1 else ''} in this function)", *tail])


@functools.lru_cache(maxsize=2048)
def _value_regex(first: str) -> re.Pattern[str] | None:
    """The template's first line as a regex: literals as themselves (any whitespace run matches
    any run), each placeholder a lazy group (the last one greedy up to the line's end)."""
    parts = first.split(PLACEHOLDER)
    if len(parts) < 2:
        return None
    out = [_lit(parts[0])]
    for i, p in enumerate(parts[1:], 1):
        last = i == len(parts) - 1
        out.append(r"(\S+)" if last and not p.strip() else "(.*?)")
        out.append(_lit(p))
    try:
        return re.compile("".join(out))
    except re.error:
        return None


def _lit(text: str) -> str:
    """A literal part: inner whitespace runs match any run, the part's edges any (or none: a
    value quoted without its id, `for request  which`)."""
    core = r"\s+".join(re.escape(w) for w in text.split())
    head = r"\s*" if text[:1].isspace() else ""
    tail = r"\s*" if text[-1:].isspace() else ""
    return head + core + tail if core else r"\s*"


def _anchor(template: str) -> str | None:
    """The longest word wholly inside a literal part (a word touching a placeholder may continue
    into the value in the log, so it cannot be looked up whole)."""
    best: str | None = None
    parts = template.split("\n", 1)[0].split(PLACEHOLDER)
    for i, part in enumerate(parts):
        for m in _WORD.finditer(part):
            if (i > 0 and m.start() == 0) or (i < len(parts) - 1 and m.end() == len(part)):
                continue
            if best is None or len(m.group(0)) > len(best):
                best = m.group(0)
    return best


def _matched(parts: list[str], msg: str, weight: int) -> int:
    """Literal characters of the template found in order in the message (0: no match). A message
    cut short (a pasted excerpt, a line cut at the reader's limit) matches on what it still holds:
    the parts found first must carry most of the template's literal text."""
    pos = 0
    got = 0
    for p in parts:
        i = msg.find(p, pos)
        if i < 0:
            if msg.find(p.strip(), pos) >= 0:
                i = msg.find(p.strip(), pos)
                p = p.strip()
            else:
                rest = msg[pos:].strip()
                if len(rest) >= 8 and p.strip().startswith(rest):  # the message ends inside this part
                    got += len(rest)
                return got if got >= MIN_LITERAL and got * 5 >= weight * 3 else 0
        pos = i + len(p)
        got += len(p.strip())
    return got


class OriginIndex:
    """Origins of every indexed package and release; read-only once built."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.releases: dict[str, tuple[str, ...]] = {}
        self.origins: list[Origin] = []
        self.changes: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
        """(package, `file::function`) -> (release, diff) of each release whose source of that
        function differs from the indexed release before it."""
        self._lines_cache: dict[str, dict[tuple[str, str], dict[int, Origin]]] = {}
        for package, pkg in doc.get("packages", {}).items():
            rels: list[str] = pkg["releases"]
            self.releases[package] = tuple(rels)
            for fkey, got in pkg.get("changes", {}).items():
                self.changes[(package, fkey)] = tuple((str(r), str(d)) for r, d in got)
            for f, fn, kind, what, tmpl, cond, spans, *rest in pkg["origins"]:
                sp = tuple((rels[r], a, b) for r, a, b in spans)
                holes = tuple(_hole(h) for h in rest[0]) if rest and rest[0] else ()
                self.origins.append(Origin(package, f, fn, kind, what, tmpl, cond, sp, holes))

    # --- releases -------------------------------------------------------------------------
    def has_release(self, release: str | None, package: str = "vllm") -> bool:
        return release is not None and base(release) in self.releases.get(package, ())

    def lifetime(self, o: Origin) -> Lifetime:
        rels = self.releases.get(o.package, ())
        have = [rels.index(r) for r in o.releases if r in rels]
        first, last = min(have), max(have)
        nxt = rels[last + 1] if last + 1 < len(rels) else None
        change = None
        if nxt is not None:
            same = self._by_function.get((o.package, o.file, o.function), [])
            alike = any(x.kind == o.kind and x.what == o.what and nxt in x.releases for x in same)
            change = "changed" if alike else "removed"
        return Lifetime(rels[first], rels[last], nxt, change, first == 0)

    def change_after(self, o: Origin, release: str | None) -> Change | None:
        """The first indexed release after `release` (else after the statement's last release)
        where the source of the statement's function changed, with the diff; a function gone from
        its file there names the file that holds it then (moved), if any."""
        rels = self.releases.get(o.package, ())
        order = self._order(o.package)
        since = base(release) if release and base(release) in rels else None
        start = order(since) if since else order(o.spans[-1][0]) if o.spans else -1
        if since is None and release:  # a release between indexed ones (a dev build): the one after it
            start = _before(rels, base(release), start)
        for r, d in self.changes.get((o.package, f"{o.file}::{o.function}"), ()):
            if order(r) > start:
                at = self._offset(o, rels[start] if 0 <= start < len(rels) else None)
                return Change(r, "changed", nearest_hunk(d, at), None)
        defs = [x for x in self._by_function.get((o.package, o.file, o.function), []) if x.kind == "def"]
        last = max((order(r) for x in defs for r in x.releases), default=-1)
        if 0 <= last < len(rels) - 1 and last >= start:
            nxt = rels[last + 1]
            moved = next(
                (
                    x.file
                    for x in self._by_name.get(o.function.rsplit(".", 1)[-1], [])
                    if x.kind == "def" and x.function == o.function and nxt in x.releases and x.file != o.file
                ),
                None,
            )
            return Change(nxt, "moved" if moved else "removed", None, moved)
        return None

    def _offset(self, o: Origin, release: str | None) -> int | None:
        """The statement's line relative to its function's `def` line (1 = the def) in `release`
        (else in the statement's last release)."""
        rel = release if release in o.releases else (o.spans[-1][0] if o.spans else None)
        mine = o.line_in(rel)
        defs = [x for x in self._by_function.get((o.package, o.file, o.function), []) if x.kind == "def"]
        start = next((x.line_in(rel) for x in defs if x.line_in(rel) is not None), None)
        return None if mine is None or start is None else mine - start + 1

    @cached_property
    def _by_message(self) -> dict[tuple[str, str, str, str], list[Origin]]:
        out: dict[tuple[str, str, str, str], list[Origin]] = defaultdict(list)
        for o in self.origins:
            if o.template:
                out[(o.package, o.kind, o.what, o.template)].append(o)
        return out

    def same_message(self, o: Origin) -> list[tuple[Origin, str, str]]:
        """Every other statement that writes the same message (another file or function: code
        that moved), with the first and last indexed release holding it, oldest first."""
        if not o.template and not (o.kind == "assert" and o.condition):
            return []
        order = self._order(o.package)
        out = []
        same = list(self._by_message.get((o.package, o.kind, o.what, o.template), [])) if o.template else []
        if o.kind == "assert" and o.condition:  # an assert is its test, whatever message it carries
            same += [x for x in self._by_condition.get(_squeeze(o.condition), []) if x.package == o.package]
        same = list({id(x): x for x in same}.values())
        for x in same:
            if x is not o and x.spans:
                rels = sorted(x.releases, key=order)
                out.append((x, rels[0], rels[-1]))
        return sorted(out, key=lambda t: order(t[1]))

    def values(self, o: Origin, msg: str) -> tuple[tuple[str, str, str], ...]:
        """(name, type, value) of each placeholder of `o`'s template read from the message (empty
        when the message does not hold the template's first line whole)."""
        if not o.template or not o.holes:
            return ()
        first = o.template.split("\n", 1)[0]
        rx = _value_regex(first)
        m = rx.search(msg) if rx is not None else None
        if m is None and PLACEHOLDER in first:  # a quote that lost the end (`... 120 seconds` sans `.`)
            rx = _value_regex(first.rsplit(PLACEHOLDER, 1)[0] + PLACEHOLDER + " ")
            m = rx.search(msg + " ") if rx is not None else None
        if m is None:
            return ()
        vals = m.groups()
        return tuple((n, t, v.strip()) for (n, t), v in zip(o.holes, vals, strict=False) if v is not None)

    # --- lookups ----------------------------------------------------------------------------
    @cached_property
    def _by_function(self) -> dict[tuple[str, str, str], list[Origin]]:
        out: dict[tuple[str, str, str], list[Origin]] = defaultdict(list)
        for o in self.origins:
            out[(o.package, o.file, o.function)].append(o)
        return out

    @cached_property
    def _files(self) -> dict[str, list[tuple[str, str]]]:
        """basename -> (package, file) of every indexed file."""
        out: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for pkg, f in sorted({(o.package, o.file) for o in self.origins}):
            out[f.rsplit("/", 1)[-1]].append((pkg, f))
        return out

    def _lines(self, release: str) -> dict[tuple[str, str], dict[int, Origin]]:
        """(package, file) -> line -> origin in one release (built on first use per release)."""
        got = self._lines_cache.get(release)
        if got is None:
            got = defaultdict(dict)
            for o in self.origins:
                if o.kind == "def":  # its span covers its statements' lines
                    continue
                for r, a, b in o.spans:
                    if r == release:
                        d = got[(o.package, o.file)]
                        for ln in range(a, b + 1):
                            d.setdefault(ln, o)
            self._lines_cache[release] = got
        return got

    @cached_property
    def _anchors(self) -> dict[str, list[tuple[Origin, list[str], int]]]:
        out: dict[str, list[tuple[Origin, list[str], int]]] = defaultdict(list)
        for o in self.origins:
            if not o.template:
                continue
            first = o.template.split("\n", 1)[0]
            parts = [p for p in first.split(PLACEHOLDER) if p]
            weight = sum(len(p.strip()) for p in parts)
            a = _anchor(o.template)
            if a is not None and weight >= MIN_SAME_FILE:
                out[a].append((o, parts, weight))
        return out

    def files(self, path: str) -> list[tuple[str, str]]:
        """(package, file) for a path as logs write it: `scheduler.py`, `v1/core/sched/scheduler.py`,
        `distributed/.../v1/nixl_connector.py`, or a frame's absolute path."""
        path = path.replace("\\", "/")
        cands = self._files.get(path.rsplit("/", 1)[-1], [])
        return [c for c in cands if _suffix_ok(path, *c)]

    def at(self, path: str, line: int, release: str | None) -> Origin | None:
        """The statement at `path:line` of `release` (None without a release the index holds)."""
        if release is None:
            return None
        lines = self._lines(base(release))
        for pkg, f in self.files(path):
            o = lines.get((pkg, f), {}).get(line)
            if o is not None:
                return o
        return None

    @cached_property
    def _by_file(self) -> dict[tuple[str, str], list[Origin]]:
        out: dict[tuple[str, str], list[Origin]] = defaultdict(list)
        for o in self.origins:
            if o.kind != "def":
                out[(o.package, o.file)].append(o)
        return out

    def at_any(self, path: str, line: int) -> list[Origin]:
        """Every statement at `path:line` in any indexed release (for a log that does not say its
        release: NIXL's, UCX's and Go's lines name their file and line, never their version)."""
        return [
            o
            for key in self.files(path)
            for o in self._by_file.get(key, ())
            if any(a <= line <= b for _r, a, b in o.spans)
        ]

    @cached_property
    def _by_name(self) -> dict[str, list[Origin]]:
        """A function's last name -> every statement of every function so named."""
        out: dict[str, list[Origin]] = defaultdict(list)
        for o in self.origins:
            out[o.function.rsplit(".", 1)[-1]].append(o)
        return out

    def in_function(self, path: str, function: str) -> list[Origin]:
        """Every statement of `function` (its last name: tracebacks print `schedule`, the index
        `Scheduler.schedule`) in the file `path` names; for a file the index does not hold (moved
        since: 0.1x's `v1/nixl_connector.py` is 0.20's `v1/nixl/worker.py`), in its folder's tree."""
        named = self._by_name.get(function.rsplit(".", 1)[-1], [])
        files = set(self.files(path))
        out = [o for o in named if (o.package, o.file) in files]
        if out or files:
            return out
        where = _package_dir(path, tuple(self.releases))
        if where is None:
            return []
        pkg, folder = where
        stem = path.rsplit("/", 1)[-1].split("_", 1)[0].removesuffix(".py")  # nixl_connector.py: nixl
        return [o for o in named if o.package == pkg and o.file.startswith(folder) and stem in o.file]

    def match(self, msg: str, what: str | None = None, path: str | None = None) -> Origin | None:
        """The origin whose template the message fits best (most literal characters; then the
        exception type or level `what`, then the file `path` names)."""
        best: tuple[int, int, int, int, int, Origin] | None = None
        seen: set[str] = set()
        # the logger named its file: an origin in another file of that file's package counts only
        # in the same folder (a helper logging with stacklevel=2 names its caller), never across
        # folders; another package's file of the same name (Dynamo's `nixl_connector.py`, vLLM
        # 0.1x's) does not restrict vLLM's origins
        dirs = {(p, f.rsplit("/", 1)[0]) for p, f in self.files(path)} if path else set()
        dir_packages = {p for p, _d in dirs}
        for w in _WORD.findall(msg):
            if w in seen:
                continue
            seen.add(w)
            for o, parts, full in self._anchors.get(w, ()):
                if best is not None and full < best[0]:
                    continue
                weight = _matched(parts, msg, full)
                if not weight or (
                    o.package in dir_packages and (o.package, o.file.rsplit("/", 1)[0]) not in dirs
                ):
                    continue
                same_file = int(path is not None and path.rsplit("/", 1)[-1] == o.file.rsplit("/", 1)[-1])
                if full < MIN_LITERAL and not (same_file and weight == full):
                    continue
                same_what = int(what is not None and o.what == what)
                newest = self._newest(o)
                key = (weight, same_what, same_file, int(o.package == "vllm"), newest, o)
                if best is None or key[:5] > best[:5]:
                    best = key
        return best[5] if best else None

    def _newest(self, o: Origin) -> int:
        rels = self.releases.get(o.package, ())
        last = o.spans[-1][0] if o.spans else ""
        return rels.index(last) if last in rels else -1

    def frame(self, path: str, line: int, function: str, what: str) -> Origin | None:
        """A traceback frame in an indexed function that raised without a statement of its own
        (a KeyError from a lookup, a ZeroDivisionError): the function, at the frame's line."""
        mine = self.in_function(path, function)
        if not mine:
            return None
        first = mine[0]
        releases = sorted({r for o in mine for r in o.releases}, key=self._order(first.package))
        spans = tuple((r, line, line) for r in releases)
        return Origin(first.package, first.file, first.function, "frame", what, None, None, spans)

    def _order(self, package: str) -> Callable[[str], int]:
        rels = self.releases.get(package, ())
        return lambda r: rels.index(r) if r in rels else -1

    @cached_property
    def _by_condition(self) -> dict[str, list[Origin]]:
        """An assert's test without whitespace -> every assert with that test."""
        out: dict[str, list[Origin]] = defaultdict(list)
        for o in self.origins:
            if o.kind == "assert" and o.condition:
                out[_squeeze(o.condition)].append(o)
        return out

    def assertion(self, line: str) -> Origin | None:
        """The assert whose source line a paste quotes alone (`assert req_id in self.requests`,
        no frame): the newest of the asserts with that test (`same_message` lists the others)."""
        text = line.strip()
        if not text.startswith("assert "):
            return None
        body = _squeeze(text[7:].rstrip("(,\\ "))
        cands = self._by_condition.get(body)
        if cands is None and "," in body:  # `assert cond, "message"`: the test before the message
            cands = self._by_condition.get(body.split(",", 1)[0])
        if not cands:
            return None
        return max(cands, key=self._newest)

    def statement(self, text: str, path: str, function: str) -> Origin | None:
        """The statement whose source a traceback prints (`assert num_new_tokens > 0`, `raise
        ValueError(`) in `function` of `path`, without knowing the release."""
        text = text.strip()
        for o in self.in_function(path, function):
            if (
                o.kind == "assert"
                and o.condition
                and text.startswith("assert ")
                and (text[7:].rstrip(",( ").startswith(o.condition.split("\n", 1)[0][:60]))
            ):
                return o
            if o.kind == "raise" and text.startswith(f"raise {o.what}"):
                return o
        return None


def _suffix_ok(path: str, package: str, file: str) -> bool:
    """A log's path names this file: relative as vLLM's logger writes it (whole or a tail), elided
    (`distributed/.../v1/x.py`: head and tail fit), or absolute (`.../vllm/<file>`)."""
    if "..." in path:  # elided: the tail must fit (as a relative or an absolute path), the head too
        head, _, tail = path.partition("...")
        head, tail = head.strip("/"), tail.strip("/")
        if not tail:
            return False
        tail_ok = file == tail or file.endswith("/" + tail) or _suffix_ok("/" + tail, package, file)
        return tail_ok and (not head or path.startswith("/") or file.startswith(head))
    if path == file or file.endswith("/" + path):
        return True
    if path.endswith("/" + file):
        seg = path[: -len(file) - 1].rsplit("/", 1)[-1]
        return seg == package or seg.startswith(package + "_cu")
    return False


def _package_dir(path: str, packages: tuple[str, ...]) -> tuple[str, str] | None:
    """(package, folder relative to it, ending in `/`) of an absolute frame path."""
    for pkg in packages:
        i = path.rfind(f"/{pkg}/")
        if i >= 0:
            rel = path[i + len(pkg) + 2 :]
            return pkg, rel.rsplit("/", 1)[0] + "/" if "/" in rel else ""
    return None


def base(release: str) -> str:
    """`0.28.0+cpu` -> `0.28.0`."""
    return release.split("+", 1)[0].lstrip("v")
