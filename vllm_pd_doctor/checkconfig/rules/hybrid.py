"""Hybrid (Mamba / SSM / linear-attention) models over NIXL: layout, parallelism, KV manager."""

from __future__ import annotations

from collections.abc import Iterator

from vllm_pd_doctor.checkconfig.rules.catalog import INFO, E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.context import Context, field_bool, label, uses_nixl
from vllm_pd_doctor.checkconfig.rules.device import launch_device
from vllm_pd_doctor.knowledge.facts import fixes
from vllm_pd_doctor.results.checkconfig import Finding, SourceFact
from vllm_pd_doctor.results.launch import Server


@rule(
    id="hybrid-pipeline-parallel",
    severity=E,
    title="Hybrid producer with pipeline parallelism is rejected",
    fix="use --pipeline-parallel-size 1 on the prefill side for hybrid models",
    refs=("llm-d#2187", "vllm#43366"),
)
def pp(ctx: Context) -> Iterator[Finding]:
    if not ctx.hybrid:
        return
    for p in ctx.prefills:
        if p.config.pipeline_parallel_size > 1 and p.config.kv_connector:
            yield finding(
                "hybrid-pipeline-parallel",
                f"{label(p)}: hybrid model with --pipeline-parallel-size {p.config.pipeline_parallel_size}",
            )


@rule(
    id="ssm-conv-state-layout",
    severity=W,
    title="Hybrid model over NIXL needs VLLM_SSM_CONV_STATE_LAYOUT=DS",
    fix="set VLLM_SSM_CONV_STATE_LAYOUT=DS on both sides",
    refs=("vllm#54387", "vllm#58034"),
)
def conv_layout(ctx: Context) -> Iterator[Finding]:
    if not ctx.hybrid:
        return
    v = ctx.vllm
    asserts = v.conv_layout_assert if v is not None else None
    for s in ctx.servers:
        if not uses_nixl(s):
            continue
        val = s.config.env.get("VLLM_SSM_CONV_STATE_LAYOUT")
        if val is None:
            yield _missing_layout(ctx, s, asserts)
        elif val.upper() != "DS":
            yield finding(
                "ssm-conv-state-layout",
                f"{label(s)}: VLLM_SSM_CONV_STATE_LAYOUT={val} "
                '("3-read Mamba conv transfer requires DS conv state layout")',
                severity=E,
            )


def _missing_layout(ctx: Context, s: Server, asserts: SourceFact | None) -> Finding:
    """Unset: an error where the installed NIXL worker asserts DS and nothing picks DS for this
    launch (the default layout is not DS, and the CPU platform does not select it itself)."""
    v = ctx.vllm
    dev, why_dev = launch_device(s)
    default = v.conv_layout_default if v is not None else None
    cpu_ds = v.cpu_selects_ds if v is not None else None
    if asserts is None or default is None:
        return finding(
            "ssm-conv-state-layout",
            f"{label(s)}: VLLM_SSM_CONV_STATE_LAYOUT not set (needs DS; vLLM only picks it "
            "itself on some platforms; give --python to read the installed vLLM's rule)",
        )
    if default.upper() == "DS":
        return finding(
            "ssm-conv-state-layout",
            f"{label(s)}: VLLM_SSM_CONV_STATE_LAYOUT not set (vLLM {v.version if v else '?'} defaults to DS)",
            severity=INFO,
        )
    if cpu_ds is not None and dev == "cpu":
        return finding(
            "ssm-conv-state-layout",
            f"{label(s)}: VLLM_SSM_CONV_STATE_LAYOUT not set; on this CPU launch ({why_dev}) vLLM "
            f"selects DS itself ({cpu_ds.location})",
            severity=INFO,
        )
    where = f"{asserts.location}: {asserts.detail!r}"
    on_cpu = (
        f" (CPU platform selects DS itself: {cpu_ds.location})" if cpu_ds is not None and dev is None else ""
    )
    return finding(
        "ssm-conv-state-layout",
        f"{label(s)}: VLLM_SSM_CONV_STATE_LAYOUT not set: vLLM {v.version if v else '?'} uses "
        f"{default} when unset and its NIXL worker refuses to start with it ({where}){on_cpu}",
        severity=W if on_cpu else E,
    )


@rule(
    id="cpu-conv-layout-override",
    severity=W,
    title="vLLM's CPU platform overwrites VLLM_SSM_CONV_STATE_LAYOUT=DS (NIXL then cannot "
    "start for a hybrid model)",
    fix="on CPU hosts, use a vLLM release that keeps an explicit layout "
    f"({fixes.known_good(fixes.CPU_CONV_LAYOUT)}), or a CPU without the feature it tests",
    refs=fixes.CPU_CONV_LAYOUT.refs,
)
def cpu_conv_layout_override(ctx: Context) -> Iterator[Finding]:
    """Only for servers whose launch runs on vLLM's CPU platform (image, --device, env)."""
    o = ctx.vllm.cpu_conv_layout_override if ctx.vllm else None
    if o is None or ctx.hybrid is False:
        return
    cpu = [(s, why) for s in ctx.servers if uses_nixl(s) for dev, why in [launch_device(s)] if dev == "cpu"]
    if not cpu:
        return
    when = f"when `{o.condition}`" if o.condition else "always"
    names = ", ".join(f"{label(s)} ({why})" for s, why in cpu)
    yield finding(
        "cpu-conv-layout-override",
        f"{o.file}:{o.line} sets VLLM_SSM_CONV_STATE_LAYOUT={o.value} {when}, "
        "whatever the engine's environment says; on such a CPU the NIXL worker "
        'asserts "3-read Mamba conv transfer requires DS conv state layout" '
        f"(CPU launches: {names})",
    )


@rule(
    id="hybrid-async-scheduling",
    severity=W,
    title="Hybrid model with TP > 1 and async scheduling",
    fix="pass --no-async-scheduling on both sides",
    refs=("vllm#36687", "vllm#42182"),
)
def async_scheduling(ctx: Context) -> Iterator[Finding]:
    if not ctx.hybrid:
        return
    for s in ctx.servers:
        c = s.config
        if c.tensor_parallel_size > 1 and c.async_scheduling is not False and c.kv_connector:
            yield finding(
                "hybrid-async-scheduling",
                f"{label(s)}: --tensor-parallel-size {c.tensor_parallel_size} without --no-async-scheduling",
            )


@rule(
    id="hybrid-kv-cache-manager-disabled",
    severity=E,
    title="Hybrid model with the hybrid KV cache manager disabled",
    fix="remove --disable-hybrid-kv-cache-manager",
    refs=("vllm#42182",),
)
def hybrid_manager(ctx: Context) -> Iterator[Finding]:
    if not ctx.hybrid:
        return
    for s in ctx.servers:
        if s.config.values.get("disable-hybrid-kv-cache-manager") is True and s.config.kv_connector:
            yield finding(
                "hybrid-kv-cache-manager-disabled",
                f"{label(s)}: --disable-hybrid-kv-cache-manager with a hybrid model",
            )


@rule(
    id="kv-layout-nhd",
    severity=W,
    title="KV layout NHD needs enable_permute_local_kv (not with the hybrid allocator)",
    fix="use the default HND layout (unset VLLM_KV_CACHE_LAYOUT)",
    refs=("vllm docs nixl_connector_compatibility",),
)
def kv_layout(ctx: Context) -> Iterator[Finding]:
    for s in ctx.servers:
        if not uses_nixl(s):
            continue
        v = (s.config.env.get("VLLM_KV_CACHE_LAYOUT") or "").upper()
        # a KVTransferConfig field: pydantic coerces "false" / "0" to False
        permute = (
            field_bool((s.config.kv_transfer_config or {}).get("enable_permute_local_kv", False)) is True
        )
        if v == "NHD" and not permute:
            yield finding(
                "kv-layout-nhd", f"{label(s)}: VLLM_KV_CACHE_LAYOUT=NHD without enable_permute_local_kv"
            )
        elif permute and ctx.hybrid:
            yield finding(
                "kv-layout-nhd",
                f"{label(s)}: enable_permute_local_kv with a hybrid "
                "model (does not work with the hybrid allocator)",
                severity=E,
            )


@rule(
    id="mamba-cache-none",
    severity=INFO,
    title="Hybrid model with prefix caching off: mamba_cache_mode becomes none",
    fix="expected when prefix caching is off on purpose",
    refs=("vllm#42182",),
)
def mamba_none(ctx: Context) -> Iterator[Finding]:
    if not ctx.hybrid:
        return
    for s in ctx.servers:
        if s.config.enable_prefix_caching is False:
            yield finding("mamba-cache-none", f"{label(s)}: --no-enable-prefix-caching with a hybrid model")
