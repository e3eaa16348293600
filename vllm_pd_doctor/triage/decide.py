"""From catalogue hits to verdicts: decision rules, correlation of both sides, ordering."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from vllm_pd_doctor.knowledge.facts import connectors, fixes
from vllm_pd_doctor.knowledge.facts.origin_scenarios import scenario_for
from vllm_pd_doctor.knowledge.facts.releases import version_key
from vllm_pd_doctor.knowledge.readers.facts import ModelInfo
from vllm_pd_doctor.results.triage import (
    CONFIDENCE_RANK,
    Confidence,
    Evidence,
    Located,
    LogFacts,
    ThreadMatch,
    UnknownCause,
    Verdict,
)
from vllm_pd_doctor.triage.catalogue import FailureClass
from vllm_pd_doctor.triage.entries import CLASSES
from vllm_pd_doctor.triage.locate import located
from vllm_pd_doctor.triage.scan import FileScan, Hit

ID_53514 = "nixl-p-side-truncation-53514"
_REMOTE_ID = re.compile(r"'remote_engine_id': '([\w-]+)'")
MAX_VERDICT_EVIDENCE = 6


@dataclass(frozen=True)
class Release:
    """The vLLM release examined with --python, read from its source (never imported)."""

    version: str | None
    truncates_late: bool | None
    """The P-side truncation helper is called from get_num_new_matched_tokens (after the lookup)."""
    where: str
    """file:line of the call sites read."""
    has_assert: bool | None = None
    """The scheduler holds `assert num_new_tokens > 0`."""
    path: str | None = None
    """The installed vllm package (its statements join the origin index)."""


@dataclass(frozen=True)
class Context:
    """What the command line adds to the logs."""

    release: Release | None = None
    model: ModelInfo | None = None
    connector: str | None = None
    """kv_connector from --config / --prefill-cmd."""


def _best(a: Confidence, b: Confidence) -> Confidence:
    return a if CONFIDENCE_RANK[a] <= CONFIDENCE_RANK[b] else b


def _fired(c: FailureClass, fs: FileScan) -> tuple[Confidence, list[Hit]] | None:
    if any((c.id, -1 - i) in fs.hits for i in range(len(c.excludes))):
        return None
    conf: Confidence | None = None
    hits: list[Hit] = []
    for i, m in enumerate(c.matchers):
        h = fs.hits.get((c.id, i))
        if h is None or h.count < m.min_count:
            continue
        hits.append(h)
        if m.role == "cause":
            conf = m.confidence if conf is None else _best(conf, m.confidence)
    if conf is None:
        return None
    for i, m in enumerate(c.matchers):
        h = fs.hits.get((c.id, i))
        if m.role == "require" and (h is None or h.count < m.min_count):
            return None
    for i, m in enumerate(c.matchers):  # support and require lines can raise a fired class's confidence
        h = fs.hits.get((c.id, i))
        if m.role != "cause" and h is not None and h.count >= m.min_count:
            conf = _best(conf, m.confidence)
    return conf, hits


def raw_verdicts(scans: Sequence[FileScan]) -> list[tuple[Verdict, str | None, bool]]:
    """(verdict, first timestamp, fatal) per class that fired, in any file."""
    out: list[tuple[Verdict, str | None, bool]] = []
    for c in CLASSES:
        best: Confidence | None = None
        ev: list[Evidence] = []
        ts: str | None = None
        side = "unknown"
        for fs in scans:
            got = _fired(c, fs)
            if got is None:
                continue
            conf, hits = got
            best = conf if best is None else _best(best, conf)
            for h in sorted(hits, key=lambda h: h.evidence[0].line if h.evidence else 0):
                ev.extend(h.evidence)
                ts = min(filter(None, (ts, h.first_ts)), default=None)
                sides = {s for s in h.sides if s}
                if len(sides) == 1:
                    side = next(iter(sides))
            if side == "unknown" and fs.file_side:
                side = fs.file_side
        if best is None:
            continue
        ev = sorted(dict.fromkeys(ev), key=lambda e: (e.file, e.line))[:MAX_VERDICT_EVIDENCE]
        v = Verdict(
            cls=c.id,
            title=c.title,
            confidence=best,
            evidence=tuple(ev),
            missing=(),
            fix=c.fix,
            references=c.references,
            next=c.next,
            side=side if side in ("prefill", "decode") else "unknown",  # type: ignore[arg-type]
        )
        out.append((v, ts, c.fatal))
    return out


def decide_53514(v: Verdict, facts: Sequence[LogFacts], ctx: Context) -> tuple[Verdict | None, list[str]]:
    """#53514 only for a hybrid model on a NIXL/Mooncake producer of a late-truncating release."""
    notes: list[str] = []
    missing: list[str] = []
    model = ctx.model
    hybrid = (
        model.hybrid if model is not None else next((f.hybrid for f in facts if f.hybrid is not None), None)
    )
    connector = ctx.connector or next((f.connector for f in facts if f.connector), None)
    versions = [f.vllm_version for f in facts if f.vllm_version]
    if connector is not None and connectors.by_vllm_name(connector) is None and connector != "MultiConnector":
        notes.append(
            f"`assert num_new_tokens > 0` with {connector}: not #53514 (that needs a NIXL or Mooncake "
            "producer); other producers of the assertion exist (llm-d-router#157 with LMCache)"
        )
        return None, notes
    rel = ctx.release
    late: bool | None = rel.truncates_late if rel is not None else None
    by_log_version: bool | None = None
    if versions:
        by_log_version = version_key(versions[0]) < version_key(fixes.fixed_in())
    if late is False:
        where = f"{rel.version} ({rel.where})" if rel else "?"
        notes.append(
            f"vLLM {where} truncates the prompt before the prefix-cache lookup: "
            "the assertion there is not #53514; read the traceback's other frames"
        )
        return None, notes
    if late is None and by_log_version is False:
        notes.append(f"the log's vLLM {versions[0]} already has the #53514 fix: look for another producer")
        return None, notes
    if hybrid is False:
        notes.append("the model is not hybrid (no Mamba/SSM layers): #53514 needs one")
        return None, notes
    conf: Confidence = "possible"
    if hybrid is None:
        missing.append("the model: pass --model DIR (hybrid Mamba/SSM + attention or not)")
    if late is None:
        missing.append("the release: pass --python PYTHON of the prefill engine's vLLM")
    if connector is None:
        missing.append("the connector: pass --config or --prefill-cmd (NixlConnector/MooncakeConnector?)")
    if hybrid and late:
        conf = "decisive"
    elif hybrid or late:
        conf = "likely"
    note = (
        f"release {rel.version}: truncation called late at {rel.where}" if rel is not None and late else None
    )
    return replace(v, confidence=conf, missing=tuple(missing), note=note), notes


def finish(
    raw: list[tuple[Verdict, str | None, bool]], facts: Sequence[LogFacts], ctx: Context
) -> tuple[list[Verdict], list[str]]:
    """Apply the decision rules, the per-class `missing`, correlation, and order best first."""
    by_id = {c.id: c for c in CLASSES}
    notes: list[str] = []
    kept: list[tuple[Verdict, str | None, bool]] = []
    for v, ts, fatal in raw:
        c = by_id[v.cls]
        if v.cls == ID_53514:
            nv, n = decide_53514(v, facts, ctx)
            notes.extend(n)
            if nv is None:
                continue
            v = nv
        elif c.decides and v.confidence != "decisive":
            v = replace(v, missing=tuple(c.decides))
        if c.known_issue and v.confidence == "decisive":  # a maintainer's answer comes first
            v = replace(v, title=f"{c.known_issue} {v.title.split(' ', 2)[-1]}")
        kept.append((v, ts, fatal))
    prefill_ids = {e for f in facts for e in f.engine_ids if f.kv_role != "kv_consumer"}
    kept = _correlate(kept, prefill_ids)
    kept.sort(key=lambda t: (CONFIDENCE_RANK[t[0].confidence], not t[2], by_id[t[0].cls].consequence))
    return [v for v, _, _ in kept], notes


def _correlate(
    kept: list[tuple[Verdict, str | None, bool]], prefill_ids: set[str]
) -> list[tuple[Verdict, str | None, bool]]:
    """Decode-side errors that follow a prefill engine's death (by time, or by the remote engine
    id they name) point at the prefill's cause."""
    by_id = {c.id: c for c in CLASSES}
    roots = [(v, ts) for v, ts, fatal in kept if fatal and v.side == "prefill"]
    if not roots:
        return kept
    root, root_ts = min(roots, key=lambda t: (CONFIDENCE_RANK[t[0].confidence], t[1] or ""))
    out = []
    for v, ts, fatal in kept:
        remote = {m.group(1) for e in v.evidence if (m := _REMOTE_ID.search(e.text))}
        mine = sorted(remote & prefill_ids)
        later = root_ts is None or ts is None or ts >= root_ts
        if by_id[v.cls].consequence and v.side != "prefill" and (later or mine):
            when = f" at {root_ts}" if root_ts else ""
            whose = f"; its remote engine {mine[0]} is that engine" if mine else ""
            note = f"follows the prefill engine's death{when}: {root.cls} ({root.title}){whose}"
            conf: Confidence = "possible" if v.confidence != "decisive" else "likely"
            v = replace(v, note=note, confidence=conf)
        out.append((v, ts, fatal))
    return out


def unknown_cause(scans: Sequence[FileScan], matches: tuple[ThreadMatch, ...] = ()) -> UnknownCause | None:
    """With no known class: the origin of the first exception (else of the last ERROR, else of the
    first located exception, else of the first located line: a pasted warning), where the code has
    it, the next step, and the public threads that quote the same line (`matches`)."""
    pick = _pick(scans)
    if pick is None:
        return None
    fs, ev, loc = pick
    side = fs.file_side if fs.file_side in ("prefill", "decode") else "unknown"
    sided = next((t for t in matches if t.side in ("prefill", "decode")), None)
    side_from = None
    if side == "unknown" and sided is not None:  # the log does not say: the thread that quotes it does
        side, side_from = sided.side, sided.url
    scenario = scenario_for(loc.function) if loc else None
    if scenario:
        nxt = f"{scenario.next_step} --python PYTHON (it drives {loc.function if loc else 'that code'})"
    else:
        nxt = "pd-doctor report --log LOG (attach it upstream with the search below)"
    return UnknownCause(
        evidence=ev,
        origin=loc,
        side=side,  # type: ignore[arg-type]
        next=nxt,
        search=_search(loc, ev),
        note=release_note(fs),
        threads=matches,
        side_from=side_from,
    )


def _pick(scans: Sequence[FileScan]) -> tuple[FileScan, Evidence, Located | None] | None:
    pick: tuple[FileScan, Evidence, Located | None] | None = None
    for fs in scans:
        for ev in (fs.first_exception, fs.last_error):
            if ev is None:
                continue
            loc = next((ll.origin for ll in fs.located if ll.evidence.line == ev.line), None)
            if pick is None or (pick[2] is None and loc is not None):
                pick = (fs, ev, loc)
        if pick is None or pick[2] is None:
            exc = next((ll for ll in fs.located if ll.origin.kind != "log"), None)
            if exc is not None:
                pick = (fs, exc.evidence, exc.origin)
        if (pick is None or pick[2] is None) and (frame := _cut_frame(fs)) is not None:
            pick = frame
    for fs in scans:  # no exception, no ERROR: the first located line (a pasted warning)
        if pick is None and fs.located:
            pick = (fs, fs.located[0].evidence, fs.located[0].origin)
    return pick


def _cut_frame(fs: FileScan) -> tuple[FileScan, Evidence, Located] | None:
    """A traceback cut before its exception line (a pasted excerpt): its last frame in vLLM's code."""
    loc = fs.locator
    f = loc.indexed_frame if loc is not None else None
    if loc is None or f is None or fs.last_frame is None:
        return None
    o = loc.index.frame(f.path, f.line, f.function, "")
    if o is None:
        return None
    return fs, fs.last_frame, located(loc.index, o, "frame", False, loc.release)


def _search(loc: Located | None, ev: Evidence) -> str:
    """An upstream search string: the function and the template's longest literal, else the line."""
    if loc is None:
        text = ev.text.split(": ", 1)[-1] if ev.text[:1].isalpha() else ev.text
        return f'repo:vllm-project/vllm "{text[:80].strip()}"'
    from vllm_pd_doctor.knowledge.origins import REPOSITORY

    literals = _PLACEHOLDER_SHOWN.split(loc.template or "")
    words = max((p.strip() for p in literals), key=len, default="")
    parts = re.split(r"\.|::", loc.function)
    fn = parts[-2] if parts[-1].startswith("__") and len(parts) > 1 else parts[-1]  # a class for __init__
    quoted = f' "{words[:80]}"' if len(words) >= 12 else (f' "{loc.condition}"' if loc.condition else "")
    return f"repo:{REPOSITORY.get(loc.package, loc.package)} {fn}{quoted}"


_PLACEHOLDER_SHOWN = re.compile(r"\.\.\.|\{[A-Za-z_][\w.()+>-]*\}")
"""How a located template shows a value: `...`, or `{name}` where the source names it."""


def release_note(fs: FileScan) -> str | None:
    """A log whose vLLM release the origin index lacks says so (its lines were located by message)."""
    from vllm_pd_doctor.knowledge import origins

    rel = fs.version or fs.release_hint
    index = fs.locator.index if fs.locator is not None else origins.load()
    have = index.releases.get("vllm", ())
    if rel and have and not index.has_release(rel):
        return (
            f"{fs.file}: vLLM {rel} is not in the origin index ({have[0]} - {have[-1]}): its lines were "
            "located by their message; pass --python of that release for its exact statements"
        )
    return None
