"""Map log records to the statement that wrote them (the origin index of `knowledge.origins`).

Per record, best first: an ERROR/WARNING line's logger location (`[v1/core/sched/scheduler.py:123]`)
in the log's release; an exception line through the last traceback frame before it (its
file/line in the release, else the frame's source line in its function); else the message's
template across every indexed release. A line as people paste it (no logger prefix: a bare
warning, an exception message without its type, one line of a message split over two) is
looked up by its template too, and joined with the bare line before it when that fits better.
A `Locator` is one log's state (the last frame seen, the last bare line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_pd_doctor.knowledge.origins import Origin, OriginIndex, base
from vllm_pd_doctor.knowledge.origins.extract import PLACEHOLDER
from vllm_pd_doctor.results.triage import Located, NextChange, Value
from vllm_pd_doctor.triage.reader import Record

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning))(?::\s?(.*))?$")
_SRC = re.compile(r"^(.*?):(\d+)$")
LEVELS = ("ERROR", "CRITICAL", "WARNING", "WARN")
MAX_ALSO = 6
"""Other places of the same message listed per located line."""
_TRIM = re.compile(r"^(?:\.\.\.|…|\[\.\.\.\])\s*|\s*(?:\.\.\.|…|\[\.\.\.\])$")
"""An ellipsis a person put at the start or end of a quoted line."""


@dataclass
class _Frame:
    path: str
    line: int
    function: str
    source: str | None = None


class Locator:
    """Locates one log's records in order (it keeps the traceback frame being read)."""

    def __init__(self, index: OriginIndex, release: str | None = None) -> None:
        self.index = index
        self.release = release
        """The release whose line numbers apply (the log's, or --python's)."""
        self.frame: _Frame | None = None
        self.indexed_frame: _Frame | None = None
        """The last frame in a file the index holds (the deepest vLLM code of the traceback)."""
        self._expect_source = False
        self._bare: str | None = None
        """The last bare line (no header, not a frame), for a message split over two lines."""
        self.text = ""
        """The text the last record was looked up by (two bare lines joined, for a split one)."""

    def exact_release(self) -> str | None:
        return self.release if self.index.has_release(self.release) else None

    def locate(self, r: Record) -> tuple[Origin, str, bool] | None:
        """(origin, how, exact) of one record: how is `logger`, `frame`, `statement`,
        `function` or `template`; exact when the release's own line was read."""
        msg = r.msg.strip()
        self.text = r.msg
        if m := _FRAME.match(r.msg):
            self.frame = _Frame(m.group(1), int(m.group(2)), m.group(3))
            if self.index.in_function(self.frame.path, self.frame.function):
                self.indexed_frame = self.frame
            self._expect_source = True
            return None
        if self._expect_source and self.frame is not None:
            self._expect_source = False
            if not _EXC.match(msg) and msg and not msg.startswith("Traceback"):
                self.frame.source = msg
                return None
        if m := _EXC.match(msg):
            frame, self.frame = self.frame, None
            deepest, self.indexed_frame = self.indexed_frame, None
            return self._exception(m.group(1).rsplit(".", 1)[-1], m.group(2) or "", frame, deepest)
        if msg.startswith("Traceback") or (r.msg.startswith((" ", "\t")) and r.level is not None):
            return None
        if r.level is None and r.src is None:
            return self._bare_line(msg)
        self._bare = None
        if r.level not in LEVELS:
            return None
        got = self._logged(r)
        if got is None:  # a logger line wrapped by the paste: its rest may follow, bare
            self._bare = msg
        return got

    def _bare_line(self, msg: str) -> tuple[Origin, str, bool] | None:
        """A line without the logger's header: its template, alone or after the bare line before
        it (a message wrapped by hand); the joined text wins when it holds more of a template."""
        msg = _TRIM.sub("", msg).strip()
        prev, self._bare = self._bare, msg
        self.text = msg
        if not msg:
            return None
        o = self.index.assertion(msg) if msg.startswith("assert ") else None
        if o is not None:
            return o, "statement", False
        o = self.index.match(msg)
        if o is None and prev:
            o = self.index.match(f"{prev} {msg}")
            if o is not None:
                self._bare = self.text = f"{prev} {msg}"
        return (o, "template", False) if o is not None else None

    def _exception(
        self, exc: str, text: str, frame: _Frame | None, deepest: _Frame | None
    ) -> tuple[Origin, str, bool] | None:
        rel = self.exact_release()
        if frame is not None:
            o = self.index.at(frame.path, frame.line, rel)
            # the release's statement at that line must be this frame's and raise this exception
            # (a log of another release, read with --python's, points elsewhere)
            if o is not None and o.kind != "log" and o.what == exc and _same_function(o, frame.function):
                return o, "frame", True
            if frame.source:
                o = self.index.statement(frame.source, frame.path, frame.function)
                if o is not None:
                    return o, "statement", False
        if text:
            o = self.index.match(text, exc)
            if o is not None and o.kind != "log":
                return o, "template", False
        if frame is not None:
            mine = [o for o in self.index.in_function(frame.path, frame.function) if o.what == exc]
            if len({(o.file, o.function, o.kind, o.what) for o in mine}) == 1:
                return mine[-1], "function", False
        if deepest is not None:
            o = self.index.frame(deepest.path, deepest.line, deepest.function, exc)
            if o is not None:
                return o, "frame", False
        return None

    def _logged(self, r: Record) -> tuple[Origin, str, bool] | None:
        rel = self.exact_release()
        path = None
        if r.src and (m := _SRC.match(r.src)):
            path = m.group(1)
            o = self.index.at(path, int(m.group(2)), rel)
            if o is not None and o.kind == "log" and o.what == _level(r.level) and _fits(o, r.msg):
                return o, "logger", True
            # no release to read the line in (a NIXL/UCX/Go line never says its version): a
            # statement that fits and sits at that line in some release beats a template match
            # alone (NIXL's `getXferTelemetry: cannot return values ...` at nixl_agent.cpp:1291
            # is 1.4.0's; 0.7.1 - 1.3.2 write it from another condition)
            at = [o for o in self.index.at_any(path, int(m.group(2))) if o.kind == "log" and _fits(o, r.msg)]
            best = self.index.match(r.msg, _level(r.level), path)
            if best is not None and (same := [o for o in at if o.template == best.template]):
                return same[-1], "logger", False
        o = self.index.match(r.msg, _level(r.level), path)
        if o is not None:
            return o, "template", False
        return None


def _same_function(o: Origin, function: str) -> bool:
    return o.function == function or o.function.endswith("." + function)


def _level(level: str | None) -> str | None:
    return "WARNING" if level == "WARN" else level


def _fits(o: Origin, msg: str) -> bool:
    if not o.template:
        return True
    first = o.template.split("\n", 1)[0]
    pos = 0
    for p in (p for p in first.split(PLACEHOLDER) if p):
        i = msg.find(p.strip(), pos)
        if i < 0:
            return False
        pos = i + len(p.strip())
    return True


def located(
    index: OriginIndex, o: Origin, how: str, exact: bool, release: str | None, msg: str = ""
) -> Located:
    """The result type of one located origin (with its lifetime across the indexed releases, the
    values `msg` gives its placeholders and what the release after the log's did there)."""
    life = index.lifetime(o)
    ch = index.change_after(o, release)
    nxt = NextChange(ch.release, ch.kind, ch.diff, ch.moved_to) if ch is not None else None
    values = tuple(Value(n, t, v) for n, t, v in index.values(o, msg)) if msg else ()
    also = (
        tuple(
            f"{x.file}:{x.function} ({a}{'' if a == b else ' - ' + b})" for x, a, b in index.same_message(o)
        )[:MAX_ALSO]
        if how in ("template", "statement") and not exact
        else ()
    )
    rel = base(release) if release and exact else None
    first = f"{life.first} (or older)" if life.since_oldest else life.first
    span = first if life.first == life.last and not life.since_oldest else f"{first} - {life.last}"
    return Located(
        package=o.package,
        file=o.file,
        function=o.function,
        kind=o.kind,
        exception=(o.what or None) if o.kind != "log" else None,
        level=o.what if o.kind == "log" else None,
        condition=o.condition,
        template=o.text,
        line=o.line_in(rel) if rel else o.spans[-1][1],
        # a frame's line is the log's own (its release, when the log states one)
        release=rel or ((base(release) if release else None) if o.kind == "frame" else o.spans[-1][0]),
        releases=span,
        changed_in=life.changed_in,
        change=life.change,
        how=how,
        exact=exact,
        values=values,
        next_change=nxt,
        also=also,
    )
