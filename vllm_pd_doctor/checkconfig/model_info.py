"""Read a model's config.json: architectures and whether it has Mamba/SSM/GDN layers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vllm_pd_doctor.checkconfig.types import ModelInfo
from vllm_pd_doctor.errors import BadInput

HYBRID_ARCH_WORDS = (
    "mamba",
    "jamba",
    "zamba",
    "bamba",
    "falconh1",
    "nemotronh",
    "hybrid",
    "qwen3next",
    "qwen3_5",
    "qwen3.5",
    "plamo2",
    "lfm2",
    "minimaxtext01",
    "minimaxm1",
    "kimilinear",
    "granitemoehybrid",
    "rwkv",
    "recurrentgemma",
)
HYBRID_LAYER_WORDS = (
    "mamba",
    "ssm",
    "linear_attention",
    "linear",
    "gdn",
    "gated_delta",
    "deltanet",
    "conv",
    "recurrent",
    "short_conv",
)


def load_model(path: Path, *, what: str = "--model") -> ModelInfo:
    p = path.expanduser()
    if not p.exists():
        raise BadInput(
            f"{what} {path}: no such file or directory",
            hint="give a local model directory or its config.json",
        )
    cfg = p / "config.json" if p.is_dir() else p
    if not cfg.is_file():
        raise BadInput(
            f"{what} {path}: no config.json there",
            hint="give a local model directory holding config.json, or the file",
        )
    try:
        doc = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{what} {cfg}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{what} {cfg}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg.lower()}"
        ) from None
    if not isinstance(doc, dict):
        raise BadInput(f"{what} {cfg}: config.json is not a JSON object")
    return model_from_config(doc, str(cfg))


def model_from_config(doc: dict[str, Any], path: str) -> ModelInfo:
    sub = doc.get("text_config")
    archs_raw = doc.get("architectures") or []
    archs = tuple(str(a) for a in archs_raw) if isinstance(archs_raw, list) else ()
    mtype = doc.get("model_type")
    hybrid, evidence = _hybrid(doc)
    if not hybrid and isinstance(sub, dict):
        hybrid, evidence = _hybrid(sub)
        evidence = f"text_config: {evidence}" if hybrid else evidence
    dtype = doc.get("torch_dtype") or doc.get("dtype")
    return ModelInfo(
        path=path,
        architectures=archs,
        model_type=str(mtype) if mtype else None,
        hybrid=hybrid,
        hybrid_evidence=evidence,
        torch_dtype=str(dtype) if dtype else None,
    )


def _hybrid(doc: dict[str, Any]) -> tuple[bool, str]:
    for key in ("layer_types", "layers_block_type", "block_types", "attn_type_list", "layer_type_list"):
        v = doc.get(key)
        if isinstance(v, list) and v:
            kinds = {str(x).lower() for x in v}
            hits = sorted(
                k
                for k in kinds
                if any(w in k for w in HYBRID_LAYER_WORDS) and "sliding" not in k and k != "full"
            )
            if hits:
                return True, f"{key} has {', '.join(hits)} layers"
    pattern = doc.get("hybrid_override_pattern")
    if isinstance(pattern, str) and "M" in pattern:
        return True, f"hybrid_override_pattern {pattern[:24]!r} has Mamba (M) layers"
    for key in (
        "mamba_d_state",
        "ssm_state_size",
        "linear_num_value_heads",
        "mamba_n_heads",
        "conv_L_cache",
        "linear_conv_kernel_dim",
    ):
        if key in doc:
            return True, f"config has {key} (SSM/linear-attention state)"
    archs = doc.get("architectures") or []
    words = [str(a) for a in archs] + [str(doc.get("model_type") or "")]
    for a in words:
        low = a.lower().replace("-", "")
        for w in HYBRID_ARCH_WORDS:
            if w in low:
                return True, f"architecture {a} has Mamba/SSM/linear-attention layers"
    return False, "no Mamba/SSM/GDN layers in config.json"
