"""The NIXL handshake as a whole: the inputs of vLLM's compatibility hash, P against D.

vLLM's NIXL engines exchange `compute_nixl_compatibility_hash` at handshake and refuse a peer whose
hash differs: the failure shows only when the first request arrives. Which inputs the hash covers
is read from the release (`knowledge.nixl_compat`); what each side feeds it is read from its launch
spec (image, model, dtype, cache dtype, attention backend, HMA, speculative config, push or pull).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_pd_doctor.checkconfig.rules.catalog import E, W, finding, rule
from vllm_pd_doctor.checkconfig.rules.compat import attention_backend
from vllm_pd_doctor.checkconfig.rules.context import (
    Context,
    compat_disabled,
    connector_key,
    connector_names,
    pair_label,
    uses_nixl,
)
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.readers import nixl_compat
from vllm_pd_doctor.results.checkconfig import Finding, VllmSource
from vllm_pd_doctor.results.launch import Server

UNKNOWN = "the vLLM inside"
"""An image whose tag names no vLLM release: P and D differ only if the releases inside do."""
LLMD_UPGRADE = "llm-d docs: upgrade P/D by deploying a new InferencePool per vLLM version, never in place"


@dataclass(frozen=True)
class Input:
    factor: str
    """The hash factor's key in vLLM's source (`vllm_version`, `dtype`, ...)."""
    value: str
    said: str
    """Where the launch spec says it (`image vllm/vllm-openai:v0.28.0`, `--dtype`, `default`)."""


def _release(s: Server) -> Input | None:
    from vllm_pd_doctor.knowledge.readers import image_release

    r = image_release.of(s)
    if r is None:
        return None
    return Input("vllm_version", r.version or f"{UNKNOWN} {r.image}", f"image {r.image}")


def _opt(factor: str, v: Any, flag: str, default: str) -> Input:
    if v is None or str(v).strip() == "":
        return Input(factor, default, "default")
    return Input(factor, str(v).strip().lower() if isinstance(v, str) else str(v), flag)


def _canon(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={_canon(v[k])}" for k in sorted(v)) + "}"
    return str(v)


def inputs(s: Server, env_read: bool | None) -> dict[str, Input]:
    """What this server feeds each hash factor, as far as its launch spec says."""
    cfg = s.config
    out: list[Input | None] = [
        _release(s),
        _opt("model", cfg.model.rstrip("/") if cfg.model else None, "--model", "(none)"),
        _opt("dtype", cfg.dtype, "--dtype", "auto"),
        _opt("cache_dtype", cfg.kv_cache_dtype, "--kv-cache-dtype", "auto"),
        _opt("attn_backend_name", attention_backend(cfg, env_read), "attention backend", "auto"),
        _opt(
            "speculative_config",
            _canon(cfg.speculative_config) if cfg.speculative_config else None,
            "--speculative-config",
            "none",
        ),
    ]
    hf = cfg.values.get("hf-overrides")
    if hf:  # overrides change the architecture the hash reads (KV heads, head size, layers)
        out.append(Input("num_kv_heads", _canon(hf), "--hf-overrides"))
    hma_off = cfg.values.get("disable-hybrid-kv-cache-manager")
    out.append(
        Input("is_hma_enabled", "off", "--disable-hybrid-kv-cache-manager")
        if hma_off not in (None, False, "false", "False")
        else Input("is_hma_enabled", "default", "default")
    )
    push = any(connector_key(n) == connectors.PUSH_KEY for n in connector_names(cfg))
    names = ", ".join(connector_names(cfg))
    out.append(Input("transfer_mode", "push" if push else "pull", f"kv_connector {names}"))
    return {i.factor: i for i in out if i is not None}


def _factors(v: VllmSource | None) -> nixl_compat.HashFactors | None:
    if v is None or v.path is None:
        return None
    got = nixl_compat.read(Path(v.path), v.version)
    return got if got.factors else None


@rule(
    id="handshake-compat",
    severity=E,
    title="P and D compute different NIXL compatibility hashes: the handshake fails at the first request",
    fix="run P and D from the same image and settings; roll out a new vLLM as a new P/D pool "
    "(llm-d: a new InferencePool per upgrade), never P and D separately",
    refs=("vllm docs nixl_connector_compatibility", "vllm PR #29503", LLMD_UPGRADE),
)
def handshake_compat(ctx: Context) -> Iterator[Finding]:
    hf = _factors(ctx.vllm)
    env_read = ctx.vllm.attention_backend_env if ctx.vllm else None
    for p, d in ctx.pairs():
        if not (uses_nixl(p) and uses_nixl(d)):
            continue
        ip, id_ = inputs(p, env_read), inputs(d, env_read)
        diff = [
            (ip[k], id_[k])
            for k in ip
            if k in id_ and ip[k].value != id_[k].value and (hf is None or hf.covers(k))
        ]
        if not diff:
            continue
        said = "; ".join(
            f"{a.factor}: prefill {a.value} ({a.said}), decode {b.value} ({b.said})" for a, b in diff
        )
        src = (
            f"factors of vLLM {hf.release or '?'}'s {nixl_compat.FUNCTION} ({hf.location})"
            if hf is not None
            else "the installed vLLM not read: inputs compared as vLLM's recent releases hash them"
        )
        off = [s.name for s in (p, d) if compat_disabled(s.config)[0]]
        ev = f"{pair_label(ctx, p, d)}{said} [{src}]"
        unsure = all(a.factor == "vllm_version" and UNKNOWN in a.value + b.value for a, b in diff)
        if unsure:
            yield finding(
                "handshake-compat",
                ev + "; different images whose tags name no vLLM release: the hash differs if the "
                "releases inside them do (check both with `vllm --version` before the rollout)",
                severity=W,
            )
        elif off:
            yield finding(
                "handshake-compat",
                ev + f"; enforce_handshake_compat=false on {', '.join(off)}: the handshake is not "
                "refused, KV moves between incompatible layouts (wrong output, not an error)",
                severity=W,
            )
        else:
            yield finding("handshake-compat", ev + "; the decode refuses the prefill's handshake")
