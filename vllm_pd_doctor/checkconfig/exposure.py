"""Exposure to vLLM #53514, per server and connector, with typed reasons.

A side is exposed when its connector truncates the prompt on the P side, it can produce KV, the
model is hybrid, prefix caching is on, and the installed vLLM calls the truncation helper after
the local prefix-cache lookup (read from its source). Any condition that is known false makes it
"not exposed"; any that cannot be read makes it "unknown" (each reason says which input decides).
The verdict is knowledge/exposure.py's, the decision status makes from a running engine's facts: a
model without state is not exposed whatever the connector (a vendor plugin's too).
"""

from __future__ import annotations

from vllm_pd_doctor.checkconfig.rules.context import (
    PRODUCING,
    ConnectorEntry,
    Context,
    connector_entries,
    connector_key,
    label,
)
from vllm_pd_doctor.knowledge import exposure as kx
from vllm_pd_doctor.knowledge.facts import advice
from vllm_pd_doctor.knowledge.readers.inspect_vllm import sites_for
from vllm_pd_doctor.results.checkconfig import (
    Exposure,
    ProbeResult,
    Reason,
    ReasonKind,
    SideExposure,
    Verdict,
)
from vllm_pd_doctor.results.launch import ServeConfig, Server

K = ReasonKind
_NO = {
    K.no_connector,
    K.connector_not_truncating,
    K.not_producer,
    K.not_hybrid,
    K.no_prefix_caching,
    K.early_truncation,
    K.no_truncation,
}


def fact(r: Reason) -> kx.Fact:
    """A reason as the shared decision's fact: ruling out, unknown, or holding."""
    holds = False if r.kind in _NO else None if r.kind.unknown else True
    return kx.Fact(str(r.kind), holds, r.text)


def _verdict(why: list[Reason]) -> Verdict:
    v = kx.decide(fact(r) for r in why).verdict
    return {kx.EXPOSED: Verdict.exposed, kx.NOT_EXPOSED: Verdict.not_exposed}.get(v, Verdict.unknown)


_DEPLOYMENT_NO = {
    K.no_connector,
    K.connector_not_truncating,
    K.not_producer,
    K.not_hybrid,
    K.no_prefix_caching,
}
"""Reasons read from the deployment itself: a probe (which runs its own producer with prefix
caching on) cannot overrule them, so a side with one of them is no probe candidate."""
_RELEASE = {K.late_truncation, K.early_truncation, K.unknown_order, K.no_truncation, K.unknown_vllm}


def probe_candidates(sides: tuple[SideExposure, ...] | list[SideExposure]) -> list[SideExposure]:
    """Sides whose exposure the in-process probe decides: nothing in the deployment rules them out."""
    return [x for x in sides if not ({r.kind for r in x.why} & _DEPLOYMENT_NO)]


def _with_probe(x: SideExposure, probe: ProbeResult) -> SideExposure:
    """The probe's observed result replaces the release reason read from the source (and, when it
    reproduced, an unknown model: the probe ran a hybrid model, the deployment's when known)."""
    mine = dict(probe.per_connector).get(x.connector or "", probe.reproduced)
    if mine:
        r = Reason(
            K.late_truncation, f"the in-process probe reproduced the crash on this vLLM ({probe.detail})"
        )
        drop = _RELEASE | {K.unknown_model}
    else:
        r = Reason(
            K.early_truncation, f"the in-process probe did not reproduce it on this vLLM ({probe.detail})"
        )
        drop = _RELEASE
    why = [w for w in x.why if w.kind not in drop] + [r]
    return SideExposure(x.role, x.connector, _verdict(why), tuple(why), x.evidence, server=x.server)


def exposure(ctx: Context, probe: ProbeResult | None = None) -> Exposure:
    """The deployment's exposure; with a probe that ran, its observed result wins over the source
    reading for every candidate side, so the verdict and the probe never contradict each other."""
    sides: list[SideExposure] = []
    for s in ctx.servers:
        entries: list[ConnectorEntry | None] = list(connector_entries(s.config)) or [None]
        for e in entries:
            sides.append(side(ctx, s, e))
    if probe is not None and probe.ran and probe.reproduced is not None:
        cands = {id(x) for x in probe_candidates(sides)}
        sides = [_with_probe(x, probe) if id(x) in cands else x for x in sides]
    verdicts = {x.verdict for x in sides}
    if Verdict.exposed in verdicts:
        verdict = Verdict.exposed
    elif sides and verdicts == {Verdict.not_exposed}:
        verdict = Verdict.not_exposed
    else:
        verdict = Verdict.unknown
    python = ctx.vllm.python if ctx.vllm is not None else None
    return Exposure(verdict=verdict, sides=tuple(sides), fixes=_fixes(verdict, sides, python), probe=probe)


def _fixes(verdict: Verdict, sides: list[SideExposure], python: str | None) -> tuple[str, ...]:
    if verdict is Verdict.not_exposed:
        return ()
    keys = [x.connector for x in sides if x.connector]
    late = any(r.kind is ReasonKind.late_truncation for x in sides for r in x.why)

    return advice.fixes(keys, late_truncation=late, python=python)


def side(ctx: Context, s: Server, e: ConnectorEntry | None) -> SideExposure:
    """Exposure of one server through one connector (a MultiConnector child by its own role)."""
    name = label(s)
    if e is None:
        return SideExposure(
            s.role,
            None,
            Verdict.not_exposed,
            (Reason(K.no_connector, "no KV connector: nothing truncates"),),
            server=name,
        )
    if e.external:
        path = e.config.get("kv_connector_module_path")
        ext = [
            Reason(
                K.external_connector,
                f"{e.name} is loaded from kv_connector_module_path {path} (not vLLM's built-in "
                "class of that name): whether it truncates on the P side is unknown",
                fix="check that connector's own P-side truncation, or use vLLM's built-in one",
            ),
            _model_reason(ctx),  # a model without state decides whatever the connector does
        ]
        return SideExposure(s.role, e.name, _verdict(ext), tuple(ext), server=name)
    key = connector_key(e.name)
    if key is None:
        return SideExposure(
            s.role,
            e.name,
            Verdict.not_exposed,
            (Reason(K.connector_not_truncating, f"{e.name} does not truncate the prompt on the P side"),),
            server=name,
        )
    who = f"{e.name} child " if e.child else ""
    if e.kv_role not in PRODUCING:
        return SideExposure(
            s.role,
            key,
            Verdict.not_exposed,
            (Reason(K.not_producer, f"{who}kv_role {e.kv_role} does not produce KV"),),
            server=name,
        )
    why = [Reason(K.producer, f"{who}kv_role {e.kv_role} can produce KV")]
    why.append(_model_reason(ctx))
    why.append(prefix_caching_reason(ctx, s.config))
    r, evidence = _release_reason(ctx, key)
    why.append(r)
    return SideExposure(s.role, key, _verdict(why), tuple(why), evidence, server=name)


def prefix_caching_reason(ctx: Context, cfg: ServeConfig) -> Reason:
    """Prefix caching as the engine will have it. `--mamba-cache-mode none` does not turn it off
    where vLLM's own config code rewrites "none" when prefix caching is on (0.28.0: to "align",
    model_executor/models/config.py); read from the installed source when there is one."""
    default = " (vLLM's default)" if cfg.enable_prefix_caching is None else " (--enable-prefix-caching)"
    if cfg.enable_prefix_caching is False:
        return Reason(K.no_prefix_caching, "prefix caching off (--no-enable-prefix-caching)")
    if cfg.mamba_cache_mode != "none":
        return Reason(
            K.prefix_caching, "prefix caching on" + default.replace(" (--enable-prefix-caching)", "")
        )
    v = ctx.vllm
    read = v is not None and v.path is not None and v.error is None
    rewrite = v.mamba_prefix_rewrite if v is not None else None
    if rewrite is not None:
        return Reason(
            K.prefix_caching,
            f"prefix caching on{default}; --mamba-cache-mode none does not turn it off: "
            f"{rewrite.detail} ({rewrite.location})",
        )
    if read:
        return Reason(K.no_prefix_caching, "prefix caching off (--mamba-cache-mode none; this vLLM keeps it)")
    return Reason(
        K.prefix_caching,
        f"prefix caching on{default}; --mamba-cache-mode none does not turn it off (vLLM sets "
        "'align' when prefix caching is on; give --python to read the installed vLLM's rule)",
    )


def _model_reason(ctx: Context) -> Reason:
    if ctx.model is not None:
        if ctx.model.hybrid:
            return Reason(K.hybrid, f"model is hybrid ({ctx.model.hybrid_evidence})")
        return Reason(K.not_hybrid, "model is not hybrid: no N-1 truncation")
    mp = ctx.model_problem
    if mp is not None:
        return Reason(K.unknown_model, f"model hybrid or not: unknown ({mp.message})", fix=mp.hint)
    return Reason(
        K.unknown_model,
        "model hybrid or not: unknown (no model in the commands)",
        fix="give --model DIR (a directory holding the model's config.json)",
    )


def _release_reason(ctx: Context, key: str) -> tuple[Reason, tuple[str, ...]]:
    v = ctx.vllm
    fix = "give --python PATH, the interpreter the deployment's vLLM runs in"
    if v is None or v.path is None or v.error:
        why = f"installed vLLM: {v.error}" if v is not None and v.error else "installed vLLM: not found"
        if v is not None and v.version:  # no source read: pd-doctor's recorded runs of that release
            f, _ = kx.release_fact(kx.N1, v.version, key)
            if f.holds is not None:
                return Reason(K.late_truncation if f.holds else K.no_truncation, f.reason), ()
        return Reason(K.unknown_vllm, why + (" (give --python)" if "not found" in why else ""), fix=fix), ()
    sites = sites_for(key, v.sites)
    evidence = tuple(f"{x.location} {x.caller}() -> {x.helper}()" for x in sites)
    ver = v.version or "?"
    late = [x for x in sites if x.before_lookup is False]
    early = [x for x in sites if x.before_lookup is True]
    other = [x for x in sites if x.before_lookup is None]
    if late:
        r = Reason(
            K.late_truncation,
            f"vLLM {ver} truncates in get_num_new_matched_tokens (after the local prefix-cache lookup)",
        )
    elif early:
        r = Reason(K.early_truncation, f"vLLM {ver} truncates in on_new_request (before the lookup)")
    elif other:
        r = Reason(
            K.unknown_order,
            f"vLLM {ver} truncates in {', '.join(sorted({x.caller for x in other}))} (order unknown)",
            fix="run with --probe to observe the order",
        )
    else:
        r = Reason(K.no_truncation, f"vLLM {ver}: {key} has no P-side truncation helper")
    return r, evidence
