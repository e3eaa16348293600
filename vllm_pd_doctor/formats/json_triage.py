"""JSON documents of `pd-doctor triage` (its verdicts and its catalogue), beside `json.py`."""

from __future__ import annotations

from typing import Any

from vllm_pd_doctor.results import SCHEMA_VERSION
from vllm_pd_doctor.triage.types import FailureCatalogue, Located, TriageResult, UnknownCause


def triage_obj(r: TriageResult) -> dict[str, Any]:
    """`pd-doctor triage --format json` (a `vllm_pd_doctor.triage.types.TriageResult`)."""

    def ev(e: Any) -> dict[str, Any] | None:
        return None if e is None else {"file": e.file, "line": e.line, "text": e.text}

    return {
        "schema_version": SCHEMA_VERSION,
        "verdicts": [
            {
                "class": v.cls,
                "title": v.title,
                "confidence": v.confidence,
                "side": v.side,
                "evidence": [ev(e) for e in v.evidence],
                "missing": list(v.missing),
                "fix": v.fix,
                "references": list(v.references),
                "next": v.next,
                "note": v.note,
            }
            for v in r.verdicts
        ],
        "no_known_cause": not r.verdicts,
        "informative": [ev(e) for e in r.informative],
        "inputs": [
            {
                "file": i.file,
                "side": i.side,
                "lines": i.lines,
                "bytes": i.bytes,
                "facts": {
                    "vllm_version": i.facts.vllm_version,
                    "architecture": i.facts.architecture,
                    "kv_role": i.facts.kv_role,
                    "connector": i.facts.connector,
                    "prefix_caching": i.facts.prefix_caching,
                    "hybrid": i.facts.hybrid,
                },
                "first_exception": ev(i.first_exception),
                "last_error": ev(i.last_error),
            }
            for i in r.inputs
        ],
        "release": r.release,
        "warnings": list(r.warnings),
        "unknown": unknown_obj(r.unknown),
        "located": [{"evidence": ev(ll.evidence), "origin": located_obj(ll.origin)} for ll in r.located],
    }


def located_obj(o: Located | None) -> dict[str, Any] | None:
    """One origin (`vllm_pd_doctor.triage.types.Located`) as JSON."""
    if o is None:
        return None
    return {
        "package": o.package,
        "file": o.file,
        "function": o.function,
        "kind": o.kind,
        "exception": o.exception,
        "level": o.level,
        "condition": o.condition,
        "template": o.template,
        "line": o.line,
        "release": o.release,
        "releases": o.releases,
        "changed_in": o.changed_in,
        "change": o.change,
        "how": o.how,
        "exact": o.exact,
    }


def unknown_obj(u: UnknownCause | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {
        "confidence": u.confidence,
        "evidence": {"file": u.evidence.file, "line": u.evidence.line, "text": u.evidence.text},
        "origin": located_obj(u.origin),
        "side": u.side,
        "next": u.next,
        "search": u.search,
        "note": u.note,
    }


def catalogue_obj(c: FailureCatalogue) -> dict[str, Any]:
    """`pd-doctor triage --list --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "classes": [
            {
                "id": x.id,
                "title": x.title,
                "side": x.side,
                "fix": x.fix,
                "references": list(x.references),
                "next": x.next,
            }
            for x in c.classes
        ],
    }
