"""Prefill vs decode before any traffic: the NIXL handshake metadata each side channel serves, and
the release + model's exposure to vLLM #53514 (read from that release's source where it is here)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_pd_doctor.knowledge import exposure as kx
from vllm_pd_doctor.knowledge.facts import fixes
from vllm_pd_doctor.results.status import Comparison, Evidence, Finding
from vllm_pd_doctor.status.window import Window

if TYPE_CHECKING:
    from vllm_pd_doctor.results.checkconfig import TruncationSite

FIELDS = ("compatibility_hash", "block_size", "kv_cache_layout", "attn_backend_name", "dcp_size", "pcp_size")


def _value(w: Window, fld: str) -> Any:
    if w.handshake is None:
        return None
    if fld == "compatibility_hash":
        return w.handshake.compatibility_hash
    return w.handshake.metadata.get(fld)


def _connector_version(w: Window) -> Any:
    wire = w.release.nixl_wire if w.release is not None else None
    return wire.get("connector_version") if wire else None


def comparisons(p: Window, d: Window, tp: tuple[int | None, int | None]) -> list[Comparison]:
    rows: list[tuple[str, Any, Any]] = [
        ("vllm_version (/version)", p.after.version, d.after.version),
        ("nixl_connector_version (release source)", _connector_version(p), _connector_version(d)),
        (
            "model (/v1/models)",
            p.after.model_root or _first(p.after.models),
            d.after.model_root or _first(d.after.models),
        ),
        *((f, _value(p, f), _value(d, f)) for f in FIELDS),
        ("tensor_parallel_size (launch)", tp[0], tp[1]),
    ]
    return [
        Comparison(f, _s(a), _s(b), None if a is None or b is None else a == b)
        for f, a, b in rows
        if a is not None or b is not None
    ]


def _first(xs: tuple[str, ...]) -> str | None:
    return xs[0] if xs else None


def _s(v: Any) -> str:
    return "-" if v is None else str(v)


def handshake_findings(p: Window, d: Window, rows: list[Comparison]) -> Iterable[Finding]:
    if p.handshake is None or d.handshake is None:
        return
    by = {c.field: c for c in rows}
    label = f"{p.label} / {d.label}"
    h = by.get("compatibility_hash")
    if h is not None and h.same is False:
        inputs = [c for c in rows if c.same is False and c.field != "compatibility_hash" and "(" in c.field]
        inputs += [c for c in rows if c.same is False and c.field == "attn_backend_name"]
        ev = [
            Evidence(label, "side channel: compatibility_hash", f"{h.prefill[:16]}... vs {h.decode[:16]}...")
        ]
        ev += [Evidence(label, f"hash input {c.field}", f"{c.prefill} vs {c.decode}") for c in inputs]
        factors = (d.release.nixl_wire or {}).get("hash_factors") if d.release else None
        if factors:
            ev.append(Evidence(d.label, "hash inputs (release source)", ", ".join(factors)))
        yield Finding(
            id="nixl-hash-mismatch",
            severity="error",
            title="prefill and decode NIXL compatibility hashes differ: every handshake will fail "
            '("NIXL compatibility hash mismatch")',
            evidence=tuple(ev),
            triage_class="nixl-handshake-failed",
            fix="run the same vLLM release, model, dtype and attention backend on both sides"
            + (" (the vLLM versions differ)" if any("vllm_version" in c.field for c in inputs) else ""),
            next="pd-doctor check-config --prefill-cmd '...' --decode-cmd '...'",
            references=("vLLM PR #41313",),
        )
    for fld, fid, cls, fix in (
        (
            "block_size",
            "block-size-mismatch",
            "block-size-mismatch",
            "give both engines the same --block-size",
        ),
        ("kv_cache_layout", "kv-layout-mismatch", None, "use the same KV cache layout on both sides"),
        (
            "tensor_parallel_size (launch)",
            "tp-mismatch",
            "heterogeneous-tp",
            "check the release supports P TP != D TP",
        ),
    ):
        c = by.get(fld)
        if c is None or c.same is not False:
            continue
        yield Finding(
            id=fid,
            severity="warning",
            title=f"prefill and decode differ in {fld.split(' ')[0]}: {c.prefill} vs {c.decode}",
            evidence=(Evidence(label, f"side channel: {fld}", f"{c.prefill} vs {c.decode}"),),
            triage_class=cls,
            fix=fix
            + " (the decode validates it at handshake; mismatches that the release cannot map fail there)",
            next="pd-doctor check-config --prefill-cmd '...' --decode-cmd '...'",
        )


def _local_vllm(version: str, python_vllm: Path | None) -> Path | None:
    """That release's installed source: --python's when it is that release, else pd-doctor's env."""
    from vllm_pd_doctor.knowledge.facts.metrics import installed_version

    mine = installed_version(python_vllm) if python_vllm is not None else None
    if python_vllm is not None and mine is not None and mine.split("+")[0] == version.split("+")[0]:
        return python_vllm
    from vllm_pd_doctor.infra import envs

    base = version.split("+")[0]
    try:
        root = envs.envs_dir()
    except Exception:
        return None
    for d in sorted(root.glob(f"vllm-*-{base}")):
        hits = sorted(d.glob("lib/python3*/site-packages/vllm/__init__.py"))
        if hits:
            return hits[0].parent
    return None


def _hybrid(model_root: str | None) -> str | bool | None:
    """What in the served model's config.json says it carries state; False: nothing does; None: unread."""
    if not model_root:
        return None
    cfg = Path(model_root) / "config.json"
    try:
        doc = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    from vllm_pd_doctor.knowledge.models.info import model_from_config

    info = model_from_config(doc, str(cfg))
    return info.hybrid_evidence if info.hybrid else False


@functools.cache
def late_sites(src: Path) -> tuple[TruncationSite, ...]:
    """The NIXL connector's truncation calls that run after the prefix-cache lookup (the source read
    with `ast`, as check-config does; cached: `gather` reads it while it waits for the interval)."""
    from vllm_pd_doctor.knowledge.facts.connectors import DEFAULT_KEY, LATE_HOOK
    from vllm_pd_doctor.knowledge.readers.inspect_vllm import find_sites, sites_for

    return tuple(s for s in sites_for(DEFAULT_KEY, find_sites(src)) if s.caller == LATE_HOOK)


def prepare(version: str | None, python_vllm: Path | None) -> None:
    """Read what `exposure_53514` will need (called during the scrape interval)."""
    if version:
        src = _local_vllm(version, python_vllm)
        if src is not None:
            late_sites(src)


def _prefix_caching(w: Window) -> kx.Fact:
    info = w.after.info.get("vllm:cache_config_info") or w.before.info.get("vllm:cache_config_info") or {}
    on = {"True": True, "False": False}.get(info.get("enable_prefix_caching", ""))
    if on is None:
        return kx.Fact(kx.PREFIX_CACHING, None, "prefix caching: not in vllm:cache_config_info")
    return kx.Fact(kx.PREFIX_CACHING, on, f"prefix caching {'on' if on else 'off'} (vllm:cache_config_info)")


def _connector(w: Window) -> tuple[str | None, kx.Fact]:
    """The prefill's connector as the engine shows it: its NIXL side channel or NIXL metrics."""
    from vllm_pd_doctor.knowledge.facts.connectors import DEFAULT_KEY

    if w.handshake is not None:
        return DEFAULT_KEY, kx.Fact(kx.CONNECTOR, True, "NIXL (its side channel answered)")
    if any(n.startswith("vllm:nixl_") for n, _ in w.after.samples):
        return DEFAULT_KEY, kx.Fact(kx.CONNECTOR, True, "NIXL (its /metrics has NIXL metrics)")
    why = "not known (no NIXL side channel answered, no NIXL metric)"
    return None, kx.Fact(kx.CONNECTOR, None, why)


def decision_53514(p: Window, python_vllm: Path | None) -> kx.Decision | None:
    """knowledge/exposure's decision from what the running prefill shows: its release (that
    release's source where it is here, else pd-doctor's recorded runs of it), connector, prefix
    caching and model."""
    version = p.after.version
    if not version:
        return None
    src = _local_vllm(version, python_vllm)
    late, detail = None, ""
    if src is not None:
        sites = late_sites(src)
        late = bool(sites)
        detail = (
            f"vLLM {version}: {sites[0].caller} truncates after the prefix-cache lookup ({sites[0].location})"
            if sites
            else f"vLLM {version}: the NIXL connector does not truncate after the prefix-cache lookup"
        )
    key, conn = _connector(p)
    hybrid = _hybrid(p.after.model_root)
    return kx.scenario(
        kx.N1,
        version.split("+")[0],
        key,
        None if hybrid is None else bool(hybrid),
        hybrid_evidence=hybrid if isinstance(hybrid, str) else "",
        extra=(conn, kx.Fact(kx.PRODUCER, True, "served as the prefill"), _prefix_caching(p)),
        late=late,
        source_detail=detail,
    )


def exposure_53514(p: Window, python_vllm: Path | None) -> Iterable[Finding]:
    """The prefill's release + model against #53514: exposed (error), exposed if the model is
    hybrid (warning: its config.json is not readable here), not decided (info, naming what is not
    known); nothing when a known fact rules it out (a model without state, prefix caching off)."""
    dec = decision_53514(p, python_vllm)
    if dec is None or dec.verdict == kx.NOT_EXPOSED:
        return
    version = p.after.version or "?"
    rel = version.split("+")[0]
    model = p.after.model_root or _first(p.after.models)
    ev = [Evidence(p.label, "/version", version)]
    ev += [
        Evidence(p.label, f.topic + (f" ({f.decided_by})" if f.decided_by else ""), f.reason)
        for f in dec.facts
    ]
    if dec.verdict == kx.UNKNOWN and not dec.only_model_unknown:
        missing = ", ".join(f.topic for f in dec.deciding)
        yield Finding(
            id="53514-exposure-unknown",
            severity="info",
            title=f"vLLM {version}: exposure to #53514 is not decided ({missing} not known)",
            evidence=tuple(ev),
            triage_class="nixl-p-side-truncation-53514",
            fix="give --python (the deployment's vLLM) or decide it from the launch",
            next=f"pd-doctor check-config --vllm {rel} --model {model or 'MODEL'}",
        )
        return
    hybrid = dec.verdict == kx.EXPOSED
    yield Finding(
        id="exposed-53514",
        severity="error" if hybrid else "warning",
        title=f"the prefill's vLLM {version} truncates the prompt after the prefix-cache lookup: a cached "
        "N-1 prefix kills it (vLLM #53514)" + ("" if hybrid else " if the model is hybrid"),
        evidence=tuple(ev),
        triage_class="nixl-p-side-truncation-53514",
        fix=f"upgrade vLLM to {fixes.fixed_in()} or later, "
        "or pass --no-enable-prefix-caching to the prefill only",
        next=f"pd-doctor repro --vllm {rel}",
        references=("vllm-project/vllm#53514", "vllm-project/vllm PR #53523"),
    )
