"""A status snapshot in public form, for `pd-doctor report`'s bundle (built from safe kinds only).

Kept: roles, vLLM versions, block sizes, KV layouts, attention backends, which metrics a release
does not expose, comparisons as same/different (values only for release-level fields), findings
(id, severity, triage class, fix, next command; evidence as metric and value). Dropped: URLs,
hosts, ports, side-channel addresses, model names and paths, engine ids, compatibility hashes
(a hash of the model path and config), notes.
"""

from __future__ import annotations

import re
from typing import Any

from vllm_pd_doctor.results.status import StatusReport

SCHEMA_VERSION = 1
PUBLIC_FIELDS = (
    "vllm_version",
    "nixl_connector_version",
    "block_size",
    "kv_cache_layout",
    "attn_backend_name",
)
"""Comparison rows whose values are public (release-level facts); the others say same/different."""
_SAFE_VALUE = re.compile(r"^[\w .:+/()=\-{}\"'%,]*$")


def _value(metric: str, value: str) -> str | None:
    private = ("/v1/models", "model", "compatibility_hash", "engine_id", "side channel", "/health")
    if any(p in metric for p in private) or "://" in value or value.startswith("/"):
        return None
    return value if _SAFE_VALUE.match(value) else None


def _command(cmd: str | None) -> str | None:
    """A next command without the deployment's paths, URLs or hosts (`--model /root/...` ->
    `--model MODEL`)."""
    if cmd is None:
        return None
    words = cmd.split(" ")
    out = []
    for i, w in enumerate(words):
        prev = words[i - 1] if i else ""
        if "://" in w or w.startswith(("/", "~")) or (prev == "--model" and not w.startswith("-")):
            out.append("URL" if "://" in w else "MODEL" if prev == "--model" else "PATH")
        else:
            out.append(w)
    return " ".join(out)


def snapshot(r: StatusReport) -> dict[str, Any]:
    """The public form of one status window."""
    engines = [
        {
            "role": e.role,
            "vllm_version": e.version,
            "block_size": e.block_size,
            "down": e.down,
            "not_exposed": list(e.not_exposed),
            "side_channel": None
            if e.handshake is None
            else {
                "answered": e.handshake.error is None,
                "kv_cache_layout": e.handshake.metadata.get("kv_cache_layout"),
                "attn_backend_name": e.handshake.metadata.get("attn_backend_name"),
                "block_size": e.handshake.metadata.get("block_size"),
            },
        }
        for e in r.engines
    ]
    comparisons = []
    for c in r.comparisons:
        field = c.field.split(" ")[0]
        row: dict[str, Any] = {"field": field, "same": c.same}
        if field in PUBLIC_FIELDS:
            row |= {"prefill": c.prefill, "decode": c.decode}
        comparisons.append(row)
    findings = [
        {
            "id": f.id,
            "severity": f.severity,
            "triage_class": f.triage_class,
            "fix": f.fix,
            "next": _command(f.next),
            "evidence": [
                {"metric": ev.metric, "value": v}
                for ev in f.evidence
                if (v := _value(ev.metric, ev.value)) is not None
            ],
        }
        for f in r.findings
    ]
    return {
        "schema_version": SCHEMA_VERSION,
        "healthy": r.errors == 0,
        "interval_s": r.interval_s,
        "engines": engines,
        "comparisons": comparisons,
        "findings": findings,
    }
