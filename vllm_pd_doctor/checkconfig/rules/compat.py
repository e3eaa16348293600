"""P/D compatibility, pair by pair: what the NIXL handshake hash compares, block size, TP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from vllm_pd_doctor.checkconfig.rules.catalog import E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.context import (
    Context,
    compat_disabled,
    compat_enforced,
    label,
    pair_label,
)
from vllm_pd_doctor.results.checkconfig import Finding
from vllm_pd_doctor.results.launch import ServeConfig, Server

_HANDSHAKE_REFS = ("vllm docs nixl_connector_compatibility", "vllm PR #29503")


def _mismatch(
    ctx: Context, rule_id: str, what: str, get: Callable[[Server], Any], default: str
) -> Iterator[Finding]:
    for p, d in ctx.pairs():
        vp, vd = get(p), get(d)
        if vp is None and vd is None:
            continue
        sp = str(vp) if vp is not None else default
        sd = str(vd) if vd is not None else default
        if sp != sd:
            sev = None if compat_enforced(p, d) else W
            yield finding(rule_id, f"{pair_label(ctx, p, d)}{what}: prefill {sp}, decode {sd}", severity=sev)


@rule(
    id="handshake-model-mismatch",
    severity=E,
    title="P and D serve different models (handshake hash fails)",
    fix="serve the same model on both sides",
    refs=_HANDSHAKE_REFS,
)
def model(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(
        ctx,
        "handshake-model-mismatch",
        "model",
        lambda s: s.config.model.rstrip("/") if s.config.model else None,
        "(none)",
    )


@rule(
    id="handshake-dtype-mismatch",
    severity=E,
    title="P and D use different dtypes (handshake hash fails)",
    fix="pass the same --dtype on both sides",
    refs=_HANDSHAKE_REFS,
)
def dtype(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(
        ctx,
        "handshake-dtype-mismatch",
        "--dtype",
        lambda s: s.config.dtype.lower() if s.config.dtype else None,
        "auto",
    )


@rule(
    id="handshake-cache-dtype-mismatch",
    severity=E,
    title="P and D use different KV cache dtypes",
    fix="pass the same --kv-cache-dtype on both sides",
    refs=_HANDSHAKE_REFS,
)
def cache_dtype(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(
        ctx,
        "handshake-cache-dtype-mismatch",
        "--kv-cache-dtype",
        lambda s: s.config.kv_cache_dtype.lower() if s.config.kv_cache_dtype else None,
        "auto",
    )


def attention_backend(cfg: ServeConfig, env_read: bool | None) -> str | None:
    """--attention-backend, else -ac/--attention-config.backend, else (where the installed vLLM
    still reads it) VLLM_ATTENTION_BACKEND; "auto" is the default."""
    v: Any = cfg.values.get("attention-backend")
    ac = cfg.values.get("attention-config")
    if v is None and isinstance(ac, dict):
        v = ac.get("backend")
    if v is None and env_read is not False:
        v = cfg.env.get("VLLM_ATTENTION_BACKEND")
    if v is None or str(v).strip().upper() in ("", "AUTO", "NONE", "NULL"):
        return None
    return str(v).strip().upper()


@rule(
    id="handshake-attention-backend-mismatch",
    severity=E,
    title="P and D use different attention backends",
    fix="pass the same --attention-backend (or -ac.backend) on both sides",
    refs=_HANDSHAKE_REFS,
)
def backend(ctx: Context) -> Iterator[Finding]:
    env_read = ctx.vllm.attention_backend_env if ctx.vllm else None
    yield from _mismatch(
        ctx,
        "handshake-attention-backend-mismatch",
        "attention backend",
        lambda s: attention_backend(s.config, env_read),
        "auto",
    )


def _canon(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, dict):
        return ",".join(f"{k}={v[k]}" for k in sorted(v))
    return str(v)


@rule(
    id="handshake-spec-decode-mismatch",
    severity=E,
    title="P and D have different speculative decoding (EAGLE/MTP) configs",
    fix="pass the same --speculative-config on both sides",
    refs=_HANDSHAKE_REFS,
)
def spec(ctx: Context) -> Iterator[Finding]:
    yield from _mismatch(
        ctx,
        "handshake-spec-decode-mismatch",
        "--speculative-config",
        lambda s: _canon(s.config.speculative_config),
        "none",
    )


@rule(
    id="handshake-compat-disabled",
    severity=W,
    title="enforce_handshake_compat=false: P/D mismatches are not caught at handshake",
    fix="remove enforce_handshake_compat=false",
    refs=("vllm PR #29503",),
)
def handshake_disabled(ctx: Context) -> Iterator[Finding]:
    for s in ctx.servers:
        off, v = compat_disabled(s.config)
        if off:
            yield finding(
                "handshake-compat-disabled",
                f"{label(s)}: kv_connector_extra_config.enforce_handshake_compat={v!r}",
            )


@rule(
    id="block-size-mismatch",
    severity=E,
    title="KV block sizes differ between P and D",
    fix="use the same --block-size on both sides (hybrid models require it)",
    refs=("vllm#42895",),
)
def block_size(ctx: Context) -> Iterator[Finding]:
    for p, d in ctx.pairs():
        bp, bd = p.config.block_size or 16, d.config.block_size or 16
        if bp == bd:
            continue
        ev = (
            f"{pair_label(ctx, p, d)}--block-size prefill {p.config.block_size or 'default'}, "
            f"decode {d.config.block_size or 'default'}"
        )
        fact = ctx.vllm.mamba_hetero_block if ctx.hybrid and ctx.vllm else None
        if ctx.hybrid and fact is None:
            yield finding("block-size-mismatch", ev + "; never allowed for hybrid models")
        elif bp > bd or bd % bp:
            yield finding(
                "block-size-mismatch",
                ev + f'; fails at request time ("Local block '
                f'size {bd} is not divisible by remote block size {bp}")',
            )
        elif fact is not None and (p.config.prefix_caching_on or d.config.prefix_caching_on):
            ver = ctx.vllm.version if ctx.vllm else "?"
            yield finding(
                "block-size-mismatch",
                ev + f"; hybrid model with prefix caching: "
                f"vLLM {ver} refuses it at handshake when the physical blocks per "
                f'block differ ({fact.location}: "{fact.detail}")',
                severity=W,
            )
        elif fact is None:
            yield finding(
                "block-size-mismatch",
                ev + "; allowed only without the hybrid allocator and P < D",
                severity=W,
            )


@rule(
    id="tp-mismatch",
    severity=E,
    title="Tensor-parallel sizes P/D not supported for this model",
    fix="use equal --tensor-parallel-size, or a vLLM whose NIXL worker supports the ratio",
    refs=("vllm docs nixl_connector_compatibility", "vllm#43366"),
)
def tp(ctx: Context) -> Iterator[Finding]:
    v = ctx.vllm
    for p, d in ctx.pairs():
        tp_, td = p.config.tensor_parallel_size, d.config.tensor_parallel_size
        if tp_ == td:
            continue
        ev = f"{pair_label(ctx, p, d)}--tensor-parallel-size prefill {tp_}, decode {td}"
        if ctx.hybrid:
            fact = v.mamba_hetero_tp if v else None
            if fact is None:
                yield finding(
                    "tp-mismatch",
                    ev + "; Mamba/hybrid models need equal TP unless "
                    "the NIXL worker transfers Mamba state across TP sizes (installed "
                    "vLLM not read: give --python)",
                    severity=W,
                )
            elif not fact.supported:
                yield finding(
                    "tp-mismatch", ev + f"; vLLM {v.version if v else '?'} ({fact.location}): {fact.detail}"
                )
        elif tp_ > td:
            fact = v.p_tp_above_d_tp if v else None
            if fact is not None and fact.supported:
                yield finding(
                    "tp-mismatch",
                    ev + f"; vLLM {v.version if v else '?'} reads from "
                    f"a larger prefill TP ({fact.location}) except when attention "
                    "KV heads are replicated (num_key_value_heads < prefill TP)",
                    severity=W,
                )
            else:
                yield finding("tp-mismatch", ev + "; P TP > D TP is unsupported for most architectures")
