"""Score `pd-doctor triage` on the held-out corpus of real P/D failure logs (issue 32).

tests/fixtures/triage/corpus/ holds real logs from public threads that triage was not built on,
each NAME.log beside NAME.expect.yaml: the thread (source), what it established, and what a right
answer is: `class` (a catalogue class is the cause), `origin` (no class applies; the statement that
wrote the decisive line: package, file suffix(es), function), `thread` (the best answer is that
public thread) or `lookalike` (must get no decisive verdict). The score follows issue 32's goal:

- named right first: the first answer is the expected one (the first verdict's class; for an origin
  the first answer's origin; for a thread the first thread URL the document names);
- with origin or thread: right first, or the expected class among the verdicts, or the expected
  origin located anywhere in the document, or the case's thread named anywhere in it;
- wrong decisive: a `decisive` verdict of another class (`acceptable` lists classes that are not
  wrong for a case: a true but secondary reading);
- lookalike decisive: a lookalike with any decisive verdict.

The reading is tolerant of the JSON growing (origins on verdicts, `threads`, new keys): origins are
any origin-shaped object (package, file, function) anywhere in the document, threads any GitHub
issue/PR URL or `repo#N` reference anywhere in it.

    python benchmarks/score_triage_corpus.py [--json] [--cli]

`--cli` runs the installed `pd-doctor triage --format json` per file (slower); the default runs the
same core and JSON formatter in-process.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "triage" / "corpus"
KINDS = ("class", "origin", "thread", "lookalike")

_URL = re.compile(r"github\.com/([\w.-]+)/([\w.-]+)/(?:issues|pull|discussions)/(\d+)", re.I)
_REF = re.compile(r"(?:\b[\w.-]+/)?\b([A-Za-z][\w.-]*)(?:\s+PR)?\s*#(\d+)\b")


@dataclass(frozen=True)
class Case:
    name: str
    log: Path
    expect: dict[str, Any]
    source: str
    decisive_line: str
    known_miss: str | None
    acceptable: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if k in self.expect)


@dataclass(frozen=True)
class Outcome:
    case: Case
    first: str  # what triage answered first, in words
    right_first: bool
    with_origin_or_thread: bool
    wrong_decisive: tuple[str, ...] = ()
    lookalike_decisive: bool = False
    verdicts: tuple[str, ...] = field(default=())


def load_cases(corpus: Path = CORPUS) -> list[Case]:
    cases = []
    for log in sorted(corpus.glob("*.log")):
        side = log.with_name(log.stem + ".expect.yaml")
        if not side.is_file():
            raise FileNotFoundError(f"{log.name} has no sidecar {side.name}")
        try:
            doc = yaml.safe_load(side.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ValueError(f"{side.name}: not valid YAML: {exc}") from exc
        exp = doc["expect"]
        if sum(k in exp for k in KINDS) != 1:
            raise ValueError(f"{side.name}: expect needs exactly one of {KINDS}")
        cases.append(
            Case(
                name=log.stem,
                log=log,
                expect=exp,
                source=str(doc["source"]),
                decisive_line=str(doc["decisive_line"]),
                known_miss=doc.get("known_miss"),
                acceptable=tuple(doc.get("acceptable") or ()),
            )
        )
    return cases


def triage_doc(log: Path, *, cli: bool = False) -> dict[str, Any]:
    """The document `pd-doctor triage --format json LOG` prints."""
    if cli:
        exe = shutil.which("pd-doctor", path=str(Path(sys.executable).parent)) or "pd-doctor"
        out = subprocess.run(
            [exe, "triage", "--format", "json", "--quiet", str(log)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if out.returncode not in (0, 1):
            raise RuntimeError(f"pd-doctor triage {log.name}: exit {out.returncode}: {out.stderr[-500:]}")
        return dict(json.loads(out.stdout))
    from vllm_pd_doctor.formats import to_dict
    from vllm_pd_doctor.triage import LogInput, triage
    from vllm_pd_doctor.triage.cli_context import build_context

    ctx = build_context(python=None, model=None, config=None, prefill_cmd=None, decode_cmd=None)
    return dict(to_dict(triage([LogInput(str(log))], ctx)))


def _walk(node: Any) -> Iterator[Any]:
    yield node
    if isinstance(node, dict):
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def origins_in(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every origin-shaped object in the document, in document order."""
    return [n for n in _walk(doc) if isinstance(n, dict) and {"package", "file", "function"} <= n.keys()]


def first_origin(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The origin of triage's first answer: the first verdict's, else the unknown-cause answer's."""
    verdicts = doc.get("verdicts") or []
    if verdicts:
        found = origins_in({"v": verdicts[0]})
        return found[0] if found else None
    unknown = doc.get("unknown") or {}
    found = origins_in({"u": unknown})
    return found[0] if found else None


def _thread_refs(text: str) -> list[tuple[str, int]]:
    """(repo, number) of every GitHub issue/PR URL or `repo#N` reference in `text`, in order."""
    found = [(m.start(), (m.group(2).lower(), int(m.group(3)))) for m in _URL.finditer(text)]
    blanked = _URL.sub(lambda m: " " * len(m.group(0)), text)
    found += [(m.start(), (m.group(1).lower(), int(m.group(2)))) for m in _REF.finditer(blanked)]
    return [k for _, k in sorted(found)]


def thread_key(text: str) -> set[tuple[str, int]]:
    return set(_thread_refs(text))


def threads_in(doc: dict[str, Any]) -> list[tuple[str, int]]:
    """Every thread the document names, in document order."""
    out: list[tuple[str, int]] = []
    for n in _walk(doc):
        if isinstance(n, str) and ("#" in n or "github.com/" in n):
            out += [k for k in _thread_refs(n) if k not in out]
    return out


def _as_list(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) else ([] if v is None else [str(v)])


def origin_matches(origin: dict[str, Any] | None, want: dict[str, Any]) -> bool:
    if not origin:
        return False
    if want.get("package") and origin.get("package") != want["package"]:
        return False
    ofile = str(origin.get("file") or "")
    if not ofile or not any(ofile.endswith(f) or f.endswith("/" + ofile) for f in _as_list(want.get("file"))):
        return False
    funcs = _as_list(want.get("function"))
    ofunc = str(origin.get("function") or "")
    return not funcs or any(ofunc == f or ofunc.endswith("." + f) for f in funcs)


def _verdict_words(doc: dict[str, Any]) -> str:
    verdicts = doc.get("verdicts") or []
    if verdicts:
        return f"{verdicts[0].get('class')} ({verdicts[0].get('confidence')})"
    origin = first_origin(doc)
    if origin:
        return f"unknown: {origin.get('package')} {origin.get('file')}:{origin.get('function')}"
    return "no known cause" if doc.get("unknown") is None else "unknown, not located"


def score_case(case: Case, doc: dict[str, Any]) -> Outcome:
    verdicts = doc.get("verdicts") or []
    classes = [str(v.get("class")) for v in verdicts]
    decisive = [str(v.get("class")) for v in verdicts if v.get("confidence") == "decisive"]
    exp = case.expect
    wanted = set().union(*(thread_key(t) for t in _as_list(exp.get("thread"))))
    source_keys = thread_key(case.source) | wanted
    thread_hit = any(k in source_keys for k in threads_in(doc))
    words = _verdict_words(doc)
    shown = tuple(f"{v.get('class')}:{v.get('confidence')}" for v in verdicts)
    if exp.get("lookalike"):
        return Outcome(case, words, not decisive, not decisive, (), bool(decisive), shown)
    allowed = set(case.acceptable)
    if case.kind == "class":
        allowed.add(str(exp["class"]))
        right = bool(classes) and classes[0] == exp["class"]
        near = right or exp["class"] in classes or thread_hit
    elif case.kind == "origin":
        right = origin_matches(first_origin(doc), exp["origin"])
        near = right or any(origin_matches(o, exp["origin"]) for o in origins_in(doc)) or thread_hit
    else:
        found = threads_in(doc)
        right = bool(found) and found[0] in wanted
        near = right or thread_hit
    wrong = tuple(c for c in decisive if c not in allowed)
    return Outcome(case, words, right, near, wrong, False, shown)


@dataclass(frozen=True)
class Score:
    outcomes: tuple[Outcome, ...]
    seconds: float

    @property
    def real(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.case.expect.get("lookalike")]

    @property
    def lookalikes(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.case.expect.get("lookalike")]

    def summary(self) -> str:
        real, look = self.real, self.lookalikes
        first = sum(o.right_first for o in real)
        near = sum(o.with_origin_or_thread for o in real)
        wrong = sum(bool(o.wrong_decisive) for o in real)
        ldec = sum(o.lookalike_decisive for o in look)
        n = max(len(real), 1)
        return (
            f"triage corpus: {len(real)} real logs, {len(look)} lookalikes ({self.seconds:.1f} s)\n"
            f"  named right first:     {first}/{len(real)} ({first / n:.0%})   goal >= 60 %\n"
            f"  with origin or thread: {near}/{len(real)} ({near / n:.0%})   goal >= 90 %\n"
            f"  wrong decisive:        {wrong}   goal 0\n"
            f"  lookalike decisive:    {ldec}/{len(look)}   goal 0"
        )

    def table(self) -> str:
        rows = []
        for o in self.outcomes:
            exp = o.case.expect
            want = (
                "lookalike"
                if exp.get("lookalike")
                else f"class {exp['class']}"
                if "class" in exp
                else f"origin {'|'.join(_as_list(exp['origin'].get('file')))}"
                if "origin" in exp
                else f"thread {' | '.join(_as_list(exp['thread']))}"
            )
            mark = "ok" if o.right_first else ("near" if o.with_origin_or_thread else "MISS")
            if o.wrong_decisive or o.lookalike_decisive:
                mark = "WRONG"
            rows.append(f"{mark:5} {o.case.name:48} want {want:52} got {o.first}")
        return "\n".join(rows)


def score(cases: list[Case], *, cli: bool = False) -> Score:
    t0 = time.perf_counter()
    outcomes = tuple(score_case(c, triage_doc(c.log, cli=cli)) for c in cases)
    return Score(outcomes, time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    ap.add_argument("--cli", action="store_true", help="run the pd-doctor CLI per file")
    args = ap.parse_args(argv)
    result = score(load_cases(), cli=args.cli)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "case": o.case.name,
                        "first": o.first,
                        "right_first": o.right_first,
                        "with_origin_or_thread": o.with_origin_or_thread,
                        "wrong_decisive": list(o.wrong_decisive),
                        "lookalike_decisive": o.lookalike_decisive,
                        "known_miss": o.case.known_miss,
                        "decisive_line": o.case.decisive_line,
                    }
                    for o in result.outcomes
                ],
                indent=2,
            )
        )
    else:
        print(result.table())
        print()
        print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
