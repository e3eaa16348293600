"""JSON documents (each with `schema_version`) for pd-doctor's results."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from vllm_pd_doctor.model import SCHEMA_VERSION, ConnectorVerdict, Frame, ReproReport


def _frame(f: Frame | None) -> dict[str, Any] | None:
    return f.to_dict() if f is not None else None


def verdict_to_dict(report: ReproReport, r: ConnectorVerdict) -> dict[str, Any]:
    """One connector's verdict as the documented JSON object."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "engine": report.engine,
        "vllm": {"version": report.vllm.version, "path": report.vllm.path,
                 "python": report.vllm.python},
        "connector": r.connector,
        "connector_label": r.label,
        "kv_connector": r.kv_connector,
        "connector_class": r.connector_class,
        "connector_scheduler_class": r.connector_scheduler_class,
        "transfer_library": {"module": r.transfer_library,
                             "installed": r.transfer_library_installed,
                             "needed_for_scheduler": False},
        "reproduced": r.reproduced,
        "error": dataclasses.asdict(r.error) if r.error else None,
    }
    if r.error is not None:
        return doc
    a, t, c = r.assertion, r.truncation, r.control
    assert a is not None and t is not None and c is not None
    doc.update({
        "config": dataclasses.asdict(r.config) if r.config else None,
        "assertion": {"fired": a.fired, "location": a.location, "statement": a.statement,
                      "matches_53514": a.matches_53514, "traceback": a.traceback,
                      "kind": a.kind, "message": a.message},
        "truncation": {"hook": t.hook, "before_lookup": t.before_lookup,
                       "tokens_removed": t.tokens_removed, "operation": t.operation,
                       "statement": _frame(t.statement), "call_site": _frame(t.call_site),
                       "stack": [f.to_dict() for f in t.stack]},
        "prefix_cache": {"hit_tokens": r.hit_tokens},
        "prompt": {"len_before": r.prompt_len_before, "len_after": r.prompt_len_after},
        "scheduled_tokens": r.scheduled_tokens,
        "control": dataclasses.asdict(c),
        "events": [e.to_dict() for e in r.events],
        "elapsed_s": r.elapsed_s,
        "triggers": [{**{k: v for k, v in dataclasses.asdict(tr).items() if k != "events"},
                      "events": [e.to_dict() for e in tr.events]} for tr in r.triggers],
        "verdict_notes": list(r.notes),
        "sizing": r.sizing,
        "unexpected": dataclasses.asdict(r.unexpected) if r.unexpected else None,
    })
    return doc


def repro_to_obj(report: ReproReport, *, as_list: bool) -> Any:
    docs = [verdict_to_dict(report, r) for r in report.results]
    for d in docs:
        d["timings"] = report.timings
        d["notes"] = list(report.notes)
    if as_list:
        return docs
    return docs[0] if docs else {"schema_version": SCHEMA_VERSION, "results": []}


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"
