"""Read a model's config.json: does the model carry recurrent state (Mamba / SSM / linear attention /
short convolution layers), which is what the P-side N-1 truncation of vLLM #53514 is for?

Without the installed vLLM this reads the config's *structure*, not its architecture name: a
per-layer kind list with a kind that is neither attention nor MLP (`layer_types`,
`layers_block_type`, `block_types`, ...), a layer pattern string with Mamba layers
(`hybrid_override_pattern`), a sub-config that describes state layers (`linear_attn_config` with
its `kda_layers`), state geometry keys (`mamba_d_state`, `ssm_state_size`, `state_size` with
`conv_kernel`, `linear_conv_kernel_dim`, `conv_L_cache`, `attn_layer_period`), a MiniMax style
`attn_type_list` with linear (0) entries. The text model of a multimodal config (`text_config`,
`llm_config`, `language_config`) is read the same way. With `--python`, `model_family` asks the
installed vLLM's model registry instead (`checkconfig.core.check`), and this is the fallback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.readers.facts import ModelInfo

_SUB_CONFIGS = ("text_config", "llm_config", "language_config", "text_model_config")
"""Where multimodal / wrapper configs keep their language model."""
_ATTN_KIND = re.compile(r"attn|attention|^(full|sliding|swa|global|local|chunked|mla|gqa|mha|dsa)$")
_MLP_KIND = re.compile(r"mlp|moe|ffn|dense|expert|^-$|^e$")
_NOT_A_LAYER_LIST = re.compile(r"mlp|moe|expert|rope|indexer|vision|audio")
_STATE_SUBCONFIG = re.compile(r"linear_attn|ssm|mamba|recurren|short_conv")
_STATE_KEYS = re.compile(
    r"^(mamba_[a-z_]+|ssm_[a-z_]+|d_state|conv_l_cache|attn_layer_period|"
    r"linear_(conv_kernel_dim|num_value_heads|num_key_heads|key_head_dim|value_head_dim|state_size))$",
    re.I,
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
    return model_from_config(read_config(cfg, what=what), str(cfg))


def read_config(cfg: Path, *, what: str = "--model") -> dict[str, Any]:
    """config.json as a dict, or one clear BadInput."""
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
    return doc


def architectures(doc: dict[str, Any]) -> tuple[str, ...]:
    """The config's architectures (a wrapper's own first, then its text model's)."""
    out: list[str] = []
    for d in (doc, *(_subs(doc))):
        raw = d.get("architectures")
        if isinstance(raw, list):
            out.extend(str(a) for a in raw if isinstance(a, str))
    return tuple(dict.fromkeys(out))


def _subs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [doc[k] for k in _SUB_CONFIGS if isinstance(doc.get(k), dict)]


def model_from_config(doc: dict[str, Any], path: str) -> ModelInfo:
    mtype = doc.get("model_type")
    hybrid, evidence = False, "no Mamba/SSM/linear-attention layers in config.json"
    for where, d in [("", doc)] + [(f"{k}: ", doc[k]) for k in _SUB_CONFIGS if isinstance(doc.get(k), dict)]:
        found = state_layers(d)
        if found is not None:
            hybrid, evidence = True, where + found
            break
    dtype = doc.get("torch_dtype") or doc.get("dtype")
    return ModelInfo(
        path=path,
        architectures=architectures(doc),
        model_type=str(mtype) if mtype else None,
        hybrid=hybrid,
        hybrid_evidence=evidence,
        torch_dtype=str(dtype) if dtype else None,
        source="config.json structure",
    )


def _kind_is_state(kind: str) -> bool:
    k = kind.strip().lower()
    if not k or _MLP_KIND.search(k):
        return False
    return "linear" in k or not _ATTN_KIND.search(k)


def _layer_lists(doc: dict[str, Any]) -> str | None:
    for key, v in doc.items():
        low = key.lower()
        if not isinstance(v, list) or not v or _NOT_A_LAYER_LIST.search(low):
            continue
        named = ("layer" in low or "block" in low) and ("type" in low or "kind" in low)
        if named and all(isinstance(x, str) for x in v):
            hits = sorted({str(x) for x in v if _kind_is_state(str(x))})
            if hits:
                return f"{key} has {', '.join(hits)} layers"
        if low.startswith("attn_type") and all(isinstance(x, int) for x in v) and 0 in v:
            return f"{key} has linear-attention (0) layers"
    return None


def state_layers(doc: dict[str, Any]) -> str | None:
    """What in this (sub)config says it has state-carrying layers; None: nothing does."""
    found = _layer_lists(doc)
    if found:
        return found
    for key, v in doc.items():
        low = key.lower()
        if isinstance(v, str) and "pattern" in low and re.fullmatch(r"[A-Z*\-|]+", v) and "M" in v:
            return f"{key} {v[:24]!r} has Mamba (M) layers"
        if isinstance(v, dict) and _STATE_SUBCONFIG.search(low):
            layers = [k for k, x in v.items() if isinstance(x, list) and x and "full" not in k.lower()]
            what = f" ({', '.join(layers)})" if layers else ""
            return f"{key}{what} describes state-carrying layers"
    keys = [k for k in doc if _STATE_KEYS.match(k)]
    if keys:
        return f"config has {', '.join(sorted(keys)[:3])} (SSM/linear-attention state)"
    if "state_size" in doc and any(k in doc for k in ("conv_kernel", "d_conv")):
        return "config has state_size and conv_kernel (an SSM model)"
    return None
