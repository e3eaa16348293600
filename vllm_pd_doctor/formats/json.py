"""JSON documents (each with `schema_version`) for pd-doctor's results.

One `*_obj` function per result type returns the document; `dumps` writes it. The keys are the
documented interface (tests assert them): add keys, do not rename them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from vllm_pd_doctor.checkconfig.types import (
    CheckReport,
    Exposure,
    Finding,
    RuleCatalogue,
    Severity,
    VllmSource,
)
from vllm_pd_doctor.hotfix_env import ENV_SETTING
from vllm_pd_doctor.results import (
    SCHEMA_VERSION,
    Assertion,
    ConnectorVerdict,
    EnvChange,
    Frame,
    NotAffected,
    ReproReport,
)

if TYPE_CHECKING:  # only the renderers of these types need them (check-config's JSON does not)
    from vllm_pd_doctor import hotfix
    from vllm_pd_doctor.envs import EnvListing
    from vllm_pd_doctor.matrix import BisectReport, MatrixCell, MatrixReport, ReleaseRow


def _frame(f: Frame | None) -> dict[str, Any] | None:
    return f.to_dict() if f is not None else None


REPRO_KEYS = (
    "connector",
    "connector_label",
    "kv_connector",
    "connector_class",
    "connector_scheduler_class",
    "transfer_library",
    "reproduced",
    "error",
    "config",
    "assertion",
    "truncation",
    "prefix_cache",
    "prompt",
    "scheduled_tokens",
    "control",
    "events",
    "elapsed_s",
    "triggers",
    "verdict_notes",
    "sizing",
    "unexpected",
    "hotfix",
    "reason",
    "evidence",
)
"""The top-level keys every repro object has (besides schema_version, engine, vllm and
not_affected, and timings and notes), whatever it reports: None where it has no value."""


def _assertion_obj(a: Assertion | None) -> dict[str, Any]:
    a = a or Assertion(fired=False)
    return {
        "fired": a.fired,
        "location": a.location,
        "statement": a.statement,
        "matches_53514": a.matches_53514,
        "traceback": a.traceback,
        "kind": a.kind,
        "message": a.message,
    }


def _repro_skeleton(report: ReproReport) -> dict[str, Any]:
    """Every top-level key of a repro object, whatever it reports (ran, failed, not affected)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "engine": report.engine,
        "vllm": {"version": report.vllm.version, "path": report.vllm.path, "python": report.vllm.python},
        "not_affected": report.not_affected is not None,
        **dict.fromkeys(REPRO_KEYS),
        "reproduced": False,
    }


def verdict_to_dict(report: ReproReport, r: ConnectorVerdict) -> dict[str, Any]:
    """One connector's verdict as the documented JSON object."""
    doc = _repro_skeleton(report)
    doc.update(
        {
            "connector": r.connector,
            "connector_label": r.label,
            "kv_connector": r.kv_connector,
            "connector_class": r.connector_class,
            "connector_scheduler_class": r.connector_scheduler_class,
            "transfer_library": {
                "module": r.transfer_library,
                "installed": r.transfer_library_installed,
                "needed_for_scheduler": False,
            },
            "reproduced": r.reproduced,
            "error": dataclasses.asdict(r.error) if r.error else None,
        }
    )
    if r.error is not None:
        return doc
    t, c = r.truncation, r.control
    assert t is not None and c is not None
    doc.update(
        {
            "config": dataclasses.asdict(r.config) if r.config else None,
            "assertion": _assertion_obj(r.assertion),
            "truncation": {
                "hook": t.hook,
                "before_lookup": t.before_lookup,
                "tokens_removed": t.tokens_removed,
                "operation": t.operation,
                "statement": _frame(t.statement),
                "call_site": _frame(t.call_site),
                "stack": [f.to_dict() for f in t.stack],
            },
            "prefix_cache": {"hit_tokens": r.hit_tokens},
            "prompt": {"len_before": r.prompt_len_before, "len_after": r.prompt_len_after},
            "scheduled_tokens": r.scheduled_tokens,
            "control": dataclasses.asdict(c),
            "events": [e.to_dict() for e in r.events],
            "elapsed_s": r.elapsed_s,
            "triggers": [
                {
                    **{k: v for k, v in dataclasses.asdict(tr).items() if k != "events"},
                    "events": [e.to_dict() for e in tr.events],
                }
                for tr in r.triggers
            ],
            "verdict_notes": list(r.notes),
            "sizing": r.sizing,
            "unexpected": dataclasses.asdict(r.unexpected) if r.unexpected else None,
        }
    )
    if r.hotfix is not None:
        doc["hotfix"] = {
            "applied": any(p.applied for p in r.hotfix),
            "verdict": r.hotfix_verdict,
            "patched": [dataclasses.asdict(p) for p in r.hotfix],
        }
    return doc


def not_affected_obj(report: ReproReport, na: NotAffected) -> dict[str, Any]:
    """The model has no Mamba state: the same keys as a verdict, the assertion cannot fire."""
    doc = _repro_skeleton(report)
    doc.update({"assertion": _assertion_obj(None), "reason": na.reason, "evidence": na.evidence})
    return doc


def repro_to_obj(report: ReproReport, *, as_list: bool) -> Any:
    if report.not_affected is not None:
        docs = [not_affected_obj(report, report.not_affected)]
        as_list = False
    else:
        docs = [verdict_to_dict(report, r) for r in report.results]
    from vllm_pd_doctor import advice

    fixes = list(advice.for_repro(report))
    for d in docs:
        d["timings"] = report.timings
        d["notes"] = list(report.notes)
        d["advice"] = fixes
    if as_list:
        return docs
    return docs[0] if docs else {"schema_version": SCHEMA_VERSION, "results": []}


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"


# --- check-config -----------------------------------------------------------------------------


def exposure_obj(e: Exposure) -> dict[str, Any]:
    return {
        "issue": "vllm#53514",
        "verdict": e.verdict,
        "sides": [
            {
                "role": s.role,
                "server": s.server,
                "connector": s.connector,
                "verdict": s.verdict,
                "reasons": list(s.reasons),
                "reason_kinds": [r.kind.value for r in s.why],
                "evidence": list(s.evidence),
            }
            for s in e.sides
        ],
        "fixes": list(e.fixes),
        "probe": None
        if e.probe is None
        else {"ran": e.probe.ran, "reproduced": e.probe.reproduced, "detail": e.probe.detail},
    }


def finding_obj(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id,
        "severity": f.severity.value,
        "title": f.title,
        "evidence": f.evidence,
        "fix": f.fix,
        "refs": list(f.refs),
    }


def vllm_source_obj(v: VllmSource) -> dict[str, Any]:
    """What check-config read from the installed vLLM's source."""
    return {
        "version": v.version,
        "path": v.path,
        "error": v.error,
        "side_channel_port_default": v.side_channel_port_default,
        "kv_roles": list(v.kv_roles),
        "truncation_sites": [
            {
                "connector": s.connector,
                "helper": s.helper,
                "caller": s.caller,
                "class": s.caller_class,
                "location": s.location,
                "before_lookup": s.before_lookup,
            }
            for s in v.sites
        ],
    }


def check_obj(r: CheckReport) -> dict[str, Any]:
    """`pd-doctor check-config --format json`."""
    i = r.inputs
    return {
        "schema_version": SCHEMA_VERSION,
        "command": "check-config",
        "exposure": exposure_obj(r.exposure),
        "findings": [finding_obj(f) for f in r.findings],
        "summary": {s.value: sum(1 for f in r.findings if f.severity is s) for s in Severity},
        "inputs": {
            "given": i.given(),
            "prefill_cmd": i.prefill,
            "decode_cmd": i.decode,
            "config_file": i.config_file,
            "model": i.model,
            "model_source": i.model_source,
            "model_hybrid": r.model.hybrid if r.model else None,
            "python": i.python,
            "warnings": list(i.warnings),
            "not_given": [k for k, v in i.given().items() if not v],
            "variables": dict(i.variables),
        },
        "servers": [
            {
                "name": sv.name,
                "role": sv.config.role,
                "role_source": sv.role_source,
                "launcher": sv.launcher,
                "network": sv.network,
                "network_evidence": sv.network_evidence,
                "model": sv.config.model,
                "kv_connector": sv.config.kv_connector,
                "kv_role": sv.config.kv_role,
            }
            for sv in r.servers
        ],
        "vllm": None if r.vllm is None else vllm_source_obj(r.vllm),
        "nixl": None
        if r.nixl is None
        else {
            "dists": [{"name": n, "version": v} for n, v in r.nixl.dists],
            "module_found": r.nixl.namespace_found,
            "import_ok": r.nixl.import_ok,
            "import_error": r.nixl.import_error,
            "ucx_plugin": r.nixl.ucx_plugin,
            "vllm_requirement": r.nixl.vllm_requirement,
        },
        "elapsed_s": round(r.elapsed_s, 4),
    }


def rules_obj(c: RuleCatalogue) -> dict[str, Any]:
    """`pd-doctor check-config --list-rules --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "rules": [
            {"id": r.id, "severity": r.severity.value, "title": r.title, "fix": r.fix, "refs": list(r.refs)}
            for r in c.rules
        ],
    }


# --- matrix and bisect ------------------------------------------------------------------------


def _cell_obj(c: MatrixCell) -> dict[str, Any]:
    return {
        "connector": c.connector,
        "status": c.status,
        "hook": c.hook,
        "call_site": c.call_site.to_dict() if c.call_site else None,
        "assertion_location": c.assertion_location,
        "reason": c.reason,
    }


def row_obj(r: ReleaseRow) -> dict[str, Any]:
    return {
        "release": r.release,
        "status": r.status,
        "reason": r.reason,
        "vllm_version": r.vllm_version,
        "python": r.python,
        "cached": r.cached,
        "provision_s": r.provision_s,
        "repro_s": r.repro_s,
        "fired": r.fired,
        "cells": {c.connector: _cell_obj(c) for c in r.cells},
    }


def matrix_obj(m: MatrixReport) -> dict[str, Any]:
    """`pd-doctor matrix --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "matrix",
        "package": m.package,
        "connectors": list(m.connectors),
        "releases_source": m.releases_source,
        "fired": m.fired,
        "jobs": m.jobs,
        "timings": {"wall_s": m.wall_s, "repro_s_total": round(m.repro_s_total, 2)},
        "rows": [row_obj(r) for r in m.rows],
    }


def bisect_obj(b: BisectReport) -> dict[str, Any]:
    """`pd-doctor bisect --format json`; `outcome`: changed, no_change or endpoint_failed."""
    res = b.result
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "bisect",
        "package": b.package,
        "connector": b.connector,
        "good": b.good,
        "bad": b.bad,
        "only_cached": b.only_cached,
        "releases_source": b.releases_source,
        "outcome": res.outcome,
        "candidates": list(res.candidates),
        "before": _side(b, res.before),
        "after": _side(b, res.after),
        "untested_between": list(res.untested_between),
        "same_verdict": res.same_verdict,
        "endpoint_failed": res.endpoint_failed,
        "steps": [
            {"release": s.release, "fired": s.verdict, "reason": s.row.reason if s.row else None}
            for s in res.steps
        ],
        "provisioned": list(b.provisioned),
        "timings": {"wall_s": b.wall_s},
    }


def _side(b: BisectReport, release: str | None) -> dict[str, Any] | None:
    from vllm_pd_doctor.matrix import FIRED

    if release is None:
        return None
    row = b.rows.get(release)
    cell = row.cell(b.connector) if row else None
    return {
        "release": release,
        "fired": cell.status == FIRED if cell else None,
        "cell": _cell_obj(cell) if cell else None,
    }


# --- envs -------------------------------------------------------------------------------------


def envs_obj(e: EnvListing) -> dict[str, Any]:
    """`pd-doctor envs list --format json`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "home": str(e.home),
        "envs": [
            {
                "name": m.name,
                "package": m.package,
                "version": m.version,
                "python": str(m.python),
                "extras": list(m.extras),
                "install_s": m.install_s,
                "created": m.created,
            }
            for m in e.envs
        ],
    }


# --- hotfix -----------------------------------------------------------------------------------


def hotfix_status_obj(st: hotfix.Status) -> dict[str, Any]:
    inst = st.installed
    return {
        "schema_version": SCHEMA_VERSION,
        "python": st.python,
        "site_packages": st.site_packages,
        "vllm_version": st.vllm_version,
        "installed": inst is not None,
        "dist_info": str(inst.dist_info) if inst else None,
        "current": inst.current if inst else None,
        "other_plugins": list(st.other_plugins),
        "enabled": st.enabled,
        "enable_with": ENV_SETTING,
        "needed": st.needed,
        "plan_error": st.plan_error,
        "plan": [dataclasses.asdict(p) for p in st.plan],
    }


def hotfix_change_obj(c: hotfix.Change) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "action": c.action,
        "distribution": _hotfix_dist(),
        "python": c.python,
        "site_packages": c.site_packages,
        "files": list(c.files),
    }


def env_change_obj(c: EnvChange) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "action": c.action, "paths": list(c.paths)}


def _hotfix_dist() -> str:
    from vllm_pd_doctor import hotfix

    return hotfix.DIST
