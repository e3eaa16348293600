"""The model family through the installed vLLM (tool side; vLLM is imported only in the child).

With `--python` (or `--vllm X`) the target interpreter's model registry says what the model's
architecture carries (`invllm/model_family.py`, run through `targetrun`); the answer is cached
per (vLLM install, config.json content, the target module's code) in pd-doctor's JSON fact
cache, so only the first check of a model on a release pays the import. Without a vLLM, or when
the registry does not know the architecture, `model_info`'s structural reading stands.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import jsoncache, targetrun
from vllm_pd_doctor.infra.errors import PdDoctorError
from vllm_pd_doctor.knowledge.readers.facts import ModelInfo, VllmSource

_KEEP = 64


def _file() -> Path:
    from vllm_pd_doctor.infra import envs

    return envs.home() / "check-config" / "model-family.json"


def _key(vsrc: VllmSource, config: Path) -> str | None:
    try:
        data = config.read_bytes()
        code = (targetrun.TARGET_DIR / "model_family.py").read_bytes()
    except OSError:
        return None
    return json.dumps(
        [
            vsrc.path,
            vsrc.version,
            hashlib.sha256(data).hexdigest(),
            hashlib.sha256(code).hexdigest()[:16],
        ]
    )


def cached(vsrc: VllmSource, config: Path) -> dict[str, Any] | None:
    """The cached answer, if this install was asked about this config.json before."""
    key = _key(vsrc, config)
    hit = jsoncache.load(_file()).get(key) if key else None
    return dict(hit) if isinstance(hit, dict) else None


def ask(python: str, vsrc: VllmSource, config: Path, *, timeout: float = 300.0) -> dict[str, Any]:
    """The registry's answer for config.json (cached); {"error": ...} when it cannot be had."""
    hit = cached(vsrc, config)
    if hit is not None:
        return hit
    key = _key(vsrc, config)
    try:
        run = targetrun.run_module(
            python,
            "model_family",
            ["--config", str(config.resolve())],
            timeout=timeout,
            what="the model-registry lookup",
        )
        answer = run.answer if isinstance(run.answer, dict) else {"error": "no JSON object"}
    except PdDoctorError as exc:
        return {"error": exc.message}
    if key and "error" not in answer:
        cache = jsoncache.load(_file())
        cache.pop(key, None)
        cache[key] = answer
        jsoncache.save(_file(), cache, keep=_KEEP)
    return answer


def apply(info: ModelInfo, answer: dict[str, Any], version: str | None) -> tuple[ModelInfo, str | None]:
    """`info` decided by the registry's answer; the second value is a note for the report when the
    registry could not decide (the structural reading then stands)."""
    if answer.get("error"):
        return info, f"the installed vLLM's model registry could not be asked ({answer['error']})"
    found = answer.get("found")
    if not isinstance(found, dict):
        archs = ", ".join(str(a) for a in answer.get("architectures") or []) or "none"
        return info, f"vLLM {version or '?'} does not register the architecture ({archs}); read config.json"
    stateful = bool(found.get("has_inner_state") or found.get("is_hybrid"))
    kinds = [
        name
        for name, key in (
            ("IsHybrid", "is_hybrid"),
            ("HasInnerState", "has_inner_state"),
            ("IsAttentionFree", "is_attention_free"),
        )
        if found.get(key)
    ]
    methods = [str(m) for m in found.get("state_methods") or []]
    what = ", ".join(kinds + methods) if (kinds or methods) else "no state interfaces"
    evidence = f"vLLM {version or '?'} registry: {found.get('architecture')} -> {found.get('class')} ({what})"
    return (
        replace(
            info, hybrid=stateful, hybrid_evidence=evidence, source=f"vLLM {version or '?'} model registry"
        ),
        None,
    )
