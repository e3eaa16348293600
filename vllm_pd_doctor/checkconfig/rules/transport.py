"""Transport: UCX / NCCL variables, the NIXL packages in the target interpreter, leases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from vllm_pd_doctor.checkconfig.rules.catalog import INFO, E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.context import Context, connector_entries, label, uses_nixl
from vllm_pd_doctor.knowledge.facts import advisories
from vllm_pd_doctor.results.checkconfig import Finding

_FAST_UCX = ("rc", "ud", "dc", "ib", "cuda_ipc", "rocm", "all", "verbs", "mlx5", "gdr", "sm", "cma", "shm")


@rule(
    id="nccl-vars-ignored",
    severity=INFO,
    title="NCCL_* variables do nothing for NIXL transfers",
    fix="tune UCX_TLS / UCX_NET_DEVICES instead",
    refs=("vllm PR #24249", "nixl#1097"),
)
def nccl(ctx: Context) -> Iterator[Finding]:
    for s in ctx.servers:
        names = sorted(k for k in s.config.env if k.startswith("NCCL_"))
        if names and uses_nixl(s):
            yield finding("nccl-vars-ignored", f"{label(s)}: {', '.join(names)} set; NIXL moves KV over UCX")


@rule(
    id="ucx-tcp-only",
    severity=W,
    title="UCX_TLS allows no RDMA or cuda_ipc transport: transfers go over TCP",
    fix="add rc/ud/dc (RDMA) and cuda_ipc to UCX_TLS, or unset it",
    refs=("nixl#1097",),
)
def ucx(ctx: Context) -> Iterator[Finding]:
    for s in ctx.servers:
        tls = s.config.env.get("UCX_TLS")
        if tls is None or not uses_nixl(s) or tls.strip().startswith("^"):
            continue  # unset, not NIXL, or an exclusion list
        parts = [t.strip().lower() for t in tls.split(",") if t.strip()]
        if not any(p.startswith(f) for p in parts for f in _FAST_UCX):
            yield finding("ucx-tcp-only", f"{label(s)}: UCX_TLS={tls}")


def _nixl_facts(ctx: Context) -> bool:
    """NIXL is used and the facts come from the deployment's own interpreter."""
    return (
        any(uses_nixl(s) for s in ctx.servers)
        and ctx.nixl is not None
        and ctx.nixl.error is None
        and ctx.vllm is not None
        and ctx.vllm.path is not None
    )


@rule(
    id="nixl-missing",
    severity=E,
    title="NIXL connector configured but no nixl package installed",
    fix="pip install the nixl release vLLM pins (see its requirements)",
    refs=("vllm#39521",),
)
def nixl_missing(ctx: Context) -> Iterator[Finding]:
    if _nixl_facts(ctx) and ctx.nixl is not None and not ctx.nixl.dists:
        req = ctx.nixl.vllm_requirement
        yield finding(
            "nixl-missing",
            "no nixl* distribution in the target interpreter" + (f" (vLLM requires {req})" if req else ""),
        )


def _dists(ctx: Context) -> str:
    return ", ".join(f"{a}=={b}" for a, b in ctx.nixl.dists) if ctx.nixl else ""


@rule(
    id="nixl-import-failed",
    severity=E,
    title="`import nixl` fails in the target interpreter",
    fix="install the `nixl` package beside nixl-cu12/nixl-cu13 (same version)",
    refs=("vllm#39521", "vllm PR #45843"),
)
def nixl_import(ctx: Context) -> Iterator[Finding]:
    n = ctx.nixl
    if not _nixl_facts(ctx) or n is None or not n.dists:
        return
    if not n.namespace_found:
        yield finding(
            "nixl-import-failed", f"{_dists(ctx)} installed but no `nixl` module (namespace package missing)"
        )
    elif n.import_ok is False:
        yield finding("nixl-import-failed", f"{_dists(ctx)}: import nixl: {n.import_error}")


@rule(
    id="nixl-known-bad-version",
    severity=W,
    title="Installed NIXL release has known crashes",
    fix="install another nixl release (e.g. the one vLLM pins)",
    refs=("vllm#39521", "nixl#1561"),
)
def nixl_bad(ctx: Context) -> Iterator[Finding]:
    if not _nixl_facts(ctx) or ctx.nixl is None:
        return
    for name, ver in ctx.nixl.dists:
        if ver in advisories.BAD_NIXL:
            yield finding("nixl-known-bad-version", f"{name}=={ver}: {advisories.BAD_NIXL[ver]}")


@rule(
    id="nixl-ucx-plugin-missing",
    severity=E,
    title="No UCX backend plugin among the installed NIXL files",
    fix="reinstall nixl (the wheel ships libplugin_UCX*.so)",
    refs=("nixl#1561",),
)
def nixl_plugin(ctx: Context) -> Iterator[Finding]:
    n = ctx.nixl
    if _nixl_facts(ctx) and n is not None and n.dists and n.ucx_plugin is False:
        yield finding(
            "nixl-ucx-plugin-missing",
            f"{_dists(ctx)}: no UCX plugin among {len(n.plugin_files)} plugin file(s)",
        )


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


@rule(
    id="kv-lease-short",
    severity=W,
    title="KV lease / TTL / abort timeout shortened: expired leases return HTTP 200 with "
    "'Potentially invalid KV blocks'",
    fix="keep kv_lease_duration >= 30 s, decoder_kv_blocks_ttl >= 480 s, "
    "VLLM_NIXL_ABORT_REQUEST_TIMEOUT at its default",
    refs=("vllm PR #25897", "vllm PR #41383"),
)
def lease(ctx: Context) -> Iterator[Finding]:
    for s in ctx.servers:
        if not s.config.kv_connector:
            continue
        extras = [s.config.extra_config] + [e.extra for e in connector_entries(s.config) if e.child]
        for ex in extras:
            for key, floor in (("kv_lease_duration", 30.0), ("decoder_kv_blocks_ttl", 480.0)):
                v = _num(ex.get(key))
                if v is not None and v < floor:
                    yield finding("kv-lease-short", f"{label(s)}: {key}={ex.get(key)} (default {floor:g} s)")
        v = _num(s.config.env.get("VLLM_NIXL_ABORT_REQUEST_TIMEOUT"))
        if v is not None and v < 480:
            yield finding(
                "kv-lease-short",
                f"{label(s)}: VLLM_NIXL_ABORT_REQUEST_TIMEOUT="
                f"{s.config.env['VLLM_NIXL_ABORT_REQUEST_TIMEOUT']} (default 480 s)",
            )
